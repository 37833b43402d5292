#include "app/backend_flag.h"

#include "app/commands.h"
#ifdef KVSCOPE_HAVE_CUDA
#include <chrono>
#include <cstdio>
#include <thread>

#include "app/data_paths.h"
#include "base/terminal_text.h"
#include "engine_cuda/cuda_forward.h"
#include "kernels/device_info.h"
#include "probes/gpu_probes_module.h"
#endif

namespace kvscope::app {

void add_backend_flag(CLI::App& sub, Backend& backend) {
    sub.add_option_function<std::string>(
           "--backend",
           [&backend](const std::string& v) {
               backend = v == "cuda" ? Backend::kCuda : Backend::kCpu;
           },
           "cpu (the reference, runs anywhere) | cuda (needs a build with CUDA and a GPU)")
        ->check(CLI::IsMember({"cpu", "cuda"}))
        ->default_str("cpu");
}

bool build_has_cuda() {
#ifdef KVSCOPE_HAVE_CUDA
    return true;
#else
    return false;
#endif
}

int check_backend(Backend backend) {
    if (backend == Backend::kCpu) return 0;
#ifndef KVSCOPE_HAVE_CUDA
    return fail(std::string("--backend cuda: ") + kNoCudaBuild);
#else
    kernels::DeviceQuery q = kernels::query_devices();
    if (q.devices.empty())
        return fail("--backend cuda: no usable CUDA device (cudaGetDeviceCount: " + q.error + ")");
    return 0;
#endif
}

#ifdef KVSCOPE_HAVE_CUDA
namespace {
// The GPU probes, loaded the first time a run that records or shows its events asks, and kept
// to the end of the process (never destroyed: at exit the module's CUDA runtime may be gone
// first). What is off is said once, on stderr.
GpuProbeStart* started_gpu_probes = nullptr;

GpuProbes* process_gpu_probes() {
    if (!started_gpu_probes) {
        started_gpu_probes = new GpuProbeStart(load_gpu_probes({}, executable_dir()));
        for (const std::string& note : started_gpu_probes->notes)
            std::fprintf(stderr, "kvscope: %s\n", terminal_safe(note).c_str());
    }
    return started_gpu_probes->probes.get();
}
}  // namespace
#endif

void finish_gpu_probes(const Reporter& reporter) {
#ifdef KVSCOPE_HAVE_CUDA
    GpuProbes* probes = started_gpu_probes ? started_gpu_probes->probes.get() : nullptr;
    if (!probes) return;
    // DRAM samples reach the drain thread a few of its intervals after the work they count.
    std::this_thread::sleep_for(std::chrono::milliseconds(3 * GpuProbeOptions{}.drain_interval_ms));
    std::vector<Event> rest;
    probes->stop(rest);
    if (reporter.on() && !rest.empty()) reporter.emit_all(rest);
    for (const std::string& p : probes->problems())
        std::fprintf(stderr, "kvscope: %s\n", terminal_safe(p).c_str());
#else
    (void)reporter;
#endif
}

ForwardFactory backend_factory(Backend backend, bool gpu_probes) {
#ifdef KVSCOPE_HAVE_CUDA
    if (backend == Backend::kCuda) {
        CudaForwardOptions options;
        if (gpu_probes) options.probes = process_gpu_probes();
        return cuda_backend(options);
    }
#else
    (void)backend;
    (void)gpu_probes;
#endif
    return {};
}

}  // namespace kvscope::app
