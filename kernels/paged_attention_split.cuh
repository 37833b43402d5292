#pragma once
// What paged_attention.cu and paged_attention_decode.cu share (not a public header): the
// workspace of split decode and the kernel that merges it.
//
// With `splits` > 1 each split of the keys writes, for every (query row, head):
//   ws_out [split][row][head][head_dim] f32: its output, normalized by its own sum;
//   ws_ml  [split][row][head][2] f32: its running max (scores in base 2) and sum; sum 0 when the
//          split saw no key (its output is then ignored).
// ws_ml follows ws_out in one workspace of paged_attention_workspace_bytes().

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>

#include "kernels/paged_attention.h"

namespace kvscope::kernels::detail {

struct SplitWorkspace {
    float* out = nullptr;
    float* ml = nullptr;
};
inline SplitWorkspace split_workspace(void* workspace, int splits, int num_rows, int n_heads,
                                      int head_dim) {
    float* out = static_cast<float*>(workspace);
    return {out, out + static_cast<int64_t>(splits) * num_rows * n_heads * head_dim};
}

// out[row][head] = the splits' outputs weighted by sum * 2^(max - the largest max).
cudaError_t merge_attention_splits(float* out, SplitWorkspace ws, int splits, int num_rows,
                                   int n_heads, int head_dim, cudaStream_t stream);

// The scale of q . k in base 2 (p.scale, or 1 / sqrt(head_dim) as the engine, times log2(e)):
// both kernels keep scores in base 2 so that the softmax is exp2f.
inline float scale_log2(const PagedAttentionParams& p) {
    const float scale =
        p.scale != 0.0f ? p.scale : 1.0f / std::sqrt(static_cast<float>(p.cache.head_dim));
    return scale * 1.4426950408889634f;
}

// The device's SM count, asked once per process (the launchers size grids by it every call).
int sm_count();

}  // namespace kvscope::kernels::detail
