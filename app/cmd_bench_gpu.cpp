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
};

#ifdef KVSCOPE_HAVE_CUDA
struct DecodeRow {
    int batch = 0, context = 0;
    double tokens_per_second = 0, bound_tokens_per_second = 0;
    int64_t bytes_per_step = 0;
};

// `steps` decode steps (after two untimed ones) of `batch` sequences whose caches end at
// `context` slots, each step timed end to end: tables uploaded, the layers, logits copied back.
// The K/V the sequences attend to are left as the cache holds them: a step reads the same bytes
// whatever they are. The bound is the bytes a step must read (the weights once, every sequence's
// K/V) over the measured copy bandwidth.
Result<DecodeRow> time_decode(Engine& e, int batch, int context, int steps, double copy_gbps,
                              int64_t weight_bytes) {
    using clock = std::chrono::steady_clock;
    constexpr int kWarm = 2;
    const int first = context - kWarm - steps;  // positions first .. context - 1 are decoded
    if (first < 1)
        return Error{"--context " + std::to_string(context) + " is too short for " +
                     std::to_string(steps) + " steps"};
    std::vector<BlockTable> tables(static_cast<size_t>(batch));
    auto release = [&] {
        for (BlockTable& t : tables)
            e.blocks().free(t);
    };
    for (BlockTable& t : tables)
        if (Status s = e.blocks().grow(t, first); !s) {
            release();
            return s.error();
        }
    std::vector<float> logits;
    double seconds = 0;
    for (int i = 0; i < kWarm + steps; ++i) {
        ForwardBatch b;
        for (BlockTable& t : tables) {
            if (Status s = e.blocks().grow(t, first + i + 1); !s) {
                release();
                return s.error();
            }
            b.tokens.push_back(1);
            b.chunks.push_back({&t, first + i, 1, true});
        }
        const auto t0 = clock::now();
        Status ran = e.forward().run(b, logits);
        if (i >= kWarm) seconds += std::chrono::duration<double>(clock::now() - t0).count();
        if (!ran) {
            release();
            return ran.error();
        }
    }
    release();
    const ModelConfig& c = e.config();
    const int64_t kv_token = int64_t{2} * c.n_layers * c.kv_dim() * 2;  // K and V, f16
    const double mean_slots = first + kWarm + (steps + 1) / 2.0;
    DecodeRow row;
    row.batch = batch;
    row.context = context;
    row.tokens_per_second = batch * steps / seconds;
    row.bytes_per_step = weight_bytes + static_cast<int64_t>(batch * mean_slots * kv_token);
    row.bound_tokens_per_second = batch * copy_gbps * 1e9 / static_cast<double>(row.bytes_per_step);
    return row;
}

int run_decode_bench(const BenchGpuOptions& o, int device, double copy_gbps, nlohmann::json* out) {
    auto loaded = load_model(o.model);
    if (!loaded) return fail(loaded.error().message);
    auto model = std::make_shared<const LoadedModel>(std::move(loaded).value());
    const int max_batch = *std::max_element(o.batches.begin(), o.batches.end());
    const int max_context = *std::max_element(o.contexts.begin(), o.contexts.end());
    if (max_context > model->config.context_length)
        return fail("bench gpu: --context " + std::to_string(max_context) + " is past " +
                    terminal_safe(o.model) + "'s context of " +
                    std::to_string(model->config.context_length));
    EngineOptions eo;
    eo.kv_dtype = KvDtype::kF16;
    eo.num_blocks = max_batch * BlockManager::blocks_for(max_context, eo.block_size);
    CudaForwardOptions co;
    co.device = device;
    eo.backend = cuda_backend(co);
    auto engine = Engine::create(model, eo);
    if (!engine) return fail("bench gpu: " + engine.error().message);
    const int64_t weight_bytes = cuda_weight_bytes(model->config, model->weights);
    if (!o.json) {
        std::printf(
            "decode, %s on device %d: %.2f GB of 16-bit weights, f16 K/V; bound = (weights + K/V "
            "a step reads) / copy bandwidth %.0f GB/s\n",
            terminal_safe(o.model).c_str(), device, static_cast<double>(weight_bytes) / 1e9,
            copy_gbps);
        std::printf("  %5s %8s %12s %14s %9s\n", "batch", "context", "tokens/s", "bound tokens/s",
                    "of bound");
    }
    for (int context : o.contexts)
        for (int batch : o.batches) {
            auto row = time_decode(**engine, batch, context, o.steps, copy_gbps, weight_bytes);
            if (!row) return fail("bench gpu: " + row.error().message);
            const DecodeRow& r = row.value();
            if (o.json) {
                out->push_back({{"batch", r.batch},
                                {"context", r.context},
                                {"tokens_per_second", r.tokens_per_second},
                                {"bound_tokens_per_second", r.bound_tokens_per_second},
                                {"bytes_per_step", r.bytes_per_step}});
                continue;
            }
            std::printf("  %5d %8d %12.1f %14.1f %8.0f%%\n", r.batch, r.context,
                        r.tokens_per_second, r.bound_tokens_per_second,
                        100.0 * r.tokens_per_second / r.bound_tokens_per_second);
            std::fflush(stdout);
        }
    return 0;
}
#endif

int run_bench_gpu(const BenchGpuOptions& o) {
#ifndef KVSCOPE_HAVE_CUDA
    (void)o;
    return fail(std::string("bench gpu: ") + kNoCudaBuild);
#else
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
        nlohmann::json decode = nlohmann::json::array();
        if (int rc = run_decode_bench(o, std::max(o.device, 0), first_gbps, &decode); rc != 0)
            return rc;
        if (o.json) rows = {{"devices", rows}, {"decode", decode}};
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
    return {sub, [o] { return run_bench_gpu(*o); }};
}

}  // namespace kvscope::app
