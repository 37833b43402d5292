#pragma once
// Turns what the user typed (text or ids) into prompt token ids for a model.

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.h"
#include "engine/model_loader.h"

namespace kvscope::app {

// Parses "1 2 3" or "1,2,3"; each id must be a non-negative integer below vocab_size.
Result<std::vector<int32_t>> parse_token_ids(const std::string& text, int32_t vocab_size);

// text given: encode it (error if the model has no tokenizer); ids given: parse them;
// neither: just the BOS token.
Result<std::vector<int32_t>> prompt_tokens(const LoadedModel& model, const std::string& text,
                                           const std::string& ids);

}  // namespace kvscope::app
