#pragma once
// The number formats a KV cache can store K and V in, and their conversions. The cache
// (kv_cache.h) decides what is grouped with what; these are the per-group primitives.
//   f16   IEEE half, round to nearest even
//   int8  symmetric: one scale (absmax / 127) per group, values in -127..127
//   int4  asymmetric (KIVI): a scale and a minimum per group, codes 0..15, two per byte

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "base/result.h"

namespace kvscope {

enum class KvDtype : uint8_t { kF32, kF16, kInt8, kInt4 };
Result<KvDtype> parse_kv_dtype(std::string_view name);  // "f32", "f16", "int8", "int4"
const char* kv_dtype_name(KvDtype dtype);

uint16_t float_to_half(float x);
float half_to_float(uint16_t h);

// int8: q[i] = round(x[i] / scale); returns the scale.
float quantize_int8(const float* x, size_t n, int8_t* q);
void dequantize_int8(const int8_t* q, size_t n, float scale, float* x);

// int4: a group's scale and minimum (over `n` values `stride` apart), each value's 4-bit code,
// and codes packed two per byte, low nibble first, by element index.
struct Int4Params {
    float scale = 0, min = 0;
};
Int4Params int4_params(const float* x, size_t n, size_t stride);
uint8_t int4_encode(float x, Int4Params p);
inline float int4_decode(uint8_t code, Int4Params p) {
    return static_cast<float>(code) * p.scale + p.min;
}
inline void set_nibble(uint8_t* bytes, size_t i, uint8_t code) {
    uint8_t& b = bytes[i / 2];
    b = (i & 1) ? static_cast<uint8_t>((b & 0x0f) | (code << 4))
                : static_cast<uint8_t>((b & 0xf0) | code);
}
inline uint8_t get_nibble(const uint8_t* bytes, size_t i) {
    return (i & 1) ? bytes[i / 2] >> 4 : bytes[i / 2] & 0x0f;
}

}  // namespace kvscope
