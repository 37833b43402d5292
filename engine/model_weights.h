#pragma once
// fp32 views of a Llama-style decoder's weights. Matrices are row-major [out][in] (the layout
// of both llama2.c files and GGUF, whose ne0 is the input dimension). A view either points into
// the mapped model file (F32 tensors) or into `owned` buffers filled by dequantization.

#include <memory>
#include <vector>

#include "model_config.h"

namespace kvscope {

struct Matrix {
    const float* data = nullptr;
    int rows = 0;  // out features
    int cols = 0;  // in features
};

struct Vector {
    const float* data = nullptr;
    int size = 0;
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
};

}  // namespace kvscope
