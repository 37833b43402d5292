#include "probes/gpu_events.h"

#include <cxxabi.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace kvscope {

std::string_view copy_kind_name(GpuCopyKind kind) {
    switch (kind) {
        case GpuCopyKind::kHtoD:
            return "HtoD";
        case GpuCopyKind::kDtoH:
            return "DtoH";
        case GpuCopyKind::kHtoA:
            return "HtoA";
        case GpuCopyKind::kAtoH:
            return "AtoH";
        case GpuCopyKind::kAtoA:
            return "AtoA";
        case GpuCopyKind::kAtoD:
            return "AtoD";
        case GpuCopyKind::kDtoA:
            return "DtoA";
        case GpuCopyKind::kDtoD:
            return "DtoD";
        case GpuCopyKind::kHtoH:
            return "HtoH";
        case GpuCopyKind::kPtoP:
            return "PtoP";
        case GpuCopyKind::kUnknown:
            break;
    }
    return "unknown";
}

ClockOffset estimate_clock_offset(const std::vector<ClockReading>& readings) {
    ClockOffset best;
    int64_t best_width = std::numeric_limits<int64_t>::max();
    for (const ClockReading& r : readings) {
        const int64_t width = r.host_after - r.host_before;
        if (width < 0 || width >= best_width) continue;
        best_width = width;
        const int64_t mid = r.host_before + width / 2;
        // Wrapping arithmetic: both clocks count ns from unrelated origins.
        best.offset_ns = static_cast<int64_t>(static_cast<uint64_t>(mid) - r.device);
        best.uncertainty_ns = (width + 1) / 2;
    }
    return best;
}

std::string kernel_display_name(std::string_view mangled) {
    std::string name(mangled);
    int status = -1;
    char* demangled = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
    if (status != 0 || !demangled) {
        std::free(demangled);
        return name;
    }
    name = demangled;
    std::free(demangled);
    // The parameter list: the bracketed group that ends the name.
    if (!name.empty() && name.back() == ')') {
        int depth = 0;
        for (size_t i = name.size(); i-- > 0;) {
            if (name[i] == ')') ++depth;
            if (name[i] == '(' && --depth == 0) {
                name.resize(i);
                break;
            }
        }
    }
    // The return type of a template function: what comes before the last space outside of any
    // brackets ("void ns::f<float, 8>"; not the one in "(anonymous namespace)").
    int depth = 0;
    size_t cut = std::string::npos;
    for (size_t i = 0; i < name.size(); ++i) {
        const char ch = name[i];
        if (ch == '<' || ch == '(') ++depth;
        if (ch == '>' || ch == ')') --depth;
        if (ch == ' ' && depth == 0) cut = i;
    }
    if (cut != std::string::npos) name.erase(0, cut + 1);
    return name;
}

namespace {
int64_t whole_bytes(double b) {
    if (!(b > 0)) return 0;  // NaN too
    if (b >= 9.2e18) return std::numeric_limits<int64_t>::max();
    return std::llround(b);
}

int32_t clamp_threads(int64_t threads) {
    return static_cast<int32_t>(std::clamp<int64_t>(threads, 0, INT32_MAX));
}
}  // namespace

Event gpu_activity_event(const GpuActivity& a, const GpuScopeKey& scope, std::string_view op_name,
                         const ClockOffset& clock) {
    Event e;
    e.kind = EventKind::kKernel;
    e.step = scope.step;
    e.t_ns = clock.to_host(a.start_ns);
    e.wide = a.end_ns > a.start_ns ? static_cast<int64_t>(a.end_ns - a.start_ns) : 0;
    e.a = scope.layer;
    e.c = gpu_lane(a.stream);
    std::string what;
    switch (a.kind) {
        case GpuActivityKind::kKernel:
            what = kernel_display_name(a.name);
            e.b = clamp_threads(a.threads);
            break;
        case GpuActivityKind::kMemcpy:
            what = "memcpy " + std::string(copy_kind_name(a.copy));
            e.value = static_cast<double>(a.bytes);
            break;
        case GpuActivityKind::kMemset:
            what = "memset";
            e.value = static_cast<double>(a.bytes);
            break;
    }
    e.text = gpu_kernel_text(op_name, what);
    return e;
}

Event hbm_sample_event(const PmSample& s, const ClockOffset& clock) {
    Event e;
    e.kind = EventKind::kHbmSample;
    e.t_ns = clock.to_host(s.start_ns);
    e.wide = clock.to_host(std::max(s.end_ns, s.start_ns));
    HbmBytes bytes{whole_bytes(s.bytes_read), whole_bytes(s.bytes_written)};
    e.value = static_cast<double>(bytes.read) + static_cast<double>(bytes.written);
    encode_hbm_bytes(bytes, e.payload);
    return e;
}

}  // namespace kvscope
