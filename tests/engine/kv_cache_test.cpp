// The KV cache in every dtype: conversions exact where they must be and within half a step
// where they round, a block's keys kept in full precision (int4) until it fills, blocks that
// copy and swap whole, and the bytes each dtype really takes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "engine/kv_cache.h"
#include "engine/kv_quant.h"

namespace kvscope {
namespace {

TEST(KvQuant, HalfRoundTripsEveryHalfAndRoundsToNearestEven) {
    for (uint32_t h = 0; h < 0x10000; ++h) {
        float f = half_to_float(static_cast<uint16_t>(h));
        if (std::isnan(f)) {
            EXPECT_TRUE(std::isnan(half_to_float(float_to_half(f))));
            continue;
        }
        EXPECT_EQ(float_to_half(f), h) << std::hex << h;
    }
    EXPECT_EQ(half_to_float(float_to_half(1.0f)), 1.0f);
    EXPECT_EQ(float_to_half(65520.0f), 0x7c00);  // rounds past the largest half: infinity
    EXPECT_EQ(float_to_half(65519.0f), 0x7bff);
    // Between two halves exactly: to the even one.
    EXPECT_EQ(float_to_half(1.0f + 1.0f / 2048), float_to_half(1.0f));
    EXPECT_EQ(float_to_half(1.0f + 3.0f / 2048), 0x3c02);
#ifdef __FLT16_MAX__
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> any(-70000.0f, 70000.0f), small(-1e-4f, 1e-4f);
    for (int i = 0; i < 200000; ++i) {
        float x = i % 2 ? any(rng) : small(rng);
        _Float16 ref = static_cast<_Float16>(x);
        uint16_t bits;
        std::memcpy(&bits, &ref, 2);
        EXPECT_EQ(float_to_half(x), bits) << x;
    }
#endif
}

TEST(KvQuant, Int8AndInt4StayWithinHalfAStep) {
    std::mt19937 rng(2);
    std::normal_distribution<float> n(0.0f, 3.0f);
    std::vector<float> x(64), back(64);
    for (float& v : x)
        v = n(rng);
    std::vector<int8_t> q8(64);
    float scale = quantize_int8(x.data(), x.size(), q8.data());
    dequantize_int8(q8.data(), q8.size(), scale, back.data());
    for (size_t i = 0; i < x.size(); ++i)
        EXPECT_LE(std::fabs(back[i] - x[i]), scale / 2 + 1e-6f) << i;
    Int4Params p = int4_params(x.data(), x.size(), 1);
    std::vector<uint8_t> q4(32, 0);
    for (size_t i = 0; i < x.size(); ++i)
        set_nibble(q4.data(), i, int4_encode(x[i], p));
    for (size_t i = 0; i < x.size(); ++i)
        EXPECT_LE(std::fabs(int4_decode(get_nibble(q4.data(), i), p) - x[i]), p.scale / 2 + 1e-5f);
    // A constant group: no scale, every value exact.
    std::vector<float> same(8, 1.5f);
    Int4Params c = int4_params(same.data(), same.size(), 1);
    EXPECT_EQ(int4_decode(int4_encode(1.5f, c), c), 1.5f);
}

ModelConfig config() {
    ModelConfig c;
    c.n_layers = 2;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.head_dim = 32;
    c.dim = 128;
    return c;
}

TEST(KvCache, EveryDtypeReadsBackWhatWasWrittenWithinItsPrecision) {
    const ModelConfig c = config();
    const int bs = 16, dim = c.kv_dim();
    std::mt19937 rng(3);
    std::normal_distribution<float> n(0.0f, 1.0f);
    std::vector<std::vector<float>> k(bs, std::vector<float>(static_cast<size_t>(dim))), v = k;
    for (int s = 0; s < bs; ++s)
        for (int i = 0; i < dim; ++i) {
            k[static_cast<size_t>(s)][static_cast<size_t>(i)] = n(rng);
            v[static_cast<size_t>(s)][static_cast<size_t>(i)] = n(rng);
        }
    struct Want {
        KvDtype dtype;
        float tolerance;
    };
    for (Want w : {Want{KvDtype::kF32, 0.0f}, Want{KvDtype::kF16, 2e-3f},
                   Want{KvDtype::kInt8, 0.03f}, Want{KvDtype::kInt4, 0.5f}}) {
        KvCacheStorage kv(c, bs, 4, w.dtype);
        std::vector<float> ko(static_cast<size_t>(bs) * 32), vo(ko.size());
        for (int s = 0; s < bs; ++s) {
            kv.write(1, 2, s, k[static_cast<size_t>(s)].data(), v[static_cast<size_t>(s)].data());
            // int4 keys stay exact while the block is open; the last slot quantizes them all.
            if (w.dtype == KvDtype::kInt4 && s == bs - 2) {
                kv.read_lane(1, 2, 1, s + 1, ko.data(), nullptr);
                EXPECT_EQ(ko[static_cast<size_t>(s) * 32 + 3], k[static_cast<size_t>(s)][35]);
                EXPECT_GT(kv.open_block_bytes(2), 0u);
            }
        }
        EXPECT_EQ(kv.open_block_bytes(2), 0u);
        for (int h = 0; h < 2; ++h) {
            kv.read_lane(1, 2, h, bs, ko.data(), vo.data());
            for (int s = 0; s < bs; ++s)
                for (int i = 0; i < 32; ++i) {
                    size_t o = static_cast<size_t>(s) * 32 + static_cast<size_t>(i);
                    size_t e = static_cast<size_t>(h * 32 + i);
                    EXPECT_NEAR(ko[o], k[static_cast<size_t>(s)][e], w.tolerance)
                        << kv_dtype_name(w.dtype);
                    EXPECT_NEAR(vo[o], v[static_cast<size_t>(s)][e], w.tolerance)
                        << kv_dtype_name(w.dtype);
                }
        }
        // A block copies and swaps whole: the same bytes read back elsewhere.
        kv.copy_block(2, 0);
        std::vector<uint8_t> saved;
        kv.save_block(2, saved);
        kv.load_block(3, saved);
        for (BlockId b : {0, 3}) {
            std::vector<float> ko2(ko.size()), vo2(vo.size());
            kv.read_lane(1, b, 1, bs, ko2.data(), vo2.data());
            kv.read_lane(1, 2, 1, bs, ko.data(), vo.data());
            EXPECT_EQ(ko2, ko) << kv_dtype_name(w.dtype);
            EXPECT_EQ(vo2, vo) << kv_dtype_name(w.dtype);
        }
    }
}

// What each dtype takes: int8 about half of f16 and int4 about a quarter, plus their scales.
TEST(KvCache, BytesPerBlockCountTheScales) {
    const ModelConfig c = config();
    const int bs = 32;
    auto bytes = [&](KvDtype d) { return KvCacheStorage(c, bs, 1, d).bytes_per_block(); };
    const size_t elems = 2 * static_cast<size_t>(bs) * c.kv_dim() * c.n_layers;
    EXPECT_EQ(bytes(KvDtype::kF32), elems * 4);
    EXPECT_EQ(bytes(KvDtype::kF16), elems * 2);
    // int8: a byte each, and an f32 scale per token and head for K and for V.
    EXPECT_EQ(bytes(KvDtype::kInt8),
              elems + 2 * static_cast<size_t>(bs) * c.n_kv_heads * 4 * c.n_layers);
    // int4: half a byte each; values: scale and minimum per token, head and 32 channels; keys:
    // scale and minimum per channel of the block.
    EXPECT_EQ(
        bytes(KvDtype::kInt4),
        elems / 2 + (static_cast<size_t>(bs) * c.n_kv_heads * 2 + c.kv_dim() * 2) * 4 * c.n_layers);
    // With 32-channel heads and f32 scales: int8 0.5625 of f16, int4 0.375 (the elements alone
    // would be 0.5 and 0.25).
    EXPECT_LT(bytes(KvDtype::kInt8), bytes(KvDtype::kF16) * 0.6);
    EXPECT_LT(bytes(KvDtype::kInt4), bytes(KvDtype::kF16) * 0.4);
}

}  // namespace
}  // namespace kvscope
