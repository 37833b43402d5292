#pragma once
// The physical block pool of the paged KV cache: which blocks are free, who holds how many
// references to each, and which free blocks still carry a cached prefix hash.
//
// Free blocks sit in one queue ordered by the time they were released (oldest first), as in
// vLLM: allocation takes the oldest, so a block that still holds a cached prefix survives as
// long as possible (LRU eviction of cached blocks falls out of the queue order). A cached free
// block can be revived from the middle of the queue in O(1).

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

namespace kvscope {

using BlockId = int32_t;
using BlockHash = uint64_t;

class BlockPool {
  public:
    explicit BlockPool(int32_t num_blocks);

    int32_t num_blocks() const { return static_cast<int32_t>(refcount_.size()); }
    int32_t num_free() const { return num_free_; }  // includes cached-but-free blocks
    int32_t num_used() const { return num_blocks() - num_free_; }
    int32_t num_cached_free() const { return num_cached_free_; }

    // Takes the least recently released free block with refcount 1. If it carried a hash,
    // that cache entry is dropped and reported through `evicted_hash`.
    std::optional<BlockId> allocate(std::optional<BlockHash>* evicted_hash = nullptr);
    void retain(BlockId b);  // refcount + 1; revives a cached free block
    // Takes a specific free block (contiguous reservations); drops its cached hash.
    void take(BlockId b);
    // refcount - 1; returns true when the block became free.
    bool release(BlockId b);

    int32_t refcount(BlockId b) const { return refcount_[static_cast<size_t>(b)]; }
    bool is_free(BlockId b) const { return refcount(b) == 0; }

    // Prefix cache: a full block may be registered under the hash of its contents.
    void set_hash(BlockId b, BlockHash h);
    std::optional<BlockHash> hash_of(BlockId b) const;
    std::optional<BlockId> lookup(BlockHash h) const;
    // Drops every hash (used when prefix caching is switched off).
    void clear_hashes();

    // Free blocks in allocation order (for tests and keyframes).
    std::vector<BlockId> free_queue() const;

  private:
    void unlink(BlockId b);
    void push_back(BlockId b);

    std::vector<int32_t> refcount_;
    std::vector<BlockId> prev_, next_;  // intrusive free queue; -1 terminates
    BlockId head_ = -1, tail_ = -1;
    int32_t num_free_ = 0;
    int32_t num_cached_free_ = 0;
    std::vector<std::optional<BlockHash>> hash_;
    std::unordered_map<BlockHash, BlockId> by_hash_;
};

}  // namespace kvscope
