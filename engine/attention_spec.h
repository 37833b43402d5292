#pragma once
// `--capture-attention` values: "all", "none", or a list of LAYER:HEAD pairs where either side
// may be '*' ("0:*,3:5"). Resolved against a model into one flag per (layer, query head).

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.h"
#include "engine/model_config.h"

namespace kvscope {

Result<std::vector<uint8_t>> parse_attention_spec(const std::string& spec,
                                                  const ModelConfig& config);

}  // namespace kvscope
