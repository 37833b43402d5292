// Token eviction in the real engine on the bundled model: no loss where there is nothing to
// evict, the cache held within the budget lane by lane, blocks given back when every lane has
// left them, every decision reported, and the same decisions whatever the thread count.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/kv_eviction.h"
#include "engine/model_loader.h"
#include "test_support.h"

namespace kvscope {
namespace {

// Keeps every event the engine reports (a sink for the test, as the recorder is for a run).
struct Collector : Probe {
    std::vector<Event> events;
    void emit(Event&& e) override { events.push_back(std::move(e)); }
};

std::shared_ptr<const LoadedModel> bundled() {
    static std::shared_ptr<const LoadedModel> model = [] {
        auto m = load_model(test::bundled_model());
        EXPECT_TRUE(m.ok());
        return std::make_shared<const LoadedModel>(std::move(m).value());
    }();
    return model;
}

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
    auto engine = Engine::create(bundled(), eo);
    EXPECT_TRUE(engine.ok());
    Collector probe;
    (*engine)->reporter().probe = &probe;
    GenerateRequest req;
    auto tok = bundled()->tokenizer.get();
    req.prompt = tok->encode(
        "In the beginning God created the heaven and the earth. And the "
        "earth was without form, and void;",
        true);
    req.max_tokens = max_tokens;
    if (eviction.active()) {
        auto e = KvEvictor::create(eviction, bundled()->config.n_layers);
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
    const auto& c = bundled()->config;
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
    const auto& c = bundled()->config;
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
                    bundled()
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
    auto engine = Engine::create(bundled(), eo);
    EXPECT_TRUE(engine.ok());
    GenerateRequest req;
    req.prompt = bundled()->tokenizer->encode("In the beginning God created the heaven", true);
    req.max_tokens = max_tokens;
    auto e = KvEvictor::create(eviction, bundled()->config.n_layers);
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
    const ModelConfig& c = bundled()->config;
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
