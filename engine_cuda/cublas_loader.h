#pragma once
// cuBLAS, loaded when the CUDA backend first starts rather than linked: the kernels link the
// CUDA runtime statically so that a CUDA build of kvscope still starts (and runs on the CPU) on
// a machine without any CUDA library, and a linked libcublas would end that. cuBLAS is a
// shared library only (the static one is not shipped everywhere and would add hundreds of MB).

#include <cublas_api.h>

#include "base/result.h"

namespace kvscope::gpu {

// The cuBLAS entry points the backend calls.
struct Cublas {
    decltype(&cublasCreate_v2) create = nullptr;
    decltype(&cublasDestroy_v2) destroy = nullptr;
    decltype(&cublasSetStream_v2) set_stream = nullptr;
    // Spelled out: C++ sees cublasGemmEx overloaded (an inline wrapper for old code).
    cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                              const void*, const void*, cudaDataType, int, const void*,
                              cudaDataType, int, const void*, void*, cudaDataType, int,
                              cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
    decltype(&cublasGetStatusString) status_string = nullptr;
    // Optional (null where the library lacks it): a workspace of the caller's.
    decltype(&cublasSetWorkspace_v2) set_workspace = nullptr;
};

// Loads libcublas.so.<the toolkit's major version> once (dlopen, so LD_LIBRARY_PATH and the
// system's library path are searched); the error names the library and how to make it found.
Result<const Cublas*> load_cublas();

// "cuBLAS: <what>: <its message>", or success.
Status cublas_status(const Cublas& cublas, cublasStatus_t s, const char* what);

}  // namespace kvscope::gpu
