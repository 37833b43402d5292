#pragma once
// What the CUDA backend's files share: CUDA errors as Status, and device and pinned host memory
// that frees itself.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <string>
#include <utility>

#include "base/result.h"

namespace kvscope::gpu {

// "CUDA: <what>: <the runtime's message> (<its name>)", or success.
inline Status cuda_status(cudaError_t e, const std::string& what) {
    if (e == cudaSuccess) return {};
    return Error{"CUDA: " + what + ": " + cudaGetErrorString(e) + " (" + cudaGetErrorName(e) + ")"};
}

// Device memory (cudaMalloc) and page-locked host memory (cudaMallocHost, so copies to and from
// the device are DMA).
struct DeviceAllocator {
    static cudaError_t allocate(void** p, size_t bytes) { return cudaMalloc(p, bytes); }
    static void free(void* p) { cudaFree(p); }
    static constexpr const char* kWhere = "device memory";
};
struct PinnedAllocator {
    static cudaError_t allocate(void** p, size_t bytes) { return cudaMallocHost(p, bytes); }
    static void free(void* p) { cudaFreeHost(p); }
    static constexpr const char* kWhere = "pinned host memory";
};

// Memory from `Allocator`, freed with the object; empty until allocate().
template <class Allocator>
class CudaMemory {
  public:
    CudaMemory() = default;
    ~CudaMemory() { reset(); }
    CudaMemory(CudaMemory&& o) noexcept
        : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
    CudaMemory& operator=(CudaMemory&& o) noexcept {
        if (this != &o) {
            reset();
            p_ = std::exchange(o.p_, nullptr);
            bytes_ = std::exchange(o.bytes_, 0);
        }
        return *this;
    }
    CudaMemory(const CudaMemory&) = delete;
    CudaMemory& operator=(const CudaMemory&) = delete;

    Status allocate(size_t bytes, const std::string& what) {
        reset();
        if (bytes == 0) return {};
        cudaError_t e = Allocator::allocate(&p_, bytes);
        if (e != cudaSuccess) {
            p_ = nullptr;
            cudaGetLastError();  // not sticky: clear it for the next call
            if (e == cudaErrorMemoryAllocation)
                return Error{std::string("CUDA: out of ") + Allocator::kWhere + " for " + what +
                             " (" + std::to_string(bytes >> 20) + " MiB)"};
            return cuda_status(e, std::string("allocating ") + Allocator::kWhere + " for " + what);
        }
        bytes_ = bytes;
        return {};
    }
    // Grows (never shrinks) to at least `bytes`; the contents are lost when it grows.
    Status reserve(size_t bytes, const std::string& what) {
        return bytes <= bytes_ ? Status{} : allocate(bytes, what);
    }
    void reset() {
        if (p_) Allocator::free(p_);
        p_ = nullptr;
        bytes_ = 0;
    }
    void* get() const { return p_; }
    template <class T>
    T* as() const {
        return static_cast<T*>(p_);
    }
    size_t bytes() const { return bytes_; }

  private:
    void* p_ = nullptr;
    size_t bytes_ = 0;
};
using DeviceMemory = CudaMemory<DeviceAllocator>;
using PinnedMemory = CudaMemory<PinnedAllocator>;

}  // namespace kvscope::gpu
