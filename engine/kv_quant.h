#pragma once
// The number formats a KV cache can store K and V in, and their conversions. The cache
// (kv_cache.h) decides what is grouped with what; these are the per-group primitives.
//   f16   IEEE half, round to nearest even
//   int8  symmetric: one f16 scale (absmax / 127, rounded up) per group, values in -127..127
//   int4  asymmetric (KIVI): an f16 scale and an f16 minimum per group, codes 0..15, two per
//         byte
//   int2  asymmetric (KIVI-2): the same with codes 0..3, four per byte
// int4 and int2 share one quantizer parameterized by the bits (asym_*). Their scale and minimum
// are kept in f16 as KIVI and llama.cpp's q4_0 keep them: at head dim 32 f32 parameters were a
// third of int4's bytes. The f16 minimum is rounded down and the f16 scale up, so the stored
// range still covers the group and every value stays within half a (stored) step.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace kvscope {

enum class KvDtype : uint8_t { kF32, kF16, kInt8, kInt4, kInt2 };
// "f32", "f16", "int8", "int4", "int2"
Result<KvDtype> parse_kv_dtype(std::string_view name);
const char* kv_dtype_name(KvDtype dtype);
// int4 and int2: keys quantized per channel over the tokens of a block, so a key cannot move
// to another slot on its own (compaction) and an open block keeps its keys in f16.
inline bool kv_keys_grouped_per_block(KvDtype d) {
    return d == KvDtype::kInt4 || d == KvDtype::kInt2;
}
// Bits of a code for the asymmetric dtypes (int4, int2); 0 for the others.
inline int kv_code_bits(KvDtype d) {
    return d == KvDtype::kInt4 ? 4 : d == KvDtype::kInt2 ? 2 : 0;
}

// The bytes the cache stores, the one place they are worked out (KvCacheStorage lays its arrays
// out by them, `kvscope kv-size` counts with them). Values are grouped for their int4 / int2
// parameters in groups of this many channels of a head (the last group of a head may be short).
constexpr int32_t kKvValueGroup = 32;
inline int32_t kv_value_groups_per_head(int32_t head_dim) {
    return (head_dim + kKvValueGroup - 1) / kKvValueGroup;
}
// Bytes of `elements` K (or V) elements in `dtype`, codes only.
size_t kv_element_bytes(KvDtype dtype, size_t elements);
// Bytes of K and V of one block of one layer (`block_size` slots of `n_kv_heads` heads of
// `head_dim`), scales and minima included. Not included: the f16 keys an int4 or int2 block
// also keeps while it is open (kv_open_block_key_bytes).
size_t kv_layer_block_bytes(KvDtype dtype, int32_t block_size, int32_t n_kv_heads,
                            int32_t head_dim);
// The f16 keys of one open int4 / int2 block of one layer (a whole block's worth from its first
// write on); 0 for the other dtypes.
inline size_t kv_open_block_key_bytes(KvDtype dtype, int32_t block_size, int32_t n_kv_heads,
                                      int32_t head_dim) {
    return kv_keys_grouped_per_block(dtype)
               ? static_cast<size_t>(block_size) * static_cast<size_t>(n_kv_heads) *
                     static_cast<size_t>(head_dim) * sizeof(uint16_t)
               : 0;
}

// --kv-dtype-layers "0-1:int8,2-5:int2" (MiniKV's layer-discriminative precision): layer ranges
// (a single layer is "3") and their dtypes, in any order, not overlapping.
struct KvDtypeRange {
    int32_t first = 0, last = 0;
    KvDtype dtype = KvDtype::kF32;
};
Result<std::vector<KvDtypeRange>> parse_kv_dtype_layers(std::string_view text);
// --kv-dtype mixed:HI/LO:P% (ZipCache's precision by importance): in each lane (one layer's one
// KV head) the P% of kept tokens with the highest normalized attention stay in HI, the others
// are stored in LO. HI is a dtype whose tokens are stored one by one (f32, f16, int8: a token
// can leave it alone; int4 and int2 quantize a block's keys together); LO has fewer bits (in LO
// int4 and int2 quantize keys per token like values, in groups of 32 channels, since a token
// changes precision alone). 0 < P <= 100.
struct KvMixed {
    KvDtype hi = KvDtype::kF32, lo = KvDtype::kF32;
    double percent = 100;
};
inline bool is_kv_mixed(std::string_view text) {
    return text.substr(0, 6) == "mixed:";
}
Result<KvMixed> parse_kv_mixed(std::string_view text);
// Bits of one stored element: 32, 16, 8, 4, 2.
int kv_dtype_bits(KvDtype d);

// One dtype per layer: the ranges' dtypes, `others` for the layers they do not name; an error
// if a range goes past the model's `n_layers`.
Result<std::vector<KvDtype>> kv_dtypes_per_layer(const std::vector<KvDtypeRange>& ranges,
                                                 KvDtype others, int32_t n_layers);

uint16_t float_to_half(float x);
float half_to_float(uint16_t h);

// The least half at or above x (finite x): a scale rounded so that the stored one still covers
// the group.
uint16_t half_at_least(float x);

// int8: q[i] = round(x[i] / scale); returns the scale as a half (an f32 one measured the same
// perplexity, bench/RESULTS.md, issue 31 part 3, for 2 bytes more per token, head and K or V).
uint16_t quantize_int8(const float* x, size_t n, int8_t* q);
void dequantize_int8(const int8_t* q, size_t n, uint16_t scale, float* x);

// int4 / int2: a group's scale and minimum (over `n` values `stride` apart) as halves, each
// value's code of `bits` bits, and codes packed 8 / bits per byte, low bits first, by element
// index.
struct AsymParams {
    uint16_t scale = 0, min = 0;  // f16
};
AsymParams asym_params(const float* x, size_t n, size_t stride, int bits);
uint8_t asym_encode(float x, AsymParams p, int bits);
inline float asym_decode(uint8_t code, AsymParams p) {
    return static_cast<float>(code) * half_to_float(p.scale) + half_to_float(p.min);
}
inline void set_code(uint8_t* bytes, size_t i, uint8_t code, int bits) {
    const size_t per_byte = 8 / static_cast<size_t>(bits);
    const int shift = static_cast<int>(i % per_byte) * bits;
    const auto mask = static_cast<uint8_t>(((1u << bits) - 1u) << shift);
    uint8_t& b = bytes[i / per_byte];
    b = static_cast<uint8_t>((b & ~mask) | ((code << shift) & mask));
}
inline uint8_t get_code(const uint8_t* bytes, size_t i, int bits) {
    const size_t per_byte = 8 / static_cast<size_t>(bits);
    const int shift = static_cast<int>(i % per_byte) * bits;
    return static_cast<uint8_t>((bytes[i / per_byte] >> shift) & ((1u << bits) - 1u));
}

}  // namespace kvscope
