#pragma once
// --backend cpu|cuda on every command that runs the engine (generate, run, eval, perplexity,
// bench cpu, gui), and what `cuda` means in this build on this machine.

#include <CLI/CLI.hpp>
#include <string>

#include "engine/forward.h"
#include "engine/reporter.h"

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
// At the end of a recorded run: stops the GPU probes, if a backend_factory started them, and
// hands what they still held (the last step's DRAM samples, which arrive after it) to
// `reporter`; says on stderr what they lost. The probes stay off for the rest of the process.
void finish_gpu_probes(const Reporter& reporter);

// Whether this build has the CUDA kernels (configured with KVSCOPE_CUDA on and a toolkit).
bool build_has_cuda();
// The one line a command that needs CUDA prints in a build without it, after "<what>: ".
inline constexpr const char* kNoCudaBuild =
    "this build has no CUDA backend (configure with -DKVSCOPE_CUDA=ON)";

}  // namespace kvscope::app
