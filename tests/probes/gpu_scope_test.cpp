// Scopes around an op's launches: what the external correlation id carries, the op name table,
// and that a scope pushes and pops exactly once (and nothing at all with the probes off).
#include "probes/gpu_scope.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace kvscope {
namespace {

TEST(GpuScope, ExternalIdsCarryStepOpAndLayer) {
    for (GpuScopeKey key : {GpuScopeKey{0, 0, 0}, GpuScopeKey{7, 3, 31},
                            GpuScopeKey{123456, 12, -1}, GpuScopeKey{-1, -1, -1},
                            GpuScopeKey{kMaxGpuScopeStep, kMaxGpuOps - 1, kMaxGpuScopeLayer}}) {
        const uint64_t id = pack_gpu_scope(key);
        EXPECT_EQ(unpack_gpu_scope(id), key) << key.step << " " << key.op << " " << key.layer;
        if (key.step >= 0) {
            EXPECT_NE(id, 0u) << "an id of a known step is never 0";
        }
    }
    // A part out of range packs as "not known", never as another value.
    const GpuScopeKey wide = unpack_gpu_scope(pack_gpu_scope({kMaxGpuScopeStep + 1, 4095, 5000}));
    EXPECT_EQ(wide, (GpuScopeKey{-1, -1, -1}));
    EXPECT_EQ(unpack_gpu_scope(pack_gpu_scope({5, -7, -2})), (GpuScopeKey{5, -1, -1}));
    EXPECT_EQ(unpack_gpu_scope(0), (GpuScopeKey{-1, -1, -1}));
}

TEST(GpuScope, OpNamesAreNumberedOnceEach) {
    GpuOpNames ops;
    EXPECT_EQ(ops.id("qkv"), 0);
    EXPECT_EQ(ops.id("attention"), 1);
    EXPECT_EQ(ops.id("qkv"), 0);
    EXPECT_EQ(ops.size(), 2u);
    EXPECT_EQ(ops.name(1), "attention");
    EXPECT_EQ(ops.name(2), "");
    EXPECT_EQ(ops.name(-1), "");
    // Names that would not split back out of "op|kernel", or none at all.
    for (const char* bad : {"", "a|b", "two words", "qkv:1"})
        EXPECT_EQ(ops.id(bad), -1) << bad;
    EXPECT_EQ(ops.size(), 2u);
    GpuOpNames full;
    for (int i = 0; i < kMaxGpuOps; ++i)
        ASSERT_EQ(full.id("op" + std::to_string(i)), i);
    EXPECT_EQ(full.id("one_more"), -1) << "the external id has room for " << kMaxGpuOps << " ops";
    EXPECT_EQ(full.id("op17"), 17);
}

struct RecordingCorrelation : GpuCorrelation {
    std::vector<std::string> calls;
    void push(uint64_t id) override {
        const GpuScopeKey k = unpack_gpu_scope(id);
        calls.push_back("push " + std::to_string(k.step) + "/" + std::to_string(k.op) + "/" +
                        std::to_string(k.layer));
    }
    void pop() override { calls.push_back("pop"); }
};

TEST(GpuScope, AScopePushesOnceAndPopsOnce) {
    RecordingCorrelation c;
    {
        GpuOpScope step_scope(&c, 9, 2);
        { GpuOpScope op(&c, 9, 4, 11); }
    }
    EXPECT_EQ(c.calls, (std::vector<std::string>{"push 9/2/-1", "push 9/4/11", "pop", "pop"}));
    // Probes off: a null correlation, and nothing happens.
    GpuOpScope off(nullptr, 9, 4, 11);
}

TEST(GpuScope, ASequenceKeepsOneOpOpenAtATime) {
    RecordingCorrelation c;
    {
        GpuOpSequence ops(&c, 3);
        ops.enter(1, 0);
        ops.enter(2, 0);
        ops.enter(5);
    }
    EXPECT_EQ(c.calls, (std::vector<std::string>{"push 3/1/0", "pop", "push 3/2/0", "pop",
                                                 "push 3/5/-1", "pop"}));
    RecordingCorrelation unused;
    { GpuOpSequence never_entered(&unused, 3); }
    EXPECT_TRUE(unused.calls.empty());
    GpuOpSequence off(nullptr, 3);
    off.enter(1);
}

}  // namespace
}  // namespace kvscope
