#pragma once
// The attention probabilities of chosen (query row, query head) pairs, for the heatmaps
// (`--capture-attention`): what paged_attention.h computes and never stores. A second, plain
// pass over the same keys, so the fast kernels keep no capture path; it is meant for the heads a
// user picked, not for every head of a large model.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/paged_kv.h"

namespace kvscope::kernels {

struct AttentionProbsParams {
    // items [num_items][2] int32 (device): (query row, query head) pairs.
    const int32_t* items = nullptr;
    int num_items = 0;
    // q [rows][n_heads][head_dim] f32, as paged_attention.h (after RoPE).
    const float* q = nullptr;
    int n_heads = 0;
    PagedKvCache cache;  // one layer
    BlockTables tables;
    // Row r belongs to sequence row_seq[r] and sits at slot row_slot[r]: it attends to slots
    // [0, row_slot[r]] (device int32 [rows] each).
    const int32_t* row_seq = nullptr;
    const int32_t* row_slot = nullptr;
    // Optional, as paged_attention.h: [seqs][n_kv_heads][slot_pos_stride], < 0 evicted.
    const int32_t* slot_pos = nullptr;
    int slot_pos_stride = 0;
    float scale = 0.0f;  // 0: 1 / sqrt(head_dim)
    // out [num_items][out_stride] u8 (device): out[i][t] for t in [0, row_slot + 1) is slot t's
    // probability, rounded to nearest of p * 255 (255 = 1.0; engine/forward.h's
    // quantize_probability); 0 for a hole, a given-back block or an evicted slot. Entries past
    // row_slot + 1 are not written.
    uint8_t* out = nullptr;
    int out_stride = 0;
};

// One block of 128 threads per item: scores q . k * scale over the row's slots, max and sum
// reduced over the block, then the probabilities (the scores computed again: nothing of
// context length is kept on chip).
cudaError_t attention_probabilities(const AttentionProbsParams& p, cudaStream_t stream = nullptr);

}  // namespace kvscope::kernels
