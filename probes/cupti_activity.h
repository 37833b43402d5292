#pragma once
// CUPTI's Activity API: every kernel, memcpy and memset the GPU runs, and the external correlation
// records that tie each launch to the scope open when it was made (probes/gpu_scope.h). Records
// are copied out of CUPTI's buffers into plain structs and handed to a GpuCorrelator, on CUPTI's
// thread or on the one that flushes.
//
// CUPTI emits an external correlation record only alongside a CUDA API record, so the runtime and
// driver API records are enabled too (and dropped once read). The activity API is process-wide:
// one tracer at a time. Part of kvscope_probes_cupti; this header is CUPTI-free.

#include <memory>

#include "base/result.h"
#include "probes/gpu_correlator.h"
#include "probes/gpu_events.h"
#include "probes/gpu_scope.h"

namespace kvscope {

class CuptiActivity : public GpuCorrelation {
  public:
    // Enables tracing into `sink` (which must outlive it). The error is one line: what failed and
    // what to do (cupti_failure).
    static Result<std::unique_ptr<CuptiActivity>> start(GpuCorrelator* sink);
    ~CuptiActivity() override;  // stop()

    // The engine thread's scopes: CUPTI keeps one stack per thread.
    void push(uint64_t external_id) override;
    void pop() override;

    // Hands every completed buffer to the sink (records of work not finished yet stay behind;
    // synchronize first to get all of it).
    Status flush();
    // Flushes everything, finished or not, and disables tracing. Idempotent.
    Status stop();

    // CUPTI's clock against the host's steady clock, from a few back-to-back readings.
    ClockOffset measure_clock() const;
    // Records CUPTI dropped for want of buffer space since start.
    uint64_t dropped() const;

  private:
    CuptiActivity() = default;
    bool stopped_ = false;
};

}  // namespace kvscope
