#pragma once
// One publisher's KV cache as its events describe it, turned into kvscope's block events. The
// deployment names blocks by hash; each (medium, hash) it holds gets a slot in this publisher's
// range of the session's pool, so the block map, the Timeline and replay show it like any
// other block. Offloading may store a hash again before removing it: the slot counts
// references and is freed when the last goes.

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "attach/kv_events.h"
#include "probes/event.h"

namespace kvscope::attach {

struct CacheCounts {
    int64_t blocks_stored = 0;    // block hashes stored (each hash of a BlockStored)
    int64_t blocks_removed = 0;   // block hashes removed that were held
    int64_t removed_unknown = 0;  // removals of hashes never seen stored (joined late, or lost)
    int64_t overflow = 0;         // stores dropped: this publisher's range of the pool was full
    int64_t clears = 0;
};

class AttachedCache {
  public:
    // Slots [first_block, first_block + capacity) of the pool belong to `publisher`.
    AttachedCache(int32_t publisher, int32_t first_block, int32_t capacity);

    // Appends the kvscope events for one decoded batch to `out` (step and times left to the
    // caller; t_ns is left 0 for the recorder to stamp).
    void apply(const KvEventBatch& batch, std::vector<Event>& out);
    // Everything this publisher held is gone (AllBlocksCleared, or the publisher restarted).
    void clear(std::vector<Event>& out);

    int32_t held() const { return static_cast<int32_t>(slots_.size()); }
    // Blocks held per medium.
    const std::vector<int32_t>& held_by_medium() const { return by_medium_; }
    const CacheCounts& counts() const { return counts_; }

  private:
    struct Key {
        uint64_t hash;
        KvMedium medium;
        bool operator==(const Key&) const = default;
    };
    struct KeyHash {
        size_t operator()(const Key& k) const {
            return static_cast<size_t>(k.hash ^
                                       (static_cast<uint64_t>(k.medium) * 0x9E3779B97F4A7C15ull));
        }
    };
    struct Slot {
        int32_t block = -1;
        int32_t refs = 0;
    };
    void store(const KvEvent& ev, size_t i, std::vector<Event>& out);
    void remove(uint64_t hash, KvMedium medium, std::vector<Event>& out);
    // Appends a kv_* event naming one of this publisher's slots.
    Event& block_event(EventKind kind, int32_t block, KvMedium medium, uint64_t hash,
                       std::vector<Event>& out) const;
    void free_all_slots();  // every slot free, the lowest on top

    int32_t publisher_, first_block_, capacity_;
    std::unordered_map<Key, Slot, KeyHash> slots_;
    std::vector<int32_t> free_;  // free slots, the lowest on top
    std::vector<int32_t> by_medium_;
    CacheCounts counts_;
};

}  // namespace kvscope::attach
