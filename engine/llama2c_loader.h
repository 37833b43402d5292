#pragma once
// llama2.c checkpoints (`.bin`): a header of 7 int32 (dim, hidden_dim, n_layers, n_heads,
// n_kv_heads, vocab_size, seq_len; a negative vocab_size means the classifier has its own
// weights), then fp32 tensors in run.c's order: token_embedding, rms_att, wq, wk, wv, wo,
// rms_ffn, w1 (gate), w2 (down), w3 (up), rms_final, two legacy RoPE tables, [wcls].
// No tokenizer; generation ends when BOS (1) is sampled, as in run.c.

#include <string>

#include "engine/model_loader.h"

namespace kvscope {

Result<LoadedModel> load_llama2c(const std::string& path);

}  // namespace kvscope
