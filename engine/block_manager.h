#pragma once
// Per-sequence block tables over one BlockPool: growing a sequence, forking it (sharing its
// blocks), copy-on-write when a shared block is about to be written, and freeing.

#include <cstdint>
#include <string>
#include <vector>

#include "engine/block_pool.h"
#include "engine/result.h"

namespace kvscope {

class KvCacheStorage;

// logical block i of a sequence holds its tokens [i * block_size, (i + 1) * block_size).
struct BlockTable {
    std::vector<BlockId> blocks;
    int32_t num_tokens = 0;  // tokens whose K/V are (or are about to be) stored
};

class BlockManager {
public:
    // `storage` may be null: bookkeeping only (copy-on-write then copies nothing).
    BlockManager(int32_t num_blocks, int32_t block_size, KvCacheStorage* storage);

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
    Status grow(BlockTable& table, int32_t new_num_tokens);
    // dst shares every block of src (refcounts + 1).
    void fork(const BlockTable& src, BlockTable& dst);
    // Releases every block; the table ends empty.
    void free(BlockTable& table);

    // Number of copy-on-write copies made so far.
    int64_t cow_copies() const { return cow_copies_; }

    // Checks the pool against the given live tables: refcount of each block equals the number
    // of table entries holding it, no free block is held, free count matches. Empty on success.
    std::string check_invariants(const std::vector<const BlockTable*>& tables) const;

private:
    int32_t block_size_;
    BlockPool pool_;
    KvCacheStorage* storage_;
    int64_t cow_copies_ = 0;
};

}  // namespace kvscope
