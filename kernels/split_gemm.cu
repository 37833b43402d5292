#include "kernels/cuda_common.cuh"
#include "kernels/split_gemm.h"

namespace kvscope::kernels {

namespace {
using detail::from_float;
using detail::to_float;
using detail::warp_max;

constexpr int kSplitThreads = 256;

template <class T>
__global__ void __launch_bounds__(kSplitThreads)
    split_kernel(T* out, float* row_scale, const float* x, int rows, int n) {
    __shared__ float partial[kSplitThreads / 32];
    __shared__ float scale;
    const int64_t row = blockIdx.x;
    const float* xr = x + row * n;
    float m = 0.0f;
    for (int i = threadIdx.x; i < n; i += kSplitThreads)
        m = fmaxf(m, fabsf(xr[i]));  // fmaxf drops NaN: a NaN row still scales by its others
    m = warp_max(m);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = m;
    __syncthreads();
    if (threadIdx.x == 0) {
        float all = 0.0f;
        for (int w = 0; w < kSplitThreads / 32; ++w)
            all = fmaxf(all, partial[w]);
        // all = f * 2^e, f in [0.5, 1): all / 2^(e - 15) = f * 2^15 in [2^14, 2^15).
        float s = 1.0f;
        if (all > 0.0f && isfinite(all)) {
            int e;
            frexpf(all, &e);
            s = ldexpf(1.0f, max(e - 15, -126));  // a normal float, so 1 / s stays finite
        }
        scale = s;
        row_scale[row] = s;
    }
    __syncthreads();
    const float inv = 1.0f / scale;  // a power of two: exact
    T* hi = out + row * n;
    T* lo = out + (static_cast<int64_t>(rows) + row) * n;
    for (int i = threadIdx.x; i < n; i += kSplitThreads) {
        const float v = xr[i] * inv;
        const T h = from_float<T>(v);
        hi[i] = h;
        // Exact in f32: v and h share an exponent range. An infinite v keeps lo 0, so the row
        // reads Inf, not Inf - Inf = NaN, and a failure names what the CPU names.
        lo[i] = from_float<T>(isfinite(v) ? v - to_float(h) : 0.0f);
    }
}

struct Segments {
    JoinSegment s[3];
    int count;
    int total;
};

__global__ void join_kernel(Segments seg, const float* y, const float* row_scale, const float* bias,
                            int rows, unsigned long long* first_bad) {
    const int64_t total = static_cast<int64_t>(rows) * seg.total;
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
         idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t r = idx / seg.total;
        int c = static_cast<int>(idx % seg.total);
        float v = (y[idx] + y[total + idx]) * row_scale[r];
        if (bias) v += bias[c];
        int k = 0;
        while (k + 1 < seg.count && c >= seg.s[k].width) {
            c -= seg.s[k].width;
            ++k;
        }
        float* out = seg.s[k].out + r * seg.s[k].width + c;
        if (seg.s[k].accumulate) v += *out;
        *out = v;
        if (first_bad && !isfinite(v))
            atomicMin(first_bad,
                      (static_cast<unsigned long long>(idx) << 1) | (isnan(v) ? 1u : 0u));
    }
}

__global__ void gather_kernel(float* out, const float* in, const int32_t* rows, int n_out, int n) {
    const int64_t total = static_cast<int64_t>(n_out) * n;
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < total;
         idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t i = idx / n;
        out[idx] = in[static_cast<int64_t>(rows[i]) * n + idx % n];
    }
}

unsigned grid_for(int64_t work) {
    const int64_t blocks = (work + 255) / 256;
    return static_cast<unsigned>(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}
}  // namespace

cudaError_t split_halves(void* out, DType type, float* row_scale, const float* x, int rows, int n,
                         cudaStream_t stream) {
    if (rows < 0 || n <= 0 || !out || !row_scale || !x || type == DType::kF32)
        return cudaErrorInvalidValue;
    if (rows == 0) return cudaSuccess;
    if (type == DType::kF16)
        split_kernel<<<rows, kSplitThreads, 0, stream>>>(static_cast<__half*>(out), row_scale, x,
                                                         rows, n);
    else
        split_kernel<<<rows, kSplitThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(out),
                                                         row_scale, x, rows, n);
    return cudaGetLastError();
}

cudaError_t join_halves(const JoinSegment* segments, int num_segments, const float* y,
                        const float* row_scale, const float* bias, int rows,
                        unsigned long long* first_bad, cudaStream_t stream) {
    if (num_segments < 1 || num_segments > 3 || rows < 0 || !y || !row_scale)
        return cudaErrorInvalidValue;
    Segments seg{};
    seg.count = num_segments;
    for (int i = 0; i < num_segments; ++i) {
        if (!segments[i].out || segments[i].width <= 0) return cudaErrorInvalidValue;
        seg.s[i] = segments[i];
        seg.total += segments[i].width;
    }
    if (rows == 0) return cudaSuccess;
    join_kernel<<<grid_for(static_cast<int64_t>(rows) * seg.total), 256, 0, stream>>>(
        seg, y, row_scale, bias, rows, first_bad);
    return cudaGetLastError();
}

cudaError_t gather_rows(float* out, const float* in, const int32_t* rows, int n_out, int n,
                        cudaStream_t stream) {
    if (n_out < 0 || n <= 0 || !out || !in || (n_out > 0 && !rows)) return cudaErrorInvalidValue;
    if (n_out == 0) return cudaSuccess;
    gather_kernel<<<grid_for(static_cast<int64_t>(n_out) * n), 256, 0, stream>>>(out, in, rows,
                                                                                 n_out, n);
    return cudaGetLastError();
}

}  // namespace kvscope::kernels
