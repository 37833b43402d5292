#include "engine/kv_cache.h"

#include <algorithm>
#include <cstring>

namespace kvscope {

KvCacheStorage::KvCacheStorage(const ModelConfig& config, int32_t block_size, int32_t num_blocks)
    : block_size_(block_size),
      num_blocks_(num_blocks),
      kv_dim_(config.kv_dim()),
      n_layers_(config.n_layers),
      keys_(static_cast<size_t>(config.n_layers)),
      values_(static_cast<size_t>(config.n_layers)) {
    size_t floats = block_floats() * static_cast<size_t>(num_blocks);
    for (auto& k : keys_)
        k.assign(floats, 0.0f);
    for (auto& v : values_)
        v.assign(floats, 0.0f);
}

size_t KvCacheStorage::bytes_per_block() const {
    return 2 * block_floats() * static_cast<size_t>(n_layers_) * sizeof(float);
}

void KvCacheStorage::copy_block(BlockId src, BlockId dst) {
    size_t n = block_floats();
    for (int l = 0; l < n_layers_; ++l) {
        std::memcpy(key(l, dst, 0), key(l, src, 0), n * sizeof(float));
        std::memcpy(value(l, dst, 0), value(l, src, 0), n * sizeof(float));
    }
}

void KvCacheStorage::save_block(BlockId block, std::vector<float>& out) const {
    size_t n = block_floats();
    out.resize(2 * n * static_cast<size_t>(n_layers_));
    float* p = out.data();
    for (int l = 0; l < n_layers_; ++l) {
        p = std::copy_n(key(l, block, 0), n, p);
        p = std::copy_n(value(l, block, 0), n, p);
    }
}

void KvCacheStorage::load_block(BlockId block, const std::vector<float>& in) {
    size_t n = block_floats();
    const float* p = in.data();
    for (int l = 0; l < n_layers_; ++l) {
        std::copy_n(p, n, key(l, block, 0));
        p += n;
        std::copy_n(p, n, value(l, block, 0));
        p += n;
    }
}

}  // namespace kvscope
