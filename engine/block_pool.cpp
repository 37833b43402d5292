#include "engine/block_pool.h"

#include <cassert>

namespace kvscope {

BlockPool::BlockPool(int32_t num_blocks)
    : refcount_(static_cast<size_t>(num_blocks), 0),
      prev_(static_cast<size_t>(num_blocks), -1),
      next_(static_cast<size_t>(num_blocks), -1),
      hash_(static_cast<size_t>(num_blocks)) {
    for (BlockId b = 0; b < num_blocks; ++b)
        push_back(b);
}

void BlockPool::push_back(BlockId b) {
    auto i = static_cast<size_t>(b);
    prev_[i] = tail_;
    next_[i] = -1;
    if (tail_ >= 0)
        next_[static_cast<size_t>(tail_)] = b;
    else
        head_ = b;
    tail_ = b;
    ++num_free_;
    if (hash_[i]) ++num_cached_free_;
}

void BlockPool::unlink(BlockId b) {
    auto i = static_cast<size_t>(b);
    if (prev_[i] >= 0)
        next_[static_cast<size_t>(prev_[i])] = next_[i];
    else
        head_ = next_[i];
    if (next_[i] >= 0)
        prev_[static_cast<size_t>(next_[i])] = prev_[i];
    else
        tail_ = prev_[i];
    prev_[i] = next_[i] = -1;
    --num_free_;
    if (hash_[i]) --num_cached_free_;
}

std::optional<BlockId> BlockPool::allocate(std::optional<BlockHash>* evicted_hash) {
    if (evicted_hash) evicted_hash->reset();
    if (head_ < 0) return std::nullopt;
    BlockId b = head_;
    unlink(b);
    auto i = static_cast<size_t>(b);
    if (hash_[i]) {
        by_hash_.erase(*hash_[i]);
        if (evicted_hash) *evicted_hash = hash_[i];
        hash_[i].reset();
    }
    refcount_[i] = 1;
    return b;
}

void BlockPool::retain(BlockId b) {
    auto i = static_cast<size_t>(b);
    if (refcount_[i] == 0) unlink(b);
    ++refcount_[i];
}

void BlockPool::take(BlockId b) {
    auto i = static_cast<size_t>(b);
    unlink(b);
    if (hash_[i]) {
        by_hash_.erase(*hash_[i]);
        hash_[i].reset();
    }
    refcount_[i] = 1;
}

bool BlockPool::release(BlockId b) {
    auto i = static_cast<size_t>(b);
    assert(refcount_[i] > 0 && "release of a free block");
    if (--refcount_[i] > 0) return false;
    push_back(b);
    return true;
}

void BlockPool::set_hash(BlockId b, BlockHash h) {
    auto i = static_cast<size_t>(b);
    if (hash_[i] == h) return;
    if (by_hash_.count(h)) return;  // an identical block is already cached: keep the first
    bool was_cached = hash_[i].has_value();
    if (was_cached) by_hash_.erase(*hash_[i]);
    hash_[i] = h;
    by_hash_[h] = b;
    if (refcount_[i] == 0 && !was_cached) ++num_cached_free_;
}

std::optional<BlockHash> BlockPool::hash_of(BlockId b) const {
    return hash_[static_cast<size_t>(b)];
}

std::optional<BlockId> BlockPool::lookup(BlockHash h) const {
    auto it = by_hash_.find(h);
    if (it == by_hash_.end()) return std::nullopt;
    return it->second;
}

void BlockPool::clear_hashes() {
    for (auto& h : hash_)
        h.reset();
    by_hash_.clear();
    num_cached_free_ = 0;
}

std::vector<BlockId> BlockPool::free_queue() const {
    std::vector<BlockId> out;
    for (BlockId b = head_; b >= 0; b = next_[static_cast<size_t>(b)])
        out.push_back(b);
    return out;
}

}  // namespace kvscope
