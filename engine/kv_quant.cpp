#include "engine/kv_quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/terminal_text.h"

namespace kvscope {

Result<KvDtype> parse_kv_dtype(std::string_view name) {
    if (name == "f32") return KvDtype::kF32;
    if (name == "f16") return KvDtype::kF16;
    if (name == "int8") return KvDtype::kInt8;
    if (name == "int4") return KvDtype::kInt4;
    return Error{"unknown KV dtype " + quote_for_message(name) + " (known: f32, f16, int8, int4)"};
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
    }
    return "f32";
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

float quantize_int8(const float* x, size_t n, int8_t* q) {
    float absmax = 0;
    for (size_t i = 0; i < n; ++i)
        absmax = std::max(absmax, std::fabs(x[i]));
    const float scale = absmax / 127.0f;
    const float inv = scale > 0 ? 1.0f / scale : 0.0f;
    for (size_t i = 0; i < n; ++i)
        q[i] = static_cast<int8_t>(std::clamp(std::nearbyint(x[i] * inv), -127.0f, 127.0f));
    return scale;
}

void dequantize_int8(const int8_t* q, size_t n, float scale, float* x) {
    for (size_t i = 0; i < n; ++i)
        x[i] = static_cast<float>(q[i]) * scale;
}

Int4Params int4_params(const float* x, size_t n, size_t stride) {
    float lo = x[0], hi = x[0];
    for (size_t i = 1; i < n; ++i) {
        lo = std::min(lo, x[i * stride]);
        hi = std::max(hi, x[i * stride]);
    }
    return {(hi - lo) / 15.0f, lo};
}

uint8_t int4_encode(float x, Int4Params p) {
    if (!(p.scale > 0)) return 0;
    return static_cast<uint8_t>(std::clamp(std::nearbyint((x - p.min) / p.scale), 0.0f, 15.0f));
}

}  // namespace kvscope
