#pragma once
// The CPU backend's matrix multiply: out = x * w^T with w in its file's type (F32, F16, BF16,
// Q8_0, Q4_0, Q4_1, Q4_K, Q6_K), never converted ahead of time.
//
// Two numerics, chosen per run (--matmul):
// - exact (the reference): weights are converted to fp32 a tile at a time and every output
//   element is summed in dot()'s fixed order (cpu_ops.h). The result is bit for bit what an fp32
//   copy of the dequantized weights would give, for any batch and thread count.
// - fast: for Q8_0 and Q4_0 weights, each 32-value block of an activation row is
//   quantized to 8 bits (scale max|x|/127 stored as fp16, as llama.cpp's Q8_0 activations)
//   and blocks are multiplied in integers:
//   - Q8_0: eight int32 lanes of four products each, scaled by d_w * d_x into eight fp32 lanes
//     (fused multiply-add where the CPU has it) and folded as llama.cpp folds them;
//   - Q4_0: each block's whole integer dot, then sum = fma(dot, d_w * d_x, sum) block by block
//     (fused where the CPU has it), as llama.cpp's repacked Q4_0 kernels do. The weights are
//     read from an interleaved copy (q4_0_interleaved.h): Matrix::interleaved when the caller
//     keeps one (CpuForward does in fast mode), else one made for the call.
//   Still batch- and thread-invariant, not equal to exact: it is how llama.cpp's x86 kernels
//   multiply these types, so its greedy tokens can be matched, and it does a quarter of exact's
//   instructions per weight. Other types are multiplied exactly.

#include <cstdint>
#include <optional>
#include <string>

#include "engine/model_weights.h"

namespace kvscope {

class ThreadPool;

enum class MatmulMode { kExact, kFast };

const char* matmul_mode_name(MatmulMode mode);
std::optional<MatmulMode> parse_matmul_mode(const std::string& name);

// Which build of the kernels runs here: "as built" (this machine's, -march=native), or for a
// build for any x86-64, the best of "avx512-vnni", "avx2" and "x86-64" this CPU supports.
const char* matmul_kernels_name();
// Whether fast mode's scaled sums are fused multiply-adds in the kernels chosen (exact mode
// fuses exactly where cpu_ops.h's dot() does, whichever kernels run).
bool matmul_fast_fuses();

// out[r][o] = sum_i x[r][i] * w[o][i] for r < n_rows, o < w.rows. x is [n_rows][w.cols] fp32,
// out is [n_rows][w.rows] fp32.
void matmul(ThreadPool& pool, const float* x, int n_rows, const Matrix& w, float* out,
            MatmulMode mode = MatmulMode::kExact);

}  // namespace kvscope
