// Paged equals contiguous: the engine reading K/V through block tables of any block size gives
// the logits of a plain contiguous-cache forward pass, at every step.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "engine/engine.h"
#include "engine/sampler.h"
#include "random_model.h"
#include "reference_forward.h"

namespace kvscope {
namespace {

double max_relative_error(const float* got, const std::vector<float>& want) {
    double max_diff = 0, max_ref = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        max_diff = std::max(max_diff, std::fabs(static_cast<double>(got[i]) - want[i]));
        max_ref = std::max(max_ref, std::fabs(static_cast<double>(want[i])));
    }
    return max_diff / max_ref;
}

struct Case {
    ModelConfig config;
    const char* name;
};

class PagedVsContiguous : public ::testing::TestWithParam<int> {};

TEST_P(PagedVsContiguous, LogitsMatchAtEveryStep) {
    const int block_size = GetParam();
    ModelConfig qwen_like = test::small_test_config();
    qwen_like.rope_style = RopeStyle::kHalfSplit;
    qwen_like.has_qkv_bias = true;
    for (const Case& c : {Case{test::small_test_config(), "llama"}, Case{qwen_like, "qwen2"}}) {
        auto model = test::make_random_model(c.config, 7);
        std::mt19937 rng(static_cast<unsigned>(block_size));
        for (int trial = 0; trial < 3; ++trial) {
            EngineOptions opts;
            opts.block_size = block_size;
            opts.threads = 2;
            auto engine = Engine::create(model, opts);
            ASSERT_TRUE(engine.ok()) << engine.error().message;
            Engine& e = **engine;
            test::ReferenceForward ref(*model);

            int prompt_len = 1 + static_cast<int>(rng() % 70);
            std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
            for (auto& t : prompt)
                t = static_cast<int32_t>(rng() % static_cast<unsigned>(c.config.vocab_size));
            BlockTable table;
            ASSERT_TRUE(e.blocks().grow(table, prompt_len).ok());
            ForwardBatch batch{prompt, {SequenceChunk{&table, 0, prompt_len, true}}};
            std::vector<float> logits;
            ASSERT_TRUE(e.forward().run(batch, logits).ok());
            const std::vector<float>* want = nullptr;
            for (int p = 0; p < prompt_len; ++p)
                want = &ref.step(prompt[static_cast<size_t>(p)], p);
            ASSERT_LE(max_relative_error(logits.data(), *want), 1e-5)
                << c.name << " prefill of " << prompt_len << " tokens, block size " << block_size;

            int pos = prompt_len;
            for (int step = 0; step < 40; ++step, ++pos) {
                int32_t next = argmax(logits.data(), c.config.vocab_size);
                ASSERT_TRUE(e.blocks().grow(table, pos + 1).ok());
                ForwardBatch decode{{next}, {SequenceChunk{&table, pos, 1, true}}};
                ASSERT_TRUE(e.forward().run(decode, logits).ok());
                const std::vector<float>& r = ref.step(next, pos);
                ASSERT_LE(max_relative_error(logits.data(), r), 1e-5)
                    << c.name << " decode step " << step << ", block size " << block_size;
            }
            e.blocks().free(table);
        }
    }
}

INSTANTIATE_TEST_SUITE_P(BlockSizes, PagedVsContiguous, ::testing::Values(1, 7, 16, 64));

// Two sequences in one batch (one prefilling, one decoding) give each the logits it gets alone.
TEST(PagedBatch, MixedPrefillAndDecodeMatchSeparateRuns) {
    auto model = test::make_random_model(test::small_test_config(), 11);
    EngineOptions opts;
    opts.block_size = 5;
    opts.num_blocks = 64;
    auto engine = Engine::create(model, opts);
    ASSERT_TRUE(engine.ok());
    Engine& e = **engine;
    std::vector<int32_t> a = {3, 14, 15, 92, 65, 35, 89},
                         b = {27, 18, 28, 18, 28, 45, 90, 45, 23, 53};
    test::ReferenceForward ref_a(*model), ref_b(*model);
    BlockTable ta, tb;
    ASSERT_TRUE(e.blocks().grow(ta, 6).ok());
    std::vector<float> logits;
    ForwardBatch first{{a.begin(), a.begin() + 6}, {SequenceChunk{&ta, 0, 6, true}}};
    ASSERT_TRUE(e.forward().run(first, logits).ok());
    for (int p = 0; p < 6; ++p)
        ref_a.step(a[static_cast<size_t>(p)], p);
    // Now a decodes its 7th token while b prefills all of its prompt.
    ASSERT_TRUE(e.blocks().grow(ta, 7).ok());
    ASSERT_TRUE(e.blocks().grow(tb, 10).ok());
    ForwardBatch mixed;
    mixed.tokens = {a[6]};
    mixed.tokens.insert(mixed.tokens.end(), b.begin(), b.end());
    mixed.chunks = {SequenceChunk{&ta, 6, 1, true}, SequenceChunk{&tb, 0, 10, true}};
    ASSERT_TRUE(e.forward().run(mixed, logits).ok());
    ASSERT_EQ(logits.size(), 2u * 97);
    const auto& want_a = ref_a.step(a[6], 6);
    EXPECT_LE(max_relative_error(logits.data(), want_a), 1e-5);
    const std::vector<float>* want_b = nullptr;
    for (int p = 0; p < 10; ++p)
        want_b = &ref_b.step(b[static_cast<size_t>(p)], p);
    EXPECT_LE(max_relative_error(logits.data() + 97, *want_b), 1e-5);
}

}  // namespace
}  // namespace kvscope

namespace kvscope {
namespace {

// The property scheduling relies on: logits of a token do not depend on whether it was computed
// in a prefill of many tokens, alone in a decode step, or next to other sequences.
TEST(PagedBatch, PrefillAndTokenByTokenAreBitIdentical) {
    auto model = test::make_random_model(test::small_test_config(), 5);
    EngineOptions opts;
    opts.block_size = 16;
    opts.num_blocks = 32;
    opts.threads = 2;
    auto engine = Engine::create(model, opts);
    ASSERT_TRUE(engine.ok());
    Engine& e = **engine;
    std::vector<int32_t> prompt = {1, 5, 9, 33, 2, 71, 64, 8, 8, 8, 13, 21, 34, 55, 89, 44, 0, 3};
    const auto n = static_cast<int32_t>(prompt.size());
    BlockTable whole, single;
    ASSERT_TRUE(e.blocks().grow(whole, n).ok());
    std::vector<float> prefill_logits, step_logits;
    ASSERT_TRUE(
        e.forward().run({prompt, {SequenceChunk{&whole, 0, n, true}}}, prefill_logits).ok());
    for (int32_t p = 0; p < n; ++p) {
        ASSERT_TRUE(e.blocks().grow(single, p + 1).ok());
        ASSERT_TRUE(
            e.forward()
                .run({{prompt[static_cast<size_t>(p)]}, {SequenceChunk{&single, p, 1, true}}},
                     step_logits)
                .ok());
    }
    ASSERT_EQ(prefill_logits.size(), step_logits.size());
    EXPECT_EQ(std::memcmp(prefill_logits.data(), step_logits.data(),
                          prefill_logits.size() * sizeof(float)),
              0);
}

}  // namespace
}  // namespace kvscope
