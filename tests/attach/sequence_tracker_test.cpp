// One publisher's sequence numbers: restarts told without seeing 0, and no arithmetic that
// wraps.
#include <gtest/gtest.h>

#include "attach/sequence_tracker.h"

namespace kvscope::attach {
namespace {

TEST(SequenceTracker, ARestartIsToldWithoutSeeingZero) {
    SequenceTracker t(100);
    EXPECT_EQ(t.see(500).verdict, SeqVerdict::kFirst);
    EXPECT_EQ(t.see(501).verdict, SeqVerdict::kNext);
    // A little back on the same connection: a duplicate, skipped.
    EXPECT_EQ(t.see(450).verdict, SeqVerdict::kStale);
    EXPECT_EQ(t.expected(), 502u);
    // The first batch of a new connection below the last: the publisher came back; its
    // [0, 3) never arrived.
    SeqResult r = t.see(3, /*new_connection=*/true);
    EXPECT_EQ(r.verdict, SeqVerdict::kRestart);
    EXPECT_EQ(r.previous, 501u);
    EXPECT_EQ(r.missing, 3u);
    EXPECT_EQ(t.expected(), 4u);
    // On a new connection a later number is only a gap (a reconnection, no restart).
    EXPECT_EQ(t.see(10, true).verdict, SeqVerdict::kGap);
    // Back by more than the replay window on the same connection: a restart too.
    for (uint64_t s = 11; s < 300; ++s)
        ASSERT_EQ(t.see(s).verdict, SeqVerdict::kNext);
    EXPECT_EQ(t.see(150).verdict, SeqVerdict::kRestart);
    EXPECT_EQ(t.see(0).verdict, SeqVerdict::kRestart);  // 0 after others, as always
}

TEST(SequenceTracker, JumpsToTheTopOfTheRangeNeverWrap) {
    SequenceTracker t;
    t.see(2);
    SeqResult r = t.see(uint64_t{1} << 63);
    EXPECT_EQ(r.verdict, SeqVerdict::kGap);
    EXPECT_EQ(r.missing_from, 3u);
    EXPECT_EQ(r.missing, (uint64_t{1} << 63) - 3);
    r = t.see(~uint64_t{0} - 1);
    EXPECT_EQ(r.verdict, SeqVerdict::kGap);
    EXPECT_EQ(t.expected(), ~uint64_t{0});
    // Far back from there: past any replay window, a restart, not a huge "stale".
    EXPECT_EQ(t.see(5).verdict, SeqVerdict::kRestart);
}

}  // namespace
}  // namespace kvscope::attach
