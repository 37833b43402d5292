#pragma once
// --backend cpu|cuda on every command that runs the engine (generate, run, eval, perplexity,
// bench cpu, gui), and what `cuda` means in this build on this machine.

#include <CLI/CLI.hpp>
#include <string>

#include "engine/forward.h"

namespace kvscope::app {

enum class Backend { kCpu, kCuda };

void add_backend_flag(CLI::App& sub, Backend& backend);

// 0 when `backend` can run here. Otherwise prints one line saying why and returns 1: a build
// without CUDA, or no usable device (cudaGetDeviceCount's reason). Commands call it before
// looking at their other inputs; what only the model can tell (it does not fit the device, a
// setting the CUDA backend refuses) fails later, when the engine is made.
int check_backend(Backend backend);

// What EngineOptions::backend should hold for `backend`: null for the CPU, the CUDA backend
// (engine_cuda/cuda_forward.h) in builds that have it. `gpu_probes`: the run's events are
// recorded or shown, so the CUDA backend traces its kernels and samples DRAM bandwidth
// (probes/gpu_probes_module.h; what cannot start is said once and the run goes on).
ForwardFactory backend_factory(Backend backend, bool gpu_probes = false);

// Whether this build has the CUDA kernels (configured with KVSCOPE_CUDA on and a toolkit).
bool build_has_cuda();
// The one line a command that needs CUDA prints in a build without it, after "<what>: ".
inline constexpr const char* kNoCudaBuild =
    "this build has no CUDA backend (configure with -DKVSCOPE_CUDA=ON)";

}  // namespace kvscope::app
