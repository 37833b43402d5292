// The GPU's records put together into events as CUPTI delivers them: out of order, across
// flushes, before or after the links that say which step and op launched them, graph launches,
// and samples from another thread.
#include "probes/gpu_correlator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

namespace kvscope {
namespace {

class GpuCorrelatorTest : public ::testing::Test {
  protected:
    GpuOpNames ops;
    GpuCorrelator c{&ops};
    int32_t qkv = ops.id("qkv"), attention = ops.id("attention"), decode = ops.id("decode_graph");

    static GpuActivity kernel(uint32_t correlation, uint64_t start, uint64_t end,
                              const char* name = "_Z6kernelv") {
        GpuActivity a;
        a.kind = GpuActivityKind::kKernel;
        a.name = name;
        a.correlation = correlation;
        a.start_ns = start;
        a.end_ns = end;
        a.stream = 7;
        return a;
    }
    void link(uint32_t correlation, int64_t step, int32_t op, int32_t layer = -1) {
        c.add_links({{correlation, pack_gpu_scope({step, op, layer})}});
    }
    void add(std::vector<GpuActivity> a) { c.add_activities(std::move(a)); }
    std::vector<Event> take(int64_t step) {
        std::vector<Event> out;
        c.take(step, out);
        return out;
    }
};

TEST_F(GpuCorrelatorTest, KernelsTakeTheStepOpAndLayerOfTheirLaunch) {
    link(1, 5, qkv, 0);
    link(2, 5, attention, 0);
    add({kernel(1, 100, 200), kernel(2, 250, 400)});
    auto out = take(5);
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[0].text, "qkv|kernel");
    EXPECT_EQ(out[0].step, 5);
    EXPECT_EQ(out[0].a, 0);
    EXPECT_EQ(out[1].text, "attention|kernel");
    EXPECT_EQ(c.counts().kernels, 2u);
    EXPECT_EQ(c.counts().unattributed, 0u);
    EXPECT_TRUE(take(6).empty()) << "each record is handed over once";
}

TEST_F(GpuCorrelatorTest, ALinkMayArriveAfterItsRecordsAndInAnotherBuffer) {
    // The kernel's buffer was flushed before the one with the API record and its link.
    add({kernel(10, 100, 200)});
    link(10, 3, qkv, 2);
    auto out = take(3);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].text, "qkv|kernel");
    EXPECT_EQ(out[0].a, 2);
}

TEST_F(GpuCorrelatorTest, AKernelNoScopeClaimedIsHandedOverUnattributed) {
    link(1, 4, qkv);
    add({kernel(1, 100, 200), kernel(99, 300, 350, "_Z4warmv")});
    auto out = take(4);
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[1].text, "warm");
    EXPECT_EQ(out[1].step, -1);
    EXPECT_EQ(out[1].a, -1);
    EXPECT_EQ(c.counts().unattributed, 1u);
}

TEST_F(GpuCorrelatorTest, RecordsOutOfOrderComeOutByStartTime) {
    link(1, 2, qkv);
    link(2, 2, attention);
    link(3, 2, qkv);
    add({kernel(3, 900, 950)});
    add({kernel(1, 100, 150), kernel(2, 500, 600)});
    c.add_samples({{50, 150, 10, 10}, {450, 550, 10, 10}});
    auto out = take(2);
    ASSERT_EQ(out.size(), 5u);
    for (size_t i = 1; i < out.size(); ++i)
        EXPECT_LE(out[i - 1].t_ns, out[i].t_ns) << i;
    EXPECT_EQ(out[0].kind, EventKind::kHbmSample);
    EXPECT_EQ(out[4].t_ns, 900);
}

TEST_F(GpuCorrelatorTest, KernelsOfALaterStepWaitForIt) {
    // A pipelined backend launched step 6 before step 5's records were taken.
    link(1, 5, qkv);
    link(2, 6, qkv);
    add({kernel(1, 100, 200), kernel(2, 300, 400)});
    auto five = take(5);
    ASSERT_EQ(five.size(), 1u);
    EXPECT_EQ(five[0].step, 5);
    auto six = take(6);
    ASSERT_EQ(six.size(), 1u);
    EXPECT_EQ(six[0].step, 6);
    EXPECT_EQ(c.counts().late, 0u);
}

TEST_F(GpuCorrelatorTest, ARecordWhoseStepWasTakenIsHandedOverLateAndCounted) {
    link(1, 4, qkv);
    take(4);
    take(5);
    add({kernel(1, 100, 200)});  // a straggler of step 4
    auto out = take(6);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].step, 4) << "it keeps the step that launched it";
    EXPECT_EQ(c.counts().late, 1u);
}

TEST_F(GpuCorrelatorTest, AGraphsKernelsBelongToTheStepThatLaunchedIt) {
    // One graph (id 7) captured once and launched in steps 8 and 9: every kernel of a launch
    // carries that launch's correlation id, whatever step captured the graph.
    link(500, 8, decode);
    link(600, 9, decode);
    std::vector<GpuActivity> first, second;
    for (int i = 0; i < 4; ++i) {
        GpuActivity k = kernel(500, 1000 + 100 * i, 1050 + 100 * i);
        k.graph = 7;
        first.push_back(k);
        k = kernel(600, 5000 + 100 * i, 5050 + 100 * i);
        k.graph = 7;
        second.push_back(k);
    }
    add(std::move(second));  // the later launch's buffer may come first
    add(std::move(first));
    auto eight = take(8);
    ASSERT_EQ(eight.size(), 4u);
    for (const Event& e : eight) {
        EXPECT_EQ(e.step, 8);
        EXPECT_EQ(e.text, "decode_graph|kernel");
    }
    auto nine = take(9);
    ASSERT_EQ(nine.size(), 4u);
    for (const Event& e : nine)
        EXPECT_EQ(e.step, 9);
}

TEST_F(GpuCorrelatorTest, ACopyIsClaimedThroughItsRuntimeCall) {
    GpuActivity copy;
    copy.kind = GpuActivityKind::kMemcpy;
    copy.copy = GpuCopyKind::kHtoD;
    copy.bytes = 4096;
    copy.start_ns = 10;
    copy.end_ns = 20;
    copy.correlation = 71;          // the driver call: no scope link of its own here
    copy.runtime_correlation = 70;  // cudaMemcpyAsync, made inside the scope
    link(70, 1, ops.id("swap_in"));
    add({copy});
    auto out = take(1);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].text, "swap_in|memcpy HtoD");
    EXPECT_EQ(out[0].value, 4096);
    EXPECT_EQ(c.counts().copies, 1u);
}

TEST_F(GpuCorrelatorTest, UntimedRecordsAndTheClockProbeAreDropped) {
    link(1, 1, qkv);
    add({kernel(1, 0, 0), kernel(1, 10, 20, "kvscope_global_timer_probe"), kernel(1, 30, 40)});
    auto out = take(1);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].t_ns, 30);
    EXPECT_EQ(c.counts().untimed, 1u);
    EXPECT_EQ(c.counts().kernels, 1u);
}

TEST_F(GpuCorrelatorTest, SamplesGoWithTheStepThatTakesThemOnTheirOwnClock) {
    c.set_activity_clock({1000, 1});
    c.set_sampling_clock({-50, 1});
    c.set_sample_interval(100);
    c.add_samples({{100, 200, 4, 4}, {200, 300, 8, 0}});
    c.add_samples({{300, 300, 0, 0}});   // no length: kept
    c.add_samples({{900, 1000, 1, 1}});  // after a gap
    auto out = take(3);
    ASSERT_EQ(out.size(), 4u);
    for (const Event& e : out) {
        EXPECT_EQ(e.kind, EventKind::kHbmSample);
        EXPECT_EQ(e.step, 3);
    }
    EXPECT_EQ(out[0].t_ns, 50);
    EXPECT_EQ(out[0].wide, 150);
    EXPECT_EQ(out[1].value, 8);
    EXPECT_EQ(out[2].wide, out[2].t_ns);
    EXPECT_EQ(c.counts().samples, 4u);
    EXPECT_EQ(c.counts().sample_gaps, 1u);
    // Kernels use the activity clock.
    link(1, 4, qkv);
    add({kernel(1, 100, 200)});
    EXPECT_EQ(take(4).at(0).t_ns, 1100);
}

TEST_F(GpuCorrelatorTest, LinksOfLongPastStepsAreForgotten) {
    link(1, 2, qkv);
    take(2);
    take(3);
    take(4);  // step 2's links go: only the step before the one taken is kept
    add({kernel(1, 100, 200)});
    auto out = take(5);
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].step, -1);
    EXPECT_EQ(c.counts().unattributed, 1u);
}

TEST_F(GpuCorrelatorTest, TakeAllHandsOverWhatLaterStepsHeld) {
    link(1, 10, qkv);
    add({kernel(1, 100, 200)});
    c.add_samples({{1, 2, 3, 4}});
    EXPECT_EQ(take(9).size(), 1u) << "the sample only";
    std::vector<Event> rest;
    c.take_all(rest);
    ASSERT_EQ(rest.size(), 1u);
    EXPECT_EQ(rest[0].step, 10);
    rest.clear();
    c.take_all(rest);
    EXPECT_TRUE(rest.empty());
}

TEST_F(GpuCorrelatorTest, ThreadsAddWhileTheEngineTakes) {
    // CUPTI's thread adds records and links, the drain thread samples, the engine takes.
    constexpr int kSteps = 200, kPerStep = 20;
    std::thread cupti([&] {
        for (int s = 0; s < kSteps; ++s) {
            std::vector<GpuActivity> batch;
            for (int k = 0; k < kPerStep; ++k) {
                const auto id = static_cast<uint32_t>(s * kPerStep + k + 1);
                link(id, s, qkv, k);
                batch.push_back(kernel(id, 1000u * s + k, 1000u * s + k + 1));
            }
            add(std::move(batch));
        }
    });
    std::thread drain([&] {
        for (int i = 0; i < kSteps; ++i)
            c.add_samples({{100u * i, 100u * i + 100, 1, 1}});
    });
    size_t kernels = 0, samples = 0;
    for (int s = 0; s < kSteps; ++s)
        for (const Event& e : take(s))
            ++(e.kind == EventKind::kKernel ? kernels : samples);
    cupti.join();
    drain.join();
    std::vector<Event> rest;
    c.take_all(rest);
    for (const Event& e : rest)
        ++(e.kind == EventKind::kKernel ? kernels : samples);
    EXPECT_EQ(kernels, static_cast<size_t>(kSteps * kPerStep));
    EXPECT_EQ(samples, static_cast<size_t>(kSteps));
    const GpuEventCounts n = c.counts();
    EXPECT_EQ(n.kernels, static_cast<uint64_t>(kSteps * kPerStep));
    EXPECT_EQ(n.samples, static_cast<uint64_t>(kSteps));
}

}  // namespace
}  // namespace kvscope
