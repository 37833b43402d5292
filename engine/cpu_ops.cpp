#include "engine/cpu_ops.h"

#include <cblas.h>

#include <cmath>

#include "engine/thread_pool.h"

namespace kvscope {

float dot(const float* a, const float* b, int n) {
    // Eight independent partial sums let the compiler keep a vector register of them.
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
    float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; ++i) sum += a[i] * b[i];
    return sum;
}

namespace {
// Below this many rows a GEMM call costs more than it saves.
constexpr int kGemmMinRows = 4;
}  // namespace

void matmul(ThreadPool& pool, const float* x, int n_rows, const Matrix& w, float* out) {
    if (n_rows >= kGemmMinRows) {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n_rows, w.rows, w.cols, 1.0f, x,
                    w.cols, w.data, w.cols, 0.0f, out, w.rows);
        return;
    }
    int64_t cost = static_cast<int64_t>(n_rows) * w.rows * w.cols;
    pool.parallel_for(w.rows, cost, [&](int64_t begin, int64_t end) {
        for (int r = 0; r < n_rows; ++r) {
            const float* xr = x + static_cast<int64_t>(r) * w.cols;
            float* o = out + static_cast<int64_t>(r) * w.rows;
            for (int64_t i = begin; i < end; ++i) o[i] = dot(w.data + i * w.cols, xr, w.cols);
        }
    });
}

void rmsnorm(float* out, const float* x, const float* weight, int n, float eps) {
    float ss = 0.0f;
    for (int i = 0; i < n; ++i) ss += x[i] * x[i];
    ss /= static_cast<float>(n);
    ss += eps;
    ss = 1.0f / std::sqrt(ss);
    for (int i = 0; i < n; ++i) out[i] = weight[i] * (ss * x[i]);
}

void softmax(float* x, int n) {
    float max_val = x[0];
    for (int i = 1; i < n; ++i) max_val = x[i] > max_val ? x[i] : max_val;
    float sum = 0.0f;
    for (int i = 0; i < n; ++i) {
        x[i] = std::exp(x[i] - max_val);
        sum += x[i];
    }
    for (int i = 0; i < n; ++i) x[i] /= sum;
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
