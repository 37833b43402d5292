#include "sessions/token_divergence.h"

#include <algorithm>
#include <map>

namespace kvscope {

namespace {
struct Produced {
    int32_t token = -1;
    int64_t step = -1;
    std::string text;
};

struct RunTokens {
    std::vector<std::string> order;                       // names, in order of arrival
    std::map<std::string, std::vector<Produced>> tokens;  // by position; first write wins
};

Result<RunTokens> read_tokens(SessionReader& run) {
    RunTokens out;
    if (run.last_step() < run.first_step()) return out;
    auto events = run.events(run.first_step(), run.last_step(),
                             {EventKind::kRequestArrive, EventKind::kToken});
    if (!events) return events.error();
    std::map<int32_t, std::string> names;
    for (const Event& e : *events) {
        if (e.kind == EventKind::kRequestArrive) {
            if (names.emplace(e.request, e.text).second) out.order.push_back(e.text);
            continue;
        }
        auto name = names.find(e.request);
        if (name == names.end() || e.a < 0) continue;
        std::vector<Produced>& seq = out.tokens[name->second];
        const auto pos = static_cast<size_t>(e.a);
        // A position is written again when a preempted request is recomputed: the first time
        // is when it was produced.
        if (pos >= seq.size()) seq.resize(pos + 1);
        if (seq[pos].step < 0) seq[pos] = {e.b, e.step, e.text};
    }
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
                d.left_text = l[p].text;
            }
            if (p < r.size()) {
                d.right_step = r[p].step;
                d.right_token = r[p].token;
                d.right_text = r[p].text;
            }
        }
        out.push_back(std::move(d));
    }
    return out;
}

}  // namespace kvscope
