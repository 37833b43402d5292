#pragma once
// Models of real shapes with random weights, made at load from a seed: `--model
// synthetic:qwen2.5-0.5b` measures a real size (bytes per step, bandwidth, ops) with nothing
// downloaded. No tokenizer (prompts are ids), and the text is noise: these are for measuring,
// not reading. The CPU backend holds fp32 weights, so it takes only the small shapes.

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
    bool cpu = false;              // small enough for fp32 weights on a CPU
    int64_t parameters() const;
};

const std::vector<SyntheticShape>& synthetic_shapes();

constexpr const char* kSyntheticPrefix = "synthetic:";
bool is_synthetic_model(const std::string& path);

// "synthetic:NAME": the shape's weights, uniform with each matrix's rows at unit variance over
// sqrt(inputs), norms at 1. Unknown names are refused listing the known ones; shapes too big for
// the CPU backend say how big they are.
Result<LoadedModel> make_synthetic_model(const std::string& spec, uint64_t seed = 1);

}  // namespace kvscope
