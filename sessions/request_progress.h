#pragma once
// Where a request had got to in another recording: the first step at which request `name` holds
// at least `tokens` tokens. Compare uses it to line up two runs of one workload (paged and
// contiguous reach a request at different steps). A request's tokens only grow (recompute keeps
// them), so this is a binary search over seeks: about 17 for 100 000 steps.

#include <cstdint>
#include <string>

#include "sessions/session_reader.h"

namespace kvscope {

// -1 when the request never gets there (or the session has no steps).
int64_t first_step_with_tokens(SessionReader& reader, const std::string& name, int32_t tokens);

}  // namespace kvscope
