// GpuProbes (probes/gpu_probes.h): the activity tracer and the PM sampler started together,
// collected once per step, and what cannot start said as a note.
#include <cuda_runtime_api.h>

#include <chrono>

#include "probes/cupti_activity.h"
#include "probes/cupti_pm_sampling.h"
#include "probes/gpu_clock.h"
#include "probes/gpu_probes.h"

namespace kvscope {

namespace {

struct ProbeState {
    GpuProbeOptions options;
    GpuOpNames ops;
    GpuCorrelator events{&ops};
    std::unique_ptr<CuptiActivity> activity;
    std::unique_ptr<CuptiPmSampler> sampler;
    std::unique_ptr<GpuTimerClock> timer;
    int64_t timer_measured_ns = 0;
    std::string timer_problem;
    bool stopped = false;

    void measure_timer() {
        timer_measured_ns = host_now_ns();
        if (!timer) {
            auto made = GpuTimerClock::create(options.device);
            if (!made.ok()) {
                if (timer_problem.empty()) timer_problem = made.error().message;
                return;
            }
            timer = std::move(made).value();
        }
        auto offset = timer->measure();
        if (offset.ok())
            events.set_sampling_clock(*offset);
        else if (timer_problem.empty())
            timer_problem = offset.error().message;
    }
};

// The CUPTI probes: the activity tracer and the PM sampler, started together.
class CuptiProbes final : public GpuProbes {
  public:
    explicit CuptiProbes(std::unique_ptr<ProbeState> state) : impl_(std::move(state)) {}
    ~CuptiProbes() override {
        std::vector<Event> dropped;
        stop(dropped);
    }

    int32_t op(std::string_view name) override { return impl_->ops.id(name); }
    GpuCorrelation* correlation() override { return impl_->activity.get(); }
    bool tracing() const override { return impl_->activity != nullptr; }
    bool sampling() const override { return impl_->sampler != nullptr; }

    void collect(int64_t step, std::vector<Event>& out) override {
        ProbeState& m = *impl_;
        if (m.stopped) return;
        if (m.activity) {
            m.events.set_activity_clock(m.activity->measure_clock());
            (void)m.activity->flush();
        }
        if (m.sampler &&
            host_now_ns() - m.timer_measured_ns > int64_t{m.options.clock_refresh_ms} * 1'000'000)
            m.measure_timer();
        m.events.take(step, out);
    }

    void stop(std::vector<Event>& out) override {
        ProbeState& m = *impl_;
        if (m.stopped) return;
        m.stopped = true;
        // The trace first: giving the PM sampler back releases CUPTI's profiler, which must not
        // happen under a tracer still flushing.
        if (m.activity) {
            m.events.set_activity_clock(m.activity->measure_clock());
            (void)m.activity->stop();
        }
        if (m.sampler) m.sampler->stop();
        m.events.take_all(out);
    }

    GpuEventCounts counts() const override { return impl_->events.counts(); }

    std::vector<std::string> problems() const override {
        std::vector<std::string> lines;
        const ProbeState& m = *impl_;
        if (m.activity && m.activity->dropped() > 0)
            lines.push_back("CUPTI dropped " + std::to_string(m.activity->dropped()) +
                            " activity records (its buffers were full)");
        if (m.sampler) {
            if (std::string p = m.sampler->problem(); !p.empty())
                lines.push_back("HBM sampling stopped: " + p);
            if (uint64_t n = m.sampler->overflows(); n > 0)
                lines.push_back("HBM sampling: the hardware buffer overflowed " +
                                std::to_string(n) +
                                " times (samples lost; a shorter drain interval or a larger buffer "
                                "keeps up)");
        }
        if (!m.timer_problem.empty())
            lines.push_back("HBM samples' times may be off: " + m.timer_problem);
        return lines;
    }

  private:
    std::unique_ptr<ProbeState> impl_;
};

}  // namespace

namespace {
// Why no device can be used, in cudaGetDeviceCount's words; "" when `device` can.
std::string no_device_reason(int device) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        std::string why = std::string(cudaGetErrorString(e)) + " (" + cudaGetErrorName(e) +
                          " from cudaGetDeviceCount)";
        cudaGetLastError();  // not sticky: leave no error behind for the caller's next call
        return why;
    }
    if (count == 0) return "cudaGetDeviceCount found 0 devices";
    if (device < 0 || device >= count)
        return "device " + std::to_string(device) + " asked for, " + std::to_string(count) +
               " found";
    return {};
}
}  // namespace

GpuProbeStart start_gpu_probes(const GpuProbeOptions& options) {
    GpuProbeStart result;
    if (!options.activity && !options.sampling) return result;
    if (std::string why = no_device_reason(options.device); !why.empty()) {
        result.notes.push_back("GPU probes off: no CUDA device: " + why);
        return result;
    }
    // CUPTI attaches to a context: make sure the device has one before it is asked to.
    cudaError_t e = cudaSetDevice(options.device);
    if (e == cudaSuccess) e = cudaFree(nullptr);
    if (e != cudaSuccess) {
        result.notes.push_back("GPU probes off: no CUDA context on device " +
                               std::to_string(options.device) + ": " + cudaGetErrorString(e));
        cudaGetLastError();
        return result;
    }
    auto impl = std::make_unique<ProbeState>();
    impl->options = options;
    impl->events.set_sample_interval(options.sample_interval_ns);
    // Sampling first: if it cannot start, what it set up is released before any trace runs.
    if (options.sampling) {
        PmSamplingOptions pm;
        pm.device = options.device;
        pm.interval_ns = options.sample_interval_ns;
        pm.drain_interval_ms = options.drain_interval_ms;
        pm.hardware_buffer_bytes = options.hardware_buffer_bytes;
        pm.samples_per_decode = options.samples_per_decode;
        impl->measure_timer();
        auto sampler = CuptiPmSampler::start(pm, &impl->events);
        if (sampler.ok())
            impl->sampler = std::move(sampler).value();
        else
            result.notes.push_back("HBM sampling off: " + sampler.error().message);
    }
    if (options.activity) {
        auto activity = CuptiActivity::start(&impl->events);
        if (activity.ok()) {
            impl->activity = std::move(activity).value();
            impl->events.set_activity_clock(impl->activity->measure_clock());
        } else {
            result.notes.push_back("kernel trace off: " + activity.error().message);
        }
    }
    if (impl->activity || impl->sampler)
        result.probes = std::make_unique<CuptiProbes>(std::move(impl));
    return result;
}

}  // namespace kvscope
