#pragma once
// What each captured head does, in two numbers over all its captured rows: the mean probability
// on position 0 (attention sinks) and the mean mass on the last `recent` keys (local heads).
// Rows whose query position is below `recent` are left out, where both would be trivially high.

#include <cstdint>
#include <vector>

#include "base/result.h"
#include "sessions/session_reader.h"

namespace kvscope {

struct HeadSummary {
    int32_t layer = 0, head = 0;
    int64_t rows = 0;
    double mean_on_first = 0;   // mean p(key 0)
    double mean_on_recent = 0;  // mean sum of p over the last `recent` keys, the query included
};

Result<std::vector<HeadSummary>> summarize_attention(SessionReader& reader, int32_t recent);

}  // namespace kvscope
