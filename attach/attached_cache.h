#pragma once
// One publisher's KV cache as its events describe it, turned into kvscope's block events. The
// deployment names blocks by hash; each (medium, cache group, hash) it holds gets a slot in this
// publisher's range of the session's pool, so the block map, the Timeline and replay show it
// like any other block (vLLM's hybrid cache stores one hash in its full-attention and its
// sliding-window groups: two blocks). Offloading may store a hash again before removing it:
// the slot counts references and is freed when the last goes. Everything it does costs time in
// proportion to the blocks it touches or holds, never to its share of the pool: an
// AllBlocksCleared of an empty cache is free however many slots the publisher has.
//
// It also keeps what the summary says of reuse: churn (blocks stored and gone again within the
// run) and stores of a hash this publisher had held before and dropped (a prefix the cache
// evicted and then computed or loaded again). Those hashes are remembered per medium, a bounded
// number of them (kStoredBeforeRemembered and at most as many again), so a long attach holds
// bounded memory: a re-store of a hash dropped longer ago than that is not counted.

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "attach/flat_u64.h"
#include "attach/kv_events.h"
#include "probes/event.h"

namespace kvscope::attach {

struct CacheCounts {
    int64_t blocks_stored = 0;    // block hashes stored (each hash of a BlockStored)
    int64_t blocks_removed = 0;   // block hashes removed that were held
    int64_t removed_unknown = 0;  // removals of hashes never seen stored (joined late, or lost)
    int64_t overflow = 0;         // stores dropped: this publisher's range of the pool was full
    int64_t clears = 0;
    // Blocks gone again: a (medium, hash) whose last reference a BlockRemoved or an
    // AllBlocksCleared dropped (a restart of the publisher is not counted: its cache was lost,
    // not evicted).
    int64_t churn = 0;
    // Stores of a (medium, hash) this publisher had held before and no longer held.
    int64_t stored_again = 0;
};

// Per cache group (vLLM's group_idx; -1 for blocks stored with none): what it is and its
// blocks.
struct GroupCounts {
    int32_t group = -1;
    std::string kind;  // kv_cache_spec_kind as last said, e.g. full_attention
    int32_t sliding_window = -1;
    int64_t blocks_stored = 0, blocks_removed = 0, held = 0;
};
// Group indices past this are refused by the decoder's caller as malformed (a cache has a few).
inline constexpr int32_t kMaxCacheGroups = 1024;

// A hash this publisher began to hold (on any medium or group: `held`) or no longer holds.
struct HeldChange {
    uint64_t hash;
    bool held;
};

// How many dropped (medium, hash) keys a publisher remembers at least, to tell a store of a
// hash it had before from a new one.
inline constexpr size_t kStoredBeforeRemembered = size_t{1} << 17;

class AttachedCache {
  public:
    // Slots [first_block, first_block + capacity) of the pool belong to `publisher`.
    AttachedCache(int32_t publisher, int32_t first_block, int32_t capacity);

    // Appends the kvscope events for one decoded batch to `out` (step and times left to the
    // caller; t_ns is left 0 for the recorder to stamp).
    void apply(const KvEventBatch& batch, std::vector<Event>& out);
    void apply(const KvEvent& event, std::vector<Event>& out);
    // Everything this publisher held is gone: AllBlocksCleared (`evicted`, counted as churn), or
    // the publisher restarted.
    void clear(std::vector<Event>& out, bool evicted = true);
    // When set, every hash this publisher begins or stops holding on any medium is appended
    // there (an attacher of several publishers finds the hashes they hold at once).
    void report_held_changes(std::vector<HeldChange>* changes) { changes_ = changes; }

    int32_t held() const { return static_cast<int32_t>(slots_.size()); }
    // The groups that have held blocks here, lowest index first.
    std::vector<GroupCounts> groups() const;
    // Blocks held per medium.
    const std::vector<int32_t>& held_by_medium() const { return by_medium_; }
    const CacheCounts& counts() const { return counts_; }

  private:
    struct Key {
        uint64_t hash;
        KvMedium medium;
        int32_t group;
        bool operator==(const Key&) const = default;
    };
    struct KeyHash {
        size_t operator()(const Key& k) const { return static_cast<size_t>(mixed(k)); }
    };
    // The key folded to 64 bits (the dropped keys' tables keep only this).
    static uint64_t mixed(const Key& k) {
        return k.hash ^ (static_cast<uint64_t>(k.medium) * 0x9E3779B97F4A7C15ull) ^
               (static_cast<uint64_t>(static_cast<uint32_t>(k.group) + 1) * 0xC2B2AE3D27D4EB4Full);
    }
    struct Slot {
        int32_t block = -1;
        int32_t refs = 0;
    };
    void store(const KvEvent& ev, size_t i, std::vector<Event>& out);
    void remove(const Key& key, std::vector<Event>& out);
    // Appends a kv_* event naming one of this publisher's slots.
    Event& block_event(EventKind kind, int32_t block, KvMedium medium, uint64_t hash,
                       std::vector<Event>& out) const;
    // A free slot, or -1 when every slot is taken. Slots never used are handed out in order
    // after the freed ones, so a fresh (or cleared) cache costs nothing per slot.
    int32_t take_slot();
    // A key got its first reference / lost its last.
    void on_slot_taken(const Key& key);
    void on_slot_freed(const Key& key);
    GroupCounts& group(int32_t g);

    int32_t publisher_, first_block_, capacity_;
    std::unordered_map<Key, Slot, KeyHash> slots_;
    std::vector<int32_t> free_;  // slots freed, to be used again before never-used ones
    int32_t never_used_ = 0;     // slots [first_block_ + never_used_, ...) never handed out
    std::vector<int32_t> by_medium_;
    std::vector<GroupCounts> groups_;  // index group + 1
    CacheCounts counts_;
    // Keys dropped, in two generations: when the newer is full it becomes the older and the
    // older is forgotten.
    FlatU64Map<uint8_t> dropped_, dropped_before_;
    // Per hash held: the slots holding it (media, groups), for the held changes.
    FlatU64Map<int32_t> slots_of_hash_;
    std::vector<HeldChange>* changes_ = nullptr;
};

}  // namespace kvscope::attach
