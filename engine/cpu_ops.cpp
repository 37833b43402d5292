#include "engine/cpu_ops.h"

#include <cmath>
#include <cstring>
#include <vector>

namespace kvscope {

void rmsnorm(float* out, const float* x, const float* weight, int n, float eps) {
    float ss = 0.0f;
    for (int i = 0; i < n; ++i)
        ss += x[i] * x[i];
    ss /= static_cast<float>(n);
    ss += eps;
    ss = 1.0f / std::sqrt(ss);
    for (int i = 0; i < n; ++i)
        out[i] = weight[i] * (ss * x[i]);
}

void softmax(float* x, int n) {
    float max_val = x[0];
    for (int i = 1; i < n; ++i)
        max_val = x[i] > max_val ? x[i] : max_val;
    float sum = 0.0f;
    for (int i = 0; i < n; ++i) {
        x[i] = std::exp(x[i] - max_val);
        sum += x[i];
    }
    for (int i = 0; i < n; ++i)
        x[i] /= sum;
}

void rope_angles(int pos, const float* inv_freq, int half, float* cos_sin) {
    for (int i = 0; i < half; ++i) {
        float angle = static_cast<float>(pos) * inv_freq[i];
        cos_sin[2 * i] = std::cos(angle);
        cos_sin[2 * i + 1] = std::sin(angle);
    }
}

// Not vectorized: GCC 12 turns the vectorized pairs into fused multiply-add-subtracts although
// -ffp-contract=off forbids fusing, which changed the rotated values in the last bit (and the
// bundled model's greedy tokens with them). One scalar rotation per pair costs next to nothing.
[[gnu::optimize("no-tree-vectorize")]] void rope_rotate(float* head, int head_dim,
                                                        const float* cos_sin, RopeStyle style) {
    int half = head_dim / 2;
    for (int i = 0; i < half; ++i) {
        float c = cos_sin[2 * i], s = cos_sin[2 * i + 1];
        int a = style == RopeStyle::kAdjacentPairs ? 2 * i : i;
        int b = style == RopeStyle::kAdjacentPairs ? 2 * i + 1 : i + half;
        float x0 = head[a], x1 = head[b];
        head[a] = x0 * c - x1 * s;
        head[b] = x0 * s + x1 * c;
    }
}

void rope(float* head, int head_dim, int pos, const float* inv_freq, RopeStyle style) {
    std::vector<float> cos_sin(static_cast<size_t>(head_dim));
    rope_angles(pos, inv_freq, head_dim / 2, cos_sin.data());
    rope_rotate(head, head_dim, cos_sin.data(), style);
}

void swiglu(float* a, const float* b, int n) {
    for (int i = 0; i < n; ++i) {
        float v = a[i];
        a[i] = v * (1.0f / (1.0f + std::exp(-v))) * b[i];
    }
}

}  // namespace kvscope
