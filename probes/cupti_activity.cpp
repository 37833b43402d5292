#include "probes/cupti_activity.h"

#include <cupti.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "probes/cupti_errors.h"

namespace kvscope {

namespace {

// CUPTI's documentation suggests 1 to 10 MB: fewer, larger buffers mean fewer hand-overs.
constexpr size_t kBufferBytes = size_t{4} << 20;
// Ours among the kinds CUPTI offers for external ids; the others may be another tool's.
constexpr CUpti_ExternalCorrelationKind kScopeKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1;
// Enabled in this order, disabled in reverse. The API kinds only make CUPTI emit the external
// correlation records (each one precedes the API record it belongs to).
constexpr CUpti_ActivityKind kKinds[] = {
    CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
    CUPTI_ACTIVITY_KIND_RUNTIME,
    CUPTI_ACTIVITY_KIND_DRIVER,
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
    CUPTI_ACTIVITY_KIND_MEMCPY,
    CUPTI_ACTIVITY_KIND_MEMSET,
};

// CUPTI's callbacks carry no user pointer: the running tracer's sink is global.
std::mutex g_mutex;
GpuCorrelator* g_sink = nullptr;      // guarded by g_mutex
bool g_callbacks_registered = false;  // only start() touches it, one at a time
std::atomic<uint64_t> g_dropped{0};

GpuCopyKind copy_kind(uint8_t kind) {
    switch (static_cast<CUpti_ActivityMemcpyKind>(kind)) {
        case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
            return GpuCopyKind::kHtoD;
        case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
            return GpuCopyKind::kDtoH;
        case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA:
            return GpuCopyKind::kHtoA;
        case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH:
            return GpuCopyKind::kAtoH;
        case CUPTI_ACTIVITY_MEMCPY_KIND_ATOA:
            return GpuCopyKind::kAtoA;
        case CUPTI_ACTIVITY_MEMCPY_KIND_ATOD:
            return GpuCopyKind::kAtoD;
        case CUPTI_ACTIVITY_MEMCPY_KIND_DTOA:
            return GpuCopyKind::kDtoA;
        case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
            return GpuCopyKind::kDtoD;
        case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH:
            return GpuCopyKind::kHtoH;
        case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP:
            return GpuCopyKind::kPtoP;
        default:
            return GpuCopyKind::kUnknown;
    }
}

// Grid x block, saturating: a grid of 2^31 blocks of 1024 threads is legal.
int64_t launched_threads(const CUpti_ActivityKernel10& k) {
    double n = 1;
    for (int32_t d : {k.gridX, k.gridY, k.gridZ, k.blockX, k.blockY, k.blockZ})
        n *= d > 0 ? d : 0;
    return n >= 9.2e18 ? INT64_MAX : static_cast<int64_t>(n);
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(ACTIVITY_RECORD_ALIGNMENT, kBufferBytes));
    *size = *buffer ? kBufferBytes : 0;
    *max_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream, uint8_t* buffer, size_t,
                               size_t valid) {
    std::vector<GpuActivity> activities;
    std::vector<GpuScopeLink> links;
    CUpti_Activity* record = nullptr;
    while (valid > 0 && cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
        switch (record->kind) {
            case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
                // The versioned struct: in CUDA 13 the unversioned name is an old layout.
                const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
                GpuActivity a;
                a.kind = GpuActivityKind::kKernel;
                a.name = k->name ? k->name : "unknown kernel";
                a.start_ns = k->start;
                a.end_ns = k->end;
                a.stream = k->streamId;
                a.correlation = k->correlationId;
                a.graph = k->graphId;
                a.threads = launched_threads(*k);
                activities.push_back(std::move(a));
                break;
            }
            case CUPTI_ACTIVITY_KIND_MEMCPY: {
                const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
                GpuActivity a;
                a.kind = GpuActivityKind::kMemcpy;
                a.copy = copy_kind(m->copyKind);
                a.bytes = m->bytes;
                a.start_ns = m->start;
                a.end_ns = m->end;
                a.stream = m->streamId;
                a.correlation = m->correlationId;
                a.runtime_correlation = m->runtimeCorrelationId;
                a.graph = m->graphId;
                activities.push_back(std::move(a));
                break;
            }
            case CUPTI_ACTIVITY_KIND_MEMSET: {
                const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
                GpuActivity a;
                a.kind = GpuActivityKind::kMemset;
                a.bytes = m->bytes;
                a.start_ns = m->start;
                a.end_ns = m->end;
                a.stream = m->streamId;
                a.correlation = m->correlationId;
                a.graph = m->graphId;
                activities.push_back(std::move(a));
                break;
            }
            case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
                const auto* x = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(record);
                if (x->externalKind == kScopeKind)
                    links.push_back({x->correlationId, x->externalId});
                break;
            }
            default:  // the API records: read only for the links before them
                break;
        }
    }
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(context, stream, &dropped) == CUPTI_SUCCESS)
        g_dropped += dropped;
    std::free(buffer);
    std::lock_guard lock(g_mutex);
    if (!g_sink) return;
    // Links first: a take() between the two calls then never sees a record without its link.
    g_sink->add_links(links);
    g_sink->add_activities(std::move(activities));
}

}  // namespace

Result<std::unique_ptr<CuptiActivity>> CuptiActivity::start(GpuCorrelator* sink) {
    {
        std::lock_guard lock(g_mutex);
        if (g_sink) return Error{"CUPTI activity trace: already running in this process"};
        g_sink = sink;
        g_dropped = 0;
    }
    // Not under the lock: CUPTI may hand a buffer over from inside any of its calls.
    auto fail = [](std::string message) {
        std::lock_guard lock(g_mutex);
        g_sink = nullptr;
        return Error{std::move(message)};
    };
    if (!g_callbacks_registered) {
        if (CUptiResult r = cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed);
            r != CUPTI_SUCCESS)
            return fail(cupti_failure("cuptiActivityRegisterCallbacks", r));
        g_callbacks_registered = true;
    }
    size_t enabled = 0;
    for (CUpti_ActivityKind kind : kKinds) {
        CUptiResult r = cuptiActivityEnable(kind);
        if (r != CUPTI_SUCCESS) {
            while (enabled > 0)
                (void)cuptiActivityDisable(kKinds[--enabled]);
            return fail(cupti_failure(
                "cuptiActivityEnable(kind " + std::to_string(static_cast<int>(kind)) + ")", r));
        }
        ++enabled;
    }
    return std::unique_ptr<CuptiActivity>(new CuptiActivity());
}

CuptiActivity::~CuptiActivity() {
    (void)stop();
}

void CuptiActivity::push(uint64_t external_id) {
    (void)cuptiActivityPushExternalCorrelationId(kScopeKind, external_id);
}

void CuptiActivity::pop() {
    uint64_t last = 0;
    (void)cuptiActivityPopExternalCorrelationId(kScopeKind, &last);
}

Status CuptiActivity::flush() {
    if (stopped_) return {};
    if (CUptiResult r = cuptiActivityFlushAll(0); r != CUPTI_SUCCESS)
        return Error{cupti_failure("cuptiActivityFlushAll", r)};
    return {};
}

Status CuptiActivity::stop() {
    if (stopped_) return {};
    stopped_ = true;
    Status status;
    if (CUptiResult r = cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED); r != CUPTI_SUCCESS)
        status = Error{cupti_failure("cuptiActivityFlushAll", r)};
    for (size_t i = std::size(kKinds); i-- > 0;)
        (void)cuptiActivityDisable(kKinds[i]);
    // Whatever CUPTI still held when the kinds went off.
    (void)cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    std::lock_guard lock(g_mutex);
    g_sink = nullptr;
    return status;
}

ClockOffset CuptiActivity::measure_clock() const {
    std::vector<ClockReading> readings;
    for (int i = 0; i < 5; ++i) {
        ClockReading r;
        r.host_before = host_now_ns();
        uint64_t t = 0;
        if (cuptiGetTimestamp(&t) != CUPTI_SUCCESS) continue;
        r.host_after = host_now_ns();
        r.device = t;
        readings.push_back(r);
    }
    return estimate_clock_offset(readings);
}

uint64_t CuptiActivity::dropped() const {
    return g_dropped.load();
}

}  // namespace kvscope
