// Loading real and hand-built model files, and refusing broken ones with a clear message.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <sstream>

#include "engine/generate.h"
#include "engine/gguf_file.h"
#include "engine/model_loader.h"
#include "gguf_builder.h"
#include "random_model.h"
#include "test_support.h"

namespace kvscope {
namespace {

std::vector<float> values_of(const float* p, size_t n) {
    return std::vector<float>(p, p + n);
}

// A tiny llama GGUF holding the random model's weights, tensors stored as `type`.
std::string tiny_llama(const LoadedModel& m, GgmlType type, const std::string& arch = "llama") {
    const ModelConfig& c = m.config;
    test::GgufBuilder b;
    b.kv_string("general.architecture", arch);
    b.kv_u32(arch + ".embedding_length", static_cast<uint32_t>(c.dim));
    b.kv_u32(arch + ".feed_forward_length", static_cast<uint32_t>(c.hidden_dim));
    b.kv_u32(arch + ".block_count", static_cast<uint32_t>(c.n_layers));
    b.kv_u32(arch + ".attention.head_count", static_cast<uint32_t>(c.n_heads));
    b.kv_u32(arch + ".attention.head_count_kv", static_cast<uint32_t>(c.n_kv_heads));
    b.kv_u32(arch + ".context_length", static_cast<uint32_t>(c.context_length));
    b.kv_f32(arch + ".attention.layer_norm_rms_epsilon", 1e-5f);
    b.kv_f32(arch + ".rope.freq_base", 10000.0f);
    auto mat = [&](const std::string& name, const Matrix& w) {
        b.tensor(name, {static_cast<uint64_t>(w.cols), static_cast<uint64_t>(w.rows)},
                 values_of(w.data, static_cast<size_t>(w.rows) * w.cols), type);
    };
    auto vec = [&](const std::string& name, const Vector& v) {
        b.tensor(name, {static_cast<uint64_t>(v.size)},
                 values_of(v.data, static_cast<size_t>(v.size)));
    };
    mat("token_embd.weight", m.weights.token_embedding);
    for (int l = 0; l < c.n_layers; ++l) {
        const LayerWeights& w = m.weights.layers[static_cast<size_t>(l)];
        std::string p = "blk." + std::to_string(l) + ".";
        vec(p + "attn_norm.weight", w.attn_norm);
        mat(p + "attn_q.weight", w.wq);
        mat(p + "attn_k.weight", w.wk);
        mat(p + "attn_v.weight", w.wv);
        mat(p + "attn_output.weight", w.wo);
        vec(p + "ffn_norm.weight", w.ffn_norm);
        mat(p + "ffn_gate.weight", w.w_gate);
        mat(p + "ffn_up.weight", w.w_up);
        mat(p + "ffn_down.weight", w.w_down);
    }
    vec("output_norm.weight", m.weights.output_norm);
    mat("output.weight", m.weights.output);
    return b.build();
}

ModelConfig q8_friendly_config() {
    ModelConfig c = test::small_test_config();
    c.vocab_size = 96;  // every row a multiple of 32 for Q8_0
    return c;
}

TEST(ModelLoader, GgufRoundTripsWeightsOfEveryType) {
    auto src = test::make_random_model(q8_friendly_config(), 17);
    for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0}) {
        std::string path = test::temp_dir() + "/tiny.gguf";
        test::write_file(path, tiny_llama(*src, type));
        auto loaded = load_model(path);
        ASSERT_TRUE(loaded.ok()) << loaded.error().message;
        const ModelConfig& c = loaded->config;
        EXPECT_EQ(c.dim, 64);
        EXPECT_EQ(c.n_kv_heads, 2);
        EXPECT_EQ(c.vocab_size, 96);
        EXPECT_EQ(loaded->format, "gguf v3");
        double tol = type == GgmlType::F32    ? 0
                     : type == GgmlType::F16  ? 1e-3
                     : type == GgmlType::BF16 ? 1e-2
                                              : 2e-2;
        const Matrix& got = loaded->weights.layers[1].w_up;
        const Matrix& want = src->weights.layers[1].w_up;
        ASSERT_EQ(got.rows, want.rows);
        ASSERT_EQ(got.cols, want.cols);
        for (int i = 0; i < want.rows * want.cols; ++i)
            ASSERT_NEAR(got.data[i], want.data[i], tol * (1 + std::fabs(want.data[i])))
                << "type " << static_cast<int>(type);
        // And it runs.
        auto model = std::make_shared<const LoadedModel>(std::move(loaded).value());
        auto engine = Engine::create(model, {});
        ASSERT_TRUE(engine.ok());
        int n = 0;
        auto stats = generate(**engine, {{1, 2, 3}, 5, {}, {}}, [&](int32_t) { ++n; });
        ASSERT_TRUE(stats.ok());
        EXPECT_EQ(n, 5);
    }
}

TEST(ModelLoader, Fp16ConversionIsExactWhereItCanBe) {
    for (float f : {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 6.103515625e-05f, 5.960464477539063e-08f,
                    0.333251953125f})
        EXPECT_EQ(fp16_to_f32(f32_to_fp16(f)), f) << f;
    EXPECT_TRUE(std::isinf(fp16_to_f32(f32_to_fp16(1e6f))));
    EXPECT_TRUE(std::isnan(fp16_to_f32(f32_to_fp16(std::nanf("")))));
    EXPECT_EQ(fp16_to_f32(f32_to_fp16(1.0f + 1.0f / 4096)), 1.0f);  // ties round to even
}

struct BadGguf {
    const char* name;
    std::string bytes;
    const char* expect;
};

// The metadata of a one-layer llama (dim 64, 4 heads) with `kv_heads` KV heads, no tensors.
test::GgufBuilder llama_header(uint32_t kv_heads) {
    test::GgufBuilder b;
    b.kv_string("general.architecture", "llama");
    b.kv_u32("llama.embedding_length", 64);
    b.kv_u32("llama.feed_forward_length", 96);
    b.kv_u32("llama.block_count", 1);
    b.kv_u32("llama.attention.head_count", 4);
    b.kv_u32("llama.attention.head_count_kv", kv_heads);
    b.kv_u32("llama.context_length", 64);
    return b;
}

TEST(ModelLoader, RefusesLyingGgufFiles) {
    auto src = test::make_random_model(q8_friendly_config(), 3);
    std::string good = tiny_llama(*src, GgmlType::F32);
    std::vector<BadGguf> cases;
    auto mutate = [&](size_t at, const void* bytes, size_t n) {
        std::string s = good;
        std::memcpy(s.data() + at, bytes, n);
        return s;
    };
    uint32_t v1 = 1, v9 = 9;
    uint64_t huge = 1ull << 62;
    cases.push_back({"wrong magic", mutate(0, "GGUX", 4), "wrong magic"});
    cases.push_back({"version 1", mutate(4, &v1, 4), "version 1"});
    cases.push_back({"version 9", mutate(4, &v9, 4), "version 9"});
    cases.push_back({"absurd tensor count", mutate(8, &huge, 8), "tensors"});
    cases.push_back({"absurd metadata count", mutate(16, &huge, 8), "metadata entries"});
    cases.push_back({"truncated", good.substr(0, good.size() / 2), "truncated"});
    {
        test::GgufBuilder b;
        b.kv_string("general.architecture", "llama");
        b.tensor("x", {1ull << 39, 1ull << 20}, {});
        cases.push_back({"absurd dims", b.build(), "absurd dimension"});
    }
    {
        std::string s = good;  // tensor offsets shifted past the end
        test::GgufBuilder b;
        cases.push_back({"offsets past the end",
                         tiny_llama(*src, GgmlType::F32).substr(0, 0) +
                             [&] {
                                 test::GgufBuilder bb;
                                 bb.kv_string("general.architecture", "llama");
                                 bb.tensor("t", {8}, std::vector<float>(8, 1.0f));
                                 return bb.build(1 << 20);
                             }(),
                         "ends at byte"});
    }
    {
        test::GgufBuilder b;
        b.tensor("t", {8}, std::vector<float>(8, 1.0f));
        std::string s = b.build();
        const std::string entry("\x01\0\0\0\0\0\0\0t\x01\0\0\0", 13);  // name "t", one dimension
        size_t type_at = s.find(entry) + entry.size() + 8;
        uint32_t bad_type = 99;
        std::memcpy(s.data() + type_at, &bad_type, 4);
        cases.push_back({"unknown tensor type", s, "unknown type id 99"});
    }
    {
        test::GgufBuilder b;
        b.tensor("t", {8}, std::vector<float>(8, 1.0f));
        b.tensor("t", {8}, std::vector<float>(8, 1.0f));
        cases.push_back({"duplicate tensor", b.build(), "appears twice"});
    }
    {
        test::GgufBuilder b;
        b.alignment = 3;
        cases.push_back({"alignment 3", b.build(), "power of two"});
    }
    {
        test::GgufBuilder b;
        b.tensor("t", {8}, std::vector<float>(8, 1.0f));
        cases.push_back({"misaligned offset", b.build(4), "not aligned"});
    }
    {
        test::GgufBuilder b;
        b.kv_string("general.architecture", "gpt-neox");
        cases.push_back({"unsupported architecture", b.build(), "not supported"});
    }
    {
        test::GgufBuilder b;
        b.kv_string("general.architecture", "llama");
        b.kv_u32("llama.embedding_length", 0);
        cases.push_back({"zero dim", b.build(), "out of range"});
    }
    {
        // Shapes that do not match the config.
        test::GgufBuilder b = llama_header(2);
        b.tensor("token_embd.weight", {64, 96}, std::vector<float>(64 * 96, 0.5f));
        b.tensor("blk.0.attn_norm.weight", {64}, std::vector<float>(64, 1.0f));
        b.tensor("blk.0.attn_q.weight", {64, 32}, std::vector<float>(64 * 32, 0.1f));
        cases.push_back(
            {"wrong shape", b.build(), "has shape [64, 32] but the config needs [64, 64]"});
    }
    {
        test::GgufBuilder b = llama_header(3);
        cases.push_back({"kv heads do not divide", b.build(), "do not divide"});
    }
    for (const BadGguf& c : cases) {
        std::string path = test::temp_dir() + "/bad.gguf";
        test::write_file(path, c.bytes);
        auto m = load_model(path);
        ASSERT_FALSE(m.ok()) << c.name;
        EXPECT_NE(m.error().message.find(c.expect), std::string::npos)
            << c.name << ": " << m.error().message;
        EXPECT_EQ(m.error().message.find('\n'), std::string::npos)
            << "one line: " << m.error().message;
    }
}

TEST(ModelLoader, EveryTruncationAndRandomCorruptionIsSafe) {
    auto src = test::make_random_model(q8_friendly_config(), 5);
    test::GgufBuilder b;  // a small file, so every prefix can be tried
    b.kv_string("general.architecture", "llama");
    b.kv_strings("tokenizer.ggml.tokens", {"a", "b", "c"});
    b.kv_f32s("tokenizer.ggml.scores", {0, 1, 2});
    b.tensor("t", {32}, std::vector<float>(32, 1.0f), GgmlType::Q8_0);
    std::string good = b.build();
    for (size_t n = 0; n < good.size(); ++n) {
        auto r = GgufFile::parse({reinterpret_cast<const uint8_t*>(good.data()), n}, "cut.gguf");
        ASSERT_FALSE(r.ok()) << "prefix of " << n << " bytes parsed";
    }
    std::mt19937 rng(9);
    std::string big = tiny_llama(*src, GgmlType::Q8_0);
    for (int i = 0; i < 3000; ++i) {
        std::string s = i % 2 ? big : good;
        for (int k = 0; k < 4; ++k)
            s[rng() % s.size()] = static_cast<char>(rng());
        auto r =
            GgufFile::parse({reinterpret_cast<const uint8_t*>(s.data()), s.size()}, "flip.gguf");
        (void)r;  // ok or an error; never a crash (ASan watches)
    }
}

TEST(ModelLoader, Stories260kLlama2cCheckpoint) {
    auto path = test::stories260k();
    if (!path) GTEST_SKIP() << "fixture ../shared/models/stories260K/stories260K.bin not found";
    auto m = load_model(*path);
    ASSERT_TRUE(m.ok()) << m.error().message;
    const ModelConfig& c = m->config;
    EXPECT_EQ(c.dim, 64);
    EXPECT_EQ(c.hidden_dim, 172);
    EXPECT_EQ(c.n_layers, 5);
    EXPECT_EQ(c.n_heads, 8);
    EXPECT_EQ(c.n_kv_heads, 4);
    EXPECT_EQ(c.vocab_size, 512);
    EXPECT_EQ(c.context_length, 512);
    EXPECT_EQ(m->tokenizer, nullptr);

    std::string bytes = test::read_file(*path);
    for (size_t cut :
         {size_t{0}, size_t{10}, size_t{27}, size_t{28}, bytes.size() / 2, bytes.size() - 4}) {
        std::string p = test::temp_dir() + "/cut.bin";
        test::write_file(p, bytes.substr(0, cut));
        auto r = load_model(p);
        ASSERT_FALSE(r.ok()) << cut;
        EXPECT_FALSE(r.error().message.empty());
    }
    for (auto [field, value, expect] : {std::tuple<int, int32_t, const char*>{0, 0, "dim 0"},
                                        {2, 1 << 30, "n_layers"},
                                        {3, 7, "does not divide dim"},
                                        {4, 3, "n_kv_heads"},
                                        {5, 0, "vocab_size"},
                                        {6, -5, "seq_len"}}) {
        std::string s = bytes;
        std::memcpy(s.data() + 4 * field, &value, 4);
        std::string p = test::temp_dir() + "/lie.bin";
        test::write_file(p, s);
        auto r = load_model(p);
        ASSERT_FALSE(r.ok());
        EXPECT_NE(r.error().message.find(expect), std::string::npos) << r.error().message;
    }
    std::string p = test::temp_dir() + "/long.bin";
    test::write_file(p, bytes + "extra");
    auto r = load_model(p);
    ASSERT_FALSE(r.ok());
    EXPECT_NE(r.error().message.find("does not match its header"), std::string::npos);
}

TEST(ModelLoader, Stories260kGreedyMatchesLlama2cRunC) {
    auto path = test::stories260k();
    if (!path) GTEST_SKIP() << "fixture ../shared/models/stories260K/stories260K.bin not found";
    auto want_text = test::source_file("tests/data/stories260k_greedy_bos_200.ids");
    ASSERT_TRUE(want_text);
    std::vector<int32_t> want;
    std::istringstream in(test::read_file(*want_text));
    for (int32_t x; in >> x;)
        want.push_back(x);
    ASSERT_EQ(want.size(), 200u);
    auto m = load_model(*path);
    ASSERT_TRUE(m.ok());
    auto model = std::make_shared<const LoadedModel>(std::move(m).value());
    for (int block_size : {1, 16, 64}) {
        EngineOptions o;
        o.block_size = block_size;
        auto engine = Engine::create(model, o);
        ASSERT_TRUE(engine.ok());
        std::vector<int32_t> got;
        auto s = generate(**engine, {{1}, 200, {}, {}}, [&](int32_t t) { got.push_back(t); });
        ASSERT_TRUE(s.ok());
        EXPECT_EQ(got, want) << "block size " << block_size;
    }
    // Sampling uses run.c's generator too: the same coin flips give the same tokens until
    // float summation order (run.c sums sequentially, we in 8 lanes) tips a draw that lands on
    // a probability boundary.
    auto sampled_text = test::source_file("tests/data/stories260k_t1_p09_s42_200.ids");
    ASSERT_TRUE(sampled_text);
    std::vector<int32_t> want_s;
    std::istringstream in2(test::read_file(*sampled_text));
    for (int32_t x; in2 >> x;)
        want_s.push_back(x);
    auto engine = Engine::create(model, {});
    std::vector<int32_t> got_s;
    ASSERT_TRUE(generate(**engine, {{1}, 200, {1.0f, 0.9f, 42}, {}}, [&](int32_t t) {
                    got_s.push_back(t);
                }).ok());
    size_t same = 0;
    while (same < got_s.size() && same < want_s.size() && got_s[same] == want_s[same])
        ++same;
    EXPECT_GE(same, 64u) << "sampled tokens diverge from run.c after " << same;
}

}  // namespace
}  // namespace kvscope
