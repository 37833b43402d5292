// The GPU probe for real: CUPTI's trace of kernels, copies and graph launches attributed to the
// scope that launched them, and PM samples of the DRAM bytes they moved. Tests that need a GPU
// skip without one, saying why; the rest check what the probes say and do when they cannot run.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <thread>

#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/tokenizer.h"
#include "engine_cuda/cuda_forward.h"
#include "kernels/cuda_test_util.h"
#include "kernels/device_info.h"
#include "kernels/elementwise.h"
#include "probes/cupti_errors.h"
#include "probes/gpu_probes.h"
#include "probes/gpu_probes_module.h"
#include "test_support.h"

namespace kvscope {
namespace {

using test::DeviceBuffer;

GpuProbeOptions trace_only() {
    GpuProbeOptions o;
    o.sampling = false;
    return o;
}

// Starts the probes or skips the test, saying which part could not start.
#define KVSCOPE_START_GPU_PROBES(var, options, need_sampling)                     \
    GpuProbeStart var = start_gpu_probes(options);                                \
    do {                                                                          \
        std::string notes_;                                                       \
        for (const std::string& n : var.notes)                                    \
            notes_ += (notes_.empty() ? "" : "; ") + n;                           \
        if (!var.probes) GTEST_SKIP() << notes_;                                  \
        if ((options).activity && !var.probes->tracing()) GTEST_SKIP() << notes_; \
        if ((need_sampling) && !var.probes->sampling()) GTEST_SKIP() << notes_;   \
    } while (0)

std::vector<Event> only(const std::vector<Event>& events, EventKind kind) {
    std::vector<Event> out;
    for (const Event& e : events)
        if (e.kind == kind) out.push_back(e);
    return out;
}

TEST(GpuProbesStart, WithoutADeviceSayWhyOnceAndStayOff) {
    std::string why;
    const bool device = test::cuda_device_available(&why);
    GpuProbeStart started = start_gpu_probes();
    if (!device) {
        ASSERT_EQ(started.notes.size(), 1u);
        const std::string& note = started.notes[0];
        EXPECT_EQ(note.rfind("GPU probes off: no CUDA device: ", 0), 0u) << note;
        EXPECT_NE(note.find(why), std::string::npos) << note << " vs " << why;
        EXPECT_EQ(note.find('\n'), std::string::npos) << "one line";
        EXPECT_EQ(started.probes, nullptr) << "nothing to collect, so nothing is emitted";
        // Asking again says the same (the caller says it once; nothing is kept half started).
        EXPECT_EQ(start_gpu_probes().notes, started.notes);
        std::printf("[ note     ] %s\n", note.c_str());
        return;
    }
    // A GPU: the trace needs no special rights, so something starts; sampling may be refused.
    ASSERT_NE(started.probes, nullptr);
    for (const std::string& n : started.notes) {
        EXPECT_EQ(n.find("no CUDA device"), std::string::npos) << n;
        std::printf("[ note     ] %s\n", n.c_str());
    }
    std::vector<Event> out;
    started.probes->stop(out);
}

TEST(GpuProbesStart, NothingAskedForStartsNothing) {
    GpuProbeOptions none;
    none.activity = false;
    none.sampling = false;
    GpuProbeStart started = start_gpu_probes(none);
    EXPECT_EQ(started.probes, nullptr);
    EXPECT_TRUE(started.notes.empty());
}

TEST(CuptiErrors, FailuresSayWhatToDoInOneLine) {
    // Codes are CUptiResult values; the line names each as CUPTI does, which checks them.
    const std::string privileges = cupti_failure("cuptiPmSamplingEnable", 35);
    EXPECT_EQ(privileges.rfind("cuptiPmSamplingEnable: CUPTI_ERROR_INSUFFICIENT_PRIVILEGES (", 0),
              0u)
        << privileges;
    EXPECT_NE(privileges.find("NVreg_RestrictProfilingToAdminUsers=0"), std::string::npos);
    const std::string unsupported = cupti_failure("cuptiPmSamplingSetConfig", 27);
    EXPECT_NE(unsupported.find("CUPTI_ERROR_NOT_SUPPORTED"), std::string::npos) << unsupported;
    EXPECT_NE(unsupported.find("does not support"), std::string::npos) << unsupported;
    EXPECT_TRUE(cupti_unsupported(27));
    EXPECT_TRUE(cupti_unsupported(43)) << "MIG";
    EXPECT_FALSE(cupti_unsupported(35));
    const std::string driver = cupti_failure("cuptiActivityEnable", 14);
    EXPECT_NE(driver.find("CUPTI_ERROR_NOT_COMPATIBLE"), std::string::npos) << driver;
    EXPECT_NE(driver.find("driver"), std::string::npos) << driver;
    const std::string other = cupti_failure("cuptiActivityFlushAll", 999);
    EXPECT_EQ(other.find('('), std::string::npos) << "no advice where there is none: " << other;
    for (const std::string& line : {privileges, unsupported, driver, other})
        EXPECT_EQ(line.find('\n'), std::string::npos) << line;
}

TEST(GpuProbes, AKernelIsAttributedToTheScopeThatLaunchedIt) {
    KVSCOPE_REQUIRE_CUDA_DEVICE();
    KVSCOPE_START_GPU_PROBES(started, trace_only(), false);
    GpuProbes& gpu = *started.probes;
    const int32_t op = gpu.op("swiglu");
    const int64_t n = int64_t{1} << 24;
    DeviceBuffer<float> gate(static_cast<size_t>(n)), up(static_cast<size_t>(n)),
        out(static_cast<size_t>(n));
    const int64_t before = host_now_ns();
    {
        GpuOpScope scope(gpu.correlation(), 42, op, 3);
        KVSCOPE_CUDA_OK(kernels::swiglu(out.get(), gate.get(), up.get(), n, nullptr));
    }
    KVSCOPE_CUDA_OK(kernels::swiglu(out.get(), gate.get(), up.get(), n, nullptr));  // no scope
    KVSCOPE_CUDA_OK(cudaDeviceSynchronize());
    const int64_t after = host_now_ns();
    std::vector<Event> events;
    gpu.collect(42, events);
    auto kernels = only(events, EventKind::kKernel);
    ASSERT_EQ(kernels.size(), 2u) << "the trace has both launches and nothing else";
    const Event& k = kernels[0];
    EXPECT_EQ(split_gpu_kernel_text(k.text).op, "swiglu") << k.text;
    // swiglu4_kernel where n is a multiple of 4 (float4 loads), swiglu_kernel otherwise.
    EXPECT_NE(k.text.find("swiglu"), std::string::npos) << k.text;
    EXPECT_EQ(k.step, 42);
    EXPECT_EQ(k.a, 3);
    EXPECT_GT(k.b, 0);
    EXPECT_GE(k.c, 1);
    // Plausible: it lasted something, less than the whole bracket, inside the bracket on the host
    // clock (a millisecond of slack for the clock mapping).
    EXPECT_GT(k.wide, 0);
    EXPECT_LT(k.wide, after - before);
    EXPECT_GE(k.t_ns, before - 1'000'000);
    EXPECT_LE(k.t_ns + k.wide, after + 1'000'000);
    EXPECT_EQ(kernels[1].step, -1) << "launched outside every scope";
    EXPECT_EQ(split_gpu_kernel_text(kernels[1].text).op, "");
    EXPECT_EQ(gpu.counts().unattributed, 1u);
    std::printf("[ kernel   ] %s: %.1f us, %d threads, lane %d\n", k.text.c_str(),
                static_cast<double>(k.wide) / 1e3, k.b, k.c);
}

TEST(GpuProbes, CopiesAndSetsAreNamedAndCarryTheirBytes) {
    KVSCOPE_REQUIRE_CUDA_DEVICE();
    KVSCOPE_START_GPU_PROBES(started, trace_only(), false);
    GpuProbes& gpu = *started.probes;
    const int32_t op = gpu.op("swap");
    const size_t n = size_t{1} << 20;
    DeviceBuffer<float> a(n), b(n);
    float* host = nullptr;
    KVSCOPE_CUDA_OK(cudaMallocHost(reinterpret_cast<void**>(&host), n * sizeof(float)));
    {
        GpuOpScope scope(gpu.correlation(), 7, op);
        KVSCOPE_CUDA_OK(cudaMemcpyAsync(a.get(), host, n * 4, cudaMemcpyHostToDevice, nullptr));
        KVSCOPE_CUDA_OK(
            cudaMemcpyAsync(b.get(), a.get(), n * 4, cudaMemcpyDeviceToDevice, nullptr));
        KVSCOPE_CUDA_OK(cudaMemcpyAsync(host, b.get(), n * 4, cudaMemcpyDeviceToHost, nullptr));
        KVSCOPE_CUDA_OK(cudaMemsetAsync(a.get(), 0, n * 4, nullptr));
    }
    KVSCOPE_CUDA_OK(cudaDeviceSynchronize());
    std::vector<Event> events;
    gpu.collect(7, events);
    cudaFreeHost(host);
    std::vector<std::string> names;
    for (const Event& e : only(events, EventKind::kKernel)) {
        names.push_back(e.text);
        EXPECT_EQ(e.step, 7) << e.text;
        EXPECT_EQ(e.value, static_cast<double>(n * 4)) << e.text;
    }
    for (const char* want :
         {"swap|memcpy HtoD", "swap|memcpy DtoD", "swap|memcpy DtoH", "swap|memset"})
        EXPECT_NE(std::find(names.begin(), names.end(), want), names.end()) << want;
}

TEST(GpuProbes, AGraphsKernelsBelongToTheStepThatLaunchedIt) {
    KVSCOPE_REQUIRE_CUDA_DEVICE();
    KVSCOPE_START_GPU_PROBES(started, trace_only(), false);
    GpuProbes& gpu = *started.probes;
    const int32_t capture = gpu.op("capture"), decode = gpu.op("decode_graph");
    const int64_t n = 1 << 20;
    DeviceBuffer<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
    cudaStream_t stream = nullptr;
    KVSCOPE_CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    {
        // Captured under step 1's scope: capture runs nothing, so step 1 gets no kernels.
        GpuOpScope scope(gpu.correlation(), 1, capture);
        KVSCOPE_CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        for (int i = 0; i < 3; ++i)
            KVSCOPE_CUDA_OK(kernels::swiglu(y.get(), x.get(), x.get(), n, stream));
        KVSCOPE_CUDA_OK(cudaStreamEndCapture(stream, &graph));
        KVSCOPE_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    }
    std::vector<Event> events;
    gpu.collect(1, events);
    EXPECT_TRUE(only(events, EventKind::kKernel).empty());
    for (int64_t step : {8, 9}) {
        {
            GpuOpScope scope(gpu.correlation(), step, decode);
            KVSCOPE_CUDA_OK(cudaGraphLaunch(exec, stream));
        }
        KVSCOPE_CUDA_OK(cudaStreamSynchronize(stream));
        events.clear();
        gpu.collect(step, events);
        auto kernels = only(events, EventKind::kKernel);
        EXPECT_EQ(kernels.size(), 3u) << "step " << step;
        for (const Event& e : kernels) {
            EXPECT_EQ(e.step, step) << e.text;
            EXPECT_EQ(split_gpu_kernel_text(e.text).op, "decode_graph") << e.text;
        }
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
}

TEST(GpuProbes, TracingIsOneAtATimeAndStartsAgainAfterAStop) {
    KVSCOPE_REQUIRE_CUDA_DEVICE();
    {
        KVSCOPE_START_GPU_PROBES(first, trace_only(), false);
        GpuProbeStart second = start_gpu_probes(trace_only());
        EXPECT_EQ(second.probes, nullptr);
        ASSERT_EQ(second.notes.size(), 1u);
        EXPECT_NE(second.notes[0].find("already running"), std::string::npos) << second.notes[0];
    }
    KVSCOPE_START_GPU_PROBES(again, trace_only(), false);
    DeviceBuffer<float> x(1024);
    {
        GpuOpScope scope(again.probes->correlation(), 0, again.probes->op("again"));
        KVSCOPE_CUDA_OK(kernels::swiglu(x.get(), x.get(), x.get(), 1024, nullptr));
    }
    KVSCOPE_CUDA_OK(cudaDeviceSynchronize());
    std::vector<Event> events;
    again.probes->stop(events);
    auto kernels = only(events, EventKind::kKernel);
    ASSERT_EQ(kernels.size(), 1u);
    EXPECT_EQ(split_gpu_kernel_text(kernels[0].text).op, "again");
}

// Bytes read and written over a set of samples, each counted for the part of it inside
// [from, to) (all of it when the window is empty).
TEST(GpuProbes, SamplesCountTheBytesOfALargeCopyWhileItRuns) {
    KVSCOPE_REQUIRE_CUDA_DEVICE();
    GpuProbeOptions options;
    KVSCOPE_START_GPU_PROBES(started, options, true);
    GpuProbes& gpu = *started.probes;
    const size_t bytes = size_t{1} << 30;
    DeviceBuffer<uint8_t> a(bytes), b(bytes);
    KVSCOPE_CUDA_OK(cudaMemset(a.get(), 1, bytes));
    KVSCOPE_CUDA_OK(cudaDeviceSynchronize());
    // The memset's samples drained and taken with step 0, apart from the copies'.
    std::this_thread::sleep_for(std::chrono::milliseconds(5 * options.drain_interval_ms));
    std::vector<Event> before;
    gpu.collect(0, before);
    constexpr int kCopies = 20;
    const int32_t op = gpu.op("copy");
    {
        GpuOpScope scope(gpu.correlation(), 1, op);
        for (int i = 0; i < kCopies; ++i)
            KVSCOPE_CUDA_OK(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice));
    }
    KVSCOPE_CUDA_OK(cudaDeviceSynchronize());
    // The drain thread reads the buffer while the run goes on: samples come before any stop.
    std::this_thread::sleep_for(std::chrono::milliseconds(5 * options.drain_interval_ms));
    std::vector<Event> events;
    gpu.collect(1, events);
    EXPECT_FALSE(only(events, EventKind::kHbmSample).empty()) << "nothing drained while running";
    std::vector<Event> rest;
    gpu.stop(rest);
    events.insert(events.end(), rest.begin(), rest.end());
    const auto samples = only(events, EventKind::kHbmSample);
    const HbmBytes got = hbm_bytes_within(samples);
    const double want = static_cast<double>(bytes) * kCopies;
    std::printf("[ sampled  ] %zu samples: %.3f GB read, %.3f GB written; copied %.3f GB\n",
                samples.size(), static_cast<double>(got.read) / 1e9,
                static_cast<double>(got.written) / 1e9, want / 1e9);
    EXPECT_NEAR(static_cast<double>(got.read), want, 0.1 * want);
    EXPECT_NEAR(static_cast<double>(got.written), want, 0.1 * want);
    for (const std::string& p : gpu.problems())
        ADD_FAILURE() << p;
}

TEST(GpuProbes, SampledBandwidthOfAKernelMatchesItsBytesOverItsTracedTime) {
    KVSCOPE_REQUIRE_CUDA_DEVICE();
    GpuProbeOptions options;
    KVSCOPE_START_GPU_PROBES(started, options, true);
    GpuProbes& gpu = *started.probes;
    // Far past the L2: every byte goes to DRAM. swiglu reads gate and up, writes out.
    const int64_t n = int64_t{1} << 28;
    DeviceBuffer<float> gate(static_cast<size_t>(n)), up(static_cast<size_t>(n)),
        out(static_cast<size_t>(n));
    KVSCOPE_CUDA_OK(cudaDeviceSynchronize());
    std::vector<Event> events;
    gpu.collect(0, events);
    events.clear();
    constexpr int kLaunches = 40;
    const int32_t op = gpu.op("swiglu");
    for (int i = 0; i < kLaunches; ++i) {
        GpuOpScope scope(gpu.correlation(), 1, op, i);
        KVSCOPE_CUDA_OK(kernels::swiglu(out.get(), gate.get(), up.get(), n, nullptr));
    }
    KVSCOPE_CUDA_OK(cudaDeviceSynchronize());
    std::this_thread::sleep_for(std::chrono::milliseconds(5 * options.drain_interval_ms));
    gpu.collect(1, events);
    std::vector<Event> rest;
    gpu.stop(rest);
    events.insert(events.end(), rest.begin(), rest.end());
    auto kernels = only(events, EventKind::kKernel);
    auto samples = only(events, EventKind::kHbmSample);
    ASSERT_EQ(kernels.size(), static_cast<size_t>(kLaunches));
    int64_t from = kernels.front().t_ns, to = 0, busy = 0;
    for (const Event& k : kernels) {
        from = std::min(from, k.t_ns);
        to = std::max(to, k.t_ns + k.wide);
        busy += k.wide;
    }
    // The kernels' own figure: their bytes over their traced time.
    const double bytes = 12.0 * static_cast<double>(n) * kLaunches;
    const double traced_gbps = bytes / static_cast<double>(busy);
    // The samples' figure: what they counted inside the kernels' span over that span.
    const HbmBytes in = hbm_bytes_within(samples, from, to);
    const double sampled_gbps =
        static_cast<double>(in.read + in.written) / static_cast<double>(to - from);
    std::printf(
        "[ bandwidth] traced %.1f GB/s over %.2f ms busy (%.2f ms span); sampled %.1f "
        "GB/s (%.3f GB read, %.3f GB written)\n",
        traced_gbps, static_cast<double>(busy) / 1e6, static_cast<double>(to - from) / 1e6,
        sampled_gbps, static_cast<double>(in.read) / 1e9, static_cast<double>(in.written) / 1e9);
    EXPECT_NEAR(sampled_gbps, traced_gbps, 0.1 * traced_gbps)
        << "the two clocks or the two measures disagree";
    EXPECT_NEAR(static_cast<double>(in.read), 8.0 * static_cast<double>(n) * kLaunches,
                0.1 * 8.0 * static_cast<double>(n) * kLaunches);
}

// The CUDA engine backend with the probes: every step's kernels come with it, each attributed to
// the op and layer that launched it (the backend enters an op before its launches), and the
// host lane stays empty (the backend enqueues; the GPU's record is the timeline).
TEST(GpuProbes, TheCudaBackendsKernelsComeWithTheirStepsOpsAndLayers) {
    KVSCOPE_REQUIRE_CUDA_DEVICE();
    KVSCOPE_START_GPU_PROBES(started, trace_only(), false);
    const char* relative = "assets/models/kvscope-demo.gguf";  // .ci/gpu-check runs from there
    auto model = load_model(std::filesystem::exists(relative) ? relative : test::bundled_model());
    ASSERT_TRUE(model.ok()) << model.error().message;
    auto loaded = std::make_shared<const LoadedModel>(std::move(model).value());
    EngineOptions eo;
    eo.backend = cuda_backend({.probes = started.probes.get()});
    auto engine = Engine::create(loaded, eo);
    ASSERT_TRUE(engine.ok()) << engine.error().message;
    struct Collector : Probe {
        std::vector<Event> events;
        void emit(Event&& e) override { events.push_back(std::move(e)); }
    } probe;
    (*engine)->reporter().probe = &probe;
    GenerateRequest req;
    req.prompt = loaded->tokenizer->encode("In the beginning", true);
    req.max_tokens = 6;
    auto stats = generate(**engine, req, [](int32_t) {});
    ASSERT_TRUE(stats.ok()) << stats.error().message;
    std::set<int64_t> steps;
    std::set<std::string> ops;
    std::map<int64_t, std::set<std::string>> step_ops;
    int host = 0, unattributed = 0;
    for (const Event& e : only(probe.events, EventKind::kKernel)) {
        if (e.c == 0) {
            ++host;
            continue;
        }
        steps.insert(e.step);
        const GpuKernelText t = split_gpu_kernel_text(e.text);
        if (t.op.empty()) {
            ++unattributed;
            continue;
        }
        ops.insert(std::string(t.op));
        step_ops[e.step].insert(std::string(t.op));
        if (t.op == "qkv" || t.op == "attention") {
            EXPECT_GE(e.a, 0) << e.text;
            EXPECT_LT(e.a, loaded->config.n_layers) << e.text;
        }
    }
    EXPECT_EQ(unattributed, 0);
    EXPECT_GE(steps.size(), 6u) << "a prefill and decode steps, each with its kernels";
    for (const char* op : {"upload", "embed", "attn_norm", "qkv", "rope", "kv_write", "attention",
                           "attn_out", "ffn_gate_up", "swiglu", "ffn_down", "lm_head"})
        EXPECT_TRUE(ops.count(op)) << op;
    // Only the scheduler's own host ops (schedule, sample): the layers are the GPU's.
    for (const Event& e : only(probe.events, EventKind::kKernel))
        if (e.c == 0) {
            EXPECT_TRUE(e.text == "schedule" || e.text == "sample") << e.text;
        }
    EXPECT_GT(host, 0);
    // The decode steps were replayed from CUDA graphs, and their kernels still name the op and
    // layer each came from (none is left to the replay's own op).
    EXPECT_GE((*engine)->forward().replayed_steps(), 4);
    EXPECT_FALSE(ops.count("decode_graph"));
    ASSERT_FALSE(step_ops.empty());
    for (const auto& [step, names] : step_ops)
        for (const char* op : {"attn_norm", "qkv", "rope", "kv_write", "attention", "ffn_down"})
            EXPECT_TRUE(names.count(op)) << "step " << step << ": " << op;
}

// The module kvscope loads (libkvscope_gpu_probes.so, beside the kvscope executable): from this
// build it starts the probes where a GPU is, and says why not, once, where none is.
std::string module_dir() {
    // <build>/tests/test_probes_gpu -> <build>: where the module is built, and where
    // .ci/gpu-check's copy of the build folder has it on the GPU machine.
    return std::filesystem::read_symlink("/proc/self/exe").parent_path().parent_path().string();
}

TEST(GpuProbesModule, TheBuildsModuleStartsTheProbesOrSaysWhyNot) {
    const GpuProbeStart s = load_gpu_probes(trace_only(), module_dir());
    std::string notes;
    for (const std::string& n : s.notes)
        notes += n + "; ";
    EXPECT_EQ(notes.find("cannot load"), std::string::npos) << notes;
    EXPECT_EQ(notes.find("another build"), std::string::npos) << notes;
    kernels::DeviceQuery q = kernels::query_devices();
    if (q.devices.empty()) {
        EXPECT_EQ(s.probes, nullptr);
        EXPECT_NE(notes.find("no CUDA device"), std::string::npos) << notes;
    } else {
        ASSERT_NE(s.probes, nullptr) << notes;
        EXPECT_TRUE(s.probes->tracing()) << notes;
    }
}

}  // namespace
}  // namespace kvscope
