// The KV cache switched off (--kv-cache off): every step runs the whole text so far through the
// model again and keeps nothing. Greedy tokens must be those of the cached run (the CPU matmul
// and attention give a row the same bits whatever it is batched with), and the block pool must
// show the naive engine's churn: every block freed and allocated again at every step.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <tuple>

#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/model_loader.h"
#include "engine/scheduler.h"
#include "engine_fixtures.h"
#include "test_support.h"

namespace kvscope {
namespace {

struct Generated {
    std::vector<int32_t> ids;
    std::vector<Event> events;
    int32_t blocks_used_after = -1;
};

Generated run(const std::string& prompt, int32_t max_tokens, bool kv_cache, bool capture = false) {
    EngineOptions eo;
    eo.threads = 2;
    auto engine = Engine::create(test::bundled_loaded_model(), eo);
    EXPECT_TRUE(engine.ok());
    test::EventCollector probe;
    (*engine)->reporter().probe = &probe;
    GenerateRequest req;
    req.prompt = test::bundled_loaded_model()->tokenizer->encode(prompt, true);
    req.max_tokens = max_tokens;
    req.kv_cache = kv_cache;
    req.trace_ops = false;
    if (capture)
        req.capture_attention.assign(
            static_cast<size_t>(test::bundled_loaded_model()->config.n_layers *
                                test::bundled_loaded_model()->config.n_heads),
            1);
    Generated out;
    auto stats = generate(**engine, req, [&](int32_t t) { out.ids.push_back(t); });
    EXPECT_TRUE(stats.ok()) << (stats.ok() ? "" : stats.error().message);
    out.events = std::move(probe.events);
    out.blocks_used_after = (*engine)->blocks().pool().num_used();
    return out;
}

TEST(KvCacheOff, GreedyTokensAreTheCachedRunsForFivePromptsOf128Tokens) {
    const char* prompts[] = {
        "In the beginning God created the heaven and the earth.",
        "And the LORD said unto Moses,",
        "Blessed are the poor in spirit:",
        "The LORD is my shepherd; I shall not want.",
        "And it came to pass in those days, that there went out a decree",
    };
    for (const char* p : prompts) {
        Generated cached = run(p, 128, true);
        Generated naive = run(p, 128, false);
        ASSERT_EQ(cached.ids.size(), 128u) << p;
        EXPECT_EQ(naive.ids, cached.ids) << p;
        EXPECT_EQ(naive.blocks_used_after, 0) << p;
    }
}

TEST(KvCacheOff, EveryStepFreesTheLastStepsBlocksAndAllocatesTheWholeTextAgain) {
    Generated naive = run("And the LORD said unto Moses,", 40, false);
    const auto prompt =
        static_cast<int32_t>(test::bundled_loaded_model()
                                 ->tokenizer->encode("And the LORD said unto Moses,", true)
                                 .size());
    std::map<int64_t, int32_t> allocs, frees, prefill;
    for (const Event& e : naive.events) {
        if (e.kind == EventKind::kBlockAlloc) ++allocs[e.step];
        if (e.kind == EventKind::kBlockFree) ++frees[e.step];
        if (e.kind == EventKind::kStepBegin) prefill[e.step] = e.b;
    }
    ASSERT_EQ(prefill.size(), 40u);
    for (const auto& [step, tokens] : prefill) {
        // Step k runs the prompt and the k tokens generated before it, all as prefill.
        EXPECT_EQ(tokens, prompt + static_cast<int32_t>(step)) << "step " << step;
        EXPECT_EQ(allocs[step], (tokens + 15) / 16) << "step " << step;
        // The last step also frees its own blocks: the sequence finished.
        const bool last = step + 1 == static_cast<int64_t>(prefill.size());
        if (step > 0) {
            EXPECT_EQ(frees[step], (tokens - 1 + 15) / 16 + (last ? (tokens + 15) / 16 : 0))
                << "step " << step;
        }
    }
}

// Every step recomputes the earlier tokens' attention rows, the same bits as when they were new:
// each row is reported once, as the cached run reports it.
TEST(KvCacheOff, ReportsEachAttentionRowOnceAsTheCachedRunDoes) {
    auto rows = [](const Generated& g) {
        std::map<std::tuple<int32_t, int32_t, int32_t>, std::vector<uint8_t>> out;
        size_t n = 0;
        for (const Event& e : g.events)
            if (e.kind == EventKind::kAttentionRow) {
                out[{e.a, e.b, e.c}] = e.payload;
                ++n;
            }
        EXPECT_EQ(n, out.size()) << "a row reported twice";
        return out;
    };
    auto cached = rows(run("Blessed are the poor in spirit:", 12, true, true));
    auto naive = rows(run("Blessed are the poor in spirit:", 12, false, true));
    EXPECT_FALSE(cached.empty());
    EXPECT_TRUE(naive == cached);
}

TEST(KvCacheOff, RefusesATokenEvictionPolicy) {
    auto engine = Engine::create(test::bundled_loaded_model(), {});
    ASSERT_TRUE(engine.ok());
    EvictionOptions eo;
    eo.policy = "streaming";
    eo.budget_tokens = 32;
    auto evictor = KvEvictor::create(eo, test::bundled_loaded_model()->config.n_layers);
    ASSERT_TRUE(evictor.ok()) << evictor.error().message;
    GenerateRequest req;
    req.prompt = {1, 2, 3};
    req.max_tokens = 4;
    req.kv_cache = false;
    req.evictor = std::move(evictor).value();
    auto stats = generate(**engine, req, [](int32_t) {});
    ASSERT_FALSE(stats.ok());
    EXPECT_NE(stats.error().message.find("evict"), std::string::npos);
}

}  // namespace
}  // namespace kvscope
