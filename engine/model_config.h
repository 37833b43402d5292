#pragma once
// Hyper-parameters of a Llama-style decoder, whatever file they came from.

#include <cstdint>
#include <string>

namespace kvscope {

enum class RopeStyle {
    kAdjacentPairs,  // Meta / llama2.c / GGUF "llama": rotate (x[2i], x[2i+1])
    kHalfSplit,      // GPT-NeoX / HF / Qwen2: rotate (x[i], x[i + head_dim/2])
};

struct ModelConfig {
    std::string architecture = "llama";
    std::string name;
    int dim = 0;         // residual width
    int hidden_dim = 0;  // SwiGLU inner width
    int n_layers = 0;
    int n_heads = 0;
    int n_kv_heads = 0;
    int head_dim = 0;  // dim / n_heads unless the file says otherwise
    int vocab_size = 0;
    int context_length = 0;
    float rms_eps = 1e-5f;
    float rope_theta = 10000.0f;
    RopeStyle rope_style = RopeStyle::kAdjacentPairs;
    bool has_qkv_bias = false;  // Qwen2
    int bos_token = 1;
    int eos_token = 2;  // -1 when the model has none

    int q_dim() const { return n_heads * head_dim; }
    int kv_dim() const { return n_kv_heads * head_dim; }
    int group_size() const { return n_heads / n_kv_heads; }
};

}  // namespace kvscope
