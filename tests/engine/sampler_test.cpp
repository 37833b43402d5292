#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "engine/sampler.h"

namespace kvscope {
namespace {

TEST(Sampler, GreedyPicksFirstMaximum) {
    Sampler s(5, {0.0f, 1.0f, 1});
    std::vector<float> logits = {0.1f, 3.0f, -2.0f, 3.0f, 1.0f};
    EXPECT_EQ(s.sample(logits.data()), 1);
}

TEST(Sampler, SameSeedSameTokensOtherSeedOtherTokens) {
    auto draw = [](uint64_t seed, float top_p) {
        Sampler s(8, {1.0f, top_p, seed});
        std::vector<int32_t> out;
        for (int i = 0; i < 64; ++i) {
            std::vector<float> logits = {1, 2, 3, 4, 4, 3, 2, 1};
            out.push_back(s.sample(logits.data()));
        }
        return out;
    };
    EXPECT_EQ(draw(7, 1.0f), draw(7, 1.0f));
    EXPECT_NE(draw(7, 1.0f), draw(8, 1.0f));
    EXPECT_EQ(draw(7, 0.9f), draw(7, 0.9f));
}

TEST(Sampler, TopPNeverPicksOutsideTheNucleus) {
    Sampler s(4, {1.0f, 0.5f, 3});
    std::map<int, int> seen;
    for (int i = 0; i < 2000; ++i) {
        std::vector<float> logits = {5.0f, 0.0f, 0.0f, 0.0f};  // token 0 alone holds > 0.5
        ++seen[s.sample(logits.data())];
    }
    EXPECT_EQ(seen.size(), 1u);
    EXPECT_EQ(seen[0], 2000);
}

TEST(Sampler, TemperatureSamplingFollowsTheDistribution) {
    Sampler s(2, {1.0f, 1.0f, 5});
    int ones = 0;
    const int n = 20000;
    for (int i = 0; i < n; ++i) {
        std::vector<float> logits = {0.0f, std::log(3.0f)};  // p(1) = 0.75
        ones += s.sample(logits.data());
    }
    EXPECT_NEAR(static_cast<double>(ones) / n, 0.75, 0.02);
}

}  // namespace
}  // namespace kvscope
