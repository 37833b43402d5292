#include "engine/synthetic_model.h"

#include <cmath>
#include <cstdio>
#include <memory>

namespace kvscope {

namespace {
ModelConfig shape(const char* arch, int layers, int dim, int heads, int kv_heads, int head_dim,
                  int hidden, int vocab, int context, float rope_theta, float eps) {
    ModelConfig c;
    c.architecture = arch;
    c.n_layers = layers;
    c.dim = dim;
    c.n_heads = heads;
    c.n_kv_heads = kv_heads;
    c.head_dim = head_dim;
    c.hidden_dim = hidden;
    c.vocab_size = vocab;
    c.context_length = context;
    c.rope_theta = rope_theta;
    c.rms_eps = eps;
    c.eos_token = -1;  // noise has no end
    return c;
}

// xorshift64*: fast enough to fill a few GB at load.
struct Rng {
    uint64_t s;
    float uniform() {  // in [-1, 1)
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        const uint64_t r = s * 0x2545F4914F6CDD1DULL;
        return static_cast<float>(static_cast<double>(r >> 40) / 8388608.0 - 1.0);
    }
};
}  // namespace

int64_t SyntheticShape::parameters() const {
    const ModelConfig& c = config;
    const int64_t d = c.dim, q = c.q_dim(), kv = c.kv_dim(), h = c.hidden_dim;
    int64_t layer = 2 * d + d * q + 2 * d * kv + q * d + 3 * d * h;
    if (c.has_qkv_bias) layer += q + 2 * kv;
    return static_cast<int64_t>(c.vocab_size) * d * (tied_embeddings ? 1 : 2) + d +
           c.n_layers * layer;
}

const std::vector<SyntheticShape>& synthetic_shapes() {
    static const std::vector<SyntheticShape> shapes = [] {
        std::vector<SyntheticShape> v;
        // From each model's published config (config.json).
        v.push_back({"qwen2.5-0.5b",
                     shape("qwen2", 24, 896, 14, 2, 64, 4864, 151936, 32768, 1e6f, 1e-6f), true,
                     true});
        v.back().config.rope_style = RopeStyle::kHalfSplit;
        v.back().config.has_qkv_bias = true;
        v.push_back({"llama-3.2-1b",
                     shape("llama", 16, 2048, 32, 8, 64, 8192, 128256, 131072, 5e5f, 1e-5f), true,
                     true});
        v.push_back({"llama-3-8b",
                     shape("llama", 32, 4096, 32, 8, 128, 14336, 128256, 8192, 5e5f, 1e-5f), false,
                     false});
        v.push_back({"mistral-7b",
                     shape("llama", 32, 4096, 32, 8, 128, 14336, 32000, 32768, 1e6f, 1e-5f), false,
                     false});
        for (SyntheticShape& s : v)
            s.config.name = std::string(kSyntheticPrefix) + s.name;
        return v;
    }();
    return shapes;
}

bool is_synthetic_model(const std::string& path) {
    return path.rfind(kSyntheticPrefix, 0) == 0;
}

Result<LoadedModel> make_synthetic_model(const std::string& spec, uint64_t seed) {
    const std::string name = spec.substr(std::string(kSyntheticPrefix).size());
    const SyntheticShape* found = nullptr;
    std::string known;
    for (const SyntheticShape& s : synthetic_shapes()) {
        if (s.name == name) found = &s;
        known += (known.empty() ? "" : ", ") + s.name;
    }
    if (!found) return Error{spec + ": no such synthetic model (known: " + known + ")"};
    const double gb = static_cast<double>(found->parameters()) * 4 / 1e9;
    if (!found->cpu) {
        char buf[160];
        std::snprintf(buf, sizeof buf,
                      ": %.1f B parameters, %.1f GB as the CPU backend's fp32 weights: too big "
                      "for it (the CPU takes qwen2.5-0.5b and llama-3.2-1b)",
                      static_cast<double>(found->parameters()) / 1e9, gb);
        return Error{spec + buf};
    }
    LoadedModel m;
    m.config = found->config;
    m.format = "synthetic (random weights, seed " + std::to_string(seed) + ")";
    m.path = spec;
    const ModelConfig& c = m.config;
    Rng rng{0x9E3779B97F4A7C15ULL ^ (seed * 0xBF58476D1CE4E5B9ULL) ^ 1};
    auto alloc = [&](size_t n, float scale, float offset) {
        auto buf = std::shared_ptr<float[]>(new float[n]);
        for (size_t i = 0; i < n; ++i)
            buf[i] = offset + scale * rng.uniform();
        m.weights.owners.push_back(buf);
        return buf.get();
    };
    // Uniform on [-a, a] has variance a^2 / 3: a = sqrt(3 / inputs) keeps activations at scale.
    auto matrix = [&](int rows, int cols) {
        return Matrix{alloc(static_cast<size_t>(rows) * static_cast<size_t>(cols),
                            std::sqrt(3.0f / static_cast<float>(cols)), 0.0f),
                      rows, cols};
    };
    auto vec = [&](int n, float scale, float offset) {
        return Vector{alloc(static_cast<size_t>(n), scale, offset), n};
    };
    ModelWeights& w = m.weights;
    w.token_embedding = matrix(c.vocab_size, c.dim);
    for (int l = 0; l < c.n_layers; ++l) {
        LayerWeights lw;
        lw.attn_norm = vec(c.dim, 0.0f, 1.0f);
        lw.wq = matrix(c.q_dim(), c.dim);
        lw.wk = matrix(c.kv_dim(), c.dim);
        lw.wv = matrix(c.kv_dim(), c.dim);
        lw.wo = matrix(c.dim, c.q_dim());
        if (c.has_qkv_bias) {
            lw.bq = vec(c.q_dim(), 0.02f, 0.0f);
            lw.bk = vec(c.kv_dim(), 0.02f, 0.0f);
            lw.bv = vec(c.kv_dim(), 0.02f, 0.0f);
        }
        lw.ffn_norm = vec(c.dim, 0.0f, 1.0f);
        lw.w_gate = matrix(c.hidden_dim, c.dim);
        lw.w_up = matrix(c.hidden_dim, c.dim);
        lw.w_down = matrix(c.dim, c.hidden_dim);
        w.layers.push_back(lw);
    }
    w.output_norm = vec(c.dim, 0.0f, 1.0f);
    w.output = found->tied_embeddings ? w.token_embedding : matrix(c.vocab_size, c.dim);
    return m;
}

}  // namespace kvscope
