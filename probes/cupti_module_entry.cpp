// The entry points of libkvscope_gpu_probes.so (probes/gpu_probes_module.h): only this module
// includes them; the static library the tests link does not.
#include "probes/gpu_probes_module.h"

extern "C" {

__attribute__((visibility("default"))) int kvscope_gpu_probes_abi() {
    return kvscope::kGpuProbesModuleAbi;
}

__attribute__((visibility("default"))) void kvscope_gpu_probes_start(
    const kvscope::GpuProbeOptions* options, kvscope::GpuProbeStart* out) {
    *out = kvscope::start_gpu_probes(*options);
}

}  // extern "C"
