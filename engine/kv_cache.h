#pragma once
// Storage of the paged KV cache: for every layer, keys and values of `num_blocks` blocks, in the
// dtype the run asked for, which may differ by layer (--kv-dtype-layers).
//
// Layout, per layer, K and V alike: [num_blocks][block_size][n_kv_heads][head_dim] elements, so
// one block of one layer is a contiguous run: copy-on-write and swapping move whole blocks, and
// attention reads one token's head as head_dim neighbours.
//   f32   the elements as they are (the reference; attention reads them in place)
//   f16   IEEE half per element
//   int8  int8 elements, and one f16 scale per (block, slot, KV head), K and V alike
//   int4  two elements per byte (KIVI): values grouped per token and KV head (an f16 scale and
//         an f16 minimum per group of 32 channels); keys grouped per channel over the tokens of
//         a block (an f16 scale and minimum per block, KV head and channel: KIVI's groups of 32
//         tokens are a block here, 16 by default, 32 with --block-size 32). A block's keys are
//         kept in f16 until its last slot is written, then quantized together: the newest
//         tokens stay in full precision until their group fills (KIVI's residual, which KIVI
//         also keeps in f16). The residual is a whole block's keys from its first write on.
//   int2  the same grouping and residual as int4 (KIVI-2), four elements per byte.
// Bytes of one block of one layer at head dim 32, block size 16, per token and KV head: f16
// 128; int4 16 + 16 codes, 4 value parameters, 128 / 16 = 8 key parameters: 44 (0.34 of f16);
// int2 8 + 8 + 4 + 8 = 28 (0.22). A sequence's open block adds its f16 keys, 64 more per token
// of the block (open_block_bytes()): at 512 tokens int4 comes to 0.36 of f16, int2 to 0.23.
// Mixed precision (--kv-dtype mixed:HI/LO:P%, ZipCache): a layer keeps a second, low tier in
// LO's format beside its HI arrays, and a byte per (slot, KV head) saying which tier holds the
// token; store_low() moves one KV head's token down (read from HI, written in LO). In the low
// tier int4 and int2 group keys per token like values (a token changes precision alone).
// Every dtype but f32 is dequantized inside attention (read_lane()). The arrays are committed as
// blocks are first written (on_demand_array.h): a pool sized for a long context costs only what
// a run fills.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "engine/block_pool.h"
#include "engine/kv_block_store.h"
#include "engine/kv_quant.h"
#include "engine/model_config.h"
#include "engine/on_demand_array.h"

namespace kvscope {

class KvCacheStorage : public KvBlockStore {
  public:
    // `layer_dtypes`: one dtype per layer, or empty: `dtype` for every layer. `low`: mixed
    // precision's low tier in every layer (`dtype` is the high one).
    KvCacheStorage(const ModelConfig& config, int32_t block_size, int32_t num_blocks,
                   KvDtype dtype = KvDtype::kF32, const std::vector<KvDtype>& layer_dtypes = {},
                   std::optional<KvDtype> low = std::nullopt);

    KvDtype dtype(int layer) const { return layers_[static_cast<size_t>(layer)].dtype; }
    // Whether attention may read `layer`'s keys and values in place (f32 with no low tier).
    bool reads_in_place(int layer) const {
        const Layer& L = layers_[static_cast<size_t>(layer)];
        return L.dtype == KvDtype::kF32 && !L.low;
    }
    int32_t block_size() const { return block_size_; }
    int32_t num_blocks() const { return num_blocks_; }
    int32_t kv_dim() const { return kv_dim_; }
    int32_t n_layers() const { return n_layers_; }
    int32_t head_dim() const override { return head_dim_; }
    // Bytes of K and V of one block over all layers, scales included (the f16 keys an int4 or
    // int2 block keeps until it fills are counted by open_block_bytes()).
    size_t bytes_per_block() const;
    // The same for one layer.
    size_t layer_bytes_per_block(int layer) const;
    // K and V of one token of one KV head in `layer`, scales included: what a slot of a lane
    // costs to read or write.
    int64_t bytes_per_lane_token(int layer) const override {
        return static_cast<int64_t>(layer_bytes_per_block(layer)) /
               (static_cast<int64_t>(block_size_) * n_kv_heads_);
    }
    // The f16 keys int4 and int2 keep for `block` while it is not yet full, in bytes.
    size_t open_block_bytes(BlockId block) const;
    // Mixed: what one KV head's token costs in the low tier (K and V, parameters included), and
    // what it saves there against the high one; 0 without a low tier.
    int64_t low_bytes_per_lane_token(int layer) const;
    int64_t low_tier_saving(int layer) const {
        const Layer& L = layers_[static_cast<size_t>(layer)];
        return L.low ? lane_token_bytes(L) - lane_token_bytes(*L.low) : 0;
    }

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
    // One KV head's token at `slot` of `block`: read dequantized (head_dim floats each; the f16
    // key of an open int4 / int2 block included), and written in the layer's format (not for int4
    // and int2, whose keys are grouped over a block). Cross-layer merging rewrites tokens so.
    void read_head(int layer, BlockId block, int slot, int kv_head, float* k,
                   float* v) const override;
    void write_head(int layer, BlockId block, int slot, int kv_head, const float* k,
                    const float* v) override;
    // Mixed: one KV head's token goes to the low tier (read from the high one, stored in LO).
    void store_low(int layer, BlockId block, int slot, int kv_head) override;
    bool in_low(int layer, BlockId block, int slot, int kv_head) const;
    // Compaction: one KV head's token moves to another slot (not for int4 and int2, whose keys
    // are grouped over a block).
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
        KvDtype dtype = KvDtype::kF32;
        OnDemandArray<uint8_t> k, v;               // elements
        OnDemandArray<uint16_t> k_scale, v_scale;  // int8: per slot and head, f16
        // int4 / int2 values: per slot, head and group of 32 channels, (scale, min) halves
        OnDemandArray<uint16_t> v_params;
        // int4 / int2 keys: per block, head and channel, (scale, min) halves
        OnDemandArray<uint16_t> k_params;
        // int4 / int2: the keys of blocks not yet full, in f16 (KIVI's full-precision residual)
        std::map<BlockId, std::vector<uint16_t>> open_keys;
        // int4 / int2 in a low tier: keys grouped per token like values (k_params then laid out
        // as v_params)
        bool keys_per_token = false;
        std::unique_ptr<Layer> low;   // mixed: the low tier
        OnDemandArray<uint8_t> tier;  // mixed: per slot and head, 1 when `low` holds the token
    };
    void init_layer(Layer& L, KvDtype dtype, bool keys_per_token);
    size_t elem_bytes_per_block(const Layer& L) const;  // K (or V) elements of one block
    size_t bytes_of_block(const Layer& L) const;        // K and V of one block, scales included
    int64_t lane_token_bytes(const Layer& L) const {
        return static_cast<int64_t>(bytes_of_block(L)) /
               (static_cast<int64_t>(block_size_) * n_kv_heads_);
    }
    // One head's token in L's format; the keys of int4 / int2 (not per token) are left to write().
    void store_head(Layer& L, size_t at, BlockId block, int slot, size_t h, const float* k,
                    const float* v);
    void discard_layer_block(Layer& L, BlockId block);
    void save_layer_block(const Layer& L, BlockId block, std::vector<uint8_t>& out) const;
    void load_layer_block(Layer& L, BlockId block, const uint8_t*& p);
    void move_head(Layer& L, size_t h, BlockId from, int from_slot, BlockId to, int to_slot);
    void load_head(const Layer& L, size_t at, BlockId block, int slot, size_t h, float* k,
                   float* v) const;
    size_t v_params_per_slot() const {  // int4 / int2: halves per slot, all heads
        return static_cast<size_t>(n_kv_heads_ * groups_per_head()) * 2;
    }
    size_t slot_index(BlockId block, int slot) const {
        return static_cast<size_t>(block) * static_cast<size_t>(block_size_) +
               static_cast<size_t>(slot);
    }
    float* f32(OnDemandArray<uint8_t>& elems, BlockId block, int slot) {
        return reinterpret_cast<float*>(elems.data()) +
               slot_index(block, slot) * static_cast<size_t>(kv_dim_);
    }
    void quantize_block_keys(Layer& L, BlockId block);
    const Layer& tier_of(const Layer& L, size_t at, size_t h) const {
        return L.low && L.tier[at * static_cast<size_t>(n_kv_heads_) + h] ? *L.low : L;
    }
    int groups_per_head() const { return kv_value_groups_per_head(head_dim_); }

    int32_t block_size_, num_blocks_, kv_dim_, n_layers_, n_kv_heads_, head_dim_;
    std::vector<Layer> layers_;
};

}  // namespace kvscope
