#include "engine/eviction_policy.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "base/terminal_text.h"

namespace kvscope {

int32_t LaneStats::valid() const {
    return static_cast<int32_t>(
        std::count_if(position.begin(), position.end(), [](int32_t p) { return p >= 0; }));
}

std::vector<int32_t> valid_slots(const LaneStats& lane, const EvictionParams& p) {
    std::vector<int32_t> out;
    const auto slots = static_cast<int32_t>(lane.position.size());
    auto take = [&](int32_t first, int32_t end) {
        for (int32_t s = first; s < end; ++s)
            if (lane.position[static_cast<size_t>(s)] >= 0) out.push_back(s);
    };
    if (!p.held_blocks) {
        take(0, slots);
    } else {
        for (int32_t b : *p.held_blocks) {
            if (b * p.block_size >= slots) break;
            take(b * p.block_size, std::min(slots, (b + 1) * p.block_size));
        }
    }
    std::sort(out.begin(), out.end(), [&](int32_t a, int32_t b) {
        return lane.position[static_cast<size_t>(a)] < lane.position[static_cast<size_t>(b)];
    });
    return out;
}

namespace {

float at(const std::vector<float>& v, int32_t slot) {
    return static_cast<size_t>(slot) < v.size() ? v[static_cast<size_t>(slot)] : 0.0f;
}

// Drops the unprotected valid slots with the lowest `rank` (ties: the older first) until at most
// `budget` valid slots remain. `score` is what is reported for each.
template <class Rank, class Score>
void evict_lowest(const LaneStats& lane, const std::vector<int32_t>& slots,
                  const std::vector<bool>& protect, int32_t budget, const char* reason, Rank rank,
                  Score score, std::vector<EvictionChoice>& out) {
    auto excess = static_cast<int32_t>(slots.size()) - budget;
    if (excess <= 0) return;
    std::vector<size_t> order;
    for (size_t i = 0; i < slots.size(); ++i)
        if (!protect[i]) order.push_back(i);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return rank(slots[a]) < rank(slots[b]); });
    for (size_t k = 0; k < order.size() && excess > 0; ++k, --excess) {
        int32_t slot = slots[order[k]];
        out.push_back({slot, lane.position[static_cast<size_t>(slot)], score(slot), reason});
    }
}

// The `n` most recent of `slots` (in position order).
std::vector<bool> protect_recent(size_t count, int32_t n) {
    std::vector<bool> p(count, false);
    for (size_t i = count; i > 0 && n > 0; --i, --n)
        p[i - 1] = true;
    return p;
}

class Streaming final : public EvictionPolicy {
  public:
    std::string_view name() const override { return "streaming"; }
    void choose(const LaneStats& lane, const EvictionParams& p,
                std::vector<EvictionChoice>& out) const override {
        auto slots = valid_slots(lane, p);
        auto protect = protect_recent(slots.size(), p.budget - p.sinks);
        for (size_t i = 0; i < slots.size(); ++i)
            if (lane.position[static_cast<size_t>(slots[i])] < p.sinks) protect[i] = true;
        auto position = [&](int32_t s) { return lane.position[static_cast<size_t>(s)]; };
        evict_lowest(
            lane, slots, protect, p.budget, "outside-window", position,
            [&](int32_t s) { return static_cast<double>(position(s)); }, out);
    }
};

class HeavyHitters final : public EvictionPolicy {
  public:
    std::string_view name() const override { return "h2o"; }
    void choose(const LaneStats& lane, const EvictionParams& p,
                std::vector<EvictionChoice>& out) const override {
        auto slots = valid_slots(lane, p);
        int32_t window = std::min(p.window >= 0 ? p.window : p.budget / 2, p.budget);
        auto protect = protect_recent(slots.size(), window);
        auto acc = [&](int32_t s) { return static_cast<double>(at(lane.accumulated, s)); };
        evict_lowest(lane, slots, protect, p.budget, "low-accumulated-attention", acc, acc, out);
    }
};

class SnapKv final : public EvictionPolicy {
  public:
    std::string_view name() const override { return "snapkv"; }
    bool once_after_prefill() const override { return true; }
    void choose(const LaneStats& lane, const EvictionParams& p,
                std::vector<EvictionChoice>& out) const override {
        auto slots = valid_slots(lane, p);
        // The observation window is kept, but never beyond the budget itself.
        int32_t window = std::min(p.window >= 0 ? p.window : p.observation, p.budget);
        auto protect = protect_recent(slots.size(), window);
        // 1-D pooling over neighbouring kept positions (kernel centred, edges shortened), so that
        // a kept token brings its neighbours along, as SnapKV does to keep phrases whole.
        const int half = std::max(p.pool_kernel, 1) / 2;
        std::vector<double> pooled(slots.size());
        for (size_t i = 0; i < slots.size(); ++i) {
            size_t lo = i >= static_cast<size_t>(half) ? i - static_cast<size_t>(half) : 0;
            size_t hi = std::min(slots.size() - 1, i + static_cast<size_t>(half));
            double acc = p.max_pool ? -1e300 : 0.0;
            for (size_t k = lo; k <= hi; ++k) {
                double v = at(lane.observed, slots[k]);
                acc = p.max_pool ? std::max(acc, v) : acc + v;
            }
            pooled[i] = p.max_pool ? acc : acc / static_cast<double>(hi - lo + 1);
        }
        std::vector<double> by_slot(lane.position.size(), 0.0);
        for (size_t i = 0; i < slots.size(); ++i)
            by_slot[static_cast<size_t>(slots[i])] = pooled[i];
        auto score = [&](int32_t s) { return by_slot[static_cast<size_t>(s)]; };
        evict_lowest(lane, slots, protect, p.budget, "low-pooled-score", score, score, out);
    }
};

class Tova final : public EvictionPolicy {
  public:
    std::string_view name() const override { return "tova"; }
    void choose(const LaneStats& lane, const EvictionParams& p,
                std::vector<EvictionChoice>& out) const override {
        auto slots = valid_slots(lane, p);
        auto protect = protect_recent(slots.size(), 1);  // the newest token: the query itself
        auto current = [&](int32_t s) { return static_cast<double>(at(lane.current, s)); };
        evict_lowest(lane, slots, protect, p.budget, "low-current-attention", current, current,
                     out);
    }
};

class KeyNorm final : public EvictionPolicy {
  public:
    std::string_view name() const override { return "knorm"; }
    void choose(const LaneStats& lane, const EvictionParams& p,
                std::vector<EvictionChoice>& out) const override {
        auto slots = valid_slots(lane, p);
        std::vector<bool> protect(slots.size(), false);
        auto norm = [&](int32_t s) { return static_cast<double>(at(lane.key_norm, s)); };
        // Largest norms go first: rank by the negated norm, report the norm itself.
        evict_lowest(
            lane, slots, protect, p.budget, "high-key-norm", [&](int32_t s) { return -norm(s); },
            norm, out);
    }
};

class MorphKv final : public EvictionPolicy {
  public:
    std::string_view name() const override { return "morphkv"; }
    void choose(const LaneStats& lane, const EvictionParams& p,
                std::vector<EvictionChoice>& out) const override {
        auto slots = valid_slots(lane, p);
        const int32_t window = p.window >= 0 ? std::min(p.window, p.budget)
                                             : std::min(kMorphKvDefaultWindow, p.budget / 2);
        auto protect = protect_recent(slots.size(), window);
        // The window's queries are those of its tokens: the `window` newest positions.
        int32_t newest = -1;
        for (int32_t q : lane.window_query)
            newest = std::max(newest, q);
        std::vector<const std::vector<float>*> rows;
        for (size_t r = 0; r < lane.window_query.size(); ++r)
            if (lane.window_query[r] >= 0 && lane.window_query[r] > newest - window)
                rows.push_back(&lane.window_rows[r]);
        const bool max = p.window_aggregate == WindowAggregate::kMax;
        std::vector<double> by_slot(lane.position.size(), 0.0);
        for (size_t i = 0; i < slots.size(); ++i) {
            if (protect[i]) continue;
            double score = 0.0;
            for (const std::vector<float>* row : rows) {
                const double a = at(*row, slots[i]);
                score = max ? std::max(score, a) : score + a;
            }
            by_slot[static_cast<size_t>(slots[i])] = score;
        }
        auto score = [&](int32_t s) { return by_slot[static_cast<size_t>(s)]; };
        evict_lowest(lane, slots, protect, p.budget,
                     max ? "low-recent-window-max-attention" : "low-recent-window-summed-attention",
                     score, score, out);
    }
};

}  // namespace

const std::vector<std::string>& eviction_policy_names() {
    static const std::vector<std::string> names = {"streaming", "h2o",   "snapkv",
                                                   "tova",      "knorm", "morphkv"};
    return names;
}

Result<std::unique_ptr<EvictionPolicy>> make_eviction_policy(std::string_view name) {
    if (name == "streaming") return std::unique_ptr<EvictionPolicy>(new Streaming());
    if (name == "h2o") return std::unique_ptr<EvictionPolicy>(new HeavyHitters());
    if (name == "snapkv") return std::unique_ptr<EvictionPolicy>(new SnapKv());
    if (name == "tova") return std::unique_ptr<EvictionPolicy>(new Tova());
    if (name == "knorm") return std::unique_ptr<EvictionPolicy>(new KeyNorm());
    if (name == "morphkv") return std::unique_ptr<EvictionPolicy>(new MorphKv());
    std::string known = "none";
    for (const std::string& n : eviction_policy_names())
        known += ", " + n;
    return Error{"unknown eviction policy " + quote_for_message(name) + " (known: " + known + ")"};
}

std::vector<int32_t> layer_budgets(int32_t per_layer, int32_t n_layers, LayerBudget kind) {
    std::vector<int32_t> out(static_cast<size_t>(std::max(n_layers, 0)), per_layer);
    if (kind == LayerBudget::kUniform || n_layers < 2) return out;
    const int64_t total = static_cast<int64_t>(per_layer) * n_layers;
    int64_t given = 0;
    for (int32_t l = 0; l < n_layers; ++l) {
        double factor = 1.5 - static_cast<double>(l) / static_cast<double>(n_layers - 1);
        auto b = static_cast<int32_t>(std::floor(per_layer * factor));
        out[static_cast<size_t>(l)] = std::max(b, 1);
        given += out[static_cast<size_t>(l)];
    }
    // Rounding left tokens over (or took too many): settle them from the lowest layer up, so the
    // total is exactly the uniform one's.
    for (int32_t l = 0; given != total; l = (l + 1) % n_layers) {
        int32_t& b = out[static_cast<size_t>(l)];
        if (given < total) {
            ++b;
            ++given;
        } else if (b > 1) {
            --b;
            --given;
        }
    }
    return out;
}

}  // namespace kvscope
