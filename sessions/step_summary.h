#pragma once
// Per-step scalars of a run: what the timeline tracks and the memory plots draw.

#include <cstdint>
#include <vector>

#include "probes/event.h"

namespace kvscope {

struct StepSummary {
    int64_t step = 0;
    uint64_t first_seq = 0, last_seq = 0;
    int64_t t_begin_ns = 0, t_end_ns = 0;
    int32_t n_events = 0;
    int32_t running = 0, waiting = 0, swapped = 0;
    int32_t prefill_tokens = 0, decode_tokens = 0;
    int32_t blocks_used = 0, blocks_cached = 0;
    double fragmentation = 0, internal_fragmentation = 0, external_fragmentation = 0;
    double utilization = 0, prefix_hit_rate = 0;
    double step_seconds = 0;
    // Phase durations (ns) by Phase id, from phase events.
    int64_t phase_ns[6] = {0, 0, 0, 0, 0, 0};
    // Where the bytes went, summed over the step's kernel events (ops), and the time the ops
    // cover (the rest of step_seconds is "other").
    int64_t weight_bytes = 0, kv_read_bytes = 0, kv_written_bytes = 0, activation_bytes = 0;
    int64_t ops_ns = 0;
    // The split as a KernelCost (no flops: the step row keeps bytes only).
    KernelCost moved() const {
        KernelCost k;
        k.weight_bytes = weight_bytes;
        k.kv_read_bytes = kv_read_bytes;
        k.kv_written_bytes = kv_written_bytes;
        k.activation_bytes = activation_bytes;
        return k;
    }
    int64_t bytes_moved() const { return moved().bytes(); }
    // Achieved bandwidth: bytes moved over the step's wall time (0 without either).
    double bandwidth_gbps() const {
        return step_seconds > 0 ? static_cast<double>(bytes_moved()) / step_seconds / 1e9 : 0.0;
    }
};

// Folds the events of one step into its summary.
void summarize_step(const std::vector<Event>& events, StepSummary& out);

}  // namespace kvscope
