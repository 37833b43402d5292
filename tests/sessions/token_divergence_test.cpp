// Where two recordings' tokens part: written by the real Recorder, read back by token_divergence.
#include <gtest/gtest.h>

#include "sessions/recorder.h"
#include "sessions/session_reader.h"
#include "sessions/token_divergence.h"
#include "test_support.h"

namespace kvscope {
namespace {

struct RecordedRun {
    // Per request: its name and its tokens, one a step from step 0.
    std::vector<std::pair<std::string, std::vector<int32_t>>> requests;
};

std::string record(const std::string& path, const RecordedRun& run) {
    RunInfo info;
    info.num_blocks = 4;
    info.block_size = 16;
    auto rec = Recorder::create(path, info);
    EXPECT_TRUE(rec.ok()) << rec.error().message;
    size_t longest = 0;
    for (const auto& [name, tokens] : run.requests)
        longest = std::max(longest, tokens.size());
    for (size_t r = 0; r < run.requests.size(); ++r) {  // all arrive at step 0
        Event a;
        a.kind = EventKind::kRequestArrive;
        a.request = static_cast<int32_t>(r);
        a.text = run.requests[r].first;
        (*rec)->emit(std::move(a));
    }
    for (size_t step = 0; step < longest; ++step)
        for (size_t r = 0; r < run.requests.size(); ++r) {
            const auto& [name, tokens] = run.requests[r];
            if (step >= tokens.size()) continue;
            Event t;
            t.kind = EventKind::kToken;
            t.step = static_cast<int64_t>(step) + 10;  // steps and positions are not the same
            t.request = static_cast<int32_t>(r);
            t.a = static_cast<int32_t>(step);
            t.b = tokens[step];
            t.text = std::string("t").append(std::to_string(tokens[step]));
            (*rec)->emit(std::move(t));
        }
    Status closed = (*rec)->close();
    EXPECT_TRUE(closed.ok()) << closed.error().message;
    return path;
}

TEST(TokenDivergence, FindsTheFirstDifferingTokenOfEachRequestByName) {
    std::string dir = test::temp_dir();
    // Request order differs between the runs; "only-left" is not in the right run.
    RecordedRun left{{{"same", {1, 2, 3, 4}},
                      {"differs", {1, 2, 3, 9, 9}},
                      {"only-left", {5}},
                      {"stops", {7, 7, 7}}}};
    RecordedRun right{{{"stops", {7, 7}}, {"differs", {1, 2, 3, 8, 9}}, {"same", {1, 2, 3, 4}}}};
    auto a = SessionReader::open(record(dir + "/a.kvs", left));
    auto b = SessionReader::open(record(dir + "/b.kvs", right));
    ASSERT_TRUE(a.ok() && b.ok());
    auto d = token_divergence(**a, **b);
    ASSERT_TRUE(d.ok()) << d.error().message;
    ASSERT_EQ(d->size(), 3u);
    EXPECT_EQ((*d)[0].request, "same");
    EXPECT_TRUE((*d)[0].identical());
    EXPECT_EQ((*d)[0].compared, 4);

    const TokenDivergence& x = (*d)[1];
    EXPECT_EQ(x.request, "differs");
    EXPECT_EQ(x.position, 3);
    EXPECT_EQ(x.left_step, 13);
    EXPECT_EQ(x.right_step, 13);
    EXPECT_EQ(x.left_token, 9);
    EXPECT_EQ(x.right_token, 8);
    EXPECT_EQ(x.left_text, "t9");
    EXPECT_EQ(x.right_text, "t8");

    const TokenDivergence& s = (*d)[2];  // the right run stopped a token earlier
    EXPECT_EQ(s.request, "stops");
    EXPECT_EQ(s.position, 2);
    EXPECT_EQ(s.left_step, 12);
    EXPECT_EQ(s.right_step, -1);
}

TEST(TokenDivergence, EmptyRecordingsHaveNothingToCompare) {
    std::string dir = test::temp_dir();
    auto a = SessionReader::open(record(dir + "/a.kvs", RecordedRun{}));
    auto b = SessionReader::open(record(dir + "/b.kvs", RecordedRun{{{"x", {1}}}}));
    ASSERT_TRUE(a.ok() && b.ok());
    auto d = token_divergence(**a, **b);
    ASSERT_TRUE(d.ok()) << d.error().message;
    EXPECT_TRUE(d->empty());
}

}  // namespace
}  // namespace kvscope
