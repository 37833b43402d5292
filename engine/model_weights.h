#pragma once
// fp32 views of a Llama-style decoder's weights. Matrices are row-major [out][in] (the layout
// of both llama2.c files and GGUF, whose ne0 is the input dimension). A view either points into
// the mapped model file (F32 tensors) or into `owned` buffers filled by dequantization.

#include <cstdint>
#include <memory>
#include <vector>

#include "model_config.h"

namespace kvscope {

struct Matrix {
    const float* data = nullptr;
    int rows = 0;  // out features
    int cols = 0;  // in features
    // What a pass over the matrix reads: fp32 as held in memory.
    int64_t bytes() const { return static_cast<int64_t>(rows) * cols * 4; }
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
    // Keeps storage alive: the file mapping and any dequantized copies.
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
