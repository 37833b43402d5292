// `kvscope bench memory`: this machine's memory bandwidth, the limit every step's achieved
// bandwidth is drawn against (and kept in the cache recordings read it from). `bench cpu` is in
// cmd_bench_cpu.cpp, `bench gpu` in cmd_bench_gpu.cpp.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/machine_bandwidth.h"
#include "base/machine_memory.h"
#include "base/terminal_text.h"
#include "sessions/bandwidth_json.h"

namespace kvscope::app {

namespace {
struct BenchMemoryOptions {
    int threads = 0;
    int size_mib = 0;
    int passes = 5;
    bool json = false;
};

int run_bench_memory(const BenchMemoryOptions& o) {
    // Two buffers (copy reads one and writes the other), every page touched before timing.
    const uint64_t buffer_bytes = static_cast<uint64_t>(o.size_mib) << 20;
    if (Status fits =
            check_fits_in_memory(2 * buffer_bytes,
                                 "--size " + std::to_string(o.size_mib) + ": two buffers of " +
                                     std::to_string(o.size_mib) + " MiB",
                                 "a smaller --size");
        !fits)
        return fail(fits.error().message);
    BandwidthOptions opt;
    opt.threads = o.threads;
    opt.buffer_bytes = static_cast<int64_t>(o.size_mib) << 20;
    opt.passes = o.passes;
    MemoryBandwidth bw = measure_memory_bandwidth(opt);
    // Only the default measurement describes the machine as a run uses it.
    if (o.threads == 0 && o.size_mib == 0) save_machine_bandwidth(bw);
    if (o.json) {
        std::printf("%s\n", json_terminal_safe(bandwidth_to_json(bw).dump(2)).c_str());
        return 0;
    }
    std::printf("%s, buffers of %lld MiB (last-level cache %lld KiB), best of %d passes\n",
                terminal_safe(bw.cpu).c_str(), static_cast<long long>(bw.buffer_bytes >> 20),
                static_cast<long long>(last_level_cache_bytes() >> 10), o.passes);
    std::printf("%-10s %12s %12s\n", "threads", "read GB/s", "copy GB/s");
    std::printf("%-10d %12.2f %12.2f\n", 1, bw.read_1_gbps, bw.copy_1_gbps);
    std::printf("%-10d %12.2f %12.2f\n", bw.threads_all, bw.read_all_gbps, bw.copy_all_gbps);
    std::printf(
        "copy counts the bytes read and written (as STREAM does); a decode step is held "
        "to read bandwidth\n");
    return 0;
}
}  // namespace

std::vector<Command> register_bench(CLI::App& cli) {
    CLI::App* bench = cli.add_subcommand("bench", "Measure this machine");
    bench->require_subcommand(1);
    auto o = std::make_shared<BenchMemoryOptions>();
    CLI::App* mem = bench->add_subcommand(
        "memory",
        "Memory bandwidth, read and copy, one thread and all: the limit steps are "
        "judged against");
    mem->add_option("--threads", o->threads, "Threads for the all-threads figures (0 = all cores)")
        ->check(CLI::Range(0, 1024))
        ->capture_default_str();
    mem->add_option("--size", o->size_mib,
                    "Buffer size in MiB (0: 4x the last-level cache, "
                    "at least 128)")
        ->check(CLI::Range(0, 65536))
        ->capture_default_str();
    mem->add_option("--passes", o->passes, "Best of this many passes")
        ->check(CLI::Range(1, 100))
        ->capture_default_str();
    mem->add_flag("--json", o->json, "One JSON object");
    return {{mem, [o] { return run_bench_memory(*o); }},
            register_bench_cpu(*bench),
            register_bench_gpu(*bench)};
}

}  // namespace kvscope::app
