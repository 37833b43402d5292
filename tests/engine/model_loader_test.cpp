// Loading models: tiny GGUF models built in memory (llama, mistral, qwen2; every loadable
// tensor type) read back to the weights that were written, llama2.c checkpoints (synthetic
// ones, and stories260K against run.c), and broken files and absurd configs refused with a
// message that names the file and the problem.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <span>
#include <sstream>

#include "engine/generate.h"
#include "engine/gguf_file.h"
#include "engine/gguf_model.h"
#include "engine/llama2c_loader.h"
#include "engine/model_loader.h"
#include "gguf_builder.h"
#include "random_model.h"
#include "test_support.h"

namespace kvscope {
namespace {

using test::GgufBuilder;

std::vector<float> values_of(const float* p, size_t n) {
    return std::vector<float>(p, p + n);
}
// Every value of a matrix as fp32, whatever its type.
std::vector<float> matrix_values(const Matrix& m) {
    std::vector<float> v(static_cast<size_t>(m.rows) * static_cast<size_t>(m.cols));
    for (int r = 0; r < m.rows; ++r)
        m.row_to_f32(r, &v[static_cast<size_t>(r) * static_cast<size_t>(m.cols)]);
    return v;
}

// Refused, with a one-line message that contains `needle`.
template <class T>
::testing::AssertionResult fails_with(const Result<T>& r, const std::string& needle) {
    if (r.ok()) return ::testing::AssertionFailure() << "accepted; expected \"" << needle << "\"";
    const std::string& m = r.error().message;
    if (m.find(needle) == std::string::npos)
        return ::testing::AssertionFailure() << "message lacks \"" << needle << "\": " << m;
    if (m.find('\n') != std::string::npos)
        return ::testing::AssertionFailure() << "message spans lines: " << m;
    return ::testing::AssertionSuccess();
}

// The metadata of a model with config `c` under architecture `arch`.
void put_config(GgufBuilder& b, const ModelConfig& c, const std::string& arch) {
    b.kv_string("general.architecture", arch);
    b.kv_string("general.name", "tiny " + arch);
    b.kv_u32(arch + ".embedding_length", static_cast<uint32_t>(c.dim));
    b.kv_u32(arch + ".feed_forward_length", static_cast<uint32_t>(c.hidden_dim));
    b.kv_u32(arch + ".block_count", static_cast<uint32_t>(c.n_layers));
    b.kv_u32(arch + ".attention.head_count", static_cast<uint32_t>(c.n_heads));
    b.kv_u32(arch + ".attention.head_count_kv", static_cast<uint32_t>(c.n_kv_heads));
    b.kv_u32(arch + ".context_length", static_cast<uint32_t>(c.context_length));
    b.kv_f32(arch + ".attention.layer_norm_rms_epsilon", 1e-6f);
    b.kv_f32(arch + ".rope.freq_base", 500000.0f);
}

// A GGUF holding model `m`'s weights: matrices stored as `type`, vectors as F32 (as llama.cpp
// does). `tied` leaves output.weight out.
GgufBuilder model_gguf(const LoadedModel& m, GgmlType type, const std::string& arch = "llama",
                       bool tied = false) {
    const ModelConfig& c = m.config;
    GgufBuilder b;
    put_config(b, c, arch);
    auto mat = [&](const std::string& name, const Matrix& w) {
        b.tensor(name, {static_cast<uint64_t>(w.cols), static_cast<uint64_t>(w.rows)},
                 matrix_values(w), type);
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
        if (c.has_qkv_bias) {
            vec(p + "attn_q.bias", w.bq);
            vec(p + "attn_k.bias", w.bk);
            vec(p + "attn_v.bias", w.bv);
        }
        vec(p + "ffn_norm.weight", w.ffn_norm);
        mat(p + "ffn_gate.weight", w.w_gate);
        mat(p + "ffn_up.weight", w.w_up);
        mat(p + "ffn_down.weight", w.w_down);
    }
    vec("output_norm.weight", m.weights.output_norm);
    if (!tied) mat("output.weight", m.weights.output);
    return b;
}

ModelConfig block_friendly_config() {
    ModelConfig c = test::small_test_config();
    c.vocab_size = 96;  // every row a multiple of 32 for the block types
    c.eos_token = -1;   // as loaded from a GGUF without tokenizer keys
    c.rms_eps = 1e-6f;  // what put_config() writes
    c.rope_theta = 500000.0f;
    return c;
}

std::string write_model(const std::string& bytes, const std::string& name = "m.gguf") {
    return test::write_file(test::temp_dir() + "/" + name, bytes);
}

Result<LoadedModel> load_bytes(const std::string& bytes) {
    return load_model(write_model(bytes));
}

// What dequantizing `want` after encoding it as `type` gives: the loader must match it exactly.
std::vector<float> through(GgmlType type, const float* want, size_t n) {
    std::vector<float> in(want, want + n), out(n);
    auto bytes = GgufBuilder::encode(in, type);
    dequantize_to_f32(type, bytes.data(), out.data(), n);
    return out;
}

void expect_same_matrix(const Matrix& got, const Matrix& want, GgmlType type, const char* what) {
    ASSERT_EQ(got.rows, want.rows) << what;
    ASSERT_EQ(got.cols, want.cols) << what;
    const size_t n = static_cast<size_t>(want.rows) * want.cols;
    EXPECT_EQ(matrix_values(got), through(type, want.f32(), n)) << what;
}

std::vector<int32_t> greedy(std::shared_ptr<const LoadedModel> model, int n) {
    auto engine = Engine::create(std::move(model), {});
    EXPECT_TRUE(engine.ok()) << engine.error().message;
    std::vector<int32_t> out;
    auto stats =
        generate(**engine, {{1, 2, 3}, n, {}, {}, {}}, [&](int32_t t) { out.push_back(t); });
    EXPECT_TRUE(stats.ok());
    return out;
}

// [SECTION] GGUF models that load

TEST(ModelLoader, GgufWeightsOfEveryTypeEqualWhatWasWritten) {
    auto src = test::make_random_model(block_friendly_config(), 17);
    for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0,
                          GgmlType::Q4_0, GgmlType::Q4_1}) {
        const char* name = ggml_type_traits(static_cast<uint32_t>(type))->name.data();
        auto loaded = load_bytes(model_gguf(*src, type).build());
        ASSERT_TRUE(loaded.ok()) << loaded.error().message;
        const ModelConfig& c = loaded->config;
        EXPECT_EQ(c.architecture, "llama");
        EXPECT_EQ(c.name, "tiny llama");
        EXPECT_EQ(c.dim, 64);
        EXPECT_EQ(c.hidden_dim, 96);
        EXPECT_EQ(c.n_layers, 2);
        EXPECT_EQ(c.n_heads, 4);
        EXPECT_EQ(c.n_kv_heads, 2);
        EXPECT_EQ(c.head_dim, 16);
        EXPECT_EQ(c.vocab_size, 96);
        EXPECT_EQ(c.context_length, 256);
        EXPECT_FLOAT_EQ(c.rms_eps, 1e-6f);
        EXPECT_FLOAT_EQ(c.rope_theta, 500000.0f);
        EXPECT_EQ(c.rope_style, RopeStyle::kAdjacentPairs);
        EXPECT_FALSE(c.has_qkv_bias);
        EXPECT_EQ(c.bos_token, 1);
        EXPECT_EQ(c.eos_token, -1);  // no tokenizer, no eos key: generation runs to the limit
        EXPECT_EQ(loaded->format, "gguf v3");
        EXPECT_EQ(loaded->tokenizer, nullptr);
        const ModelWeights& got = loaded->weights;
        const ModelWeights& want = src->weights;
        expect_same_matrix(got.token_embedding, want.token_embedding, type, name);
        expect_same_matrix(got.output, want.output, type, name);
        for (size_t l = 0; l < 2; ++l) {
            const LayerWeights &g = got.layers[l], &w = want.layers[l];
            expect_same_matrix(g.wq, w.wq, type, name);
            expect_same_matrix(g.wk, w.wk, type, name);
            expect_same_matrix(g.wv, w.wv, type, name);
            expect_same_matrix(g.wo, w.wo, type, name);
            expect_same_matrix(g.w_gate, w.w_gate, type, name);
            expect_same_matrix(g.w_up, w.w_up, type, name);
            expect_same_matrix(g.w_down, w.w_down, type, name);
            EXPECT_EQ(values_of(g.attn_norm.data, 64), values_of(w.attn_norm.data, 64));
            EXPECT_EQ(values_of(g.ffn_norm.data, 64), values_of(w.ffn_norm.data, 64));
            EXPECT_EQ(g.bq.data, nullptr);
        }
        EXPECT_EQ(values_of(got.output_norm.data, 64), values_of(want.output_norm.data, 64));
        if (type == GgmlType::F32) {
            // Same weights, same engine: the same tokens as the model they came from.
            auto model = std::make_shared<const LoadedModel>(std::move(loaded).value());
            EXPECT_EQ(greedy(model, 12), greedy(src, 12));
        }
    }
}

TEST(ModelLoader, AlignedF32IsZeroCopyAndOwnersKeepTheFileAlive) {
    auto src = test::make_random_model(block_friendly_config(), 2);
    std::string path = write_model(model_gguf(*src, GgmlType::F32).build());
    LoadedModel m;
    {
        auto loaded = load_model(path);
        ASSERT_TRUE(loaded.ok()) << loaded.error().message;
        m = std::move(loaded).value();
    }
    std::filesystem::remove(path);  // the mapping outlives the name
    auto file = std::static_pointer_cast<const GgufFile>(m.weights.owners.at(0));
    auto bytes = file->bytes();
    auto inside = [&](const float* p) {
        auto* b = reinterpret_cast<const uint8_t*>(p);
        return b >= bytes.data() && b < bytes.data() + bytes.size();
    };
    EXPECT_TRUE(inside(m.weights.token_embedding.f32()));
    EXPECT_TRUE(inside(m.weights.layers[1].w_down.f32()));
    EXPECT_TRUE(inside(m.weights.output_norm.data));
    EXPECT_EQ(m.weights.owners.size(), 1u);  // nothing was copied
    EXPECT_EQ(m.weights.layers[1].w_down.f32()[5], src->weights.layers[1].w_down.f32()[5]);
}

TEST(ModelLoader, MisalignedF32IsCopied) {
    ModelConfig c = block_friendly_config();
    c.n_layers = 1;
    auto src = test::make_random_model(c, 8);
    // general.alignment 2 and a 2-byte tensor first: every F32 tensor after it sits at 2 mod 4.
    GgufBuilder b;
    b.alignment = 2;
    put_config(b, c, "llama");
    b.tensor("aaa.pad", {1}, {0.0f}, GgmlType::F16);
    auto mat = [&](const std::string& name, const Matrix& w) {
        b.tensor(name, {static_cast<uint64_t>(w.cols), static_cast<uint64_t>(w.rows)},
                 matrix_values(w));
    };
    auto vec = [&](const std::string& name, const Vector& v) {
        b.tensor(name, {static_cast<uint64_t>(v.size)},
                 values_of(v.data, static_cast<size_t>(v.size)));
    };
    const LayerWeights& w = src->weights.layers[0];
    mat("token_embd.weight", src->weights.token_embedding);
    vec("blk.0.attn_norm.weight", w.attn_norm);
    mat("blk.0.attn_q.weight", w.wq);
    mat("blk.0.attn_k.weight", w.wk);
    mat("blk.0.attn_v.weight", w.wv);
    mat("blk.0.attn_output.weight", w.wo);
    vec("blk.0.ffn_norm.weight", w.ffn_norm);
    mat("blk.0.ffn_gate.weight", w.w_gate);
    mat("blk.0.ffn_up.weight", w.w_up);
    mat("blk.0.ffn_down.weight", w.w_down);
    vec("output_norm.weight", src->weights.output_norm);
    auto img = b.build_with_layout();
    ASSERT_EQ(img.layout.tensors[1].data_at % 4, 2u);  // the test really is misaligned
    auto loaded = load_bytes(img.bytes);
    ASSERT_TRUE(loaded.ok()) << loaded.error().message;
    const float* emb = loaded->weights.token_embedding.f32();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(emb) % alignof(float), 0u);
    EXPECT_EQ(loaded->weights.owners.size(), 12u);  // the file and 11 copies
    EXPECT_EQ(values_of(emb, 96 * 64), values_of(src->weights.token_embedding.f32(), 96 * 64));
    EXPECT_EQ(values_of(loaded->weights.layers[0].w_down.f32(), 96 * 64),
              values_of(w.w_down.f32(), 96 * 64));
    EXPECT_EQ(loaded->weights.output.f32(), emb);  // tied: no output.weight
}

TEST(ModelLoader, TiedOutputSharesTheEmbedding) {
    auto src = test::make_random_model(block_friendly_config(), 4);
    auto loaded = load_bytes(model_gguf(*src, GgmlType::Q8_0, "llama", true).build());
    ASSERT_TRUE(loaded.ok()) << loaded.error().message;
    EXPECT_EQ(loaded->weights.output.f32(), loaded->weights.token_embedding.f32());
    EXPECT_EQ(loaded->weights.output.rows, 96);
}

TEST(ModelLoader, MistralAndQwen2) {
    auto mistral = load_bytes(
        model_gguf(*test::make_random_model(block_friendly_config(), 5), GgmlType::F16, "mistral")
            .build());
    ASSERT_TRUE(mistral.ok()) << mistral.error().message;
    EXPECT_EQ(mistral->config.architecture, "mistral");
    EXPECT_EQ(mistral->config.rope_style, RopeStyle::kAdjacentPairs);

    ModelConfig c = block_friendly_config();
    c.has_qkv_bias = true;
    auto src = test::make_random_model(c, 6);
    auto qwen = load_bytes(model_gguf(*src, GgmlType::BF16, "qwen2").build());
    ASSERT_TRUE(qwen.ok()) << qwen.error().message;
    EXPECT_EQ(qwen->config.rope_style, RopeStyle::kHalfSplit);
    EXPECT_TRUE(qwen->config.has_qkv_bias);
    const LayerWeights& l = qwen->weights.layers[1];
    EXPECT_EQ(values_of(l.bq.data, 64), values_of(src->weights.layers[1].bq.data, 64));
    EXPECT_EQ(values_of(l.bk.data, 32), values_of(src->weights.layers[1].bk.data, 32));
    EXPECT_EQ(values_of(l.bv.data, 32), values_of(src->weights.layers[1].bv.data, 32));
    auto model = std::make_shared<const LoadedModel>(std::move(qwen).value());
    EXPECT_EQ(greedy(model, 4).size(), 4u);

    // Without its biases a qwen2 file is incomplete.
    ModelConfig no_bias = block_friendly_config();
    auto plain = test::make_random_model(no_bias, 6);
    EXPECT_TRUE(fails_with(load_bytes(model_gguf(*plain, GgmlType::F32, "qwen2").build()),
                           "tensor 'blk.0.attn_q.bias' is missing"));
}

TEST(ModelLoader, GgufTokenizerAndSpecialTokens) {
    ModelConfig c = block_friendly_config();
    c.vocab_size = 32;
    auto src = test::make_random_model(c, 9);
    std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
    for (int i = 3; i < 32; ++i)
        tokens.push_back(std::string(1, static_cast<char>('a' + i % 26)) + std::to_string(i));
    GgufBuilder b = model_gguf(*src, GgmlType::F32);
    b.kv_string("tokenizer.ggml.model", "llama");
    b.kv_strings("tokenizer.ggml.tokens", tokens);
    b.kv_f32s("tokenizer.ggml.scores", std::vector<float>(32, 0.0f));
    b.kv_u32("tokenizer.ggml.bos_token_id", 1);
    b.kv_u32("tokenizer.ggml.eos_token_id", 2);
    auto m = load_bytes(b.build());
    ASSERT_TRUE(m.ok()) << m.error().message;
    ASSERT_NE(m->tokenizer, nullptr);
    EXPECT_EQ(m->tokenizer->vocab_size(), 32);
    EXPECT_EQ(m->config.bos_token, 1);
    EXPECT_EQ(m->config.eos_token, 2);

    // Keys win over defaults.
    GgufBuilder keys = model_gguf(*src, GgmlType::F32);
    keys.kv_u32("tokenizer.ggml.bos_token_id", 7);
    keys.kv_u32("tokenizer.ggml.eos_token_id", 9);
    auto k = load_bytes(keys.build());
    ASSERT_TRUE(k.ok()) << k.error().message;
    EXPECT_EQ(k->config.bos_token, 7);
    EXPECT_EQ(k->config.eos_token, 9);

    GgufBuilder outside = model_gguf(*src, GgmlType::F32);
    outside.kv_u64("tokenizer.ggml.eos_token_id", (1ull << 32) + 2);  // would wrap to 2 as int
    EXPECT_TRUE(fails_with(load_bytes(outside.build()),
                           "'tokenizer.ggml.eos_token_id' = 4294967298 is outside the vocabulary"));

    GgufBuilder fewer = model_gguf(*src, GgmlType::F32);
    fewer.kv_string("tokenizer.ggml.model", "llama");
    fewer.kv_strings("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>"});
    EXPECT_TRUE(fails_with(load_bytes(fewer.build()),
                           "the tokenizer has 3 tokens but token_embd.weight has 32 rows"));

    GgufBuilder unknown = model_gguf(*src, GgmlType::F32);
    unknown.kv_string("tokenizer.ggml.model", "bert");
    unknown.kv_strings("tokenizer.ggml.tokens", tokens);
    auto u = load_bytes(unknown.build());
    EXPECT_TRUE(fails_with(u, "'bert' is not supported"));
    EXPECT_NE(u.error().message.find("m.gguf: "), std::string::npos);  // names the file

    GgufBuilder no_tokens = model_gguf(*src, GgmlType::F32);
    no_tokens.kv_string("tokenizer.ggml.model", "llama");
    EXPECT_TRUE(fails_with(load_bytes(no_tokens.build()), "tokenizer.ggml.tokens"));
}

// [SECTION] GGUF models that must not load

// The metadata of a one-layer llama (dim 64, 4 heads, 96 hidden) with `kv_heads` KV heads.
GgufBuilder llama_header(uint32_t kv_heads = 2) {
    GgufBuilder b;
    b.kv_string("general.architecture", "llama");
    b.kv_u32("llama.embedding_length", 64);
    b.kv_u32("llama.feed_forward_length", 96);
    b.kv_u32("llama.block_count", 1);
    b.kv_u32("llama.attention.head_count", 4);
    b.kv_u32("llama.attention.head_count_kv", kv_heads);
    b.kv_u32("llama.context_length", 64);
    return b;
}

// llama_header() with one key replaced (written with a different type when asked).
std::string header_with(const std::string& key, uint64_t value, bool as_string = false) {
    GgufBuilder b;
    b.kv_string("general.architecture", "llama");
    const std::pair<const char*, uint64_t> base[] = {{"llama.embedding_length", 64},
                                                     {"llama.feed_forward_length", 96},
                                                     {"llama.block_count", 1},
                                                     {"llama.attention.head_count", 4},
                                                     {"llama.attention.head_count_kv", 2},
                                                     {"llama.context_length", 64}};
    for (auto [k, v] : base)
        if (k != key) b.kv_u32(k, static_cast<uint32_t>(v));
    if (as_string)
        b.kv_string(key, std::to_string(value));
    else
        b.kv_u64(key, value);
    b.tensor("token_embd.weight", {64, 8}, std::vector<float>(64 * 8, 0.5f));
    return b.build();
}

TEST(ModelLoader, RefusesAbsurdConfigs) {
    struct Case {
        const char* key;
        uint64_t value;
        const char* expect;
    };
    const Case cases[] = {
        {"llama.attention.head_count", 0, "'llama.attention.head_count' = 0 is out of range"},
        {"llama.attention.head_count_kv", 3, "3 KV heads do not divide 4 query heads"},
        {"llama.attention.head_count_kv", 8, "8 KV heads do not divide 4 query heads"},
        {"llama.embedding_length", 1 << 20, "'llama.embedding_length' = 1048576 is out of range"},
        {"llama.embedding_length", 66, "embedding_length 66 is not a multiple of head_count 4"},
        {"llama.context_length", 0, "'llama.context_length' = 0 is out of range"},
        {"llama.block_count", 5000, "'llama.block_count' = 5000 is out of range"},
        {"llama.feed_forward_length", 1ull << 40, "is out of range"},
        {"llama.attention.key_length", 15, "head size 15 is odd"},
        {"llama.attention.value_length", 8, "'llama.attention.value_length' = 8 differs"},
        {"llama.rope.dimension_count", 8, "'llama.rope.dimension_count' = 8 differs"},
        {"llama.vocab_size", 9, "'llama.vocab_size' = 9 but token_embd.weight has 8 rows"},
    };
    for (const Case& c : cases)
        EXPECT_TRUE(fails_with(load_bytes(header_with(c.key, c.value)), c.expect)) << c.key;
    EXPECT_TRUE(fails_with(load_bytes(header_with("llama.block_count", 2, true)),
                           "'llama.block_count' should be an integer, not a string"));
    GgufBuilder missing;
    missing.kv_string("general.architecture", "llama");
    EXPECT_TRUE(fails_with(load_bytes(missing.build()),
                           "metadata key 'llama.embedding_length' is missing"));
    GgufBuilder no_arch;
    no_arch.kv_u32("llama.block_count", 1);
    EXPECT_TRUE(
        fails_with(load_bytes(no_arch.build()), "metadata key 'general.architecture' is missing"));
    GgufBuilder gptj;
    gptj.kv_string("general.architecture", "gpt\nj");
    EXPECT_TRUE(fails_with(load_bytes(gptj.build()), "architecture 'gpt\\x0aj' is not supported"));
    for (float eps : {0.0f, -1.0f, 2.0f, std::nanf("")}) {
        GgufBuilder b = llama_header();
        b.kv_f32("llama.attention.layer_norm_rms_epsilon", eps);
        EXPECT_TRUE(fails_with(load_bytes(b.build()), "layer_norm_rms_epsilon' =")) << eps;
    }
    GgufBuilder theta = llama_header();
    theta.kv_f64("llama.rope.freq_base", -10000);
    EXPECT_TRUE(fails_with(load_bytes(theta.build()), "'llama.rope.freq_base' = -10000"));
}

TEST(ModelLoader, ChecksEveryTensorAgainstTheConfig) {
    // dim 64, 4 heads of 16, 2 KV heads: attn_k must be [64, 32].
    GgufBuilder b = llama_header(2);
    b.tensor("token_embd.weight", {64, 8}, std::vector<float>(64 * 8, 0.5f));
    b.tensor("blk.0.attn_norm.weight", {64}, std::vector<float>(64, 1.0f));
    b.tensor("blk.0.attn_q.weight", {64, 64}, std::vector<float>(64 * 64, 0.1f));
    b.tensor("blk.0.attn_k.weight", {64, 16}, std::vector<float>(64 * 16, 0.1f));
    EXPECT_TRUE(fails_with(load_bytes(b.build()),
                           "tensor 'blk.0.attn_k.weight' has shape [64, 16] "
                           "but the config needs [64, 32]"));

    GgufBuilder missing = llama_header(2);
    missing.tensor("token_embd.weight", {64, 8}, std::vector<float>(64 * 8, 0.5f));
    missing.tensor("blk.0.attn_norm.weight", {64}, std::vector<float>(64, 1.0f));
    EXPECT_TRUE(fails_with(load_bytes(missing.build()), "tensor 'blk.0.attn_q.weight' is missing"));

    GgufBuilder emb3d = llama_header(2);
    emb3d.tensor("token_embd.weight", {64, 8, 1}, std::vector<float>(64 * 8, 0.5f));
    EXPECT_TRUE(
        fails_with(load_bytes(emb3d.build()), "tensor 'token_embd.weight' has shape [64, 8, 1]"));
    GgufBuilder transposed = llama_header(2);
    transposed.tensor("token_embd.weight", {8, 64}, std::vector<float>(64 * 8, 0.5f));
    EXPECT_TRUE(fails_with(load_bytes(transposed.build()),
                           "tensor 'token_embd.weight' has shape [8, 64] but the config needs "
                           "[64, 64]"));
    GgufBuilder no_emb = llama_header(2);
    EXPECT_TRUE(fails_with(load_bytes(no_emb.build()), "tensor 'token_embd.weight' is missing"));
}

TEST(ModelLoader, NamesTypesItCannotLoad) {
    GgufBuilder q6;
    q6.kv_string("general.architecture", "llama");
    q6.kv_u32("llama.embedding_length", 256);
    q6.kv_u32("llama.feed_forward_length", 256);
    q6.kv_u32("llama.block_count", 1);
    q6.kv_u32("llama.attention.head_count", 4);
    q6.kv_u32("llama.context_length", 64);
    q6.tensor_raw("token_embd.weight", {256, 8}, static_cast<uint32_t>(GgmlType::Q5_K),
                  std::vector<uint8_t>(8 * 176));
    EXPECT_TRUE(fails_with(load_bytes(q6.build()),
                           "tensor 'token_embd.weight' has type Q5_K, which kvscope cannot load "
                           "yet (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K)"));
}

TEST(ModelLoader, RefusesLyingGgufFilesThroughLoadModel) {
    auto src = test::make_random_model(block_friendly_config(), 3);
    auto img = model_gguf(*src, GgmlType::F32).build_with_layout();
    std::string truncated = img.bytes.substr(0, img.bytes.size() - 100);
    EXPECT_TRUE(fails_with(load_bytes(truncated), "tensor 'output.weight' ends at byte"));
    std::string v1 = img.bytes;
    test::patch(v1, test::GgufLayout::kVersionAt, uint32_t{1});
    EXPECT_TRUE(fails_with(load_bytes(v1), "GGUF version 1 is not supported"));
    EXPECT_TRUE(fails_with(load_bytes(img.bytes.substr(0, 10)), "truncated at byte 8"));
}

// [SECTION] Telling formats apart

TEST(ModelLoader, UnknownFilesAndPathsAreClearErrors) {
    const std::string dir = test::temp_dir();
    EXPECT_TRUE(fails_with(load_model(dir + "/missing.gguf"), "cannot open"));
    EXPECT_TRUE(fails_with(load_model(dir), "is a directory"));
    EXPECT_TRUE(fails_with(load_model(test::write_file(dir + "/empty.bin", "")), "empty"));
    EXPECT_TRUE(fails_with(load_model(test::write_file(dir + "/gg.bin", "GG")),
                           "not a GGUF file (it does not start with \"GGUF\") nor a llama2.c "
                           "checkpoint (only 2 bytes, shorter than the 28-byte header)"));
    EXPECT_TRUE(fails_with(load_model(test::write_file(dir + "/junk.bin", std::string(100, 'x'))),
                           "nor a llama2.c checkpoint (dim 2021161080 is outside 1..65536)"));
    EXPECT_TRUE(fails_with(load_model(test::write_file(dir + "/g.gguf", "GGUF")),
                           "truncated at byte 4 while reading the version"));
}

// [SECTION] llama2.c

struct Llama2cHeader {
    int32_t dim = 8, hidden = 12, layers = 2, heads = 2, kv_heads = 1, vocab = 10, seq = 4;
};

// A checkpoint whose tensor number k (0-based, in run.c's order) holds 1e6 * (k + 1) + i at
// element i, so every view can be checked against where run.c would read it.
std::string llama2c_image(const Llama2cHeader& h, bool shared_classifier) {
    const int64_t head = h.dim / h.heads, kv = h.kv_heads * head, L = h.layers;
    const int64_t sizes[] = {h.vocab * h.dim,
                             L * h.dim,
                             L * h.dim * h.dim,
                             L * kv * h.dim,
                             L * kv * h.dim,
                             L * h.dim * h.dim,
                             L * h.dim,
                             L * h.hidden * h.dim,
                             L * h.dim * h.hidden,
                             L * h.hidden * h.dim,
                             h.dim,
                             h.seq * head / 2,
                             h.seq * head / 2,
                             h.vocab * h.dim};
    const int32_t header[7] = {h.dim,   h.hidden,   h.layers,
                               h.heads, h.kv_heads, shared_classifier ? h.vocab : -h.vocab,
                               h.seq};
    std::string out(reinterpret_cast<const char*>(header), sizeof header);
    const size_t n_tensors = shared_classifier ? 13 : 14;
    for (size_t k = 0; k < n_tensors; ++k)
        for (int64_t i = 0; i < sizes[k]; ++i) {
            float v = 1e6f * static_cast<float>(k + 1) + static_cast<float>(i);
            out.append(reinterpret_cast<const char*>(&v), 4);
        }
    return out;
}

// Element i of a view that starts `offset` floats into run.c's tensor k.
void expect_tensor(const float* p, size_t n, int k, int64_t offset, const char* what) {
    for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(p[i], 1e6f * static_cast<float>(k + 1) + static_cast<float>(offset + i))
            << what << " element " << i;
}

TEST(ModelLoader, Llama2cTensorsAreReadInRunCOrder) {
    for (bool shared : {true, false}) {
        Llama2cHeader h;
        auto m = load_model(write_model(llama2c_image(h, shared), "tiny.bin"));
        ASSERT_TRUE(m.ok()) << m.error().message;
        const ModelConfig& c = m->config;
        EXPECT_EQ(m->format, "llama2.c");
        EXPECT_EQ(c.dim, 8);
        EXPECT_EQ(c.hidden_dim, 12);
        EXPECT_EQ(c.n_layers, 2);
        EXPECT_EQ(c.n_heads, 2);
        EXPECT_EQ(c.n_kv_heads, 1);
        EXPECT_EQ(c.head_dim, 4);
        EXPECT_EQ(c.vocab_size, 10);
        EXPECT_EQ(c.context_length, 4);
        EXPECT_EQ(c.rope_style, RopeStyle::kAdjacentPairs);
        EXPECT_FLOAT_EQ(c.rms_eps, 1e-5f);
        EXPECT_FLOAT_EQ(c.rope_theta, 10000.0f);
        EXPECT_EQ(c.bos_token, 1);
        EXPECT_EQ(c.eos_token, 1);  // run.c stops on BOS
        EXPECT_EQ(m->tokenizer, nullptr);
        const ModelWeights& w = m->weights;
        expect_tensor(w.token_embedding.f32(), 80, 0, 0, "token_embedding");
        for (int l = 0; l < 2; ++l) {
            const LayerWeights& lw = w.layers[static_cast<size_t>(l)];
            expect_tensor(lw.attn_norm.data, 8, 1, l * 8, "rms_att");
            expect_tensor(lw.wq.f32(), 64, 2, l * 64, "wq");
            expect_tensor(lw.wk.f32(), 32, 3, l * 32, "wk");
            expect_tensor(lw.wv.f32(), 32, 4, l * 32, "wv");
            expect_tensor(lw.wo.f32(), 64, 5, l * 64, "wo");
            expect_tensor(lw.ffn_norm.data, 8, 6, l * 8, "rms_ffn");
            expect_tensor(lw.w_gate.f32(), 96, 7, l * 96, "w1");
            expect_tensor(lw.w_down.f32(), 96, 8, l * 96, "w2");
            expect_tensor(lw.w_up.f32(), 96, 9, l * 96, "w3");
            EXPECT_EQ(lw.wk.rows, 4);
            EXPECT_EQ(lw.w_down.rows, 8);
            EXPECT_EQ(lw.w_down.cols, 12);
        }
        expect_tensor(w.output_norm.data, 8, 10, 0, "rms_final");
        if (shared) {
            EXPECT_EQ(w.output.f32(), w.token_embedding.f32());
        } else {
            expect_tensor(w.output.f32(), 80, 13, 0, "wcls");  // after the two RoPE tables
        }
    }
}

TEST(ModelLoader, Llama2cFromMisalignedMemoryIsCopied) {
    std::string image = llama2c_image({}, true);
    auto buffer = std::make_shared<std::vector<uint8_t>>(image.size() + 1);
    std::memcpy(buffer->data() + 1, image.data(), image.size());
    auto m = llama2c_from_bytes({buffer->data() + 1, image.size()}, buffer, "mem.bin");
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(m->weights.token_embedding.f32()) % alignof(float), 0u);
    expect_tensor(m->weights.layers[1].w_up.f32(), 96, 9, 96, "w3");
}

TEST(ModelLoader, Llama2cRefusesAbsurdHeadersAndSizes) {
    const std::string good = llama2c_image({}, false);
    struct Case {
        int field;
        int32_t value;
        const char* expect;
    };
    const Case cases[] = {
        {0, 0, "dim 0 is outside 1..65536"},
        {0, 1 << 20, "dim 1048576 is outside"},
        {1, -1, "hidden_dim -1 is outside"},
        {2, 1 << 30, "n_layers 1073741824 is outside"},
        {3, 3, "n_heads 3 does not divide dim 8"},
        {3, 0, "n_heads 0 does not divide"},
        {4, 0, "n_kv_heads 0 does not divide n_heads 2"},
        {4, 4, "n_kv_heads 4 does not divide n_heads 2"},
        {5, 0, "vocab_size 0 is outside"},
        {5, INT32_MIN, "vocab_size -2147483648 is outside"},
        {5, 20'000'000, "vocab_size 20000000 is outside"},
        {6, -5, "seq_len -5 is outside"},
        {6, 0, "seq_len 0 is outside"},
        {3, 8, "head size 1 is odd"},
        {0, 0x616b3432, "llama2.c export version"},
    };
    for (const Case& c : cases) {
        std::string s = good;
        std::memcpy(s.data() + 4 * c.field, &c.value, 4);
        auto direct = llama2c_from_bytes({reinterpret_cast<const uint8_t*>(s.data()), s.size()},
                                         nullptr, "lie.bin");
        EXPECT_TRUE(fails_with(
            direct, std::string("lie.bin: not a valid llama2.c checkpoint (") + c.expect))
            << c.field;
        EXPECT_TRUE(fails_with(load_model(write_model(s, "lie.bin")), c.expect)) << c.field;
    }
    // Sizes that do not match the header, either way.
    EXPECT_TRUE(fails_with(
        load_model(write_model(good + "x", "long.bin")),
        "does not match its header, which needs " + std::to_string(good.size()) + " (extra bytes"));
    for (size_t cut : {size_t{28}, size_t{29}, good.size() / 2, good.size() - 1}) {
        EXPECT_TRUE(fails_with(load_model(write_model(good.substr(0, cut), "cut.bin")),
                               "size " + std::to_string(cut) +
                                   " bytes does not match its "
                                   "header, which needs " +
                                   std::to_string(good.size()) + " (truncated?)"))
            << cut;
    }
    // A header claiming the largest model the limits allow still sizes without overflow.
    Llama2cHeader big{65536, 16 * 65536, 1024, 1, 1, 10'000'000, 10'000'000};
    std::string s(reinterpret_cast<const char*>(&big), sizeof big);
    EXPECT_TRUE(fails_with(load_model(write_model(s, "big.bin")), "does not match its header"));
}

// [SECTION] Fuzz seeds

// Small valid files for fuzz/corpus/gguf/, one per loader path. Run with
// KVSCOPE_WRITE_FUZZ_SEEDS=fuzz/corpus/gguf to (re)write them; otherwise the committed ones are
// checked to still load, so the fuzzer always starts from files that get deep.
struct Seed {
    std::string name;
    std::string bytes;
    bool is_model;  // loads as a model (else it only parses)
};

std::vector<Seed> fuzz_seeds() {
    std::vector<Seed> seeds;
    {  // llama, SentencePiece tokenizer, F32
        ModelConfig c;
        c.dim = 8;
        c.hidden_dim = 16;
        c.n_layers = 1;
        c.n_heads = 2;
        c.n_kv_heads = 1;
        c.head_dim = 4;
        c.vocab_size = 16;
        c.context_length = 16;
        auto m = test::make_random_model(c, 1);
        GgufBuilder b = model_gguf(*m, GgmlType::F32);
        b.kv_string("tokenizer.ggml.model", "llama");
        b.kv_strings("tokenizer.ggml.tokens",
                     {"<unk>", "<s>", "</s>", "<0x41>", "\xe2\x96\x81", "\xe2\x96\x81h", "e", "l",
                      "o", "\xe2\x96\x81w", "r", "d", "h", "w", "ll", "\xe2\x96\x81he"});
        b.kv_f32s("tokenizer.ggml.scores",
                  {0, 0, 0, 0, -1, -2, -3, -3, -3, -2, -3, -3, -3, -3, -1, -1});
        b.kv_i32s("tokenizer.ggml.token_type", {2, 3, 3, 6, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1});
        b.kv_u32("tokenizer.ggml.bos_token_id", 1);
        b.kv_u32("tokenizer.ggml.eos_token_id", 2);
        b.kv_bool("tokenizer.ggml.add_bos_token", true);
        seeds.push_back({"llama_spm_f32.gguf", b.build(), true});
    }
    {  // qwen2 (biases, half-split RoPE), GPT-2 BPE tokenizer, F16/BF16, tied output, GGUF v2
        ModelConfig c;
        c.dim = 8;
        c.hidden_dim = 16;
        c.n_layers = 1;
        c.n_heads = 2;
        c.n_kv_heads = 2;
        c.head_dim = 4;
        c.vocab_size = 12;
        c.context_length = 32;
        c.has_qkv_bias = true;
        auto m = test::make_random_model(c, 2);
        GgufBuilder b = model_gguf(*m, GgmlType::F16, "qwen2", true);
        b.version = 2;
        b.kv_string("tokenizer.ggml.model", "gpt2");
        b.kv_strings("tokenizer.ggml.tokens", {"a", "b", "c", "\xc4\xa0", "ab",
                                               "\xc4\xa0"
                                               "a",
                                               "1", "2", "!", "abc", "<|endoftext|>", "x"});
        b.kv_strings("tokenizer.ggml.merges", {"a b", "\xc4\xa0 a", "ab c"});
        b.kv_i32s("tokenizer.ggml.token_type", {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3, 1});
        b.kv_u32("tokenizer.ggml.eos_token_id", 10);
        b.kv_u32("qwen2.attention.key_length", 4);
        seeds.push_back({"qwen2_bpe_f16_v2.gguf", b.build(), true});
    }
    {  // llama with block-quantized weights (Q8_0, Q4_0, Q4_1), no tokenizer, alignment 64
        ModelConfig c;
        c.dim = 32;
        c.hidden_dim = 32;
        c.n_layers = 1;
        c.n_heads = 2;
        c.n_kv_heads = 1;
        c.head_dim = 16;
        c.vocab_size = 8;
        c.context_length = 8;
        auto m = test::make_random_model(c, 3);
        const LayerWeights& w = m->weights.layers[0];
        GgufBuilder b;
        b.alignment = 64;
        put_config(b, c, "llama");
        auto mat = [&](const std::string& name, const Matrix& x, GgmlType type) {
            b.tensor(name, {static_cast<uint64_t>(x.cols), static_cast<uint64_t>(x.rows)},
                     matrix_values(x), type);
        };
        auto vec = [&](const std::string& name, const Vector& v) {
            b.tensor(name, {static_cast<uint64_t>(v.size)}, values_of(v.data, 32));
        };
        mat("token_embd.weight", m->weights.token_embedding, GgmlType::Q8_0);
        vec("blk.0.attn_norm.weight", w.attn_norm);
        mat("blk.0.attn_q.weight", w.wq, GgmlType::Q4_0);
        mat("blk.0.attn_k.weight", w.wk, GgmlType::Q4_1);
        mat("blk.0.attn_v.weight", w.wv, GgmlType::Q8_0);
        mat("blk.0.attn_output.weight", w.wo, GgmlType::Q8_0);
        vec("blk.0.ffn_norm.weight", w.ffn_norm);
        mat("blk.0.ffn_gate.weight", w.w_gate, GgmlType::Q4_0);
        mat("blk.0.ffn_up.weight", w.w_up, GgmlType::Q4_1);
        mat("blk.0.ffn_down.weight", w.w_down, GgmlType::BF16);
        vec("output_norm.weight", m->weights.output_norm);
        mat("output.weight", m->weights.output, GgmlType::Q8_0);
        seeds.push_back({"llama_blocks_q8_q4.gguf", b.build(), true});
    }
    {  // metadata of every type, and a model whose tensors kvscope parses but cannot load
        GgufBuilder b;
        b.kv_string("general.architecture", "llama");
        b.kv_u32("llama.embedding_length", 256);
        b.kv_u32("llama.feed_forward_length", 256);
        b.kv_u32("llama.block_count", 1);
        b.kv_u32("llama.attention.head_count", 4);
        b.kv_u32("llama.context_length", 8);
        b.kv_u8("u8", 1);
        b.kv_i8("i8", -1);
        b.kv_u16("u16", 2);
        b.kv_i16("i16", -2);
        b.kv_i32("i32", -3);
        b.kv_f32("f32", 0.5f);
        b.kv_bool("bool", false);
        b.kv_u64("u64", 4);
        b.kv_i64("i64", -4);
        b.kv_f64("f64", 0.25);
        b.kv_strings("strings", {"x", ""});
        b.array<int16_t>("i16s", test::kGgufI16, {1, -1});
        b.array<double>("f64s", test::kGgufF64, {1.5});
        b.tensor_raw("token_embd.weight", {256, 1}, static_cast<uint32_t>(GgmlType::Q5_K),
                     std::vector<uint8_t>(176, 1));
        b.tensor_raw("i32", {2, 2}, static_cast<uint32_t>(GgmlType::I32),
                     std::vector<uint8_t>(16, 2));
        seeds.push_back({"metadata_all_types.gguf", b.build(), false});
    }
    {  // llama2.c, separate classifier
        Llama2cHeader h;
        h.layers = 1;
        seeds.push_back({"tiny_llama2c.bin", llama2c_image(h, false), true});
    }
    return seeds;
}

TEST(FuzzCorpus, SeedsAreValidAndSmall) {
    const char* out = std::getenv("KVSCOPE_WRITE_FUZZ_SEEDS");
    for (const Seed& seed : fuzz_seeds()) {
        EXPECT_LT(seed.bytes.size(), 10u * 1024) << seed.name;
        if (out) test::write_file(std::string(out) + "/" + seed.name, seed.bytes);
        auto m = load_bytes(seed.bytes);
        if (seed.is_model) {
            ASSERT_TRUE(m.ok()) << seed.name << ": " << m.error().message;
        } else {
            EXPECT_TRUE(fails_with(m, "cannot load yet")) << seed.name;
        }
        auto committed = test::source_file("fuzz/corpus/gguf/" + seed.name);
        if (committed) {
            auto c = load_model(*committed);
            EXPECT_EQ(c.ok(), seed.is_model) << *committed;
        }
    }
}

// [SECTION] Fuzz findings

// Inputs that once crashed (or tripped a sanitizer in) fuzz_gguf, kept in fuzz/regressions/gguf/
// and replayed here the way the fuzzer runs them: loading may fail, never crash.
TEST(FuzzRegression, ReplayedInputsLoadOrFailCleanly) {
    auto dir = test::source_file("fuzz/regressions/gguf");
    if (!dir) GTEST_SKIP() << "fuzz/regressions/gguf not found";
    int replayed = 0;
    for (const auto& entry : std::filesystem::directory_iterator(*dir)) {
        const std::string bytes = test::read_file(entry.path().string());
        const std::span<const uint8_t> span(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            bytes.size());
        auto gguf = GgufFile::parse(span, "regression.gguf");
        if (gguf.ok()) {
            auto m = model_from_gguf(std::make_shared<const GgufFile>(std::move(gguf).value()));
            if (m.ok() && m->tokenizer) (void)m->tokenizer->encode("hello world", true);
            if (!m.ok()) {
                EXPECT_EQ(m.error().message.find('\n'), std::string::npos);
            }
        }
        auto loaded = load_model(entry.path().string());  // the same through a mapped file
        if (!loaded.ok()) {
            EXPECT_EQ(loaded.error().message.find('\n'), std::string::npos);
        }
        ++replayed;
    }
    EXPECT_GT(replayed, 0);
}

// Found by fuzz_gguf (UBSan): a token type of 4261412864 was converted to int32 unchecked.
TEST(FuzzRegression, TokenTypeOutsideInt32IsAnError) {
    ModelConfig c = block_friendly_config();
    c.vocab_size = 32;
    auto src = test::make_random_model(c, 11);
    std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
    for (int i = 3; i < 32; ++i)
        tokens.push_back(
            std::string("t").append(std::to_string(i)));  // GCC 12 -Wrestrict on "t" + s
    std::vector<uint32_t> types(32, 1);
    types[5] = 4261412864u;
    GgufBuilder b = model_gguf(*src, GgmlType::F32);
    b.kv_string("tokenizer.ggml.model", "llama");
    b.kv_strings("tokenizer.ggml.tokens", tokens);
    b.array<uint32_t>("tokenizer.ggml.token_type", test::kGgufU32, types);
    EXPECT_TRUE(fails_with(load_bytes(b.build()), "tokenizer.ggml.token_type[5]"));
}

TEST(ModelLoader, Stories260kLlama2cCheckpoint) {
    auto path = test::stories260k();
    if (!path) GTEST_SKIP() << test::stories260k_missing();
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
    EXPECT_EQ(c.head_dim, 8);
    EXPECT_EQ(m->tokenizer, nullptr);
    EXPECT_EQ(m->weights.output.f32(), m->weights.token_embedding.f32());  // shared classifier

    const std::string bytes = test::read_file(*path);
    const std::string dir = test::temp_dir();
    for (size_t cut : {size_t{1}, size_t{10}, size_t{27}, size_t{28}, size_t{5000},
                       bytes.size() / 2, bytes.size() - 4, bytes.size() - 1}) {
        auto r = load_model(test::write_file(dir + "/cut.bin", bytes.substr(0, cut)));
        ASSERT_FALSE(r.ok()) << cut;
        EXPECT_NE(r.error().message.find(cut < 28 ? "shorter than the 28-byte header"
                                                  : "does not match its header"),
                  std::string::npos)
            << r.error().message;
    }
    std::string lie = bytes;
    int32_t heads = 7;
    std::memcpy(lie.data() + 12, &heads, 4);
    EXPECT_TRUE(fails_with(load_model(test::write_file(dir + "/lie.bin", lie)),
                           "n_heads 7 does not divide dim 64"));
}

TEST(ModelLoader, Stories260kGreedyMatchesLlama2cRunC) {
    auto path = test::stories260k();
    if (!path) GTEST_SKIP() << test::stories260k_missing();
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
        auto s = generate(**engine, {{1}, 200, {}, {}, {}}, [&](int32_t t) { got.push_back(t); });
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
    ASSERT_TRUE(generate(**engine, {{1}, 200, {1.0f, 0.9f, 42}, {}, {}}, [&](int32_t t) {
                    got_s.push_back(t);
                }).ok());
    size_t same = 0;
    while (same < got_s.size() && same < want_s.size() && got_s[same] == want_s[same])
        ++same;
    EXPECT_GE(same, 64u) << "sampled tokens diverge from run.c after " << same;
}

TEST(ModelLoader, BundledDemoModelLoads) {
    auto path = test::source_file("assets/models/kvscope-demo.gguf");
    if (!path) GTEST_SKIP() << "bundled model assets/models/kvscope-demo.gguf not present";
    auto m = load_model(*path);
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_NE(m->tokenizer, nullptr);
    EXPECT_EQ(m->tokenizer->vocab_size(), m->config.vocab_size);
}

}  // namespace
}  // namespace kvscope
