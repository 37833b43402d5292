#pragma once
// Storage of the paged KV cache: for every layer, keys and values of `num_blocks` blocks.
//
// Layout (per layer, K and V alike), fp32:
//   [num_blocks][block_size][n_kv_heads][head_dim]
// so one block of one layer is a contiguous run of block_size * kv_dim floats: copy-on-write
// and swapping move whole blocks with one memcpy per layer, and attention reads the keys of
// one token and head as head_dim contiguous floats.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/block_pool.h"
#include "engine/model_config.h"

namespace kvscope {

class KvCacheStorage {
  public:
    KvCacheStorage(const ModelConfig& config, int32_t block_size, int32_t num_blocks);

    int32_t block_size() const { return block_size_; }
    int32_t num_blocks() const { return num_blocks_; }
    int32_t kv_dim() const { return kv_dim_; }
    int32_t n_layers() const { return n_layers_; }
    // Bytes of K and V of one block over all layers.
    size_t bytes_per_block() const;

    float* key(int layer, BlockId block, int slot) {
        return keys_[static_cast<size_t>(layer)].data() + offset(block, slot);
    }
    float* value(int layer, BlockId block, int slot) {
        return values_[static_cast<size_t>(layer)].data() + offset(block, slot);
    }
    const float* key(int layer, BlockId block, int slot) const {
        return keys_[static_cast<size_t>(layer)].data() + offset(block, slot);
    }
    const float* value(int layer, BlockId block, int slot) const {
        return values_[static_cast<size_t>(layer)].data() + offset(block, slot);
    }

    void copy_block(BlockId src, BlockId dst);
    // One block of every layer as [layer][K|V][block_size * kv_dim], for swapping to host.
    void save_block(BlockId block, std::vector<float>& out) const;
    void load_block(BlockId block, const std::vector<float>& in);

  private:
    size_t offset(BlockId block, int slot) const {
        return (static_cast<size_t>(block) * static_cast<size_t>(block_size_) +
                static_cast<size_t>(slot)) *
               static_cast<size_t>(kv_dim_);
    }
    size_t block_floats() const {
        return static_cast<size_t>(block_size_) * static_cast<size_t>(kv_dim_);
    }

    int32_t block_size_, num_blocks_, kv_dim_, n_layers_;
    std::vector<std::vector<float>> keys_, values_;
};

}  // namespace kvscope
