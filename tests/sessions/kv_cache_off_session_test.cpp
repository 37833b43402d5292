// The lesson of the KV cache as a recording shows it: without one, each step's flops grow with
// the text (a step recomputes every token before it), by one token's forward pass per token;
// with one, the decode steps stay flat. And compare says by how much, step by step and in all.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "sessions/session_reader.h"
#include "sessions/step_costs.h"
#include "sessions/step_ops.h"
#include "test_support.h"

namespace kvscope {
namespace {

const char* const kPrompt = "And the LORD said unto Moses,";

std::unique_ptr<SessionReader> record(const std::string& path, const std::string& kv_cache) {
    auto r = test::run_kvscope({"generate", "--prompt", kPrompt, "--max-tokens", "64", "--threads",
                                "2", "--kv-cache", kv_cache, "--record", path},
                               300);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    auto reader = SessionReader::open(path);
    EXPECT_TRUE(reader.ok()) << (reader.ok() ? "" : reader.error().message);
    return reader.ok() ? std::move(reader).value() : nullptr;
}

// One token's forward pass at each cached decode step: every op's flops but the LM head's,
// which runs once a step whatever the step ran.
std::vector<double> per_token_flops(SessionReader& cached) {
    std::vector<double> out;
    Status walked = cached.for_each_step({EventKind::kKernel},
                                         [&](const StepSummary& s, std::vector<Event>& events) {
                                             if (s.decode_tokens != 1 || s.prefill_tokens != 0)
                                                 return Status{};
                                             double flops = 0;
                                             for (const OpRecord& op : ops_of(events))
                                                 if (op.name != "lm_head")
                                                     flops += static_cast<double>(op.cost.flops);
                                             out.push_back(flops);
                                             return Status{};
                                         });
    EXPECT_TRUE(walked.ok());
    return out;
}

TEST(KvCacheOffSession, StepFlopsGrowLinearlyWithPositionWhileTheCachedRunsStayFlat) {
    const std::string dir = test::temp_dir();
    auto naive = record(dir + "/off.kvs", "off");
    auto cached = record(dir + "/on.kvs", "on");
    ASSERT_TRUE(naive && cached);
    auto off = step_costs(*naive);
    auto on = step_costs(*cached);
    ASSERT_TRUE(off.ok() && on.ok());
    ASSERT_EQ(off->size(), 64u);
    ASSERT_EQ(on->size(), 64u);

    // Least squares of flops against the tokens each uncached step ran.
    double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0, syy = 0;
    for (const StepCost& s : *off) {
        const double x = s.tokens, y = static_cast<double>(s.flops);
        n += 1, sx += x, sy += y, sxx += x * x, sxy += x * y, syy += y * y;
    }
    const double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx);
    const double r = (n * sxy - sx * sy) / std::sqrt((n * sxx - sx * sx) * (n * syy - sy * sy));
    EXPECT_GT(r * r, 0.999);
    EXPECT_EQ(off->back().tokens - off->front().tokens, 63);

    // The slope is one token's forward pass (its attention over the tokens before it included).
    std::vector<double> one = per_token_flops(*cached);
    ASSERT_EQ(one.size(), 63u);
    double mean = 0;
    for (double f : one)
        mean += f / static_cast<double>(one.size());
    EXPECT_NEAR(slope / mean, 1.0, 0.02) << "slope " << slope << ", one token " << mean;

    // The cached decode steps stay flat; the uncached ones climb many times over.
    auto [lo, hi] =
        std::minmax_element(on->begin() + 1, on->end(),
                            [](const StepCost& a, const StepCost& b) { return a.flops < b.flops; });
    EXPECT_LT(static_cast<double>(hi->flops) / static_cast<double>(lo->flops), 1.1);
    EXPECT_GT(static_cast<double>(off->back().flops) / static_cast<double>(off->front().flops),
              5.0);
    // The bytes climb with them: every step writes the K/V of the whole text again.
    EXPECT_GT(off->back().bytes, off->front().bytes);

    // Compare: step k of each run side by side, the ratio at every step and in total.
    CostComparison c = compare_costs(*off, *on);
    ASSERT_EQ(c.rows.size(), 64u);
    EXPECT_NEAR(c.rows.front().flops_ratio, 1.0, 1e-9);  // both prefill the prompt alone
    EXPECT_GT(c.rows.back().flops_ratio, 30.0);
    EXPECT_GT(c.flops_ratio, 10.0);
    EXPECT_NEAR(c.flops_ratio,
                static_cast<double>(c.left_total.flops) / static_cast<double>(c.right_total.flops),
                1e-12);
    auto printed = test::run_kvscope({"compare", dir + "/off.kvs", dir + "/on.kvs", "--costs"});
    ASSERT_EQ(printed.exit_code, 0) << printed.err;
    EXPECT_EQ(printed.out, cost_comparison_text(c));
    EXPECT_NE(printed.out.find("\ntotal "), std::string::npos);
}

TEST(KvCacheOffSession, IsRefusedWhereItDoesNotApply) {
    const std::string dir = test::temp_dir();
    auto w = test::run_kvscope(
        {"workload", "--kind", "chat", "--requests", "3", "--out", dir + "/three.jsonl"});
    ASSERT_EQ(w.exit_code, 0) << w.err;
    struct Case {
        std::vector<std::string> args;
        std::string says;
    } cases[] = {
        {{"generate", "--prompt", kPrompt, "--kv-cache", "off", "--policy", "streaming",
          "--kv-budget", "32"},
         "--policy"},
        {{"generate", "--prompt", kPrompt, "--kv-cache", "off", "--kv-dtype", "int8"},
         "--kv-dtype"},
        {{"run", "--workload", dir + "/none.jsonl", "--kv-cache", "off"}, "one sequence"},
        // Refused before the window opens: no display needed.
        {{"gui", "--workload", dir + "/three.jsonl", "--kv-cache", "off"}, "3 requests"},
    };
    for (const Case& c : cases) {
        auto r = test::run_kvscope(c.args);
        EXPECT_EQ(r.exit_code, 2) << c.args[0] << ": " << r.err;
        EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    }
}

}  // namespace
}  // namespace kvscope
