#include "engine/kv_cache.h"

#include <algorithm>
#include <cstring>

namespace kvscope {

KvCacheStorage::KvCacheStorage(const ModelConfig& config, int32_t block_size, int32_t num_blocks,
                               KvDtype dtype, const std::vector<KvDtype>& layer_dtypes,
                               std::optional<KvDtype> low)
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
        init_layer(L, layer_dtypes.empty() ? dtype : layer_dtypes[l], false);
        if (low) {
            L.low = std::make_unique<Layer>();
            init_layer(*L.low, *low, kv_keys_grouped_per_block(*low));
            L.tier = OnDemandArray<uint8_t>(slots * static_cast<size_t>(n_kv_heads_));
        }
    }
}

void KvCacheStorage::init_layer(Layer& L, KvDtype dtype, bool keys_per_token) {
    const size_t slots = static_cast<size_t>(num_blocks_) * static_cast<size_t>(block_size_);
    L.dtype = dtype;
    L.keys_per_token = keys_per_token;
    const size_t elems = elem_bytes_per_block(L) * static_cast<size_t>(num_blocks_);
    L.k = OnDemandArray<uint8_t>(elems);
    L.v = OnDemandArray<uint8_t>(elems);
    if (L.dtype == KvDtype::kInt8) {
        L.k_scale = OnDemandArray<uint16_t>(slots * static_cast<size_t>(n_kv_heads_));
        L.v_scale = OnDemandArray<uint16_t>(slots * static_cast<size_t>(n_kv_heads_));
    }
    if (kv_code_bits(L.dtype) > 0) {
        L.v_params = OnDemandArray<uint16_t>(slots * v_params_per_slot());
        L.k_params = OnDemandArray<uint16_t>(keys_per_token ? slots * v_params_per_slot()
                                                            : static_cast<size_t>(num_blocks_) *
                                                                  static_cast<size_t>(kv_dim_) * 2);
    }
}

size_t KvCacheStorage::elem_bytes_per_block(const Layer& L) const {
    return kv_element_bytes(L.dtype,
                            static_cast<size_t>(block_size_) * static_cast<size_t>(kv_dim_));
}

size_t KvCacheStorage::bytes_of_block(const Layer& L) const {
    if (!L.keys_per_token || kv_code_bits(L.dtype) == 0)
        return kv_layer_block_bytes(L.dtype, block_size_, n_kv_heads_, head_dim_);
    // int4 / int2 keys quantized per token (the mixed cache's low tier): their (scale, min) per
    // slot, head and group, as values have them, instead of per channel of the block.
    const size_t halves = 2 * static_cast<size_t>(block_size_) * v_params_per_slot();
    return 2 * elem_bytes_per_block(L) + halves * sizeof(uint16_t);
}

size_t KvCacheStorage::layer_bytes_per_block(int layer) const {
    const Layer& L = layers_[static_cast<size_t>(layer)];
    // Mixed: every token counted in the high tier, and the tier byte of each slot and head;
    // what the low tier's tokens save is counted per sequence (kv_mixing.h).
    const size_t tier =
        L.low ? static_cast<size_t>(block_size_) * static_cast<size_t>(n_kv_heads_) : 0;
    return bytes_of_block(L) + tier;
}

int64_t KvCacheStorage::low_bytes_per_lane_token(int layer) const {
    const Layer& L = layers_[static_cast<size_t>(layer)];
    return L.low ? lane_token_bytes(*L.low) : 0;
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

void KvCacheStorage::store_head(Layer& L, size_t at, BlockId block, int slot, size_t h,
                                const float* k, const float* v) {
    const auto dim = static_cast<size_t>(kv_dim_), hd = static_cast<size_t>(head_dim_);
    const size_t e = at * dim + h * hd;  // the head's first element
    switch (L.dtype) {
        case KvDtype::kF32:
            std::memcpy(reinterpret_cast<float*>(L.k.data()) + e, k, hd * sizeof(float));
            std::memcpy(reinterpret_cast<float*>(L.v.data()) + e, v, hd * sizeof(float));
            return;
        case KvDtype::kF16: {
            auto* kq = reinterpret_cast<uint16_t*>(L.k.data()) + e;
            auto* vq = reinterpret_cast<uint16_t*>(L.v.data()) + e;
            for (size_t i = 0; i < hd; ++i) {
                kq[i] = float_to_half(k[i]);
                vq[i] = float_to_half(v[i]);
            }
            return;
        }
        case KvDtype::kInt8:
            L.k_scale[at * static_cast<size_t>(n_kv_heads_) + h] =
                quantize_int8(k, hd, reinterpret_cast<int8_t*>(L.k.data()) + e);
            L.v_scale[at * static_cast<size_t>(n_kv_heads_) + h] =
                quantize_int8(v, hd, reinterpret_cast<int8_t*>(L.v.data()) + e);
            return;
        case KvDtype::kInt4:
        case KvDtype::kInt2: {
            // Per token and head, groups of 32 channels: values, and keys where they are grouped
            // per token. Codes are indexed by element within the block, whose bytes are its own
            // whatever the block size.
            const int bits = kv_code_bits(L.dtype);
            const size_t block_bytes = static_cast<size_t>(block) * elem_bytes_per_block(L);
            const size_t c0 = static_cast<size_t>(slot) * dim + h * hd;
            const auto groups = static_cast<size_t>(groups_per_head());
            auto per_token = [&](const float* x, uint8_t* codes, OnDemandArray<uint16_t>& params) {
                for (size_t g = 0; g < groups; ++g) {
                    const size_t n = std::min<size_t>(32, hd - g * 32);
                    AsymParams p = asym_params(x + g * 32, n, 1, bits);
                    uint16_t* ps = &params[at * v_params_per_slot() + (h * groups + g) * 2];
                    ps[0] = p.scale;
                    ps[1] = p.min;
                    for (size_t c = 0; c < n; ++c)
                        set_code(codes, c0 + g * 32 + c, asym_encode(x[g * 32 + c], p, bits), bits);
                }
            };
            per_token(v, L.v.data() + block_bytes, L.v_params);
            if (L.keys_per_token) per_token(k, L.k.data() + block_bytes, L.k_params);
            return;
        }
    }
}

void KvCacheStorage::write(int layer, BlockId block, int slot, const float* k, const float* v) {
    Layer& L = layers_[static_cast<size_t>(layer)];
    const size_t at = slot_index(block, slot);
    const auto dim = static_cast<size_t>(kv_dim_), hd = static_cast<size_t>(head_dim_);
    for (size_t h = 0; h < static_cast<size_t>(n_kv_heads_); ++h) {
        store_head(L, at, block, slot, h, k + h * hd, v + h * hd);
        if (L.low) L.tier[at * static_cast<size_t>(n_kv_heads_) + h] = 0;  // a new token: high
    }
    if (!kv_keys_grouped_per_block(L.dtype)) return;
    // int4 / int2 keys: in f16 until the block's last slot is written, then per channel together.
    std::vector<uint16_t>& open = L.open_keys[block];
    open.resize(static_cast<size_t>(block_size_) * dim, 0);
    for (size_t i = 0; i < dim; ++i)
        open[static_cast<size_t>(slot) * dim + i] = float_to_half(k[i]);
    if (slot == block_size_ - 1) quantize_block_keys(L, block);
}

void KvCacheStorage::write_head(int layer, BlockId block, int slot, int kv_head, const float* k,
                                const float* v) {
    Layer& L = layers_[static_cast<size_t>(layer)];
    const size_t at = slot_index(block, slot);
    const auto h = static_cast<size_t>(kv_head);
    Layer& T = L.low && L.tier[at * static_cast<size_t>(n_kv_heads_) + h] ? *L.low : L;
    store_head(T, at, block, slot, h, k, v);
}

void KvCacheStorage::store_low(int layer, BlockId block, int slot, int kv_head) {
    Layer& L = layers_[static_cast<size_t>(layer)];
    const size_t at = slot_index(block, slot);
    const auto h = static_cast<size_t>(kv_head);
    uint8_t& tier = L.tier[at * static_cast<size_t>(n_kv_heads_) + h];
    if (!L.low || tier) return;
    std::vector<float> k(static_cast<size_t>(head_dim_)), v(k.size());
    load_head(L, at, block, slot, h, k.data(), v.data());
    store_head(*L.low, at, block, slot, h, k.data(), v.data());
    tier = 1;
}

bool KvCacheStorage::in_low(int layer, BlockId block, int slot, int kv_head) const {
    const Layer& L = layers_[static_cast<size_t>(layer)];
    return L.low && L.tier[slot_index(block, slot) * static_cast<size_t>(n_kv_heads_) +
                           static_cast<size_t>(kv_head)];
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

void KvCacheStorage::load_head(const Layer& L, size_t at, BlockId block, int slot, size_t h,
                               float* ko, float* vo) const {
    const auto dim = static_cast<size_t>(kv_dim_), hd = static_cast<size_t>(head_dim_);
    const auto heads = static_cast<size_t>(n_kv_heads_);
    const size_t e = at * dim + h * hd;  // the head's first element
    switch (L.dtype) {
        case KvDtype::kF32:
            if (ko) std::memcpy(ko, reinterpret_cast<const float*>(L.k.data()) + e, hd * 4);
            if (vo) std::memcpy(vo, reinterpret_cast<const float*>(L.v.data()) + e, hd * 4);
            return;
        case KvDtype::kF16:
            for (size_t i = 0; i < hd; ++i) {
                if (ko) ko[i] = half_to_float(reinterpret_cast<const uint16_t*>(L.k.data())[e + i]);
                if (vo) vo[i] = half_to_float(reinterpret_cast<const uint16_t*>(L.v.data())[e + i]);
            }
            return;
        case KvDtype::kInt8:
            if (ko)
                dequantize_int8(reinterpret_cast<const int8_t*>(L.k.data()) + e, hd,
                                L.k_scale[at * heads + h], ko);
            if (vo)
                dequantize_int8(reinterpret_cast<const int8_t*>(L.v.data()) + e, hd,
                                L.v_scale[at * heads + h], vo);
            return;
        case KvDtype::kInt4:
        case KvDtype::kInt2: {
            const int bits = kv_code_bits(L.dtype);
            const auto groups = static_cast<size_t>(groups_per_head());
            const size_t block_bytes = static_cast<size_t>(block) * elem_bytes_per_block(L);
            const size_t c0 = static_cast<size_t>(slot) * dim + h * hd;  // first code in block
            auto per_token = [&](const uint8_t* codes, const OnDemandArray<uint16_t>& params,
                                 float* out) {
                for (size_t i = 0; i < hd; ++i) {
                    const uint16_t* p =
                        &params[at * v_params_per_slot() + (h * groups + i / 32) * 2];
                    out[i] = asym_decode(get_code(codes, c0 + i, bits), {p[0], p[1]});
                }
            };
            if (vo) per_token(L.v.data() + block_bytes, L.v_params, vo);
            if (!ko) return;
            if (L.keys_per_token) {
                per_token(L.k.data() + block_bytes, L.k_params, ko);
            } else if (auto open = L.open_keys.find(block); open != L.open_keys.end()) {
                for (size_t i = 0; i < hd; ++i)
                    ko[i] = half_to_float(open->second[c0 + i]);
            } else {
                for (size_t i = 0; i < hd; ++i) {
                    const uint16_t* p =
                        &L.k_params[(static_cast<size_t>(block) * dim + h * hd + i) * 2];
                    ko[i] =
                        asym_decode(get_code(L.k.data() + block_bytes, c0 + i, bits), {p[0], p[1]});
                }
            }
            return;
        }
    }
}

void KvCacheStorage::read_lane(int layer, BlockId block, int kv_head, int count, float* k,
                               float* v) const {
    const Layer& L = layers_[static_cast<size_t>(layer)];
    const auto hd = static_cast<size_t>(head_dim_), h = static_cast<size_t>(kv_head);
    for (int s = 0; s < count; ++s) {
        const size_t at = slot_index(block, s);
        const auto off = static_cast<size_t>(s) * hd;
        load_head(tier_of(L, at, h), at, block, s, h, k ? k + off : nullptr, v ? v + off : nullptr);
    }
}

void KvCacheStorage::read_head(int layer, BlockId block, int slot, int kv_head, float* k,
                               float* v) const {
    const Layer& L = layers_[static_cast<size_t>(layer)];
    const size_t at = slot_index(block, slot);
    load_head(tier_of(L, at, static_cast<size_t>(kv_head)), at, block, slot,
              static_cast<size_t>(kv_head), k, v);
}

void KvCacheStorage::move_head(Layer& L, size_t h, BlockId from, int from_slot, BlockId to,
                               int to_slot) {
    const auto dim = static_cast<size_t>(kv_dim_), hd = static_cast<size_t>(head_dim_);
    const auto heads = static_cast<size_t>(n_kv_heads_);
    const size_t a = slot_index(from, from_slot), b = slot_index(to, to_slot);
    const int bits = kv_code_bits(L.dtype);
    if (bits > 0) {  // a low tier's int4 / int2: codes and per-token parameters, K and V
        const size_t eb = elem_bytes_per_block(L);
        const size_t ca = static_cast<size_t>(from_slot) * dim + h * hd,
                     cb = static_cast<size_t>(to_slot) * dim + h * hd;
        for (OnDemandArray<uint8_t>* elems : {&L.k, &L.v}) {
            uint8_t* src = elems->data() + static_cast<size_t>(from) * eb;
            uint8_t* dst = elems->data() + static_cast<size_t>(to) * eb;
            for (size_t i = 0; i < hd; ++i)
                set_code(dst, cb + i, get_code(src, ca + i, bits), bits);
        }
        const size_t per_head = static_cast<size_t>(groups_per_head()) * 2;
        for (OnDemandArray<uint16_t>* params : {&L.k_params, &L.v_params})
            std::memmove(&(*params)[b * v_params_per_slot() + h * per_head],
                         &(*params)[a * v_params_per_slot() + h * per_head],
                         per_head * sizeof(uint16_t));
        return;
    }
    const size_t width = L.dtype == KvDtype::kF32 ? 4 : L.dtype == KvDtype::kF16 ? 2 : 1;
    for (OnDemandArray<uint8_t>* elems : {&L.k, &L.v})
        std::memmove(elems->data() + (b * dim + h * hd) * width,
                     elems->data() + (a * dim + h * hd) * width, hd * width);
    if (L.dtype == KvDtype::kInt8)
        for (OnDemandArray<uint16_t>* scale : {&L.k_scale, &L.v_scale})
            (*scale)[b * heads + h] = (*scale)[a * heads + h];
}

void KvCacheStorage::move_lane(int layer, int kv_head, BlockId from, int from_slot, BlockId to,
                               int to_slot) {
    Layer& L = layers_[static_cast<size_t>(layer)];
    const auto h = static_cast<size_t>(kv_head), heads = static_cast<size_t>(n_kv_heads_);
    move_head(L, h, from, from_slot, to, to_slot);
    if (!L.low) return;
    uint8_t& src = L.tier[slot_index(from, from_slot) * heads + h];
    if (src) move_head(*L.low, h, from, from_slot, to, to_slot);
    L.tier[slot_index(to, to_slot) * heads + h] = src;
    src = 0;
}

void KvCacheStorage::discard_block(BlockId block) {
    for (Layer& L : layers_)
        discard_layer_block(L, block);
}

void KvCacheStorage::discard_layer_block(Layer& L, BlockId block) {
    const auto b = static_cast<size_t>(block);
    const size_t eb = elem_bytes_per_block(L);
    L.k.release(b * eb, eb);
    L.v.release(b * eb, eb);
    // Scales are laid out per slot (k_params per block, or per slot in a low tier): the block's
    // share of each.
    for (OnDemandArray<uint16_t>* params : {&L.k_scale, &L.v_scale, &L.v_params, &L.k_params})
        if (!params->empty()) {
            const size_t per_block = params->size() / static_cast<size_t>(num_blocks_);
            params->release(b * per_block, per_block);
        }
    if (!L.low) return;
    discard_layer_block(*L.low, block);
    const size_t per_block = L.tier.size() / static_cast<size_t>(num_blocks_);
    L.tier.release(b * per_block, per_block);
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
// value and key parameters, and the open keys (a flag, then the f16 keys) the dtype has; with a
// low tier (mixed), the low tier's the same way, then the tier byte of each slot and head.
void KvCacheStorage::save_block(BlockId block, std::vector<uint8_t>& out) const {
    out.clear();
    for (const Layer& L : layers_)
        save_layer_block(L, block, out);
}

void KvCacheStorage::save_layer_block(const Layer& L, BlockId block,
                                      std::vector<uint8_t>& out) const {
    const auto b = static_cast<size_t>(block);
    const size_t eb = elem_bytes_per_block(L);
    put(out, L.k.data() + b * eb, eb);
    put(out, L.v.data() + b * eb, eb);
    for (const OnDemandArray<uint16_t>* params : {&L.k_scale, &L.v_scale, &L.v_params, &L.k_params})
        if (!params->empty()) {
            const size_t per_block = params->size() / static_cast<size_t>(num_blocks_);
            put(out, params->data() + b * per_block, per_block * sizeof(uint16_t));
        }
    if (kv_keys_grouped_per_block(L.dtype) && !L.keys_per_token) {
        auto it = L.open_keys.find(block);
        const uint8_t open = it != L.open_keys.end();
        put(out, &open, 1);
        if (open) put(out, it->second.data(), it->second.size() * sizeof(uint16_t));
    }
    if (!L.low) return;
    save_layer_block(*L.low, block, out);
    const size_t per_block = L.tier.size() / static_cast<size_t>(num_blocks_);
    put(out, L.tier.data() + b * per_block, per_block);
}

void KvCacheStorage::load_block(BlockId block, const std::vector<uint8_t>& in) {
    const uint8_t* p = in.data();
    for (Layer& L : layers_)
        load_layer_block(L, block, p);
}

void KvCacheStorage::load_layer_block(Layer& L, BlockId block, const uint8_t*& p) {
    const auto b = static_cast<size_t>(block);
    auto take = [&](void* dst, size_t n) {
        std::memcpy(dst, p, n);
        p += n;
    };
    const size_t eb = elem_bytes_per_block(L);
    take(L.k.data() + b * eb, eb);
    take(L.v.data() + b * eb, eb);
    for (OnDemandArray<uint16_t>* params : {&L.k_scale, &L.v_scale, &L.v_params, &L.k_params})
        if (!params->empty()) {
            const size_t per_block = params->size() / static_cast<size_t>(num_blocks_);
            take(params->data() + b * per_block, per_block * sizeof(uint16_t));
        }
    if (kv_keys_grouped_per_block(L.dtype) && !L.keys_per_token) {
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
    if (!L.low) return;
    load_layer_block(*L.low, block, p);
    const size_t per_block = L.tier.size() / static_cast<size_t>(num_blocks_);
    take(L.tier.data() + b * per_block, per_block);
}

}  // namespace kvscope
