#include "kernels/cuda_common.cuh"
#include "kernels/elementwise.h"

namespace kvscope::kernels {

namespace {
using detail::warp_sum;

constexpr int kNormThreads = 256;

// Sum over the block; every thread gets the result.
__device__ float block_sum(float x) {
    __shared__ float partial[kNormThreads / 32];
    __shared__ float total;
    x = warp_sum(x);
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (lane == 0) partial[warp] = x;
    __syncthreads();
    if (warp == 0) {
        float s = lane < kNormThreads / 32 ? partial[lane] : 0.0f;
        s = warp_sum(s);
        if (lane == 0) total = s;
    }
    __syncthreads();
    return total;
}

template <bool kVec4>
__global__ void __launch_bounds__(kNormThreads)
    rmsnorm_kernel(float* out, const float* x, const float* weight, int n, float eps) {
    const int64_t row = blockIdx.x;
    const float* xr = x + row * n;
    float* outr = out + row * n;
    float ss = 0.0f;
    if (kVec4) {
        for (int i = threadIdx.x; i < n / 4; i += kNormThreads) {
            const float4 v = reinterpret_cast<const float4*>(xr)[i];
            ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
        }
    } else {
        for (int i = threadIdx.x; i < n; i += kNormThreads)
            ss += xr[i] * xr[i];
    }
    ss = block_sum(ss);
    // As engine/cpu_ops.cpp: the mean plus eps, then one reciprocal square root (not rsqrtf,
    // which is approximate).
    const float inv = 1.0f / sqrtf(ss / static_cast<float>(n) + eps);
    if (kVec4) {
        for (int i = threadIdx.x; i < n / 4; i += kNormThreads) {
            const float4 v = reinterpret_cast<const float4*>(xr)[i];
            const float4 w = reinterpret_cast<const float4*>(weight)[i];
            reinterpret_cast<float4*>(outr)[i] = make_float4(w.x * (inv * v.x), w.y * (inv * v.y),
                                                             w.z * (inv * v.z), w.w * (inv * v.w));
        }
    } else {
        for (int i = threadIdx.x; i < n; i += kNormThreads)
            outr[i] = weight[i] * (inv * xr[i]);
    }
}

bool aligned16(const void* p) {
    return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

// One thread per (token, head, pair); q heads first, then k heads.
__global__ void rope_kernel(float* q, float* k, const int32_t* positions, const float* inv_freq,
                            int num_tokens, int n_heads, int n_kv_heads, int head_dim,
                            RopeLayout layout) {
    const int half = head_dim / 2;
    const int heads = n_heads + n_kv_heads;
    const int64_t total = static_cast<int64_t>(num_tokens) * heads * half;
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
         idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int i = static_cast<int>(idx % half);
        const int64_t th = idx / half;
        const int h = static_cast<int>(th % heads);
        const int64_t t = th / heads;
        float* head = h < n_heads ? (q ? q + (t * n_heads + h) * head_dim : nullptr)
                                  : (k ? k + (t * n_kv_heads + (h - n_heads)) * head_dim : nullptr);
        if (!head) continue;
        const float angle = static_cast<float>(positions[t]) * inv_freq[i];
        float s, c;
        sincosf(angle, &s, &c);
        const int a = layout == RopeLayout::kAdjacentPairs ? 2 * i : i;
        const int b = layout == RopeLayout::kAdjacentPairs ? 2 * i + 1 : i + half;
        const float x0 = head[a], x1 = head[b];
        head[a] = x0 * c - x1 * s;
        head[b] = x0 * s + x1 * c;
    }
}

// In the CPU backend's order (engine/cpu_ops.cpp): x * (1 / (1 + e^-x)) * up.
__device__ __forceinline__ float silu_mul(float g, float u) {
    return g * (1.0f / (1.0f + expf(-g))) * u;
}

__global__ void swiglu_kernel(float* out, const float* gate, const float* up, int64_t n) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        out[i] = silu_mul(gate[i], up[i]);
}

__global__ void swiglu4_kernel(float4* out, const float4* gate, const float4* up, int64_t n4) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n4;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const float4 g = gate[i], u = up[i];
        out[i] = make_float4(silu_mul(g.x, u.x), silu_mul(g.y, u.y), silu_mul(g.z, u.z),
                             silu_mul(g.w, u.w));
    }
}

// Enough blocks of 256 threads for `work` items, capped: the kernels loop over the rest.
unsigned grid_for(int64_t work) {
    const int64_t blocks = (work + 255) / 256;
    return static_cast<unsigned>(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}
}  // namespace

cudaError_t rmsnorm(float* out, const float* x, const float* weight, int rows, int n, float eps,
                    cudaStream_t stream) {
    if (rows < 0 || n <= 0 || !out || !x || !weight) return cudaErrorInvalidValue;
    if (rows == 0) return cudaSuccess;
    if (n % 4 == 0 && aligned16(out) && aligned16(x) && aligned16(weight))
        rmsnorm_kernel<true><<<rows, kNormThreads, 0, stream>>>(out, x, weight, n, eps);
    else
        rmsnorm_kernel<false><<<rows, kNormThreads, 0, stream>>>(out, x, weight, n, eps);
    return cudaGetLastError();
}

cudaError_t rope(float* q, float* k, const int32_t* positions, const float* inv_freq,
                 int num_tokens, int n_heads, int n_kv_heads, int head_dim, RopeLayout layout,
                 cudaStream_t stream) {
    if (num_tokens < 0 || n_heads < 0 || n_kv_heads < 0 || head_dim <= 0 || head_dim % 2 != 0 ||
        !positions || !inv_freq)
        return cudaErrorInvalidValue;
    const int64_t work = static_cast<int64_t>(num_tokens) * (n_heads + n_kv_heads) * (head_dim / 2);
    if (work == 0) return cudaSuccess;
    rope_kernel<<<grid_for(work), 256, 0, stream>>>(q, k, positions, inv_freq, num_tokens, n_heads,
                                                    n_kv_heads, head_dim, layout);
    return cudaGetLastError();
}

cudaError_t swiglu(float* out, const float* gate, const float* up, int64_t n, cudaStream_t stream) {
    if (n < 0 || !out || !gate || !up) return cudaErrorInvalidValue;
    if (n == 0) return cudaSuccess;
    if (n % 4 == 0 && aligned16(out) && aligned16(gate) && aligned16(up))
        swiglu4_kernel<<<grid_for(n / 4), 256, 0, stream>>>(
            reinterpret_cast<float4*>(out), reinterpret_cast<const float4*>(gate),
            reinterpret_cast<const float4*>(up), n / 4);
    else
        swiglu_kernel<<<grid_for(n), 256, 0, stream>>>(out, gate, up, n);
    return cudaGetLastError();
}

}  // namespace kvscope::kernels
