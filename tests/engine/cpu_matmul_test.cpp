// The matmul on weights of every type: exact mode equals dot() over the dequantized row, bit
// for bit, for any batch and thread count; fast mode is batch- and thread-invariant and close.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "engine/cpu_matmul.h"
#include "engine/cpu_ops.h"
#include "engine/random_weights.h"
#include "engine/thread_pool.h"

namespace kvscope {
namespace {

constexpr GgmlType kTypes[] = {GgmlType::F32,  GgmlType::F16,  GgmlType::BF16, GgmlType::Q8_0,
                               GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q4_K, GgmlType::Q6_K};

std::string name_of(GgmlType t) {
    return std::string(ggml_type_traits(static_cast<uint32_t>(t))->name);
}

struct Case {
    GgmlType type;
    int rows, cols;
    std::shared_ptr<uint8_t[]> bytes;
    Matrix m;
    std::vector<float> dequantized;  // [rows][cols]
};

Case make_case(GgmlType type, int rows, int cols, uint64_t seed) {
    WeightRng rng{seed * 0x9E3779B97F4A7C15ULL + 1};
    Case c{type, rows, cols, random_weights(type, rows, cols, 0.5f, rng), {}, {}};
    c.m = Matrix{c.bytes.get(), type, rows, cols};
    c.dequantized.resize(static_cast<size_t>(rows) * cols);
    for (int r = 0; r < rows; ++r)
        c.m.row_to_f32(r, &c.dequantized[static_cast<size_t>(r) * cols]);
    return c;
}

std::vector<float> random_input(int n, int k, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> dist;
    std::vector<float> x(static_cast<size_t>(n) * k);
    for (auto& v : x)
        v = dist(rng);
    return x;
}

TEST(CpuMatmul, ExactEqualsDotOverTheDequantizedRowsForEveryTypeBatchAndThreadCount) {
    for (GgmlType type : kTypes) {
        const int block =
            static_cast<int>(ggml_type_traits(static_cast<uint32_t>(type))->block_elements);
        std::vector<int> widths =
            block == 1 ? std::vector<int>{1, 7, 8, 67, 300}
                       : std::vector<int>{block, 3 * block, 288 / block * block + block};
        for (int k : widths) {
            const int rows = 37;  // prime, so every tile width leaves a tail
            Case c = make_case(type, rows, k, static_cast<uint64_t>(k));
            std::vector<float> x = random_input(13, k, 3);
            for (int threads : {1, 2, 3}) {
                ThreadPool pool(threads);
                for (int n = 1; n <= 13; ++n) {  // two tiles of rows and every remainder
                    std::vector<float> out(static_cast<size_t>(n) * rows);
                    matmul(pool, x.data(), n, c.m, out.data());
                    for (int r = 0; r < n; ++r)
                        for (int o = 0; o < rows; ++o) {
                            float want = dot(&c.dequantized[static_cast<size_t>(o) * k],
                                             &x[static_cast<size_t>(r) * k], k);
                            float got = out[static_cast<size_t>(r) * rows + o];
                            ASSERT_EQ(std::memcmp(&want, &got, sizeof(float)), 0)
                                << name_of(type) << " k=" << k << " n=" << n
                                << " threads=" << threads << " r=" << r << " o=" << o;
                        }
                }
            }
        }
    }
}

TEST(CpuMatmul, FastIsBatchAndThreadInvariantAndCloseToExact) {
    for (GgmlType type : kTypes) {
        const int k = 512, rows = 97;  // enough work for the pool to split it
        Case c = make_case(type, rows, k, 11);
        std::vector<float> x = random_input(9, k, 5);
        ThreadPool one(1);
        std::vector<float> exact(static_cast<size_t>(9) * rows), alone(exact.size());
        matmul(one, x.data(), 9, c.m, exact.data(), MatmulMode::kExact);
        // Each row by itself, one thread: the reference for every batched run.
        for (int r = 0; r < 9; ++r)
            matmul(one, &x[static_cast<size_t>(r) * k], 1, c.m,
                   &alone[static_cast<size_t>(r) * rows], MatmulMode::kFast);
        for (int threads : {1, 3}) {
            ThreadPool pool(threads);
            std::vector<float> batched(exact.size());
            matmul(pool, x.data(), 9, c.m, batched.data(), MatmulMode::kFast);
            ASSERT_EQ(std::memcmp(batched.data(), alone.data(), sizeof(float) * alone.size()), 0)
                << name_of(type) << " threads=" << threads;
        }
        // 8-bit activations: within a few percent of the row's scale.
        double worst = 0, scale = 0;
        for (size_t i = 0; i < exact.size(); ++i) {
            worst = std::max(worst, static_cast<double>(std::fabs(alone[i] - exact[i])));
            scale = std::max(scale, static_cast<double>(std::fabs(exact[i])));
        }
        EXPECT_LT(worst, 0.02 * scale) << name_of(type);
    }
}

// Long rows: the activations of a tile of input rows outgrow a pass (kActivationPassBytes), so
// the rows are taken in several passes over the weights; nothing may change.
TEST(CpuMatmul, ExactIsTheSameWhenInputRowsTakeSeveralPasses) {
    for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0, GgmlType::Q4_K}) {
        const int k = 16384, rows = 19;
        Case c = make_case(type, rows, k, 21);
        std::vector<float> x = random_input(14, k, 23);
        ThreadPool pool(2);
        std::vector<float> out(static_cast<size_t>(14) * rows);
        matmul(pool, x.data(), 14, c.m, out.data());
        for (int r = 0; r < 14; ++r)
            for (int o = 0; o < rows; ++o) {
                float want = dot(&c.dequantized[static_cast<size_t>(o) * k],
                                 &x[static_cast<size_t>(r) * k], k);
                float got = out[static_cast<size_t>(r) * rows + o];
                ASSERT_EQ(std::memcmp(&want, &got, sizeof(float)), 0)
                    << name_of(type) << " r=" << r << " o=" << o;
            }
    }
}

// Fast mode as its header describes it, one scalar at a time. Whatever instructions the
// kernels use (sign tricks, unsigned codes with offset sums, VNNI, interleaved rows), each
// output must be these bits.
// 8-bit activation blocks: d = max|x| / 127 rounded to fp16, codes round(x / d).
struct ActivationCodes {
    float d;
    int q[32];
};
ActivationCodes quantize_block(const float* v) {
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i)
        amax = std::max(amax, std::fabs(v[i]));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    ActivationCodes a{fp16_to_f32(f32_to_fp16(amax / 127.0f)), {}};
    for (int i = 0; i < 32; ++i)
        a.q[i] = static_cast<int>(std::nearbyint(v[i] * id));
    return a;
}
float scale_of(const uint8_t* blk) {
    uint16_t h;
    std::memcpy(&h, blk, 2);
    return fp16_to_f32(h);
}
float fused(float a, float b, float acc) {
    return matmul_fast_fuses() ? std::fma(a, b, acc) : acc + a * b;
}
// Q8_0: eight integer lanes of four products per block, scaled by d_w * d_x into eight lanes,
// folded as llama.cpp folds them.
float fast_reference_q8_0(const Case& c, int o, const float* x) {
    const uint8_t* row = c.m.row(o);
    float acc[8] = {};
    for (int b = 0; b < c.cols / 32; ++b) {
        const ActivationCodes a = quantize_block(x + 32 * b);
        const uint8_t* blk = row + static_cast<int64_t>(b) * 34;
        const float d = scale_of(blk) * a.d;
        for (int l = 0; l < 8; ++l) {
            int32_t sum = 0;
            for (int i = 4 * l; i < 4 * l + 4; ++i)
                sum += static_cast<int8_t>(blk[2 + i]) * a.q[i];
            acc[l] = fused(d, static_cast<float>(sum), acc[l]);
        }
    }
    return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}
// Q4_0: each block's exact integer dot, then acc = fma(dot, d_w * d_x, acc), block by block.
float fast_reference_q4_0(const Case& c, int o, const float* x) {
    const uint8_t* row = c.m.row(o);
    float acc = 0.0f;
    for (int b = 0; b < c.cols / 32; ++b) {
        const ActivationCodes a = quantize_block(x + 32 * b);
        const uint8_t* blk = row + static_cast<int64_t>(b) * 18;
        int32_t dot = 0;
        for (int i = 0; i < 16; ++i)
            dot += ((blk[2 + i] & 0x0f) - 8) * a.q[i] + ((blk[2 + i] >> 4) - 8) * a.q[16 + i];
        acc = fused(static_cast<float>(dot), scale_of(blk) * a.d, acc);
    }
    return acc;
}
float fast_reference(const Case& c, int o, const float* x) {
    return c.type == GgmlType::Q8_0 ? fast_reference_q8_0(c, o, x) : fast_reference_q4_0(c, o, x);
}

TEST(CpuMatmul, FastEqualsItsScalarDescriptionForQ8AndQ4) {
    for (GgmlType type : {GgmlType::Q8_0, GgmlType::Q4_0}) {
        for (int k : {32, 96, 896, 16384}) {  // the last takes several passes of input rows
            const int rows = 37;
            Case c = make_case(type, rows, k, static_cast<uint64_t>(k) + 7);
            std::vector<float> x = random_input(13, k, 9);
            // A block of zeros (scale 0) and one whose codes fall on rounding ties (max 127,
            // so x / d is x itself: 127, then -15.5 .. 14.5).
            std::fill(x.begin() + k, x.begin() + k + 32, 0.0f);
            for (int i = 0; i < 32; ++i)
                x[static_cast<size_t>(2 * k + i)] = i == 0 ? 127.0f : static_cast<float>(i) - 16.5f;
            ThreadPool pool(2);
            for (int n : {1, 6, 13}) {
                std::vector<float> out(static_cast<size_t>(n) * rows);
                matmul(pool, x.data(), n, c.m, out.data(), MatmulMode::kFast);
                for (int r = 0; r < n; ++r)
                    for (int o = 0; o < rows; ++o) {
                        float want = fast_reference(c, o, &x[static_cast<size_t>(r) * k]);
                        float got = out[static_cast<size_t>(r) * rows + o];
                        ASSERT_EQ(std::memcmp(&want, &got, sizeof(float)), 0)
                            << name_of(type) << " k=" << k << " n=" << n << " r=" << r << " o=" << o
                            << ": " << want << " vs " << got;
                    }
            }
        }
    }
}

// A build for any x86-64 carries several builds of the kernels: the one chosen must be the best
// this CPU runs, and compiled for what its name says (fast mode fuses exactly where FMA is used).
TEST(CpuMatmul, KernelsAreTheBestThisCpuRuns) {
    const std::string name = matmul_kernels_name();
    if (name == "as built") {  // -march=native: the kernels follow the build's flags
#if defined(__FMA__)
        EXPECT_TRUE(matmul_fast_fuses());
#else
        EXPECT_FALSE(matmul_fast_fuses());
#endif
        return;
    }
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                      __builtin_cpu_supports("f16c") && __builtin_cpu_supports("bmi2");
    const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
    EXPECT_EQ(name, avx512 ? "avx512-vnni" : avx2 ? "avx2" : "x86-64");
    EXPECT_EQ(matmul_fast_fuses(), avx2);
#endif
}

}  // namespace
}  // namespace kvscope
