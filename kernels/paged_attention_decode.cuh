#pragma once
// The decode kernel of paged_attention_decode() for the shapes most models have (not a public
// header; paged_attention.h documents the semantics and the cache layout).
//
// Decode reads every K/V byte of the context once per KV head and does little arithmetic on it
// (a query group of 1-8 heads), so it is a memory-streaming kernel: what matters is how many
// bytes are in flight. Unlike the tiled kernel (shared-memory tiles for prefill), each warp
// streams its own keys straight into registers and keeps its own online softmax:
//
//   One block of 4 warps per (KV head's group tile of G heads, sequence, split). A key's
//   head_dim elements are C 16-byte chunks, one per lane: a warp covers 32 / C keys at once and
//   U such rows per step, so each lane has 2 * U 16-byte loads (K and V) in flight, and the
//   block-table entries of the next step are read while this step's math runs. Scores reduce
//   across the key's C lanes by shuffles; warps take interleaved steps of the keys; at the end
//   the warps' (max, sum, output) merge through shared memory, and with splits, the splits'
//   through the split workspace (paged_attention_split.cuh).
//
// It applies to f16 and bf16 caches with head_dim 64, 128 or 256 (8, 16 or 32 chunks of 16 bytes)
// and a power-of-two block size; any group (G = 1, 4 or 8 heads per block, larger groups take
// several tiles). Other shapes, and f32 caches, use the tiled kernel.

#include <cuda_runtime_api.h>

#include "kernels/paged_attention.h"

namespace kvscope::kernels::detail {

bool warp_decode_applies(const PagedAttentionParams& p);
// Blocks the warp kernel launches for p with one split (the splits multiply it).
int warp_decode_blocks(const PagedAttentionParams& p);
// The splits num_splits = 0 stands for with this kernel: one full wave of blocks on the device,
// each split at least 128 slots.
int warp_decode_splits(const PagedAttentionParams& p);
cudaError_t warp_decode(const PagedAttentionParams& p, int splits, cudaStream_t stream);

}  // namespace kvscope::kernels::detail
