#pragma once
// RMSNorm, rotary position embedding and SwiGLU on the device: the per-token ops of a
// Llama-style layer. f32 in and out, row-major, as the CPU backend (engine/cpu_ops.h) computes
// them; each agrees with it to float rounding (the sums are reduced in another order, and
// nvcc fuses multiply-adds), which tests/kernels checks.
//
// Every launcher enqueues on `stream` and returns the launch's error (cudaSuccess, or
// cudaErrorInvalidValue for shapes it does not take); errors while the kernel runs show at the
// next synchronizing call, as usual in CUDA.

#include <cuda_runtime_api.h>

#include <cstdint>

namespace kvscope::kernels {

// out[r][i] = weight[i] * (x[r][i] / sqrt(mean_i(x[r][i]^2) + eps))
//   x, out: [rows][n] f32 (out may be x); weight: [n] f32. One block per row.
cudaError_t rmsnorm(float* out, const float* x, const float* weight, int rows, int n, float eps,
                    cudaStream_t stream = nullptr);

// Which elements of a head RoPE rotates together (engine/model_config.h's RopeStyle).
enum class RopeLayout : int {
    kAdjacentPairs,  // (x[2i], x[2i+1]): Meta / llama2.c / GGUF "llama"
    kHalfSplit,      // (x[i], x[i + head_dim/2]): GPT-NeoX / Hugging Face / Qwen2
};

// Rotates in place, for token t at position positions[t], every query and key head:
//   (a, b) -> (a cos - b sin, a sin + b cos), angle = positions[t] * inv_freq[i] (in float,
//   then sincosf), i in [0, head_dim/2), (a, b) the pair `layout` names.
//   q: [num_tokens][n_heads][head_dim] f32, k: [num_tokens][n_kv_heads][head_dim] f32 (either
//   may be null); positions: [num_tokens] int32; inv_freq: [head_dim/2] f32, the engine's
//   1 / theta^(2i / head_dim) (passed in, so both backends rotate by the same floats).
//   head_dim even. One thread per rotated pair.
cudaError_t rope(float* q, float* k, const int32_t* positions, const float* inv_freq,
                 int num_tokens, int n_heads, int n_kv_heads, int head_dim, RopeLayout layout,
                 cudaStream_t stream = nullptr);

// out[i] = silu(gate[i]) * up[i], silu(x) = x / (1 + e^-x); out may be gate or up.
//   n f32 elements each; vectorized by four when all three are 16-byte aligned and n % 4 == 0.
cudaError_t swiglu(float* out, const float* gate, const float* up, int64_t n,
                   cudaStream_t stream = nullptr);

}  // namespace kvscope::kernels
