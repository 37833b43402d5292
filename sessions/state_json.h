#pragma once
// The state at a step as one JSON document (what `kvscope inspect --json` prints).

#include <cstdint>
#include <nlohmann/json.hpp>

#include "base/result.h"
#include "sessions/timeline_state.h"

namespace kvscope {

// The most text (request names and generated texts together) one document holds. A state holds
// each text once however many tokens name it (SharedText), but a document writes it out for
// each: past this it is refused, saying so, rather than built.
inline constexpr size_t kMaxStateJsonText = size_t{64} << 20;

// `generated_text` false leaves each request's generated text out (what a summary without the
// texts needs), and with it the bound.
Result<nlohmann::json> state_to_json(const TimelineState& state, int64_t steps_total,
                                     bool generated_text = true);

}  // namespace kvscope
