#pragma once
// Where two recordings of the same prompts part ways: for each request both ran (matched by
// name), the first position whose token differs, and the step at which each run produced it.
// Compare shows it for a full cache against a policy or a quantized cache: from that token on the
// two runs write different text. Read from token events alone (no seeks), so it costs one pass
// over each run's tokens.

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.h"
#include "sessions/session_reader.h"

namespace kvscope {

struct TokenDivergence {
    std::string request;      // the request's name, as in both runs
    int32_t compared = 0;     // positions both runs produced
    int32_t position = -1;    // first position that differs; -1 when none does
    int64_t left_step = -1;   // the step that produced it on each side (-1: that run stopped
    int64_t right_step = -1;  // before it)
    int32_t left_token = -1, right_token = -1;
    std::string left_text, right_text;
    bool identical() const { return position < 0; }
};

// Every request of `left` that `right` also has, in left's order of arrival.
Result<std::vector<TokenDivergence>> token_divergence(SessionReader& left, SessionReader& right);

}  // namespace kvscope
