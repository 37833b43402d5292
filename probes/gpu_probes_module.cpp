#include "probes/gpu_probes_module.h"

#include <dlfcn.h>

#include <mutex>

namespace kvscope {

GpuProbeStart load_gpu_probes(const GpuProbeOptions& options, const std::string& dir) {
    static std::mutex mutex;
    std::lock_guard lock(mutex);
    GpuProbeStart result;
    const std::string path = (dir.empty() ? std::string(".") : dir) + "/" + kGpuProbesModuleFile;
    // RTLD_LOCAL: the module's static CUDA runtime and CUPTI stay its own.
    void* module = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!module) {
        const char* why = dlerror();
        result.notes.push_back("GPU probes off: cannot load " + path + ": " +
                               (why ? why : "unknown error"));
        return result;
    }
    auto abi = reinterpret_cast<GpuProbesModuleAbiFn>(dlsym(module, kGpuProbesModuleAbiSymbol));
    auto start =
        reinterpret_cast<GpuProbesModuleStartFn>(dlsym(module, kGpuProbesModuleStartSymbol));
    if (!abi || !start) {
        result.notes.push_back("GPU probes off: " + path + " is not kvscope's GPU probe module");
        return result;
    }
    if (const int got = abi(); got != kGpuProbesModuleAbi) {
        result.notes.push_back("GPU probes off: " + path +
                               " is from another build of kvscope (ABI " + std::to_string(got) +
                               ", this one " + std::to_string(kGpuProbesModuleAbi) +
                               "); rebuild it");
        return result;
    }
    start(&options, &result);
    return result;
}

}  // namespace kvscope
