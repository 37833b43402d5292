#pragma once
// Storage of the paged KV cache: for every layer, keys and values of `num_blocks` blocks, in the
// dtype the run asked for.
//
// Layout, per layer, K and V alike: [num_blocks][block_size][n_kv_heads][head_dim] elements, so
// one block of one layer is a contiguous run: copy-on-write and swapping move whole blocks, and
// attention reads one token's head as head_dim neighbours.
//   f32   the elements as they are (the reference; attention reads them in place)
//   f16   IEEE half per element
//   int8  int8 elements, and one f32 scale per (block, slot, KV head), K and V alike
//   int4  two elements per byte (KIVI): values grouped per token and KV head (a scale and a
//         minimum per group of 32 channels); keys grouped per channel over the tokens of a
//         block (a scale and a minimum per block, KV head and channel: KIVI's groups of 32
//         tokens are a block here, 16 by default, 32 with --block-size 32). A block's keys are
//         kept in f32 until its last slot is written, then quantized together: the newest
//         tokens stay in full precision until their group fills, as KIVI does.
// Every dtype but f32 is dequantized inside attention (read_lane()). The arrays are committed as
// blocks are first written (on_demand_array.h): a pool sized for a long context costs only what
// a run fills.

#include <cstddef>
#include <cstdint>
#include <map>
#include <vector>

#include "engine/block_pool.h"
#include "engine/kv_block_store.h"
#include "engine/kv_quant.h"
#include "engine/model_config.h"
#include "engine/on_demand_array.h"

namespace kvscope {

class KvCacheStorage : public KvBlockStore {
  public:
    KvCacheStorage(const ModelConfig& config, int32_t block_size, int32_t num_blocks,
                   KvDtype dtype = KvDtype::kF32);

    KvDtype dtype() const { return dtype_; }
    int32_t block_size() const { return block_size_; }
    int32_t num_blocks() const { return num_blocks_; }
    int32_t kv_dim() const { return kv_dim_; }
    int32_t n_layers() const { return n_layers_; }
    // Bytes of K and V of one block over all layers, scales included (the f32 keys an int4
    // block keeps until it fills are counted by open_block_bytes()).
    size_t bytes_per_block() const;
    // K and V of one token of one KV head in one layer, scales included: what a slot of a lane
    // costs to read or write.
    int64_t bytes_per_lane_token() const {
        return static_cast<int64_t>(bytes_per_block()) /
               (static_cast<int64_t>(block_size_) * n_layers_ * n_kv_heads_);
    }
    // The f32 keys int4 keeps for blocks not yet full, in bytes, for `block`.
    size_t open_block_bytes(BlockId block) const;

    // f32 only: the elements in place.
    float* key(int layer, BlockId block, int slot) {
        return f32(layers_[static_cast<size_t>(layer)].k, block, slot);
    }
    float* value(int layer, BlockId block, int slot) {
        return f32(layers_[static_cast<size_t>(layer)].v, block, slot);
    }
    const float* key(int layer, BlockId block, int slot) const {
        return const_cast<KvCacheStorage*>(this)->key(layer, block, slot);
    }
    const float* value(int layer, BlockId block, int slot) const {
        return const_cast<KvCacheStorage*>(this)->value(layer, block, slot);
    }

    // Stores one token's K and V (kv_dim floats each) at `slot` of `block`, in the cache's dtype.
    void write(int layer, BlockId block, int slot, const float* k, const float* v);
    // Slots [0, count) of one KV head of a block, dequantized: k and v get [count][head_dim]
    // (either may be null: only the other is read).
    void read_lane(int layer, BlockId block, int kv_head, int count, float* k, float* v) const;
    // Compaction: one KV head's token moves to another slot (not for int4, whose keys are
    // grouped over a block).
    void move_lane(int layer, int kv_head, BlockId from, int from_slot, BlockId to,
                   int to_slot) override;

    void copy_block(BlockId src, BlockId dst) override;
    // The block's pages go back to the system (whole pages only: a block of one layer smaller
    // than a page keeps it).
    void discard_block(BlockId block) override;
    // One block of every layer as bytes, for swapping to host, and back.
    void save_block(BlockId block, std::vector<uint8_t>& out) const override;
    void load_block(BlockId block, const std::vector<uint8_t>& in) override;

  private:
    struct Layer {
        OnDemandArray<uint8_t> k, v;            // elements
        OnDemandArray<float> k_scale, v_scale;  // int8: per slot and head; int4 v: per slot,
                                                // head and group (scale, min pairs)
        OnDemandArray<float> k_params;          // int4 keys: per block, head, channel (scale, min)
        std::map<BlockId, std::vector<float>> open_keys;  // int4: f32 keys of blocks not full
    };
    size_t elem_bytes_per_block() const;  // K (or V) elements of one block, one layer
    size_t slot_index(BlockId block, int slot) const {
        return static_cast<size_t>(block) * static_cast<size_t>(block_size_) +
               static_cast<size_t>(slot);
    }
    float* f32(OnDemandArray<uint8_t>& elems, BlockId block, int slot) {
        return reinterpret_cast<float*>(elems.data()) +
               slot_index(block, slot) * static_cast<size_t>(kv_dim_);
    }
    void quantize_block_keys(Layer& L, BlockId block);
    int groups_per_head() const { return (head_dim_ + 31) / 32; }

    KvDtype dtype_;
    int32_t block_size_, num_blocks_, kv_dim_, n_layers_, n_kv_heads_, head_dim_;
    std::vector<Layer> layers_;
};

}  // namespace kvscope
