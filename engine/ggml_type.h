#pragma once
// Tensor element types as numbered by ggml/GGUF, and conversion of rows to fp32.
// Block-quantized types store `block_elements` values in `block_bytes` bytes.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "probes/result.h"

namespace kvscope {

enum class GgmlType : uint32_t {
    F32 = 0,
    F16 = 1,
    Q4_0 = 2,
    Q4_1 = 3,
    Q5_0 = 6,
    Q5_1 = 7,
    Q8_0 = 8,
    Q8_1 = 9,
    Q2_K = 10,
    Q3_K = 11,
    Q4_K = 12,
    Q5_K = 13,
    Q6_K = 14,
    Q8_K = 15,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    BF16 = 30,
};

struct GgmlTypeTraits {
    std::string_view name;
    uint32_t block_elements;  // values per block (1 for plain types)
    uint32_t block_bytes;     // bytes per block
    bool can_dequantize;      // kvscope can convert it to fp32
};

// nullopt for a type id kvscope does not know at all.
std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t type_id);

// Bytes of `n` elements, or an error when n is not a multiple of the block size or overflows.
Result<uint64_t> ggml_row_bytes(GgmlType type, uint64_t n);

// Converts `n` elements of `type` at `src` to fp32 into `dst`. Caller guarantees sizes.
void dequantize_to_f32(GgmlType type, const void* src, float* dst, size_t n);

float fp16_to_f32(uint16_t h);
uint16_t f32_to_fp16(float f);
float bf16_to_f32(uint16_t h);

}  // namespace kvscope
