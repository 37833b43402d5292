#include "engine/cpu_ops.h"

#include <cmath>
#include <cstring>

#include "engine/thread_pool.h"

namespace kvscope {

void matmul(ThreadPool& pool, const float* x, int n_rows, const Matrix& w, float* out) {
    const int k = w.cols;
    const int k8 = k / 8 * 8;
    int64_t cost = static_cast<int64_t>(n_rows) * w.rows * k;
    pool.parallel_for(w.rows, cost, [&](int64_t begin, int64_t end) {
        // Tiles of 4 input rows x 2 weight rows: each weight row is loaded once per 4 rows.
        int r = 0;
        for (; r + 4 <= n_rows; r += 4) {
            const float* x0 = x + static_cast<int64_t>(r) * k;
            const float* x1 = x0 + k;
            const float* x2 = x1 + k;
            const float* x3 = x2 + k;
            int64_t o = begin;
            for (; o + 2 <= end; o += 2) {
                const float* w0 = w.data + o * k;
                const float* w1 = w0 + k;
                Lanes a00 = {}, a01 = {}, a10 = {}, a11 = {}, a20 = {}, a21 = {}, a30 = {},
                      a31 = {};
                for (int i = 0; i < k8; i += 8) {
                    Lanes vw0 = load_lanes(w0 + i), vw1 = load_lanes(w1 + i);
                    Lanes v0 = load_lanes(x0 + i), v1 = load_lanes(x1 + i), v2 = load_lanes(x2 + i),
                          v3 = load_lanes(x3 + i);
                    a00 = mul_add(a00, vw0, v0);
                    a01 = mul_add(a01, vw1, v0);
                    a10 = mul_add(a10, vw0, v1);
                    a11 = mul_add(a11, vw1, v1);
                    a20 = mul_add(a20, vw0, v2);
                    a21 = mul_add(a21, vw1, v2);
                    a30 = mul_add(a30, vw0, v3);
                    a31 = mul_add(a31, vw1, v3);
                }
                float* out0 = out + static_cast<int64_t>(r) * w.rows;
                out0[o] = reduce_lanes(a00, w0, x0, k8, k);
                out0[o + 1] = reduce_lanes(a01, w1, x0, k8, k);
                out0[w.rows + o] = reduce_lanes(a10, w0, x1, k8, k);
                out0[w.rows + o + 1] = reduce_lanes(a11, w1, x1, k8, k);
                out0[2 * w.rows + o] = reduce_lanes(a20, w0, x2, k8, k);
                out0[2 * w.rows + o + 1] = reduce_lanes(a21, w1, x2, k8, k);
                out0[3 * w.rows + o] = reduce_lanes(a30, w0, x3, k8, k);
                out0[3 * w.rows + o + 1] = reduce_lanes(a31, w1, x3, k8, k);
            }
            for (; o < end; ++o)
                for (int j = 0; j < 4; ++j)
                    out[static_cast<int64_t>(r + j) * w.rows + o] =
                        dot(w.data + o * k, x + static_cast<int64_t>(r + j) * k, k);
        }
        for (; r < n_rows; ++r) {
            const float* xr = x + static_cast<int64_t>(r) * k;
            float* o = out + static_cast<int64_t>(r) * w.rows;
            for (int64_t i = begin; i < end; ++i)
                o[i] = dot(w.data + i * k, xr, k);
        }
    });
}

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

void rope(float* head, int head_dim, int pos, const float* inv_freq, RopeStyle style) {
    int half = head_dim / 2;
    for (int i = 0; i < half; ++i) {
        float angle = static_cast<float>(pos) * inv_freq[i];
        float c = std::cos(angle), s = std::sin(angle);
        int a = style == RopeStyle::kAdjacentPairs ? 2 * i : i;
        int b = style == RopeStyle::kAdjacentPairs ? 2 * i + 1 : i + half;
        float x0 = head[a], x1 = head[b];
        head[a] = x0 * c - x1 * s;
        head[b] = x0 * s + x1 * c;
    }
}

void swiglu(float* a, const float* b, int n) {
    for (int i = 0; i < n; ++i) {
        float v = a[i];
        a[i] = v * (1.0f / (1.0f + std::exp(-v))) * b[i];
    }
}

}  // namespace kvscope
