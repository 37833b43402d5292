#include "engine/block_manager.h"

#include <sstream>

#include "engine/kv_cache.h"

namespace kvscope {

BlockManager::BlockManager(int32_t num_blocks, int32_t block_size, KvCacheStorage* storage)
    : block_size_(block_size), pool_(num_blocks), storage_(storage) {}

namespace {
// The first token to be written goes into a block that is partly filled and shared.
bool needs_cow(const BlockTable& t, int32_t block_size, const BlockPool& pool) {
    if (t.num_tokens % block_size == 0) return false;
    BlockId last = t.blocks[static_cast<size_t>(t.num_tokens / block_size)];
    return pool.refcount(last) > 1;
}
}  // namespace

int32_t BlockManager::blocks_needed(const BlockTable& table, int32_t new_num_tokens) const {
    int32_t have = static_cast<int32_t>(table.blocks.size());
    int32_t want = blocks_for(new_num_tokens, block_size_);
    int32_t fresh = want > have ? want - have : 0;
    bool cow = new_num_tokens > table.num_tokens && needs_cow(table, block_size_, pool_);
    return fresh + (cow ? 1 : 0);
}

Status BlockManager::grow(BlockTable& table, int32_t new_num_tokens) {
    if (new_num_tokens <= table.num_tokens) return {};
    int32_t need = blocks_needed(table, new_num_tokens);
    if (need > pool_.num_free()) {
        std::ostringstream msg;
        msg << "KV cache full: need " << need << " free blocks, " << pool_.num_free() << " left";
        return Error{msg.str()};
    }
    if (needs_cow(table, block_size_, pool_)) {
        auto& slot = table.blocks[static_cast<size_t>(table.num_tokens / block_size_)];
        BlockId copy = *pool_.allocate();
        if (storage_) storage_->copy_block(slot, copy);
        pool_.release(slot);
        slot = copy;
        ++cow_copies_;
    }
    int32_t want = blocks_for(new_num_tokens, block_size_);
    while (static_cast<int32_t>(table.blocks.size()) < want) table.blocks.push_back(*pool_.allocate());
    table.num_tokens = new_num_tokens;
    return {};
}

void BlockManager::fork(const BlockTable& src, BlockTable& dst) {
    for (BlockId b : src.blocks) pool_.retain(b);
    dst = src;
}

void BlockManager::free(BlockTable& table) {
    for (BlockId b : table.blocks) pool_.release(b);
    table.blocks.clear();
    table.num_tokens = 0;
}

std::string BlockManager::check_invariants(const std::vector<const BlockTable*>& tables) const {
    std::ostringstream err;
    std::vector<int32_t> holders(static_cast<size_t>(pool_.num_blocks()), 0);
    for (const BlockTable* t : tables) {
        if (static_cast<int32_t>(t->blocks.size()) != blocks_for(t->num_tokens, block_size_))
            err << "table with " << t->num_tokens << " tokens holds " << t->blocks.size()
                << " blocks; ";
        for (BlockId b : t->blocks) {
            if (b < 0 || b >= pool_.num_blocks()) {
                err << "block id " << b << " out of range; ";
                continue;
            }
            ++holders[static_cast<size_t>(b)];
        }
    }
    int32_t free_count = 0;
    for (BlockId b = 0; b < pool_.num_blocks(); ++b) {
        int32_t rc = pool_.refcount(b), held = holders[static_cast<size_t>(b)];
        if (rc != held) err << "block " << b << ": refcount " << rc << " but " << held << " holders; ";
        if (rc == 0) ++free_count;
    }
    if (free_count != pool_.num_free())
        err << "pool counts " << pool_.num_free() << " free blocks, " << free_count << " have refcount 0; ";
    auto queue = pool_.free_queue();
    if (static_cast<int32_t>(queue.size()) != pool_.num_free())
        err << "free queue has " << queue.size() << " entries, expected " << pool_.num_free() << "; ";
    for (BlockId b : queue)
        if (pool_.refcount(b) != 0) err << "block " << b << " is queued as free but held; ";
    return err.str();
}

}  // namespace kvscope
