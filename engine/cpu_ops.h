#pragma once
// fp32 kernels of the CPU backend. Each takes raw pointers; shapes are given explicitly.

#include <cstdint>

#include "engine/model_config.h"
#include "engine/model_weights.h"

namespace kvscope {

class ThreadPool;

float dot(const float* a, const float* b, int n);
// out[r][o] = sum_i x[r][i] * w[o][i] for r < n_rows, o < w.rows; x is [n_rows][w.cols].
void matmul(ThreadPool& pool, const float* x, int n_rows, const Matrix& w, float* out);
// out = weight * x / sqrt(mean(x^2) + eps), over n values.
void rmsnorm(float* out, const float* x, const float* weight, int n, float eps);
void softmax(float* x, int n);
// Rotates one head vector in place for position `pos`. `inv_freq` has head_dim/2 entries.
void rope(float* head, int head_dim, int pos, const float* inv_freq, RopeStyle style);
// a[i] = silu(a[i]) * b[i]
void swiglu(float* a, const float* b, int n);

}  // namespace kvscope
