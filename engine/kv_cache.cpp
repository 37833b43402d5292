#include "engine/kv_cache.h"

#include <algorithm>
#include <cstring>

namespace kvscope {

KvCacheStorage::KvCacheStorage(const ModelConfig& config, int32_t block_size, int32_t num_blocks,
                               KvDtype dtype)
    : dtype_(dtype),
      block_size_(block_size),
      num_blocks_(num_blocks),
      kv_dim_(config.kv_dim()),
      n_layers_(config.n_layers),
      n_kv_heads_(config.n_kv_heads),
      head_dim_(config.head_dim),
      layers_(static_cast<size_t>(config.n_layers)) {
    const size_t elems = elem_bytes_per_block() * static_cast<size_t>(num_blocks);
    const size_t slots = static_cast<size_t>(num_blocks) * static_cast<size_t>(block_size);
    for (Layer& L : layers_) {
        L.k = OnDemandArray<uint8_t>(elems);
        L.v = OnDemandArray<uint8_t>(elems);
        if (dtype == KvDtype::kInt8) {
            L.k_scale = OnDemandArray<float>(slots * static_cast<size_t>(n_kv_heads_));
            L.v_scale = OnDemandArray<float>(slots * static_cast<size_t>(n_kv_heads_));
        }
        if (dtype == KvDtype::kInt4) {
            L.v_scale = OnDemandArray<float>(
                slots * static_cast<size_t>(n_kv_heads_ * groups_per_head()) * 2);
            L.k_params = OnDemandArray<float>(static_cast<size_t>(num_blocks) *
                                              static_cast<size_t>(kv_dim_) * 2);
        }
    }
}

size_t KvCacheStorage::elem_bytes_per_block() const {
    const size_t elems = static_cast<size_t>(block_size_) * static_cast<size_t>(kv_dim_);
    switch (dtype_) {
        case KvDtype::kF32:
            return elems * 4;
        case KvDtype::kF16:
            return elems * 2;
        case KvDtype::kInt8:
            return elems;
        case KvDtype::kInt4:
            return (elems + 1) / 2;
    }
    return elems * 4;
}

size_t KvCacheStorage::bytes_per_block() const {
    size_t scales = 0;
    const size_t slots_heads = static_cast<size_t>(block_size_) * static_cast<size_t>(n_kv_heads_);
    if (dtype_ == KvDtype::kInt8) scales = 2 * slots_heads * sizeof(float);
    if (dtype_ == KvDtype::kInt4)
        scales = (slots_heads * static_cast<size_t>(groups_per_head()) * 2 +  // values
                  static_cast<size_t>(kv_dim_) * 2) *                         // keys
                 sizeof(float);
    return (2 * elem_bytes_per_block() + scales) * static_cast<size_t>(n_layers_);
}

size_t KvCacheStorage::open_block_bytes(BlockId block) const {
    size_t bytes = 0;
    for (const Layer& L : layers_)
        if (auto it = L.open_keys.find(block); it != L.open_keys.end())
            bytes += it->second.size() * sizeof(float);
    return bytes;
}

void KvCacheStorage::write(int layer, BlockId block, int slot, const float* k, const float* v) {
    Layer& L = layers_[static_cast<size_t>(layer)];
    const size_t at = slot_index(block, slot);
    const auto dim = static_cast<size_t>(kv_dim_), hd = static_cast<size_t>(head_dim_);
    switch (dtype_) {
        case KvDtype::kF32:
            std::memcpy(f32(L.k, block, slot), k, dim * sizeof(float));
            std::memcpy(f32(L.v, block, slot), v, dim * sizeof(float));
            return;
        case KvDtype::kF16: {
            auto* kq = reinterpret_cast<uint16_t*>(L.k.data()) + at * dim;
            auto* vq = reinterpret_cast<uint16_t*>(L.v.data()) + at * dim;
            for (size_t i = 0; i < dim; ++i) {
                kq[i] = float_to_half(k[i]);
                vq[i] = float_to_half(v[i]);
            }
            return;
        }
        case KvDtype::kInt8:
            for (size_t h = 0; h < static_cast<size_t>(n_kv_heads_); ++h) {
                auto* kq = reinterpret_cast<int8_t*>(L.k.data()) + at * dim + h * hd;
                auto* vq = reinterpret_cast<int8_t*>(L.v.data()) + at * dim + h * hd;
                L.k_scale[at * static_cast<size_t>(n_kv_heads_) + h] =
                    quantize_int8(k + h * hd, hd, kq);
                L.v_scale[at * static_cast<size_t>(n_kv_heads_) + h] =
                    quantize_int8(v + h * hd, hd, vq);
            }
            return;
        case KvDtype::kInt4: {
            // Values: per token and head, groups of 32 channels.
            uint8_t* vq = L.v.data() + at * dim / 2;
            const auto groups = static_cast<size_t>(groups_per_head());
            for (size_t h = 0; h < static_cast<size_t>(n_kv_heads_); ++h)
                for (size_t g = 0; g < groups; ++g) {
                    size_t c0 = h * hd + g * 32, n = std::min<size_t>(32, hd - g * 32);
                    Int4Params p = int4_params(v + c0, n, 1);
                    float* params =
                        &L.v_scale[((at * static_cast<size_t>(n_kv_heads_) + h) * groups + g) * 2];
                    params[0] = p.scale;
                    params[1] = p.min;
                    for (size_t c = 0; c < n; ++c)
                        set_nibble(vq, c0 + c, int4_encode(v[c0 + c], p));
                }
            // Keys: in f32 until the block's last slot is written, then per channel together.
            std::vector<float>& open = L.open_keys[block];
            open.resize(static_cast<size_t>(block_size_) * dim, 0.0f);
            std::copy_n(k, dim, open.begin() + static_cast<long>(static_cast<size_t>(slot) * dim));
            if (slot == block_size_ - 1) quantize_block_keys(L, block);
            return;
        }
    }
}

void KvCacheStorage::quantize_block_keys(Layer& L, BlockId block) {
    auto it = L.open_keys.find(block);
    if (it == L.open_keys.end()) return;
    const std::vector<float>& open = it->second;
    const auto dim = static_cast<size_t>(kv_dim_), bs = static_cast<size_t>(block_size_);
    uint8_t* kq = L.k.data() + slot_index(block, 0) * dim / 2;
    for (size_t c = 0; c < dim; ++c) {
        Int4Params p = int4_params(open.data() + c, bs, dim);
        float* params = &L.k_params[(static_cast<size_t>(block) * dim + c) * 2];
        params[0] = p.scale;
        params[1] = p.min;
        for (size_t s = 0; s < bs; ++s)
            set_nibble(kq, s * dim + c, int4_encode(open[s * dim + c], p));
    }
    L.open_keys.erase(it);
}

void KvCacheStorage::read_lane(int layer, BlockId block, int kv_head, int count, float* k,
                               float* v) const {
    const Layer& L = layers_[static_cast<size_t>(layer)];
    const auto dim = static_cast<size_t>(kv_dim_), hd = static_cast<size_t>(head_dim_);
    const auto h = static_cast<size_t>(kv_head), heads = static_cast<size_t>(n_kv_heads_);
    auto open = L.open_keys.end();
    if (dtype_ == KvDtype::kInt4 && k) open = L.open_keys.find(block);
    for (size_t s = 0; s < static_cast<size_t>(count); ++s) {
        const size_t at = slot_index(block, static_cast<int>(s));
        const size_t e = at * dim + h * hd;  // the head's first element
        float* ko = k ? k + s * hd : nullptr;
        float* vo = v ? v + s * hd : nullptr;
        switch (dtype_) {
            case KvDtype::kF32:
                if (ko) std::memcpy(ko, reinterpret_cast<const float*>(L.k.data()) + e, hd * 4);
                if (vo) std::memcpy(vo, reinterpret_cast<const float*>(L.v.data()) + e, hd * 4);
                break;
            case KvDtype::kF16:
                for (size_t i = 0; i < hd; ++i) {
                    if (ko)
                        ko[i] = half_to_float(reinterpret_cast<const uint16_t*>(L.k.data())[e + i]);
                    if (vo)
                        vo[i] = half_to_float(reinterpret_cast<const uint16_t*>(L.v.data())[e + i]);
                }
                break;
            case KvDtype::kInt8:
                if (ko)
                    dequantize_int8(reinterpret_cast<const int8_t*>(L.k.data()) + e, hd,
                                    L.k_scale[at * heads + h], ko);
                if (vo)
                    dequantize_int8(reinterpret_cast<const int8_t*>(L.v.data()) + e, hd,
                                    L.v_scale[at * heads + h], vo);
                break;
            case KvDtype::kInt4: {
                const auto groups = static_cast<size_t>(groups_per_head());
                if (vo)
                    for (size_t i = 0; i < hd; ++i) {
                        const float* p = &L.v_scale[((at * heads + h) * groups + i / 32) * 2];
                        vo[i] = int4_decode(get_nibble(L.v.data(), e + i), {p[0], p[1]});
                    }
                if (!ko) break;
                if (open != L.open_keys.end()) {
                    std::copy_n(open->second.begin() + static_cast<long>(s * dim + h * hd), hd, ko);
                } else {
                    for (size_t i = 0; i < hd; ++i) {
                        const float* p =
                            &L.k_params[(static_cast<size_t>(block) * dim + h * hd + i) * 2];
                        ko[i] = int4_decode(get_nibble(L.k.data(), e + i), {p[0], p[1]});
                    }
                }
                break;
            }
        }
    }
}

void KvCacheStorage::move_lane(int layer, int kv_head, BlockId from, int from_slot, BlockId to,
                               int to_slot) {
    Layer& L = layers_[static_cast<size_t>(layer)];
    const auto dim = static_cast<size_t>(kv_dim_), hd = static_cast<size_t>(head_dim_);
    const auto h = static_cast<size_t>(kv_head);
    const size_t a = slot_index(from, from_slot), b = slot_index(to, to_slot);
    const size_t width = dtype_ == KvDtype::kF32 ? 4 : dtype_ == KvDtype::kF16 ? 2 : 1;
    for (OnDemandArray<uint8_t>* elems : {&L.k, &L.v})
        std::memmove(elems->data() + (b * dim + h * hd) * width,
                     elems->data() + (a * dim + h * hd) * width, hd * width);
    if (dtype_ == KvDtype::kInt8)
        for (OnDemandArray<float>* scale : {&L.k_scale, &L.v_scale})
            (*scale)[b * static_cast<size_t>(n_kv_heads_) + h] =
                (*scale)[a * static_cast<size_t>(n_kv_heads_) + h];
}

void KvCacheStorage::discard_block(BlockId block) {
    const auto b = static_cast<size_t>(block);
    const size_t eb = elem_bytes_per_block();
    for (Layer& L : layers_) {
        L.k.release(b * eb, eb);
        L.v.release(b * eb, eb);
        // Scales are laid out per slot (k_params per block): the block's share of each.
        for (OnDemandArray<float>* scales : {&L.k_scale, &L.v_scale})
            if (!scales->empty()) {
                const size_t per_block = scales->size() / static_cast<size_t>(num_blocks_);
                scales->release(b * per_block, per_block);
            }
        const size_t params = static_cast<size_t>(kv_dim_) * 2;
        if (!L.k_params.empty()) L.k_params.release(b * params, params);
    }
}

void KvCacheStorage::copy_block(BlockId src, BlockId dst) {
    std::vector<uint8_t> bytes;
    save_block(src, bytes);
    load_block(dst, bytes);
}

namespace {
// Appends or reads back `n` bytes at `p`.
void put(std::vector<uint8_t>& out, const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
}
}  // namespace

void KvCacheStorage::save_block(BlockId block, std::vector<uint8_t>& out) const {
    out.clear();
    const size_t eb = elem_bytes_per_block();
    const size_t slots = static_cast<size_t>(block_size_);
    const size_t first = slot_index(block, 0);
    for (const Layer& L : layers_) {
        put(out, L.k.data() + static_cast<size_t>(block) * eb, eb);
        put(out, L.v.data() + static_cast<size_t>(block) * eb, eb);
        if (!L.k_scale.empty()) {
            const size_t n = slots * static_cast<size_t>(n_kv_heads_);
            put(out, &L.k_scale[first * static_cast<size_t>(n_kv_heads_)], n * sizeof(float));
        }
        if (!L.v_scale.empty()) {
            const size_t per_slot = L.v_scale.size() / (static_cast<size_t>(num_blocks_) * slots);
            put(out, &L.v_scale[first * per_slot], slots * per_slot * sizeof(float));
        }
        if (!L.k_params.empty()) {
            const size_t n = static_cast<size_t>(kv_dim_) * 2;
            put(out, &L.k_params[static_cast<size_t>(block) * n], n * sizeof(float));
        }
        if (dtype_ == KvDtype::kInt4) {
            auto it = L.open_keys.find(block);
            const uint8_t open = it != L.open_keys.end();
            put(out, &open, 1);
            if (open) put(out, it->second.data(), it->second.size() * sizeof(float));
        }
    }
}

void KvCacheStorage::load_block(BlockId block, const std::vector<uint8_t>& in) {
    const size_t eb = elem_bytes_per_block();
    const size_t slots = static_cast<size_t>(block_size_);
    const size_t first = slot_index(block, 0);
    const uint8_t* p = in.data();
    auto take = [&](void* dst, size_t n) {
        std::memcpy(dst, p, n);
        p += n;
    };
    for (Layer& L : layers_) {
        take(L.k.data() + static_cast<size_t>(block) * eb, eb);
        take(L.v.data() + static_cast<size_t>(block) * eb, eb);
        if (!L.k_scale.empty())
            take(&L.k_scale[first * static_cast<size_t>(n_kv_heads_)],
                 slots * static_cast<size_t>(n_kv_heads_) * sizeof(float));
        if (!L.v_scale.empty()) {
            const size_t per_slot = L.v_scale.size() / (static_cast<size_t>(num_blocks_) * slots);
            take(&L.v_scale[first * per_slot], slots * per_slot * sizeof(float));
        }
        if (!L.k_params.empty()) {
            const size_t n = static_cast<size_t>(kv_dim_) * 2;
            take(&L.k_params[static_cast<size_t>(block) * n], n * sizeof(float));
        }
        if (dtype_ == KvDtype::kInt4) {
            uint8_t open = 0;
            take(&open, 1);
            if (open) {
                std::vector<float>& keys = L.open_keys[block];
                keys.resize(slots * static_cast<size_t>(kv_dim_));
                take(keys.data(), keys.size() * sizeof(float));
            } else {
                L.open_keys.erase(block);
            }
        }
    }
}

}  // namespace kvscope
