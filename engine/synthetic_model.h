#pragma once
// Models of real shapes with random weights, made at load from a seed: `--model
// synthetic:qwen2.5-0.5b` measures a real size (bytes per step, bandwidth, ops) with nothing
// downloaded. No tokenizer (prompts are ids), and the text is noise: these are for measuring,
// not reading. "synthetic:NAME:TYPE" picks the weights' type (f32 by default; f16, bf16, q8_0,
// q4_0, q4_1, q4_k, q6_k), so llama-3-8b fits a laptop as q4_0.

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.h"
#include "engine/model_loader.h"

namespace kvscope {

struct SyntheticShape {
    std::string name;
    ModelConfig config;
    bool tied_embeddings = false;  // the classifier is the token embedding
    int64_t parameters() const;
    // Bytes of its weights with every matrix in `type` (norms and biases stay fp32).
    int64_t weight_bytes(GgmlType type) const;
};

const std::vector<SyntheticShape>& synthetic_shapes();

constexpr const char* kSyntheticPrefix = "synthetic:";
bool is_synthetic_model(const std::string& path);

// "synthetic:NAME[:TYPE]": the shape's weights, uniform with each matrix's rows at unit variance
// over sqrt(inputs), norms at 1. Unknown names and types are refused listing the known ones;
// weights larger than `memory_limit` bytes (0: three quarters of this machine's memory) are
// refused saying how big they are.
Result<LoadedModel> make_synthetic_model(const std::string& spec, uint64_t seed = 1,
                                         uint64_t memory_limit = 0);

}  // namespace kvscope
