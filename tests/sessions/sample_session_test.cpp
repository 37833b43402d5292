// The committed sample session (assets/sessions/sample-chat.kvs): sound, readable at any step,
// and still what the engine records today (else re-record it with record_sample.sh).
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>

#include "sessions/request_progress.h"
#include "sessions/session_reader.h"
#include "test_support.h"

namespace kvscope {
namespace {

test::CommandResult kvscope(std::vector<std::string> args) {
    return test::run_kvscope(std::move(args), 300);
}

TEST(SampleSession, IsSoundAndSmall) {
    auto sample = test::source_file("assets/sessions/sample-chat.kvs");
    ASSERT_TRUE(sample) << "assets/sessions/sample-chat.kvs is missing";
    auto check = kvscope({"check", *sample});
    EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
    EXPECT_LT(std::filesystem::file_size(*sample), 6u << 20);
    auto inspect = kvscope({"inspect", *sample, "--step", "250", "--json"});
    ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
    auto j = nlohmann::json::parse(inspect.out);
    EXPECT_EQ(j["step"], 250);
    EXPECT_GT(j["pool"]["used"].get<int>(), 0);
    EXPECT_EQ(j["requests"].size(), 6u);
    auto reader = SessionReader::open(*sample);
    ASSERT_TRUE(reader.ok()) << reader.error().message;
    // Recorded with the bundled model: named by its place in the repository, not this machine's.
    EXPECT_EQ((*reader)->info().model, "assets/models/kvscope-demo.gguf");
    auto heads = (*reader)->captured_heads();
    ASSERT_TRUE(heads.ok());
    EXPECT_EQ(heads->size(), 8u);  // every head of layer 4
}

TEST(SampleSession, MatchesAFreshRecording) {
    auto sample = test::source_file("assets/sessions/sample-chat.kvs");
    auto script = test::source_file("assets/sessions/record_sample.sh");
    ASSERT_TRUE(sample && script);
    std::string dir = test::temp_dir();
    // The script's commands, into a temporary file.
    auto w = kvscope({"workload", "--kind", "chat", "--requests", "6", "--seed", "5", "--out",
                      dir + "/chat.jsonl"});
    ASSERT_EQ(w.exit_code, 0) << w.err;
    auto r = kvscope({"run", "--workload", dir + "/chat.jsonl", "--num-blocks", "32",
                      "--capture-attention", "4:*", "--record", dir + "/fresh.kvs"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ASSERT_NE(test::read_file(*script).find("--num-blocks 32 --capture-attention \"4:*\""),
              std::string::npos)
        << "record_sample.sh and this test must run the same command";
    auto a = SessionReader::open(*sample), b = SessionReader::open(dir + "/fresh.kvs");
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_EQ((*a)->last_step(), (*b)->last_step())
        << "the engine now schedules the sample differently: re-record it with "
           "assets/sessions/record_sample.sh";
    for (int64_t step : {int64_t{50}, int64_t{300}, (*a)->last_step()}) {
        auto sa = (*a)->state_at(step);
        ASSERT_TRUE(sa.ok());
        TimelineState want = **sa;
        auto sb = (*b)->state_at(step);
        ASSERT_TRUE(sb.ok());
        EXPECT_TRUE(want == **sb) << "step " << step
                                  << " differs: re-record with assets/sessions/record_sample.sh";
    }
}

TEST(SampleSession, AttentionSummaryFindsTheLocalHeads) {
    auto sample = test::source_file("assets/sessions/sample-chat.kvs");
    ASSERT_TRUE(sample);
    auto r = kvscope({"inspect", *sample, "--attention-summary", "16", "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto j = nlohmann::json::parse(r.out);
    ASSERT_EQ(j["heads"].size(), 8u);
    for (const auto& h : j["heads"]) {
        EXPECT_EQ(h["layer"], 4);
        EXPECT_GT(h["rows"].get<int>(), 100);
        double first = h["mean_on_first"], recent = h["mean_on_recent"];
        EXPECT_TRUE(first >= 0 && first <= 1 && recent >= 0 && recent <= 1.01) << h.dump();
    }
    // Layer 4 head 5 of the bundled model looks at the last 16 tokens almost only.
    EXPECT_GT(j["heads"][5]["mean_on_recent"].get<double>(), 0.8);
    auto text = kvscope({"inspect", *sample, "--attention-summary", "16"});
    EXPECT_NE(text.out.find("local"), std::string::npos) << text.out;
    EXPECT_EQ(kvscope({"inspect", *sample, "--attention-summary", "0"}).exit_code, 2);
    EXPECT_EQ(kvscope({"inspect", *sample, "--attention-summary", "16", "--step", "3"}).exit_code,
              2);
    std::string dir = test::temp_dir();
    auto g = kvscope({"generate", "--max-tokens", "4", "--record", dir + "/none.kvs"});
    ASSERT_EQ(g.exit_code, 0) << g.err;
    auto none = kvscope({"inspect", dir + "/none.kvs", "--attention-summary", "16"});
    EXPECT_EQ(none.exit_code, 1);
    EXPECT_NE(none.err.find("no attention was captured"), std::string::npos) << none.err;
}

TEST(SampleSession, FirstStepWithTokensMatchesAScan) {
    auto sample = test::source_file("assets/sessions/sample-chat.kvs");
    ASSERT_TRUE(sample);
    auto reader = SessionReader::open(*sample);
    ASSERT_TRUE(reader.ok());
    SessionReader& r = **reader;
    // Each request's token count at every step, then searched for again.
    std::map<std::string, std::vector<std::pair<int64_t, int32_t>>> counts;
    for (int64_t step = r.first_step(); step <= r.last_step(); ++step) {
        auto st = r.state_at(step);
        ASSERT_TRUE(st.ok());
        for (const auto& [i, q] : (*st)->requests)
            counts[q.name].emplace_back(step, q.num_tokens());
    }
    int checked = 0;
    for (const auto& [name, per_step] : counts) {
        for (size_t k = 0; k < per_step.size(); k += 25) {
            int32_t want = per_step[k].second;
            if (want == 0) continue;
            int64_t expect = -1;  // the first step whose count reaches `want`
            for (const auto& [step, n] : per_step)
                if (n >= want) {
                    expect = step;
                    break;
                }
            EXPECT_EQ(first_step_with_tokens(r, name, want), expect) << name << " " << want;
            ++checked;
        }
        EXPECT_EQ(first_step_with_tokens(r, name, per_step.back().second + 1), -1) << name;
    }
    EXPECT_GT(checked, 20);
    EXPECT_EQ(first_step_with_tokens(r, "no-such-request", 1), -1);
}

}  // namespace
}  // namespace kvscope
