#pragma once
// The GPU's global timer (the clock CUPTI stamps PM samples with) against the host's steady
// clock: a one-thread kernel reads the timer between two host readings, a few times over, and the
// tightest bracket gives the offset. Part of kvscope_probes_cupti (gpu_clock.cu); plain C++ here,
// so that callers need no CUDA header.

#include <memory>

#include "base/result.h"
#include "probes/gpu_events.h"

namespace kvscope {

class GpuTimerClock {
  public:
    // A stream of its own on `device` and a pinned word for the kernel to write, kept so that
    // measuring again (the clocks drift apart) allocates and synchronizes nothing else.
    static Result<std::unique_ptr<GpuTimerClock>> create(int device);
    ~GpuTimerClock();
    GpuTimerClock(const GpuTimerClock&) = delete;
    GpuTimerClock& operator=(const GpuTimerClock&) = delete;

    // The engine's work is not waited for, but a busy GPU widens the brackets: measure after a
    // synchronize. Leaves the calling thread's current device as it was. The kernel is
    // kClockProbeKernel, which the correlator drops from the activity trace.
    Result<ClockOffset> measure(int readings = 8);

  private:
    GpuTimerClock() = default;
    int device_ = 0;
    void* stream_ = nullptr;              // cudaStream_t
    unsigned long long* word_ = nullptr;  // pinned host memory the kernel writes
};

}  // namespace kvscope
