#include "sessions/attached_index.h"

#include <algorithm>
#include <cstdio>
#include <tuple>

namespace kvscope {

std::string hash_hex(uint64_t hash) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(hash));
    return buf;
}

AttachedIndex AttachedIndex::build(const TimelineState& state) {
    AttachedIndex x;
    const RunInfo& info = state.info;
    if (info.publishers.empty() || state.attached.size() != state.blocks.size()) return x;
    const size_t n = state.blocks.size();
    x.node_of_block.assign(n, -1);
    x.publishers.resize(info.publishers.size());
    // One node per held hash, its slots in slot order.
    for (size_t b = 0; b < n; ++b) {
        const BlockState& st = state.blocks[b];
        if (st.refcount <= 0 || !st.hash) continue;
        auto [it, added] = x.by_hash_.emplace(*st.hash, static_cast<int32_t>(x.nodes.size()));
        if (added) {
            x.nodes.emplace_back();
            x.nodes.back().hash = *st.hash;
        }
        x.nodes[static_cast<size_t>(it->second)].blocks.push_back(static_cast<int32_t>(b));
        x.node_of_block[b] = it->second;
        int32_t p = info.publisher_of(static_cast<int32_t>(b));
        if (p >= 0) {
            PublisherHeld& h = x.publishers[static_cast<size_t>(p)];
            ++h.held;
            auto m = static_cast<size_t>(state.attached[b].medium);
            if (m < h.by_medium.size()) ++h.by_medium[m];
        }
    }
    // Parents: the first slot's parent hash (every copy of a hash has the same chain).
    const auto count = static_cast<int32_t>(x.nodes.size());
    for (int32_t i = 0; i < count; ++i) {
        PrefixNode& node = x.nodes[static_cast<size_t>(i)];
        const AttachedBlock& a = state.attached[static_cast<size_t>(node.slot())];
        if (!a.has_parent || a.parent == node.hash) continue;
        if (int32_t p = x.find(a.parent); p >= 0) {
            node.parent = p;
            x.nodes[static_cast<size_t>(p)].children.push_back(i);
        }
    }
    // Walk each tree from its root; nodes left unvisited sit on a loop: cut it there.
    std::vector<uint8_t> seen(static_cast<size_t>(count), 0);
    std::vector<int32_t> roots, post;  // post: children before parents
    std::vector<std::pair<int32_t, size_t>> stack;
    auto walk_from = [&](int32_t root) {
        seen[static_cast<size_t>(root)] = 1;
        stack.assign(1, {root, 0});
        while (!stack.empty()) {
            auto& [v, next] = stack.back();
            PrefixNode& node = x.nodes[static_cast<size_t>(v)];
            if (next < node.children.size()) {
                int32_t c = node.children[next++];
                if (seen[static_cast<size_t>(c)]) continue;
                seen[static_cast<size_t>(c)] = 1;
                stack.push_back({c, 0});
            } else {
                post.push_back(v);
                stack.pop_back();
            }
        }
    };
    for (int32_t i = 0; i < count; ++i)
        if (x.nodes[static_cast<size_t>(i)].parent < 0) {
            roots.push_back(i);
            walk_from(i);
        }
    for (int32_t i = 0; i < count; ++i)
        if (!seen[static_cast<size_t>(i)]) {
            PrefixNode& node = x.nodes[static_cast<size_t>(i)];
            auto& siblings = x.nodes[static_cast<size_t>(node.parent)].children;
            siblings.erase(std::find(siblings.begin(), siblings.end(), i));
            node.parent = -1;
            roots.push_back(i);
            walk_from(i);
        }
    // A child a loop cut away from several parents is listed once: drop stale entries.
    for (int32_t i = 0; i < count; ++i) {
        auto& ch = x.nodes[static_cast<size_t>(i)].children;
        std::erase_if(ch, [&](int32_t c) { return x.nodes[static_cast<size_t>(c)].parent != i; });
    }
    // Chains through each node and the longest chain below it, children before parents.
    std::vector<int32_t> height(static_cast<size_t>(count), 1);
    for (int32_t v : post) {
        PrefixNode& node = x.nodes[static_cast<size_t>(v)];
        node.chains = node.children.empty() ? 1 : 0;
        for (int32_t c : node.children) {
            node.chains += x.nodes[static_cast<size_t>(c)].chains;
            height[static_cast<size_t>(v)] =
                std::max(height[static_cast<size_t>(v)], height[static_cast<size_t>(c)] + 1);
        }
    }
    // Children with the most chains first, then the deepest.
    for (PrefixNode& node : x.nodes)
        std::sort(node.children.begin(), node.children.end(), [&](int32_t a, int32_t b) {
            const PrefixNode &na = x.nodes[static_cast<size_t>(a)],
                             &nb = x.nodes[static_cast<size_t>(b)];
            return std::tie(nb.chains, height[static_cast<size_t>(b)], na.hash) <
                   std::tie(na.chains, height[static_cast<size_t>(a)], nb.hash);
        });
    // Trees: depth, sizes and publishers, in one depth-first walk each (pre-order).
    std::vector<PrefixTree> trees;
    std::vector<std::vector<int32_t>> tree_walks;
    for (int32_t root : roots) {
        PrefixTree t;
        t.root = root;
        std::vector<int32_t> order;
        std::vector<int32_t> todo{root};
        x.nodes[static_cast<size_t>(root)].depth = 0;
        while (!todo.empty()) {
            int32_t v = todo.back();
            todo.pop_back();
            order.push_back(v);
            PrefixNode& node = x.nodes[static_cast<size_t>(v)];
            const auto& tokens = state.attached[static_cast<size_t>(node.slot())].tokens;
            node.path_tokens =
                (node.parent >= 0 ? x.nodes[static_cast<size_t>(node.parent)].path_tokens : 0) +
                static_cast<int64_t>(tokens.size());
            t.depth = std::max(t.depth, node.depth + 1);
            ++t.nodes;
            t.blocks += static_cast<int32_t>(node.blocks.size());
            if (node.children.empty()) ++t.chains;
            for (int32_t b : node.blocks)
                if (int32_t p = info.publisher_of(b); p >= 0) t.publishers.push_back(p);
            for (auto c = node.children.rbegin(); c != node.children.rend(); ++c) {
                x.nodes[static_cast<size_t>(*c)].depth = node.depth + 1;
                todo.push_back(*c);
            }
        }
        std::sort(t.publishers.begin(), t.publishers.end());
        t.publishers.erase(std::unique(t.publishers.begin(), t.publishers.end()),
                           t.publishers.end());
        trees.push_back(std::move(t));
        tree_walks.push_back(std::move(order));
    }
    std::vector<size_t> by_size(trees.size());
    for (size_t i = 0; i < by_size.size(); ++i)
        by_size[i] = i;
    std::sort(by_size.begin(), by_size.end(), [&](size_t a, size_t b) {
        const PrefixTree &ta = trees[a], &tb = trees[b];
        uint64_t ha = x.nodes[static_cast<size_t>(ta.root)].hash,
                 hb = x.nodes[static_cast<size_t>(tb.root)].hash;
        return std::tie(tb.blocks, tb.depth, ha) < std::tie(ta.blocks, ta.depth, hb);
    });
    x.walk.reserve(x.nodes.size());
    for (size_t i : by_size) {
        const auto t = static_cast<int32_t>(x.trees.size());
        for (int32_t v : tree_walks[i]) {
            x.nodes[static_cast<size_t>(v)].tree = t;
            x.walk.push_back(v);
            for (int32_t b : x.nodes[static_cast<size_t>(v)].blocks)
                if (int32_t p = info.publisher_of(b); p >= 0)
                    x.publishers[static_cast<size_t>(p)].order.push_back(b);
        }
        x.trees.push_back(std::move(trees[i]));
    }
    x.hot = x.hot_prefixes(32);
    return x;
}

int32_t AttachedIndex::find(uint64_t hash) const {
    auto it = by_hash_.find(hash);
    return it == by_hash_.end() ? -1 : it->second;
}

std::vector<int32_t> AttachedIndex::hot_prefixes(size_t limit) const {
    std::vector<int32_t> hot;
    for (size_t i = 0; i < nodes.size(); ++i)
        if (nodes[i].children.size() >= 2) hot.push_back(static_cast<int32_t>(i));
    auto more = [&](int32_t a, int32_t b) {
        const PrefixNode &na = nodes[static_cast<size_t>(a)], &nb = nodes[static_cast<size_t>(b)];
        return std::tie(nb.chains, nb.depth, na.hash) < std::tie(na.chains, na.depth, nb.hash);
    };
    if (hot.size() > limit) {
        std::partial_sort(hot.begin(), hot.begin() + static_cast<long>(limit), hot.end(), more);
        hot.resize(limit);
    } else {
        std::sort(hot.begin(), hot.end(), more);
    }
    return hot;
}

std::vector<int32_t> AttachedIndex::publishers_of(int32_t node, const RunInfo& info) const {
    std::vector<int32_t> out;
    if (node < 0 || static_cast<size_t>(node) >= nodes.size()) return out;
    for (int32_t b : nodes[static_cast<size_t>(node)].blocks)
        if (int32_t p = info.publisher_of(b); p >= 0) out.push_back(p);
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
}

namespace {
bool is_hex(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}
char lower(char c) {
    return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}
bool is_space(char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}
}  // namespace

AttachedQuery parse_attached_query(std::string_view text) {
    AttachedQuery q;
    while (!text.empty() && is_space(text.front()))
        text.remove_prefix(1);
    while (!text.empty() && is_space(text.back()))
        text.remove_suffix(1);
    if (text.empty()) return q;
    bool tokens = false;
    std::string lowered;
    for (char c : text)
        lowered += lower(c);
    std::string_view t = lowered;
    if (t.starts_with("tokens:")) {
        tokens = true;
        t.remove_prefix(7);
    } else if (t.front() == '[') {
        tokens = true;
        t.remove_prefix(1);
        if (!t.empty() && t.back() == ']') t.remove_suffix(1);
    }
    // Split on spaces and commas.
    std::vector<std::string_view> words;
    for (size_t i = 0; i < t.size();) {
        while (i < t.size() && (is_space(t[i]) || t[i] == ','))
            ++i;
        size_t j = i;
        while (j < t.size() && !is_space(t[j]) && t[j] != ',')
            ++j;
        if (j > i) words.push_back(t.substr(i, j - i));
        i = j;
    }
    if (!tokens && words.size() == 1) {
        std::string_view h = words[0];
        if (h.starts_with("0x")) h.remove_prefix(2);
        if (h.empty() || h.size() > 16 || !std::all_of(h.begin(), h.end(), is_hex)) {
            q.kind = AttachedQuery::Kind::kInvalid;
            q.error = "'" + std::string(words[0]) +
                      "' is not a block hash (1 to 16 hex digits) or a list of token ids";
            return q;
        }
        q.kind = AttachedQuery::Kind::kHash;
        q.hex = std::string(h);
        return q;
    }
    if (words.empty()) {
        q.kind = AttachedQuery::Kind::kInvalid;
        q.error = "no token ids given";
        return q;
    }
    for (std::string_view w : words) {
        int64_t v = 0;
        bool ok = !w.empty() && w.size() <= 10;
        for (char c : w) {
            ok = ok && c >= '0' && c <= '9';
            if (ok) v = v * 10 + (c - '0');
        }
        if (!ok || v > INT32_MAX) {
            q.kind = AttachedQuery::Kind::kInvalid;
            q.error = "'" + std::string(w) + "' is not a token id (a number from 0 to 2^31-1)";
            q.tokens.clear();
            return q;
        }
        q.tokens.push_back(static_cast<int32_t>(v));
    }
    q.kind = AttachedQuery::Kind::kTokens;
    return q;
}

AttachedMatch search_attached(const AttachedIndex& index, const TimelineState& state,
                              const AttachedQuery& query) {
    AttachedMatch m;
    const RunInfo& info = state.info;
    m.blocks_per_publisher.assign(info.publishers.size(), 0);
    const size_t count = index.nodes.size();
    std::vector<uint8_t> marked(count, 0);
    auto mark = [&](int32_t v) { marked[static_cast<size_t>(v)] = 1; };
    if (query.kind == AttachedQuery::Kind::kHash) {
        for (size_t i = 0; i < count; ++i)
            if (hash_hex(index.nodes[i].hash).starts_with(query.hex)) {
                m.nodes.push_back(static_cast<int32_t>(i));
                mark(static_cast<int32_t>(i));
            }
    } else if (query.kind == AttachedQuery::Kind::kTokens && !query.tokens.empty()) {
        const std::vector<int32_t>& q = query.tokens;
        const auto qn = static_cast<int64_t>(q.size());
        // KMP failure function, to find the ids anywhere along a chain in one pass.
        std::vector<int32_t> fail(q.size(), 0);
        for (size_t i = 1, k = 0; i < q.size(); ++i) {
            while (k > 0 && q[i] != q[k])
                k = static_cast<size_t>(fail[k - 1]);
            if (q[i] == q[k]) ++k;
            fail[i] = static_cast<int32_t>(k);
        }
        // Per node, along the chain from its root: leading ids matched (-1: the chain parted
        // from them), the KMP state, and where the ids first completed (-1: not yet).
        std::vector<int64_t> lead(count, 0), first_end(count, -1);
        std::vector<int32_t> kmp(count, 0);
        m.leading_tokens_per_publisher.assign(info.publishers.size(), 0);
        for (int32_t v : index.walk) {  // parents come before their children
            const PrefixNode& node = index.nodes[static_cast<size_t>(v)];
            const auto& tokens = state.attached[static_cast<size_t>(node.slot())].tokens;
            const int64_t start = node.path_tokens - static_cast<int64_t>(tokens.size());
            int64_t l = 0, end = -1;
            int32_t k = 0;
            if (node.parent >= 0) {
                l = lead[static_cast<size_t>(node.parent)];
                end = first_end[static_cast<size_t>(node.parent)];
                k = kmp[static_cast<size_t>(node.parent)];
            }
            const bool had_prefix = l == qn, had_end = end >= 0;
            for (size_t i = 0; i < tokens.size(); ++i) {
                const int64_t at = start + static_cast<int64_t>(i);
                if (l >= 0 && l < qn) l = tokens[i] == q[static_cast<size_t>(at)] ? at + 1 : -1;
                if (end >= 0) continue;
                while (k > 0 && tokens[i] != q[static_cast<size_t>(k)])
                    k = fail[static_cast<size_t>(k - 1)];
                if (tokens[i] == q[static_cast<size_t>(k)]) ++k;
                if (k == qn) end = at;
            }
            lead[static_cast<size_t>(v)] = l;
            first_end[static_cast<size_t>(v)] = end;
            kmp[static_cast<size_t>(v)] = k;
            if (l > 0)
                for (int32_t b : node.blocks)
                    if (int32_t p = info.publisher_of(b); p >= 0) {
                        int32_t& best = m.leading_tokens_per_publisher[static_cast<size_t>(p)];
                        best = std::max(best, static_cast<int32_t>(l));
                    }
            const bool prefix_here = l == qn && !had_prefix;
            const bool found_here = end >= 0 && !had_end;
            if (!prefix_here && !found_here) continue;
            if (prefix_here)
                ++m.prefix_nodes;
            else
                ++m.contained_nodes;
            m.nodes.push_back(v);
            // Mark this block and those above it the ids run through (as many as the ids
            // span, so the walk is bounded by the query's length, not the chain's).
            const int64_t from = end - qn + 1;
            for (int32_t u = v; u >= 0 && index.nodes[static_cast<size_t>(u)].path_tokens > from;
                 u = index.nodes[static_cast<size_t>(u)].parent)
                mark(u);
        }
    }
    for (size_t i = 0; i < count; ++i)
        if (marked[i])
            for (int32_t b : index.nodes[i].blocks) {
                m.blocks.push_back(b);
                if (int32_t p = info.publisher_of(b); p >= 0)
                    ++m.blocks_per_publisher[static_cast<size_t>(p)];
            }
    std::sort(m.blocks.begin(), m.blocks.end());
    std::sort(m.nodes.begin(), m.nodes.end());
    // The one line the panel shows.
    auto publishers = [&]() {
        std::string s;
        for (size_t p = 0; p < m.blocks_per_publisher.size(); ++p)
            if (m.blocks_per_publisher[p] > 0)
                s += (s.empty() ? "" : ", ") + std::string("rank ") + std::to_string(p) + " (" +
                     std::to_string(m.blocks_per_publisher[p]) + ")";
        return s.empty() ? std::string("no rank") : s;
    };
    switch (query.kind) {
        case AttachedQuery::Kind::kEmpty:
            break;
        case AttachedQuery::Kind::kInvalid:
            m.summary = query.error;
            break;
        case AttachedQuery::Kind::kHash:
            m.summary = std::to_string(m.nodes.size()) + " hash" +
                        (m.nodes.size() == 1 ? "" : "es") + " starting " + query.hex +
                        ", held by " + publishers();
            break;
        case AttachedQuery::Kind::kTokens: {
            const size_t qn = query.tokens.size();
            m.summary = std::to_string(m.prefix_nodes) + " chain" +
                        (m.prefix_nodes == 1 ? "" : "s") + " start with the " + std::to_string(qn) +
                        " ids, " + std::to_string(m.contained_nodes) +
                        " contain them later; held by " + publishers();
            std::string partial;
            for (size_t p = 0; p < m.leading_tokens_per_publisher.size(); ++p) {
                int32_t l = m.leading_tokens_per_publisher[p];
                if (l > 0 && static_cast<size_t>(l) < qn && m.blocks_per_publisher[p] == 0)
                    partial += (partial.empty() ? "" : ", ") + std::string("rank ") +
                               std::to_string(p) + " the first " + std::to_string(l);
            }
            if (!partial.empty()) m.summary += "; only part: " + partial;
            break;
        }
    }
    return m;
}

}  // namespace kvscope
