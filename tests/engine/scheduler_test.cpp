// The serving scheduler: outputs independent of scheduling, pool invariants after every step,
// prefix caching, copy-on-write forks, preemption and the contiguous baseline.
#include <gtest/gtest.h>

#include <random>

#include "engine/scheduler.h"
#include "engine/workload.h"
#include "random_model.h"

namespace kvscope {
namespace {

std::vector<Request> random_workload(int count, int vocab, uint64_t seed, bool sampled) {
    std::mt19937_64 rng(seed);
    std::vector<int32_t> system_prompt(24);
    for (auto& t : system_prompt)
        t = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
    std::vector<Request> out;
    for (int i = 0; i < count; ++i) {
        Request r;
        r.id = "r";
        r.id += std::to_string(i);
        r.arrival_step = static_cast<int64_t>(rng() % 12);
        if (rng() % 2) r.prompt = system_prompt;  // a shared prefix for half of them
        int extra = 1 + static_cast<int>(rng() % 30);
        for (int k = 0; k < extra; ++k)
            r.prompt.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab)));
        r.max_tokens = 1 + static_cast<int32_t>(rng() % 24);
        r.sampling.seed = rng() % 1000;
        if (sampled && rng() % 2) {
            r.sampling.temperature = 0.8f;
            r.sampling.top_p = 0.9f;
        }
        r.n = rng() % 5 == 0 ? 3 : 1;
        out.push_back(r);
    }
    return out;
}

struct RunResult {
    ServingSummary summary;
    std::string invariant_error;
};

RunResult serve(std::shared_ptr<LoadedModel> model, const std::vector<Request>& requests,
                int32_t num_blocks, int32_t block_size, ServingOptions options, int threads = 2,
                MatmulMode matmul = MatmulMode::kExact) {
    EngineOptions eo;
    eo.block_size = block_size;
    eo.num_blocks = num_blocks;
    eo.threads = threads;
    eo.matmul = matmul;
    auto engine = Engine::create(model, eo);
    EXPECT_TRUE(engine.ok());
    Scheduler s(**engine, options, requests);
    RunResult out;
    while (s.step()) {
        std::string err = s.check_invariants();
        if (!err.empty() && out.invariant_error.empty())
            out.invariant_error = "step " + std::to_string(s.current_step()) + ": " + err;
    }
    out.summary = s.summary();
    if ((*engine)->blocks().pool().num_free() != num_blocks)
        out.invariant_error += " blocks leaked at the end";
    return out;
}

TEST(Scheduler, OutputsDoNotDependOnScheduling) {
    ModelConfig c = test::small_test_config();
    auto model = test::make_random_model(c, 21);
    auto requests = random_workload(40, c.vocab_size, 99, /*sampled=*/true);

    // Each request alone, in a roomy pool.
    std::map<std::string, std::vector<int32_t>> alone;
    for (const Request& r : requests) {
        Request solo = r;
        solo.arrival_step = 0;
        auto res = serve(model, {solo}, 64, 16, {});
        for (auto& [k, v] : res.summary.outputs)
            alone[k] = v;
    }
    ASSERT_EQ(alone.size(), 40u + 2u * static_cast<size_t>(std::count_if(
                                           requests.begin(), requests.end(),
                                           [](const Request& r) { return r.n == 3; })));

    struct Variant {
        const char* name;
        int32_t blocks;
        ServingOptions opts;
        bool expect_preemption;
    };
    ServingOptions batched;
    batched.max_batch_tokens = 2048;
    ServingOptions no_cache = batched;
    no_cache.prefix_cache = false;
    ServingOptions recompute = batched;
    recompute.max_batch_tokens = 96;
    ServingOptions swap = recompute;
    swap.preempt = PreemptMode::kSwap;
    ServingOptions contiguous = batched;
    contiguous.allocator = Allocator::kContiguous;
    for (const Variant& v : {Variant{"batched, prefix cache", 400, batched, false},
                             Variant{"no prefix cache", 400, no_cache, false},
                             Variant{"preempt by recompute", 14, recompute, true},
                             Variant{"preempt by swap", 14, swap, true},
                             Variant{"contiguous allocator", 60, contiguous, false}}) {
        auto res = serve(model, requests, v.blocks, 8, v.opts);
        EXPECT_EQ(res.invariant_error, "") << v.name;
        EXPECT_EQ(res.summary.outputs, alone) << v.name;
        EXPECT_EQ(res.summary.rejected, 0) << v.name;
        if (v.expect_preemption) {
            EXPECT_GT(res.summary.preemptions, 0) << v.name << ": pool never ran out";
        }
        EXPECT_GT(res.summary.max_running, 1) << v.name;
    }
}

// Weights kept in each type a file may hold, both numerics: a request's tokens are the same
// alone on one thread as batched with others on three.
TEST(Scheduler, OutputsDoNotDependOnSchedulingOrThreadsForEveryWeightType) {
    ModelConfig c = test::small_test_config();
    auto requests = random_workload(12, c.vocab_size, 7, /*sampled=*/false);
    ServingOptions batched;
    batched.max_batch_tokens = 2048;
    for (GgmlType type :
         {GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1}) {
        auto model = test::with_weight_type(*test::make_random_model(c, 5), type, 9);
        for (MatmulMode mode : {MatmulMode::kExact, MatmulMode::kFast}) {
            std::map<std::string, std::vector<int32_t>> alone;
            for (const Request& r : requests) {
                Request solo = r;
                solo.arrival_step = 0;
                auto res = serve(model, {solo}, 64, 16, {}, 1, mode);
                for (auto& [k, v] : res.summary.outputs)
                    alone[k] = v;
            }
            auto res = serve(model, requests, 400, 8, batched, 3, mode);
            const std::string what =
                std::to_string(static_cast<int>(type)) + " " + matmul_mode_name(mode);
            EXPECT_EQ(res.invariant_error, "") << what;
            EXPECT_EQ(res.summary.outputs, alone) << what;
            EXPECT_GT(res.summary.max_running, 1) << what;
        }
    }
}

TEST(Scheduler, RandomizedWorkloadsKeepPoolInvariantsForThousandsOfSteps) {
    ModelConfig c = test::small_test_config();
    c.dim = 16;
    c.hidden_dim = 24;
    c.n_heads = 2;
    c.n_kv_heads = 1;
    c.head_dim = 8;
    c.n_layers = 1;
    auto model = test::make_random_model(c, 3);
    int64_t total_steps = 0;
    for (uint64_t seed = 1; seed <= 6; ++seed) {
        auto requests = random_workload(120, c.vocab_size, seed, true);
        ServingOptions o;
        o.max_batch_tokens = 64;
        o.preempt = seed % 2 ? PreemptMode::kSwap : PreemptMode::kRecompute;
        o.swap_blocks = 8;
        o.allocator = seed % 3 == 0 ? Allocator::kContiguous : Allocator::kPaged;
        auto res = serve(model, requests, 12, seed % 3 == 1 ? 1 : 4, o);
        ASSERT_EQ(res.invariant_error, "") << "seed " << seed;
        total_steps += res.summary.steps;
    }
    EXPECT_GT(total_steps, 2000);
}

TEST(Scheduler, PrefixCacheSkipsSharedPrefill) {
    ModelConfig c = test::small_test_config();
    auto model = test::make_random_model(c, 8);
    std::vector<Request> reqs;
    std::vector<int32_t> shared(64);
    for (size_t i = 0; i < shared.size(); ++i)
        shared[i] = static_cast<int32_t>((i * 7) % 97);
    for (int i = 0; i < 10; ++i) {
        Request r;
        r.id = "s";
        r.id += std::to_string(i);
        r.arrival_step = i * 3;  // later requests find the prefix cached
        r.prompt = shared;
        r.prompt.push_back(static_cast<int32_t>(i));
        r.max_tokens = 4;
        reqs.push_back(r);
    }
    ServingOptions on, off;
    off.prefix_cache = false;
    auto with = serve(model, reqs, 100, 16, on);
    auto without = serve(model, reqs, 100, 16, off);
    EXPECT_EQ(with.summary.outputs, without.summary.outputs);
    // 9 of 10 requests reuse all 4 full blocks of the shared 64 tokens.
    EXPECT_NEAR(with.summary.prefix_hit_rate, 9.0 * 64 / (10 * 65), 1e-9);
    EXPECT_EQ(without.summary.prefix_hit_rate, 0.0);
    EXPECT_EQ(with.summary.prefill_tokens_computed + 9 * 64,
              without.summary.prefill_tokens_computed);
}

TEST(Scheduler, ParallelSamplesShareThePromptAndCopyOnWrite) {
    ModelConfig c = test::small_test_config();
    auto model = test::make_random_model(c, 8);
    Request r;
    r.id = "fork";
    r.prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};  // 2.5 blocks of 4: the last is shared, partial
    r.max_tokens = 6;
    r.n = 4;
    r.sampling = {1.0f, 1.0f, 5};
    EngineOptions eo;
    eo.block_size = 4;
    eo.num_blocks = 32;
    auto engine = Engine::create(model, eo);
    ASSERT_TRUE(engine.ok());
    Scheduler s(**engine, {}, {r});
    s.step();  // prefill + fork
    EXPECT_EQ((*engine)->blocks().pool().refcount(s.sequences()[0].table.blocks[0]), 4);
    s.step();  // every sample writes into the shared partial block: three copies
    EXPECT_EQ((*engine)->blocks().cow_copies(), 3);
    EXPECT_EQ(s.check_invariants(), "");
    auto sum = s.run_to_completion();
    EXPECT_EQ(sum.outputs.size(), 4u);
    EXPECT_EQ((*engine)->blocks().pool().num_free(), 32);
}

TEST(Scheduler, RequestLargerThanThePoolIsRejectedAloneTheRestRun) {
    auto model = test::make_random_model(test::small_test_config(), 2);
    std::vector<Request> reqs(3);
    for (int i = 0; i < 3; ++i) {
        reqs[i].id = "q";
        reqs[i].id += std::to_string(i);
        reqs[i].prompt = std::vector<int32_t>(i == 1 ? 200 : 5, 3);
        reqs[i].max_tokens = 3;
    }
    auto res = serve(model, reqs, 8, 16, {});  // 128 slots: q1 needs 203
    EXPECT_EQ(res.summary.rejected, 1);
    EXPECT_EQ(res.summary.outputs.size(), 2u);
    EXPECT_TRUE(res.summary.outputs.count("q0") && res.summary.outputs.count("q2"));
    EXPECT_EQ(res.invariant_error, "");
}

TEST(Scheduler, ContiguousWastesMoreThanPaged) {
    ModelConfig c = test::small_test_config();
    auto model = test::make_random_model(c, 4);
    auto requests = random_workload(30, c.vocab_size, 5, false);
    for (auto& r : requests)
        r.max_tokens = 40;  // reservations far beyond most prompts
    ServingOptions paged, contiguous;
    contiguous.allocator = Allocator::kContiguous;
    auto p = serve(model, requests, 80, 8, paged);
    auto k = serve(model, requests, 80, 8, contiguous);
    EXPECT_EQ(p.summary.outputs, k.summary.outputs);
    EXPECT_GT(p.summary.max_running, k.summary.max_running);
    EXPECT_LT(p.summary.mean_fragmentation, k.summary.mean_fragmentation);
}

TEST(Workload, ParsesAndReportsBadLinesWithTheirNumbers) {
    auto ok = parse_workload(
        "# a comment\n{\"id\":\"a\",\"prompt_ids\":[1,2],\"max_tokens\":3}\n\n"
        "{\"prompt_ids\":[5],\"n\":2,\"temperature\":0.5,\"top_p\":0.9,\"seed\":4,\"arrival_step\":"
        "7}\n",
        "w.jsonl", nullptr, 10, 64);
    ASSERT_TRUE(ok.ok()) << ok.error().message;
    ASSERT_EQ(ok->size(), 2u);
    EXPECT_EQ((*ok)[1].id, "r2");
    EXPECT_EQ((*ok)[1].n, 2);
    EXPECT_EQ((*ok)[1].arrival_step, 7);

    struct Bad {
        const char* text;
        const char* expect;
    };
    for (const Bad& b :
         {Bad{"{\"prompt_ids\":[1]}\n{oops", "w.jsonl:2: not valid JSON"},
          Bad{"{\"prompt_ids\":[1],\"max_token\":3}", "w.jsonl:1: unknown field 'max_token'"},
          Bad{"{\"prompt_ids\":[1,99]}", "w.jsonl:1: 'prompt_ids' holds 99"},
          Bad{"{\"prompt\":\"hi\"}", "no tokenizer"},
          Bad{"{\"prompt_ids\":[1],\"max_tokens\":-1}", "'max_tokens' is -1"},
          Bad{"{\"prompt_ids\":[1],\"n\":100000}", "'n' is 100000"},
          Bad{"{\"prompt_ids\":[]}", "the prompt is empty"}, Bad{"[1,2]", "expected a JSON object"},
          Bad{"{\"id\":\"x\",\"prompt_ids\":[1]}\n{\"id\":\"x\",\"prompt_ids\":[2]}",
              "duplicate request id"},
          Bad{"{\"prompt_ids\":[1],\"temperature\":\"hot\"}", "'temperature' must be a number"},
          Bad{"{\"prompt_ids\":[1],\"max_tokens\":99999999999999999999}", "must be an integer"},
          Bad{"", "no requests"}}) {
        auto r = parse_workload(b.text, "w.jsonl", nullptr, 10, 64);
        ASSERT_FALSE(r.ok()) << b.text;
        EXPECT_NE(r.error().message.find(b.expect), std::string::npos) << r.error().message;
    }
}

}  // namespace
}  // namespace kvscope
