#pragma once
// What the engine does to whole blocks of the KV cache, whichever memory the backend keeps them
// in: the block manager copies a shared block before writing it (copy-on-write), the scheduler
// swaps a preempted sequence's blocks out to host bytes and back, and compaction moves one lane's
// token to another slot. KvCacheStorage (kv_cache.h) is the host implementation; a GPU backend
// implements it over device memory, so the callers never know where the cache is.

#include <cstdint>
#include <vector>

#include "engine/block_pool.h"

namespace kvscope {

class KvBlockStore {
  public:
    virtual ~KvBlockStore() = default;
    // dst's K and V in every layer become src's.
    virtual void copy_block(BlockId src, BlockId dst) = 0;
    // One block of every layer as bytes, and back: per layer [K bytes][V bytes] and the
    // dtype's scales (kv_cache.h), the same bytes whichever backend saved them.
    virtual void save_block(BlockId block, std::vector<uint8_t>& out) const = 0;
    virtual void load_block(BlockId block, const std::vector<uint8_t>& in) = 0;
    // Compaction: one KV head's token moves to another slot.
    virtual void move_lane(int layer, int kv_head, BlockId from, int from_slot, BlockId to,
                           int to_slot) = 0;
    // One KV head's token at a slot, read dequantized and written in the layer's format (cross-
    // layer merging), and moved to the low tier (mixed precision). A backend without them is
    // refused those settings before a run (validate_engine_options), so never gets here.
    virtual void read_head(int, BlockId, int, int, float*, float*) const {}
    virtual void write_head(int, BlockId, int, int, const float*, const float*) {}
    virtual void store_low(int, BlockId, int, int) {}
    // K and V of one token of one KV head in a layer, scales included.
    virtual int64_t bytes_per_lane_token(int) const { return 0; }
    virtual int32_t head_dim() const { return 0; }
    // The block went back to the pool holding nothing worth keeping (no cached prefix): its
    // memory may go back to the system until it is written again. Nothing by default.
    virtual void discard_block(BlockId) {}
};

}  // namespace kvscope
