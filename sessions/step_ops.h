#pragma once
// A step's ops as the Kernels panel, inspect and export show them: each `kernel` event of the
// step as a record, and the roofline per op kind (time, bytes, flops summed over a step's ops of
// one name: arithmetic intensity, achieved GB/s and GFLOP/s).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "probes/event.h"

namespace kvscope {

struct OpRecord {
    std::string name;
    int32_t layer = -1;    // -1: not one layer's
    int32_t threads = 0;   // CPU threads the op ran on
    int32_t lane = 0;      // 0: the host; otherwise the GPU stream it ran on
    int64_t start_ns = 0;  // host clock
    int64_t end_ns = 0;
    KernelCost cost;
    bool cost_known = false;  // payload present and well formed
    double seconds() const { return static_cast<double>(end_ns - start_ns) * 1e-9; }
    double gbps() const {
        return seconds() > 0 ? static_cast<double>(cost.bytes()) / seconds() / 1e9 : 0.0;
    }
};

// The kernel events among `events`, in the order they were reported.
std::vector<OpRecord> ops_of(const std::vector<Event>& events);
// Of `ops`, those that ran on the host (lane 0) or on a GPU (any other lane: a stream).
std::vector<OpRecord> host_ops(const std::vector<OpRecord>& ops);
std::vector<OpRecord> gpu_ops(const std::vector<OpRecord>& ops);

// One hbm_sample event: the DRAM bytes a GPU read and wrote between two host-clock times.
struct HbmSampleRecord {
    int64_t start_ns = 0, end_ns = 0;
    int64_t read = 0, written = 0;  // both 0 when the split did not decode
    double total = 0;               // the event's value: read + written
    double gbps() const {
        return end_ns > start_ns ? total / static_cast<double>(end_ns - start_ns) : 0.0;
    }
};
// The hbm_sample events among `events`, in the order they were reported.
std::vector<HbmSampleRecord> hbm_samples_of(const std::vector<Event>& events);

struct OpKindTotals {
    std::string name;
    int32_t count = 0;
    int64_t ns = 0;
    KernelCost cost;
    double gbps() const { return ns > 0 ? static_cast<double>(cost.bytes()) / ns : 0.0; }
    double gflops() const { return ns > 0 ? static_cast<double>(cost.flops) / ns : 0.0; }
    // Flops per byte moved (0 for ops that compute nothing).
    double intensity() const {
        return cost.bytes() > 0 ? static_cast<double>(cost.flops) / cost.bytes() : 0.0;
    }
};

// Per layer, from the start of its first op to the end of its last (ops of no layer left out).
std::map<int32_t, std::pair<int64_t, int64_t>> layer_spans(const std::vector<OpRecord>& ops);

// One row per op name, in order of first appearance.
std::vector<OpKindTotals> totals_by_kind(const std::vector<OpRecord>& ops);

struct RunInfo;

// What `inspect --step N --json` adds for a step, from its events: ops (name, layer, start_ns,
// end_ns, bytes, and the split), bytes_moved and its split, step / ops / other seconds,
// bandwidth_gbps, bandwidth_limit_gbps (0 when the recording machine's is unknown) and its
// fraction, and the roofline per op kind.
nlohmann::json step_ops_json(const std::vector<Event>& step_events, const RunInfo& info);

}  // namespace kvscope
