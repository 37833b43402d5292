#include "attach/attached_cache.h"

#include <algorithm>
#include <cstddef>

namespace kvscope::attach {

AttachedCache::AttachedCache(int32_t publisher, int32_t first_block, int32_t capacity)
    : publisher_(publisher),
      first_block_(first_block),
      capacity_(capacity),
      by_medium_(kNumKvMedia, 0) {
    free_.reserve(static_cast<size_t>(capacity));
    free_all_slots();
    slots_.reserve(static_cast<size_t>(std::min(capacity, 1 << 16)));
}

void AttachedCache::free_all_slots() {
    free_.clear();
    for (int32_t b = first_block_ + capacity_ - 1; b >= first_block_; --b)
        free_.push_back(b);
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

bool AttachedCache::held_elsewhere(uint64_t hash, KvMedium medium) const {
    const uint32_t others = media_seen_ & ~(1u << static_cast<uint32_t>(medium));
    for (uint32_t m = 0; m < static_cast<uint32_t>(kNumKvMedia); ++m)
        if ((others >> m & 1u) && slots_.count(Key{hash, static_cast<KvMedium>(m)})) return true;
    return false;
}

void AttachedCache::on_slot_taken(uint64_t hash, KvMedium medium) {
    const uint64_t key = key_of(hash, medium);
    if (dropped_.find(key) || dropped_before_.find(key)) ++counts_.stored_again;
    media_seen_ |= 1u << static_cast<uint32_t>(medium);
    if (changes_ && !held_elsewhere(hash, medium)) changes_->push_back({hash, true});
}

void AttachedCache::on_slot_freed(uint64_t hash, KvMedium medium) {
    if (dropped_.size() >= kStoredBeforeRemembered) {
        dropped_before_ = std::move(dropped_);
        dropped_.clear();
    }
    bool added = false;
    dropped_.get(key_of(hash, medium), added);
    if (changes_ && !held_elsewhere(hash, medium)) changes_->push_back({hash, false});
}

void AttachedCache::store(const KvEvent& ev, size_t i, std::vector<Event>& out) {
    const uint64_t hash = ev.block_hashes[i];
    auto [it, added] = slots_.try_emplace(Key{hash, ev.medium});
    Slot& slot = it->second;
    ++counts_.blocks_stored;
    if (!added) {  // stored again: one more reference to the same slot
        ++slot.refs;
        block_event(EventKind::kKvStored, slot.block, ev.medium, hash, out);
        return;
    }
    if (free_.empty()) {
        slots_.erase(it);
        ++counts_.overflow;
        return;
    }
    slot.block = free_.back();
    free_.pop_back();
    slot.refs = 1;
    ++by_medium_[static_cast<size_t>(ev.medium)];
    on_slot_taken(hash, ev.medium);

    // A block's tokens: its share of token_ids (placeholder stores from offloading have none).
    const size_t per = ev.block_size > 0 ? static_cast<size_t>(ev.block_size) : 0;
    const size_t begin = std::min(i * per, ev.token_ids.size());
    const size_t end = std::min(begin + per, ev.token_ids.size());
    Event& e = block_event(EventKind::kKvStored, slot.block, ev.medium, hash, out);
    e.c = static_cast<int32_t>(end - begin);
    encode_stored_block(i > 0 || ev.has_parent, i > 0 ? ev.block_hashes[i - 1] : ev.parent_hash,
                        ev.token_ids.data() + begin, end - begin, e.payload);
}

void AttachedCache::remove(uint64_t hash, KvMedium medium, std::vector<Event>& out) {
    auto it = slots_.find(Key{hash, medium});
    if (it == slots_.end()) {
        ++counts_.removed_unknown;
        return;
    }
    ++counts_.blocks_removed;
    Slot& slot = it->second;
    block_event(EventKind::kKvRemoved, slot.block, medium, hash, out).c = --slot.refs;
    if (slot.refs == 0) {
        free_.push_back(slot.block);
        --by_medium_[static_cast<size_t>(medium)];
        slots_.erase(it);
        ++counts_.churn;
        on_slot_freed(hash, medium);
    }
}

void AttachedCache::apply(const KvEventBatch& batch, std::vector<Event>& out) {
    for (const KvEvent& ev : batch.events) {
        switch (ev.type) {
            case KvEventType::kBlockStored:
                for (size_t i = 0; i < ev.block_hashes.size(); ++i)
                    store(ev, i, out);
                break;
            case KvEventType::kBlockRemoved:
                for (uint64_t h : ev.block_hashes)
                    remove(h, ev.medium, out);
                break;
            case KvEventType::kAllBlocksCleared:
                clear(out);
                break;
        }
    }
}

void AttachedCache::clear(std::vector<Event>& out, bool evicted) {
    ++counts_.clears;
    Event& marker = out.emplace_back();
    marker.kind = EventKind::kKvCleared;
    marker.a = publisher_;
    marker.c = held();
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
    // Freed one by one, so a hash held on two media is reported gone once, with the last.
    for (const auto& [block, key] : held_slots) {
        slots_.erase(key);
        on_slot_freed(key.hash, key.medium);
    }
    slots_.clear();
    free_all_slots();
    std::fill(by_medium_.begin(), by_medium_.end(), 0);
}

}  // namespace kvscope::attach
