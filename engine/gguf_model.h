#pragma once
// A Llama-family model (llama, mistral, qwen2) from a parsed GGUF file: config from the
// {arch}.* metadata keys, fp32 weight views (zero copy for aligned F32 tensors, dequantized
// copies otherwise), every tensor's shape checked against the config.

#include <memory>

#include "engine/gguf_file.h"
#include "engine/model_loader.h"

namespace kvscope {

// `file` is kept alive by the returned weights.
Result<LoadedModel> model_from_gguf(std::shared_ptr<const GgufFile> file);

}  // namespace kvscope
