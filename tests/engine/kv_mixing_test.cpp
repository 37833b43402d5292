// Storing a kept token in fewer bytes (kv_mixing.h): precision by importance (ZipCache) and
// cross-layer merging (MiniCache). Their choices on hand-made inputs whose answer is known (which
// tokens go to the low tier given hand-made attention; which tokens merge or stay apart given
// hand-made vectors; the bytes formula), the low tier of the storage, and in the real engine on
// the bundled model: exact where they must be (mixed:X/Y:100% is --kv-dtype X, a first merged
// layer with no layer after it is no merging), every decision reported.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numbers>
#include <set>

#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/kv_cache.h"
#include "engine/kv_eviction.h"
#include "engine/kv_mixing.h"
#include "engine/kv_quant.h"
#include "engine/model_loader.h"
#include "engine_fixtures.h"
#include "test_support.h"

namespace kvscope {
namespace {

// --- the --kv-dtype mixed value ---

TEST(KvMixed, ParsesAndRefusesWhatItCannotMean) {
    auto m = parse_kv_mixed("mixed:int8/int2:20%");
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_EQ(m->hi, KvDtype::kInt8);
    EXPECT_EQ(m->lo, KvDtype::kInt2);
    EXPECT_EQ(m->percent, 20);
    auto f = parse_kv_mixed("mixed:f32/f16:100%");
    ASSERT_TRUE(f.ok());
    EXPECT_EQ(f->percent, 100);
    EXPECT_TRUE(parse_kv_mixed("mixed:f16/int4:12.5%").ok());
    // Each bad value names its problem.
    const std::vector<std::pair<const char*, const char*>> bad = {
        {"mixed:int8/int8:20%", "more bits"}, {"mixed:int2/int8:20%", "more bits"},
        {"mixed:int8/int2:0%", "percentage"}, {"mixed:int8/int2:100.5%", "percentage"},
        {"mixed:int8/int2:20", "percentage"}, {"mixed:int3/int2:20%", "int3"},
        {"mixed:int8/int3:20%", "int3"},      {"mixed:int8/int2", "mixed:HI/LO:P%"},
        {"mixed:int4/int2:20%", "per block"}, {"mixed:int8/int8:0%", "int8"},
    };
    for (const auto& [text, why] : bad) {
        auto r = parse_kv_mixed(text);
        ASSERT_FALSE(r.ok()) << text;
        EXPECT_NE(r.error().message.find(why), std::string::npos) << r.error().message;
    }
    EXPECT_TRUE(is_kv_mixed("mixed:x"));
    EXPECT_FALSE(is_kv_mixed("int8"));
}

// --- precision by importance: the choice ---

LaneStats lane_with(const std::vector<float>& accumulated) {
    LaneStats lane;
    for (size_t i = 0; i < accumulated.size(); ++i)
        lane.position.push_back(static_cast<int32_t>(i));
    lane.accumulated = accumulated;
    lane.low.assign(accumulated.size(), 0.0f);
    return lane;
}

std::vector<int32_t> positions_of(const std::vector<PrecisionChoice>& choices) {
    std::vector<int32_t> out;
    for (const PrecisionChoice& c : choices)
        out.push_back(c.position);
    return out;
}

TEST(KvMixed, TheTokensWithTheLowestNormalizedAttentionGoLow) {
    // 10 tokens, 10 queries so far: token p was seen by 10 - p queries. Token 0 received the
    // most attention in total (5.0) but over 10 queries (0.5 each); token 9 received 0.625
    // from its one query: normalized attention keeps 8, 9 and 0 high where accumulated attention
    // would keep 0, 3 and 8. (Binary fractions, so that the division is exact.)
    //                    pos:  0     1      2     3      4     5      6     7      8     9
    LaneStats lane =
        lane_with({5.0f, 1.125f, 1.0f, 1.75f, 0.75f, 0.625f, 0.5f, 0.375f, 1.5f, 0.625f});
    // normalized:            0.5   0.125  0.125 0.25   0.125 0.125  0.125 0.125  0.75  0.625
    EXPECT_EQ(normalized_attention(lane, 0, 10), 0.5);
    EXPECT_EQ(normalized_attention(lane, 9, 10), 0.625);
    std::vector<PrecisionChoice> out;
    choose_low_precision(lane, nullptr, 16, 10, 30, out);  // 3 of 10 stay high
    // High: 8, 9, 0. Low, lowest first, ties older first: 1, 2, 4, 5, 6, 7 at 0.125, then 3
    // at 0.25.
    EXPECT_EQ(positions_of(out), (std::vector<int32_t>{1, 2, 4, 5, 6, 7, 3}));
    EXPECT_EQ(out.back().score, 0.25);
    EXPECT_EQ(out.front().slot, 1);
    // The share is rounded up: 25% of 10 keeps 3 too; 100% keeps every token high.
    out.clear();
    choose_low_precision(lane, nullptr, 16, 10, 25, out);
    EXPECT_EQ(out.size(), 7u);
    out.clear();
    choose_low_precision(lane, nullptr, 16, 10, 100, out);
    EXPECT_TRUE(out.empty());
    // A token already low is not chosen again, and holes are no tokens: with 1 and 2 low and
    // 4 evicted, 9 kept tokens, 3 stay high (8, 9, 0) and 5, 6, 7, 3 go.
    lane.low[1] = lane.low[2] = 1.0f;
    lane.position[4] = -1;
    out.clear();
    choose_low_precision(lane, nullptr, 16, 10, 30, out);
    EXPECT_EQ(positions_of(out), (std::vector<int32_t>{5, 6, 7, 3}));
}

// --- cross-layer merging: the choice and the bytes ---

std::vector<float> at_angle(double degrees, double norm) {
    const double r = degrees * std::numbers::pi / 180;
    return {static_cast<float>(norm * std::cos(r)), static_cast<float>(norm * std::sin(r)), 0.0f,
            0.0f};
}

double norm_of(const std::vector<float>& x) {
    double s = 0;
    for (float v : x)
        s += static_cast<double>(v) * v;
    return std::sqrt(s);
}

TEST(KvMerge, CloseDirectionsShareTheirSlerpWithEachLayersNorm) {
    // K 30 degrees apart (distance 1/6), V 20 degrees apart: both within 45 degrees.
    auto k0 = at_angle(0, 2.0), k1 = at_angle(30, 3.0);
    auto v0 = at_angle(10, 0.5), v1 = at_angle(30, 4.0);
    EXPECT_NEAR(angular_distance(k0.data(), k1.data(), 4), 1.0 / 6, 1e-6);
    MergeOutcome o =
        merge_token_head(k0.data(), v0.data(), k1.data(), v1.data(), 4, kMergeT, kMergeMaxDistance);
    ASSERT_TRUE(o.merged);
    EXPECT_NEAR(o.distance, 1.0 / 6, 1e-6);  // the larger of K's and V's
    // One direction, SLERP at t = 0.6 from the lower layer's: 18 degrees for K, 22 for V.
    auto expect = [](const std::vector<float>& x, double degrees, double norm) {
        const auto want = at_angle(degrees, norm);
        for (size_t i = 0; i < 4; ++i)
            EXPECT_NEAR(x[i], want[i], 1e-5 * norm) << degrees << " degrees, element " << i;
    };
    expect(k0, 18, 2.0);
    expect(k1, 18, 3.0);
    expect(v0, 22, 0.5);
    expect(v1, 22, 4.0);
}

TEST(KvMerge, FarDirectionsAndZeroVectorsStayApart) {
    // K 60 degrees apart (distance 1/3): retained, nothing touched, V close or not.
    auto k0 = at_angle(0, 2.0), k1 = at_angle(60, 3.0), v0 = at_angle(0, 1.0),
         v1 = at_angle(1, 1.0);
    const auto before = std::vector{k0, k1, v0, v1};
    MergeOutcome o = merge_token_head(k0.data(), v0.data(), k1.data(), v1.data(), 4, kMergeT, 0.25);
    EXPECT_FALSE(o.merged);
    EXPECT_NEAR(o.distance, 1.0 / 3, 1e-6);
    EXPECT_EQ((std::vector{k0, k1, v0, v1}), before);
    // V too far apart keeps K apart too: a token merges whole.
    v1 = at_angle(120, 1.0);
    EXPECT_FALSE(
        merge_token_head(k0.data(), v0.data(), at_angle(5, 1).data(), v1.data(), 4, kMergeT, 0.25)
            .merged);
    // A larger threshold takes them; the distance is in [0, 1].
    EXPECT_TRUE(
        merge_token_head(k0.data(), v0.data(), k1.data(), v1.data(), 4, kMergeT, 1.0).merged);
    EXPECT_NEAR(angular_distance(at_angle(0, 1).data(), at_angle(180, 1).data(), 4), 1.0, 1e-6);
    // A zero vector has no direction: never merged.
    std::vector<float> zero(4, 0.0f), a = at_angle(0, 1), b = at_angle(0, 1), c = at_angle(0, 1);
    EXPECT_FALSE(
        merge_token_head(zero.data(), a.data(), b.data(), c.data(), 4, kMergeT, 1.0).merged);
    // Norms are kept to f16's precision, as they are stored.
    auto k2 = at_angle(0, 1.0001), k3 = at_angle(1, 1.0), v2 = at_angle(0, 1), v3 = at_angle(0, 1);
    ASSERT_TRUE(
        merge_token_head(k2.data(), v2.data(), k3.data(), v3.data(), 4, kMergeT, 0.25).merged);
    EXPECT_FLOAT_EQ(static_cast<float>(norm_of(k2)), 1.0f);  // 1.0001 rounds to 1 in f16
}

// Four layers: two pairs to merge.
ModelConfig two_layer_pairs() {
    ModelConfig c;
    c.n_layers = 4;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.head_dim = 32;
    c.dim = 128;
    return c;
}

TEST(KvMerge, AMergedTokenSavesOneVectorLessTwoF16NormsForKAndV) {
    // Per token and KV head at head dim 32: f32 K and V 256 bytes, a merged pair 256 + 8 of
    // norms instead of 512: 248 saved. int8: 68 (scales included), 60 saved.
    EXPECT_EQ(merge_saving(256), 248);
    const ModelConfig c = two_layer_pairs();
    EXPECT_EQ(merge_saving(KvCacheStorage(c, 16, 1, KvDtype::kF32).bytes_per_lane_token(0)), 248);
    EXPECT_EQ(merge_saving(KvCacheStorage(c, 16, 1, KvDtype::kF16).bytes_per_lane_token(0)), 120);
    EXPECT_EQ(merge_saving(KvCacheStorage(c, 16, 1, KvDtype::kInt8).bytes_per_lane_token(0)), 60);
    // lanes_bytes_saved counts a merged token once per pair (in its lower layer), kept tokens
    // only: merging from layer 1 pairs (1, 2); layer 3 has no partner.
    KvCacheStorage kv(c, 16, 1, KvDtype::kF32);
    SequenceLanes lanes(4, 2, 16);
    lanes.merge_from = 1;
    lanes.append(0, 5);
    for (LaneStats& lane : lanes.lanes)
        lane.merged.assign(5, 0.0f);
    for (int32_t layer : {1, 2})
        for (int32_t s : {0, 3})
            lanes.lane(layer, 1).merged[static_cast<size_t>(s)] = 1.0f;
    lanes.lane(3, 0).merged[2] = 1.0f;  // no pair: counts nothing
    EXPECT_EQ(lanes_bytes_saved(lanes, kv), 2 * 248);
    lanes.lane(1, 1).position[3] = -1;  // evicted: saves nothing any more
    EXPECT_EQ(lanes_bytes_saved(lanes, kv), 248);
}

// --- the low tier of the storage ---

TEST(KvMixed, TheLowTierHoldsATokenInItsFormatAndSwapsWithTheBlock) {
    const ModelConfig c = two_layer_pairs();
    const int bs = 16;
    KvCacheStorage hi(c, bs, 4, KvDtype::kInt8);
    KvCacheStorage mixed(c, bs, 4, KvDtype::kInt8, {}, KvDtype::kInt2);
    // int8 68 bytes per token and head; int2 with keys per token: 8 + 8 codes, 4 + 4 of
    // parameters = 24; the tier byte per slot and head is counted with the block.
    EXPECT_EQ(mixed.low_bytes_per_lane_token(0), 24);
    EXPECT_EQ(mixed.low_tier_saving(0), 68 - 24);
    EXPECT_EQ(hi.low_tier_saving(0), 0);
    EXPECT_EQ(mixed.layer_bytes_per_block(0), hi.layer_bytes_per_block(0) + bs * 2);
    std::vector<float> k(static_cast<size_t>(c.kv_dim())), v(k.size());
    for (size_t i = 0; i < k.size(); ++i) {
        k[i] = std::sin(0.37f * static_cast<float>(i));
        v[i] = std::cos(0.11f * static_cast<float>(i));
    }
    for (int s = 0; s < bs; ++s) {
        hi.write(0, 1, s, k.data(), v.data());
        mixed.write(0, 1, s, k.data(), v.data());
    }
    std::vector<float> a(static_cast<size_t>(bs) * 32), b(a.size()), av(a.size()), bv(a.size());
    // Until a token goes down, the mixed cache reads exactly what HI alone would.
    hi.read_lane(0, 1, 1, bs, a.data(), av.data());
    mixed.read_lane(0, 1, 1, bs, b.data(), bv.data());
    EXPECT_EQ(a, b);
    EXPECT_EQ(av, bv);
    mixed.store_low(0, 1, 5, 1);
    EXPECT_TRUE(mixed.in_low(0, 1, 5, 1));
    EXPECT_FALSE(mixed.in_low(0, 1, 5, 0));
    mixed.read_lane(0, 1, 1, bs, b.data(), bv.data());
    // Slot 5 of head 1 now reads int2 (within half of its step over 32 values in [-1, 1]);
    // the other slots, and the other head, are as they were.
    for (size_t i = 0; i < 32; ++i) {
        EXPECT_NEAR(b[5 * 32 + i], k[32 + i], 2.0 / 3 / 2 * 1.02) << i;
        EXPECT_NEAR(bv[5 * 32 + i], v[32 + i], 2.0 / 3 / 2 * 1.02) << i;
    }
    EXPECT_NE(std::vector<float>(b.begin() + 160, b.begin() + 192),
              std::vector<float>(a.begin() + 160, a.begin() + 192));
    for (size_t i = 0; i < a.size(); ++i)
        if (i / 32 != 5) {
            EXPECT_EQ(b[i], a[i]) << i;
        }
    // The block swaps whole, tiers included; compaction moves a low token with its tier.
    std::vector<uint8_t> saved;
    mixed.save_block(1, saved);
    mixed.load_block(2, saved);
    std::vector<float> c2(a.size()), c2v(a.size());
    mixed.read_lane(0, 2, 1, bs, c2.data(), c2v.data());
    EXPECT_EQ(c2, b);
    EXPECT_EQ(c2v, bv);
    mixed.move_lane(0, 1, 2, 5, 2, 0);
    EXPECT_TRUE(mixed.in_low(0, 2, 0, 1));
    EXPECT_FALSE(mixed.in_low(0, 2, 5, 1));
    mixed.read_lane(0, 2, 1, 1, c2.data(), c2v.data());
    EXPECT_EQ(std::vector<float>(c2.begin(), c2.begin() + 32),
              std::vector<float>(b.begin() + 160, b.begin() + 192));
    // A new token written to a slot is high again.
    mixed.write(0, 1, 5, k.data(), v.data());
    EXPECT_FALSE(mixed.in_low(0, 1, 5, 1));
}

// --- in the engine, on the bundled model ---

struct Generated {
    std::vector<int32_t> ids;
    std::vector<Event> events;
    int32_t prompt = 0;
    // Tokens fed to the model: the prompt and every generated token but the last.
    int32_t fed() const { return prompt + static_cast<int32_t>(ids.size()) - 1; }
};

// 60 tokens after a short prompt, greedy, with `dtype` (a dtype or mixed:...) and `o`.
Generated run(const std::string& dtype, EvictionOptions o = {}) {
    EngineOptions eo;
    eo.threads = 1;
    if (is_kv_mixed(dtype)) {
        auto m = parse_kv_mixed(dtype);
        EXPECT_TRUE(m.ok());
        eo.kv_dtype = m->hi;
        eo.kv_low = m->lo;
        o.mixed = *m;
    } else {
        eo.kv_dtype = *parse_kv_dtype(dtype);
    }
    auto engine = Engine::create(test::bundled_loaded_model(), eo);
    EXPECT_TRUE(engine.ok());
    test::EventCollector probe;
    (*engine)->reporter().probe = &probe;
    Generated g;
    GenerateRequest req;
    req.prompt = test::bundled_loaded_model()->tokenizer->encode(
        "In the beginning God created the heaven and the earth. And the earth was without form, "
        "and void;",
        true);
    req.max_tokens = 60;
    g.prompt = static_cast<int32_t>(req.prompt.size());
    if (o.stores_less()) {
        auto e = KvEvictor::create(o, test::bundled_loaded_model()->config.n_layers);
        EXPECT_TRUE(e.ok()) << (e ? "" : e.error().message);
        req.evictor = std::move(e).value();
    }
    EXPECT_TRUE(generate(**engine, req, [&](int32_t id) { g.ids.push_back(id); }).ok());
    g.events = std::move(probe.events);
    return g;
}

TEST(KvMixedEngine, AllOfTheTokensInHighIsThatDtype) {
    for (const char* hi : {"f32", "f16", "int8"}) {
        const Generated plain = run(hi);
        ASSERT_EQ(plain.ids.size(), 60u);
        for (const char* lo : {"int8", "int4", "int2"}) {
            if (kv_dtype_bits(*parse_kv_dtype(hi)) <= kv_dtype_bits(*parse_kv_dtype(lo))) continue;
            const std::string mixed = std::string("mixed:") + hi + "/" + lo + ":100%";
            const Generated g = run(mixed);
            EXPECT_EQ(g.ids, plain.ids) << mixed;
            EXPECT_EQ(
                std::count_if(g.events.begin(), g.events.end(),
                              [](const Event& e) { return e.kind == EventKind::kTokenPrecision; }),
                0)
                << mixed;
        }
    }
}

TEST(KvMixedEngine, EveryChangeOfPrecisionIsAnEventAndTheShareStaysHigh) {
    const Generated g = run("mixed:int8/int2:20%");
    const auto& c = test::bundled_loaded_model()->config;
    // Per lane: the positions that went low, each once, with the event's fields.
    std::map<std::pair<int32_t, int32_t>, std::set<int32_t>> low;
    for (const Event& e : g.events) {
        if (e.kind != EventKind::kTokenPrecision) continue;
        EXPECT_EQ(e.text, "int8->int2");
        EXPECT_GE(e.a, 0);
        EXPECT_LT(e.a, c.n_layers);
        EXPECT_GE(e.b, 0);
        EXPECT_LT(e.b, c.n_kv_heads);
        EXPECT_GE(e.value, 0.0);
        EXPECT_EQ(e.wide, e.c);  // no eviction: a token's slot is its position
        EXPECT_GE(e.block, 0);
        const bool first_time = low[std::pair{e.a, e.b}].insert(e.c).second;
        EXPECT_TRUE(first_time) << "went low twice: " << e.c;
    }
    ASSERT_EQ(low.size(), static_cast<size_t>(c.n_layers * c.n_kv_heads));
    // The last decision was at the last block boundary the sequence passed: by then at most
    // ceil(20%) of its tokens were high, and lanes disagree (attention differs by head).
    const int32_t decided = g.fed() / 16 * 16;
    ASSERT_GT(decided, g.prompt);
    std::set<size_t> sizes;
    for (const auto& [lane, positions] : low) {
        const auto before = std::count_if(positions.begin(), positions.end(),
                                          [&](int32_t p) { return p < decided; });
        EXPECT_GE(before, decided - static_cast<int32_t>(std::ceil(0.2 * decided)));
        sizes.insert(positions.size());
    }
    std::set<std::set<int32_t>> distinct;
    for (const auto& [lane, positions] : low)
        distinct.insert(positions);
    EXPECT_GT(distinct.size(), 1u);
}

TEST(KvMergeEngine, AFirstLayerWithNoLayerAfterItMergesNothing) {
    const auto& c = test::bundled_loaded_model()->config;
    const Generated none = run("f32");
    EvictionOptions o;
    o.merge_from = c.n_layers - 1;
    const Generated last = run("f32", o);
    EXPECT_EQ(last.ids, none.ids);
    EXPECT_TRUE(std::none_of(last.events.begin(), last.events.end(),
                             [](const Event& e) { return e.kind == EventKind::kLayerMerge; }));
    // Past the last layer: refused, naming the model's layers.
    o.merge_from = c.n_layers;
    auto e = KvEvictor::create(o, c.n_layers);
    ASSERT_FALSE(e.ok());
    EXPECT_NE(e.error().message.find("it has " + std::to_string(c.n_layers)), std::string::npos)
        << e.error().message;
    // With a policy: refused (eviction would drop one layer's half of a merged token).
    o.merge_from = 0;
    o.policy = "h2o";
    o.budget_tokens = 32;
    EXPECT_FALSE(KvEvictor::create(o, c.n_layers).ok());
}

TEST(KvMergeEngine, EachPairAndStepIsAnEventCountingTokensAndBytes) {
    const auto& c = test::bundled_loaded_model()->config;
    EvictionOptions o;
    o.merge_from = 1;            // pairs (1, 2) and (3, 4); layer 5 has no partner
    o.merge_max_distance = 1.0;  // every token merges
    const Generated all = run("f32", o);
    std::map<int32_t, int64_t> merged;  // per lower layer
    int32_t steps = 0;
    for (const Event& e : all.events) {
        if (e.kind != EventKind::kLayerMerge) continue;
        EXPECT_TRUE(e.a == 1 || e.a == 3) << e.a;
        EXPECT_EQ(e.c, 0);  // nothing retained at distance 1
        EXPECT_EQ(e.wide, int64_t{e.b} * merge_saving(2 * c.head_dim * 4));  // f32 K and V
        merged[e.a] += e.b;
        steps += e.a == 1;
    }
    // Every fed token of every KV head once per pair, after every step but the last (the
    // sequence has finished by then): the prompt's step, then one token a step.
    EXPECT_EQ(steps, 59);
    EXPECT_EQ(merged[1], int64_t{all.fed() - 1} * c.n_kv_heads);
    EXPECT_EQ(merged[3], int64_t{all.fed() - 1} * c.n_kv_heads);
    // Merging changes what the upper layers read, so the tokens too.
    const Generated none = run("f32");
    EXPECT_NE(all.ids, none.ids);
    // At the default distance every token is merged or retained, once per pair; this model's
    // adjacent layers are near orthogonal (distances 0.28 to 0.6), so none merges and the tokens
    // are the full cache's.
    o.merge_max_distance = kMergeMaxDistance;
    const Generated kept = run("f32", o);
    int64_t seen = 0, merged_at_default = 0;
    for (const Event& e : kept.events)
        if (e.kind == EventKind::kLayerMerge) {
            seen += e.b + e.c;
            merged_at_default += e.b;
        }
    EXPECT_EQ(seen, 2 * int64_t{kept.fed() - 1} * c.n_kv_heads);
    if (merged_at_default == 0) {
        EXPECT_EQ(kept.ids, none.ids);
    }
}

}  // namespace
}  // namespace kvscope
