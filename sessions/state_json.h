#pragma once
// The state at a step as one JSON document (what `kvscope inspect --json` prints).

#include <cstdint>
#include <nlohmann/json.hpp>

#include "sessions/timeline_state.h"

namespace kvscope {

nlohmann::json state_to_json(const TimelineState& state, int64_t steps_total);

}  // namespace kvscope
