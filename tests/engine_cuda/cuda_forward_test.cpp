// The CUDA engine backend (engine_cuda/) against the CPU one on the bundled model: greedy tokens,
// logits, batching, copy-on-write, swapping, token eviction and captured attention. Without a
// usable GPU every test but the first skips, saying why ("no CUDA device: ..."); `.ci/gpu-check`
// runs them where one is (first run on an H200, 2026-11-26: bench/RESULTS.md).
//
// The tolerance on logits. The CPU multiplies by the file's f32 weights; the CUDA backend by the
// same weights rounded to 16 bits (f16 for this model, whose values all fit it; bf16 for models
// that do not) with f32 accumulation, the activations entering each product as two 16-bit halves
// (kernels/split_gemm.h), so the weights' rounding is the only difference of note. Emulating both
// on the CPU over these five prompts and 256 greedy tokens, every logit stayed within 0.0031 of
// the CPU's with f16 weights and within 0.028 with bf16 ones, the largest logits being 12 to 15.
// The bound checked is one bf16 step at the row's scale, 2^-8 * max |logit| (0.047 to 0.06
// here): what rounding the logits themselves to bf16 could change. It holds the f16 result with
// a margin of 15 and the bf16 one with a margin of 2, and is far below a greedy decision's
// typical gap, while a wrong layout, position or block would move logits by whole units.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/kv_eviction.h"
#include "engine/scheduler.h"
#include "engine/tokenizer.h"
#include "engine_cuda/cuda_forward.h"
#include "kernels/cuda_test_util.h"
#include "kernels/device_info.h"
#include "test_support.h"

namespace kvscope {
namespace {

// .ci/gpu-check runs the tests from the root of a copy of the sources, not where they were built.
std::string model_path() {
    const char* relative = "assets/models/kvscope-demo.gguf";
    if (std::filesystem::exists(relative)) return relative;
    return test::bundled_model();
}

std::shared_ptr<const LoadedModel> bundled() {
    static std::shared_ptr<const LoadedModel> model = [] {
        auto m = load_model(model_path());
        EXPECT_TRUE(m.ok()) << (m ? "" : m.error().message);
        return m ? std::make_shared<const LoadedModel>(std::move(m).value()) : nullptr;
    }();
    return model;
}

std::unique_ptr<Engine> engine(bool cuda, EngineOptions eo = {},
                               CudaForwardOptions cuda_options = {}) {
    eo.threads = eo.threads ? eo.threads : 2;
    if (cuda) eo.backend = cuda_backend(cuda_options);
    auto e = Engine::create(bundled(), eo);
    EXPECT_TRUE(e.ok()) << (e ? "" : e.error().message);
    return e ? std::move(e).value() : nullptr;
}

// One sequence driven through Forward::run directly, as the scheduler would: a prefill, then
// one token per step.
class Sequence {
  public:
    explicit Sequence(Engine& e) : e_(e) {}
    ~Sequence() { e_.blocks().free(table_); }
    // Feeds `tokens` at the next positions; returns the last one's logits.
    const std::vector<float>& feed(const std::vector<int32_t>& tokens) {
        const auto n = static_cast<int32_t>(tokens.size());
        EXPECT_TRUE(e_.blocks().grow(table_, pos_ + n).ok());
        ForwardBatch b{tokens, {SequenceChunk{&table_, pos_, n, true}}};
        Status s = e_.forward().run(b, logits_);
        EXPECT_TRUE(s.ok()) << (s ? "" : s.error().message);
        pos_ += n;
        return logits_;
    }
    BlockTable& table() { return table_; }
    int32_t pos() const { return pos_; }

  private:
    Engine& e_;
    BlockTable table_;
    int32_t pos_ = 0;
    std::vector<float> logits_;
};

int32_t argmax(const std::vector<float>& v) {
    return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// The largest |cpu - cuda| and the bound it must stay under (2^-8 * max |cpu|).
struct LogitGap {
    double worst = 0, bound = 0;
};
LogitGap gap(const std::vector<float>& cpu, const std::vector<float>& cuda) {
    LogitGap g;
    double scale = 0;
    for (size_t i = 0; i < cpu.size(); ++i) {
        g.worst = std::max(g.worst, std::fabs(static_cast<double>(cpu[i]) - cuda[i]));
        scale = std::max(scale, std::fabs(static_cast<double>(cpu[i])));
    }
    if (cpu.size() != cuda.size()) g.worst = INFINITY;
    g.bound = scale / 256.0;
    return g;
}

std::vector<int32_t> encode(const std::string& text) {
    const Tokenizer& tok = *bundled()->tokenizer;
    return tok.encode(text, tok.wants_bos());
}

const std::vector<std::string> kPrompts = {"In the beginning", "And the LORD said unto Moses",
                                           "Blessed are the", "And it came to pass",
                                           "The kingdom of heaven is like"};

// Runs on every machine (so .ci/gpu-check, which fails on any skip, keeps it): with a usable
// device the backend starts; without one, engine creation says why in one line.
TEST(CudaForward, StartsWithADeviceAndSaysInOneLineWhyNotWithout) {
    EngineOptions eo;
    eo.backend = cuda_backend();
    auto e = Engine::create(bundled(), eo);
    if (test::cuda_device_available(nullptr)) {
        ASSERT_TRUE(e.ok()) << e.error().message;
        EXPECT_STREQ((*e)->forward().backend_name(), "cuda");
        return;
    }
    ASSERT_FALSE(e.ok());
    const std::string& m = e.error().message;
    EXPECT_EQ(m.rfind("--backend cuda: no usable CUDA device (cudaGetDeviceCount: ", 0), 0u) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
}

// The acceptance check: greedy ids identical for 256 tokens on five prompts, and every step's
// logits within the bound above.
TEST(CudaForward, GreedyTokensAndLogitsMatchTheCpuOnTheBundledModel) {
    KVSCOPE_REQUIRE_CUDA_DEVICE();
    auto cpu = engine(false);
    auto gpu = engine(true);
    ASSERT_TRUE(cpu && gpu);
    for (const std::string& prompt : kPrompts) {
        SCOPED_TRACE(prompt);
        Sequence a(*cpu), b(*gpu);
        std::vector<int32_t> tokens = encode(prompt);
        std::vector<float> la = a.feed(tokens), lb = b.feed(tokens);
        double worst = 0;
        for (int step = 0; step < 256; ++step) {
            const LogitGap g = gap(la, lb);
            worst = std::max(worst, g.worst);
            ASSERT_LE(g.worst, g.bound) << "logits differ at generated token " << step;
            const int32_t ta = argmax(la), tb = argmax(lb);
            ASSERT_EQ(ta, tb) << "greedy token " << step << " differs";
            la = a.feed({ta});
            lb = b.feed({tb});
        }
        std::printf("  \"%s\": 256 tokens identical, largest logit difference %.5f\n",
                    prompt.c_str(), worst);
    }
}

// bf16 weights (what a model beyond f16's range gets): logits within the same bound.
TEST(CudaForward, Bf16WeightsStayWithinTheBound) {
    KVSCOPE_REQUIRE_CUDA_DEVICE();
    auto cpu = engine(false);
    auto gpu = engine(true, {}, {0, CudaWeightType::kBF16});
    ASSERT_TRUE(cpu && gpu);
    for (const std::string& prompt : kPrompts) {
        SCOPED_TRACE(prompt);
        Sequence a(*cpu), b(*gpu);
        std::vector<int32_t> tokens = encode(prompt);
        std::vector<float> la = a.feed(tokens), lb = b.feed(tokens);
        for (int step = 0; step < 32; ++step) {
            const LogitGap g = gap(la, lb);
            ASSERT_LE(g.worst, g.bound) << "at generated token " << step;
            const int32_t t = argmax(la);  // both follow the CPU's tokens
            la = a.feed({t});
            lb = b.feed({t});
        }
    }
}

// A request's logits do not depend on what it is batched with, beyond the order of f32 sums
// (cuBLAS picks kernels by the batch's width): 1e-3 is a hundred times what that moves.
TEST(CudaForward, ABatchOfRequestsEqualsEachAlone) {
    KVSCOPE_REQUIRE_CUDA_DEVICE();
    EngineOptions eo;
    eo.num_blocks = 256;
    auto gpu = engine(true, eo);
    ASSERT_TRUE(gpu);
    const std::vector<std::string> prompts = {kPrompts[1], kPrompts[2], kPrompts[4]};
    constexpr int kSteps = 24;
    // Alone: every step's logits.
    std::vector<std::vector<std::vector<float>>> alone(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
        Sequence s(*gpu);
        std::vector<float> l = s.feed(encode(prompts[i]));
        for (int step = 0; step < kSteps; ++step) {
            alone[i].push_back(l);
            l = s.feed({argmax(l)});
        }
    }
    // Together: one prefill of all three, then one decode step of all three at a time.
    std::vector<BlockTable> tables(prompts.size());
    std::vector<int32_t> pos(prompts.size(), 0);
    ForwardBatch batch;
    for (size_t i = 0; i < prompts.size(); ++i) {
        std::vector<int32_t> t = encode(prompts[i]);
        const auto n = static_cast<int32_t>(t.size());
        ASSERT_TRUE(gpu->blocks().grow(tables[i], n).ok());
        batch.tokens.insert(batch.tokens.end(), t.begin(), t.end());
        batch.chunks.push_back({&tables[i], 0, n, true});
        pos[i] = n;
    }
    std::vector<float> logits;
    const auto vocab = static_cast<size_t>(bundled()->config.vocab_size);
    for (int step = 0; step < kSteps; ++step) {
        Status s = gpu->forward().run(batch, logits);
        ASSERT_TRUE(s.ok()) << s.error().message;
        ASSERT_EQ(logits.size(), prompts.size() * vocab);
        ForwardBatch next;
        for (size_t i = 0; i < prompts.size(); ++i) {
            std::vector<float> row(logits.begin() + static_cast<long>(i * vocab),
                                   logits.begin() + static_cast<long>((i + 1) * vocab));
            const auto& want = alone[i][static_cast<size_t>(step)];
            double worst = 0;
            for (size_t v = 0; v < vocab; ++v)
                worst = std::max(worst, std::fabs(static_cast<double>(row[v]) - want[v]));
            ASSERT_LE(worst, 1e-3) << "request " << i << ", step " << step;
            ASSERT_EQ(argmax(row), argmax(want)) << "request " << i << ", step " << step;
            ASSERT_TRUE(gpu->blocks().grow(tables[i], pos[i] + 1).ok());
            next.tokens.push_back(argmax(row));
            next.chunks.push_back({&tables[i], pos[i]++, 1, true});
        }
        batch = std::move(next);
    }
    for (BlockTable& t : tables)
        gpu->blocks().free(t);
}

// Decode steps replayed from CUDA graphs launch the same kernels with the same arguments as
// launching them one by one, so every logit is the same bits; 300 steps cross two of the table
// stride's powers of two (a new recording each) and the attention's split count changes.
TEST(CudaForward, DecodeReplayedFromGraphsEqualsLaunchesBitForBit) {
    KVSCOPE_REQUIRE_CUDA_DEVICE();
    EngineOptions eo;
    eo.num_blocks = 64;
    auto replayed = engine(true, eo), launched = engine(true, eo);
    ASSERT_TRUE(replayed && launched);
    launched->forward().set_step_graphs(false);
    Sequence a(*replayed), b(*launched);
    std::vector<float> la = a.feed(encode(kPrompts[0])), lb = b.feed(encode(kPrompts[0]));
    constexpr int kSteps = 300;
    for (int step = 0; step < kSteps; ++step) {
        ASSERT_EQ(la.size(), lb.size());
        ASSERT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * sizeof(float)))
            << "step " << step;
        const int32_t next = argmax(la);
        la = a.feed({next});
        lb = b.feed({next});
    }
    EXPECT_EQ(launched->forward().replayed_steps(), 0);
    // Every decode step ran from a graph (the first of each stride by recording it).
    EXPECT_EQ(replayed->forward().replayed_steps(), kSteps);
}

// Blocks saved from the device are the CPU's bytes (same layout, values within rounding); loaded
// into other blocks they give bit for bit the same next step; a copy-on-write copy too.
TEST(CudaForward, SwapAndCopyOnWriteRoundTrip) {
    KVSCOPE_REQUIRE_CUDA_DEVICE();
    for (KvDtype dtype : {KvDtype::kF32, KvDtype::kF16}) {
        SCOPED_TRACE(kv_dtype_name(dtype));
        EngineOptions eo;
        eo.num_blocks = 64;
        eo.kv_dtype = dtype;
        auto cpu = engine(false, eo);
        auto gpu = engine(true, eo);
        ASSERT_TRUE(cpu && gpu);
        // 40 tokens: two full blocks and a partly filled third.
        std::vector<int32_t> prompt = encode(
            "In the beginning God created the heaven and the earth. And the earth was without "
            "form, and void; and darkness was upon the face of the deep.");
        prompt.resize(std::min<size_t>(prompt.size(), 40));
        ASSERT_EQ(prompt.size(), 40u);
        Sequence a(*cpu), b(*gpu);
        a.feed(prompt);
        b.feed(prompt);
        const size_t blocks = b.table().blocks.size();
        ASSERT_EQ(blocks, 3u);

        // Saved bytes: the CPU's layout, values within rounding of the 16-bit weights.
        std::vector<std::vector<uint8_t>> saved(blocks);
        for (size_t i = 0; i < blocks; ++i) {
            std::vector<uint8_t> want;
            cpu->kv_blocks().save_block(a.table().blocks[i], want);
            gpu->kv_blocks().save_block(b.table().blocks[i], saved[i]);
            ASSERT_EQ(saved[i].size(), want.size());
            if (dtype == KvDtype::kF32) {
                std::vector<float> x(want.size() / 4), y(x.size());
                std::memcpy(x.data(), want.data(), want.size());
                std::memcpy(y.data(), saved[i].data(), want.size());
                double worst = 0, scale = 0;
                // The partly filled block's unused slots are zeros on both sides.
                for (size_t k = 0; k < x.size(); ++k) {
                    worst = std::max(worst, std::fabs(static_cast<double>(x[k]) - y[k]));
                    scale = std::max(scale, std::fabs(static_cast<double>(x[k])));
                }
                EXPECT_LE(worst, scale / 256.0) << "block " << i;
            }
        }
        // Swapped in elsewhere: the same bytes back, and the same next step, bit for bit.
        Sequence c(*gpu);
        ASSERT_TRUE(gpu->blocks().grow(c.table(), 40).ok());
        for (size_t i = 0; i < blocks; ++i) {
            ASSERT_NE(c.table().blocks[i], b.table().blocks[i]);
            gpu->kv_blocks().load_block(c.table().blocks[i], saved[i]);
            std::vector<uint8_t> again;
            gpu->kv_blocks().save_block(c.table().blocks[i], again);
            EXPECT_EQ(again, saved[i]) << "block " << i;
        }
        // A fork shares every block; its first write copies the shared, partly filled last block
        // on the device (copy-on-write) and must leave the original's alone.
        Sequence d(*gpu);
        gpu->blocks().fork(b.table(), d.table());
        const int64_t cow_before = gpu->blocks().cow_copies();
        std::vector<float> from_fork, from_swap, from_original;
        // Sequence::feed grows from its own position: c and d start at 40 like b.
        auto step_at_40 = [&](Sequence& s, BlockTable& t, std::vector<float>& out) {
            ASSERT_TRUE(gpu->blocks().grow(t, 41).ok());
            ForwardBatch one{{prompt.back()}, {SequenceChunk{&t, 40, 1, true}}};
            Status st = gpu->forward().run(one, out);
            ASSERT_TRUE(st.ok()) << st.error().message;
            (void)s;
        };
        step_at_40(d, d.table(), from_fork);
        EXPECT_EQ(gpu->blocks().cow_copies(), cow_before + 1);
        step_at_40(c, c.table(), from_swap);
        step_at_40(b, b.table(), from_original);
        EXPECT_EQ(from_swap, from_original);
        EXPECT_EQ(from_fork, from_original);
        Status failed = gpu->forward().run({}, from_fork);  // no block move failed on the way
        EXPECT_TRUE(failed.ok()) << failed.error().message;
    }
}

// The scheduler on the CUDA backend: preemption by swap and parallel samples (forks, then
// copy-on-write) give the CPU scheduler's tokens.
TEST(CudaForward, ScheduledWithSwapsAndForksGivesTheCpuTokens) {
    KVSCOPE_REQUIRE_CUDA_DEVICE();
    std::vector<Request> requests;
    for (size_t i = 0; i < kPrompts.size(); ++i) {
        Request r;
        r.id = "r";  // appended, not "r" + ...: GCC 12 warns wrongly (-Wrestrict) on that
        r.id += std::to_string(i);
        r.prompt = encode(kPrompts[i]);
        r.max_tokens = 40;
        r.n = i == 2 ? 3 : 1;
        requests.push_back(r);
    }
    auto serve = [&](bool cuda) {
        EngineOptions eo;
        eo.block_size = 8;
        eo.num_blocks = 20;  // too few for all at once: preemption
        auto e = engine(cuda, eo);
        ServingOptions so;
        so.max_batch_tokens = 64;
        so.preempt = PreemptMode::kSwap;
        Scheduler s(*e, so, requests);
        while (s.step()) {
        }
        EXPECT_TRUE(s.error().ok()) << s.error().error().message;
        return s.summary();
    };
    const ServingSummary cpu = serve(false), gpu = serve(true);
    EXPECT_GT(gpu.swaps_out, 0) << "the pool never ran out";
    EXPECT_GT(gpu.cow_copies, 0);
    EXPECT_EQ(gpu.swaps_out, cpu.swaps_out);
    EXPECT_EQ(gpu.outputs, cpu.outputs);
}

// Token eviction (streaming, with compaction or not): the lanes' holes are honoured as on the
// CPU, so the greedy tokens are the CPU's.
TEST(CudaForward, StreamingEvictionGivesTheCpuTokens) {
    KVSCOPE_REQUIRE_CUDA_DEVICE();
    for (bool compact : {false, true}) {
        SCOPED_TRACE(compact ? "compacted" : "holes");
        EvictionOptions ev;
        ev.policy = "streaming";
        ev.budget_tokens = 24;
        ev.sinks = 4;
        ev.compact = compact;
        ev.positions = PositionMode::kAbsolute;  // cache positions are refused on CUDA
        auto made = KvEvictor::create(ev, bundled()->config.n_layers);
        ASSERT_TRUE(made.ok()) << made.error().message;
        std::shared_ptr<const KvEvictor> evictor = std::move(made).value();
        auto run = [&](bool cuda) {
            auto e = engine(cuda);
            GenerateRequest req;
            req.prompt = encode(kPrompts[0]);
            req.max_tokens = 96;
            req.evictor = evictor;
            std::vector<int32_t> ids;
            auto stats = generate(*e, req, [&](int32_t id) { ids.push_back(id); });
            EXPECT_TRUE(stats.ok()) << (stats ? "" : stats.error().message);
            if (stats) {
                EXPECT_GT(stats->tokens_evicted, 0);
            }
            return ids;
        };
        EXPECT_EQ(run(true), run(false));
    }
}

// What the CUDA backend says when a request under `policy` (24 tokens a lane, the policy's
// default positions) reaches its first step; empty if it ran.
std::string first_step_refusal(const std::string& policy) {
    EvictionOptions ev;
    ev.policy = policy;
    ev.budget_tokens = 24;
    auto evictor = KvEvictor::create(ev, bundled()->config.n_layers);
    if (!evictor.ok()) return "not created: " + evictor.error().message;
    auto e = engine(true);
    GenerateRequest req;
    req.prompt = encode(kPrompts[0]);
    req.max_tokens = 4;
    req.evictor = std::move(evictor).value();
    auto stats = generate(*e, req, [](int32_t) {});
    return stats.ok() ? std::string() : stats.error().message;
}

// Policies that score by attention or key norms are refused in one line, not run wrongly.
TEST(CudaForward, PoliciesNeedingStatisticsAreRefused) {
    KVSCOPE_REQUIRE_CUDA_DEVICE();
    for (const char* policy : {"h2o", "morphkv"}) {
        const std::string said = first_step_refusal(policy);
        EXPECT_EQ(
            said.rfind("--policy " + std::string(policy) + ": the CUDA backend does not gather", 0),
            0u)
            << said;
    }
}

// Streaming's default, cache positions, needs keys stored unrotated: refused in one line.
TEST(CudaForward, CachePositionsAreRefused) {
    KVSCOPE_REQUIRE_CUDA_DEVICE();
    const std::string said = first_step_refusal("streaming");
    EXPECT_EQ(said.rfind("--positions cache: the CUDA backend rotates keys", 0), 0u) << said;
}

TEST(CudaForward, QuantizedKvIsRefusedInOneLine) {
    KVSCOPE_REQUIRE_CUDA_DEVICE();
    for (KvDtype dtype : {KvDtype::kInt8, KvDtype::kInt4, KvDtype::kInt2}) {
        EngineOptions eo;
        eo.kv_dtype = dtype;
        eo.backend = cuda_backend();
        auto e = Engine::create(bundled(), eo);
        ASSERT_FALSE(e.ok());
        EXPECT_EQ(e.error().message.rfind(std::string("--kv-dtype ") + kv_dtype_name(dtype) +
                                              ": the CUDA backend keeps K/V in f32 or f16 only",
                                          0),
                  0u)
            << e.error().message;
    }
}

// Captured attention rows: the CPU's rows (same chunks, positions, layers and heads), each
// probability within 2/255 (the u8 rounding of nearly equal values).
TEST(CudaForward, CapturedAttentionMatchesTheCpu) {
    KVSCOPE_REQUIRE_CUDA_DEVICE();
    auto cpu = engine(false);
    auto gpu = engine(true);
    ASSERT_TRUE(cpu && gpu);
    const ModelConfig& c = bundled()->config;
    AttentionCapture want, got;
    want.wanted.assign(static_cast<size_t>(c.n_layers * c.n_heads), 0);
    want.wanted[1] = want.wanted[static_cast<size_t>(c.n_layers * c.n_heads - 1)] = 1;
    got.wanted = want.wanted;
    cpu->forward().set_capture(&want);
    gpu->forward().set_capture(&got);
    Sequence a(*cpu), b(*gpu);
    std::vector<int32_t> prompt = encode(kPrompts[1]);
    for (int step = 0; step < 3; ++step) {
        std::vector<float> la = a.feed(prompt), lb = b.feed(prompt);
        auto key = [](const AttentionCapture::Row& r) {
            return std::tuple(r.chunk, r.query_pos, r.layer, r.head);
        };
        auto by_key = [&](const auto& x, const auto& y) { return key(x) < key(y); };
        std::sort(want.rows.begin(), want.rows.end(), by_key);
        std::sort(got.rows.begin(), got.rows.end(), by_key);
        ASSERT_EQ(got.rows.size(), want.rows.size());
        for (size_t i = 0; i < want.rows.size(); ++i) {
            ASSERT_EQ(key(got.rows[i]), key(want.rows[i]));
            ASSERT_EQ(got.rows[i].probs.size(), want.rows[i].probs.size());
            for (size_t t = 0; t < want.rows[i].probs.size(); ++t)
                ASSERT_NEAR(got.rows[i].probs[t], want.rows[i].probs[t], 2)
                    << "row " << i << ", key " << t;
        }
        prompt = {argmax(la)};
    }
}

}  // namespace
}  // namespace kvscope
