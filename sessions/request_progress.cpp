#include "sessions/request_progress.h"

namespace kvscope {

int64_t first_step_with_tokens(SessionReader& reader, const std::string& name, int32_t tokens) {
    auto holds = [&](int64_t step) {
        auto st = reader.state_at(step);
        if (!st) return false;
        for (const auto& [i, q] : (*st)->requests)
            if (q.name == name) return q.num_tokens() >= tokens;
        return false;
    };
    int64_t lo = reader.first_step(), hi = reader.last_step();
    if (hi < lo || !holds(hi)) return -1;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        if (holds(mid))
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

}  // namespace kvscope
