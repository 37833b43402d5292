// The committed GPU recording (assets/sessions/gpu-decode.kvs, made on an H200 by `.ci/gpu-check
// run`): it replays on any machine, and holds what the Kernels panel draws from a GPU: kernels on
// stream lanes, attributed to their steps, ops and layers, and sampled DRAM bandwidth.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "sessions/session_check.h"
#include "sessions/session_reader.h"
#include "test_support.h"

namespace kvscope {
namespace {

std::optional<std::string> gpu_recording() {
    return test::source_file("assets/sessions/gpu-decode.kvs");
}

TEST(GpuRecording, IsSoundAndSmallEnoughToCarry) {
    auto path = gpu_recording();
    ASSERT_TRUE(path) << "assets/sessions/gpu-decode.kvs is missing";
    const CheckReport check = check_session(*path);
    EXPECT_TRUE(check.problems.empty()) << check.problems.front();
    // What comes back from a lent machine is at most 16 MiB a file.
    EXPECT_LT(std::filesystem::file_size(*path), 16u << 20);
    auto reader = SessionReader::open(*path);
    ASSERT_TRUE(reader.ok()) << reader.error().message;
    EXPECT_EQ((*reader)->info().backend, "cuda");
    EXPECT_EQ((*reader)->info().model, "synthetic:llama-3.2-1b:bf16");
    EXPECT_GT((*reader)->last_step(), 50);
}

TEST(GpuRecording, KernelsAreOnStreamLanesWithTheirOpsAndLayersAndDramIsSampled) {
    auto path = gpu_recording();
    ASSERT_TRUE(path);
    auto reader = SessionReader::open(*path);
    ASSERT_TRUE(reader.ok()) << reader.error().message;
    const int n_layers = (*reader)->info().n_layers;
    auto events = (*reader)->events((*reader)->first_step(), (*reader)->last_step(),
                                    {EventKind::kKernel, EventKind::kHbmSample});
    ASSERT_TRUE(events.ok()) << events.error().message;
    std::set<int64_t> steps_with_gpu;
    std::map<std::string, int> by_op;
    std::set<int32_t> lanes;
    int64_t read = 0, written = 0, samples = 0, unattributed = 0;
    for (const Event& e : *events) {
        if (e.kind == EventKind::kHbmSample) {
            HbmBytes b;
            ASSERT_TRUE(decode_hbm_bytes(e.payload, b));
            read += b.read;
            written += b.written;
            ++samples;
            EXPECT_GE(e.wide, e.t_ns);
            continue;
        }
        if (e.c == 0) continue;  // the host's own ops (schedule, sample)
        lanes.insert(e.c);
        steps_with_gpu.insert(e.step);
        const GpuKernelText t = split_gpu_kernel_text(e.text);
        if (t.op.empty()) {
            ++unattributed;
            continue;
        }
        ++by_op[std::string(t.op)];
        EXPECT_GE(e.wide, 0) << e.text;
        if (t.op == "qkv" || t.op == "attention" || t.op == "ffn_down") {
            EXPECT_GE(e.a, 0) << e.text;
            EXPECT_LT(e.a, n_layers) << e.text;
        }
    }
    EXPECT_EQ(unattributed, 0) << "every kernel and copy the backend launched has its op";
    for (const char* op : {"upload", "embed", "attn_norm", "qkv", "rope", "kv_write", "attention",
                           "attn_out", "ffn_gate_up", "swiglu", "ffn_down", "lm_head"})
        EXPECT_GT(by_op[op], 0) << op;
    // Every layer's attention in every step that ran the model.
    EXPECT_GE(by_op["attention"], n_layers * static_cast<int>(steps_with_gpu.size()) / 2);
    EXPECT_GT(steps_with_gpu.size(), 50u);
    EXPECT_FALSE(lanes.empty());
    // Uploading 2.5 GB of weights alone reads and writes gigabytes.
    EXPECT_GT(samples, 100);
    EXPECT_GT(read, int64_t{1} << 30);
    EXPECT_GT(written, int64_t{1} << 30);
}

TEST(GpuRecording, InspectShowsAStepsGpuWork) {
    auto path = gpu_recording();
    ASSERT_TRUE(path);
    auto r = test::run_kvscope({"inspect", *path, "--step", "40", "--json"}, 120);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["step"], 40);
    const std::string text = j.dump();
    EXPECT_NE(text.find("attention"), std::string::npos);
}

}  // namespace
}  // namespace kvscope
