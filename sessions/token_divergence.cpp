#include "sessions/token_divergence.h"

#include <algorithm>
#include <map>

namespace kvscope {

namespace {
struct Produced {
    int32_t token = -1;
    int64_t step = -1;
    SharedText text;  // shared with the session's string table
};

struct RunTokens {
    std::vector<std::string> order;                       // names, in order of arrival
    std::map<std::string, std::vector<Produced>> tokens;  // by position; first write wins
};

// One pass over the run's events, one at a time: what it keeps is the tokens, each text held
// once however often the run names it.
Result<RunTokens> read_tokens(SessionReader& run) {
    RunTokens out;
    if (run.last_step() < run.first_step()) return out;
    std::map<int32_t, std::vector<Produced>*> by_request;
    Status walked = run.for_each_event(
        run.first_step(), run.last_step(), {EventKind::kRequestArrive, EventKind::kToken},
        [&](const Event& e, const SharedText& text) -> Status {
            if (e.kind == EventKind::kRequestArrive) {
                if (by_request.count(e.request)) return {};
                auto [it, added] = out.tokens.try_emplace(text.str());
                if (added) out.order.push_back(text.str());
                by_request[e.request] = &it->second;
                return {};
            }
            auto seq = by_request.find(e.request);
            if (seq == by_request.end() || e.a < 0) return {};
            const auto pos = static_cast<size_t>(e.a);
            // A position is written again when a preempted request is recomputed: the first
            // time is when it was produced. One past the end is the next token; further on is
            // a damaged file's (the Timeline ignores it too).
            if (pos > seq->second->size()) return {};
            if (pos == seq->second->size()) seq->second->emplace_back();
            Produced& p = (*seq->second)[pos];
            if (p.step < 0) p = {e.b, e.step, text};
            return {};
        });
    if (!walked) return walked.error();
    return out;
}
}  // namespace

Result<std::vector<TokenDivergence>> token_divergence(SessionReader& left, SessionReader& right) {
    auto a = read_tokens(left);
    if (!a) return a.error();
    auto b = read_tokens(right);
    if (!b) return b.error();
    std::vector<TokenDivergence> out;
    for (const std::string& name : a->order) {
        auto other = b->tokens.find(name);
        if (other == b->tokens.end()) continue;
        const std::vector<Produced>& l = a->tokens[name];
        const std::vector<Produced>& r = other->second;
        TokenDivergence d;
        d.request = name;
        const size_t common = std::min(l.size(), r.size());
        size_t p = 0;
        while (p < common && l[p].token == r[p].token)
            ++p;
        d.compared = static_cast<int32_t>(common);
        if (p < std::max(l.size(), r.size())) {
            d.position = static_cast<int32_t>(p);
            if (p < l.size()) {
                d.left_step = l[p].step;
                d.left_token = l[p].token;
                d.left_text = l[p].text.str();
            }
            if (p < r.size()) {
                d.right_step = r[p].step;
                d.right_token = r[p].token;
                d.right_text = r[p].text.str();
            }
        }
        out.push_back(std::move(d));
    }
    return out;
}

}  // namespace kvscope
