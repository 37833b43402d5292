#pragma once
// Puts the GPU's records together into events, in the order a session records them. CUPTI hands
// over activity buffers on its own thread (or on the thread that flushes), the PM sampler hands
// over samples on its drain thread, and the engine takes events on its own: every call is
// thread-safe.
//
// The engine records a step's events together (sessions/recorder.h writes one row per step), so
// the GPU's records must be taken at the end of the step that launched them, after its work is
// synchronized and CUPTI flushed: take(step) hands over the kernels of that step and earlier, every
// kernel no scope claimed, and every sample read so far; it holds back the kernels of later steps
// (launched ahead, as a pipelined backend would). A kernel's step comes from its launch's external
// correlation id; records and the links that attribute them arrive in any order and across
// flushes, and links are kept for a step after their own so that a straggler still finds its
// step.

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "probes/gpu_events.h"
#include "probes/gpu_scope.h"

namespace kvscope {

struct GpuEventCounts {
    uint64_t kernels = 0, copies = 0, sets = 0;  // handed over, each kind
    uint64_t samples = 0;                        // hbm samples handed over
    // GPU work no scope claimed (launched outside any op).
    uint64_t unattributed = 0;
    // Work of a step already taken when it arrived: handed over with a later step.
    uint64_t late = 0;
    // Records CUPTI could not time (dropped).
    uint64_t untimed = 0;
    // Samples that started more than an interval after the one before ended (samples lost).
    uint64_t sample_gaps = 0;
};

class GpuCorrelator {
  public:
    // `ops` names the op ids scopes carry; it must outlive the correlator.
    explicit GpuCorrelator(const GpuOpNames* ops) : ops_(ops) {}

    void set_activity_clock(const ClockOffset& clock);
    void set_sampling_clock(const ClockOffset& clock);
    // Two samples further apart than this (ns) count as a gap; 0: never.
    void set_sample_interval(int64_t interval_ns);

    void add_links(const std::vector<GpuScopeLink>& links);
    void add_activities(std::vector<GpuActivity>&& activities);
    void add_samples(const std::vector<PmSample>& samples);

    // Appends what is ready at the end of `step` to `out`, by start time: kernel events carry the
    // step they were launched in (-1: none claimed them), hbm_sample events `step`. The engine's
    // Reporter stamps them with the current step as it emits them.
    void take(int64_t step, std::vector<Event>& out);
    // Everything still held, whatever its step (the end of a run).
    void take_all(std::vector<Event>& out);

    GpuEventCounts counts() const;

  private:
    struct Held {
        GpuActivity activity;
        GpuScopeKey scope;
        bool resolved = false;
    };
    void resolve_locked(Held& h);
    void release_locked(int64_t step, bool everything, std::vector<Event>& out);
    const std::string& display_name_locked(const std::string& mangled);

    const GpuOpNames* ops_;
    mutable std::mutex mutex_;
    ClockOffset activity_clock_, sampling_clock_;
    int64_t sample_interval_ns_ = 0;
    std::unordered_map<uint32_t, uint64_t> links_;  // correlation id -> external id
    std::vector<Held> held_;
    std::vector<PmSample> samples_;
    std::unordered_map<std::string, std::string> display_names_;
    int64_t taken_through_ = -1;  // the last step taken; -1 before the first
    bool any_taken_ = false;
    uint64_t last_sample_end_ = 0;
    GpuEventCounts counts_;
};

}  // namespace kvscope
