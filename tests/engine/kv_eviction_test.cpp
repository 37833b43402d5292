// Token eviction in the real engine on the bundled model: no loss where there is nothing to
// evict, the cache held within the budget lane by lane, blocks given back when every lane has
// left them, every decision reported, and the same decisions whatever the thread count.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "engine/cpu_ops.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/kv_eval.h"
#include "engine/kv_eviction.h"
#include "engine/model_loader.h"
#include "engine/scheduler.h"
#include "engine_fixtures.h"
#include "test_support.h"

namespace kvscope {
namespace {

struct Generated {
    std::vector<int32_t> ids;
    std::vector<Event> events;
    int64_t evicted = 0;
};

Generated run(const EvictionOptions& eviction, int32_t max_tokens, int threads = 1,
              int32_t block_size = 16) {
    EngineOptions eo;
    eo.threads = threads;
    eo.block_size = block_size;
    auto engine = Engine::create(test::bundled_loaded_model(), eo);
    EXPECT_TRUE(engine.ok());
    test::EventCollector probe;
    (*engine)->reporter().probe = &probe;
    GenerateRequest req;
    auto tok = test::bundled_loaded_model()->tokenizer.get();
    req.prompt = tok->encode(
        "In the beginning God created the heaven and the earth. And the "
        "earth was without form, and void;",
        true);
    req.max_tokens = max_tokens;
    if (eviction.active()) {
        auto e = KvEvictor::create(eviction, test::bundled_loaded_model()->config.n_layers);
        EXPECT_TRUE(e.ok()) << (e ? "" : e.error().message);
        req.evictor = std::move(e).value();
    }
    Generated g;
    auto stats = generate(**engine, req, [&](int32_t id) { g.ids.push_back(id); });
    EXPECT_TRUE(stats.ok());
    g.evicted = stats->tokens_evicted;
    g.events = std::move(probe.events);
    return g;
}

EvictionOptions policy(const char* name, int32_t budget) {
    EvictionOptions o;
    o.policy = name;
    o.budget_tokens = budget;
    return o;
}

TEST(KvEviction, ABudgetAtLeastTheSequenceChangesNothing) {
    const Generated none = run({}, 60);
    ASSERT_EQ(none.ids.size(), 60u);
    for (const std::string& name : eviction_policy_names()) {
        Generated g = run(policy(name.c_str(), 512), 60);
        EXPECT_EQ(g.ids, none.ids) << name;
        EXPECT_EQ(g.evicted, 0) << name;
        EvictionOptions pct = policy(name.c_str(), 0);
        pct.budget_percent = 100;
        EXPECT_EQ(run(pct, 60).ids, none.ids) << name << " at 100%";
    }
}

TEST(KvEviction, StreamingKeepsTheSinksAndTheWindowInEveryLaneAndGivesBlocksBack) {
    EvictionOptions o = policy("streaming", 12);
    o.sinks = 4;
    const int32_t bs = 4;
    Generated g = run(o, 80, 1, bs);
    const auto& c = test::bundled_loaded_model()->config;
    // Every lane evicts the same positions, oldest first, never a sink, each said why.
    std::map<std::pair<int, int>, std::vector<int32_t>> by_lane;
    int64_t held = 0, peak = 0, freed_midway = 0;
    bool finished = false, decoding = false;
    for (const Event& e : g.events) {
        // The whole prompt is cached while it is prefilled (step 0); the budget holds after.
        if (e.kind == EventKind::kToken && e.c == 0) decoding = true;
        if (e.kind == EventKind::kTokenEvict) {
            by_lane[{e.a, e.b}].push_back(e.c);
            EXPECT_EQ(e.text, "streaming: outside-window");
            EXPECT_GE(e.c, o.sinks);
        }
        if (e.kind == EventKind::kBlockAlloc) held += 1;
        if (e.kind == EventKind::kBlockFree) {
            held -= 1;
            freed_midway += !finished;
        }
        if (e.kind == EventKind::kRequestFinish) finished = true;
        if (decoding && e.step >= 1 && !finished) peak = std::max(peak, held);
    }
    ASSERT_EQ(by_lane.size(), static_cast<size_t>(c.n_layers * c.n_kv_heads));
    const std::vector<int32_t>& first = by_lane.begin()->second;
    for (const auto& [lane, positions] : by_lane) {
        EXPECT_EQ(positions, first);
        EXPECT_TRUE(std::is_sorted(positions.begin(), positions.end()));
    }
    EXPECT_EQ(g.evicted, static_cast<int64_t>(first.size()) * c.n_layers * c.n_kv_heads);
    // What stays in a lane at the end: the 4 sinks and the 8 most recent positions.
    std::set<int32_t> evicted(first.begin(), first.end());
    int32_t computed = static_cast<int32_t>(first.size()) + 12;
    for (int32_t p = 0; p < computed; ++p)
        EXPECT_EQ(evicted.count(p), (p < 4 || p >= computed - 8) ? 0u : 1u) << p;
    // Blocks wholly outside the window went back during the run; the sequence never held more
    // than the sink block, the window's blocks and the one being filled.
    EXPECT_GT(freed_midway, 5);
    EXPECT_LE(peak, 1 + (12 - 4) / bs + 2);
}

TEST(KvEviction, EveryLaneStaysWithinItsBudgetAndThePyramidSpendsTheSameTotal) {
    const auto& c = test::bundled_loaded_model()->config;
    for (const std::string& name :
         {std::string("h2o"), std::string("tova"), std::string("knorm"), std::string("morphkv")})
        for (LayerBudget lb : {LayerBudget::kUniform, LayerBudget::kPyramid}) {
            EvictionOptions o = policy(name.c_str(), 20);
            o.layer_budget = lb;
            Generated g = run(o, 60);
            std::map<int, int64_t> per_layer;
            for (const Event& e : g.events)
                if (e.kind == EventKind::kTokenEvict) ++per_layer[e.a];
            // Positions whose K/V were computed when the last eviction ran: the step that
            // samples the final token frees the sequence instead.
            int32_t computed =
                static_cast<int32_t>(g.ids.size()) - 2 +
                static_cast<int32_t>(
                    test::bundled_loaded_model()
                        ->tokenizer
                        ->encode("In the beginning God created the heaven and the earth. And "
                                 "the earth was without form, and void;",
                                 true)
                        .size());
            auto budgets = layer_budgets(20, c.n_layers, lb);
            for (int l = 0; l < c.n_layers; ++l)
                EXPECT_EQ(per_layer[l], static_cast<int64_t>(std::max(
                                            0, computed - budgets[static_cast<size_t>(l)])) *
                                            c.n_kv_heads)
                    << name << " layer " << l;
        }
}

TEST(KvEviction, DecisionsDoNotDependOnTheThreadCount) {
    for (const char* name : {"h2o", "snapkv", "tova", "morphkv"}) {
        EvictionOptions o = policy(name, name == std::string("snapkv") ? 10 : 24);
        Generated one = run(o, 50, 1), two = run(o, 50, 2);
        EXPECT_EQ(one.ids, two.ids) << name;
        auto evictions = [](const Generated& g) {
            std::vector<std::tuple<int64_t, int, int, int>> out;
            for (const Event& e : g.events)
                if (e.kind == EventKind::kTokenEvict) out.emplace_back(e.step, e.a, e.b, e.c);
            return out;
        };
        EXPECT_EQ(evictions(one), evictions(two)) << name;
        EXPECT_GT(one.evicted, 0) << name;
    }
}

// --compact: every lane's kept tokens move into its earliest holes (each move reported, always
// to a lower slot), so the sequence holds only as many blocks as its longest lane needs.
TEST(KvEviction, CompactionClosesHolesAndGivesBlocksBack) {
    const int32_t bs = 4, budget = 16;
    for (const char* name : {"h2o", "tova", "knorm", "morphkv"}) {
        EvictionOptions o = policy(name, budget);
        o.compact = true;
        Generated g = run(o, 60, 1, bs);
        int64_t held = 0, peak = 0, moves = 0;
        bool decoding = false, finished = false;
        for (const Event& e : g.events) {
            if (e.kind == EventKind::kToken && e.c == 0) decoding = true;
            if (e.kind == EventKind::kRequestFinish) finished = true;
            if (e.kind == EventKind::kBlockAlloc) ++held;
            if (e.kind == EventKind::kBlockFree) --held;
            if (e.kind == EventKind::kTokenMove) {
                ++moves;
                EXPECT_LT(e.wide & 0xffffffff, e.wide >> 32) << name << ": a move up";
            }
            if (decoding && e.step >= 1 && !finished) peak = std::max(peak, held);
        }
        EXPECT_GT(moves, 0) << name;
        // The budget's blocks, and the one the next token goes into.
        EXPECT_LE(peak, budget / bs + 1) << name;
        EXPECT_EQ(g.ids.size(), 60u) << name;
    }
    // Nothing to evict, nothing to move: the same tokens as no policy at all.
    EvictionOptions roomy = policy("h2o", 512);
    roomy.compact = true;
    EXPECT_EQ(run(roomy, 40).ids, run({}, 40).ids);
}

// Key slots the last step's attention visited after a greedy generation of `max_tokens` tokens
// (every layer and KV head), and the position it reached.
std::pair<int64_t, int32_t> last_step_key_slots(const EvictionOptions& eviction,
                                                int32_t max_tokens) {
    EngineOptions eo;
    eo.threads = 1;
    auto engine = Engine::create(test::bundled_loaded_model(), eo);
    EXPECT_TRUE(engine.ok());
    GenerateRequest req;
    req.prompt = test::bundled_loaded_model()->tokenizer->encode(
        "In the beginning God created the heaven", true);
    req.max_tokens = max_tokens;
    auto e = KvEvictor::create(eviction, test::bundled_loaded_model()->config.n_layers);
    EXPECT_TRUE(e.ok());
    req.evictor = std::move(e).value();
    auto stats = generate(**engine, req, [](int32_t) {});
    EXPECT_TRUE(stats.ok());
    return {(*engine)->forward().last_phase_times().attention_key_slots,
            stats->prompt_tokens + stats->generated_tokens};
}

// Without compaction the holes stay in the table, but blocks given back are never visited
// again: a step's attention reads what the budget keeps, however far the sequence has gone
// (it read every slot up to the position: 20k tokens took 38 s, 100k did not finish in 300).
TEST(KvEviction, AStepWithoutCompactionVisitsWhatTheBudgetKeepsNotThePosition) {
    const ModelConfig& c = test::bundled_loaded_model()->config;
    const int64_t lanes = int64_t{c.n_layers} * c.n_kv_heads;
    // What a step visits stays what it was a few hundred positions earlier: the blocks the
    // lanes still hold a token in (h2o's heavy hitters keep some old blocks), not the slots.
    for (const char* name : {"streaming", "h2o"}) {
        EvictionOptions o = policy(name, 32);
        auto [early, early_pos] = last_step_key_slots(o, 100);
        auto [late, late_pos] = last_step_key_slots(o, 480);
        ASSERT_GT(late_pos, 400) << name;
        EXPECT_LT(late, lanes * late_pos / 3) << name;
        EXPECT_LE(late, early + lanes * 2 * 16) << name << ": " << early << " then " << late;
    }
    // Streaming keeps the same tokens in every lane, so its blocks go back as the window moves
    // on: at most the sinks' block and three for the window of 28 (not 488 slots a lane).
    auto [slots, pos] = last_step_key_slots(policy("streaming", 32), 480);
    EXPECT_LE(slots, lanes * 4 * 16) << pos;
}

// Cache positions (StreamingLLM): while nothing is evicted a token's place in the cache is its
// position, so either mode gives the full cache's tokens; once the window moves on the modes
// differ, or --positions would change nothing.
TEST(KvEvictionPositions, StreamingWithinItsBudgetGivesTheFullCacheTokensInBothModes) {
    const Generated none = run({}, 60);
    ASSERT_EQ(none.ids.size(), 60u);
    for (PositionMode mode : {PositionMode::kCache, PositionMode::kAbsolute}) {
        EvictionOptions o = policy("streaming", 512);
        o.positions = mode;
        EXPECT_EQ(run(o, 60).ids, none.ids) << (mode == PositionMode::kCache ? "cache" : "abs");
        o.budget_tokens = 0;
        o.budget_percent = 100;
        EXPECT_EQ(run(o, 60).ids, none.ids) << "at 100%";
    }
    EvictionOptions cache = policy("streaming", 16), absolute = policy("streaming", 16);
    absolute.positions = PositionMode::kAbsolute;
    EXPECT_NE(run(cache, 120).ids, run(absolute, 120).ids);
}

// Whatever is scored through, compaction moving tokens out of position order included: places
// are ranks by position, so a compacted cache gives the tokens of one with holes.
TEST(KvEvictionPositions, CompactionDoesNotChangeThePlaces) {
    EvictionOptions holes = policy("streaming", 20), compacted = policy("streaming", 20);
    compacted.compact = true;
    EXPECT_EQ(run(holes, 100).ids, run(compacted, 100).ids);
}

// Why places can stand in for positions: RoPE makes a query-key score a function of their
// distance, so shifting the window's keys and the query down by the same amount (what a place
// does to them) leaves every score among them as it was; only the sinks' distances change. On
// hand-made numbers, both rotation styles.
TEST(KvEvictionPositions, RopeScoresDependOnlyOnTheDistance) {
    constexpr int kHeadDim = 8;
    std::vector<float> inv_freq(kHeadDim / 2);
    for (int i = 0; i < kHeadDim / 2; ++i)
        inv_freq[static_cast<size_t>(i)] = 1.0f / std::pow(10000.0f, 2.0f * i / kHeadDim);
    const float q[kHeadDim] = {0.5f, -1.25f, 2.0f, 0.75f, -0.5f, 1.5f, -2.25f, 1.0f};
    const float k[kHeadDim] = {1.0f, 0.25f, -0.75f, 2.5f, 0.5f, -1.0f, 1.75f, -0.25f};
    auto score = [&](int query_at, int key_at, RopeStyle style) {
        float qr[kHeadDim], kr[kHeadDim], cs[kHeadDim];
        std::copy_n(q, kHeadDim, qr);
        std::copy_n(k, kHeadDim, kr);
        rope_angles(query_at, inv_freq.data(), kHeadDim / 2, cs);
        rope_rotate(qr, kHeadDim, cs, style);
        rope_angles(key_at, inv_freq.data(), kHeadDim / 2, cs);
        rope_rotate(kr, kHeadDim, cs, style);
        double sum = 0;
        for (int i = 0; i < kHeadDim; ++i)
            sum += static_cast<double>(qr[i]) * kr[i];
        return sum;
    };
    for (RopeStyle style : {RopeStyle::kAdjacentPairs, RopeStyle::kHalfSplit}) {
        // Text positions 5000 (query) and 4990 (a window key) as places 256 and 246.
        EXPECT_NEAR(score(5000, 4990, style), score(256, 246, style), 5e-3);
        EXPECT_NEAR(score(300, 299, style), score(1, 0, style), 1e-4);
        // A sink at 0: distance 5000 in the text, 256 in the cache; not the same score.
        EXPECT_GT(std::abs(score(5000, 0, style) - score(256, 0, style)), 0.1)
            << score(5000, 0, style) << " " << score(256, 0, style) << " "
            << score(5000, 4990, style) - score(256, 246, style);
    }
}

// The largest position RoPE saw in each step of a request whose prompt is longer than the
// budget, served by the scheduler: with cache positions never past the budget (the prompt is
// prefilled a budget's worth first, then a token a step), with absolute ones the last position.
int32_t largest_rope_position(PositionMode mode, int32_t budget, int32_t* generated) {
    EngineOptions eo;
    eo.threads = 1;
    auto engine = Engine::create(test::bundled_loaded_model(), eo);
    EXPECT_TRUE(engine.ok());
    EvictionOptions o = policy("streaming", budget);
    o.positions = mode;
    auto evictor = KvEvictor::create(o, test::bundled_loaded_model()->config.n_layers);
    EXPECT_TRUE(evictor.ok());
    ServingOptions so;
    so.evictor = std::move(evictor).value();
    Request r;
    r.id = "long";
    std::string text;
    for (int i = 0; i < 4; ++i)
        text +=
            "In the beginning God created the heaven and the earth. And the earth was "
            "without form, and void; ";
    r.prompt = test::bundled_loaded_model()->tokenizer->encode(text, true);
    EXPECT_GT(static_cast<int32_t>(r.prompt.size()), 3 * budget);
    r.max_tokens = 40;
    Scheduler scheduler(**engine, so, {r});
    int32_t largest = -1;
    *generated = 0;
    scheduler.set_token_callback([&](const Sequence&, int32_t) { ++*generated; });
    while (scheduler.step())
        largest = std::max(largest, (*engine)->forward().last_phase_times().rope_position_max);
    EXPECT_TRUE(scheduler.error().ok());
    return largest;
}

TEST(KvEvictionPositions, CachePositionsNeverPassTheBudget) {
    int32_t generated = 0;
    EXPECT_LE(largest_rope_position(PositionMode::kCache, 24, &generated), 24);
    EXPECT_EQ(generated, 40);
    EXPECT_GT(largest_rope_position(PositionMode::kAbsolute, 24, &generated), 3 * 24);
    EXPECT_EQ(generated, 40);
}

std::vector<int32_t> long_text_tokens(int repeats) {
    std::string text;
    for (int i = 0; i < repeats; ++i)
        text +=
            "And God said, Let there be light: and there was light. And God saw the light, "
            "that it was good: and God divided the light from the darkness.\n";
    return test::bundled_loaded_model()->tokenizer->encode(text, true);
}

Result<StreamResult> stream(const EvictionOptions& o, const std::vector<int32_t>& tokens,
                            const StreamSettings& settings) {
    EngineOptions eo;
    eo.threads = 1;
    eo.num_blocks = stream_blocks_needed(static_cast<int64_t>(tokens.size()), eo.block_size);
    auto engine = Engine::create(test::bundled_loaded_model(), eo);
    EXPECT_TRUE(engine.ok());
    std::unique_ptr<KvEvictor> evictor;
    if (o.active())
        evictor =
            std::move(KvEvictor::create(o, test::bundled_loaded_model()->config.n_layers)).value();
    return evaluate_stream(**engine, tokens, settings, evictor.get());
}

// --stream: every token of the text scored once, windows of the asked size, RoPE held to the
// budget with cache positions and to the context by the full cache's restarts.
TEST(KvEvictionStream, ScoresEveryTokenOncePerWindowWithinTheBudget) {
    const std::vector<int32_t> tokens = long_text_tokens(12);
    ASSERT_GT(tokens.size(), 300u);
    StreamSettings s;
    s.max_tokens = 300;
    s.window_tokens = 64;
    s.full_cache_ctx = 128;
    auto full = stream({}, tokens, s);
    ASSERT_TRUE(full.ok()) << full.error().message;
    EXPECT_EQ(full->scored_tokens, 300);
    ASSERT_EQ(full->windows.size(), 5u);  // 64 x 4 and 44
    EXPECT_EQ(full->windows[0].first, 1);
    EXPECT_EQ(full->windows[0].last, 64);
    EXPECT_EQ(full->windows[4].scored, 300 - 4 * 64);
    EXPECT_EQ(full->windows[4].last, 300);
    EXPECT_LE(full->rope_position_max, 127);
    EXPECT_EQ(full->tokens_evicted, 0);

    EvictionOptions cache = policy("streaming", 32), absolute = cache;
    absolute.positions = PositionMode::kAbsolute;
    auto at_places = stream(cache, tokens, s);
    auto at_positions = stream(absolute, tokens, s);
    ASSERT_TRUE(at_places.ok() && at_positions.ok());
    EXPECT_LE(at_places->rope_position_max, 32);
    EXPECT_EQ(at_positions->rope_position_max, 299);
    EXPECT_GT(at_places->tokens_evicted, 0);
    EXPECT_NE(at_places->perplexity, at_positions->perplexity);
    for (const auto* r : {&*at_places, &*at_positions}) {
        EXPECT_EQ(r->scored_tokens, 300);
        EXPECT_EQ(r->windows.size(), 5u);
        EXPECT_TRUE(std::isfinite(r->perplexity) && r->perplexity > 1);
    }
    // Within the context and the budget nothing restarts or is evicted: the same numbers.
    s.max_tokens = 100;
    s.full_cache_ctx = 512;
    EvictionOptions roomy = policy("streaming", 512);
    auto a = stream({}, tokens, s), b = stream(roomy, tokens, s);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->perplexity, b->perplexity);
}

TEST(KvEvictionStream, BadSettingsAreRefused) {
    StreamSettings s;
    EXPECT_FALSE(
        stream({}, {test::bundled_loaded_model()->config.bos_token}, s).ok());  // nothing to score
    s.window_tokens = 0;
    EXPECT_FALSE(stream({}, long_text_tokens(1), s).ok());
    s.window_tokens = 8;
    s.full_cache_ctx = 100000;
    EXPECT_FALSE(stream({}, long_text_tokens(1), s).ok());
}

TEST(KvEviction, BadOptionsAreRefusedNamingTheFlag) {
    EvictionOptions o;
    EXPECT_FALSE(parse_kv_budget("0", o).ok());
    EXPECT_FALSE(parse_kv_budget("150%", o).ok());
    EXPECT_FALSE(parse_kv_budget("0%", o).ok());
    EXPECT_FALSE(parse_kv_budget("abc", o).ok());
    EXPECT_FALSE(parse_kv_budget("1.5", o).ok());
    ASSERT_TRUE(parse_kv_budget("25%", o).ok());
    EXPECT_EQ(o.budget_percent, 25);
    ASSERT_TRUE(parse_kv_budget("64", o).ok());
    EXPECT_EQ(o.budget_tokens, 64);
    EvictionOptions s = policy("streaming", 4);
    s.sinks = 4;
    auto r = validate_eviction_options(s);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("at least 5"), std::string::npos) << r.error().message;
    EXPECT_FALSE(validate_eviction_options(policy("h2o", 0)).ok());  // no budget at all
    auto unknown = validate_eviction_options(policy("lfu", 10));
    ASSERT_FALSE(unknown.ok());
    EXPECT_NE(unknown.error().message.find("unknown eviction policy 'lfu'"), std::string::npos);
    // Cache positions stand in for positions only under streaming.
    for (const char* name : {"none", "h2o", "snapkv", "tova", "knorm", "morphkv"}) {
        EvictionOptions p = policy(name, 10);
        p.positions = PositionMode::kCache;
        auto refused = validate_eviction_options(p);
        ASSERT_FALSE(refused.ok()) << name;
        EXPECT_NE(refused.error().message.find("--positions cache needs --policy streaming"),
                  std::string::npos)
            << refused.error().message;
        p.positions = PositionMode::kAbsolute;
        EXPECT_TRUE(validate_eviction_options(p).ok()) << name;
        EXPECT_FALSE(p.cache_positions());
    }
    EXPECT_TRUE(policy("streaming", 10).cache_positions());
    EXPECT_FALSE(parse_position_mode("relative").ok());
    // morphkv's window: as large as the budget leaves nothing to rank, none gives nothing to
    // rank by.
    EvictionOptions m = policy("morphkv", 16);
    m.window = 16;
    auto whole = validate_eviction_options(m);
    ASSERT_FALSE(whole.ok());
    EXPECT_NE(whole.error().message.find("leaves no room in --kv-budget 16"), std::string::npos)
        << whole.error().message;
    m.window = 0;
    auto none = validate_eviction_options(m);
    ASSERT_FALSE(none.ok());
    EXPECT_NE(none.error().message.find("--window 0"), std::string::npos) << none.error().message;
    m.window = 15;
    EXPECT_TRUE(validate_eviction_options(m).ok());
}

// morphkv in the engine, from the statistics the forward pass keeps: every decision says the
// window's attention made it, positions do not go oldest first (it is no sliding window), and
// max and sum choose differently.
TEST(KvEviction, MorphKvRanksTheOlderTokensByTheWindowsAttention) {
    EvictionOptions o = policy("morphkv", 16);
    o.window = 4;
    Generated g = run(o, 60);
    ASSERT_EQ(g.ids.size(), 60u);
    std::map<std::pair<int, int>, std::vector<int32_t>> order;  // per lane, positions evicted
    for (const Event& e : g.events)
        if (e.kind == EventKind::kTokenEvict) {
            EXPECT_EQ(e.text.rfind("morphkv: low-recent-window-", 0), 0u) << e.text;
            order[{e.a, e.b}].push_back(e.c);
        }
    ASSERT_FALSE(order.empty());
    int lanes_out_of_order = 0;
    for (const auto& [lane, positions] : order)
        lanes_out_of_order += !std::is_sorted(positions.begin(), positions.end());
    EXPECT_GT(lanes_out_of_order, 0);
    // Max and sum rank differently somewhere.
    o.window_aggregate = WindowAggregate::kSum;
    Generated sum = run(o, 60);
    auto evicted = [](const Generated& r) {
        std::vector<std::tuple<int64_t, int, int, int>> out;
        for (const Event& e : r.events)
            if (e.kind == EventKind::kTokenEvict) out.emplace_back(e.step, e.a, e.b, e.c);
        return out;
    };
    EXPECT_NE(evicted(sum), evicted(g));
}

}  // namespace
}  // namespace kvscope
