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

#include <cstdint>

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

// The device's SM count, asked once per process (the launchers size grids by it every call).
int sm_count();

}  // namespace kvscope::kernels::detail
