// A GPU's kernels and DRAM samples through a session (tests/gpu_run.h makes it), read back,
// checked, and exported to Perfetto (parsed back here).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "engine/reporter.h"
#include "gpu_run.h"
#include "probes/gpu_correlator.h"
#include "sessions/export.h"
#include "sessions/recorder.h"
#include "sessions/session_check.h"
#include "sessions/session_reader.h"
#include "sessions/step_ops.h"
#include "test_support.h"

namespace kvscope {
namespace {

using test::GpuRun;
using test::record_gpu_run;

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

// What `inspect --step N --json` says of a step with a GPU's work: every op with its lane, the
// roofline of the host's ops only (a GPU's kernels carry no modelled bytes), and the DRAM
// samples with their split and bandwidth.
TEST(GpuEventsInSessions, InspectListsLanesAndSamplesAndKeepsTheRooflineToTheHost) {
    const GpuRun run = record_gpu_run();
    auto reader = SessionReader::open(run.path);
    ASSERT_TRUE(reader.ok()) << reader.error().message;
    auto events = (*reader)->events(1, 1);
    ASSERT_TRUE(events.ok());
    const nlohmann::json j = step_ops_json(*events, (*reader)->info());
    std::set<int64_t> lanes;
    for (const auto& op : j["ops"])
        lanes.insert(op["lane"].get<int64_t>());
    EXPECT_EQ(j["ops"].size(), 4u);
    EXPECT_EQ(lanes, (std::set<int64_t>{0, 8, 14}));
    ASSERT_EQ(j["roofline"].size(), 1u);
    EXPECT_EQ(j["roofline"][0]["name"], "qkv");
    EXPECT_EQ(j["roofline"][0]["count"], 1);
    const auto& samples = j["hbm_samples"];
    ASSERT_EQ(samples.size(), 4u);
    EXPECT_EQ(samples[0]["read_bytes"], 3000);
    EXPECT_EQ(samples[0]["written_bytes"], 1000);
    EXPECT_DOUBLE_EQ(samples[0]["gbps"].get<double>(), 4.0);
    EXPECT_DOUBLE_EQ(samples[2]["gbps"].get<double>(), 0.0) << "a sample of no length";
}

}  // namespace
}  // namespace kvscope
