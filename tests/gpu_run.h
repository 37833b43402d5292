#pragma once
// A recorded session with a GPU's work in it, for the tests of what reads sessions (export,
// inspect, the window) while no GPU session exists: the GpuCorrelator puts hand-built
// CUPTI-like records together, the engine's Reporter stamps them as the CUDA backend will, and a
// real Recorder writes them.
//
// Two steps. Each: step_begin, a host op ("qkv", lane 0), the GPU's work (two swiglu kernels
// under "qkv" scopes on stream 7, a "swap_in" copy on stream 13, DRAM samples), step_end.
// Step 1's samples end in a gap and include one of no length.

#include <cstdint>
#include <string>
#include <vector>

#include "probes/gpu_events.h"

namespace kvscope::test {

struct GpuRun {
    std::string path;
    int64_t base = 0;  // host ns of the first GPU record
    std::vector<PmSample> samples;
};

GpuRun record_gpu_run();

}  // namespace kvscope::test
