// Synthetic models: the real shapes, at their real sizes, made from a seed.
#include <gtest/gtest.h>

#include <map>

#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/synthetic_model.h"

namespace kvscope {
namespace {

// `tokens` tokens after a 3-token prompt, every activation finite on the way.
void expect_generates(LoadedModel model, int tokens) {
    auto shared = std::make_shared<LoadedModel>(std::move(model));
    EngineOptions eo;
    eo.num_blocks = 8;
    auto engine = Engine::create(shared, eo);
    ASSERT_TRUE(engine.ok()) << engine.error().message;
    GenerateRequest req;
    req.prompt = {1, 2, 3};
    req.max_tokens = tokens;
    std::vector<int32_t> ids;
    auto stats = generate(**engine, req, [&](int32_t t) { ids.push_back(t); });
    ASSERT_TRUE(stats.ok()) << stats.error().message;
    EXPECT_EQ(ids.size(), static_cast<size_t>(tokens));
}

TEST(SyntheticModel, ShapesHaveTheirPublishedParameterCounts) {
    std::map<std::string, int64_t> published = {
        {"qwen2.5-0.5b", 494032768},   // Qwen2.5-0.5B: 0.49 B, tied embeddings, QKV bias
        {"llama-3.2-1b", 1235814400},  // Llama 3.2 1B: 1.24 B, tied embeddings
        {"llama-3-8b", 8030261248},    // Llama 3 8B: 8.03 B
        {"mistral-7b", 7241732096},    // Mistral 7B: 7.24 B
        {"llama-2-7b", 6738415616},    // Llama 2 7B: 6.74 B
        {"llama-3-70b", 70553706496},  // Llama 3 70B: 70.6 B
        {"qwen2.5-7b", 7615616512},    // Qwen2.5-7B: 7.62 B, QKV bias
    };
    ASSERT_EQ(synthetic_shapes().size(), published.size());
    for (const SyntheticShape& s : synthetic_shapes())
        EXPECT_EQ(s.parameters(), published.at(s.name)) << s.name;
}

TEST(SyntheticModel, TheSmallShapesLoadAndRunOnTheCpuAndTheLargeOnesSayWhyNot) {
    auto m = make_synthetic_model("synthetic:qwen2.5-0.5b", 7);
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_EQ(m->weights.bytes(), int64_t{494032768} * 4);
    EXPECT_EQ(m->config.n_layers, 24);
    EXPECT_EQ(m->config.group_size(), 7);
    EXPECT_EQ(m->weights.output.data, m->weights.token_embedding.data);  // tied
    EXPECT_EQ(m->tokenizer, nullptr);
    expect_generates(std::move(m).value(), 3);

    // As fp32, Llama-3-8B is more than a 24 GB machine can spare; the message says how much.
    auto big = make_synthetic_model("synthetic:llama-3-8b", 1, uint64_t{18} << 30);
    ASSERT_FALSE(big.ok());
    EXPECT_NE(big.error().message.find("as F32 weights: 32.1 GB"), std::string::npos)
        << big.error().message;
    EXPECT_NE(big.error().message.find("synthetic:llama-3-8b:q4_0"), std::string::npos)
        << big.error().message;
    auto bad_type = make_synthetic_model("synthetic:llama-3-8b:q3_k");
    ASSERT_FALSE(bad_type.ok());
    EXPECT_NE(bad_type.error().message.find("known: f32, f16, bf16, q8_0"), std::string::npos)
        << bad_type.error().message;
    // Qwen2.5-0.5B's 896-wide rows are not whole 256-value K-quant blocks.
    auto k_quant = make_synthetic_model("synthetic:qwen2.5-0.5b:q4_k");
    ASSERT_FALSE(k_quant.ok());
    EXPECT_NE(k_quant.error().message.find("896"), std::string::npos) << k_quant.error().message;
    auto unknown = make_synthetic_model("synthetic:gpt-5");
    ASSERT_FALSE(unknown.ok());
    EXPECT_NE(unknown.error().message.find("qwen2.5-0.5b, llama-3.2-1b"), std::string::npos)
        << unknown.error().message;
    EXPECT_FALSE(make_synthetic_model("synthetic:").ok());
    EXPECT_FALSE(make_synthetic_model("synthetic:qwen2.5-0.5b\x1b[2J").ok());
}

TEST(SyntheticModel, QuantizedWeightsStayQuantizedAndRun) {
    auto m = make_synthetic_model("synthetic:qwen2.5-0.5b:q4_0", 7);
    ASSERT_TRUE(m.ok()) << m.error().message;
    EXPECT_EQ(m->weights.layers[0].wq.type, GgmlType::Q4_0);
    // 4.5 bits a weight: about an eighth of the fp32 size (norms and biases stay fp32).
    EXPECT_LT(m->weights.bytes(), int64_t{494032768} * 4 / 7);
    EXPECT_EQ(m->weights.bytes(), synthetic_shapes()[0].weight_bytes(GgmlType::Q4_0));
    expect_generates(std::move(m).value(), 2);
}

}  // namespace
}  // namespace kvscope
