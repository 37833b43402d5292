#pragma once
// Verifies a session file end to end: SQLite integrity, schema, every step's events decode,
// sequence numbers increase without gaps, per-step scalars agree with the events, and every
// keyframe equals the state rebuilt from the events before it.

#include <string>
#include <vector>

namespace kvscope {

struct CheckReport {
    bool opened = false;
    std::vector<std::string> problems;  // empty: the file is sound
    int64_t steps = 0, events = 0, keyframes = 0;
};

CheckReport check_session(const std::string& path);

}  // namespace kvscope
