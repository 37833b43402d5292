// A GPU's kernels and DRAM samples through a session: put together by the GpuCorrelator from
// hand-built CUPTI-like records, stamped by the engine's Reporter as the CUDA backend will,
// recorded, read back, checked, and exported to Perfetto (parsed back here).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "engine/reporter.h"
#include "probes/gpu_correlator.h"
#include "sessions/export.h"
#include "sessions/recorder.h"
#include "sessions/session_check.h"
#include "sessions/session_reader.h"
#include "test_support.h"

namespace kvscope {
namespace {

struct GpuRun {
    std::string path;
    int64_t base = 0;  // host ns of the first GPU record
    std::vector<PmSample> samples;
};

GpuActivity gpu_kernel(uint32_t correlation, uint64_t start, uint64_t end, uint32_t stream) {
    GpuActivity a;
    a.kind = GpuActivityKind::kKernel;
    a.name = "_ZN7kvscope7kernels13swiglu_kernelIfEEvPfPKfS4_l";
    a.correlation = correlation;
    a.start_ns = start;
    a.end_ns = end;
    a.stream = stream;
    a.threads = 4096;
    return a;
}

// Two steps. Each: step_begin, a host op, the GPU's work (two kernels on stream 7, a copy on
// stream 13, samples), step_end. Step 1's samples end in a gap and include one of no length.
GpuRun record_gpu_run() {
    GpuRun run;
    run.path = test::temp_dir() + "/gpu.kvs";
    RunInfo info;
    info.num_blocks = 8;
    info.block_size = 4;
    info.backend = "cuda";
    auto rec = Recorder::create(run.path, info);
    EXPECT_TRUE(rec.ok()) << (rec.ok() ? "" : rec.error().message);
    if (!rec.ok()) return run;
    Reporter reporter;
    reporter.probe = rec->get();
    GpuOpNames ops;
    GpuCorrelator gpu(&ops);
    const int32_t qkv = ops.id("qkv"), copy = ops.id("swap_in");
    gpu.set_activity_clock({0, 0});  // records on the host clock already: easy to check
    gpu.set_sampling_clock({0, 0});
    run.base = host_now_ns() + 1'000'000;
    for (int64_t step : {0, 1}) {
        reporter.step = step;
        reporter.emit(Event{.kind = EventKind::kStepBegin, .a = 1, .b = 0, .c = 1});
        const auto t = static_cast<uint64_t>(run.base + step * 10'000'000);
        Event host_op{.kind = EventKind::kKernel,
                      .t_ns = static_cast<int64_t>(t),
                      .a = 0,
                      .b = 1,
                      .wide = 5'000'000,
                      .text = "qkv"};
        host_op.cost.weight_bytes = 1000;
        reporter.emit(std::move(host_op));
        const auto id = static_cast<uint32_t>(100 * step);
        gpu.add_links({{id + 1, pack_gpu_scope({step, qkv, 0})},
                       {id + 2, pack_gpu_scope({step, qkv, 1})},
                       {id + 3, pack_gpu_scope({step, copy, -1})}});
        GpuActivity h2d;
        h2d.kind = GpuActivityKind::kMemcpy;
        h2d.copy = GpuCopyKind::kHtoD;
        h2d.bytes = 1 << 20;
        h2d.start_ns = t + 100;
        h2d.end_ns = t + 900;
        h2d.stream = 13;
        h2d.correlation = id + 3;
        gpu.add_activities({gpu_kernel(id + 2, t + 2000, t + 3000, 7),
                            gpu_kernel(id + 1, t + 1000, t + 2000, 7), h2d});
        std::vector<PmSample> samples = {{t + 1000, t + 2000, 3000, 1000},
                                         {t + 2000, t + 3000, 2000, 2000}};
        if (step == 1) {
            samples.push_back({t + 3000, t + 3000, 50, 50});    // no length
            samples.push_back({t + 5000, t + 6000, 500, 500});  // after a gap
        }
        gpu.add_samples(samples);
        run.samples.insert(run.samples.end(), samples.begin(), samples.end());
        std::vector<Event> events;
        gpu.take(step, events);
        reporter.emit_all(events);
        reporter.emit(Event{.kind = EventKind::kStepEnd, .value = 0.01});
    }
    EXPECT_TRUE((*rec)->close().ok());
    return run;
}

TEST(GpuEventsInSessions, KernelsAndSamplesAreRecordedAndReadBack) {
    const GpuRun run = record_gpu_run();
    const CheckReport check = check_session(run.path);
    EXPECT_TRUE(check.problems.empty()) << check.problems.front();
    auto reader = SessionReader::open(run.path);
    ASSERT_TRUE(reader.ok()) << reader.error().message;
    auto events = (*reader)->events(1, 1, {EventKind::kKernel, EventKind::kHbmSample});
    ASSERT_TRUE(events.ok());
    std::map<std::string, Event> kernels;
    std::vector<Event> samples;
    for (const Event& e : *events) {
        if (e.kind == EventKind::kHbmSample)
            samples.push_back(e);
        else
            kernels[e.text + "@" + std::to_string(e.c) + "/" + std::to_string(e.a)] = e;
    }
    ASSERT_EQ(kernels.size(), 4u);
    ASSERT_TRUE(kernels.count("qkv@0/0")) << "the host op";
    const Event& k = kernels.at("qkv|kvscope::kernels::swiglu_kernel<float>@8/1");
    EXPECT_EQ(k.wide, 1000);
    EXPECT_EQ(k.b, 4096);
    EXPECT_EQ(k.t_ns, run.base + 10'000'000 + 2000);
    const Event& c = kernels.at("swap_in|memcpy HtoD@14/-1");
    EXPECT_EQ(c.value, 1 << 20);
    ASSERT_EQ(samples.size(), 4u);
    for (size_t i = 0; i < samples.size(); ++i) {
        HbmBytes b;
        ASSERT_TRUE(decode_hbm_bytes(samples[i].payload, b)) << i;
        const PmSample& want = run.samples[2 + i];
        EXPECT_EQ(b.read, static_cast<int64_t>(want.bytes_read));
        EXPECT_EQ(b.written, static_cast<int64_t>(want.bytes_written));
        EXPECT_EQ(samples[i].t_ns, static_cast<int64_t>(want.start_ns));
    }
    // The step's bytes and op time are the host ops' own: a GPU's kernels overlap the host and
    // their bytes are sampled, not worked out.
    for (const StepSummary& s : (*reader)->steps()) {
        EXPECT_EQ(s.bytes_moved(), 1000) << "step " << s.step;
        EXPECT_EQ(s.ops_ns, 5'000'000) << "step " << s.step;
    }
}

TEST(GpuEventsInSessions, PerfettoShowsTheGpuStreamsAndItsDramBandwidth) {
    const GpuRun run = record_gpu_run();
    auto reader = SessionReader::open(run.path);
    ASSERT_TRUE(reader.ok()) << reader.error().message;
    std::ostringstream out;
    ASSERT_TRUE(export_perfetto(**reader, out).ok());
    const auto trace = nlohmann::json::parse(out.str())["traceEvents"];
    const int64_t t0 = (*reader)->steps().front().t_begin_ns;
    auto ns_of = [&](const nlohmann::json& e) {
        return static_cast<int64_t>(std::llround(e["ts"].get<double>() * 1000.0)) + t0;
    };
    std::map<int, std::string> thread_names;
    std::string process;
    std::vector<nlohmann::json> slices;
    std::map<std::string, std::vector<std::pair<int64_t, double>>> counters;
    for (const auto& e : trace) {
        if (e.value("pid", 0) != 2) continue;
        const std::string ph = e["ph"];
        if (ph == "M" && e["name"] == "process_name") process = e["args"]["name"];
        if (ph == "M" && e["name"] == "thread_name")
            thread_names[e["tid"].get<int>()] = e["args"]["name"];
        if (ph == "X") slices.push_back(e);
        if (ph == "C") {
            const double v = e["args"]["value"].get<double>();
            EXPECT_TRUE(std::isfinite(v)) << e.dump();
            counters[e["name"]].emplace_back(ns_of(e), v);
        }
    }
    EXPECT_EQ(process, "GPU");
    EXPECT_EQ(thread_names, (std::map<int, std::string>{{8, "stream 7"}, {14, "stream 13"}}));
    ASSERT_EQ(slices.size(), 6u) << "three pieces of GPU work per step; the host op stays on pid 1";
    int copies = 0;
    for (const auto& s : slices) {
        if (s["name"] == "memcpy HtoD") {
            ++copies;
            EXPECT_EQ(s["cat"], "swap_in");
            EXPECT_EQ(s["tid"], 14);
            EXPECT_EQ(s["args"]["bytes"].get<double>(), 1 << 20);
            EXPECT_FALSE(s["args"].contains("layer"));
            continue;
        }
        EXPECT_EQ(s["name"], "kvscope::kernels::swiglu_kernel<float>");
        EXPECT_EQ(s["cat"], "qkv");
        EXPECT_EQ(s["args"]["op"], "qkv");
        EXPECT_EQ(s["tid"], 8);
        EXPECT_EQ(s["dur"].get<double>(), 1.0);
        EXPECT_TRUE(s["args"].contains("layer"));
        EXPECT_EQ(s["args"]["threads"], 4096);
    }
    EXPECT_EQ(copies, 2);
    // Total, read and written: a point per sample of some length, at its start, in GB/s (bytes
    // per ns); 0 where a gap follows and after the last. The sample of no length is left out.
    const int64_t t1 = run.base + 10'000'000;
    using Points = std::vector<std::pair<int64_t, double>>;
    const int64_t b = run.base;
    EXPECT_EQ(counters["hbm_bandwidth_GBps"], (Points{{b + 1000, 4.0},
                                                      {b + 2000, 4.0},
                                                      {b + 3000, 0},
                                                      {t1 + 1000, 4.0},
                                                      {t1 + 2000, 4.0},
                                                      {t1 + 3000, 0},
                                                      {t1 + 5000, 1.0},
                                                      {t1 + 6000, 0}}));
    EXPECT_EQ(counters["hbm_read_GBps"], (Points{{b + 1000, 3.0},
                                                 {b + 2000, 2.0},
                                                 {b + 3000, 0},
                                                 {t1 + 1000, 3.0},
                                                 {t1 + 2000, 2.0},
                                                 {t1 + 3000, 0},
                                                 {t1 + 5000, 0.5},
                                                 {t1 + 6000, 0}}));
    EXPECT_EQ(counters["hbm_write_GBps"].size(), 8u);
}

}  // namespace
}  // namespace kvscope
