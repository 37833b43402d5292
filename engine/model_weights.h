#pragma once
// Views of a Llama-style decoder's weights. Matrices are row-major [out][in] (the layout of both
// llama2.c files and GGUF, whose ne0 is the input dimension) and stay in their file's type:
// F32, F16, BF16 or a block-quantized type, pointing into the mapped model file, so a 4-bit
// model takes 4-bit memory. Vectors (norms, biases) are small and always fp32. A view either
// points into the mapped file or into `owned` buffers.

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/gguf_tensor_type.h"
#include "model_config.h"

namespace kvscope {

struct Matrix {
    const void* data = nullptr;  // rows of `row_bytes` bytes each
    int rows = 0;                // out features
    int cols = 0;                // in features
    GgmlType type = GgmlType::F32;
    int64_t row_bytes = 0;
    // Q4_0 only, optional: the same weights re-laid for fast mode (q4_0_interleaved.h), in a
    // buffer some ModelWeights::owners entry keeps alive.
    const uint8_t* interleaved = nullptr;

    Matrix() = default;
    Matrix(const float* f32, int rows_, int cols_)
        : data(f32), rows(rows_), cols(cols_), row_bytes(static_cast<int64_t>(cols_) * 4) {}
    // The caller has checked that `type` can be multiplied (ggml_type_traits().can_dequantize)
    // and that cols is a whole number of its blocks.
    Matrix(const void* raw, GgmlType type_, int rows_, int cols_)
        : data(raw), rows(rows_), cols(cols_), type(type_) {
        auto b = ggml_row_bytes(type_, static_cast<uint64_t>(cols_));
        row_bytes = b ? static_cast<int64_t>(b.value()) : 0;
    }

    // What a pass over the matrix reads: its bytes as held in memory.
    int64_t bytes() const { return static_cast<int64_t>(rows) * row_bytes; }
    const uint8_t* row(int64_t r) const {
        return static_cast<const uint8_t*>(data) + r * row_bytes;
    }
    // The values as floats: only for F32 matrices (null otherwise).
    const float* f32() const {
        return type == GgmlType::F32 ? static_cast<const float*>(data) : nullptr;
    }
    // Row r converted to fp32 into dst[0..cols).
    void row_to_f32(int64_t r, float* dst) const {
        dequantize_to_f32(type, row(r), dst, static_cast<size_t>(cols));
    }
};

struct Vector {
    const float* data = nullptr;
    int size = 0;
    int64_t bytes() const { return data ? static_cast<int64_t>(size) * 4 : 0; }
};

struct LayerWeights {
    Vector attn_norm;
    Matrix wq, wk, wv, wo;  // [q_dim][dim], [kv_dim][dim], [kv_dim][dim], [dim][q_dim]
    Vector bq, bk, bv;      // empty unless config.has_qkv_bias
    Vector ffn_norm;
    Matrix w_gate, w_up, w_down;  // [hidden][dim], [hidden][dim], [dim][hidden]
};

struct ModelWeights {
    Matrix token_embedding;  // [vocab][dim]
    std::vector<LayerWeights> layers;
    Vector output_norm;
    Matrix output;  // [vocab][dim]; may alias token_embedding
    // Keeps storage alive: the file mapping and any owned buffers.
    std::vector<std::shared_ptr<const void>> owners;

    // Bytes of every weight as held in memory (a tied classifier counted once).
    int64_t bytes() const {
        int64_t b = token_embedding.bytes() + output_norm.bytes();
        if (output.data != token_embedding.data) b += output.bytes();
        for (const LayerWeights& l : layers)
            b += l.attn_norm.bytes() + l.wq.bytes() + l.wk.bytes() + l.wv.bytes() + l.wo.bytes() +
                 l.bq.bytes() + l.bk.bytes() + l.bv.bytes() + l.ffn_norm.bytes() +
                 l.w_gate.bytes() + l.w_up.bytes() + l.w_down.bytes();
        return b;
    }
};

}  // namespace kvscope
