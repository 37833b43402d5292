#pragma once
// What CUPTI reports, as plain data, and how each piece becomes an Event. probes/cupti_*.cpp copy
// CUPTI's records into these structs; everything after that is here, CUPTI-free, so that it is
// tested on machines without a GPU.
//
// Clocks: events carry host steady-clock ns (host_now_ns()). CUPTI stamps activity records on its
// own clock (CLOCK_REALTIME on Linux) and PM samples on the GPU's global timer; each is mapped to
// the host by an offset measured from pairs of readings (estimate_clock_offset).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "probes/event.h"
#include "probes/gpu_scope.h"

namespace kvscope {

enum class GpuActivityKind : uint8_t { kKernel, kMemcpy, kMemset };

// Directions of a memcpy, as CUPTI names them (H host, D device, A CUDA array, P peer device).
enum class GpuCopyKind : uint8_t {
    kUnknown,
    kHtoD,
    kDtoH,
    kHtoA,
    kAtoH,
    kAtoA,
    kAtoD,
    kDtoA,
    kDtoD,
    kHtoH,
    kPtoP
};
std::string_view copy_kind_name(GpuCopyKind kind);  // "HtoD", ...; "unknown"

// One kernel, memcpy or memset the GPU ran.
struct GpuActivity {
    GpuActivityKind kind = GpuActivityKind::kKernel;
    std::string name;  // a kernel's, as CUPTI gives it (mangled); empty for copies and sets
    GpuCopyKind copy = GpuCopyKind::kUnknown;
    uint64_t bytes = 0;                 // a copy's or set's
    uint64_t start_ns = 0, end_ns = 0;  // CUPTI's clock; both 0: CUPTI could not time it
    uint32_t stream = 0;                // CUPTI's stream id
    // The CUDA API calls that launched it (a graph's kernels share their graph launch's); a
    // memcpy has one for the runtime call and one for the driver call under it (0: none).
    uint32_t correlation = 0, runtime_correlation = 0;
    uint32_t graph = 0;   // the CUDA graph it ran in; 0 when launched on its own
    int64_t threads = 0;  // a kernel's grid x block
};

// An external correlation record: the external id that was open when API call `correlation`
// was made.
struct GpuScopeLink {
    uint32_t correlation = 0;
    uint64_t external_id = 0;
};

// One PM sample: DRAM bytes read and written between two readings of the GPU's global timer.
struct PmSample {
    uint64_t start_ns = 0, end_ns = 0;
    double bytes_read = 0, bytes_written = 0;
};

// host ns = device ns + offset_ns.
struct ClockOffset {
    int64_t offset_ns = 0;
    int64_t uncertainty_ns = -1;  // half the tightest bracket; -1: never measured
    bool measured() const { return uncertainty_ns >= 0; }
    int64_t to_host(uint64_t device_ns) const {
        return static_cast<int64_t>(device_ns + static_cast<uint64_t>(offset_ns));
    }
};

// A device clock read between two host readings.
struct ClockReading {
    int64_t host_before = 0, host_after = 0;
    uint64_t device = 0;
};

// The offset from the tightest bracket: the device reading happened somewhere between its two
// host readings, so the narrowest pair bounds it best, and its midpoint is the estimate. Readings
// whose host clock went backwards are ignored; none usable: an unmeasured offset.
ClockOffset estimate_clock_offset(const std::vector<ClockReading>& readings);

// The name a GPU kernel is shown by: demangled, without its parameter list or return type
// ("kvscope::kernels::swiglu_kernel<float>"). A name that does not demangle is kept as it is.
std::string kernel_display_name(std::string_view mangled);

// The kernel CUPTI's clock probe launches (probes/gpu_clock.cu); its records are not the engine's
// and are dropped.
inline constexpr std::string_view kClockProbeKernel = "kvscope_global_timer_probe";

// A kernel event for one GPU activity, attributed to `scope` (op_name: scope.op's name, "" if
// none). Its step is scope.step (-1 when not known); start and duration mapped to the host clock
// (a record that ends before it starts lasts 0 ns). The name is the display name of the kernel,
// or "memcpy HtoD" and so on, or "memset".
Event gpu_activity_event(const GpuActivity& activity, const GpuScopeKey& scope,
                         std::string_view op_name, const ClockOffset& clock);

// An hbm_sample event for one PM sample: start and end on the host clock (an end before the
// start is taken as the start: a sample of no length), bytes rounded to whole bytes (negative or
// not a number: 0), their sum in value. Its step is left to the caller.
Event hbm_sample_event(const PmSample& sample, const ClockOffset& clock);

}  // namespace kvscope
