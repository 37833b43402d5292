#pragma once
// Tensor element types as the GGUF format numbers them (the format calls them ggml types), and
// conversion of rows to fp32. kvscope's own code, written from the format's published type
// ids and block layouts; nothing here is copied from ggml.
// Block-quantized types store `block_elements` values in `block_bytes` bytes. Every type a
// current GGUF file may hold is listed, so a file that uses one kvscope cannot convert still
// parses (and `inspect`-style tools can list it); the model loader then names the type.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "base/result.h"

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
    IQ2_XXS = 16,
    IQ2_XS = 17,
    IQ3_XXS = 18,
    IQ1_S = 19,
    IQ4_NL = 20,
    IQ3_S = 21,
    IQ2_S = 22,
    IQ4_XS = 23,
    I8 = 24,
    I16 = 25,
    I32 = 26,
    I64 = 27,
    F64 = 28,
    IQ1_M = 29,
    BF16 = 30,
    // 31..33 were the removed Q4_0_4_4 / Q4_0_4_8 / Q4_0_8_8 repackings: unknown on purpose.
    TQ1_0 = 34,
    TQ2_0 = 35,
    // 36..38 were the removed IQ4_NL_4_4 / _4_8 / _8_8 repackings.
    MXFP4 = 39,
};

struct GgmlTypeTraits {
    std::string_view name;    // as GGUF tools print it: "F32", "Q8_0", "Q6_K", "IQ4_XS"
    uint32_t block_elements;  // values per block (1 for plain types)
    uint32_t block_bytes;     // bytes per block
    bool can_dequantize;      // kvscope can convert it to fp32
};

// nullopt for a type id kvscope does not know at all.
std::optional<GgmlTypeTraits> ggml_type_traits(uint32_t type_id);

// Bytes of `n` elements, or an error when the type is unknown, n is not a multiple of the block
// size, or the byte count overflows 64 bits.
Result<uint64_t> ggml_row_bytes(GgmlType type, uint64_t n);

// Converts `n` elements of `type` at `src` to fp32 into `dst`. The caller guarantees that the
// type can_dequantize, that n is a multiple of its block size and that src holds
// ggml_row_bytes(type, n) bytes; src needs no alignment. Does nothing for other types.
void dequantize_to_f32(GgmlType type, const void* src, float* dst, size_t n);

// IEEE binary16 <-> binary32. Exact for every half value (subnormals, infinities, NaN payloads
// kept where they fit); f32_to_fp16 rounds to nearest, ties to even, and overflows to infinity.
float fp16_to_f32(uint16_t h);
uint16_t f32_to_fp16(float f);
// bfloat16 is the top half of a binary32. f32_to_bf16 rounds to nearest even; NaN stays NaN.
float bf16_to_f32(uint16_t h);
uint16_t f32_to_bf16(float f);

}  // namespace kvscope
