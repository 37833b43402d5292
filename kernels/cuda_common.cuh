#pragma once
// Device helpers shared by the kernels' .cu files (not a public header).

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/dtype.h"

namespace kvscope::kernels::detail {

// The C++ type of each DType.
template <DType D>
struct Elem;
template <>
struct Elem<DType::kF32> {
    using type = float;
};
template <>
struct Elem<DType::kF16> {
    using type = __half;
};
template <>
struct Elem<DType::kBF16> {
    using type = __nv_bfloat16;
};

__device__ __forceinline__ float to_float(float x) {
    return x;
}
__device__ __forceinline__ float to_float(__half x) {
    return __half2float(x);
}
__device__ __forceinline__ float to_float(__nv_bfloat16 x) {
    return __bfloat162float(x);
}

template <class T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
    return x;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
    return __float2half_rn(x);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}

// Four consecutive elements of type T at p (aligned to 4 * sizeof(T)) as floats.
template <class T>
__device__ __forceinline__ void load4(const T* p, float out[4]);
template <>
__device__ __forceinline__ void load4<float>(const float* p, float out[4]) {
    const float4 v = *reinterpret_cast<const float4*>(p);
    out[0] = v.x;
    out[1] = v.y;
    out[2] = v.z;
    out[3] = v.w;
}
template <>
__device__ __forceinline__ void load4<__half>(const __half* p, float out[4]) {
    const uint2 raw = *reinterpret_cast<const uint2*>(p);
    const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&raw.x));
    const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&raw.y));
    out[0] = a.x;
    out[1] = a.y;
    out[2] = b.x;
    out[3] = b.y;
}
template <>
__device__ __forceinline__ void load4<__nv_bfloat16>(const __nv_bfloat16* p, float out[4]) {
    const uint2 raw = *reinterpret_cast<const uint2*>(p);
    const float2 a = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
    const float2 b = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
    out[0] = a.x;
    out[1] = a.y;
    out[2] = b.x;
    out[3] = b.y;
}

// 16 bytes of elements of type T at p (16-byte aligned) as floats: 4 of f32, 8 of f16/bf16.
template <class T>
inline constexpr int kPer16 = 16 / static_cast<int>(sizeof(T));
// 16 bytes already loaded, as floats.
template <class T>
__device__ __forceinline__ void unpack16(const uint4 raw, float out[kPer16<T>]) {
    if constexpr (sizeof(T) == 4) {
        out[0] = __uint_as_float(raw.x);
        out[1] = __uint_as_float(raw.y);
        out[2] = __uint_as_float(raw.z);
        out[3] = __uint_as_float(raw.w);
    } else {
        const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            float2 f;
            if constexpr (std::is_same_v<T, __half>)
                f = __half22float2(*reinterpret_cast<const __half2*>(&words[i]));
            else
                f = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&words[i]));
            out[2 * i] = f.x;
            out[2 * i + 1] = f.y;
        }
    }
}
template <class T>
__device__ __forceinline__ void load16(const T* p, float out[kPer16<T>]) {
    // One 16-byte load (one shared-memory wavefront per 8 threads), then the conversions.
    unpack16<T>(*reinterpret_cast<const uint4*>(p), out);
}

__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}
__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

// 16 bytes global -> shared without passing through registers (sm_80+); zeros when `valid` is
// false (the source is then not read, but must still be a valid address). Older
// architectures copy synchronously.
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    const int bytes = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(bytes));
#else
    *reinterpret_cast<uint4*>(smem) = valid ? *reinterpret_cast<const uint4*>(gmem) : uint4{};
#endif
}
__device__ __forceinline__ void cp_async_commit() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
// Waits until at most N committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
#endif
}

__host__ __device__ inline int ceil_div(int a, int b) {
    return (a + b - 1) / b;
}

}  // namespace kvscope::kernels::detail
