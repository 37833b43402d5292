#include "engine/kv_eviction.h"

#include "engine/kv_cache.h"

#include <algorithm>
#include <cmath>

#include "base/real_number.h"
#include "base/terminal_text.h"
#include "engine/kv_mixing.h"

namespace kvscope {

Status parse_kv_budget(const std::string& text, EvictionOptions& out) {
    const bool percent = !text.empty() && text.back() == '%';
    std::string_view number(text);
    if (percent) number.remove_suffix(1);
    constexpr double kMaxTokens = 1 << 24;
    auto v = parse_real(number, percent ? RealRange{0, 100} : RealRange{1, kMaxTokens});
    if (percent) {
        if (!v || *v == 0)
            return Error{"--kv-budget " + quote_for_message(text) +
                         " is not a percentage between 0 and 100 (0 excluded)"};
        out.budget_percent = *v;
        out.budget_tokens = 0;
        return {};
    }
    if (!v || *v != std::floor(*v))
        return Error{"--kv-budget " + quote_for_message(text) +
                     " must be a whole number of tokens, at least 1 and at most " +
                     format_real(kMaxTokens) + ", or a percentage (P%)"};
    out.budget_tokens = static_cast<int32_t>(*v);
    out.budget_percent = 0;
    return {};
}

Result<PositionMode> parse_position_mode(const std::string& text) {
    if (text == "cache") return PositionMode::kCache;
    if (text == "absolute") return PositionMode::kAbsolute;
    return Error{"--positions " + quote_for_message(text) + " must be cache or absolute"};
}

const char* position_mode_name(const EvictionOptions& options) {
    return options.cache_positions() ? "cache" : "absolute";
}

Status validate_eviction_options(const EvictionOptions& o) {
    if (o.merge_from < -1)
        return Error{"--merge-layers " + std::to_string(o.merge_from) +
                     " must be a layer of the model, from 0"};
    if (!(o.merge_max_distance >= 0 && o.merge_max_distance <= 1))
        return Error{
            "--merge-distance must be an angular distance from 0 to 1 (arccos of the "
            "cosine over pi; 1 merges every token)"};
    if (o.merge_from >= 0 && o.active())
        return Error{"--merge-layers cannot go with --policy " + o.policy +
                     ": a merged token is one direction shared by two layers, and eviction drops "
                     "and compaction moves one layer's token alone"};
    if (o.positions == PositionMode::kCache && o.policy != "streaming")
        return Error{"--positions cache needs --policy streaming, not " + o.policy +
                     ": only its sinks and recent window keep a cache whose places can stand in "
                     "for positions (leave --positions out, or give absolute)"};
    if (!o.active()) return {};
    if (auto p = make_eviction_policy(o.policy); !p) return p.error();
    if (o.budget_tokens <= 0 && o.budget_percent <= 0)
        return Error{"--policy " + o.policy + " needs --kv-budget (tokens, or a percentage)"};
    if (o.sinks < 0) return Error{"--sinks must not be negative"};
    // morphkv ranks older tokens by the attention of the window's queries: without a window
    // there is nothing to rank them by.
    if (o.policy == "morphkv" && o.window == 0)
        return Error{
            "--window 0 leaves morphkv no recent queries to rank older tokens by: give "
            "a --window of at least 1 (default " +
            std::to_string(kMorphKvDefaultWindow) + ", at most half the budget)"};
    // h2o, snapkv and morphkv keep the --window most recent tokens and choose the rest of the
    // budget by their scores; a window as large as the budget leaves nothing to choose and
    // quietly makes any of them a sliding window. (A percentage budget grows with the sequence;
    // the window is cut to it while the budget is smaller.)
    if ((o.policy == "h2o" || o.policy == "snapkv" || o.policy == "morphkv") &&
        o.budget_tokens > 0 && o.window >= o.budget_tokens)
        return Error{"--window " + std::to_string(o.window) + " leaves no room in --kv-budget " +
                     std::to_string(o.budget_tokens) + " for tokens " + o.policy +
                     " chooses (it keeps only the most recent, as --policy streaming): give a "
                     "--window below " +
                     std::to_string(o.budget_tokens)};
    if (o.policy == "streaming" && o.budget_tokens > 0 && o.budget_tokens < o.sinks + 1)
        return Error{"--kv-budget " + std::to_string(o.budget_tokens) +
                     " leaves no room for recent tokens after " + std::to_string(o.sinks) +
                     " sinks (it must be at least " + std::to_string(o.sinks + 1) + ")"};
    return {};
}

Status validate_merge_layers(int32_t from, int32_t n_layers) {
    if (from >= n_layers)
        return Error{"--merge-layers " + std::to_string(from) +
                     " is past the model's layers: it has " + std::to_string(n_layers) +
                     " (give a layer from 0 to " + std::to_string(n_layers - 1) + ")"};
    return {};
}

SequenceLanes::SequenceLanes(int32_t layers, int32_t kv_heads, int32_t block_size_)
    : n_layers(layers),
      n_kv_heads(kv_heads),
      block_size(block_size_),
      lanes(static_cast<size_t>(std::max(layers, 0) * std::max(kv_heads, 0))) {}

void SequenceLanes::append(int32_t first_position, int32_t count) {
    for (LaneStats& lane : lanes) {
        for (int32_t i = 0; i < count; ++i)
            lane.position.push_back(first_position + i);
        size_t n = lane.position.size();
        if (want_accumulated) lane.accumulated.resize(n, 0.0f);
        if (want_current) lane.current.resize(n, 0.0f);
        if (want_observed) lane.observed.resize(n, 0.0f);
        if (want_key_norm) lane.key_norm.resize(n, 0.0f);
        if (want_low) lane.low.resize(n, 0.0f);
        if (merge_from >= 0) lane.merged.resize(n, 0.0f);
        for (std::vector<float>& row : lane.window_rows)
            row.resize(n, 0.0f);
    }
    for (int32_t b = BlockManager::blocks_for(slots, block_size);
         b < BlockManager::blocks_for(slots + count, block_size); ++b)
        held_blocks.push_back(b);
    slots += count;
}

bool SequenceLanes::hole_everywhere(int32_t slot) const {
    for (const LaneStats& lane : lanes)
        if (lane.position[static_cast<size_t>(slot)] >= 0) return false;
    return true;
}

int64_t SequenceLanes::lane_blocks_held() const {
    int64_t held = 0;
    for (const LaneStats& lane : lanes)
        for_each_held_span(slots, [&](int32_t first, int32_t count) {
            held +=
                std::any_of(lane.position.begin() + first, lane.position.begin() + first + count,
                            [](int32_t p) { return p >= 0; });
        });
    return held;
}

int32_t SequenceLanes::valid_tokens() const {
    int32_t n = 0;
    for (const LaneStats& lane : lanes)
        n += lane.valid();
    return n;
}

Result<std::unique_ptr<KvEvictor>> KvEvictor::create(const EvictionOptions& options,
                                                     int32_t n_layers) {
    if (Status s = validate_eviction_options(options); !s) return s.error();
    if (Status s = validate_merge_layers(options.merge_from, n_layers); !s) return s.error();
    std::unique_ptr<KvEvictor> e(new KvEvictor());
    e->options_ = options;
    if (options.active()) {
        auto policy = make_eviction_policy(options.policy);
        if (!policy) return policy.error();
        e->policy_ = std::move(policy).value();
    }
    e->n_layers_ = n_layers;
    return e;
}

std::unique_ptr<SequenceLanes> KvEvictor::new_lanes(int32_t n_layers, int32_t n_kv_heads,
                                                    int32_t block_size, int32_t prompt_len) const {
    auto lanes = std::make_unique<SequenceLanes>(n_layers, n_kv_heads, block_size);
    const std::string_view name = policy_ ? policy_->name() : "none";
    // Mixed precision ranks by normalized attention: accumulated attention over its queries.
    lanes->want_accumulated = name == "h2o" || options_.mixed;
    lanes->want_low = options_.mixed.has_value();
    lanes->merge_from = options_.merge_from;
    lanes->want_current = name == "tova";
    lanes->want_observed = name == "snapkv";
    lanes->want_key_norm = name == "knorm";
    lanes->observe_from = std::max(0, prompt_len - options_.observation);
    lanes->cache_positions = options_.cache_positions();
    if (name == "morphkv") {
        lanes->window_rows = options_.window >= 0 ? options_.window : kMorphKvDefaultWindow;
        for (LaneStats& lane : lanes->lanes) {
            lane.window_rows.resize(static_cast<size_t>(lanes->window_rows));
            lane.window_query.assign(static_cast<size_t>(lanes->window_rows), -1);
        }
    }
    return lanes;
}

int32_t KvEvictor::budget(int32_t layer, int32_t computed) const {
    int32_t per_layer =
        options_.budget_tokens > 0
            ? options_.budget_tokens
            : static_cast<int32_t>(std::ceil(options_.budget_percent / 100.0 * computed));
    // Streaming keeps its sinks whatever the budget; every lane keeps at least one token.
    per_layer = std::max(per_layer, options_.policy == "streaming" ? options_.sinks + 1 : 1);
    return layer_budgets(per_layer, n_layers_, options_.layer_budget)[static_cast<size_t>(layer)];
}

int32_t KvEvictor::chunk_within_budget(const SequenceLanes* lanes, int32_t computed,
                                       int32_t wanted) const {
    if (!options_.cache_positions() || wanted <= 1) return wanted;
    int32_t room = wanted;
    for (int32_t layer = 0; layer < n_layers_; ++layer) {
        // Streaming keeps the same tokens in every KV head of a layer: its first lane speaks
        // for the layer. The chunk's last token takes place kept + room - 1, at most the budget.
        const int32_t kept = lanes ? lanes->lane(layer, 0).valid() : 0;
        room = std::min(room, budget(layer, computed) + 1 - kept);
    }
    return std::max(room, 1);
}

int64_t KvEvictor::after_step(SequenceLanes& lanes, BlockTable& table, int32_t computed,
                              int32_t prompt_len, int32_t owner, BlockManager& blocks,
                              KvBlockStore& storage, const Reporter& reporter) const {
    const int64_t evicted =
        policy_ ? evict(lanes, table, computed, prompt_len, owner, blocks, storage, reporter) : 0;
    if (options_.mixed) lower_precision(lanes, table, computed, owner, blocks, storage, reporter);
    if (options_.merge_from >= 0) merge_layers(lanes, table, owner, blocks, storage, reporter);
    return evicted;
}

void KvEvictor::lower_precision(SequenceLanes& lanes, const BlockTable& table, int32_t computed,
                                int32_t owner, const BlockManager& blocks, KvBlockStore& storage,
                                const Reporter& reporter) const {
    // When a prefill ends (the first step) and then once every block of tokens.
    if (computed < lanes.next_precision_at) return;
    const int32_t bs = lanes.block_size;
    lanes.next_precision_at = (computed / bs + 1) * bs;
    const std::string change =
        std::string(kv_dtype_name(options_.mixed->hi)) + "->" + kv_dtype_name(options_.mixed->lo);
    std::vector<PrecisionChoice> choices;
    for (int32_t layer = 0; layer < lanes.n_layers; ++layer)
        for (int32_t kvh = 0; kvh < lanes.n_kv_heads; ++kvh) {
            LaneStats& lane = lanes.lane(layer, kvh);
            choices.clear();
            choose_low_precision(lane, &lanes.held_blocks, bs, computed, options_.mixed->percent,
                                 choices);
            for (const PrecisionChoice& c : choices) {
                const BlockId block = table.blocks[static_cast<size_t>(c.slot / bs)];
                // A block shared with another sequence (parallel samples) is theirs too: its
                // tokens stay as they are.
                if (blocks.pool().refcount(block) != 1) continue;
                storage.store_low(layer, block, c.slot % bs, kvh);
                lane.low[static_cast<size_t>(c.slot)] = 1.0f;
                if (!reporter.on()) continue;
                Event e;
                e.kind = EventKind::kTokenPrecision;
                e.request = owner;
                e.block = block;
                e.wide = c.slot;
                e.a = layer;
                e.b = kvh;
                e.c = c.position;
                e.value = c.score;
                e.text = change;
                reporter.emit(std::move(e));
            }
        }
}

void KvEvictor::merge_layers(SequenceLanes& lanes, const BlockTable& table, int32_t owner,
                             const BlockManager& blocks, KvBlockStore& storage,
                             const Reporter& reporter) const {
    const int32_t first = lanes.merged_through, end = lanes.slots, bs = lanes.block_size;
    if (first >= end) return;
    lanes.merged_through = end;
    std::vector<float> k0(static_cast<size_t>(storage.head_dim())), v0(k0.size()), k1(k0.size()),
        v1(k0.size());
    for (int32_t lower = options_.merge_from; lower + 1 < lanes.n_layers; lower += 2) {
        int64_t merged = 0, retained = 0;
        for (int32_t s = first; s < end; ++s) {
            const BlockId block = table.blocks[static_cast<size_t>(s / bs)];
            if (blocks.pool().refcount(block) != 1) continue;  // shared: not ours to rewrite
            for (int32_t kvh = 0; kvh < lanes.n_kv_heads; ++kvh) {
                storage.read_head(lower, block, s % bs, kvh, k0.data(), v0.data());
                storage.read_head(lower + 1, block, s % bs, kvh, k1.data(), v1.data());
                if (!merge_token_head(k0.data(), v0.data(), k1.data(), v1.data(), k0.size(),
                                      kMergeT, options_.merge_max_distance)
                         .merged) {
                    ++retained;
                    continue;
                }
                storage.write_head(lower, block, s % bs, kvh, k0.data(), v0.data());
                storage.write_head(lower + 1, block, s % bs, kvh, k1.data(), v1.data());
                lanes.lane(lower, kvh).merged[static_cast<size_t>(s)] = 1.0f;
                lanes.lane(lower + 1, kvh).merged[static_cast<size_t>(s)] = 1.0f;
                ++merged;
            }
        }
        if (!reporter.on()) continue;
        Event e;
        e.kind = EventKind::kLayerMerge;
        e.request = owner;
        e.a = lower;
        e.b = static_cast<int32_t>(merged);
        e.c = static_cast<int32_t>(retained);
        e.wide = merged * merge_saving(storage.bytes_per_lane_token(lower));
        e.value = options_.merge_max_distance;
        e.text = "minicache: layers " + std::to_string(lower) + "+" + std::to_string(lower + 1);
        reporter.emit(std::move(e));
    }
}

int64_t KvEvictor::evict(SequenceLanes& lanes, BlockTable& table, int32_t computed,
                         int32_t prompt_len, int32_t owner, BlockManager& blocks,
                         KvBlockStore& storage, const Reporter& reporter) const {
    if (policy_->once_after_prefill()) {
        if (lanes.compressed_after_prefill || computed < prompt_len) return 0;
        lanes.compressed_after_prefill = true;
    }
    int64_t evicted = 0;
    std::vector<EvictionChoice> choices;
    EvictionParams params;
    params.held_blocks = &lanes.held_blocks;
    params.block_size = lanes.block_size;
    params.sinks = options_.sinks;
    params.window = options_.window;
    params.observation = options_.observation;
    params.window_aggregate = options_.window_aggregate;
    for (int32_t layer = 0; layer < lanes.n_layers; ++layer) {
        params.budget = budget(layer, computed);
        for (int32_t kvh = 0; kvh < lanes.n_kv_heads; ++kvh) {
            LaneStats& lane = lanes.lane(layer, kvh);
            choices.clear();
            policy_->choose(lane, params, choices);
            for (const EvictionChoice& c : choices) {
                auto slot = static_cast<size_t>(c.slot);
                lane.position[slot] = -1;
                lane.for_each_slot_statistic([&](std::vector<float>& v) {
                    if (slot < v.size()) v[slot] = 0.0f;
                });
                if (reporter.on()) {
                    Event e;
                    e.kind = EventKind::kTokenEvict;
                    e.request = owner;
                    e.block = table.blocks[static_cast<size_t>(c.slot / blocks.block_size())];
                    e.wide = c.slot;
                    e.a = layer;
                    e.b = kvh;
                    e.c = c.position;
                    e.value = c.score;
                    e.text = std::string(policy_->name()) + ": " + c.reason;
                    reporter.emit(std::move(e));
                }
            }
            evicted += static_cast<int64_t>(choices.size());
        }
    }
    if (options_.compact && evicted > 0) compact(lanes, table, owner, blocks, storage, reporter);
    // Full blocks that no lane holds a token in any more go back to the pool.
    const int32_t bs = blocks.block_size();
    std::erase_if(lanes.held_blocks, [&](int32_t i) {
        if ((i + 1) * bs > lanes.slots) return false;  // not full: new tokens go there
        for (int32_t s = i * bs; s < (i + 1) * bs; ++s)
            if (!lanes.hole_everywhere(s)) return false;
        blocks.release_block(table, i, owner);
        return true;
    });
    return evicted;
}

void KvEvictor::compact(SequenceLanes& lanes, BlockTable& table, int32_t owner,
                        BlockManager& blocks, KvBlockStore& storage,
                        const Reporter& reporter) const {
    const int32_t bs = blocks.block_size();
    // A hole may take a token only where this sequence owns the block alone: a block given
    // back is gone, and writing into a shared one (parallel samples) would change another
    // sequence's cache.
    auto writable = [&](int32_t slot) {
        BlockId b = table.blocks[static_cast<size_t>(slot / bs)];
        return b >= 0 && blocks.pool().refcount(b) == 1;
    };
    int32_t longest = 0;
    for (int32_t layer = 0; layer < lanes.n_layers; ++layer)
        for (int32_t kvh = 0; kvh < lanes.n_kv_heads; ++kvh) {
            LaneStats& lane = lanes.lane(layer, kvh);
            auto& pos = lane.position;
            int32_t lo = 0, hi = static_cast<int32_t>(pos.size()) - 1;
            for (;;) {
                while (lo < hi && (pos[static_cast<size_t>(lo)] >= 0 || !writable(lo)))
                    ++lo;
                while (hi > lo && pos[static_cast<size_t>(hi)] < 0)
                    --hi;
                if (lo >= hi) break;
                const BlockId from = table.blocks[static_cast<size_t>(hi / bs)];
                const BlockId to = table.blocks[static_cast<size_t>(lo / bs)];
                storage.move_lane(layer, kvh, from, hi % bs, to, lo % bs);
                auto l = static_cast<size_t>(lo), h = static_cast<size_t>(hi);
                lane.for_each_slot_statistic([&](std::vector<float>& v) {
                    if (h < v.size()) {
                        v[l] = v[h];
                        v[h] = 0.0f;
                    }
                });
                pos[l] = pos[h];
                pos[h] = -1;
                if (reporter.on()) {
                    Event e;
                    e.kind = EventKind::kTokenMove;
                    e.request = owner;
                    e.block = to;
                    e.a = layer;
                    e.b = kvh;
                    e.c = pos[l];
                    e.wide = (static_cast<int64_t>(hi) << 32) | lo;
                    reporter.emit(std::move(e));
                }
            }
            for (int32_t s = static_cast<int32_t>(pos.size()) - 1; s >= 0; --s)
                if (pos[static_cast<size_t>(s)] >= 0) {
                    longest = std::max(longest, s + 1);
                    break;
                }
        }
    // Past the longest lane every slot is a hole: those slots, and their blocks, go.
    for (LaneStats& lane : lanes.lanes) {
        lane.position.resize(static_cast<size_t>(longest));
        lane.for_each_slot_statistic([&](std::vector<float>& v) {
            if (!v.empty()) v.resize(static_cast<size_t>(longest));
        });
    }
    lanes.slots = longest;
    blocks.shrink(table, longest, owner);
    const int32_t kept_blocks = BlockManager::blocks_for(longest, bs);
    std::erase_if(lanes.held_blocks, [&](int32_t i) { return i >= kept_blocks; });
}

}  // namespace kvscope
