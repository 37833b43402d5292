// `--backend` on every engine command and `bench gpu`, as a user meets them on a machine with or
// without CUDA: where `cuda` cannot run, one line saying why, exit status 1, before any other
// input is looked at.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "test_support.h"
#ifdef KVSCOPE_HAVE_CUDA
#include "kernels/device_info.h"
#endif

namespace kvscope {
namespace {

test::CommandResult kvscope(std::vector<std::string> args) {
    return test::run_kvscope(std::move(args), 300);
}

// The commands that run the engine, with what each requires besides --backend (files it never
// opens: the backend is refused first).
std::vector<std::vector<std::string>> engine_commands() {
    std::vector<std::vector<std::string>> c = {
        {"generate"},
        {"run", "--workload", "missing.jsonl"},
        {"eval", "--text", "missing.txt"},
        {"perplexity", "--file", "missing.txt"},
        {"bench", "cpu"},
    };
    // Built with the window: without it `gui --help` still exits 0 (bare kvscope's help).
    if (kvscope({"gui", "--help"}).out.find("--screenshot") != std::string::npos)
        c.push_back({"gui", "--screenshot", "never.png"});
    return c;
}

// What `--backend cuda` must say here, and why; empty where it runs.
std::string expected_cuda_refusal() {
#ifndef KVSCOPE_HAVE_CUDA
    return "--backend cuda: this build has no CUDA backend (configure with -DKVSCOPE_CUDA=ON)";
#else
    kernels::DeviceQuery q = kernels::query_devices();
    if (q.devices.empty())
        return "--backend cuda: no usable CUDA device (cudaGetDeviceCount: " + q.error + ")";
    return "";
#endif
}

class BackendCli : public ::testing::Test {
  protected:
    void SetUp() override {
#ifdef KVSCOPE_HAVE_CUDA
        // Under ASan the CUDA driver needs the shadow gap unprotected to map memory (see
        // tests/CMakeLists.txt); the children inherit this. Without ASan it is ignored.
        const char* old = std::getenv("ASAN_OPTIONS");
        std::string opts = std::string(old ? old : "") + ":protect_shadow_gap=0";
        setenv("ASAN_OPTIONS", opts.c_str(), 1);
#endif
    }
};

TEST_F(BackendCli, CudaIsRefusedInOneLineWithStatus1OnEveryEngineCommand) {
    const std::string expected = expected_cuda_refusal();
    if (expected.empty())
        GTEST_SKIP() << "a CUDA device is usable here, so --backend cuda runs (test_engine_cuda)";
    for (std::vector<std::string> args : engine_commands()) {
        std::string what = args[0] + (args.size() > 1 && args[0] == "bench" ? " " + args[1] : "");
        args.push_back("--backend");
        args.push_back("cuda");
        auto r = kvscope(args);
        EXPECT_FALSE(r.signaled) << what << " crashed: " << r.err;
        EXPECT_EQ(r.exit_code, 1) << what << ": " << r.err;
        EXPECT_EQ(r.err.rfind("kvscope: error: " + expected, 0), 0u) << what << ": " << r.err;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << what << ": " << r.err;
        EXPECT_EQ(r.out, "") << what;
    }
}

TEST_F(BackendCli, CudaGeneratesTheCpuTokensWhereADeviceIsUsable) {
    if (!expected_cuda_refusal().empty())
        GTEST_SKIP() << "no CUDA device: " << expected_cuda_refusal();
    auto cpu =
        kvscope({"generate", "--max-tokens", "64", "--print-ids", "--prompt", "And it came"});
    auto cuda = kvscope({"generate", "--max-tokens", "64", "--print-ids", "--prompt", "And it came",
                         "--backend", "cuda"});
    ASSERT_EQ(cpu.exit_code, 0) << cpu.err;
    ASSERT_EQ(cuda.exit_code, 0) << cuda.err;
    EXPECT_EQ(cuda.out, cpu.out);
}

TEST_F(BackendCli, CpuIsTheDefaultAndOtherNamesAreUsageErrors) {
    auto r = kvscope({"generate", "--max-tokens", "2", "--backend", "cpu", "--print-ids"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    auto bad = kvscope({"generate", "--backend", "tpu"});
    EXPECT_EQ(bad.exit_code, 2);
    EXPECT_NE(bad.err.find("--backend"), std::string::npos) << bad.err;
    auto help = kvscope({"run", "--help"});
    EXPECT_NE(help.out.find("--backend"), std::string::npos) << help.out;
}

TEST_F(BackendCli, BenchGpuSaysInOneLineWhyItCannotMeasure) {
#ifdef KVSCOPE_HAVE_CUDA
    if (!kernels::query_devices().devices.empty()) {
        auto r = kvscope({"bench", "gpu", "--size", "64", "--passes", "2", "--json"});
        ASSERT_EQ(r.exit_code, 0) << r.err;
        EXPECT_NE(r.out.find("\"copy_gbps\""), std::string::npos) << r.out;
        return;
    }
    const std::string expected =
        "bench gpu: no usable CUDA device (cudaGetDeviceCount: " + kernels::query_devices().error +
        ")";
#else
    const std::string expected =
        "bench gpu: this build has no CUDA backend (configure with -DKVSCOPE_CUDA=ON)";
#endif
    auto r = kvscope({"bench", "gpu"});
    EXPECT_FALSE(r.signaled) << r.err;
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_EQ(r.err, "kvscope: error: " + expected + "\n");
    EXPECT_EQ(r.out, "");
}

}  // namespace
}  // namespace kvscope
