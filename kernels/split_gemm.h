#pragma once
// f32 activations through 16-bit matrix products, and back. cuBLAS multiplies 16-bit weights
// only by 16-bit activations, and with bf16 weights, rounding the activations to bf16 too flipped
// a greedy token of the bundled model within 256 (measured by emulating it on the CPU). So each
// activation row goes in as two 16-bit rows, hi = round(x / s) and lo = round(x / s - hi), one
// product over both (the weights are read once, for twice the columns), and the two output rows are
// added and scaled back: hi + lo carries 16 (bf16) or 22 (f16) significant bits of x, near enough
// f32. s is a power of two per row (exact to multiply by), chosen so the row's largest |x| / s lies
// in [2^14, 2^15): f16's range then holds every row, whatever the model's activations reach.
//
// Every launcher enqueues on `stream` and returns the launch's error (cudaErrorInvalidValue for
// arguments it does not take).

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/dtype.h"

namespace kvscope::kernels {

// x [rows][n] f32 -> out [2 * rows][n] of `type` (kF16 or kBF16): out rows 0..rows-1 are hi,
// rows rows..2*rows-1 are lo; row_scale [rows] f32 gets each row's s (1 for a row of zeros or
// one holding NaN or Inf, which then stay NaN or Inf). One block per row.
cudaError_t split_halves(void* out, DType type, float* row_scale, const float* x, int rows, int n,
                         cudaStream_t stream = nullptr);

// Where join_halves puts each column range of a product's output row: out[r][0..width) gets
// columns [offset, offset + width) of the row, where offset is the sum of the earlier
// segments' widths. `accumulate` adds to what out holds (a residual add), else overwrites.
struct JoinSegment {
    float* out = nullptr;
    int width = 0;
    bool accumulate = false;
};

// y [2 * rows][total] f32 (the product over split_halves' output; total = the segments' widths
// summed, at most 3 segments) -> for every row r and column c:
//   value = (y[r][c] + y[rows + r][c]) * row_scale[r] + (bias ? bias[c] : 0)
//   segment out[r][c - offset] = accumulate ? out + value : value
// first_bad (optional, device, initialized to all ones bits): atomically lowered to
// ((r * total + c) << 1 | isnan) for every stored value that is NaN or Inf, so the smallest
// (row-major first) one and what it was can be reported after the step.
cudaError_t join_halves(const JoinSegment* segments, int num_segments, const float* y,
                        const float* row_scale, const float* bias, int rows,
                        unsigned long long* first_bad = nullptr, cudaStream_t stream = nullptr);

// out[i][..] = in[rows[i]][..]: n_out rows of n f32 each (rows: device int32 [n_out]).
cudaError_t gather_rows(float* out, const float* in, const int32_t* rows, int n_out, int n,
                        cudaStream_t stream = nullptr);

}  // namespace kvscope::kernels
