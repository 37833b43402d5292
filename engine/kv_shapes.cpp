#include "engine/kv_shapes.h"

#include "engine/synthetic_model.h"

namespace kvscope {

namespace {
KvShape counted_only(const char* name, const char* arch, int layers, int heads, int kv_heads,
                     int head_dim, int context) {
    KvShape s;
    s.name = name;
    s.config.architecture = arch;
    s.config.name = name;
    s.config.n_layers = layers;
    s.config.n_heads = heads;
    s.config.n_kv_heads = kv_heads;
    s.config.head_dim = head_dim;
    s.config.context_length = context;
    return s;
}
}  // namespace

const std::vector<KvShape>& kv_shapes() {
    static const std::vector<KvShape> shapes = [] {
        std::vector<KvShape> v;
        for (const SyntheticShape& s : synthetic_shapes()) {
            KvShape k;
            k.name = s.name;
            k.config = s.config;
            k.runnable = true;
            v.push_back(k);
        }
        v.push_back(counted_only("qwen3-8b", "qwen3", 36, 32, 8, 128, 40960));
        // Gemma 3: five local layers (a 1024-token window) to each global one.
        v.push_back(counted_only("gemma-3-12b", "gemma3", 48, 16, 8, 256, 131072));
        v.back().sliding_window = 1024;
        v.back().global_every = 6;
        v.push_back(counted_only("gemma-3-27b", "gemma3", 62, 32, 16, 128, 131072));
        v.back().sliding_window = 1024;
        v.back().global_every = 6;
        for (KvShape* g : {&v[v.size() - 2], &v.back()})
            g->note =
                "assumes the local layers keep only their window (llama.cpp's and vLLM's "
                "sliding-window caches do); a cache that keeps every token holds ctx tokens in "
                "every layer";
        // DeepSeek-V3: 128 heads, keys of 128 + 64 (RoPE) values, values of 128.
        v.push_back(counted_only("deepseek-v3", "deepseek3", 61, 128, 128, 128, 163840));
        v.back().mla_kv_lora_rank = 512;
        v.back().mla_rope_dim = 64;
        v.back().mla_key_dim = 192;
        v.back().note =
            "MLA caches one latent (kv_lora_rank 512) and one shared RoPE key (64) per token and "
            "layer, from which every head's K and V are made again; the first 3 of its 61 layers "
            "are dense MLPs, but all 61 attend and cache";
        return v;
    }();
    return shapes;
}

const KvShape* find_kv_shape(const std::string& name) {
    for (const KvShape& s : kv_shapes())
        if (s.name == name) return &s;
    return nullptr;
}

std::string kv_shape_names() {
    std::string out;
    for (const KvShape& s : kv_shapes())
        out += (out.empty() ? "" : ", ") + s.name;
    return out;
}

}  // namespace kvscope
