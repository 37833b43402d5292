#pragma once
// The GPU probes as a module that kvscope loads at run time (libkvscope_gpu_probes.so, built
// beside the executable in CUDA builds whose toolkit has CUPTI), so that kvscope itself links
// nothing of CUPTI and still starts where CUPTI's libraries are missing: then the probes are off,
// said once, as when there is no GPU.
//
// The module and the binary loading it come from one build: the entry point passes C++ objects
// (GpuProbeOptions in, GpuProbeStart out), and kGpuProbesModuleAbi guards against a module left
// over from another build.

#include <string>

#include "probes/gpu_probes.h"

namespace kvscope {

// Bumped whenever GpuProbeOptions, GpuProbeStart or GpuProbes change shape.
constexpr int kGpuProbesModuleAbi = 1;
constexpr const char* kGpuProbesModuleFile = "libkvscope_gpu_probes.so";

// The module's two entry points (extern "C", looked up by name).
using GpuProbesModuleAbiFn = int (*)();
using GpuProbesModuleStartFn = void (*)(const GpuProbeOptions* options, GpuProbeStart* out);
constexpr const char* kGpuProbesModuleAbiSymbol = "kvscope_gpu_probes_abi";
constexpr const char* kGpuProbesModuleStartSymbol = "kvscope_gpu_probes_start";

// Loads the module from `dir` (dlopen keeps one copy per process; it is never unloaded: probes it
// made may live until exit) and starts what `options` asks for. A module that cannot be loaded, or
// is from another build, is a note ("GPU probes off: ..."), as a missing device is.
GpuProbeStart load_gpu_probes(const GpuProbeOptions& options, const std::string& dir);

}  // namespace kvscope
