// The engine's exp (engine/cpu_ops.cpp), which softmax and SwiGLU use: its accuracy against
// long double, its edges, and that a value's result does not depend on where it sits in a row
// (the full vectors and the padded tail must agree, or a request's tokens would depend on its
// length).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "engine/cpu_ops.h"

namespace kvscope {
namespace {

float from_bits(uint32_t b) {
    float f;
    std::memcpy(&f, &b, sizeof f);
    return f;
}

// Every 251st float between -87.33654 and 88.72283 (about nine million): within 1.25 ulp of e^x.
TEST(CpuExp, IsWithinOneAndAQuarterUlpAcrossTheNormalRange) {
    std::vector<float> xs;
    for (uint32_t b = 0; from_bits(b) <= 88.72283f; b += 251)
        xs.push_back(from_bits(b));
    for (uint32_t b = 0x80000000u; from_bits(b) >= -87.33654f; b += 251)
        xs.push_back(from_bits(b));
    std::vector<float> ys = xs;
    exp_inplace(ys.data(), static_cast<int>(ys.size()));
    double worst = 0;
    float worst_x = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
        const long double want = std::exp(static_cast<long double>(xs[i]));
        const auto wf = static_cast<float>(want);
        const float ulp = std::nextafter(wf, std::numeric_limits<float>::infinity()) - wf;
        const double err =
            static_cast<double>(std::fabs(static_cast<long double>(ys[i]) - want) / ulp);
        if (err > worst) {
            worst = err;
            worst_x = xs[i];
        }
    }
    EXPECT_LE(worst, 1.25) << "at x = " << worst_x;
    EXPECT_GT(xs.size(), 8'000'000u);
}

TEST(CpuExp, EdgesAreZeroInfinityAndNan) {
    const float inf = std::numeric_limits<float>::infinity();
    std::vector<float> x = {-inf, -1000.0f, -87.4f, 0.0f, -0.0f, 88.8f, 1000.0f, inf, NAN, 1.0f};
    exp_inplace(x.data(), static_cast<int>(x.size()));
    EXPECT_EQ(x[0], 0.0f);  // masked keys: probability exactly 0
    EXPECT_EQ(x[1], 0.0f);
    EXPECT_EQ(x[2], 0.0f);
    EXPECT_EQ(x[3], 1.0f);
    EXPECT_EQ(x[4], 1.0f);
    EXPECT_EQ(x[5], inf);
    EXPECT_EQ(x[6], inf);
    EXPECT_EQ(x[7], inf);
    EXPECT_TRUE(std::isnan(x[8]));
    EXPECT_NEAR(x[9], 2.7182817f, 3e-7f);
}

// The same value at every index of rows of every length from 1 to 40 (whole vectors, tails and
// both) gives the same bits.
TEST(CpuExp, AValueGetsTheSameBitsWhereverItSits) {
    const std::vector<float> probes = {-3.2f, -0.3466f, 0.5f, 7.25f, -61.0f};
    for (float v : probes) {
        std::vector<float> one = {v};
        exp_inplace(one.data(), 1);
        for (int n = 1; n <= 40; ++n)
            for (int at = 0; at < n; ++at) {
                std::vector<float> row(static_cast<size_t>(n), 0.25f);
                row[static_cast<size_t>(at)] = v;
                exp_inplace(row.data(), n);
                ASSERT_EQ(row[static_cast<size_t>(at)], one[0]) << v << " at " << at << " of " << n;
            }
    }
}

// softmax: probabilities sum to 1, masked keys get exactly 0, and a row's values are those of
// its exps divided by their sum taken in index order.
TEST(CpuExp, SoftmaxIsExpOverTheSequentialSum) {
    const float inf = std::numeric_limits<float>::infinity();
    for (int n : {1, 5, 16, 17, 33, 100}) {
        std::vector<float> x(static_cast<size_t>(n));
        for (int i = 0; i < n; ++i)
            x[static_cast<size_t>(i)] =
                i % 7 == 3 ? -inf : std::sin(0.7f * static_cast<float>(i)) * 4;
        std::vector<float> want = x;
        float mx = want[0];
        for (float v : want)
            mx = std::max(mx, v);
        for (float& v : want)
            v -= mx;
        exp_inplace(want.data(), n);
        float sum = 0;
        for (float v : want)
            sum += v;
        for (float& v : want)
            v /= sum;
        softmax(x.data(), n);
        EXPECT_EQ(x, want) << n;
        for (int i = 3; i < n; i += 7)
            EXPECT_EQ(x[static_cast<size_t>(i)], 0.0f);
    }
}

TEST(CpuExp, SwigluIsSiluTimesTheGate) {
    std::vector<float> a, b;
    for (int i = 0; i < 37; ++i) {
        a.push_back(static_cast<float>(i - 18) * 0.75f);
        b.push_back(1.0f + 0.1f * static_cast<float>(i));
    }
    std::vector<float> e = a;
    for (float& v : e)
        v = -v;
    exp_inplace(e.data(), static_cast<int>(e.size()));
    std::vector<float> got = a;
    swiglu(got.data(), b.data(), static_cast<int>(got.size()));
    for (size_t i = 0; i < a.size(); ++i)
        EXPECT_EQ(got[i], a[i] * (1.0f / (1.0f + e[i])) * b[i]) << i;
}

}  // namespace
}  // namespace kvscope
