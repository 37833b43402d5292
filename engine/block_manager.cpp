#include "engine/block_manager.h"

// xxHash compiled in (its header carries the implementation), so nothing that links the engine
// needs libxxhash at run time: .ci/gpu-check's test binaries run where no Debian package is.
// GCC 12 misreads its AVX-512 path's intrinsics as using uninitialized values.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define XXH_INLINE_ALL
#include <xxhash.h>
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

#include <sstream>

#include "engine/kv_cache.h"

namespace kvscope {

BlockManager::BlockManager(int32_t num_blocks, int32_t block_size, KvBlockStore* storage,
                           const Reporter* reporter)
    : block_size_(block_size), pool_(num_blocks), storage_(storage), reporter_(reporter) {}

void BlockManager::report(EventKind kind, int32_t owner, BlockId block, int32_t a, int32_t b,
                          int64_t wide) const {
    if (!reporter_ || !reporter_->on()) return;
    Event e;
    e.kind = kind;
    e.request = owner;
    e.block = block;
    e.a = a;
    e.b = b;
    e.wide = wide;
    reporter_->emit(std::move(e));
}

namespace {
// The first token to be written goes into a block that is partly filled and shared.
bool needs_cow(const BlockTable& t, int32_t block_size, const BlockPool& pool) {
    if (t.contiguous || t.num_tokens % block_size == 0) return false;
    BlockId last = t.blocks[static_cast<size_t>(t.num_tokens / block_size)];
    return pool.refcount(last) > 1;
}
}  // namespace

BlockId BlockManager::take_block(int32_t owner, int32_t logical) {
    std::optional<BlockHash> evicted;
    BlockId b = *pool_.allocate(&evicted);
    if (evicted && reporter_ && reporter_->on()) {
        Event e;
        e.kind = EventKind::kBlockEvict;
        e.block = b;
        e.wide = static_cast<int64_t>(*evicted);
        e.text = "lru: cached block reused for new data";
        reporter_->emit(std::move(e));
    }
    report(EventKind::kBlockAlloc, owner, b, logical);
    return b;
}

int32_t BlockManager::blocks_needed(const BlockTable& table, int32_t new_num_tokens) const {
    int32_t have = static_cast<int32_t>(table.blocks.size());
    int32_t want = blocks_for(new_num_tokens, block_size_);
    int32_t fresh = want > have ? want - have : 0;
    bool cow = new_num_tokens > table.num_tokens && needs_cow(table, block_size_, pool_);
    return fresh + (cow ? 1 : 0);
}

Status BlockManager::grow(BlockTable& table, int32_t new_num_tokens, int32_t owner) {
    if (new_num_tokens <= table.num_tokens) return {};
    int32_t need = blocks_needed(table, new_num_tokens);
    if (table.contiguous && need > 0) return Error{"contiguous reservation exceeded"};
    if (need > pool_.num_free()) {
        std::ostringstream msg;
        msg << "KV cache full: need " << need << " free blocks, " << pool_.num_free() << " left";
        return Error{msg.str()};
    }
    if (needs_cow(table, block_size_, pool_)) {
        int32_t logical = table.num_tokens / block_size_;
        auto& slot = table.blocks[static_cast<size_t>(logical)];
        BlockId copy = take_block(owner, logical);
        if (storage_) storage_->copy_block(slot, copy);
        report(EventKind::kCowCopy, owner, copy, logical, slot);
        release(slot);
        report(EventKind::kBlockFree, owner, slot, logical, pool_.refcount(slot));
        slot = copy;
        ++cow_copies_;
    }
    int32_t want = blocks_for(new_num_tokens, block_size_);
    while (static_cast<int32_t>(table.blocks.size()) < want)
        table.blocks.push_back(take_block(owner, static_cast<int32_t>(table.blocks.size())));
    table.num_tokens = new_num_tokens;
    return {};
}

void BlockManager::fork(const BlockTable& src, BlockTable& dst, int32_t new_owner) {
    for (size_t i = 0; i < src.blocks.size(); ++i) {
        pool_.retain(src.blocks[i]);
        report(EventKind::kBlockShare, new_owner, src.blocks[i], static_cast<int32_t>(i),
               pool_.refcount(src.blocks[i]));
    }
    dst = src;
}

void BlockManager::free(BlockTable& table, int32_t owner) {
    for (size_t i = 0; i < table.blocks.size(); ++i) {
        BlockId b = table.blocks[i];
        if (b < 0) continue;  // already given back (token eviction)
        release(b);
        report(EventKind::kBlockFree, owner, b, static_cast<int32_t>(i), pool_.refcount(b));
    }
    table = BlockTable{};
}

void BlockManager::release(BlockId b) {
    if (pool_.release(b) && !pool_.hash_of(b) && storage_) storage_->discard_block(b);
}

void BlockManager::release_block(BlockTable& table, int32_t logical, int32_t owner) {
    BlockId& b = table.blocks[static_cast<size_t>(logical)];
    if (b < 0) return;
    release(b);
    report(EventKind::kBlockFree, owner, b, logical, pool_.refcount(b));
    b = -1;
}

void BlockManager::shrink(BlockTable& table, int32_t num_tokens, int32_t owner) {
    if (num_tokens >= table.num_tokens) return;
    const auto keep = static_cast<size_t>(blocks_for(num_tokens, block_size_));
    while (table.blocks.size() > keep) {
        release_block(table, static_cast<int32_t>(table.blocks.size()) - 1, owner);
        table.blocks.pop_back();
    }
    table.num_tokens = num_tokens;
}

BlockHash BlockManager::chain_hash(BlockHash parent, const int32_t* tokens, int32_t count) {
    return XXH3_64bits_withSeed(tokens, static_cast<size_t>(count) * sizeof(int32_t), parent);
}

int32_t BlockManager::reuse_cached_prefix(BlockTable& table, const std::vector<int32_t>& tokens,
                                          int32_t owner) {
    const auto n = static_cast<int32_t>(tokens.size());
    const int32_t max_blocks = (n - 1) / block_size_;
    BlockHash parent = 0;
    for (int32_t i = 0; i < max_blocks; ++i) {
        BlockHash h =
            chain_hash(parent, tokens.data() + static_cast<size_t>(i) * block_size_, block_size_);
        auto hit = pool_.lookup(h);
        if (!hit) {
            report(EventKind::kPrefixMiss, owner, -1, i, 0, static_cast<int64_t>(h));
            break;
        }
        pool_.retain(*hit);
        report(EventKind::kBlockShare, owner, *hit, i, pool_.refcount(*hit));
        report(EventKind::kPrefixHit, owner, *hit, i, block_size_, static_cast<int64_t>(h));
        table.blocks.push_back(*hit);
        table.hashes.push_back(h);
        parent = h;
    }
    table.num_tokens = static_cast<int32_t>(table.blocks.size()) * block_size_;
    return table.num_tokens;
}

void BlockManager::register_full_blocks(BlockTable& table, const std::vector<int32_t>& tokens,
                                        int32_t computed) {
    int32_t full = std::min(computed, static_cast<int32_t>(tokens.size())) / block_size_;
    while (static_cast<int32_t>(table.hashes.size()) < full) {
        size_t i = table.hashes.size();
        BlockHash parent = i == 0 ? 0 : table.hashes[i - 1];
        BlockHash h =
            chain_hash(parent, tokens.data() + i * static_cast<size_t>(block_size_), block_size_);
        if (!pool_.hash_of(table.blocks[i])) {
            pool_.set_hash(table.blocks[i], h);
            if (pool_.hash_of(table.blocks[i]) == h)
                report(EventKind::kBlockHashed, -1, table.blocks[i], static_cast<int32_t>(i), 0,
                       static_cast<int64_t>(h));
        }
        table.hashes.push_back(h);
    }
}

Status BlockManager::reserve_contiguous(BlockTable& table, int32_t reserve_tokens, int32_t owner) {
    int32_t count = blocks_for(reserve_tokens, block_size_);
    int32_t run = 0;
    for (BlockId b = 0; b < pool_.num_blocks(); ++b) {
        run = pool_.is_free(b) ? run + 1 : 0;
        if (run == count) {
            BlockId first = b - count + 1;
            for (BlockId x = first; x <= b; ++x) {
                pool_.take(x);
                report(EventKind::kBlockAlloc, owner, x, x - first);
                table.blocks.push_back(x);
            }
            table.contiguous = true;
            return {};
        }
    }
    std::ostringstream msg;
    msg << "no run of " << count << " consecutive free blocks (largest is " << largest_free_run()
        << ")";
    return Error{msg.str()};
}

int32_t BlockManager::largest_free_run() const {
    int32_t best = 0, run = 0;
    for (BlockId b = 0; b < pool_.num_blocks(); ++b) {
        run = pool_.is_free(b) ? run + 1 : 0;
        best = std::max(best, run);
    }
    return best;
}

std::string BlockManager::check_invariants(const std::vector<const BlockTable*>& tables) const {
    std::ostringstream err;
    std::vector<int32_t> holders(static_cast<size_t>(pool_.num_blocks()), 0);
    for (const BlockTable* t : tables) {
        auto held = static_cast<int32_t>(t->blocks.size());
        int32_t need = blocks_for(t->num_tokens, block_size_);
        if (t->contiguous ? held < need : held != need)
            err << "table with " << t->num_tokens << " tokens holds " << held << " blocks; ";
        for (BlockId b : t->blocks) {
            if (b == -1) continue;  // given back after token eviction
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
        if (rc != held)
            err << "block " << b << ": refcount " << rc << " but " << held << " holders; ";
        if (rc == 0) ++free_count;
    }
    if (free_count != pool_.num_free())
        err << "pool counts " << pool_.num_free() << " free blocks, " << free_count
            << " have refcount 0; ";
    auto queue = pool_.free_queue();
    if (static_cast<int32_t>(queue.size()) != pool_.num_free())
        err << "free queue has " << queue.size() << " entries, expected " << pool_.num_free()
            << "; ";
    for (BlockId b : queue)
        if (pool_.refcount(b) != 0) err << "block " << b << " is queued as free but held; ";
    return err.str();
}

}  // namespace kvscope
