#include "probes/cupti_pm_sampling.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <cupti_pmsampling.h>
#include <cupti_profiler_host.h>
#include <cupti_profiler_target.h>
#include <cupti_target.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "probes/cupti_errors.h"

namespace kvscope {

namespace {

const char* kMetrics[] = {"dram__bytes_read.sum", "dram__bytes_write.sum"};
constexpr size_t kNumMetrics = std::size(kMetrics);

// CUPTI's parameter structs open with their size and a reserved pointer.
template <class P>
P params(size_t struct_size) {
    P p;
    std::memset(&p, 0, sizeof p);
    p.structSize = struct_size;
    return p;
}
#define KVSCOPE_CUPTI_PARAMS(type) params<type>(type##_STRUCT_SIZE)

const char* support_word(CUpti_Profiler_Support_Level level) {
    return level == CUPTI_PROFILER_CONFIGURATION_DISABLED ? "disabled" : "unsupported";
}

// Why CUPTI says this device cannot sample, in words; "" when it says it can (or cannot tell).
std::string unsupported_reason(int device, const std::string& chip) {
    // The device's driver handle, without linking the driver library (the binary must start
    // where there is none).
    using DeviceGet = CUresult (*)(CUdevice*, int);
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuDeviceGet", &fn, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess || !fn)
        return {};
    CUdevice cu_device = 0;
    if (reinterpret_cast<DeviceGet>(fn)(&cu_device, device) != CUDA_SUCCESS) return {};
    auto p = KVSCOPE_CUPTI_PARAMS(CUpti_Profiler_DeviceSupported_Params);
    p.cuDevice = cu_device;
    p.api = CUPTI_PROFILER_PM_SAMPLING;
    if (cuptiProfilerDeviceSupported(&p) != CUPTI_SUCCESS) return {};
    if (p.isSupported == CUPTI_PROFILER_CONFIGURATION_SUPPORTED) return {};
    std::string why;
    auto add = [&](CUpti_Profiler_Support_Level level, const std::string& what) {
        if (level == CUPTI_PROFILER_CONFIGURATION_SUPPORTED) return;
        if (!why.empty()) why += ", ";
        why += what + " " + support_word(level);
    };
    add(p.architecture, "the " + chip + " architecture");
    add(p.vGpu, "profiling on this vGPU");
    add(p.confidentialCompute, "profiling under confidential computing");
    add(p.cmp, "profiling on a CMP board");
    add(p.wsl, "profiling under WSL");
    add(p.sli, "profiling with SLI");
    return "this GPU cannot be sampled: " + (why.empty() ? "CUPTI does not say why" : why);
}

}  // namespace

struct CuptiPmSampler::State {
    PmSamplingOptions options;
    GpuCorrelator* sink = nullptr;
    std::string chip;
    bool profiler_initialized = false;
    CUpti_Profiler_Host_Object* host = nullptr;
    CUpti_PmSampling_Object* sampler = nullptr;
    bool started = false;
    std::vector<uint8_t> availability, config, counter_data, counter_data_blank;

    std::thread drain;
    mutable std::mutex mutex;
    std::condition_variable wake;
    bool stop_requested = false;
    std::string problem;  // guarded by mutex
    uint64_t overflows = 0;

    ~State() { release(); }
    void release();
    void fail_locked(std::string message) {
        if (problem.empty()) problem = std::move(message);
    }
    void drain_loop();
    // Decodes what the hardware buffer holds into samples for the sink; false once decoding
    // failed (said in `problem`).
    bool drain_once();
};

void CuptiPmSampler::State::release() {
    if (sampler) {
        auto p = KVSCOPE_CUPTI_PARAMS(CUpti_PmSampling_Disable_Params);
        p.pPmSamplingObject = sampler;
        (void)cuptiPmSamplingDisable(&p);
        sampler = nullptr;
    }
    if (host) {
        auto p = KVSCOPE_CUPTI_PARAMS(CUpti_Profiler_Host_Deinitialize_Params);
        p.pHostObject = host;
        (void)cuptiProfilerHostDeinitialize(&p);
        host = nullptr;
    }
    if (profiler_initialized) {
        auto p = KVSCOPE_CUPTI_PARAMS(CUpti_Profiler_DeInitialize_Params);
        (void)cuptiProfilerDeInitialize(&p);
        profiler_initialized = false;
    }
}

bool CuptiPmSampler::State::drain_once() {
    // Each pass decodes at most samples_per_decode samples; the buffer may hold more.
    for (int pass = 0; pass < 1000; ++pass) {
        auto decode = KVSCOPE_CUPTI_PARAMS(CUpti_PmSampling_DecodeData_Params);
        decode.pPmSamplingObject = sampler;
        decode.pCounterDataImage = counter_data.data();
        decode.counterDataImageSize = counter_data.size();
        if (CUptiResult r = cuptiPmSamplingDecodeData(&decode); r != CUPTI_SUCCESS) {
            std::lock_guard lock(mutex);
            fail_locked(cupti_failure("cuptiPmSamplingDecodeData", r));
            return false;
        }
        if (decode.overflow) {
            std::lock_guard lock(mutex);
            ++overflows;
        }
        auto info = KVSCOPE_CUPTI_PARAMS(CUpti_PmSampling_GetCounterDataInfo_Params);
        info.pCounterDataImage = counter_data.data();
        info.counterDataImageSize = counter_data.size();
        if (CUptiResult r = cuptiPmSamplingGetCounterDataInfo(&info); r != CUPTI_SUCCESS) {
            std::lock_guard lock(mutex);
            fail_locked(cupti_failure("cuptiPmSamplingGetCounterDataInfo", r));
            return false;
        }
        std::vector<PmSample> samples;
        samples.reserve(info.numCompletedSamples);
        for (size_t i = 0; i < info.numCompletedSamples; ++i) {
            auto si = KVSCOPE_CUPTI_PARAMS(CUpti_PmSampling_CounterData_GetSampleInfo_Params);
            si.pPmSamplingObject = sampler;
            si.pCounterDataImage = counter_data.data();
            si.counterDataImageSize = counter_data.size();
            si.sampleIndex = i;
            double values[kNumMetrics] = {};
            auto ev = KVSCOPE_CUPTI_PARAMS(CUpti_Profiler_Host_EvaluateToGpuValues_Params);
            ev.pHostObject = host;
            ev.pCounterDataImage = counter_data.data();
            ev.counterDataImageSize = counter_data.size();
            ev.rangeIndex = i;
            ev.ppMetricNames = kMetrics;
            ev.numMetrics = kNumMetrics;
            ev.pMetricValues = values;
            CUptiResult r = cuptiPmSamplingCounterDataGetSampleInfo(&si);
            if (r == CUPTI_SUCCESS) r = cuptiProfilerHostEvaluateToGpuValues(&ev);
            if (r != CUPTI_SUCCESS) {
                std::lock_guard lock(mutex);
                fail_locked(cupti_failure("reading a PM sample", r));
                return false;
            }
            samples.push_back({si.startTimestamp, si.endTimestamp, values[0], values[1]});
        }
        if (!samples.empty()) sink->add_samples(samples);
        // A blank image again for the next decode: copying the initialized one is cheaper than
        // initializing it each time.
        std::memcpy(counter_data.data(), counter_data_blank.data(), counter_data.size());
        if (decode.decodeStopReason != CUPTI_PM_SAMPLING_DECODE_STOP_REASON_COUNTER_DATA_FULL)
            return true;
    }
    return true;
}

void CuptiPmSampler::State::drain_loop() {
    const auto period = std::chrono::milliseconds(std::max(options.drain_interval_ms, 1));
    std::unique_lock lock(mutex);
    while (!stop_requested) {
        wake.wait_for(lock, period, [&] { return stop_requested; });
        lock.unlock();
        const bool ok = drain_once();
        lock.lock();
        if (!ok) break;
    }
    lock.unlock();
    // Stopped (or failed): stop the hardware here, on the thread that decodes, then take what it
    // wrote before stopping.
    auto stop = KVSCOPE_CUPTI_PARAMS(CUpti_PmSampling_Stop_Params);
    stop.pPmSamplingObject = sampler;
    if (CUptiResult r = cuptiPmSamplingStop(&stop); r != CUPTI_SUCCESS) {
        lock.lock();
        fail_locked(cupti_failure("cuptiPmSamplingStop", r));
        return;
    }
    (void)drain_once();
}

CuptiPmSampler::CuptiPmSampler(std::unique_ptr<State> state) : state_(std::move(state)) {}

Result<std::unique_ptr<CuptiPmSampler>> CuptiPmSampler::start(const PmSamplingOptions& options,
                                                              GpuCorrelator* sink) {
    auto s = std::make_unique<State>();
    s->options = options;
    s->sink = sink;
    auto failed = [](const char* call, CUptiResult r) { return Error{cupti_failure(call, r)}; };

    auto init = KVSCOPE_CUPTI_PARAMS(CUpti_Profiler_Initialize_Params);
    if (CUptiResult r = cuptiProfilerInitialize(&init); r != CUPTI_SUCCESS)
        return failed("cuptiProfilerInitialize", r);
    s->profiler_initialized = true;

    auto chip = KVSCOPE_CUPTI_PARAMS(CUpti_Device_GetChipName_Params);
    chip.deviceIndex = static_cast<size_t>(options.device);
    if (CUptiResult r = cuptiDeviceGetChipName(&chip); r != CUPTI_SUCCESS)
        return failed("cuptiDeviceGetChipName", r);
    s->chip = chip.pChipName ? chip.pChipName : "unknown chip";
    if (std::string why = unsupported_reason(options.device, s->chip); !why.empty())
        return Error{std::move(why)};

    auto enable = KVSCOPE_CUPTI_PARAMS(CUpti_PmSampling_Enable_Params);
    enable.deviceIndex = static_cast<size_t>(options.device);
    if (CUptiResult r = cuptiPmSamplingEnable(&enable); r != CUPTI_SUCCESS)
        return failed("cuptiPmSamplingEnable", r);
    s->sampler = enable.pPmSamplingObject;

    auto avail = KVSCOPE_CUPTI_PARAMS(CUpti_PmSampling_GetCounterAvailability_Params);
    avail.deviceIndex = static_cast<size_t>(options.device);
    if (CUptiResult r = cuptiPmSamplingGetCounterAvailability(&avail); r != CUPTI_SUCCESS)
        return failed("cuptiPmSamplingGetCounterAvailability", r);
    s->availability.resize(avail.counterAvailabilityImageSize);
    avail.pCounterAvailabilityImage = s->availability.data();
    if (CUptiResult r = cuptiPmSamplingGetCounterAvailability(&avail); r != CUPTI_SUCCESS)
        return failed("cuptiPmSamplingGetCounterAvailability", r);

    auto host = KVSCOPE_CUPTI_PARAMS(CUpti_Profiler_Host_Initialize_Params);
    host.profilerType = CUPTI_PROFILER_TYPE_PM_SAMPLING;
    host.pChipName = s->chip.c_str();
    host.pCounterAvailabilityImage = s->availability.data();
    if (CUptiResult r = cuptiProfilerHostInitialize(&host); r != CUPTI_SUCCESS)
        return failed("cuptiProfilerHostInitialize", r);
    s->host = host.pHostObject;

    auto add = KVSCOPE_CUPTI_PARAMS(CUpti_Profiler_Host_ConfigAddMetrics_Params);
    add.pHostObject = s->host;
    add.ppMetricNames = kMetrics;
    add.numMetrics = kNumMetrics;
    if (CUptiResult r = cuptiProfilerHostConfigAddMetrics(&add); r != CUPTI_SUCCESS)
        return Error{cupti_failure("cuptiProfilerHostConfigAddMetrics", r) + ": the " + s->chip +
                     " has no dram__bytes_read.sum / dram__bytes_write.sum to sample"};
    auto config_size = KVSCOPE_CUPTI_PARAMS(CUpti_Profiler_Host_GetConfigImageSize_Params);
    config_size.pHostObject = s->host;
    if (CUptiResult r = cuptiProfilerHostGetConfigImageSize(&config_size); r != CUPTI_SUCCESS)
        return failed("cuptiProfilerHostGetConfigImageSize", r);
    s->config.resize(config_size.configImageSize);
    auto config = KVSCOPE_CUPTI_PARAMS(CUpti_Profiler_Host_GetConfigImage_Params);
    config.pHostObject = s->host;
    config.configImageSize = s->config.size();
    config.pConfigImage = s->config.data();
    if (CUptiResult r = cuptiProfilerHostGetConfigImage(&config); r != CUPTI_SUCCESS)
        return failed("cuptiProfilerHostGetConfigImage", r);
    auto passes = KVSCOPE_CUPTI_PARAMS(CUpti_Profiler_Host_GetNumOfPasses_Params);
    passes.configImageSize = s->config.size();
    passes.pConfigImage = s->config.data();
    if (CUptiResult r = cuptiProfilerHostGetNumOfPasses(&passes); r != CUPTI_SUCCESS)
        return failed("cuptiProfilerHostGetNumOfPasses", r);
    if (passes.numOfPasses != 1)
        return Error{"the " + s->chip + " needs " + std::to_string(passes.numOfPasses) +
                     " passes for the DRAM byte counters; sampling takes one"};

    auto set = KVSCOPE_CUPTI_PARAMS(CUpti_PmSampling_SetConfig_Params);
    set.pPmSamplingObject = s->sampler;
    set.configSize = s->config.size();
    set.pConfig = s->config.data();
    set.hardwareBufferSize = options.hardware_buffer_bytes;
    set.samplingInterval = static_cast<uint64_t>(std::max<int64_t>(options.interval_ns, 1));
    set.triggerMode = CUPTI_PM_SAMPLING_TRIGGER_MODE_GPU_TIME_INTERVAL;
    // The drain keeps the buffer far from full; were it to fill, the newest samples matter more.
    set.hwBufferAppendMode = CUPTI_PM_SAMPLING_HARDWARE_BUFFER_APPEND_MODE_KEEP_LATEST;
    if (CUptiResult r = cuptiPmSamplingSetConfig(&set); r != CUPTI_SUCCESS) {
        std::string line = cupti_failure("cuptiPmSamplingSetConfig", r);
        if (r == CUPTI_ERROR_NOT_SUPPORTED)
            line += ": the " + s->chip +
                    " cannot sample on a fixed time interval (Turing and "
                    "A100 cannot)";
        return Error{std::move(line)};
    }

    auto data_size = KVSCOPE_CUPTI_PARAMS(CUpti_PmSampling_GetCounterDataSize_Params);
    data_size.pPmSamplingObject = s->sampler;
    data_size.pMetricNames = kMetrics;
    data_size.numMetrics = kNumMetrics;
    data_size.maxSamples = std::max<uint32_t>(options.samples_per_decode, 1);
    if (CUptiResult r = cuptiPmSamplingGetCounterDataSize(&data_size); r != CUPTI_SUCCESS)
        return failed("cuptiPmSamplingGetCounterDataSize", r);
    s->counter_data.resize(data_size.counterDataSize);
    auto image = KVSCOPE_CUPTI_PARAMS(CUpti_PmSampling_CounterDataImage_Initialize_Params);
    image.pPmSamplingObject = s->sampler;
    image.counterDataSize = s->counter_data.size();
    image.pCounterData = s->counter_data.data();
    if (CUptiResult r = cuptiPmSamplingCounterDataImageInitialize(&image); r != CUPTI_SUCCESS)
        return failed("cuptiPmSamplingCounterDataImageInitialize", r);
    s->counter_data_blank = s->counter_data;

    auto start = KVSCOPE_CUPTI_PARAMS(CUpti_PmSampling_Start_Params);
    start.pPmSamplingObject = s->sampler;
    if (CUptiResult r = cuptiPmSamplingStart(&start); r != CUPTI_SUCCESS)
        return failed("cuptiPmSamplingStart", r);
    s->started = true;
    State* raw = s.get();
    s->drain = std::thread([raw] { raw->drain_loop(); });
    return std::unique_ptr<CuptiPmSampler>(new CuptiPmSampler(std::move(s)));
}

CuptiPmSampler::~CuptiPmSampler() {
    stop();
}

void CuptiPmSampler::stop() {
    if (!state_ || !state_->started) return;
    {
        std::lock_guard lock(state_->mutex);
        state_->stop_requested = true;
    }
    state_->wake.notify_all();
    if (state_->drain.joinable()) state_->drain.join();
    state_->started = false;
    state_->release();
}

const std::string& CuptiPmSampler::chip() const {
    return state_->chip;
}

std::string CuptiPmSampler::problem() const {
    std::lock_guard lock(state_->mutex);
    return state_->problem;
}

uint64_t CuptiPmSampler::overflows() const {
    std::lock_guard lock(state_->mutex);
    return state_->overflows;
}

}  // namespace kvscope
