#include "sessions/state_json.h"

namespace kvscope {

nlohmann::json state_to_json(const TimelineState& s, int64_t steps_total) {
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
        std::string text;
        for (size_t k = static_cast<size_t>(r.prompt_len); k < r.token_text.size(); ++k)
            text += r.token_text[k];
        reqs.push_back({{"id", r.name},
                        {"index", r.index},
                        {"state", request_phase_name(r.phase)},
                        {"block_table", r.block_table},
                        {"num_tokens", r.num_tokens()},
                        {"prompt_tokens", r.prompt_len},
                        {"generated_tokens", std::max(0, r.num_tokens() - r.prompt_len)},
                        {"generated_text", text},
                        {"preemptions", r.preemptions}});
    }
    j["requests"] = std::move(reqs);
    j["metrics"] = s.metrics;
    return j;
}

}  // namespace kvscope
