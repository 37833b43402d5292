#pragma once
// The model's weights in device memory, converted once at load: every matrix to a 16-bit type
// (cuBLAS's tensor-core inputs), norms and biases f32 as on the CPU. The token embedding stays
// on the host (a step gathers its rows there, exactly, and uploads them); the classifier is
// uploaded even when it is tied to the embedding.
//
// Matrices keep the engine's layout, row-major [out][in] (model_weights.h), and projections that
// read the same input are stacked into one matrix so one product computes them: Q, K and V as
// [q_dim + 2 kv_dim][dim] (rows of wq, then wk, then wv), gate and up as [2 hidden][dim].
//
// Which 16-bit type (CudaWeightType::kAuto): a file's BF16 matrices stay bf16 and its F16 ones
// f16 (both exact); anything else (F32, Q8_0, Q4_0, the K-quants: dequantized on the host by the
// engine's own converters, model_weights.h) becomes f16 when every value fits f16's range, which
// keeps three more bits than bf16 (on the bundled model the logits then stay within 0.002 of the
// CPU's rather than 0.01), and bf16 otherwise. A stacked matrix takes one type for all of it.

#include <cstdint>
#include <vector>

#include "base/result.h"
#include "engine/model_config.h"
#include "engine/model_weights.h"
#include "engine_cuda/cuda_forward.h"
#include "engine_cuda/cuda_support.h"
#include "kernels/dtype.h"

namespace kvscope {
class ThreadPool;
}

namespace kvscope::gpu {

struct DeviceMatrix {
    const void* data = nullptr;  // [rows][cols] of type
    kernels::DType type = kernels::DType::kBF16;
    int rows = 0, cols = 0;
    int64_t bytes() const { return static_cast<int64_t>(rows) * cols * 2; }
};

struct DeviceLayer {
    const float* attn_norm = nullptr;  // [dim]
    DeviceMatrix qkv;                  // [q_dim + 2 kv_dim][dim]
    const float* qkv_bias = nullptr;   // [q_dim + 2 kv_dim], or null (no biases)
    DeviceMatrix wo;                   // [dim][q_dim]
    const float* ffn_norm = nullptr;   // [dim]
    DeviceMatrix gate_up;              // [2 hidden][dim]
    DeviceMatrix down;                 // [dim][hidden]
};

class DeviceWeights {
  public:
    // Bytes the device will hold for `weights` (16-bit matrices, f32 vectors), to check against
    // free memory before converting anything.
    static int64_t device_bytes(const ModelConfig& config, const ModelWeights& weights);
    // Converts (across `pool`) and uploads; fails on a device error, or when `type` forces f16
    // on values beyond its range.
    Status upload(const ModelConfig& config, const ModelWeights& weights, CudaWeightType type,
                  ThreadPool& pool);

    std::vector<DeviceLayer> layers;
    const float* output_norm = nullptr;  // [dim]
    DeviceMatrix output;                 // [vocab][dim]
    int64_t bytes = 0;                   // device bytes held

  private:
    Result<DeviceMatrix> upload_stacked(const std::vector<const Matrix*>& parts,
                                        CudaWeightType type, ThreadPool& pool,
                                        const std::string& what);
    Result<const float*> upload_vector(const std::vector<const Vector*>& parts,
                                       const std::string& what);
    std::vector<DeviceMemory> memory_;
};

}  // namespace kvscope::gpu
