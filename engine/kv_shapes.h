#pragma once
// The attention shapes of common models, for counting their KV cache (`kvscope kv-size`): every
// synthetic:NAME shape (synthetic_model.h), which kvscope also runs, then shapes it only counts
// (architectures its engine does not run: Qwen3's QK norms, Gemma 3's local layers, DeepSeek's
// MLA). From each model's published config.json.

#include <cstdint>
#include <string>
#include <vector>

#include "engine/model_config.h"

namespace kvscope {

struct KvShape {
    std::string name;
    ModelConfig config;     // n_layers, n_heads, n_kv_heads and head_dim are what counts
    bool runnable = false;  // also `--model synthetic:NAME`
    // Sliding-window attention: every `global_every`-th layer (the 6th, 12th...) attends to the
    // whole context, the others only to the last `sliding_window` tokens.
    int32_t sliding_window = 0, global_every = 0;
    // Multi-head latent attention (DeepSeek-V2/V3): per token and layer the cache holds one
    // latent of kv_lora_rank values and one shared RoPE key of rope_dim, not K and V per head;
    // without it each head would keep a key of mla_key_dim and a value of head_dim.
    int32_t mla_kv_lora_rank = 0, mla_rope_dim = 0, mla_key_dim = 0;
    std::string note;  // what the count assumes, printed with it
};

const std::vector<KvShape>& kv_shapes();
// The shape named `name`; nullptr when none is.
const KvShape* find_kv_shape(const std::string& name);
// "a, b, c": every name, for a message.
std::string kv_shape_names();

}  // namespace kvscope
