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
};

// Folds the events of one step into its summary.
void summarize_step(const std::vector<Event>& events, StepSummary& out);

}  // namespace kvscope
