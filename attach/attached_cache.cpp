#include "attach/attached_cache.h"

#include <algorithm>
#include <cstddef>

namespace kvscope::attach {

AttachedCache::AttachedCache(int32_t publisher, int32_t first_block, int32_t capacity)
    : publisher_(publisher),
      first_block_(first_block),
      capacity_(capacity),
      by_medium_(kNumKvMedia, 0) {
    slots_.reserve(static_cast<size_t>(std::min(capacity, 1 << 16)));
}

int32_t AttachedCache::take_slot() {
    if (!free_.empty()) {
        const int32_t b = free_.back();
        free_.pop_back();
        return b;
    }
    return never_used_ < capacity_ ? first_block_ + never_used_++ : -1;
}

Event& AttachedCache::block_event(EventKind kind, int32_t block, KvMedium medium, uint64_t hash,
                                  std::vector<Event>& out) const {
    Event& e = out.emplace_back();
    e.kind = kind;
    e.block = block;
    e.a = publisher_;
    e.b = static_cast<int32_t>(medium);
    e.wide = static_cast<int64_t>(hash);
    return e;
}

GroupCounts& AttachedCache::group(int32_t g) {
    const auto at = static_cast<size_t>(g + 1);
    if (groups_.size() <= at) groups_.resize(at + 1);
    groups_[at].group = g;
    return groups_[at];
}

std::vector<GroupCounts> AttachedCache::groups() const {
    std::vector<GroupCounts> out;
    for (const GroupCounts& g : groups_)
        if (g.blocks_stored > 0) out.push_back(g);
    return out;
}

void AttachedCache::on_slot_taken(const Key& key) {
    const uint64_t k = mixed(key);
    if (dropped_.find(k) || dropped_before_.find(k)) ++counts_.stored_again;
    ++by_medium_[static_cast<size_t>(key.medium)];
    ++group(key.group).held;
    bool added = false;
    if (++slots_of_hash_.get(key.hash, added) == 1 && changes_)
        changes_->push_back({key.hash, true});
}

void AttachedCache::on_slot_freed(const Key& key) {
    if (dropped_.size() >= kStoredBeforeRemembered) {
        dropped_before_ = std::move(dropped_);
        dropped_.clear();
    }
    bool added = false;
    dropped_.get(mixed(key), added);
    --by_medium_[static_cast<size_t>(key.medium)];
    --group(key.group).held;
    int32_t* n = slots_of_hash_.find(key.hash);
    if (n && --*n == 0) {
        slots_of_hash_.erase(key.hash);
        if (changes_) changes_->push_back({key.hash, false});
    }
}

void AttachedCache::store(const KvEvent& ev, size_t i, std::vector<Event>& out) {
    const uint64_t hash = ev.block_hashes[i];
    const Key key{hash, ev.medium, ev.group_idx};
    auto [it, added] = slots_.try_emplace(key);
    Slot& slot = it->second;
    ++counts_.blocks_stored;
    GroupCounts& g = group(ev.group_idx);
    ++g.blocks_stored;
    if (!ev.group_kind.empty()) g.kind = ev.group_kind;
    if (ev.sliding_window >= 0) g.sliding_window = ev.sliding_window;
    if (!added) {  // stored again: one more reference to the same slot
        ++slot.refs;
        block_event(EventKind::kKvStored, slot.block, ev.medium, hash, out);
        return;
    }
    slot.block = take_slot();
    if (slot.block < 0) {
        slots_.erase(it);
        ++counts_.overflow;
        return;
    }
    slot.refs = 1;
    on_slot_taken(key);

    // A block's tokens: its share of token_ids, token_width ids a position (placeholder stores
    // from offloading have none).
    const size_t width = static_cast<size_t>(std::max(ev.token_width, 1));
    const size_t per = ev.block_size > 0 ? static_cast<size_t>(ev.block_size) * width : 0;
    const size_t begin = std::min(i * per, ev.token_ids.size());
    const size_t end = std::min(begin + per, ev.token_ids.size());
    Event& e = block_event(EventKind::kKvStored, slot.block, ev.medium, hash, out);
    e.c = static_cast<int32_t>((end - begin) / width);
    StoredBlock more;
    more.token_pairs = width == 2;
    more.group = ev.group_idx;
    more.group_kind = ev.group_kind;
    more.sliding_window = ev.sliding_window;
    if (ev.digest_size > 0 && ev.digests.size() >= (i + 1) * ev.digest_size)
        more.digest.assign(
            ev.digests.begin() + static_cast<std::ptrdiff_t>(i * ev.digest_size),
            ev.digests.begin() + static_cast<std::ptrdiff_t>((i + 1) * ev.digest_size));
    encode_stored_block(i > 0 || ev.has_parent, i > 0 ? ev.block_hashes[i - 1] : ev.parent_hash,
                        ev.token_ids.data() + begin, end - begin, e.payload, &more);
}

void AttachedCache::remove(const Key& key, std::vector<Event>& out) {
    auto it = slots_.find(key);
    if (it == slots_.end()) {
        ++counts_.removed_unknown;
        return;
    }
    ++counts_.blocks_removed;
    ++group(key.group).blocks_removed;
    Slot& slot = it->second;
    block_event(EventKind::kKvRemoved, slot.block, key.medium, key.hash, out).c = --slot.refs;
    if (slot.refs == 0) {
        free_.push_back(slot.block);
        slots_.erase(it);
        ++counts_.churn;
        on_slot_freed(key);
    }
}

void AttachedCache::apply(const KvEvent& ev, std::vector<Event>& out) {
    switch (ev.type) {
        case KvEventType::kBlockStored:
            for (size_t i = 0; i < ev.block_hashes.size(); ++i)
                store(ev, i, out);
            break;
        case KvEventType::kBlockRemoved:
            for (uint64_t h : ev.block_hashes)
                remove(Key{h, ev.medium, ev.group_idx}, out);
            break;
        case KvEventType::kAllBlocksCleared:
            clear(out);
            break;
    }
}

void AttachedCache::apply(const KvEventBatch& batch, std::vector<Event>& out) {
    for (const KvEvent& ev : batch.events)
        apply(ev, out);
}

void AttachedCache::clear(std::vector<Event>& out, bool evicted) {
    ++counts_.clears;
    Event& marker = out.emplace_back();
    marker.kind = EventKind::kKvCleared;
    marker.a = publisher_;
    marker.c = held();
    if (slots_.empty()) return;  // nothing held: nothing to do, whatever the pool's size
    // Lowest slot first, so a replay frees them in a stable order.
    std::vector<std::pair<int32_t, Key>> held_slots;
    held_slots.reserve(slots_.size());
    for (const auto& [key, slot] : slots_)
        held_slots.emplace_back(slot.block, key);
    std::sort(held_slots.begin(), held_slots.end(),
              [](const auto& x, const auto& y) { return x.first < y.first; });
    for (const auto& [block, key] : held_slots)
        block_event(EventKind::kKvRemoved, block, key.medium, key.hash, out).c = 0;
    if (evicted) counts_.churn += static_cast<int64_t>(held_slots.size());
    // Freed one by one (never slots_.clear(), which costs its whole bucket array), so a hash
    // held on two media is reported gone once, with the last.
    for (const auto& [block, key] : held_slots) {
        slots_.erase(key);
        on_slot_freed(key);
    }
    // Every slot used so far is free again: back to handing them out in order.
    free_.clear();
    never_used_ = 0;
}

}  // namespace kvscope::attach
