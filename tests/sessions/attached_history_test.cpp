// An attached session's history as the Memory and Evictions panels read it: blocks taken and
// gone per step (zeros between busy steps), every block gone with its age, and those that went
// with a clear told from those evicted on their own.
#include <gtest/gtest.h>

#include "sessions/attached_history.h"

namespace kvscope {
namespace {

Event kv(EventKind kind, int64_t step, int32_t block, int32_t publisher, int32_t refs_after,
         int64_t t_ns) {
    Event e;
    e.kind = kind;
    e.step = step;
    e.block = block;
    e.a = publisher;
    e.b = static_cast<int32_t>(KvMedium::kCpu);
    e.c = refs_after;
    e.wide = 0x100 + block;
    e.t_ns = t_ns;
    return e;
}

TEST(AttachedHistory, CountsBlocksTakenAndGoneAndTheirAges) {
    RunInfo info;
    info.num_blocks = 8;
    info.publishers = {"a", "b"};  // blocks 0..3 and 4..7
    AttachedHistory h(info);
    h.add({kv(EventKind::kKvStored, 1, 0, 0, 0, 1000), kv(EventKind::kKvStored, 1, 1, 0, 0, 1000),
           kv(EventKind::kKvStored, 1, 1, 0, 0, 1500),  // a second reference: no block taken
           kv(EventKind::kKvStored, 2, 4, 1, 0, 2000)});
    // Later steps arrive later (a recording that grows).
    h.add({kv(EventKind::kKvRemoved, 6, 1, 0, 1, 6000),  // one reference left: still held
           kv(EventKind::kKvRemoved, 6, 0, 0, 0, 6500)});
    Event cleared;
    cleared.kind = EventKind::kKvCleared;
    cleared.step = 7;
    cleared.a = 0;
    cleared.c = 1;
    h.add({cleared, kv(EventKind::kKvRemoved, 7, 1, 0, 0, 7000),
           kv(EventKind::kKvRemoved, 7, 4, 1, 0, 7000)});
    EXPECT_EQ(h.steps, (std::vector<int64_t>{1, 2, 3, 5, 6, 7}));
    EXPECT_EQ(h.stored, (std::vector<float>{2, 1, 0, 0, 0, 0}));
    EXPECT_EQ(h.gone, (std::vector<float>{0, 0, 0, 0, 1, 2}));
    ASSERT_EQ(h.removals.size(), 3u);
    EXPECT_EQ(h.removals[0].block, 0);
    EXPECT_EQ(h.removals[0].age_ns, 5500);
    EXPECT_EQ(h.removals[0].stored_step, 1);
    EXPECT_FALSE(h.removals[0].cleared);
    EXPECT_EQ(h.removals[0].medium, KvMedium::kCpu);
    EXPECT_EQ(h.removals[1].block, 1);
    EXPECT_EQ(h.removals[1].age_ns, 6000);  // from its first store, not its second reference
    EXPECT_TRUE(h.removals[1].cleared);
    EXPECT_EQ(h.removals[2].publisher, 1);  // another publisher's removal: no part of the clear
    EXPECT_FALSE(h.removals[2].cleared);
    EXPECT_EQ(h.removals[2].hash, 0x104u);
    // A removal of a block never seen stored (joined late): its age unknown.
    h.add({kv(EventKind::kKvRemoved, 9, 2, 0, 0, 9000)});
    EXPECT_EQ(h.removals.back().stored_step, -1);
    EXPECT_EQ(h.removals.back().age_ns, -1);
}

}  // namespace
}  // namespace kvscope
