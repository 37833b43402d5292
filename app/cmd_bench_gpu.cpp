// `kvscope bench gpu`: the GPUs this build can use: name, compute capability, SMs, memory, and
// the device-to-device copy bandwidth measured with cudaMemcpy, the limit paged attention's
// achieved bandwidth will be judged against. With --decode, end-to-end decode tokens/s of a model
// on the CUDA engine backend at several batch sizes and context lengths, against the bound that
// bandwidth sets. Without CUDA in the build, or without a usable device, one line saying so and
// exit 1.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "app/backend_flag.h"
#include "app/bench_gpu_decode.h"
#include "app/commands.h"
#include "base/terminal_text.h"
#include "engine/engine.h"
#ifdef KVSCOPE_HAVE_CUDA
#include "engine_cuda/cuda_forward.h"
#include "kernels/device_info.h"
#endif

namespace kvscope::app {

namespace {
struct BenchGpuOptions {
    int device = -1;  // -1: every device
    int size_mib = 1024;
    int passes = 5;
    bool json = false;
    bool decode = false;
    std::string model = "synthetic:llama-3-8b:bf16";
    std::vector<int> batches = {1, 8, 32};
    std::vector<int> contexts = {1024, 8192};
    int steps = 32;
    int probe_rounds = 0;
};

int run_bench_gpu(const BenchGpuOptions& o) {
#ifndef KVSCOPE_HAVE_CUDA
    (void)o;
    return fail(std::string("bench gpu: ") + kNoCudaBuild);
#else
    if (o.probe_rounds > 0 && !o.decode)
        return fail("bench gpu: --probe-overhead times decode: add --decode");
    kernels::DeviceQuery q = kernels::query_devices();
    if (q.devices.empty())
        return fail("bench gpu: no usable CUDA device (cudaGetDeviceCount: " + q.error + ")");
    if (o.device >= static_cast<int>(q.devices.size()))
        return fail("bench gpu: --device " + std::to_string(o.device) + ": there are " +
                    std::to_string(q.devices.size()) + " devices (0 to " +
                    std::to_string(q.devices.size() - 1) + ")");
    nlohmann::json rows = nlohmann::json::array();
    const int64_t bytes = static_cast<int64_t>(o.size_mib) << 20;
    double first_gbps = 0;  // --decode's bound: the first device measured
    for (const kernels::DeviceInfo& d : q.devices) {
        if (o.device >= 0 && d.index != o.device) continue;
        kernels::CopyBandwidth bw = kernels::measure_copy_bandwidth(d.index, bytes, o.passes);
        if (first_gbps == 0) first_gbps = bw.gbps;
        if (o.json) {
            nlohmann::json j = {{"device", d.index},
                                {"name", d.name},
                                {"compute_capability",
                                 std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor)},
                                {"sm_count", d.sm_count},
                                {"memory_bytes", d.total_bytes},
                                {"memory_free_bytes", d.free_bytes},
                                {"memory_clock_khz", d.memory_clock_khz},
                                {"memory_bus_width_bits", d.bus_width_bits},
                                {"peak_gbps", d.peak_gbps()},
                                {"copy_bytes", bw.bytes},
                                {"copy_passes", bw.passes},
                                {"copy_gbps", bw.gbps}};
            if (!bw.error.empty()) j["copy_error"] = bw.error;
            rows.push_back(j);
            continue;
        }
        std::printf("device %d: %s, compute capability %d.%d, %d SMs\n", d.index,
                    terminal_safe(d.name).c_str(), d.cc_major, d.cc_minor, d.sm_count);
        std::printf("  memory      %.1f GiB (%.1f GiB free)", d.total_bytes / 1073741824.0,
                    d.free_bytes / 1073741824.0);
        if (d.peak_gbps() > 0)
            std::printf(", peak %.0f GB/s (%d MHz, %d-bit bus)", d.peak_gbps(),
                        d.memory_clock_khz / 1000, d.bus_width_bits);
        std::printf("\n");
        if (!bw.error.empty())
            std::printf("  copy        not measured: %s\n", terminal_safe(bw.error).c_str());
        else
            std::printf(
                "  copy        %.0f GB/s (cudaMemcpy device to device, %d MiB, best of %d; "
                "bytes read + written)\n",
                bw.gbps, o.size_mib, o.passes);
    }
    if (o.decode) {
        if (first_gbps <= 0) return fail("bench gpu: the copy bandwidth was not measured");
        DecodeBenchOptions d{o.model, o.batches, o.contexts, o.steps, o.json, o.probe_rounds};
        nlohmann::json decode = nlohmann::json::object();
        if (int rc = run_decode_bench(d, std::max(o.device, 0), first_gbps, &decode); rc != 0)
            return rc;
        if (o.json) {
            decode["devices"] = rows;
            rows = decode;
        }
    }
    if (o.json) std::printf("%s\n", json_terminal_safe(rows.dump(2)).c_str());
    return 0;
#endif
}
}  // namespace

Command register_bench_gpu(CLI::App& bench) {
    auto o = std::make_shared<BenchGpuOptions>();
    CLI::App* sub = bench.add_subcommand(
        "gpu",
        "The GPUs: name, SMs, memory, device-to-device copy bandwidth, and with --decode the "
        "CUDA backend's decode tokens/s against it (CUDA builds)");
    sub->add_option("--device", o->device, "Only this device (default: every one)")
        ->check(CLI::Range(0, 1024));
    sub->add_option("--size", o->size_mib, "Copy size in MiB")
        ->check(CLI::Range(1, 1 << 20))
        ->capture_default_str();
    sub->add_option("--passes", o->passes, "Best of this many copies")
        ->check(CLI::Range(1, 1000))
        ->capture_default_str();
    sub->add_flag("--json", o->json,
                  "One JSON array, an object per device (with --decode: an object of \"devices\" "
                  "and \"decode\" rows)");
    sub->add_flag("--decode", o->decode,
                  "Also time end-to-end decode on the CUDA engine backend at each --batch and "
                  "--context, against the bound the copy bandwidth sets");
    sub->add_option("--model", o->model, "Model for --decode (.gguf or synthetic:NAME[:TYPE])")
        ->capture_default_str();
    sub->add_option("--batch", o->batches, "Sequences decoded together, for --decode")
        ->check(CLI::Range(1, 1024))
        ->delimiter(',')
        ->capture_default_str();
    sub->add_option("--context", o->contexts, "K/V slots each sequence attends to, for --decode")
        ->check(CLI::Range(64, 1 << 20))
        ->delimiter(',')
        ->capture_default_str();
    sub->add_option("--steps", o->steps, "Timed decode steps per row, for --decode")
        ->check(CLI::Range(1, 10000))
        ->capture_default_str();
    sub->add_option("--probe-overhead", o->probe_rounds,
                    "With --decode: this many rounds of decode at the first --batch and --context "
                    "with the GPU probes off, tracing kernels, and tracing while sampling DRAM, "
                    "alternated; prints each one's tokens/s and the sampled DRAM bytes against "
                    "what the steps must move")
        ->check(CLI::Range(0, 100));
    return {sub, [o] { return run_bench_gpu(*o); }};
}

}  // namespace kvscope::app
