#include "sessions/step_summary.h"

namespace kvscope {

void summarize_step(const std::vector<Event>& events, StepSummary& s) {
    if (events.empty()) return;
    s.step = events.front().step;
    s.first_seq = events.front().seq_no;
    s.last_seq = events.back().seq_no;
    s.t_begin_ns = events.front().t_ns;
    s.t_end_ns = events.back().t_ns;
    s.n_events = static_cast<int32_t>(events.size());
    for (const Event& e : events) {
        switch (e.kind) {
            case EventKind::kStepBegin:
                s.prefill_tokens = e.b;
                s.decode_tokens = e.c;
                break;
            case EventKind::kStepEnd:
                s.running = e.a;
                s.waiting = e.b;
                s.swapped = e.c;
                s.step_seconds = e.value;
                break;
            case EventKind::kKernel: {
                if (e.payload.empty()) {  // a payload left over did not decode
                    const KernelCost& k = e.cost;
                    s.weight_bytes += k.weight_bytes;
                    s.kv_read_bytes += k.kv_read_bytes;
                    s.kv_written_bytes += k.kv_written_bytes;
                    s.activation_bytes += k.activation_bytes;
                }
                // Host ops run one after another; a GPU's kernels overlap the host, so only the
                // host lane's time counts as covering the step.
                if (e.c == 0 && e.wide > 0) s.ops_ns += e.wide;
                break;
            }
            case EventKind::kPhase:
                if (e.a >= 0 && e.a < 6) s.phase_ns[e.a] += e.wide;
                break;
            case EventKind::kMetric:
                if (e.text == "blocks_used")
                    s.blocks_used = static_cast<int32_t>(e.value);
                else if (e.text == "blocks_cached")
                    s.blocks_cached = static_cast<int32_t>(e.value);
                else if (e.text == "fragmentation")
                    s.fragmentation = e.value;
                else if (e.text == "internal_fragmentation")
                    s.internal_fragmentation = e.value;
                else if (e.text == "external_fragmentation")
                    s.external_fragmentation = e.value;
                else if (e.text == "utilization")
                    s.utilization = e.value;
                else if (e.text == "prefix_hit_rate")
                    s.prefix_hit_rate = e.value;
                break;
            default:
                break;
        }
    }
}

}  // namespace kvscope
