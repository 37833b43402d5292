#include <vector>

#include "kernels/cuda_common.cuh"
#include "kernels/paged_kv.h"

namespace kvscope::kernels {

namespace {
using detail::Elem;
using detail::from_float;

template <class T>
__global__ void write_paged_kv_kernel(T* kc, T* vc, const int32_t* table, int stride,
                                      int num_blocks, int block_size, int kv_dim, const float* k,
                                      const float* v, const int32_t* token_seq,
                                      const int32_t* token_slot) {
    const int64_t t = blockIdx.x;
    const int seq = token_seq[t], slot = token_slot[t];
    if (seq < 0 || slot < 0 || slot / block_size >= stride) return;
    const int block = table[static_cast<int64_t>(seq) * stride + slot / block_size];
    if (block < 0 || block >= num_blocks) return;
    const int64_t at = (static_cast<int64_t>(block) * block_size + slot % block_size) * kv_dim;
    const float* kt = k + t * kv_dim;
    const float* vt = v + t * kv_dim;
    for (int i = threadIdx.x; i < kv_dim; i += blockDim.x) {
        kc[at + i] = from_float<T>(kt[i]);
        vc[at + i] = from_float<T>(vt[i]);
    }
}

template <class Word>
__global__ void copy_blocks_kernel(void* const* dst_pools, const void* const* src_pools,
                                   int64_t block_words, const int32_t* pairs) {
    const int src = pairs[2 * blockIdx.x], dst = pairs[2 * blockIdx.x + 1];
    if (src < 0 || dst < 0) return;
    const Word* from = static_cast<const Word*>(src_pools[blockIdx.y]) + src * block_words;
    Word* to = static_cast<Word*>(dst_pools[blockIdx.y]) + dst * block_words;
    for (int64_t i = threadIdx.x; i < block_words; i += blockDim.x)
        to[i] = from[i];
}

template <DType D>
cudaError_t launch_write(const PagedKvCache& c, BlockTables tables, const float* k, const float* v,
                         const int32_t* token_seq, const int32_t* token_slot, int num_tokens,
                         cudaStream_t stream) {
    using T = typename Elem<D>::type;
    const int threads = c.kv_dim() >= 256 ? 256 : ((c.kv_dim() + 31) / 32) * 32;
    write_paged_kv_kernel<T><<<num_tokens, threads, 0, stream>>>(
        static_cast<T*>(c.k), static_cast<T*>(c.v), tables.table, tables.stride, c.num_blocks,
        c.block_size, c.kv_dim(), k, v, token_seq, token_slot);
    return cudaGetLastError();
}
}  // namespace

cudaError_t write_paged_kv(const PagedKvCache& cache, BlockTables tables, const float* k,
                           const float* v, const int32_t* token_seq, const int32_t* token_slot,
                           int num_tokens, cudaStream_t stream) {
    if (num_tokens < 0 || cache.block_size <= 0 || cache.kv_dim() <= 0 || !cache.k || !cache.v ||
        !tables.table || tables.stride <= 0 || !k || !v || !token_seq || !token_slot)
        return cudaErrorInvalidValue;
    if (num_tokens == 0) return cudaSuccess;
    switch (cache.dtype) {
        case DType::kF32:
            return launch_write<DType::kF32>(cache, tables, k, v, token_seq, token_slot, num_tokens,
                                             stream);
        case DType::kF16:
            return launch_write<DType::kF16>(cache, tables, k, v, token_seq, token_slot, num_tokens,
                                             stream);
        case DType::kBF16:
            return launch_write<DType::kBF16>(cache, tables, k, v, token_seq, token_slot,
                                              num_tokens, stream);
    }
    return cudaErrorInvalidValue;
}

cudaError_t copy_blocks(void* const* dst_pools, const void* const* src_pools, int num_pools,
                        int64_t block_bytes, const int32_t* pairs, int num_pairs,
                        cudaStream_t stream) {
    if (num_pools < 0 || num_pairs < 0 || block_bytes <= 0 || !dst_pools || !src_pools || !pairs ||
        num_pools > 65535)
        return cudaErrorInvalidValue;
    if (num_pools == 0 || num_pairs == 0) return cudaSuccess;
    // The pools' alignment is not known here (they are on the device): allocations from
    // cudaMalloc and cudaHostAlloc are 256-byte aligned, so the block size decides.
    const dim3 grid(static_cast<unsigned>(num_pairs), static_cast<unsigned>(num_pools));
    if (block_bytes % 16 == 0)
        copy_blocks_kernel<uint4>
            <<<grid, 256, 0, stream>>>(dst_pools, src_pools, block_bytes / 16, pairs);
    else if (block_bytes % 4 == 0)
        copy_blocks_kernel<uint32_t>
            <<<grid, 256, 0, stream>>>(dst_pools, src_pools, block_bytes / 4, pairs);
    else
        copy_blocks_kernel<uint8_t>
            <<<grid, 256, 0, stream>>>(dst_pools, src_pools, block_bytes, pairs);
    return cudaGetLastError();
}

cudaError_t swap_blocks(void* const* dst_pools, const void* const* src_pools, int num_pools,
                        int64_t block_bytes, const int32_t* pairs, int num_pairs,
                        cudaStream_t stream) {
    if (num_pools < 0 || num_pairs < 0 || block_bytes <= 0 ||
        (num_pools > 0 && num_pairs > 0 && (!dst_pools || !src_pools || !pairs)))
        return cudaErrorInvalidValue;
    // Runs of pairs (s, d), (s + 1, d + 1), ... become one copy each.
    struct Run {
        int32_t src, dst, count;
    };
    std::vector<Run> runs;
    for (int i = 0; i < num_pairs; ++i) {
        const int32_t s = pairs[2 * i], d = pairs[2 * i + 1];
        if (s < 0 || d < 0) continue;
        if (!runs.empty() && runs.back().src + runs.back().count == s &&
            runs.back().dst + runs.back().count == d)
            ++runs.back().count;
        else
            runs.push_back({s, d, 1});
    }
    for (int p = 0; p < num_pools; ++p)
        for (const Run& r : runs) {
            cudaError_t e = cudaMemcpyAsync(
                static_cast<char*>(dst_pools[p]) + r.dst * block_bytes,
                static_cast<const char*>(src_pools[p]) + r.src * block_bytes,
                static_cast<size_t>(r.count * block_bytes), cudaMemcpyDefault, stream);
            if (e != cudaSuccess) return e;
        }
    return cudaSuccess;
}

}  // namespace kvscope::kernels
