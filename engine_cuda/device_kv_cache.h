#pragma once
// The paged KV cache in device memory, block for block the layout of the CPU's KvCacheStorage
// (engine/kv_cache.h, kernels/paged_kv.h): per layer, K and V each
// [num_blocks][block_size][n_kv_heads][head_dim] in f32 or f16, so the engine's BlockManager
// tables index it unchanged and a block saved here is byte for byte what the CPU saves.
// Implements the block moves the engine makes (engine/kv_block_store.h): copy-on-write by the
// copy_blocks kernel, swapping by DMA through pinned host memory, compaction by device copies.
// int8, int4 and int2 are refused: the attention kernels do not dequantize them (yet).

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "base/result.h"
#include "engine/kv_block_store.h"
#include "engine/kv_quant.h"
#include "engine/model_config.h"
#include "engine_cuda/cuda_support.h"
#include "kernels/paged_kv.h"

namespace kvscope::gpu {

class DeviceKvCache : public KvBlockStore {
  public:
    // Bytes the cache will take on the device, or an error for a dtype it cannot hold.
    static Result<int64_t> device_bytes(const ModelConfig& config, int32_t block_size,
                                        int32_t num_blocks, KvDtype dtype);
    // Allocates (zeroed, as the CPU's) and binds to `stream`, where every move is ordered with
    // the forward passes.
    Status init(const ModelConfig& config, int32_t block_size, int32_t num_blocks, KvDtype dtype,
                cudaStream_t stream);

    // Layer `layer`'s K and V as the kernels take them.
    kernels::PagedKvCache layer(int layer) const;
    int64_t bytes() const { return static_cast<int64_t>(memory_.bytes()); }

    void copy_block(BlockId src, BlockId dst) override;
    void save_block(BlockId block, std::vector<uint8_t>& out) const override;
    void load_block(BlockId block, const std::vector<uint8_t>& in) override;
    void move_lane(int layer, int kv_head, BlockId from, int from_slot, BlockId to,
                   int to_slot) override;

    // The callers of the moves above get no status (the CPU's cannot fail), so the first
    // failure is kept here, and the next forward pass returns it.
    const Status& error() const { return error_; }

  private:
    void fail(Status s) const {
        if (error_ && !s) error_ = std::move(s);
    }
    char* pool(int index) const;  // [layer][K, V] -> base of that pool

    kernels::DType dtype_ = kernels::DType::kF32;
    int32_t block_size_ = 0, num_blocks_ = 0, n_layers_ = 0, n_kv_heads_ = 0, head_dim_ = 0;
    int64_t block_bytes_ = 0;  // one block of K (or V) of one layer
    cudaStream_t stream_ = nullptr;
    DeviceMemory memory_;                // [layer][K, V][num_blocks][block bytes]
    DeviceMemory pool_table_;            // the 2 * n_layers pool bases, for copy_blocks
    DeviceMemory pairs_;                 // one (src, dst) pair
    std::vector<void*> pools_;           // the same bases, on the host, for swap_blocks
    mutable PinnedMemory staging_;       // one block of every layer, [layer][K, V]
    mutable std::vector<void*> staged_;  // staging_'s 2 * n_layers one-block pools
    mutable Status error_;
};

}  // namespace kvscope::gpu
