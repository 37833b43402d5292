#pragma once
// The engine's CUDA backend: a Forward (engine/forward.h) that runs the model on one GPU.
// Plain C++ (no CUDA header), so the command line can name it; defined only in builds with
// CUDA (KVSCOPE_HAVE_CUDA). It compiles in CI and its tests skip there; `.ci/gpu-check` runs
// them where a GPU is (first on an H200, 2026-11-26: all pass; speed in bench/RESULTS.md).
//
// What a forward pass does on the device (cuda_forward.cpp):
//   embedding rows gathered on the host (exact) and uploaded with the step's block tables;
//   per layer: RMSNorm, Q/K/V as one cuBLAS product, RoPE, the paged K/V write, paged attention
//   (decode: split over keys for long contexts, GQA-aware; prefill otherwise), the output
//   projection, RMSNorm, gate/up as one product, SwiGLU, the down projection; then the final
//   norm and the classifier for the rows whose logits are wanted, and one copy back.
// Products are cuBLAS GEMMs with 16-bit weights (device_weights.h) and f32 accumulation; the f32
// activations go in as two 16-bit halves (kernels/split_gemm.h), so the activations lose
// (almost) nothing and the weights' rounding is the only difference from the CPU that matters.
// The rest are the kernels of kernels/. The KV cache is device_kv_cache.h.
//
// Supported: every model the CPU backend loads (weights converted at load), f32 and f16 KV,
// block-table holes and token eviction's per-lane holes, streaming eviction and compaction,
// copy-on-write, swapping, capture of attention probabilities for chosen heads. Refused in one
// line: int8/int4/int2 KV, eviction policies that score by attention or key norms (h2o, snapkv,
// tova, knorm: the kernels do not gather those statistics yet), head sizes the attention
// kernels do not take. With GPU probes (CudaForwardOptions::probes) and an op trace, every launch
// is attributed to its op and layer and the step's kernels, copies and DRAM samples go into the
// trace's device events. Decode steps are recorded as CUDA graphs and replayed (README.md: Decode
// steps as CUDA graphs). Not done: per-phase times.

#include <cstdint>
#include <memory>

#include "base/result.h"
#include "engine/forward.h"

namespace kvscope {

enum class CudaWeightType {
    kAuto,  // bf16 for BF16 files, else f16 where every value fits, else bf16 (device_weights.h)
    kBF16,
    kF16,
};

class GpuProbes;

struct CudaForwardOptions {
    int device = 0;
    CudaWeightType weights = CudaWeightType::kAuto;
    // Started by the caller (probes/gpu_probes.h) and outliving the backend; null: none.
    GpuProbes* probes = nullptr;
};

// Bytes of device memory the backend holds for `weights` (matrices in 16 bits, the classifier
// included, the token embedding not; norms and biases f32): what a decode step reads.
int64_t cuda_weight_bytes(const ModelConfig& config, const ModelWeights& weights);

// The CUDA backend for EngineOptions::backend.
ForwardFactory cuda_backend(CudaForwardOptions options = {});

// Makes it directly: uploads the weights and allocates the cache on `options.device`. Fails in
// one line when there is no usable device, cuBLAS cannot be loaded, the weights and cache do not
// fit the device's free memory, or the setup asks for what the backend does not support.
Result<std::unique_ptr<Forward>> make_cuda_forward(const ForwardSetup& setup,
                                                   const CudaForwardOptions& options = {});

}  // namespace kvscope
