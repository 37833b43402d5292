#include "sessions/attached_history.h"

#include <algorithm>

namespace kvscope {

AttachedHistory::AttachedHistory(const RunInfo& info)
    : refs_(static_cast<size_t>(std::max(info.num_blocks, 0)), 0),
      stored_step_(refs_.size(), -1),
      stored_ns_(refs_.size(), -1),
      clearing_(info.publishers.size(), 0) {}

void AttachedHistory::count(int64_t step, bool is_store) {
    auto open = [this](int64_t s) {
        steps.push_back(s);
        stored.push_back(0);
        gone.push_back(0);
    };
    // Quiet steps between two busy ones get zeros (their ends only, for a long quiet stretch),
    // so a plot of these drops to 0 there instead of joining one burst to the next.
    if (!steps.empty() && steps.back() < step - 1) {
        open(steps.back() + 1);
        if (steps.back() < step - 1) open(step - 1);
    }
    if (steps.empty() || steps.back() != step) open(step);
    (is_store ? stored : gone).back() += 1;
}

void AttachedHistory::add(const std::vector<Event>& events) {
    for (const Event& e : events) {
        const bool in_pool = e.block >= 0 && static_cast<size_t>(e.block) < refs_.size();
        const auto b = static_cast<size_t>(e.block);
        const bool known_publisher = e.a >= 0 && static_cast<size_t>(e.a) < clearing_.size();
        switch (e.kind) {
            case EventKind::kKvStored:
                if (!in_pool || refs_[b]++ > 0) break;  // another reference to a held block
                stored_step_[b] = e.step;
                stored_ns_[b] = e.t_ns;
                count(e.step, true);
                break;
            case EventKind::kKvCleared:
                // The attacher follows the marker with a kv_removed for each block it held.
                if (known_publisher) clearing_[static_cast<size_t>(e.a)] = std::max(e.c, 0);
                break;
            case EventKind::kKvRemoved: {
                if (!in_pool) break;
                bool cleared = false;
                if (known_publisher && clearing_[static_cast<size_t>(e.a)] > 0) {
                    --clearing_[static_cast<size_t>(e.a)];
                    cleared = true;
                }
                refs_[b] = std::max(e.c, 0);
                if (refs_[b] > 0) break;  // a reference dropped; the block is still held
                AttachedRemoval& r = removals.emplace_back();
                r.step = e.step;
                r.hash = static_cast<uint64_t>(e.wide);
                r.block = e.block;
                r.publisher = e.a;
                r.medium = static_cast<KvMedium>(std::clamp(e.b, 0, kNumKvMedia - 1));
                r.cleared = cleared;
                r.stored_step = stored_step_[b];
                if (stored_ns_[b] >= 0 && e.t_ns >= stored_ns_[b])
                    r.age_ns = e.t_ns - stored_ns_[b];
                stored_step_[b] = stored_ns_[b] = -1;
                count(e.step, false);
                break;
            }
            default:
                break;
        }
    }
}

}  // namespace kvscope
