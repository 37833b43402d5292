// Each eviction policy keeps exactly what it claims, on hand-made lanes whose answer is known:
// sinks and a recent window (streaming), top accumulated attention plus a window (h2o), top
// pooled observation scores plus the window (snapkv), the lowest current attention dropped
// (tova), the smallest key norms kept (knorm), the older tokens the recent window's queries attend
// to most plus the window (morphkv).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "engine/eviction_policy.h"

namespace kvscope {
namespace {

LaneStats lane_of(int32_t n) {
    LaneStats lane;
    for (int32_t i = 0; i < n; ++i)
        lane.position.push_back(i);
    lane.accumulated.assign(static_cast<size_t>(n), 0.0f);
    lane.current.assign(static_cast<size_t>(n), 0.0f);
    lane.observed.assign(static_cast<size_t>(n), 0.0f);
    lane.key_norm.assign(static_cast<size_t>(n), 1.0f);
    return lane;
}

// Positions that stay after applying the policy's choices.
std::set<int32_t> kept(const char* policy, const LaneStats& lane, const EvictionParams& p,
                       std::vector<EvictionChoice>* choices = nullptr) {
    auto pol = make_eviction_policy(policy);
    EXPECT_TRUE(pol.ok());
    std::vector<EvictionChoice> out;
    (*pol)->choose(lane, p, out);
    std::set<int32_t> keep;
    for (int32_t pos : lane.position)
        if (pos >= 0) keep.insert(pos);
    for (const EvictionChoice& c : out) {
        EXPECT_EQ(lane.position[static_cast<size_t>(c.slot)], c.position);
        EXPECT_EQ(keep.erase(c.position), 1u) << "evicted twice or a hole: " << c.position;
    }
    if (choices) *choices = out;
    return keep;
}

TEST(EvictionPolicy, StreamingKeepsTheSinksAndTheRecentWindow) {
    EvictionParams p;
    p.budget = 8;
    p.sinks = 4;
    std::vector<EvictionChoice> why;
    EXPECT_EQ(kept("streaming", lane_of(20), p, &why),
              (std::set<int32_t>{0, 1, 2, 3, 16, 17, 18, 19}));
    ASSERT_EQ(why.size(), 12u);
    for (const EvictionChoice& c : why) {
        EXPECT_STREQ(c.reason, "outside-window");
        EXPECT_EQ(c.score, c.position);
    }
    // Holes left by earlier steps do not count: the window is of tokens, not slots.
    LaneStats holes = lane_of(20);
    holes.position[17] = holes.position[18] = -1;
    EXPECT_EQ(kept("streaming", holes, p), (std::set<int32_t>{0, 1, 2, 3, 14, 15, 16, 19}));
}

TEST(EvictionPolicy, HeavyHittersKeepTheTopAccumulatedScoresAndAWindow) {
    LaneStats lane = lane_of(16);
    for (auto [pos, score] : {std::pair{2, 0.9f}, {7, 0.8f}, {11, 0.7f}, {5, 0.1f}})
        lane.accumulated[static_cast<size_t>(pos)] = score;
    EvictionParams p;
    p.budget = 6;  // 3 heavy hitters + a window of 3
    std::vector<EvictionChoice> why;
    EXPECT_EQ(kept("h2o", lane, p, &why), (std::set<int32_t>{2, 7, 11, 13, 14, 15}));
    for (const EvictionChoice& c : why)
        EXPECT_STREQ(c.reason, "low-accumulated-attention");
    // The lowest scores go first.
    EXPECT_LE(why.front().score, why.back().score);
    // A given window.
    p.window = 1;
    EXPECT_EQ(kept("h2o", lane, p), (std::set<int32_t>{2, 5, 7, 11, 14, 15}));  // ties: older first
}

TEST(EvictionPolicy, SnapKvKeepsTheTopPooledObservationScoresPerLanePlusTheWindow) {
    LaneStats lane = lane_of(24);
    lane.observed[3] = 1.0f;   // pooled with kernel 5: slots 1..5 score 1.0
    lane.observed[12] = 0.5f;  // slots 10..14 score 0.5
    EvictionParams p;
    p.budget = 9;
    p.window = 4;  // the observation window: positions 20..23
    p.pool_kernel = 5;
    std::vector<EvictionChoice> why;
    auto keep = kept("snapkv", lane, p, &why);
    EXPECT_EQ(keep, (std::set<int32_t>{1, 2, 3, 4, 5, 20, 21, 22, 23}));
    for (const EvictionChoice& c : why)
        EXPECT_STREQ(c.reason, "low-pooled-score");
    // Without pooling only the peaks themselves stand out.
    p.pool_kernel = 1;
    p.budget = 6;
    EXPECT_EQ(kept("snapkv", lane, p), (std::set<int32_t>{3, 12, 20, 21, 22, 23}));
    auto policy = make_eviction_policy("snapkv");
    EXPECT_TRUE((*policy)->once_after_prefill());
}

TEST(EvictionPolicy, TovaDropsWhatTheNewestQueryAttendsToLeast) {
    LaneStats lane = lane_of(6);
    lane.current = {0.30f, 0.05f, 0.20f, 0.01f, 0.14f, 0.30f};
    EvictionParams p;
    p.budget = 4;
    std::vector<EvictionChoice> why;
    EXPECT_EQ(kept("tova", lane, p, &why), (std::set<int32_t>{0, 2, 4, 5}));
    ASSERT_EQ(why.size(), 2u);
    EXPECT_EQ(why[0].position, 3);  // the lowest first
    EXPECT_STREQ(why[0].reason, "low-current-attention");
    // The newest token stays even when it scores lowest: it is the query.
    lane.current[5] = 0.0f;
    EXPECT_TRUE(kept("tova", lane, p).count(5));
}

TEST(EvictionPolicy, KeyNormKeepsTheSmallestNorms) {
    LaneStats lane = lane_of(5);
    lane.key_norm = {4.0f, 1.0f, 3.0f, 0.5f, 2.0f};
    EvictionParams p;
    p.budget = 2;
    std::vector<EvictionChoice> why;
    EXPECT_EQ(kept("knorm", lane, p, &why), (std::set<int32_t>{1, 3}));
    EXPECT_EQ(why.front().score, 4.0);  // the largest norm first
    EXPECT_STREQ(why.front().reason, "high-key-norm");
}

// A morphkv lane whose ring holds the rows of the queries at `queries` (row q % ring), each
// giving the listed attention to older positions.
LaneStats morphkv_lane(
    int32_t n, int32_t ring,
    const std::vector<std::pair<int32_t, std::vector<std::pair<int32_t, float>>>>& queries) {
    LaneStats lane = lane_of(n);
    lane.window_rows.assign(static_cast<size_t>(ring), std::vector<float>(static_cast<size_t>(n)));
    lane.window_query.assign(static_cast<size_t>(ring), -1);
    for (const auto& [q, attention] : queries) {
        const auto row = static_cast<size_t>(q % ring);
        lane.window_query[row] = q;
        std::fill(lane.window_rows[row].begin(), lane.window_rows[row].end(), 0.0f);
        for (auto [pos, a] : attention)
            lane.window_rows[row][static_cast<size_t>(pos)] = a;
    }
    return lane;
}

TEST(EvictionPolicy, MorphKvKeepsTheWindowAndWhatItsQueriesAttendToMost) {
    // Queries 12..15 are the window. Position 7 is attended a little by three of them, 5 once
    // strongly: max ranks 5 above 7, sum ranks 7 first.
    const auto window_of_four = morphkv_lane(16, 4,
                                             {{12, {{2, 0.9f}}},
                                              {13, {{5, 0.5f}, {7, 0.35f}}},
                                              {14, {{7, 0.35f}}},
                                              {15, {{9, 0.6f}, {7, 0.35f}}}});
    EvictionParams p;
    p.budget = 7;  // the window of 4 and 3 older tokens
    p.window = 4;
    std::vector<EvictionChoice> why;
    EXPECT_EQ(kept("morphkv", window_of_four, p, &why),
              (std::set<int32_t>{2, 5, 9, 12, 13, 14, 15}));
    ASSERT_EQ(why.size(), 9u);
    for (const EvictionChoice& c : why)
        EXPECT_STREQ(c.reason, "low-recent-window-max-attention");
    EXPECT_FLOAT_EQ(static_cast<float>(why.back().score), 0.35f);  // 7, the last to go
    EXPECT_EQ(why.back().position, 7);
    p.window_aggregate = WindowAggregate::kSum;
    EXPECT_EQ(kept("morphkv", window_of_four, p, &why),
              (std::set<int32_t>{2, 7, 9, 12, 13, 14, 15}));
    EXPECT_STREQ(why.front().reason, "low-recent-window-summed-attention");
    EXPECT_EQ(why.back().position, 5);
    EXPECT_FLOAT_EQ(static_cast<float>(why.back().score), 0.5f);
    // A window narrower than the ring: only the newest queries' rows count (14 and 15).
    p.window_aggregate = WindowAggregate::kMax;
    p.window = 2;
    p.budget = 4;
    EXPECT_EQ(kept("morphkv", window_of_four, p), (std::set<int32_t>{7, 9, 14, 15}));
}

TEST(EvictionPolicy, MorphKvDropsAnOlderTokenWhenTheWindowMovesOn) {
    // Query 12 alone attended to position 2. Once query 16 takes its row, 2 has no score left
    // and goes, though it was kept the step before; 12, now outside the window, stays for the
    // attention 16 gives it.
    const auto moved = morphkv_lane(
        17, 4, {{13, {{5, 0.5f}}}, {14, {{7, 0.35f}}}, {15, {{9, 0.6f}}}, {16, {{12, 0.7f}}}});
    EvictionParams p;
    p.budget = 7;
    p.window = 4;
    std::vector<EvictionChoice> why;
    EXPECT_EQ(kept("morphkv", moved, p, &why), (std::set<int32_t>{5, 9, 12, 13, 14, 15, 16}));
    const auto two = std::find_if(why.begin(), why.end(),
                                  [](const EvictionChoice& c) { return c.position == 2; });
    ASSERT_NE(two, why.end());
    EXPECT_EQ(two->score, 0.0);
    // No --window: 32, cut to half of this budget of 7.
    p.window = -1;
    EXPECT_EQ(kept("morphkv", moved, p).count(16), 1u);
    EXPECT_FALSE(make_eviction_policy("morphkv").value()->once_after_prefill());
}

TEST(EvictionPolicy, NothingGoesWithinTheBudget) {
    for (const std::string& name : eviction_policy_names()) {
        EvictionParams p;
        p.budget = 10;
        LaneStats lane = lane_of(10);
        EXPECT_EQ(kept(name.c_str(), lane, p).size(), 10u) << name;
        p.budget = 100;
        EXPECT_EQ(kept(name.c_str(), lane, p).size(), 10u) << name;
    }
    auto unknown = make_eviction_policy("lru");
    ASSERT_FALSE(unknown.ok());
    EXPECT_NE(unknown.error().message.find("unknown eviction policy 'lru'"), std::string::npos);
}

TEST(EvictionPolicy, PyramidGivesLowerLayersMoreWithTheSameTotal) {
    EXPECT_EQ(layer_budgets(64, 6, LayerBudget::kUniform), std::vector<int32_t>(6, 64));
    for (int32_t per_layer : {1, 7, 64, 1000})
        for (int32_t layers : {1, 2, 6, 32}) {
            auto b = layer_budgets(per_layer, layers, LayerBudget::kPyramid);
            ASSERT_EQ(b.size(), static_cast<size_t>(layers));
            int64_t total = 0;
            for (int32_t x : b) {
                EXPECT_GE(x, 1);
                total += x;
            }
            EXPECT_EQ(total, static_cast<int64_t>(per_layer) * layers)
                << per_layer << " x " << layers;
            if (per_layer >= 64 && layers > 1) {
                EXPECT_GT(b.front(), b.back());
                EXPECT_TRUE(std::is_sorted(b.rbegin(), b.rend()));
            }
        }
}

}  // namespace
}  // namespace kvscope
