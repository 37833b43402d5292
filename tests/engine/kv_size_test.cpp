// `kvscope kv-size`'s counts: each shape against arithmetic written out here, and against what
// the cache itself holds for the dtypes it stores.
#include <gtest/gtest.h>

#include "engine/kv_cache.h"
#include "engine/kv_size.h"

namespace kvscope {
namespace {

KvSize size_of(const std::string& shape, int64_t ctx, const std::string& dtype, int64_t batch = 1) {
    const KvShape* s = find_kv_shape(shape);
    EXPECT_NE(s, nullptr) << shape;
    auto d = parse_kv_size_dtype(dtype);
    EXPECT_TRUE(d.ok());
    auto k = kv_size(*s, ctx, batch, *d);
    EXPECT_TRUE(k.ok()) << k.error().message;
    return *k;
}

TEST(KvSize, EveryShapeAgainstHandArithmetic) {
    struct Case {
        const char* shape;
        int64_t per_token;  // 2 (K and V) x layers x KV heads x head_dim x 2 bytes (f16)
    };
    for (const Case& c : {
             Case{"qwen2.5-0.5b", 2 * 24 * 2 * 64 * 2}, Case{"llama-3.2-1b", 2 * 16 * 8 * 64 * 2},
             Case{"llama-3-8b", 2 * 32 * 8 * 128 * 2}, Case{"mistral-7b", 2 * 32 * 8 * 128 * 2},
             Case{"llama-2-7b", 2 * 32 * 32 * 128 * 2}, Case{"llama-3-70b", 2 * 80 * 8 * 128 * 2},
             Case{"qwen2.5-7b", 2 * 28 * 4 * 128 * 2}, Case{"qwen3-8b", 2 * 36 * 8 * 128 * 2},
             Case{"gemma-3-12b", 2 * 48 * 8 * 256 * 2}, Case{"gemma-3-27b", 2 * 62 * 16 * 128 * 2},
             Case{"deepseek-v3", 61 * (512 + 64) * 2},  // one latent + RoPE key, no V
         }) {
        KvSize k = size_of(c.shape, 1024, "f16", 3);
        EXPECT_EQ(k.bytes_per_token, c.per_token) << c.shape;
        // 1024 tokens: within Gemma's window, so every layer holds all of them.
        EXPECT_EQ(k.bytes_per_sequence, c.per_token * 1024) << c.shape;
        EXPECT_EQ(k.bytes_per_batch, c.per_token * 1024 * 3) << c.shape;
    }
    // Every shape is counted above.
    EXPECT_EQ(kv_shapes().size(), 11u);
}

TEST(KvSize, Llama2SevenBIsAGibibyteAt2048AndLlama3EightBAQuarterOfIt) {
    KvSize l2 = size_of("llama-2-7b", 2048, "f16");
    EXPECT_EQ(l2.bytes_per_sequence, int64_t{2} * 32 * 32 * 128 * 2048 * 2);
    EXPECT_EQ(l2.bytes_per_sequence, 1073741824);
    EXPECT_NE(l2.formula.find("2 (K and V) x 32 layers x 32 KV heads x 128 head_dim x 2 bytes"),
              std::string::npos)
        << l2.formula;
    EXPECT_EQ(size_of("llama-3-8b", 2048, "f16").bytes_per_sequence, 1073741824 / 4);
    // bf16 takes f16's bytes, f32 twice them.
    EXPECT_EQ(size_of("llama-2-7b", 2048, "bf16").bytes_per_sequence, 1073741824);
    EXPECT_EQ(size_of("llama-2-7b", 2048, "f32").bytes_per_sequence, int64_t{2} * 1073741824);
}

TEST(KvSize, MhaGqaAndMqaOfOneShape) {
    KvSize k = size_of("llama-3-8b", 2048, "f16");
    ASSERT_EQ(k.variants.size(), 3u);
    EXPECT_EQ(k.variants[0].bytes_per_token, 2 * 32 * 32 * 128 * 2);  // MHA: 32 KV heads
    EXPECT_EQ(k.variants[1].bytes_per_token, 2 * 32 * 8 * 128 * 2);   // its own GQA
    EXPECT_EQ(k.variants[2].bytes_per_token, 2 * 32 * 1 * 128 * 2);   // MQA
    EXPECT_NE(k.variants[1].what.find("the model's own"), std::string::npos);
    // Llama 2 7B is MHA itself: two rows, the first its own.
    KvSize l2 = size_of("llama-2-7b", 2048, "f16");
    ASSERT_EQ(l2.variants.size(), 2u);
    EXPECT_NE(l2.variants[0].what.find("the model's own"), std::string::npos);
    EXPECT_EQ(l2.variants[1].bytes_per_sequence, 1073741824 / 32);
    // DeepSeek-V3's heads uncompressed: 128 heads of K 192 (128 + 64 RoPE) and V 128.
    KvSize ds = size_of("deepseek-v3", 2048, "bf16");
    ASSERT_EQ(ds.variants.size(), 3u);
    EXPECT_EQ(ds.variants[1].bytes_per_token, 61 * 128 * (192 + 128) * 2);
}

TEST(KvSize, GemmaLocalLayersHoldOnlyTheirWindow) {
    // Gemma 3 27B at 8192 tokens: 10 global layers hold 8192, 52 local ones 1024; each layer
    // 2 x 16 KV heads x 128 x 2 bytes = 8192 bytes a token.
    KvSize k = size_of("gemma-3-27b", 8192, "f16");
    ASSERT_EQ(k.groups.size(), 2u);
    EXPECT_EQ(k.groups[0].layers, 10);
    EXPECT_EQ(k.groups[1].layers, 52);
    EXPECT_EQ(k.groups[0].bytes_per_sequence, int64_t{10} * 8192 * 8192);
    EXPECT_EQ(k.groups[1].bytes_per_sequence, int64_t{52} * 1024 * 8192);
    EXPECT_EQ(k.bytes_per_sequence, int64_t{10} * 8192 * 8192 + int64_t{52} * 1024 * 8192);
    KvSize g12 = size_of("gemma-3-12b", 8192, "f16");  // 8 global, 40 local, 2 x 8 x 256 x 2
    EXPECT_EQ(g12.bytes_per_sequence, int64_t{8} * 8192 * 8192 + int64_t{40} * 1024 * 8192);
    EXPECT_FALSE(k.note.empty());
}

TEST(KvSize, QuantizedDtypesCountTheirScalesAsTheCacheStoresThem) {
    // Llama 3 8B, per token: int8 codes 2 x 32 x 8 x 128 = 65536 bytes + an f16 scale per
    // layer, head, K and V: 2 x 32 x 8 x 2 = 1024.
    EXPECT_EQ(size_of("llama-3-8b", 2048, "int8").bytes_per_token, 65536 + 1024);
    // int4: codes 32768; values an f16 scale and minimum per head and 32 channels:
    // 32 x 8 x 4 groups x 4 bytes = 4096; keys a scale and minimum per channel of a 16-token
    // block: 32 x 8 x 128 x 4 bytes / 16 = 8192.
    EXPECT_EQ(size_of("llama-3-8b", 2048, "int4").bytes_per_token, 32768 + 4096 + 8192);
    EXPECT_EQ(size_of("llama-3-8b", 2048, "int2").bytes_per_token, 16384 + 4096 + 8192);
    // A last block not full: whole blocks, and its keys also in f16 (32 layers x 16 x 8 x 128
    // x 2 bytes).
    EXPECT_EQ(size_of("llama-3-8b", 2047, "int4").bytes_per_sequence,
              int64_t{2048} * 45056 + 32 * 16 * 8 * 128 * 2);
    EXPECT_EQ(size_of("llama-3-8b", 2047, "f16").bytes_per_sequence, int64_t{2048} * 131072);

    // The same as the cache's own storage says, for every shape it runs and dtype it stores.
    for (const KvShape& s : kv_shapes()) {
        if (!s.runnable) continue;
        for (const char* d : {"f32", "f16", "int8", "int4", "int2"}) {
            KvCacheStorage cache(s.config, 16, 1, parse_kv_dtype(d).value());
            EXPECT_EQ(size_of(s.name, 16, d).bytes_per_sequence,
                      static_cast<int64_t>(cache.bytes_per_block()))
                << s.name << " " << d;
        }
    }
}

TEST(KvSize, RefusesWhatItCannotCount) {
    const KvShape* s = find_kv_shape("llama-3-8b");
    ASSERT_NE(s, nullptr);
    auto f16 = parse_kv_size_dtype("f16");
    EXPECT_FALSE(kv_size(*s, 0, 1, *f16).ok());
    EXPECT_FALSE(kv_size(*s, kMaxKvSizeCtx + 1, 1, *f16).ok());
    EXPECT_FALSE(kv_size(*s, 1024, 0, *f16).ok());
    auto bad = parse_kv_size_dtype("fp8");
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.error().message.find("bf16"), std::string::npos);
    auto mla = kv_size(*find_kv_shape("deepseek-v3"), 1024, 1, *parse_kv_size_dtype("int4"));
    EXPECT_FALSE(mla.ok());
    EXPECT_EQ(find_kv_shape("llama-4"), nullptr);
    EXPECT_NE(kv_shape_names().find("gemma-3-27b"), std::string::npos);
}

}  // namespace
}  // namespace kvscope
