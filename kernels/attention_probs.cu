#include "kernels/attention_probs.h"
#include "kernels/cuda_common.cuh"

namespace kvscope::kernels {

namespace {
using detail::to_float;

constexpr int kProbThreads = 128;

template <class T>
__global__ void __launch_bounds__(kProbThreads) probs_kernel(AttentionProbsParams p) {
    const int item = blockIdx.x;
    const int row = p.items[2 * item], head = p.items[2 * item + 1];
    const int seq = p.row_seq[row];
    const int len = p.row_slot[row] + 1;
    const PagedKvCache& c = p.cache;
    const int group = p.n_heads / c.n_kv_heads;
    const int kvh = head / group;
    const float* q = p.q + (static_cast<int64_t>(row) * p.n_heads + head) * c.head_dim;
    const int32_t* table = p.tables.table + static_cast<int64_t>(seq) * p.tables.stride;
    const int32_t* held =
        p.slot_pos
            ? p.slot_pos + (static_cast<int64_t>(seq) * c.n_kv_heads + kvh) * p.slot_pos_stride
            : nullptr;
    const T* keys = static_cast<const T*>(c.k);
    const float scale = p.scale != 0.0f ? p.scale : 1.0f / sqrtf(static_cast<float>(c.head_dim));
    // The score of slot t, or -inf where nothing is held.
    auto score = [&](int t) {
        // Slots past the table or the lane positions hold nothing (as paged_attention reads them).
        if (t / c.block_size >= p.tables.stride) return -INFINITY;
        const int32_t block = table[t / c.block_size];
        if (block < 0 || block >= c.num_blocks || (held && (t >= p.slot_pos_stride || held[t] < 0)))
            return -INFINITY;
        const T* k =
            keys +
            ((static_cast<int64_t>(block) * c.block_size + t % c.block_size) * c.n_kv_heads + kvh) *
                c.head_dim;
        float s = 0.0f;
        for (int i = 0; i < c.head_dim; ++i)
            s += q[i] * to_float(k[i]);
        return s * scale;
    };
    // Each thread's running max and sum over its slots, then the block's.
    float m = -INFINITY, sum = 0.0f;
    for (int t = threadIdx.x; t < len; t += kProbThreads) {
        const float s = score(t);
        if (s == -INFINITY) continue;
        if (s > m) {
            sum = sum * expf(m - s) + 1.0f;
            m = s;
        } else {
            sum += expf(s - m);
        }
    }
    __shared__ float ms[kProbThreads], ss[kProbThreads];
    ms[threadIdx.x] = m;
    ss[threadIdx.x] = sum;
    __syncthreads();
    for (int half = kProbThreads / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) {
            const float m1 = ms[threadIdx.x], m2 = ms[threadIdx.x + half];
            const float mm = fmaxf(m1, m2);
            float s = 0.0f;
            if (m1 != -INFINITY) s += ss[threadIdx.x] * expf(m1 - mm);
            if (m2 != -INFINITY) s += ss[threadIdx.x + half] * expf(m2 - mm);
            ms[threadIdx.x] = mm;
            ss[threadIdx.x] = s;
        }
        __syncthreads();
    }
    const float row_max = ms[0], row_sum = ss[0];
    uint8_t* out = p.out + static_cast<int64_t>(item) * p.out_stride;
    for (int t = threadIdx.x; t < len; t += kProbThreads) {
        const float s = score(t);
        float prob = s == -INFINITY || row_sum <= 0.0f ? 0.0f : expf(s - row_max) / row_sum;
        prob = fminf(fmaxf(prob, 0.0f), 1.0f);
        out[t] = static_cast<uint8_t>(prob * 255.0f + 0.5f);
    }
}
}  // namespace

cudaError_t attention_probabilities(const AttentionProbsParams& p, cudaStream_t stream) {
    const PagedKvCache& c = p.cache;
    if (p.num_items < 0 ||
        (p.num_items > 0 &&
         (!p.items || !p.q || !p.row_seq || !p.row_slot || !p.out || !c.k || !p.tables.table)) ||
        c.n_kv_heads <= 0 || c.head_dim <= 0 || c.block_size <= 0 || p.n_heads <= 0 ||
        p.n_heads % c.n_kv_heads != 0 || (p.slot_pos && p.slot_pos_stride <= 0))
        return cudaErrorInvalidValue;
    if (p.num_items == 0) return cudaSuccess;
    switch (c.dtype) {
        case DType::kF32:
            probs_kernel<float><<<p.num_items, kProbThreads, 0, stream>>>(p);
            break;
        case DType::kF16:
            probs_kernel<__half><<<p.num_items, kProbThreads, 0, stream>>>(p);
            break;
        case DType::kBF16:
            probs_kernel<__nv_bfloat16><<<p.num_items, kProbThreads, 0, stream>>>(p);
            break;
    }
    return cudaGetLastError();
}

}  // namespace kvscope::kernels
