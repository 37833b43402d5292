#include "reference_forward.h"

#include <cmath>
#include <vector>

namespace kvscope::test {

namespace {
void matvec(float* out, const float* x, const Matrix& w) {
    std::vector<float> row(static_cast<size_t>(w.cols));
    for (int i = 0; i < w.rows; ++i) {
        w.row_to_f32(i, row.data());
        float v = 0.0f;
        for (int j = 0; j < w.cols; ++j)
            v += row[static_cast<size_t>(j)] * x[j];
        out[i] = v;
    }
}
void norm(float* o, const float* x, const float* weight, int n, float eps) {
    float ss = 0.0f;
    for (int j = 0; j < n; ++j)
        ss += x[j] * x[j];
    ss = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
    for (int j = 0; j < n; ++j)
        o[j] = weight[j] * (ss * x[j]);
}
void rotate(float* v, int hd, int pos, float theta, RopeStyle style) {
    for (int i = 0; i < hd / 2; ++i) {
        float freq = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(hd));
        float a = static_cast<float>(pos) * freq;
        int i0 = style == RopeStyle::kAdjacentPairs ? 2 * i : i;
        int i1 = style == RopeStyle::kAdjacentPairs ? 2 * i + 1 : i + hd / 2;
        float v0 = v[i0], v1 = v[i1];
        v[i0] = v0 * std::cos(a) - v1 * std::sin(a);
        v[i1] = v0 * std::sin(a) + v1 * std::cos(a);
    }
}
}  // namespace

ReferenceForward::ReferenceForward(const LoadedModel& model) : model_(model) {
    const ModelConfig& c = model.config;
    size_t cache = static_cast<size_t>(c.n_layers) * c.context_length * c.kv_dim();
    key_cache_.assign(cache, 0.0f);
    value_cache_.assign(cache, 0.0f);
    x_.resize(c.dim);
    xb_.resize(c.q_dim() > c.dim ? c.q_dim() : c.dim);
    xb2_.resize(c.dim);
    q_.resize(c.q_dim());
    k_.resize(c.kv_dim());
    v_.resize(c.kv_dim());
    att_.resize(c.context_length);
    hb_.resize(c.hidden_dim);
    hb2_.resize(c.hidden_dim);
    logits_.resize(c.vocab_size);
}

const std::vector<float>& ReferenceForward::step(int token, int pos) {
    const ModelConfig& c = model_.config;
    const ModelWeights& w = model_.weights;
    const int hd = c.head_dim;
    w.token_embedding.row_to_f32(token, x_.data());
    for (int l = 0; l < c.n_layers; ++l) {
        const LayerWeights& lw = w.layers[l];
        norm(xb_.data(), x_.data(), lw.attn_norm.data, c.dim, c.rms_eps);
        matvec(q_.data(), xb_.data(), lw.wq);
        matvec(k_.data(), xb_.data(), lw.wk);
        matvec(v_.data(), xb_.data(), lw.wv);
        if (lw.bq.data) {
            for (int i = 0; i < c.q_dim(); ++i)
                q_[i] += lw.bq.data[i];
            for (int i = 0; i < c.kv_dim(); ++i)
                k_[i] += lw.bk.data[i], v_[i] += lw.bv.data[i];
        }
        for (int h = 0; h < c.n_heads; ++h)
            rotate(&q_[h * hd], hd, pos, c.rope_theta, c.rope_style);
        for (int h = 0; h < c.n_kv_heads; ++h)
            rotate(&k_[h * hd], hd, pos, c.rope_theta, c.rope_style);
        size_t base = (static_cast<size_t>(l) * c.context_length + pos) * c.kv_dim();
        for (int i = 0; i < c.kv_dim(); ++i)
            key_cache_[base + i] = k_[i], value_cache_[base + i] = v_[i];
        for (int h = 0; h < c.n_heads; ++h) {
            int kvh = h / c.group_size();
            float mx = -1e30f;
            for (int t = 0; t <= pos; ++t) {
                const float* kt =
                    &key_cache_[(static_cast<size_t>(l) * c.context_length + t) * c.kv_dim() +
                                kvh * hd];
                float s = 0.0f;
                for (int i = 0; i < hd; ++i)
                    s += q_[h * hd + i] * kt[i];
                att_[t] = s / std::sqrt(static_cast<float>(hd));
                mx = std::max(mx, att_[t]);
            }
            float sum = 0.0f;
            for (int t = 0; t <= pos; ++t)
                sum += (att_[t] = std::exp(att_[t] - mx));
            for (int i = 0; i < hd; ++i)
                xb_[h * hd + i] = 0.0f;
            for (int t = 0; t <= pos; ++t) {
                const float* vt =
                    &value_cache_[(static_cast<size_t>(l) * c.context_length + t) * c.kv_dim() +
                                  kvh * hd];
                for (int i = 0; i < hd; ++i)
                    xb_[h * hd + i] += att_[t] / sum * vt[i];
            }
        }
        matvec(xb2_.data(), xb_.data(), lw.wo);
        for (int i = 0; i < c.dim; ++i)
            x_[i] += xb2_[i];
        norm(xb_.data(), x_.data(), lw.ffn_norm.data, c.dim, c.rms_eps);
        matvec(hb_.data(), xb_.data(), lw.w_gate);
        matvec(hb2_.data(), xb_.data(), lw.w_up);
        for (int i = 0; i < c.hidden_dim; ++i)
            hb_[i] = hb_[i] / (1.0f + std::exp(-hb_[i])) * hb2_[i];
        matvec(xb2_.data(), hb_.data(), lw.w_down);
        for (int i = 0; i < c.dim; ++i)
            x_[i] += xb2_[i];
    }
    norm(xb_.data(), x_.data(), w.output_norm.data, c.dim, c.rms_eps);
    matvec(logits_.data(), xb_.data(), w.output);
    return logits_;
}

}  // namespace kvscope::test
