#pragma once
// The GPU probes as the CUDA engine backend uses them: CUPTI's activity trace (every kernel,
// memcpy and memset, attributed to the step, op and layer that launched it) and PM sampling of the
// DRAM bytes read and written, on a thread that drains the hardware buffer while the engine runs.
// They arrive as `kernel` and `hbm_sample` events.
//
// This header is CUPTI-free; the definitions are in the kvscope_probes_cupti library
// (probes/cupti_probes.cpp), built only with CUDA. Run on an H200: see probes/README.md.
//
//   GpuProbeStart started = start_gpu_probes(options);
//   for (const std::string& note : started.notes) say(note);  // once: what is off, and why
//   GpuProbes* gpu = started.probes.get();                     // null: nothing to trace
//   int32_t qkv = gpu ? gpu->op("qkv") : -1;
//   per step: { GpuOpScope s(gpu ? gpu->correlation() : nullptr, step, qkv, layer); launch; }
//             synchronize; if (gpu) gpu->collect(step, events); reporter.emit_all(events);
//   at the end: gpu->stop(events);

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "probes/event.h"
#include "probes/gpu_correlator.h"
#include "probes/gpu_scope.h"

namespace kvscope {

struct GpuProbeOptions {
    int device = 0;        // CUDA device ordinal
    bool activity = true;  // trace kernels, memcpys and memsets
    bool sampling = true;  // sample DRAM bytes read and written
    int64_t sample_interval_ns = 100'000;
    // How often the drain thread empties the hardware buffer; also how late a sample can be.
    int32_t drain_interval_ms = 10;
    // Device memory CUPTI fills with raw samples between drains (a 100 us sample of two metrics
    // takes well under a KiB: tens of seconds of slack).
    size_t hardware_buffer_bytes = size_t{64} << 20;
    // Samples decoded per pass over the buffer; more simply take another pass.
    uint32_t samples_per_decode = 1000;
    // How often collect() measures the GPU timer against the host clock again, ms (it drifts).
    int32_t clock_refresh_ms = 1000;
};

// An interface, so that what calls it (the CUDA engine backend) links nothing of CUPTI: only the
// binary that starts the probes does.
class GpuProbes {
  public:
    virtual ~GpuProbes() = default;  // stops both, dropping what was not collected

    // The id of an op name for scopes (GpuOpNames::id); -1 for an invalid name.
    virtual int32_t op(std::string_view name) = 0;
    // Where GpuOpScope pushes: null when the activity trace is off (a scope is then one branch).
    virtual GpuCorrelation* correlation() = 0;

    // At the end of a step, after its work has been synchronized: flushes CUPTI's buffers and
    // appends the step's GPU work and the samples read so far (GpuCorrelator::take).
    virtual void collect(int64_t step, std::vector<Event>& out) = 0;
    // Stops tracing and sampling and appends everything still held. Idempotent.
    virtual void stop(std::vector<Event>& out) = 0;

    virtual bool tracing() const = 0;
    virtual bool sampling() const = 0;
    virtual GpuEventCounts counts() const = 0;
    // CUPTI's records lost for want of buffer space, and PM sampler failures met while running
    // (each said once by whoever reads them; empty when none).
    virtual std::vector<std::string> problems() const = 0;
};

struct GpuProbeStart {
    std::unique_ptr<GpuProbes> probes;  // null when neither part started
    // One line per part that is off and why ("GPU probes off: no CUDA device: ...", "HBM
    // sampling off: CUPTI_ERROR_INSUFFICIENT_PRIVILEGES: ..."). The caller says each once; the
    // run goes on without that part.
    std::vector<std::string> notes;
};

// Starts what `options` asks for on `options.device`. Never fails the run: what cannot start is
// a note. One GpuProbes per process at a time (CUPTI's activity API is process-wide).
GpuProbeStart start_gpu_probes(const GpuProbeOptions& options = {});

}  // namespace kvscope
