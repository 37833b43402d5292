#include "engine/kv_cache.h"

#include <algorithm>
#include <cstring>

namespace kvscope {

KvCacheStorage::KvCacheStorage(const ModelConfig& config, int32_t block_size, int32_t num_blocks,
                               KvDtype dtype, const std::vector<KvDtype>& layer_dtypes)
    : block_size_(block_size),
      num_blocks_(num_blocks),
      kv_dim_(config.kv_dim()),
      n_layers_(config.n_layers),
      n_kv_heads_(config.n_kv_heads),
      head_dim_(config.head_dim),
      layers_(static_cast<size_t>(config.n_layers)) {
    const size_t slots = static_cast<size_t>(num_blocks) * static_cast<size_t>(block_size);
    for (size_t l = 0; l < layers_.size(); ++l) {
        Layer& L = layers_[l];
        L.dtype = layer_dtypes.empty() ? dtype : layer_dtypes[l];
        const size_t elems = elem_bytes_per_block(L) * static_cast<size_t>(num_blocks);
        L.k = OnDemandArray<uint8_t>(elems);
        L.v = OnDemandArray<uint8_t>(elems);
        if (L.dtype == KvDtype::kInt8) {
            L.k_scale = OnDemandArray<uint16_t>(slots * static_cast<size_t>(n_kv_heads_));
            L.v_scale = OnDemandArray<uint16_t>(slots * static_cast<size_t>(n_kv_heads_));
        }
        if (kv_code_bits(L.dtype) > 0) {
            L.v_params = OnDemandArray<uint16_t>(slots * v_params_per_slot());
            L.k_params = OnDemandArray<uint16_t>(static_cast<size_t>(num_blocks) *
                                                 static_cast<size_t>(kv_dim_) * 2);
        }
    }
}

size_t KvCacheStorage::elem_bytes_per_block(const Layer& L) const {
    return kv_element_bytes(L.dtype,
                            static_cast<size_t>(block_size_) * static_cast<size_t>(kv_dim_));
}

size_t KvCacheStorage::layer_bytes_per_block(int layer) const {
    return kv_layer_block_bytes(layers_[static_cast<size_t>(layer)].dtype, block_size_, n_kv_heads_,
                                head_dim_);
}

size_t KvCacheStorage::bytes_per_block() const {
    size_t bytes = 0;
    for (int l = 0; l < n_layers_; ++l)
        bytes += layer_bytes_per_block(l);
    return bytes;
}

size_t KvCacheStorage::open_block_bytes(BlockId block) const {
    size_t bytes = 0;
    for (const Layer& L : layers_)
        if (auto it = L.open_keys.find(block); it != L.open_keys.end())
            bytes += it->second.size() * sizeof(uint16_t);
    return bytes;
}

void KvCacheStorage::write(int layer, BlockId block, int slot, const float* k, const float* v) {
    Layer& L = layers_[static_cast<size_t>(layer)];
    const size_t at = slot_index(block, slot);
    const auto dim = static_cast<size_t>(kv_dim_), hd = static_cast<size_t>(head_dim_);
    switch (L.dtype) {
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
        case KvDtype::kInt4:
        case KvDtype::kInt2: {
            // Values: per token and head, groups of 32 channels. Codes are indexed by element
            // within the block, whose bytes are its own whatever the block size.
            const int bits = kv_code_bits(L.dtype);
            uint8_t* codes = L.v.data() + static_cast<size_t>(block) * elem_bytes_per_block(L);
            const size_t e = static_cast<size_t>(slot) * dim;
            const auto groups = static_cast<size_t>(groups_per_head());
            for (size_t h = 0; h < static_cast<size_t>(n_kv_heads_); ++h)
                for (size_t g = 0; g < groups; ++g) {
                    size_t c0 = h * hd + g * 32, n = std::min<size_t>(32, hd - g * 32);
                    AsymParams p = asym_params(v + c0, n, 1, bits);
                    uint16_t* params = &L.v_params[at * v_params_per_slot() + (h * groups + g) * 2];
                    params[0] = p.scale;
                    params[1] = p.min;
                    for (size_t c = 0; c < n; ++c)
                        set_code(codes, e + c0 + c, asym_encode(v[c0 + c], p, bits), bits);
                }
            // Keys: in f16 until the block's last slot is written, then per channel together.
            std::vector<uint16_t>& open = L.open_keys[block];
            open.resize(static_cast<size_t>(block_size_) * dim, 0);
            for (size_t i = 0; i < dim; ++i)
                open[static_cast<size_t>(slot) * dim + i] = float_to_half(k[i]);
            if (slot == block_size_ - 1) quantize_block_keys(L, block);
            return;
        }
    }
}

void KvCacheStorage::quantize_block_keys(Layer& L, BlockId block) {
    auto it = L.open_keys.find(block);
    if (it == L.open_keys.end()) return;
    const int bits = kv_code_bits(L.dtype);
    const auto dim = static_cast<size_t>(kv_dim_), bs = static_cast<size_t>(block_size_);
    std::vector<float> open(it->second.size());
    std::transform(it->second.begin(), it->second.end(), open.begin(), half_to_float);
    uint8_t* codes = L.k.data() + static_cast<size_t>(block) * elem_bytes_per_block(L);
    for (size_t c = 0; c < dim; ++c) {
        AsymParams p = asym_params(open.data() + c, bs, dim, bits);
        uint16_t* params = &L.k_params[(static_cast<size_t>(block) * dim + c) * 2];
        params[0] = p.scale;
        params[1] = p.min;
        for (size_t s = 0; s < bs; ++s)
            set_code(codes, s * dim + c, asym_encode(open[s * dim + c], p, bits), bits);
    }
    L.open_keys.erase(it);
}

void KvCacheStorage::read_lane(int layer, BlockId block, int kv_head, int count, float* k,
                               float* v) const {
    const Layer& L = layers_[static_cast<size_t>(layer)];
    const auto dim = static_cast<size_t>(kv_dim_), hd = static_cast<size_t>(head_dim_);
    const auto h = static_cast<size_t>(kv_head), heads = static_cast<size_t>(n_kv_heads_);
    const int bits = kv_code_bits(L.dtype);
    auto open = L.open_keys.end();
    if (bits > 0 && k) open = L.open_keys.find(block);
    for (size_t s = 0; s < static_cast<size_t>(count); ++s) {
        const size_t at = slot_index(block, static_cast<int>(s));
        const size_t e = at * dim + h * hd;  // the head's first element
        float* ko = k ? k + s * hd : nullptr;
        float* vo = v ? v + s * hd : nullptr;
        switch (L.dtype) {
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
            case KvDtype::kInt4:
            case KvDtype::kInt2: {
                const auto groups = static_cast<size_t>(groups_per_head());
                const size_t block_bytes = elem_bytes_per_block(L);
                const uint8_t* kcodes = L.k.data() + static_cast<size_t>(block) * block_bytes;
                const uint8_t* vcodes = L.v.data() + static_cast<size_t>(block) * block_bytes;
                const size_t c0 = s * dim + h * hd;  // the head's first code in the block
                if (vo)
                    for (size_t i = 0; i < hd; ++i) {
                        const uint16_t* p =
                            &L.v_params[at * v_params_per_slot() + (h * groups + i / 32) * 2];
                        vo[i] = asym_decode(get_code(vcodes, c0 + i, bits), {p[0], p[1]});
                    }
                if (!ko) break;
                if (open != L.open_keys.end()) {
                    for (size_t i = 0; i < hd; ++i)
                        ko[i] = half_to_float(open->second[s * dim + h * hd + i]);
                } else {
                    for (size_t i = 0; i < hd; ++i) {
                        const uint16_t* p =
                            &L.k_params[(static_cast<size_t>(block) * dim + h * hd + i) * 2];
                        ko[i] = asym_decode(get_code(kcodes, c0 + i, bits), {p[0], p[1]});
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
    const size_t width = L.dtype == KvDtype::kF32 ? 4 : L.dtype == KvDtype::kF16 ? 2 : 1;
    for (OnDemandArray<uint8_t>* elems : {&L.k, &L.v})
        std::memmove(elems->data() + (b * dim + h * hd) * width,
                     elems->data() + (a * dim + h * hd) * width, hd * width);
    if (L.dtype == KvDtype::kInt8)
        for (OnDemandArray<uint16_t>* scale : {&L.k_scale, &L.v_scale})
            (*scale)[b * static_cast<size_t>(n_kv_heads_) + h] =
                (*scale)[a * static_cast<size_t>(n_kv_heads_) + h];
}

void KvCacheStorage::discard_block(BlockId block) {
    const auto b = static_cast<size_t>(block);
    for (Layer& L : layers_) {
        const size_t eb = elem_bytes_per_block(L);
        L.k.release(b * eb, eb);
        L.v.release(b * eb, eb);
        // Scales are laid out per slot (k_params per block): the block's share of each.
        for (OnDemandArray<uint16_t>* params : {&L.k_scale, &L.v_scale, &L.v_params, &L.k_params})
            if (!params->empty()) {
                const size_t per_block = params->size() / static_cast<size_t>(num_blocks_);
                params->release(b * per_block, per_block);
            }
    }
}

void KvCacheStorage::copy_block(BlockId src, BlockId dst) {
    std::vector<uint8_t> bytes;
    save_block(src, bytes);
    load_block(dst, bytes);
}

namespace {
// Appends `n` bytes at `p`.
void put(std::vector<uint8_t>& out, const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
}
}  // namespace

// Per layer, in the layer's dtype: K and V elements, then whichever of int8's scales, the
// value and key parameters, and the open keys (a flag, then the f16 keys) the dtype has.
void KvCacheStorage::save_block(BlockId block, std::vector<uint8_t>& out) const {
    out.clear();
    const auto b = static_cast<size_t>(block);
    for (const Layer& L : layers_) {
        const size_t eb = elem_bytes_per_block(L);
        put(out, L.k.data() + b * eb, eb);
        put(out, L.v.data() + b * eb, eb);
        for (const OnDemandArray<uint16_t>* params :
             {&L.k_scale, &L.v_scale, &L.v_params, &L.k_params})
            if (!params->empty()) {
                const size_t per_block = params->size() / static_cast<size_t>(num_blocks_);
                put(out, params->data() + b * per_block, per_block * sizeof(uint16_t));
            }
        if (kv_keys_grouped_per_block(L.dtype)) {
            auto it = L.open_keys.find(block);
            const uint8_t open = it != L.open_keys.end();
            put(out, &open, 1);
            if (open) put(out, it->second.data(), it->second.size() * sizeof(uint16_t));
        }
    }
}

void KvCacheStorage::load_block(BlockId block, const std::vector<uint8_t>& in) {
    const auto b = static_cast<size_t>(block);
    const uint8_t* p = in.data();
    auto take = [&](void* dst, size_t n) {
        std::memcpy(dst, p, n);
        p += n;
    };
    for (Layer& L : layers_) {
        const size_t eb = elem_bytes_per_block(L);
        take(L.k.data() + b * eb, eb);
        take(L.v.data() + b * eb, eb);
        for (OnDemandArray<uint16_t>* params : {&L.k_scale, &L.v_scale, &L.v_params, &L.k_params})
            if (!params->empty()) {
                const size_t per_block = params->size() / static_cast<size_t>(num_blocks_);
                take(params->data() + b * per_block, per_block * sizeof(uint16_t));
            }
        if (kv_keys_grouped_per_block(L.dtype)) {
            uint8_t open = 0;
            take(&open, 1);
            if (open) {
                std::vector<uint16_t>& keys = L.open_keys[block];
                keys.resize(static_cast<size_t>(block_size_) * static_cast<size_t>(kv_dim_));
                take(keys.data(), keys.size() * sizeof(uint16_t));
            } else {
                L.open_keys.erase(block);
            }
        }
    }
}

}  // namespace kvscope
