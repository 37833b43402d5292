#pragma once
// The paged KV cache on the device, in the engine's layout (engine/kv_cache.h), and the kernels
// that write it and move its blocks.
//
// Layout of one layer's cache, K and V alike:
//   [num_blocks][block_size][n_kv_heads][head_dim] elements of `dtype`
// so a block of a layer is one contiguous run of block_size * n_kv_heads * head_dim elements
// (copy-on-write and swapping move whole blocks), and one token's one KV head is head_dim
// neighbours (attention reads it with 16-byte loads). Element (block b, slot s, head h, dim d)
// is at ((b * block_size + s) * n_kv_heads + h) * head_dim + d. This is the engine's byte layout
// for f32 and f16, so a block saved by KvCacheStorage::save_block of a one-layer cache is
// [K block bytes][V block bytes] of this layout.
//
// Block tables: block_tables[seq * block_table_stride + i] is the physical block holding the
// sequence's slots [i * block_size, (i + 1) * block_size), or -1: a hole, a block given back
// after token eviction emptied it (engine/block_manager.h). A sequence's slot j is logical
// block j / block_size, offset j % block_size.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/dtype.h"

namespace kvscope::kernels {

struct PagedKvCache {
    void* k = nullptr;  // this layer's keys, the layout above
    void* v = nullptr;  // this layer's values
    DType dtype = DType::kF32;
    int num_blocks = 0;
    int block_size = 16;
    int n_kv_heads = 0;
    int head_dim = 0;

    int kv_dim() const { return n_kv_heads * head_dim; }
    // Elements of one block of K (or V) in one layer.
    int64_t block_elems() const { return static_cast<int64_t>(block_size) * kv_dim(); }
};

struct BlockTables {
    const int32_t* table = nullptr;  // device: [num_seqs][stride] int32, -1 = hole
    int stride = 0;                  // entries per sequence (the longest table)
};

// Stores the K and V of `num_tokens` new tokens through the block tables:
//   token t goes to sequence token_seq[t], slot token_slot[t] (both int32 [num_tokens], device),
//   from k[t][kv_dim], v[t][kv_dim] (f32, device), converted to cache.dtype rounding to nearest
//   even (f16: the same bits as engine/kv_quant.h's float_to_half).
// A token whose slot is negative or whose block is a hole (-1) or out of range is skipped: the
// kernel cannot fail, so a bad table never writes outside the cache. One block of threads per
// token, one thread per element.
cudaError_t write_paged_kv(const PagedKvCache& cache, BlockTables tables, const float* k,
                           const float* v, const int32_t* token_seq, const int32_t* token_slot,
                           int num_tokens, cudaStream_t stream = nullptr);

// Copies whole blocks by a kernel: for every pair i and every pool p, block pairs[2i] of
// src_pools[p] -> block pairs[2i + 1] of dst_pools[p], block_bytes each.
//   dst_pools, src_pools: device arrays of num_pools base pointers (say K and V of every layer:
//   2 * n_layers pools); dst_pools == src_pools is copy-on-write within the cache. A pool may be
//   pinned host memory (cudaHostAlloc / cudaMallocHost): with unified addressing its pointer is
//   valid in a kernel, so one launch swaps any number of scattered blocks out or in.
//   pairs: device int32 [num_pairs][2]; a pair with a negative block is skipped. Pairs must not
//   write a block another pair reads. 16-byte copies when block_bytes and the pools allow.
//   Grid: (num_pairs, num_pools) blocks of 256 threads.
cudaError_t copy_blocks(void* const* dst_pools, const void* const* src_pools, int num_pools,
                        int64_t block_bytes, const int32_t* pairs, int num_pairs,
                        cudaStream_t stream = nullptr);

// The same by DMA (cudaMemcpyAsync, no SM time), for swapping between device pools and pinned
// host pools: every argument is on the host here (pool pointers and pairs), and runs of
// consecutive source and destination blocks go as one copy. With pageable host memory the
// copies are synchronous, so swap pools should be pinned.
cudaError_t swap_blocks(void* const* dst_pools, const void* const* src_pools, int num_pools,
                        int64_t block_bytes, const int32_t* pairs, int num_pairs,
                        cudaStream_t stream = nullptr);

}  // namespace kvscope::kernels
