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

// Only a model file's tokenizer: a vocabulary-only GGUF (llama.cpp ships such files for its
// tokenizer tests) is enough, and no weight is read. Files without one (llama2.c checkpoints,
// synthetic models, a GGUF without tokenizer.ggml.model) are refused saying so.
Result<std::shared_ptr<const Tokenizer>> load_tokenizer(const std::string& path);

}  // namespace kvscope
