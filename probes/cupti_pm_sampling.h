#pragma once
// CUPTI PM sampling of the DRAM bytes the GPU reads and writes (dram__bytes_read.sum,
// dram__bytes_write.sum), every interval of GPU time, into a hardware buffer that a thread of
// ours drains while the engine runs: it decodes what the buffer holds, evaluates each completed
// sample and hands it to a GpuCorrelator, every drain interval. Part of kvscope_probes_cupti; this
// header is CUPTI-free.

#include <cstdint>
#include <memory>
#include <string>

#include "base/result.h"
#include "probes/gpu_correlator.h"

namespace kvscope {

struct PmSamplingOptions {
    int device = 0;
    int64_t interval_ns = 100'000;
    int32_t drain_interval_ms = 10;
    size_t hardware_buffer_bytes = size_t{64} << 20;
    uint32_t samples_per_decode = 1000;
};

class CuptiPmSampler {
  public:
    // Configures and starts sampling and the drain thread. The error is one line saying what
    // failed and what to do: no permission for the counters, a GPU or setup that cannot sample
    // (and why, as CUPTI tells it), metrics this chip does not have in one pass.
    static Result<std::unique_ptr<CuptiPmSampler>> start(const PmSamplingOptions& options,
                                                         GpuCorrelator* sink);
    ~CuptiPmSampler();  // stop()

    // Stops sampling, drains the buffer to the end, joins the thread, releases CUPTI's objects.
    // Idempotent.
    void stop();

    const std::string& chip() const;  // "GH100"
    // The first failure the drain thread met ("" while none): sampling stopped there.
    std::string problem() const;
    // Drains that found the hardware buffer had overflowed (the oldest samples lost).
    uint64_t overflows() const;

    struct State;

  private:
    explicit CuptiPmSampler(std::unique_ptr<State> state);
    std::unique_ptr<State> state_;
};

}  // namespace kvscope
