#include "sessions/state_json.h"

#include <algorithm>

namespace kvscope {

namespace {
// The tokens a request generated (after its prompt).
size_t first_generated(const RequestState& r) {
    return std::min(static_cast<size_t>(std::max(r.prompt_len, 0)), r.token_text.size());
}
}  // namespace

Result<nlohmann::json> state_to_json(const TimelineState& s, int64_t steps_total,
                                     bool generated_text) {
    size_t text_bytes = 0;
    for (const auto& [i, r] : s.requests) {
        text_bytes += r.name.size();
        if (generated_text)
            for (size_t k = first_generated(r); k < r.token_text.size(); ++k)
                text_bytes += r.token_text[k].size();
        if (text_bytes > kMaxStateJsonText)
            return Error{"the requests' texts at step " + std::to_string(s.step) +
                         " come to more than " + std::to_string(kMaxStateJsonText >> 20) +
                         " MiB (request " + std::to_string(i) +
                         "'s tokens name long texts over and over), more than one document "
                         "holds"};
    }
    nlohmann::json j;
    j["step"] = s.step;
    j["steps_total"] = steps_total;
    int32_t used = s.blocks_used(), cached = s.blocks_cached();
    auto total = static_cast<int32_t>(s.blocks.size());
    j["pool"] = {{"total", total},
                 {"used", used},
                 {"free", total - used},
                 {"cached", cached},
                 {"block_size", s.info.block_size},
                 {"allocator", s.info.allocator}};
    nlohmann::json reqs = nlohmann::json::array();
    for (const auto& [i, r] : s.requests) {
        nlohmann::json q = {{"id", r.name.str()},
                            {"index", r.index},
                            {"state", request_phase_name(r.phase)},
                            {"block_table", r.block_table},
                            {"num_tokens", r.num_tokens()},
                            {"prompt_tokens", r.prompt_len},
                            {"generated_tokens", std::max(0, r.num_tokens() - r.prompt_len)},
                            {"preemptions", r.preemptions}};
        if (generated_text) {
            std::string text;
            for (size_t k = first_generated(r); k < r.token_text.size(); ++k)
                text += r.token_text[k].str();
            q["generated_text"] = std::move(text);
        }
        reqs.push_back(std::move(q));
    }
    j["requests"] = std::move(reqs);
    j["metrics"] = s.metrics;
    return j;
}

}  // namespace kvscope
