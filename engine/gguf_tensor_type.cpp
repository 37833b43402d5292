#include "engine/gguf_tensor_type.h"

#include <cstring>

namespace kvscope {

std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t id) {
    // Block sizes as the GGUF format defines them (256 values per block for the K-, IQ- and
    // TQ-quants).
    switch (static_cast<GgmlType>(id)) {
        case GgmlType::F32:
            return GgmlTypeTraits{"F32", 1, 4, true};
        case GgmlType::F16:
            return GgmlTypeTraits{"F16", 1, 2, true};
        case GgmlType::Q4_0:  // fp16 d, 16 bytes of nibbles
            return GgmlTypeTraits{"Q4_0", 32, 18, true};
        case GgmlType::Q4_1:  // fp16 d, fp16 m, 16 bytes of nibbles
            return GgmlTypeTraits{"Q4_1", 32, 20, true};
        case GgmlType::Q5_0:
            return GgmlTypeTraits{"Q5_0", 32, 22, false};
        case GgmlType::Q5_1:
            return GgmlTypeTraits{"Q5_1", 32, 24, false};
        case GgmlType::Q8_0:  // fp16 d, 32 x int8
            return GgmlTypeTraits{"Q8_0", 32, 34, true};
        case GgmlType::Q8_1:
            return GgmlTypeTraits{"Q8_1", 32, 36, false};
        case GgmlType::Q2_K:
            return GgmlTypeTraits{"Q2_K", 256, 84, false};
        case GgmlType::Q3_K:
            return GgmlTypeTraits{"Q3_K", 256, 110, false};
        case GgmlType::Q4_K:
            return GgmlTypeTraits{"Q4_K", 256, 144, true};
        case GgmlType::Q5_K:
            return GgmlTypeTraits{"Q5_K", 256, 176, false};
        case GgmlType::Q6_K:
            return GgmlTypeTraits{"Q6_K", 256, 210, true};
        case GgmlType::Q8_K:
            return GgmlTypeTraits{"Q8_K", 256, 292, false};
        case GgmlType::IQ2_XXS:
            return GgmlTypeTraits{"IQ2_XXS", 256, 66, false};
        case GgmlType::IQ2_XS:
            return GgmlTypeTraits{"IQ2_XS", 256, 74, false};
        case GgmlType::IQ3_XXS:
            return GgmlTypeTraits{"IQ3_XXS", 256, 98, false};
        case GgmlType::IQ1_S:
            return GgmlTypeTraits{"IQ1_S", 256, 50, false};
        case GgmlType::IQ4_NL:
            return GgmlTypeTraits{"IQ4_NL", 32, 18, false};
        case GgmlType::IQ3_S:
            return GgmlTypeTraits{"IQ3_S", 256, 110, false};
        case GgmlType::IQ2_S:
            return GgmlTypeTraits{"IQ2_S", 256, 82, false};
        case GgmlType::IQ4_XS:
            return GgmlTypeTraits{"IQ4_XS", 256, 136, false};
        case GgmlType::I8:
            return GgmlTypeTraits{"I8", 1, 1, false};
        case GgmlType::I16:
            return GgmlTypeTraits{"I16", 1, 2, false};
        case GgmlType::I32:
            return GgmlTypeTraits{"I32", 1, 4, false};
        case GgmlType::I64:
            return GgmlTypeTraits{"I64", 1, 8, false};
        case GgmlType::F64:
            return GgmlTypeTraits{"F64", 1, 8, false};
        case GgmlType::IQ1_M:
            return GgmlTypeTraits{"IQ1_M", 256, 56, false};
        case GgmlType::BF16:
            return GgmlTypeTraits{"BF16", 1, 2, true};
        case GgmlType::TQ1_0:
            return GgmlTypeTraits{"TQ1_0", 256, 54, false};
        case GgmlType::TQ2_0:
            return GgmlTypeTraits{"TQ2_0", 256, 66, false};
        case GgmlType::MXFP4:  // e8m0 scale, 16 bytes of nibbles
            return GgmlTypeTraits{"MXFP4", 32, 17, false};
    }
    return std::nullopt;
}

Result<uint64_t> ggml_row_bytes(GgmlType type, uint64_t n) {
    auto t = ggml_type_traits(static_cast<uint32_t>(type));
    if (!t) return Error{"unknown tensor type " + std::to_string(static_cast<uint32_t>(type))};
    if (n % t->block_elements != 0)
        return Error{std::to_string(n) + " elements of " + std::string(t->name) +
                     " are not a whole number of " + std::to_string(t->block_elements) +
                     "-element blocks"};
    uint64_t blocks = n / t->block_elements;
    if (blocks > UINT64_MAX / t->block_bytes)
        return Error{std::to_string(n) + " elements of " + std::string(t->name) +
                     " take more than 2^64 bytes"};
    return blocks * t->block_bytes;
}

float fp16_to_f32(uint16_t h) {
    uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    uint32_t bits;
    if (exp == 0) {
        if (mant == 0) {
            bits = sign;
        } else {  // subnormal: normalize
            int e = -1;
            do {
                ++e;
                mant <<= 1;
            } while (!(mant & 0x400));
            bits = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (mant & 0x3ff) << 13;
        }
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | mant << 13;
    } else {
        bits = sign | (exp + 127 - 15) << 23 | mant << 13;
    }
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

uint16_t f32_to_fp16(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t abs = x & 0x7fffffff;
    if (abs >= 0x7f800000)
        return static_cast<uint16_t>(sign | 0x7c00 | (abs > 0x7f800000 ? 0x200 : 0));
    if (abs >= 0x477ff000) return static_cast<uint16_t>(sign | 0x7c00);  // rounds to inf
    if (abs < 0x38800000) {  // below 2^-14: a half-precision subnormal, or zero
        if (abs < 0x33000000) return static_cast<uint16_t>(sign);
        uint32_t mant = (abs & 0x7fffff) | 0x800000;
        int shift = 126 - static_cast<int>(abs >> 23);  // 14..24: units of 2^-24
        uint32_t result = mant >> shift;
        uint32_t rem = mant & ((1u << shift) - 1), halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (result & 1))) ++result;
        return static_cast<uint16_t>(sign | result);
    }
    uint32_t result = ((abs - 0x38000000) >> 13);
    uint32_t rem = abs & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (result & 1))) ++result;
    return static_cast<uint16_t>(sign | result);
}

uint16_t f32_to_bf16(float f) {
    uint32_t x;
    std::memcpy(&x, &f, 4);
    if ((x & 0x7fffffff) > 0x7f800000)  // NaN: keep it one (rounding could carry it to inf)
        return static_cast<uint16_t>((x >> 16) | 0x40);
    uint32_t rounding = 0x7fff + ((x >> 16) & 1);  // ties to even; overflow carries to inf
    return static_cast<uint16_t>((x + rounding) >> 16);
}

float bf16_to_f32(uint16_t h) {
    uint32_t bits = static_cast<uint32_t>(h) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
}

namespace {
uint16_t le16(const uint8_t* q) {
    return static_cast<uint16_t>(q[0] | (q[1] << 8));
}

// Q4_K: {fp16 d, fp16 dmin, 12 bytes of 6-bit scales and mins for eight 32-value sub-blocks,
// 128 bytes of nibbles}. Sub-blocks 0-3 keep scale and min in the low 6 bits of bytes 0-3 and
// 4-7; sub-blocks 4-7 split theirs over bytes 8-11 (low 4 bits) and the top 2 bits of 0-7.
// Each 32 bytes of nibbles hold two sub-blocks: low nibbles, then high. value = d*sc*q - dmin*m.
void dequantize_q4_k_block(const uint8_t* p, float* y) {
    const float d = fp16_to_f32(le16(p)), dmin = fp16_to_f32(le16(p + 2));
    const uint8_t* sc = p + 4;
    const uint8_t* q = p + 16;
    auto scale_min = [&](int j, int& s, int& m) {
        if (j < 4) {
            s = sc[j] & 63;
            m = sc[j + 4] & 63;
        } else {
            s = (sc[j + 4] & 0x0f) | ((sc[j - 4] >> 6) << 4);
            m = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
        }
    };
    for (int j = 0; j < 8; j += 2, q += 32, y += 64) {
        int s1, m1, s2, m2;
        scale_min(j, s1, m1);
        scale_min(j + 1, s2, m2);
        const float d1 = d * static_cast<float>(s1), min1 = dmin * static_cast<float>(m1);
        const float d2 = d * static_cast<float>(s2), min2 = dmin * static_cast<float>(m2);
        for (int l = 0; l < 32; ++l) {
            y[l] = d1 * static_cast<float>(q[l] & 0x0f) - min1;
            y[l + 32] = d2 * static_cast<float>(q[l] >> 4) - min2;
        }
    }
}

// Q6_K: {128 bytes of low nibbles, 64 bytes of high 2-bit pairs, 16 int8 scales, fp16 d}; each
// 128 values use 64 low-nibble bytes and 32 high bytes, four values per (l) position spaced 32
// apart, each 16-value group with its own scale. value = d * scale * (q - 32).
void dequantize_q6_k_block(const uint8_t* p, float* y) {
    const uint8_t* ql = p;
    const uint8_t* qh = p + 128;
    const auto* sc = reinterpret_cast<const int8_t*>(p + 192);
    const float d = fp16_to_f32(le16(p + 208));
    for (int half = 0; half < 2; ++half, ql += 64, qh += 32, sc += 8, y += 128)
        for (int l = 0; l < 32; ++l) {
            const int is = l / 16;
            const int q1 = ((ql[l] & 0x0f) | ((qh[l] & 3) << 4)) - 32;
            const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
            const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
            const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            y[l] = d * static_cast<float>(sc[is]) * static_cast<float>(q1);
            y[l + 32] = d * static_cast<float>(sc[is + 2]) * static_cast<float>(q2);
            y[l + 64] = d * static_cast<float>(sc[is + 4]) * static_cast<float>(q3);
            y[l + 96] = d * static_cast<float>(sc[is + 6]) * static_cast<float>(q4);
        }
}
}  // namespace

void dequantize_to_f32(GgmlType type, const void* src, float* dst, size_t n) {
    const auto* p = static_cast<const uint8_t*>(src);
    auto u16 = [](const uint8_t* q) { return static_cast<uint16_t>(q[0] | (q[1] << 8)); };
    switch (type) {
        case GgmlType::F32:
            std::memcpy(dst, src, n * 4);
            return;
        case GgmlType::F16:
            for (size_t i = 0; i < n; ++i)
                dst[i] = fp16_to_f32(u16(p + 2 * i));
            return;
        case GgmlType::BF16:
            for (size_t i = 0; i < n; ++i)
                dst[i] = bf16_to_f32(u16(p + 2 * i));
            return;
        case GgmlType::Q8_0:  // blocks of {fp16 scale, 32 x int8}
            for (size_t b = 0; b < n / 32; ++b, p += 34) {
                float d = fp16_to_f32(u16(p));
                for (int i = 0; i < 32; ++i)
                    dst[b * 32 + static_cast<size_t>(i)] =
                        d * static_cast<float>(static_cast<int8_t>(p[2 + i]));
            }
            return;
        case GgmlType::Q4_0:  // {fp16 scale, 16 bytes of nibbles}: low nibbles first, then high
            for (size_t b = 0; b < n / 32; ++b, p += 18) {
                float d = fp16_to_f32(u16(p));
                for (int i = 0; i < 16; ++i) {
                    dst[b * 32 + static_cast<size_t>(i)] =
                        d * static_cast<float>((p[2 + i] & 0x0f) - 8);
                    dst[b * 32 + static_cast<size_t>(i) + 16] =
                        d * static_cast<float>((p[2 + i] >> 4) - 8);
                }
            }
            return;
        case GgmlType::Q4_1:  // {fp16 scale, fp16 min, 16 bytes of nibbles}
            for (size_t b = 0; b < n / 32; ++b, p += 20) {
                float d = fp16_to_f32(u16(p)), m = fp16_to_f32(u16(p + 2));
                for (int i = 0; i < 16; ++i) {
                    dst[b * 32 + static_cast<size_t>(i)] =
                        d * static_cast<float>(p[4 + i] & 0x0f) + m;
                    dst[b * 32 + static_cast<size_t>(i) + 16] =
                        d * static_cast<float>(p[4 + i] >> 4) + m;
                }
            }
            return;
        case GgmlType::Q4_K:
            for (size_t b = 0; b < n / 256; ++b, p += 144)
                dequantize_q4_k_block(p, dst + b * 256);
            return;
        case GgmlType::Q6_K:
            for (size_t b = 0; b < n / 256; ++b, p += 210)
                dequantize_q6_k_block(p, dst + b * 256);
            return;
        default:
            return;  // callers check can_dequantize first
    }
}

}  // namespace kvscope
