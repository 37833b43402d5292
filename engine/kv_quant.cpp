#include "engine/kv_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "base/real_number.h"
#include "base/terminal_text.h"

namespace kvscope {

Result<KvDtype> parse_kv_dtype(std::string_view name) {
    if (name == "f32") return KvDtype::kF32;
    if (name == "f16") return KvDtype::kF16;
    if (name == "int8") return KvDtype::kInt8;
    if (name == "int4") return KvDtype::kInt4;
    if (name == "int2") return KvDtype::kInt2;
    return Error{"unknown KV dtype " + quote_for_message(name) +
                 " (known: f32, f16, int8, int4, int2)"};
}

const char* kv_dtype_name(KvDtype d) {
    switch (d) {
        case KvDtype::kF32:
            return "f32";
        case KvDtype::kF16:
            return "f16";
        case KvDtype::kInt8:
            return "int8";
        case KvDtype::kInt4:
            return "int4";
        case KvDtype::kInt2:
            return "int2";
    }
    return "f32";
}

size_t kv_element_bytes(KvDtype dtype, size_t elements) {
    switch (dtype) {
        case KvDtype::kF32:
            return elements * 4;
        case KvDtype::kF16:
            return elements * 2;
        case KvDtype::kInt8:
            return elements;
        case KvDtype::kInt4:
        case KvDtype::kInt2: {
            const size_t per_byte = 8 / static_cast<size_t>(kv_code_bits(dtype));
            return (elements + per_byte - 1) / per_byte;
        }
    }
    return elements * 4;
}

size_t kv_layer_block_bytes(KvDtype dtype, int32_t block_size, int32_t n_kv_heads,
                            int32_t head_dim) {
    const auto slots = static_cast<size_t>(block_size), heads = static_cast<size_t>(n_kv_heads),
               dim = static_cast<size_t>(head_dim);
    size_t halves = 0;  // f16 scales and minima
    // int8: one scale per slot and head, K and V alike.
    if (dtype == KvDtype::kInt8) halves = 2 * slots * heads;
    // int4 / int2: values a (scale, min) per slot, head and group of channels; keys a
    // (scale, min) per channel of the block.
    if (kv_code_bits(dtype) > 0)
        halves = slots * heads * static_cast<size_t>(kv_value_groups_per_head(head_dim)) * 2 +
                 heads * dim * 2;
    return 2 * kv_element_bytes(dtype, slots * heads * dim) + halves * sizeof(uint16_t);
}

int kv_dtype_bits(KvDtype d) {
    switch (d) {
        case KvDtype::kF32:
            return 32;
        case KvDtype::kF16:
            return 16;
        case KvDtype::kInt8:
            return 8;
        case KvDtype::kInt4:
            return 4;
        case KvDtype::kInt2:
            return 2;
    }
    return 32;
}

Result<KvMixed> parse_kv_mixed(std::string_view text) {
    const std::string form = " must be mixed:HI/LO:P%, e.g. mixed:int8/int2:20%";
    if (!is_kv_mixed(text)) return Error{quote_for_message(text) + form};
    const std::string_view rest = text.substr(6);
    const size_t slash = rest.find('/'), colon = rest.find(':');
    if (slash == std::string_view::npos || colon == std::string_view::npos || colon < slash)
        return Error{quote_for_message(text) + form};
    KvMixed m;
    auto hi = parse_kv_dtype(rest.substr(0, slash));
    if (!hi) return Error{quote_for_message(text) + ": " + hi.error().message};
    auto lo = parse_kv_dtype(rest.substr(slash + 1, colon - slash - 1));
    if (!lo) return Error{quote_for_message(text) + ": " + lo.error().message};
    m.hi = *hi;
    m.lo = *lo;
    std::string_view percent = rest.substr(colon + 1);
    const bool has_sign = !percent.empty() && percent.back() == '%';
    if (has_sign) percent.remove_suffix(1);
    auto p = has_sign ? parse_real(percent, RealRange{0, 100}) : Result<double>(Error{""});
    if (!p || *p <= 0)
        return Error{quote_for_message(text) + ": the share kept in " + kv_dtype_name(m.hi) +
                     " must be a percentage above 0 and at most 100, e.g. 20%"};
    m.percent = *p;
    if (kv_dtype_bits(m.hi) <= kv_dtype_bits(m.lo))
        return Error{quote_for_message(text) + ": " + kv_dtype_name(m.hi) +
                     " must store more bits than " + kv_dtype_name(m.lo) +
                     " (the high precision first)"};
    if (kv_keys_grouped_per_block(m.hi))
        return Error{quote_for_message(text) + ": " + kv_dtype_name(m.hi) +
                     " cannot be the high precision: its keys are quantized together per block, "
                     "so one token cannot leave it alone (give f32, f16 or int8)"};
    return m;
}

namespace {
// A layer number of a schedule: digits only, within int32.
Result<int32_t> parse_layer(std::string_view text, std::string_view item) {
    if (text.empty() || text.size() > 9 ||
        text.find_first_not_of("0123456789") != std::string_view::npos)
        return Error{"layer range " + quote_for_message(item) +
                     " must be FIRST-LAST:DTYPE or LAYER:DTYPE with layers from 0, e.g. 0-1:int8"};
    return static_cast<int32_t>(std::stol(std::string(text)));
}
}  // namespace

Result<std::vector<KvDtypeRange>> parse_kv_dtype_layers(std::string_view text) {
    std::vector<KvDtypeRange> ranges;
    for (size_t start = 0;;) {
        const size_t comma = text.find(',', start);
        const std::string_view item =
            text.substr(start, comma == std::string_view::npos ? comma : comma - start);
        const size_t colon = item.find(':');
        if (colon == std::string_view::npos)
            return Error{"layer range " + quote_for_message(item) +
                         " names no dtype: give FIRST-LAST:DTYPE, e.g. 0-1:int8"};
        const std::string_view layers = item.substr(0, colon);
        const size_t dash = layers.find('-');
        auto first = parse_layer(layers.substr(0, dash), item);
        if (!first) return first.error();
        auto last =
            dash == std::string_view::npos ? first : parse_layer(layers.substr(dash + 1), item);
        if (!last) return last.error();
        if (*last < *first)
            return Error{"layer range " + quote_for_message(item) +
                         " ends before it starts: give the lower layer first"};
        auto dtype = parse_kv_dtype(item.substr(colon + 1));
        if (!dtype) return dtype.error();
        for (const KvDtypeRange& r : ranges)
            if (*first <= r.last && r.first <= *last)
                return Error{"layer range " + quote_for_message(item) + " overlaps " +
                             std::to_string(r.first) + "-" + std::to_string(r.last) +
                             ": give each layer one dtype"};
        ranges.push_back({*first, *last, *dtype});
        if (comma == std::string_view::npos) return ranges;
        start = comma + 1;
    }
}

Result<std::vector<KvDtype>> kv_dtypes_per_layer(const std::vector<KvDtypeRange>& ranges,
                                                 KvDtype others, int32_t n_layers) {
    std::vector<KvDtype> dtypes(static_cast<size_t>(n_layers), others);
    for (const KvDtypeRange& r : ranges) {
        if (r.last >= n_layers)
            return Error{"layer range " + std::to_string(r.first) + "-" + std::to_string(r.last) +
                         " goes past the model's " + std::to_string(n_layers) + " layers (0-" +
                         std::to_string(n_layers - 1) + ")"};
        std::fill(dtypes.begin() + r.first, dtypes.begin() + r.last + 1, r.dtype);
    }
    return dtypes;
}

uint16_t float_to_half(float x) {
    uint32_t f;
    std::memcpy(&f, &x, 4);
    const uint32_t sign = (f >> 16) & 0x8000u;
    uint32_t abs = f & 0x7fffffffu;
    if (abs >= 0x7f800000u)  // inf or nan
        return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
    if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds past 65504
    if (abs < 0x38800000u) {  // a subnormal half, or zero: add as a float to round to nearest even
        float a;
        std::memcpy(&a, &abs, 4);
        a += 0.5f;  // 2^-1: the half subnormals' unit (2^-24) lands in the low bits
        uint32_t r;
        std::memcpy(&r, &a, 4);
        return static_cast<uint16_t>(sign | (r - 0x3f000000u));
    }
    // Normal: rebias the exponent, round the 13 dropped mantissa bits to nearest even.
    uint32_t mant_odd = (abs >> 13) & 1u;
    abs += 0xc8000fffu + mant_odd;  // (15 - 127) << 23, plus the rounding bias
    return static_cast<uint16_t>(sign | (abs >> 13));
}

float half_to_float(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu, f;
    if (exp == 0) {
        float v = std::ldexp(static_cast<float>(mant), -24);  // subnormal or zero
        std::memcpy(&f, &v, 4);
        f |= sign;
    } else if (exp == 31) {
        f = sign | 0x7f800000u | (mant << 13);
    } else {
        f = sign | ((exp + 112) << 23) | (mant << 13);
    }
    float out;
    std::memcpy(&out, &f, 4);
    return out;
}

namespace {
// The neighbouring halves of a finite half, by value.
uint16_t half_above(uint16_t h) {
    if (h == 0x8000u) return 0x0001u;
    return static_cast<uint16_t>((h & 0x8000u) ? h - 1 : h + 1);
}
uint16_t half_below(uint16_t h) {
    if (h == 0x0000u) return 0x8001u;
    return static_cast<uint16_t>((h & 0x8000u) ? h + 1 : h - 1);
}
}  // namespace

uint16_t half_at_least(float x) {
    uint16_t h = float_to_half(x);
    if (half_to_float(h) < x) h = half_above(h);
    return h;
}

uint16_t quantize_int8(const float* x, size_t n, int8_t* q) {
    float absmax = 0;
    for (size_t i = 0; i < n; ++i)
        absmax = std::max(absmax, std::fabs(x[i]));
    // Quantized with the scale as stored, rounded up so that absmax stays within 127 codes.
    const uint16_t half = half_at_least(absmax / 127.0f);
    const float scale = half_to_float(half);
    const float inv = scale > 0 ? 1.0f / scale : 0.0f;
    for (size_t i = 0; i < n; ++i)
        q[i] = static_cast<int8_t>(std::clamp(std::nearbyint(x[i] * inv), -127.0f, 127.0f));
    return half;
}

void dequantize_int8(const int8_t* q, size_t n, uint16_t scale, float* x) {
    const float s = half_to_float(scale);
    for (size_t i = 0; i < n; ++i)
        x[i] = static_cast<float>(q[i]) * s;
}

AsymParams asym_params(const float* x, size_t n, size_t stride, int bits) {
    float lo = x[0], hi = x[0];
    for (size_t i = 1; i < n; ++i) {
        lo = std::min(lo, x[i * stride]);
        hi = std::max(hi, x[i * stride]);
    }
    // Minimum rounded down and scale up: the stored range covers [lo, hi], so no value is
    // clamped beyond half a step by the halves' rounding.
    AsymParams p;
    p.min = float_to_half(lo);
    if (half_to_float(p.min) > lo) p.min = half_below(p.min);
    const float scale = (hi - half_to_float(p.min)) / static_cast<float>((1 << bits) - 1);
    if (scale > 0) p.scale = half_at_least(scale);
    return p;
}

uint8_t asym_encode(float x, AsymParams p, int bits) {
    const float scale = half_to_float(p.scale);
    if (!(scale > 0)) return 0;
    return static_cast<uint8_t>(std::clamp(std::nearbyint((x - half_to_float(p.min)) / scale), 0.0f,
                                           static_cast<float>((1 << bits) - 1)));
}

}  // namespace kvscope
