#include "engine_cuda/device_kv_cache.h"

#include <cstring>

namespace kvscope::gpu {

Result<int64_t> DeviceKvCache::device_bytes(const ModelConfig& config, int32_t block_size,
                                            int32_t num_blocks, KvDtype dtype) {
    if (dtype != KvDtype::kF32 && dtype != KvDtype::kF16)
        return Error{
            std::string("--kv-dtype ") + kv_dtype_name(dtype) +
            ": the CUDA backend keeps K/V in f32 or f16 only (its attention kernels do "
            "not dequantize int8, int4 or int2 yet); use --kv-dtype f16, or --backend cpu"};
    const int64_t elem = dtype == KvDtype::kF32 ? 4 : 2;
    return 2 * static_cast<int64_t>(config.n_layers) * num_blocks * block_size * config.kv_dim() *
           elem;
}

Status DeviceKvCache::init(const ModelConfig& config, int32_t block_size, int32_t num_blocks,
                           KvDtype dtype, cudaStream_t stream) {
    auto total = device_bytes(config, block_size, num_blocks, dtype);
    if (!total) return total.error();
    dtype_ = dtype == KvDtype::kF32 ? kernels::DType::kF32 : kernels::DType::kF16;
    block_size_ = block_size;
    num_blocks_ = num_blocks;
    n_layers_ = config.n_layers;
    n_kv_heads_ = config.n_kv_heads;
    head_dim_ = config.head_dim;
    block_bytes_ = static_cast<int64_t>(block_size) * config.kv_dim() *
                   static_cast<int64_t>(kernels::dtype_bytes(dtype_));
    stream_ = stream;
    if (Status s = memory_.allocate(static_cast<size_t>(total.value()), "the KV cache"); !s)
        return s;
    if (Status s = cuda_status(cudaMemsetAsync(memory_.get(), 0, memory_.bytes(), stream),
                               "clearing the KV cache");
        !s)
        return s;
    const int pools = 2 * n_layers_;
    pools_.resize(static_cast<size_t>(pools));
    for (int p = 0; p < pools; ++p)
        pools_[static_cast<size_t>(p)] = pool(p);
    if (Status s = pool_table_.allocate(pools_.size() * sizeof(void*), "the KV pool table"); !s)
        return s;
    if (Status s = cuda_status(cudaMemcpy(pool_table_.get(), pools_.data(),
                                          pools_.size() * sizeof(void*), cudaMemcpyHostToDevice),
                               "uploading the KV pool table");
        !s)
        return s;
    if (Status s = pairs_.allocate(2 * sizeof(int32_t), "a block pair"); !s) return s;
    if (Status s = staging_.reserve(static_cast<size_t>(pools * block_bytes_), "swapping blocks");
        !s)
        return s;
    staged_.resize(static_cast<size_t>(pools));
    for (int p = 0; p < pools; ++p)
        staged_[static_cast<size_t>(p)] = staging_.as<char>() + p * block_bytes_;
    return cuda_status(cudaStreamSynchronize(stream), "clearing the KV cache");
}

char* DeviceKvCache::pool(int index) const {
    return memory_.as<char>() + static_cast<int64_t>(index) * num_blocks_ * block_bytes_;
}

kernels::PagedKvCache DeviceKvCache::layer(int layer) const {
    kernels::PagedKvCache c;
    c.k = pool(2 * layer);
    c.v = pool(2 * layer + 1);
    c.dtype = dtype_;
    c.num_blocks = num_blocks_;
    c.block_size = block_size_;
    c.n_kv_heads = n_kv_heads_;
    c.head_dim = head_dim_;
    return c;
}

void DeviceKvCache::copy_block(BlockId src, BlockId dst) {
    const int32_t pair[2] = {src, dst};
    // From pageable memory: the call returns once `pair` has been read.
    fail(cuda_status(
        cudaMemcpyAsync(pairs_.get(), pair, sizeof pair, cudaMemcpyHostToDevice, stream_),
        "copy-on-write of a KV block"));
    fail(cuda_status(
        kernels::copy_blocks(pool_table_.as<void*>(), pool_table_.as<const void*>(), 2 * n_layers_,
                             block_bytes_, pairs_.as<int32_t>(), 1, stream_),
        "copy-on-write of a KV block"));
}

void DeviceKvCache::save_block(BlockId block, std::vector<uint8_t>& out) const {
    const int32_t pair[2] = {block, 0};
    const size_t bytes = static_cast<size_t>(2 * n_layers_ * block_bytes_);
    fail(cuda_status(
        kernels::swap_blocks(staged_.data(), const_cast<const void* const*>(pools_.data()),
                             2 * n_layers_, block_bytes_, pair, 1, stream_),
        "swapping a KV block out"));
    fail(cuda_status(cudaStreamSynchronize(stream_), "swapping a KV block out"));
    // [layer][K, V] one block each: the CPU's save_block bytes for f32 and f16.
    out.assign(staging_.as<uint8_t>(), staging_.as<uint8_t>() + bytes);
}

void DeviceKvCache::load_block(BlockId block, const std::vector<uint8_t>& in) {
    const size_t bytes = static_cast<size_t>(2 * n_layers_ * block_bytes_);
    if (in.size() != bytes) {
        fail(Error{"swapping a KV block in: " + std::to_string(in.size()) +
                   " bytes saved, the device block takes " + std::to_string(bytes)});
        return;
    }
    std::memcpy(staging_.as<uint8_t>(), in.data(), bytes);
    const int32_t pair[2] = {0, block};
    fail(cuda_status(
        kernels::swap_blocks(pools_.data(), const_cast<const void* const*>(staged_.data()),
                             2 * n_layers_, block_bytes_, pair, 1, stream_),
        "swapping a KV block in"));
    // The staging buffer is reused by the next swap.
    fail(cuda_status(cudaStreamSynchronize(stream_), "swapping a KV block in"));
}

void DeviceKvCache::move_lane(int layer, int kv_head, BlockId from, int from_slot, BlockId to,
                              int to_slot) {
    const int64_t elem = static_cast<int64_t>(kernels::dtype_bytes(dtype_));
    const int64_t head_bytes = head_dim_ * elem;
    auto offset = [&](BlockId b, int slot) {
        return ((static_cast<int64_t>(b) * block_size_ + slot) * n_kv_heads_ + kv_head) *
               head_bytes;
    };
    for (int kv = 0; kv < 2; ++kv) {
        char* base = pool(2 * layer + kv);
        fail(cuda_status(
            cudaMemcpyAsync(base + offset(to, to_slot), base + offset(from, from_slot),
                            static_cast<size_t>(head_bytes), cudaMemcpyDeviceToDevice, stream_),
            "moving a token within the KV cache"));
    }
}

}  // namespace kvscope::gpu
