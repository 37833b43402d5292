#include "gpu_run.h"

#include <gtest/gtest.h>

#include "engine/reporter.h"
#include "probes/gpu_correlator.h"
#include "sessions/recorder.h"
#include "test_support.h"

namespace kvscope::test {

namespace {
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

}  // namespace

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

}  // namespace kvscope::test
