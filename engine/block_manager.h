#pragma once
// Per-sequence block tables over one BlockPool: growing a sequence, forking it (sharing its
// blocks), copy-on-write when a shared block is about to be written, prefix caching of full
// blocks by hash, contiguous reservations (the pre-PagedAttention allocator), and freeing.
// Every change to a table is reported as an event, so a recording can rebuild the tables.

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.h"
#include "engine/block_pool.h"
#include "engine/reporter.h"

namespace kvscope {

class KvBlockStore;

// logical block i of a sequence holds its tokens [i * block_size, (i + 1) * block_size).
struct BlockTable {
    std::vector<BlockId> blocks;  // -1: a block given back after token eviction emptied it
    int32_t num_tokens = 0;       // tokens whose K/V are (or are about to be) stored
    // Contiguous reservation: `blocks` is one run of ids reserved up front; it may hold more
    // blocks than num_tokens needs.
    bool contiguous = false;
    // Hash chain of the full blocks whose K/V are computed (prefix caching).
    std::vector<BlockHash> hashes;
};

class BlockManager {
  public:
    // `storage` may be null: bookkeeping only (copy-on-write then copies nothing).
    BlockManager(int32_t num_blocks, int32_t block_size, KvBlockStore* storage,
                 const Reporter* reporter = nullptr);

    int32_t block_size() const { return block_size_; }
    BlockPool& pool() { return pool_; }
    const BlockPool& pool() const { return pool_; }

    static int32_t blocks_for(int32_t tokens, int32_t block_size) {
        return (tokens + block_size - 1) / block_size;
    }
    // Blocks needed to grow `table` to `new_num_tokens` (new blocks + a copy-on-write copy).
    int32_t blocks_needed(const BlockTable& table, int32_t new_num_tokens) const;
    bool can_grow(const BlockTable& table, int32_t new_num_tokens) const {
        return blocks_needed(table, new_num_tokens) <= pool_.num_free();
    }
    // Makes room for tokens [num_tokens, new_num_tokens): copies a shared partly-filled last
    // block first (copy-on-write), then allocates new blocks. All or nothing: on failure the
    // table is unchanged.
    Status grow(BlockTable& table, int32_t new_num_tokens, int32_t owner = -1);
    // dst shares every block of src (refcounts + 1).
    void fork(const BlockTable& src, BlockTable& dst, int32_t new_owner = -1);
    // Releases every block; the table ends empty. Full blocks with a hash stay cached.
    void free(BlockTable& table, int32_t owner = -1);
    // Gives back one block of the table (token eviction emptied it), leaving a hole (-1) at
    // `logical`: later slots keep their places.
    void release_block(BlockTable& table, int32_t logical, int32_t owner = -1);
    // Gives back the blocks past `num_tokens` slots (compaction emptied the end of the table).
    void shrink(BlockTable& table, int32_t num_tokens, int32_t owner = -1);

    // Prefix caching. Finds the longest run of cached full blocks matching the start of
    // `tokens` (leaving at least one token to compute, whose logits are needed) and makes the
    // (empty) table share them. Returns the number of tokens reused; reports hits and misses.
    int32_t reuse_cached_prefix(BlockTable& table, const std::vector<int32_t>& tokens,
                                int32_t owner);
    // Registers every newly completed full block of `table` (its first `computed` tokens have
    // K/V) under its chain hash, so later requests can reuse it.
    void register_full_blocks(BlockTable& table, const std::vector<int32_t>& tokens,
                              int32_t computed);
    static BlockHash chain_hash(BlockHash parent, const int32_t* tokens, int32_t count);

    // Contiguous allocator: reserves one run of consecutive free blocks for `reserve_tokens`
    // tokens, first fit, into an empty table.
    Status reserve_contiguous(BlockTable& table, int32_t reserve_tokens, int32_t owner);
    // Longest run of consecutive free block ids.
    int32_t largest_free_run() const;

    int64_t cow_copies() const { return cow_copies_; }

    // Checks the pool against the given live tables: refcount of each block equals the number
    // of table entries holding it, no free block is held, free count matches. Empty on success.
    std::string check_invariants(const std::vector<const BlockTable*>& tables) const;

  private:
    BlockId take_block(int32_t owner, int32_t logical);
    // Refcount - 1. A block that became free with no cached prefix holds nothing worth keeping:
    // the storage may give its memory back (KvBlockStore::discard_block), so a long run holds
    // what its sequences hold, not every block it ever touched.
    void release(BlockId b);
    void report(EventKind kind, int32_t owner, BlockId block, int32_t a, int32_t b = 0,
                int64_t wide = 0) const;

    int32_t block_size_;
    BlockPool pool_;
    KvBlockStore* storage_;
    const Reporter* reporter_;
    int64_t cow_copies_ = 0;
};

}  // namespace kvscope
