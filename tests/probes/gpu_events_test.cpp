// One GPU record at a time into an Event, on hand-built records: kernels, copies and sets, PM
// samples, the names they are shown by, and the clock they are put on.
#include "probes/gpu_events.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace kvscope {
namespace {

GpuActivity kernel(uint64_t start, uint64_t end, uint32_t stream = 7) {
    GpuActivity a;
    a.kind = GpuActivityKind::kKernel;
    a.name = "_ZN7kvscope7kernels13swiglu_kernelIfEEvPfPKfS4_l";
    a.start_ns = start;
    a.end_ns = end;
    a.stream = stream;
    a.correlation = 41;
    a.threads = 132 * 8 * 512;
    return a;
}

TEST(GpuEvents, AKernelRecordBecomesAKernelEventOnTheHostClock) {
    const ClockOffset clock{-1'000'000, 50};
    Event e = gpu_activity_event(kernel(5'000'000, 5'012'345), {12, 3, 7}, "swiglu", clock);
    EXPECT_EQ(e.kind, EventKind::kKernel);
    EXPECT_EQ(e.step, 12);
    EXPECT_EQ(e.t_ns, 4'000'000);
    EXPECT_EQ(e.wide, 12'345);
    EXPECT_EQ(e.a, 7) << "layer";
    EXPECT_EQ(e.b, 132 * 8 * 512) << "threads launched";
    EXPECT_EQ(e.c, 8) << "lane: 1 + the stream's id";
    EXPECT_EQ(e.text, "swiglu|kvscope::kernels::swiglu_kernel<float>");
    const GpuKernelText t = split_gpu_kernel_text(e.text);
    EXPECT_EQ(t.op, "swiglu");
    EXPECT_EQ(t.kernel, "kvscope::kernels::swiglu_kernel<float>");
    EXPECT_EQ(e.cost.bytes(), 0) << "a GPU's bytes are measured by hbm_sample, not worked out";
    EXPECT_TRUE(e.payload.empty());
}

TEST(GpuEvents, AKernelNoScopeClaimedKeepsItsOwnName) {
    Event e = gpu_activity_event(kernel(100, 200), {}, "", {});
    EXPECT_EQ(e.step, -1);
    EXPECT_EQ(e.a, -1);
    EXPECT_EQ(e.text, "kvscope::kernels::swiglu_kernel<float>");
    EXPECT_EQ(split_gpu_kernel_text(e.text).op, "");
    // An op id with no name (a table that lost it) reads the same way.
    EXPECT_EQ(gpu_activity_event(kernel(100, 200), {3, 99, 1}, "", {}).text, e.text);
}

TEST(GpuEvents, CopiesAreNamedByDirectionAndCarryTheirBytes) {
    for (auto [kind, name] : {std::pair{GpuCopyKind::kHtoD, "memcpy HtoD"},
                              std::pair{GpuCopyKind::kDtoH, "memcpy DtoH"},
                              std::pair{GpuCopyKind::kDtoD, "memcpy DtoD"},
                              std::pair{GpuCopyKind::kPtoP, "memcpy PtoP"},
                              std::pair{GpuCopyKind::kUnknown, "memcpy unknown"}}) {
        GpuActivity a;
        a.kind = GpuActivityKind::kMemcpy;
        a.copy = kind;
        a.bytes = 3u << 30;
        a.start_ns = 10;
        a.end_ns = 1010;
        a.stream = 0;
        Event e = gpu_activity_event(a, {4, 0, -1}, "swap_in", {});
        EXPECT_EQ(e.text, std::string("swap_in|") + name);
        EXPECT_EQ(e.value, 3.0 * (1u << 30));
        EXPECT_EQ(e.wide, 1000);
        EXPECT_EQ(e.b, 0);
        EXPECT_EQ(e.c, 1) << "stream 0 still is not the host's lane";
    }
    GpuActivity set;
    set.kind = GpuActivityKind::kMemset;
    set.bytes = 4096;
    set.start_ns = 5;
    set.end_ns = 6;
    Event e = gpu_activity_event(set, {}, "", {});
    EXPECT_EQ(e.text, "memset");
    EXPECT_EQ(e.value, 4096);
}

TEST(GpuEvents, ARecordThatEndsBeforeItStartsLastsNothing) {
    Event e = gpu_activity_event(kernel(2000, 1000), {1, 0, 0}, "qkv", {});
    EXPECT_EQ(e.t_ns, 2000);
    EXPECT_EQ(e.wide, 0);
}

TEST(GpuEvents, LanesNeverMeetTheHostsAndSaturate) {
    EXPECT_EQ(gpu_lane(0), 1);
    EXPECT_EQ(gpu_lane(13), 14);
    EXPECT_EQ(gpu_lane(0x7ffffffe), std::numeric_limits<int32_t>::max());
    EXPECT_EQ(gpu_lane(0xffffffff), std::numeric_limits<int32_t>::max());
    EXPECT_NE(gpu_lane(0), kHostLane);
}

TEST(GpuEvents, KernelNamesAreShownDemangledWithoutParametersOrReturnType) {
    EXPECT_EQ(kernel_display_name("_ZN7kvscope7kernels22paged_attention_kernelIfLi8EEEvPKfPf"),
              "kvscope::kernels::paged_attention_kernel<float, 8>");
    EXPECT_EQ(kernel_display_name("_Z3fooPf"), "foo");
    EXPECT_EQ(kernel_display_name("_ZN12_GLOBAL__N_13barEv"), "(anonymous namespace)::bar");
    // extern "C" kernels and names CUPTI could not give stay as they are.
    EXPECT_EQ(kernel_display_name("kvscope_global_timer_probe"), "kvscope_global_timer_probe");
    EXPECT_EQ(kernel_display_name("unknown kernel"), "unknown kernel");
    EXPECT_EQ(kernel_display_name(""), "");
}

TEST(GpuEvents, OpAndKernelSplitAtTheFirstBarAfterAnOpName) {
    EXPECT_EQ(gpu_kernel_text("attention", "k<a|b>"), "attention|k<a|b>");
    GpuKernelText t = split_gpu_kernel_text("attention|k<a|b>");
    EXPECT_EQ(t.op, "attention");
    EXPECT_EQ(t.kernel, "k<a|b>");
    // No valid op before the bar: it is all the kernel's name.
    for (const char* whole : {"ns::f<a|b>", "two words|x", "plain"}) {
        t = split_gpu_kernel_text(whole);
        EXPECT_EQ(t.op, "") << whole;
        EXPECT_EQ(t.kernel, whole);
        EXPECT_EQ(gpu_kernel_text("", whole), whole);
    }
    // Every name round-trips, with an op or without one, even those that look like both.
    for (const char* kernel : {"operator|", "x|y", "|x", "||", "", "k"}) {
        for (const char* op : {"", "qkv"}) {
            const std::string text = gpu_kernel_text(op, kernel);  // the split views it
            t = split_gpu_kernel_text(text);
            EXPECT_EQ(t.op, op) << op << " " << kernel;
            EXPECT_EQ(t.kernel, kernel) << op << " " << kernel;
        }
    }
    EXPECT_EQ(gpu_kernel_text("", "operator|"), "|operator|");
    EXPECT_EQ(gpu_kernel_text("", "k"), "k");
    EXPECT_EQ(gpu_kernel_text("bad op", "k"), "k") << "an invalid op is left out, not mangled in";
    // Host ops are named the same way and have no bar: they split as a kernel of no op.
    EXPECT_EQ(split_gpu_kernel_text("qkv").kernel, "qkv");
}

TEST(GpuEvents, ClockOffsetComesFromTheTightestBracket) {
    ClockOffset none = estimate_clock_offset({});
    EXPECT_FALSE(none.measured());
    // Device reads 1'000'000 ahead of the host midpoint; the widest bracket says otherwise.
    std::vector<ClockReading> r = {
        {1000, 9000, 1'006'000},      // width 8000: midpoint 5000 -> offset -1'001'000
        {20'000, 20'100, 1'020'050},  // width 100: midpoint 20'050 -> offset -1'000'000
        {30'000, 29'000, 5},          // host clock went backwards: ignored
        {40'000, 40'400, 1'040'100},  // width 400
    };
    ClockOffset c = estimate_clock_offset(r);
    ASSERT_TRUE(c.measured());
    EXPECT_EQ(c.offset_ns, -1'000'000);
    EXPECT_EQ(c.uncertainty_ns, 50);
    EXPECT_EQ(c.to_host(1'020'050), 20'050);
    // CUPTI's clock is the wall clock (ns since 1970), the host's counts from boot: a large
    // negative offset, which must not overflow.
    const uint64_t wall = 1'760'000'000'000'000'000ull;
    ClockOffset w = estimate_clock_offset({{5'000'000'000, 5'000'000'010, wall}});
    EXPECT_EQ(w.to_host(wall + 123), 5'000'000'005 + 123);
}

TEST(GpuEvents, APmSampleBecomesAnHbmSampleWithItsSplit) {
    const ClockOffset clock{500, 10};
    Event e = hbm_sample_event({1000, 101'000, 2.5e8, 1.25e8}, clock);
    EXPECT_EQ(e.kind, EventKind::kHbmSample);
    EXPECT_EQ(e.t_ns, 1500);
    EXPECT_EQ(e.wide, 101'500);
    EXPECT_EQ(e.value, 3.75e8);
    HbmBytes b;
    ASSERT_TRUE(decode_hbm_bytes(e.payload, b));
    EXPECT_EQ(b.read, 250'000'000);
    EXPECT_EQ(b.written, 125'000'000);
    EXPECT_TRUE(e.text.empty()) << "no string per sample: a session interns every text";
}

TEST(GpuEvents, ASampleOfNoLengthOrNoSenseStaysHarmless) {
    // Zero length: kept (its bytes still count), ending where it starts.
    Event zero = hbm_sample_event({5000, 5000, 64, 0}, {});
    EXPECT_EQ(zero.wide, zero.t_ns);
    EXPECT_EQ(zero.value, 64);
    // An end before its start reads as no length, never a negative one.
    Event back = hbm_sample_event({5000, 4000, 64, 64}, {});
    EXPECT_EQ(back.wide, back.t_ns);
    // Counters that evaluate to nonsense read as no bytes; fractions round to whole bytes.
    Event junk = hbm_sample_event({1, 2, std::nan(""), -5.0}, {});
    HbmBytes b;
    ASSERT_TRUE(decode_hbm_bytes(junk.payload, b));
    EXPECT_EQ(b.read, 0);
    EXPECT_EQ(b.written, 0);
    EXPECT_EQ(junk.value, 0);
    ASSERT_TRUE(decode_hbm_bytes(hbm_sample_event({1, 2, 31.6, 0.4}, {}).payload, b));
    EXPECT_EQ(b.read, 32);
    EXPECT_EQ(b.written, 0);
}

TEST(GpuEvents, HbmBytesWithinAWindowCountTheShareOfEachSampleInside) {
    std::vector<Event> events = {
        hbm_sample_event({0, 100, 1000, 100}, {}),     // half inside [50, 250)
        hbm_sample_event({100, 200, 400, 0}, {}),      // wholly inside
        hbm_sample_event({200, 400, 800, 800}, {}),    // a quarter inside
        hbm_sample_event({300, 300, 9999, 9999}, {}),  // no length, outside
        hbm_sample_event({60, 60, 7, 3}, {}),          // no length, inside: whole
    };
    Event kernel;
    kernel.kind = EventKind::kKernel;
    kernel.t_ns = 60;
    kernel.wide = 70;
    events.push_back(kernel);  // not a sample: skipped
    Event damaged = events[1];
    damaged.payload = {0xff};
    events.push_back(damaged);  // undecodable: skipped
    const HbmBytes in = hbm_bytes_within(events, 50, 250);
    EXPECT_EQ(in.read, 500 + 400 + 200 + 7);
    EXPECT_EQ(in.written, 50 + 0 + 200 + 3);
    const HbmBytes all = hbm_bytes_within(events);
    EXPECT_EQ(all.read, 1000 + 400 + 800 + 9999 + 7);
    EXPECT_EQ(all.written, 100 + 800 + 9999 + 3);
}

TEST(GpuEvents, HbmBytesRefuseDamagedPayloads) {
    std::vector<uint8_t> p;
    encode_hbm_bytes({int64_t{3} << 40, 17}, p);
    HbmBytes b;
    ASSERT_TRUE(decode_hbm_bytes(p, b));
    EXPECT_EQ(b.read, int64_t{3} << 40);
    EXPECT_EQ(b.written, 17);
    for (size_t n = 0; n < p.size(); ++n) {
        std::vector<uint8_t> cut(p.begin(), p.begin() + static_cast<std::ptrdiff_t>(n));
        HbmBytes untouched{1, 2};
        EXPECT_FALSE(decode_hbm_bytes(cut, untouched)) << n << " bytes";
        EXPECT_EQ(untouched.read, 1) << "a failed decode leaves its output alone";
    }
    std::vector<uint8_t> huge(10, 0xff);
    huge.push_back(0x01);
    huge.push_back(0x00);
    EXPECT_FALSE(decode_hbm_bytes(huge, b));
    // A later vocabulary may append.
    p.push_back(0x05);
    EXPECT_TRUE(decode_hbm_bytes(p, b));
}

}  // namespace
}  // namespace kvscope
