#pragma once
// --ctx-size on generate, run and gui: serve a context other than the one the model was trained
// on, as llama.cpp's --ctx-size does. Past the trained context RoPE still gives every position an
// angle, but the model never saw those distances: text quality there is out of its range, while
// speed and memory are what they would be. It is how a policy that holds the cache to a budget
// (StreamingLLM's use) generates beyond the trained context, and how `none` is timed beside it.

#include <CLI/CLI.hpp>
#include <cstdint>
#include <memory>
#include <string>

#include "base/result.h"
#include "engine/model_loader.h"

namespace kvscope::app {

void add_ctx_size_flag(CLI::App& sub, int32_t& ctx_size);

// Loads the model at `path` and, when ctx_size > 0, serves that context instead of the trained
// one; a note on stderr says when it goes past the trained context.
Result<std::shared_ptr<const LoadedModel>> load_model_with_context(const std::string& path,
                                                                   int32_t ctx_size);

}  // namespace kvscope::app
