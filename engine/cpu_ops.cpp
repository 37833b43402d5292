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

// [SECTION] exp, softmax, SwiGLU over sixteen lanes
//
// One exp for every path, written once over GCC's 16-float vectors (AVX-512 registers where the
// build has them, pairs of AVX or SSE ones elsewhere); a tail is run through the same function
// in a padded block, so a value's exp never depends on where it sits in a row. glibc's expf is
// scalar and was a tenth of a small model's prompt step with softmax around it.
//
// exp(x) = 2^n * e^r with n = round(x / ln 2) and r = x - n ln 2 in [-0.347, 0.347] (ln 2 in two
// parts so n ln2_hi is exact), e^r by its Taylor series to r^7 (truncation below 5e-9 relative),
// and 2^n built in the exponent bits. Over every float from -87.34 to 88.72 it is within 1.22 ulp
// of the true value (tests check a sample; it differs from glibc's expf on 0.8% of them). Below
// -87.34, where e^x leaves the normal floats, it is 0; above 88.72 +inf; NaN stays NaN. Plain
// multiplies and adds: -ffp-contract=off keeps them unfused in every build.
namespace {

typedef float Floats16 __attribute__((vector_size(64)));
typedef int32_t Ints16 __attribute__((vector_size(64)));
constexpr int kExpLanes = 16;

inline Floats16 splat(float v) {
    return Floats16{} + v;
}

inline Floats16 exp16(Floats16 x) {
    const Floats16 lo = splat(-87.33654f), hi = splat(88.72283f);
    const Floats16 xc = x < lo ? lo : (x > hi ? hi : x);
    // Rounds to nearest even: adding 1.5 * 2^23 leaves the integer in the low mantissa bits.
    const Floats16 magic = splat(12582912.0f);
    const Floats16 shifted = xc * splat(1.44269504f) + magic;
    const Floats16 n = shifted - magic;
    const Floats16 r = (xc - n * splat(0.693359375f)) - n * splat(-2.12194440e-4f);
    Floats16 p = splat(1.0f / 5040.0f);
    p = p * r + splat(1.0f / 720.0f);
    p = p * r + splat(1.0f / 120.0f);
    p = p * r + splat(1.0f / 24.0f);
    p = p * r + splat(1.0f / 6.0f);
    p = p * r + splat(0.5f);
    p = p * r + splat(1.0f);
    p = p * r + splat(1.0f);
    // 2^n in the exponent bits; n = 128 (x near the top) as 2^127 * 2.
    const Ints16 ni = (Ints16)shifted - (Ints16)magic;
    const Ints16 top = ni > 127;  // -1 where n = 128
    Floats16 y = p * (Floats16)((ni + top + 127) << 23);
    y = top ? y + y : y;
    y = x < lo ? splat(0.0f) : y;
    y = x > hi ? splat(INFINITY) : y;
    return x != x ? x : y;
}

inline Floats16 load16(const float* p) {
    Floats16 v;
    std::memcpy(&v, p, sizeof v);
    return v;
}

inline void store16(float* p, Floats16 v) {
    std::memcpy(p, &v, sizeof v);
}

// p[i .. i+16) of an array of n values; `pad` past its end.
inline Floats16 load16_padded(const float* p, int i, int n, float pad) {
    if (i + kExpLanes <= n) return load16(p + i);
    float tail[kExpLanes];
    for (int j = 0; j < kExpLanes; ++j)
        tail[j] = i + j < n ? p[i + j] : pad;
    return load16(tail);
}

// body(vector, i) over x[0..n) sixteen at a time, the tail padded with `pad` and written back
// only as far as n.
template <class Body>
inline void over_lanes(float* x, int n, float pad, Body&& body) {
    int i = 0;
    for (; i + kExpLanes <= n; i += kExpLanes)
        store16(x + i, body(load16(x + i), i));
    if (i < n) {
        float tail[kExpLanes];
        store16(tail, body(load16_padded(x, i, n, pad), i));
        std::memcpy(x + i, tail, static_cast<size_t>(n - i) * sizeof(float));
    }
}

}  // namespace

void exp_inplace(float* x, int n) {
    over_lanes(x, n, 0.0f, [](Floats16 v, int) { return exp16(v); });
}

// max, e^(x - max) sixteen at a time, their sum in index order, then each divided by the sum.
// The sum stays sequential: summed in sixteen lanes it cost nothing measurable less, and moved
// the Q8_0 demo model's greedy tokens off llama.cpp's at token 31 of "In the beginning" (that
// model's top two logits are often close; DemoQ8_0 checks it).
void softmax(float* x, int n) {
    float max_val = x[0];
    for (int i = 1; i < n; ++i)
        max_val = x[i] > max_val ? x[i] : max_val;
    over_lanes(x, n, -INFINITY, [&](Floats16 v, int) { return exp16(v - splat(max_val)); });
    float sum = 0.0f;
    for (int i = 0; i < n; ++i)
        sum += x[i];
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

#if defined(__GNUC__) && !defined(__clang__)
#define KVSCOPE_GCC_NO_VECTORIZE [[gnu::optimize("no-tree-vectorize")]]
#else
#define KVSCOPE_GCC_NO_VECTORIZE  // clang keeps -ffp-contract=off when it vectorizes
#endif
// Not vectorized: GCC 12 turns the vectorized pairs into fused multiply-add-subtracts although
// -ffp-contract=off forbids fusing, which changed the rotated values in the last bit (and the
// bundled model's greedy tokens with them). One scalar rotation per pair costs next to nothing.
KVSCOPE_GCC_NO_VECTORIZE void rope_rotate(float* head, int head_dim, const float* cos_sin,
                                          RopeStyle style) {
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
    over_lanes(a, n, 0.0f, [&](Floats16 v, int i) {
        return v * (splat(1.0f) / (splat(1.0f) + exp16(-v))) * load16_padded(b, i, n, 0.0f);
    });
}

}  // namespace kvscope
