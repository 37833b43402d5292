#pragma once
// Loads a model file, whichever format it is in: GGUF (by its magic) or llama2.c `.bin` (no
// magic; recognised by a header that makes sense). Every failure is an Error naming the file
// and the problem; nothing throws.

#include <memory>
#include <optional>
#include <string>

#include "base/result.h"
#include "model_config.h"
#include "model_weights.h"
#include "tokenizer.h"

namespace kvscope {

struct LoadedModel {
    ModelConfig config;
    ModelWeights weights;
    std::shared_ptr<const Tokenizer> tokenizer;  // null for llama2.c files: they carry none
    std::string format;                          // "gguf v3", "llama2.c"
    std::string path;
};

Result<LoadedModel> load_model(const std::string& path);

}  // namespace kvscope
