#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "probes/gpu_clock.h"

// Unmangled, so that the activity trace knows it by kClockProbeKernel.
extern "C" __global__ void kvscope_global_timer_probe(unsigned long long* out) {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    *out = t;
}

namespace kvscope {

namespace {
Error cuda_error(const char* call, cudaError_t e) {
    return Error{std::string("GPU timer: ") + call + ": " + cudaGetErrorString(e)};
}

// Makes `device` current for the scope of one call and puts the caller's back.
class OnDevice {
  public:
    explicit OnDevice(int device) {
        error_ = cudaGetDevice(&previous_);
        if (error_ == cudaSuccess && previous_ != device) {
            error_ = cudaSetDevice(device);
            switched_ = error_ == cudaSuccess;
        }
    }
    ~OnDevice() {
        if (switched_) cudaSetDevice(previous_);
    }
    cudaError_t error() const { return error_; }

  private:
    int previous_ = 0;
    bool switched_ = false;
    cudaError_t error_ = cudaSuccess;
};
}  // namespace

Result<std::unique_ptr<GpuTimerClock>> GpuTimerClock::create(int device) {
    OnDevice on(device);
    if (on.error() != cudaSuccess) return cuda_error("cudaSetDevice", on.error());
    std::unique_ptr<GpuTimerClock> clock(new GpuTimerClock());
    clock->device_ = device;
    cudaStream_t stream = nullptr;
    if (cudaError_t e = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); e != cudaSuccess)
        return cuda_error("cudaStreamCreateWithFlags", e);
    clock->stream_ = stream;
    // Pinned: under unified addressing the kernel writes it through its host address.
    if (cudaError_t e =
            cudaMallocHost(reinterpret_cast<void**>(&clock->word_), sizeof(*clock->word_));
        e != cudaSuccess)
        return cuda_error("cudaMallocHost", e);
    return Result<std::unique_ptr<GpuTimerClock>>(std::move(clock));
}

GpuTimerClock::~GpuTimerClock() {
    OnDevice on(device_);
    if (word_) cudaFreeHost(word_);
    if (stream_) cudaStreamDestroy(static_cast<cudaStream_t>(stream_));
}

Result<ClockOffset> GpuTimerClock::measure(int readings) {
    OnDevice on(device_);
    if (on.error() != cudaSuccess) return cuda_error("cudaSetDevice", on.error());
    auto stream = static_cast<cudaStream_t>(stream_);
    std::vector<ClockReading> got;
    // One launch more than asked: the first may load the module and is slow.
    for (int i = 0; i <= readings; ++i) {
        ClockReading r;
        r.host_before = host_now_ns();
        kvscope_global_timer_probe<<<1, 1, 0, stream>>>(word_);
        if (cudaError_t e = cudaGetLastError(); e != cudaSuccess)
            return cuda_error("kernel launch", e);
        if (cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess)
            return cuda_error("cudaStreamSynchronize", e);
        r.host_after = host_now_ns();
        r.device = *word_;
        if (i > 0) got.push_back(r);
    }
    return estimate_clock_offset(got);
}

}  // namespace kvscope
