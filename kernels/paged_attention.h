#pragma once
// Attention over the paged KV cache (paged_kv.h's layout), decode and prefill, GQA-aware, with
// the engine's semantics (engine/cpu_forward.cpp, CpuForward::attention):
//
//   Sequence s has kv_len[s] slots in use, its new queries' K/V already written (the last
//   n_q(s) slots are theirs). Its query j (0-based among its n_q(s)) attends to slots
//   [0, kv_len[s] - n_q(s) + j]: causal by slot. Query head h reads KV head h / group, group =
//   n_heads / n_kv_heads. A slot is skipped (probability exactly 0) when its logical block is a
//   hole (-1) in the block table, or, with slot_pos, when the (sequence, KV head) lane holds no
//   token there (slot_pos < 0: evicted). score = q . k * scale, softmax over the row, out = sum
//   p * v. A row whose every slot is skipped outputs zeros.
//
// Tensors (all device memory):
//   q    [num_q_rows][n_heads][head_dim] f32; the rows of sequence s are
//        q_start[s] .. q_start[s + 1] - 1 (q_start [num_seqs + 1] int32, q_start[0] = 0), or,
//        with q_start null, row s is sequence s's one query (decode).
//   out  same shape as q, f32 (may not alias q).
//   kv_len [num_seqs] int32; block tables as paged_kv.h (BlockTables).
//   slot_pos (optional) [num_seqs][n_kv_heads][slot_pos_stride] int32: the token position each
//        slot of each lane holds, -1 where evicted (engine/kv_eviction.h's LaneStats::position);
//        null: every slot of a live block is held.
//
// How it runs: decode of the usual head sizes by a kernel of its own that streams K/V through
// registers (paged_attention_decode.cuh); everything else by the tiled kernel below, with a
// second pass to merge when the keys are split. The tiled kernel:
//   One block of 128 threads per (KV head, sequence, query tile, split): the block holds up to
//   ROWS query rows = (query, query head of the group) pairs, 8 rows for decode (the whole group
//   of a query: each K/V element is read from memory once per KV head, not once per query
//   head), 32 for prefill. Key tiles of 16..64 slots stream through shared memory with cp.async,
//   double buffered, the first tile's copy overlapping the block's setup and each next tile's
//   copy overlapping the current one's math; scores, an online softmax in base 2 and P.V are
//   computed in f32 from shared memory (16-byte reads, conflict-free by a 16-byte row pad).
//   Long contexts split the keys over `num_splits` blocks (flash-decoding); each writes its
//   partial output with its running max and sum to the workspace and a second kernel merges
//   them. K/V elements are f32, f16 or bf16, converted on load from shared memory; head_dim a
//   multiple of 16 bytes of them (f32: 4, f16/bf16: 8) up to 256. Not yet: tensor cores for
//   prefill (the f32 math is SIMT), int8/int4 caches, capturing probabilities.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/paged_kv.h"

namespace kvscope::kernels {

enum class DecodeKernel { kDefault, kTiled };

struct PagedAttentionParams {
    const float* q = nullptr;
    float* out = nullptr;
    PagedKvCache cache;  // one layer
    BlockTables tables;
    const int32_t* q_start = nullptr;   // [num_seqs + 1]; null: one query per sequence
    const int32_t* kv_len = nullptr;    // [num_seqs]
    const int32_t* slot_pos = nullptr;  // optional [num_seqs][n_kv_heads][slot_pos_stride]
    int slot_pos_stride = 0;
    int num_seqs = 0;
    int n_heads = 0;
    // Scale of q . k; 0: 1 / sqrt(head_dim), as the engine.
    float scale = 0.0f;
    // Host-side bounds the grid is sized by: the most queries of one sequence (prefill) and the
    // most slots of one sequence (decode's split planning). Larger values only cost idle blocks;
    // smaller ones leave queries out (prefill) or make fewer splits (decode).
    int max_q_len = 1;
    int max_kv_len = 0;
    // Key splits: 0 picks (paged_attention_splits()); > 1 needs a workspace of
    // paged_attention_workspace_bytes() bytes.
    int num_splits = 0;
    void* workspace = nullptr;
    size_t workspace_bytes = 0;
    // Which decode kernel runs, to compare them: by default the warp kernel where it applies,
    // kTiled the tiled kernel.
    DecodeKernel decode_kernel = DecodeKernel::kDefault;
};

// The splits num_splits = 0 stands for: enough blocks to fill the current device's SMs twice
// when few sequences attend to long contexts (at least 256 slots per split), else 1. Prefill
// (q_start set) always 1.
int paged_attention_splits(const PagedAttentionParams& p);
// Workspace bytes for p with its splits resolved (0 when there is one split).
size_t paged_attention_workspace_bytes(const PagedAttentionParams& p);

// One query per sequence (q_start is ignored and treated as null).
cudaError_t paged_attention_decode(const PagedAttentionParams& p, cudaStream_t stream = nullptr);
// Any number of queries per sequence (q_start required): prompts, chunked prefill, or several
// decode queries at once.
cudaError_t paged_attention_prefill(const PagedAttentionParams& p, cudaStream_t stream = nullptr);

}  // namespace kvscope::kernels
