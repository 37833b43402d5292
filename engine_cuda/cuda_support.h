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

// Device memory (cudaMalloc), freed with the object; empty until allocate().
class DeviceMemory {
  public:
    DeviceMemory() = default;
    ~DeviceMemory() { reset(); }
    DeviceMemory(DeviceMemory&& o) noexcept
        : p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
    DeviceMemory& operator=(DeviceMemory&& o) noexcept {
        if (this != &o) {
            reset();
            p_ = std::exchange(o.p_, nullptr);
            bytes_ = std::exchange(o.bytes_, 0);
        }
        return *this;
    }
    DeviceMemory(const DeviceMemory&) = delete;
    DeviceMemory& operator=(const DeviceMemory&) = delete;

    Status allocate(size_t bytes, const std::string& what) {
        reset();
        if (bytes == 0) return {};
        cudaError_t e = cudaMalloc(&p_, bytes);
        if (e != cudaSuccess) {
            p_ = nullptr;
            cudaGetLastError();  // not sticky: clear it for the next call
            if (e == cudaErrorMemoryAllocation)
                return Error{"CUDA: out of device memory for " + what + " (" +
                             std::to_string(bytes >> 20) + " MiB)"};
            return cuda_status(e, "allocating " + what);
        }
        bytes_ = bytes;
        return {};
    }
    // Grows (never shrinks) to at least `bytes`; the contents are lost when it grows.
    Status reserve(size_t bytes, const std::string& what) {
        return bytes <= bytes_ ? Status{} : allocate(bytes, what);
    }
    void reset() {
        if (p_) cudaFree(p_);
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

// Page-locked host memory (cudaMallocHost), so copies to and from the device are DMA.
class PinnedMemory {
  public:
    PinnedMemory() = default;
    ~PinnedMemory() { reset(); }
    PinnedMemory(const PinnedMemory&) = delete;
    PinnedMemory& operator=(const PinnedMemory&) = delete;

    Status reserve(size_t bytes, const std::string& what) {
        if (bytes <= bytes_) return {};
        reset();
        cudaError_t e = cudaMallocHost(&p_, bytes);
        if (e != cudaSuccess) {
            p_ = nullptr;
            cudaGetLastError();
            return cuda_status(e, "allocating pinned host memory for " + what);
        }
        bytes_ = bytes;
        return {};
    }
    void reset() {
        if (p_) cudaFreeHost(p_);
        p_ = nullptr;
        bytes_ = 0;
    }
    template <class T>
    T* as() const {
        return static_cast<T*>(p_);
    }
    size_t bytes() const { return bytes_; }

  private:
    void* p_ = nullptr;
    size_t bytes_ = 0;
};

}  // namespace kvscope::gpu
