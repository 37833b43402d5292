#include "engine/random_weights.h"

#include <cstring>
#include <new>

namespace kvscope {

namespace {
void put16(uint8_t* p, uint16_t v) {
    p[0] = static_cast<uint8_t>(v);
    p[1] = static_cast<uint8_t>(v >> 8);
}
// Random bytes, eight at a time.
void fill_random(uint8_t* p, size_t n, WeightRng& rng) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const uint64_t r = rng.next();
        std::memcpy(p + i, &r, 8);
    }
    for (; i < n; ++i)
        p[i] = static_cast<uint8_t>(rng.next() >> 56);
}
}  // namespace

std::shared_ptr<uint8_t[]> random_weights(GgmlType type, int64_t rows, int64_t cols, float a,
                                          WeightRng& rng) {
    auto row_bytes = ggml_row_bytes(type, static_cast<uint64_t>(cols));
    if (!row_bytes) return nullptr;
    const auto total = static_cast<size_t>(rows) * row_bytes.value();
    std::shared_ptr<uint8_t[]> buf(new (std::nothrow) uint8_t[total]);
    if (!buf) return nullptr;
    uint8_t* p = buf.get();
    const auto n = static_cast<size_t>(rows) * static_cast<size_t>(cols);
    switch (type) {
        case GgmlType::F32:
            for (size_t i = 0; i < n; ++i) {
                const float v = a * rng.uniform();
                std::memcpy(p + 4 * i, &v, 4);
            }
            break;
        case GgmlType::F16:
            for (size_t i = 0; i < n; ++i)
                put16(p + 2 * i, f32_to_fp16(a * rng.uniform()));
            break;
        case GgmlType::BF16:
            for (size_t i = 0; i < n; ++i)
                put16(p + 2 * i, f32_to_bf16(a * rng.uniform()));
            break;
        case GgmlType::Q8_0:  // codes -127..127 (and a stray -128) under d = a / 127
            fill_random(p, total, rng);
            for (size_t b = 0; b < n / 32; ++b)
                put16(p + 34 * b, f32_to_fp16(a / 127.0f));
            break;
        case GgmlType::Q4_0:  // (code - 8) * d, d = a / 8
            fill_random(p, total, rng);
            for (size_t b = 0; b < n / 32; ++b)
                put16(p + 18 * b, f32_to_fp16(a / 8.0f));
            break;
        case GgmlType::Q4_1:  // code * d + m over [-a, a]
            fill_random(p, total, rng);
            for (size_t b = 0; b < n / 32; ++b) {
                put16(p + 20 * b, f32_to_fp16(2.0f * a / 15.0f));
                put16(p + 20 * b + 2, f32_to_fp16(-a));
            }
            break;
        case GgmlType::Q4_K:  // 6-bit sub-block scales in [32, 63], mins in [0, 63]
            fill_random(p, total, rng);
            for (size_t b = 0; b < n / 256; ++b) {
                uint8_t* blk = p + 144 * b;
                put16(blk, f32_to_fp16(a / (15.0f * 63.0f)));
                put16(blk + 2, f32_to_fp16(a / 63.0f));
                for (int j = 0; j < 4; ++j)  // keep scales large enough to carry the codes
                    blk[4 + j] |= 0x20;
            }
            break;
        case GgmlType::Q6_K:  // int8 scales in [-64, 63], codes -32..31
            fill_random(p, total, rng);
            for (size_t b = 0; b < n / 256; ++b) {
                uint8_t* blk = p + 210 * b;
                for (int j = 0; j < 16; ++j)
                    blk[192 + j] = static_cast<uint8_t>(static_cast<int8_t>(blk[192 + j]) / 2);
                put16(blk + 208, f32_to_fp16(a / (32.0f * 64.0f)));
            }
            break;
        default:
            return nullptr;
    }
    return buf;
}

}  // namespace kvscope
