// RMSNorm, RoPE and SwiGLU on the device against the CPU backend's own functions
// (engine/cpu_ops.h), on random inputs of many shapes.
#include "kernels/elementwise.h"

#include <gtest/gtest.h>

#include <cmath>

#include "cuda_test_util.h"
#include "engine/cpu_ops.h"

namespace kvscope {
namespace {

using test::all_close;
using test::DeviceBuffer;

std::vector<double> widen(const std::vector<float>& v) {
    return {v.begin(), v.end()};
}

TEST(KernelRmsnorm, MatchesCpuOnManyShapes) {
    KVSCOPE_REQUIRE_CUDA_DEVICE();
    std::mt19937 rng(1);
    // Widths of real models (896, 2048, 4096), odd ones (no float4 path), tiny and wide.
    for (int n : {1, 3, 64, 127, 896, 2048, 4096, 5120, 8191}) {
        for (int rows : {1, 7, 33}) {
            auto x = test::random_floats(rng, static_cast<size_t>(rows) * n, -3.0f, 3.0f);
            auto w = test::random_floats(rng, static_cast<size_t>(n), 0.5f, 1.5f);
            std::vector<float> want(x.size());
            for (int r = 0; r < rows; ++r)
                rmsnorm(&want[static_cast<size_t>(r) * n], &x[static_cast<size_t>(r) * n], w.data(),
                        n, 1e-5f);
            DeviceBuffer<float> dx(x), dw(w), dout(x.size());
            KVSCOPE_CUDA_OK(kernels::rmsnorm(dout.get(), dx.get(), dw.get(), rows, n, 1e-5f));
            KVSCOPE_CUDA_OK(cudaDeviceSynchronize());
            EXPECT_TRUE(all_close(dout.download(), widen(want), 1e-6, 2e-5))
                << "rows " << rows << ", n " << n;
            // In place, as the engine will call it on the residual's copy.
            KVSCOPE_CUDA_OK(kernels::rmsnorm(dx.get(), dx.get(), dw.get(), rows, n, 1e-5f));
            KVSCOPE_CUDA_OK(cudaDeviceSynchronize());
            EXPECT_TRUE(all_close(dx.download(), widen(want), 1e-6, 2e-5)) << "in place, n " << n;
        }
    }
}

TEST(KernelRmsnorm, RefusesBadShapes) {
    KVSCOPE_REQUIRE_CUDA_DEVICE();
    DeviceBuffer<float> b(16);
    EXPECT_EQ(kernels::rmsnorm(b.get(), b.get(), b.get(), 1, 0, 1e-5f), cudaErrorInvalidValue);
    EXPECT_EQ(kernels::rmsnorm(nullptr, b.get(), b.get(), 1, 16, 1e-5f), cudaErrorInvalidValue);
    EXPECT_EQ(kernels::rmsnorm(b.get(), b.get(), b.get(), 0, 16, 1e-5f), cudaSuccess);
}

std::vector<float> inv_freq_for(int head_dim, float theta) {
    // As CpuForward's constructor computes them.
    std::vector<float> f(static_cast<size_t>(head_dim / 2));
    for (int i = 0; i < head_dim / 2; ++i)
        f[static_cast<size_t>(i)] =
            1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(head_dim));
    return f;
}

TEST(KernelRope, MatchesCpuForBothLayoutsAndLongPositions) {
    KVSCOPE_REQUIRE_CUDA_DEVICE();
    std::mt19937 rng(2);
    struct Shape {
        int tokens, heads, kv_heads, head_dim;
        float theta;
    };
    for (const Shape& s : {Shape{1, 1, 1, 2, 10000.0f}, Shape{5, 8, 8, 8, 10000.0f},
                           Shape{9, 14, 2, 64, 1e6f}, Shape{17, 32, 8, 128, 5e5f},
                           Shape{3, 4, 1, 80, 10000.0f}, Shape{2, 2, 2, 256, 10000.0f}}) {
        for (RopeStyle style : {RopeStyle::kAdjacentPairs, RopeStyle::kHalfSplit}) {
            const auto qn = static_cast<size_t>(s.tokens) * s.heads * s.head_dim;
            const auto kn = static_cast<size_t>(s.tokens) * s.kv_heads * s.head_dim;
            auto q = test::random_floats(rng, qn), k = test::random_floats(rng, kn);
            std::vector<int32_t> pos(static_cast<size_t>(s.tokens));
            std::uniform_int_distribution<int32_t> any_pos(0, 40000);
            for (int32_t& p : pos)
                p = any_pos(rng);
            pos[0] = 0;
            auto inv_freq = inv_freq_for(s.head_dim, s.theta);
            std::vector<float> want_q = q, want_k = k;
            for (int t = 0; t < s.tokens; ++t) {
                for (int h = 0; h < s.heads; ++h)
                    rope(&want_q[(static_cast<size_t>(t) * s.heads + h) * s.head_dim], s.head_dim,
                         pos[static_cast<size_t>(t)], inv_freq.data(), style);
                for (int h = 0; h < s.kv_heads; ++h)
                    rope(&want_k[(static_cast<size_t>(t) * s.kv_heads + h) * s.head_dim],
                         s.head_dim, pos[static_cast<size_t>(t)], inv_freq.data(), style);
            }
            DeviceBuffer<float> dq(q), dk(k), df(inv_freq);
            DeviceBuffer<int32_t> dp(pos);
            const auto layout = style == RopeStyle::kAdjacentPairs
                                    ? kernels::RopeLayout::kAdjacentPairs
                                    : kernels::RopeLayout::kHalfSplit;
            KVSCOPE_CUDA_OK(kernels::rope(dq.get(), dk.get(), dp.get(), df.get(), s.tokens, s.heads,
                                          s.kv_heads, s.head_dim, layout));
            KVSCOPE_CUDA_OK(cudaDeviceSynchronize());
            // sincosf and the CPU's cos/sin of the same float angle differ by an ulp or two.
            EXPECT_TRUE(all_close(dq.download(), widen(want_q), 2e-6, 2e-6))
                << "q, head_dim " << s.head_dim << ", style " << static_cast<int>(style);
            EXPECT_TRUE(all_close(dk.download(), widen(want_k), 2e-6, 2e-6))
                << "k, head_dim " << s.head_dim << ", style " << static_cast<int>(style);
        }
    }
}

TEST(KernelRope, QueriesOnlyLeavesNoKeys) {
    KVSCOPE_REQUIRE_CUDA_DEVICE();
    std::mt19937 rng(3);
    auto q = test::random_floats(rng, 2 * 4 * 16);
    std::vector<int32_t> pos = {3, 4};
    auto inv_freq = inv_freq_for(16, 10000.0f);
    std::vector<float> want = q;
    for (int t = 0; t < 2; ++t)
        for (int h = 0; h < 4; ++h)
            rope(&want[(static_cast<size_t>(t) * 4 + h) * 16], 16, pos[static_cast<size_t>(t)],
                 inv_freq.data(), RopeStyle::kHalfSplit);
    DeviceBuffer<float> dq(q), df(inv_freq);
    DeviceBuffer<int32_t> dp(pos);
    KVSCOPE_CUDA_OK(kernels::rope(dq.get(), nullptr, dp.get(), df.get(), 2, 4, 2, 16,
                                  kernels::RopeLayout::kHalfSplit));
    KVSCOPE_CUDA_OK(cudaDeviceSynchronize());
    EXPECT_TRUE(all_close(dq.download(), widen(want), 2e-6, 2e-6));
    EXPECT_EQ(kernels::rope(dq.get(), nullptr, dp.get(), df.get(), 2, 4, 2, 15,
                            kernels::RopeLayout::kHalfSplit),
              cudaErrorInvalidValue);
}

TEST(KernelSwiglu, MatchesCpuAlignedOddAndInPlace) {
    KVSCOPE_REQUIRE_CUDA_DEVICE();
    std::mt19937 rng(4);
    for (int64_t n :
         {int64_t{1}, int64_t{3}, int64_t{4864}, int64_t{14336 * 3}, int64_t{1000003}}) {
        auto gate = test::random_floats(rng, static_cast<size_t>(n), -8.0f, 8.0f);
        auto up = test::random_floats(rng, static_cast<size_t>(n), -2.0f, 2.0f);
        std::vector<float> want = gate;
        swiglu(want.data(), up.data(), static_cast<int>(n));
        DeviceBuffer<float> dg(gate), du(up), dout(gate.size());
        KVSCOPE_CUDA_OK(kernels::swiglu(dout.get(), dg.get(), du.get(), n));
        KVSCOPE_CUDA_OK(cudaDeviceSynchronize());
        EXPECT_TRUE(all_close(dout.download(), widen(want), 1e-6, 1e-6)) << "n " << n;
        // In place over the gate (the engine's call), from an address that is not 16-byte
        // aligned: the scalar path.
        if (n > 1) {
            const int64_t m = n - 1;
            std::vector<float> want_off(gate.begin() + 1, gate.end());
            std::vector<float> up_off(up.begin() + 1, up.end());
            swiglu(want_off.data(), up_off.data(), static_cast<int>(m));
            KVSCOPE_CUDA_OK(kernels::swiglu(dg.get() + 1, dg.get() + 1, du.get() + 1, m));
            KVSCOPE_CUDA_OK(cudaDeviceSynchronize());
            auto got = dg.download();
            EXPECT_TRUE(all_close({got.begin() + 1, got.end()}, widen(want_off), 1e-6, 1e-6))
                << "offset by one, n " << m;
        }
    }
}

}  // namespace
}  // namespace kvscope
