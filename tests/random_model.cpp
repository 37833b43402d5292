#include "random_model.h"

#include "engine/random_weights.h"

#include <cmath>
#include <random>
#include <vector>

namespace kvscope::test {

ModelConfig small_test_config() {
    ModelConfig c;
    c.dim = 64;
    c.hidden_dim = 96;
    c.n_layers = 2;
    c.n_heads = 4;
    c.n_kv_heads = 2;
    c.head_dim = 16;
    c.vocab_size = 97;
    c.context_length = 256;
    return c;
}

std::shared_ptr<LoadedModel> make_random_model(const ModelConfig& config, uint64_t seed) {
    auto model = std::make_shared<LoadedModel>();
    model->config = config;
    model->format = "random";
    model->path = "<random>";
    std::mt19937_64 rng(seed);
    auto& w = model->weights;
    auto alloc = [&](size_t n, float scale, float offset) {
        auto buf = std::shared_ptr<float[]>(new float[n]);
        std::normal_distribution<float> dist(0.0f, 1.0f);
        for (size_t i = 0; i < n; ++i)
            buf[i] = offset + scale * dist(rng);
        w.owners.push_back(buf);
        return buf.get();
    };
    auto matrix = [&](int rows, int cols) {
        float scale = 1.0f / std::sqrt(static_cast<float>(cols));
        return Matrix{alloc(static_cast<size_t>(rows) * cols, scale, 0.0f), rows, cols};
    };
    auto norm = [&](int n) { return Vector{alloc(static_cast<size_t>(n), 0.1f, 1.0f), n}; };
    const ModelConfig& c = config;
    w.token_embedding = matrix(c.vocab_size, c.dim);
    for (int l = 0; l < c.n_layers; ++l) {
        LayerWeights lw;
        lw.attn_norm = norm(c.dim);
        lw.wq = matrix(c.q_dim(), c.dim);
        lw.wk = matrix(c.kv_dim(), c.dim);
        lw.wv = matrix(c.kv_dim(), c.dim);
        lw.wo = matrix(c.dim, c.q_dim());
        if (c.has_qkv_bias) {
            lw.bq = Vector{alloc(static_cast<size_t>(c.q_dim()), 0.1f, 0.0f), c.q_dim()};
            lw.bk = Vector{alloc(static_cast<size_t>(c.kv_dim()), 0.1f, 0.0f), c.kv_dim()};
            lw.bv = Vector{alloc(static_cast<size_t>(c.kv_dim()), 0.1f, 0.0f), c.kv_dim()};
        }
        lw.ffn_norm = norm(c.dim);
        lw.w_gate = matrix(c.hidden_dim, c.dim);
        lw.w_up = matrix(c.hidden_dim, c.dim);
        lw.w_down = matrix(c.dim, c.hidden_dim);
        w.layers.push_back(lw);
    }
    w.output_norm = norm(c.dim);
    w.output = matrix(c.vocab_size, c.dim);
    return model;
}

std::shared_ptr<LoadedModel> with_weight_type(const LoadedModel& model, GgmlType type,
                                              uint64_t seed) {
    auto out = std::make_shared<LoadedModel>(model);
    WeightRng rng{seed * 0x9E3779B97F4A7C15ULL + 7};
    auto& w = out->weights;
    auto remake = [&](Matrix& m) {
        auto buf =
            random_weights(type, m.rows, m.cols, std::sqrt(3.0f / static_cast<float>(m.cols)), rng);
        w.owners.push_back(buf);
        m = Matrix{buf.get(), type, m.rows, m.cols};
    };
    remake(w.token_embedding);
    for (LayerWeights& l : w.layers)
        for (Matrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down})
            remake(*m);
    remake(w.output);
    return out;
}

}  // namespace kvscope::test
