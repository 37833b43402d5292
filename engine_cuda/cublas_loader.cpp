#include "engine_cuda/cublas_loader.h"

#include <dlfcn.h>

#include <string>
#include <type_traits>

#ifndef KVSCOPE_CUBLAS_LIBRARY
#error "KVSCOPE_CUBLAS_LIBRARY (libcublas.so.<major>) comes from engine_cuda/CMakeLists.txt"
#endif

namespace kvscope::gpu {

namespace {
struct Loaded {
    Cublas api;
    std::string error;
};

Loaded load() {
    Loaded l;
    // Never closed: the handles made from it live until exit.
    void* lib = dlopen(KVSCOPE_CUBLAS_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    // Where the toolkit installs it, when its folder is not on the loader's path.
    if (!lib) lib = dlopen("/usr/local/cuda/lib64/" KVSCOPE_CUBLAS_LIBRARY, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        const char* why = dlerror();
        l.error = std::string("cannot load ") + KVSCOPE_CUBLAS_LIBRARY + " (" +
                  (why ? why : "not found") +
                  "): install the CUDA toolkit's cuBLAS or add its folder to LD_LIBRARY_PATH";
        return l;
    }
    auto get = [&](auto& fn, const char* name) {
        fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
        if (!fn && l.error.empty())
            l.error = std::string(KVSCOPE_CUBLAS_LIBRARY) + " has no " + name +
                      ": it is not the cuBLAS this build was compiled against";
    };
    get(l.api.create, "cublasCreate_v2");
    get(l.api.destroy, "cublasDestroy_v2");
    get(l.api.set_stream, "cublasSetStream_v2");
    get(l.api.gemm_ex, "cublasGemmEx");
    get(l.api.status_string, "cublasGetStatusString");
    l.api.set_workspace =
        reinterpret_cast<decltype(l.api.set_workspace)>(dlsym(lib, "cublasSetWorkspace_v2"));
    return l;
}
}  // namespace

Result<const Cublas*> load_cublas() {
    static const Loaded loaded = load();
    if (!loaded.error.empty()) return Error{loaded.error};
    return &loaded.api;
}

Status cublas_status(const Cublas& cublas, cublasStatus_t s, const char* what) {
    if (s == CUBLAS_STATUS_SUCCESS) return {};
    return Error{std::string("cuBLAS: ") + what + ": " + cublas.status_string(s)};
}

}  // namespace kvscope::gpu
