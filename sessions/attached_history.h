#pragma once
// An attached deployment's blocks over the whole run, from its kv_* events: per step how many
// blocks were stored and how many went, and every block that went, with where it was and how
// long it had been held. The held counts per publisher and medium are the attach/<p>/<MEDIUM>
// metrics; this adds what happened between them. Built incrementally (a live recording grows),
// O(pool) memory plus one row per block gone.

#include <cstdint>
#include <vector>

#include "sessions/timeline_state.h"

namespace kvscope {

struct AttachedRemoval {
    int64_t step = 0;
    uint64_t hash = 0;
    int64_t stored_step = -1;  // the step its slot was taken (-1: before the events given)
    int64_t age_ns = -1;       // from that store to this removal (-1: unknown)
    int32_t block = -1;
    int32_t publisher = -1;
    KvMedium medium = KvMedium::kGpu;
    // Gone with everything its publisher held (AllBlocksCleared, or the publisher restarted),
    // not evicted on its own.
    bool cleared = false;
};

class AttachedHistory {
  public:
    explicit AttachedHistory(const RunInfo& info);
    // Folds in the events of the steps after those already added, in order.
    void add(const std::vector<Event>& events);

    // Steps with any kv_stored or kv_removed, ascending, and per such step the blocks taken
    // (slots newly holding a hash) and the blocks gone (slots whose last reference went).
    std::vector<int64_t> steps;
    std::vector<float> stored, gone;
    std::vector<AttachedRemoval> removals;  // in the order they happened

  private:
    void count(int64_t step, bool is_store);
    std::vector<int32_t> refs_;  // per slot
    std::vector<int64_t> stored_step_, stored_ns_;
    std::vector<int32_t> clearing_;  // per publisher: removals still to come from a kv_cleared
};

}  // namespace kvscope
