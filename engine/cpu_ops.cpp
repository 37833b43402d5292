#include "engine/cpu_ops.h"

#include <cmath>
#include <cstring>

#include "engine/thread_pool.h"

namespace kvscope {

namespace {

// One tile of out = x * w^T: R input rows against W weight rows, R*W accumulators in registers,
// each weight vector loaded once per R rows and each input vector once per W weight rows. Every
// output element still sums in dot()'s order, so tiling changes speed, never results.
template <int R, int W>
[[gnu::always_inline]] inline void matmul_tile(const float* x, int k, const float* w, int64_t o,
                                               int64_t n_out, float* out) {
    const int k8 = k / 8 * 8;
    const float* wr[W];
    const float* xr[R];
    for (int j = 0; j < W; ++j)
        wr[j] = w + (o + j) * k;
    for (int r = 0; r < R; ++r)
        xr[r] = x + static_cast<int64_t>(r) * k;
    Lanes acc[R][W] = {};
    for (int i = 0; i < k8; i += 8) {
        Lanes vw[W];
#pragma GCC unroll 8
        for (int j = 0; j < W; ++j)
            vw[j] = load_lanes(wr[j] + i);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            Lanes vx = load_lanes(xr[r] + i);
#pragma GCC unroll 8
            for (int j = 0; j < W; ++j)
                acc[r][j] = mul_add(acc[r][j], vw[j], vx);
        }
    }
    if constexpr (W == 4) {
        for (int r = 0; r < R; ++r) {
            const float* const xs[4] = {xr[r], xr[r], xr[r], xr[r]};
            reduce_lanes4(acc[r], wr, xs, k8, k, out + r * n_out + o);
        }
    } else {
        for (int r = 0; r < R; ++r)
            for (int j = 0; j < W; ++j)
                out[r * n_out + o + j] = reduce_lanes(acc[r][j], wr[j], xr[r], k8, k);
    }
}

// Rows [0, R) of x against weight rows [begin, end): tiles of W, the last few one by one.
template <int R, int W>
void matmul_rows(const float* x, int k, const Matrix& w, int64_t begin, int64_t end, float* out) {
    int64_t o = begin;
    for (; o + W <= end; o += W)
        matmul_tile<R, W>(x, k, w.data, o, w.rows, out);
    for (; o < end; ++o)
        for (int r = 0; r < R; ++r)
            out[static_cast<int64_t>(r) * w.rows + o] =
                dot(w.data + o * k, x + static_cast<int64_t>(r) * k, k);
}

// 5 x 4 needs 25 vector registers: AVX-512VL's 32. With 16 (AVX2), 6 x 2 (15) fits. Measured
// on 128-token prefill shapes of the bundled model: 5 x 4 is about 1.5x the old 4 x 2.
#if defined(__AVX512VL__)
constexpr int kTileRows = 5, kTileWeights = 4;
#else
constexpr int kTileRows = 6, kTileWeights = 2;
#endif

template <int R>
void matmul_remainder(int rows, const float* x, int k, const Matrix& w, int64_t begin, int64_t end,
                      float* out) {
    if constexpr (R > 0) {
        if (rows == R) return matmul_rows<R, kTileWeights>(x, k, w, begin, end, out);
        matmul_remainder<R - 1>(rows, x, k, w, begin, end, out);
    }
}

}  // namespace

void matmul(ThreadPool& pool, const float* x, int n_rows, const Matrix& w, float* out) {
    const int k = w.cols;
    int64_t cost = static_cast<int64_t>(n_rows) * w.rows * k;
    pool.parallel_for(w.rows, cost, [&](int64_t begin, int64_t end) {
        int r = 0;
        for (; r + kTileRows <= n_rows; r += kTileRows)
            matmul_rows<kTileRows, kTileWeights>(x + static_cast<int64_t>(r) * k, k, w, begin, end,
                                                 out + static_cast<int64_t>(r) * w.rows);
        matmul_remainder<kTileRows - 1>(n_rows - r, x + static_cast<int64_t>(r) * k, k, w, begin,
                                        end, out + static_cast<int64_t>(r) * w.rows);
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
