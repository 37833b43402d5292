#include <cuda_runtime.h>

#include "kernels/device_info.h"

namespace kvscope::kernels {

namespace {
std::string error_text(cudaError_t e) {
    return std::string(cudaGetErrorString(e)) + " (" + cudaGetErrorName(e) + ")";
}
}  // namespace

DeviceQuery query_devices() {
    DeviceQuery q;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        q.error = error_text(e);
        cudaGetLastError();  // a failed query is not an error for later calls
        return q;
    }
    if (count == 0) {
        q.error = "no CUDA-capable device is detected";
        return q;
    }
    for (int i = 0; i < count; ++i) {
        DeviceInfo d;
        d.index = i;
        cudaDeviceProp prop{};
        if ((e = cudaGetDeviceProperties(&prop, i)) != cudaSuccess) {
            q.error = "device " + std::to_string(i) + ": " + error_text(e);
            continue;
        }
        d.name = prop.name;
        d.cc_major = prop.major;
        d.cc_minor = prop.minor;
        d.sm_count = prop.multiProcessorCount;
        d.total_bytes = static_cast<int64_t>(prop.totalGlobalMem);
        cudaDeviceGetAttribute(&d.memory_clock_khz, cudaDevAttrMemoryClockRate, i);
        cudaDeviceGetAttribute(&d.bus_width_bits, cudaDevAttrGlobalMemoryBusWidth, i);
        int previous = 0;
        cudaGetDevice(&previous);
        size_t free_bytes = 0, total = 0;
        if (cudaSetDevice(i) == cudaSuccess && cudaMemGetInfo(&free_bytes, &total) == cudaSuccess)
            d.free_bytes = static_cast<int64_t>(free_bytes);
        cudaSetDevice(previous);
        cudaGetLastError();
        q.devices.push_back(d);
    }
    return q;
}

CopyBandwidth measure_copy_bandwidth(int device, int64_t bytes, int passes) {
    CopyBandwidth r;
    r.bytes = bytes;
    r.passes = passes;
    if (bytes <= 0 || passes <= 0) {
        r.error = "nothing to measure";
        return r;
    }
    void *src = nullptr, *dst = nullptr;
    cudaEvent_t start = nullptr, stop = nullptr;
    auto fail = [&](const char* what, cudaError_t e) {
        r.error = std::string(what) + ": " + error_text(e);
        cudaGetLastError();
    };
    cudaError_t e;
    if ((e = cudaSetDevice(device)) != cudaSuccess) {
        fail("cudaSetDevice", e);
        return r;
    }
    const auto n = static_cast<size_t>(bytes);
    if ((e = cudaMalloc(&src, n)) != cudaSuccess || (e = cudaMalloc(&dst, n)) != cudaSuccess) {
        fail("cudaMalloc", e);
    } else if ((e = cudaEventCreate(&start)) != cudaSuccess ||
               (e = cudaEventCreate(&stop)) != cudaSuccess) {
        fail("cudaEventCreate", e);
    } else if ((e = cudaMemset(src, 1, n)) != cudaSuccess ||
               (e = cudaMemcpy(dst, src, n, cudaMemcpyDeviceToDevice)) != cudaSuccess) {
        fail("warm-up copy", e);
    } else {
        float best_ms = 0;
        for (int i = 0; i < passes; ++i) {
            float ms = 0;
            if ((e = cudaEventRecord(start)) != cudaSuccess ||
                (e = cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice)) != cudaSuccess ||
                (e = cudaEventRecord(stop)) != cudaSuccess ||
                (e = cudaEventSynchronize(stop)) != cudaSuccess ||
                (e = cudaEventElapsedTime(&ms, start, stop)) != cudaSuccess) {
                fail("timed copy", e);
                break;
            }
            if (i == 0 || ms < best_ms) best_ms = ms;
        }
        if (r.error.empty() && best_ms > 0) {
            r.seconds = best_ms / 1e3;
            r.gbps = 2.0 * static_cast<double>(bytes) / r.seconds / 1e9;
        }
    }
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
    if (src) cudaFree(src);
    if (dst) cudaFree(dst);
    return r;
}

}  // namespace kvscope::kernels
