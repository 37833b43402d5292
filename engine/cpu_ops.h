#pragma once
// fp32 kernels of the CPU backend. Each takes raw pointers; shapes are given explicitly.

#include <cstdint>
#include <cstring>
#if defined(__FMA__)
#include <immintrin.h>
// mul_add (and so dot()) fuses: kernels compiled under other target flags must round alike.
#define KVSCOPE_DOT_FUSES 1
#endif

#include "engine/model_config.h"

namespace kvscope {

// Eight lanes of partial sums: one AVX register on x86-64, two SSE ones elsewhere.
typedef float Lanes __attribute__((vector_size(32)));

inline Lanes load_lanes(const float* p) {
    Lanes v;
    std::memcpy(&v, p, sizeof v);
    return v;
}
// acc + a * b: fused (one rounding) when the build targets FMA, two roundings otherwise. Every
// accumulation goes through here and the build sets -ffp-contract=off, so the compiler never
// fuses one path and not another (that broke bit-equality of prefill and decode on FMA CPUs).
inline Lanes mul_add(Lanes acc, Lanes a, Lanes b) {
#if defined(__FMA__)
    return (Lanes)_mm256_fmadd_ps((__m256)a, (__m256)b, (__m256)acc);
#else
    return acc + a * b;
#endif
}
// The elements past the last full 8 (n % 8 of them), added one by one after the lanes' tree.
inline float add_tail(float sum, const float* x, const float* y, int tail_begin, int n) {
    for (int i = tail_begin; i < n; ++i)
        sum += x[i] * y[i];
    return sum;
}
// The lanes' fixed tree: pairs, then pairs of pairs.
inline float fold_lanes(Lanes a) {
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}
inline float reduce_lanes(Lanes a, const float* x, const float* y, int tail_begin, int n) {
    return add_tail(fold_lanes(a), x, y, tail_begin, n);
}

// Every dot product in the engine, whichever path computes it, sums in exactly this order:
// lane j accumulates elements j, j+8, j+16... then the lanes fold pairwise and the tail is
// added. That makes results independent of batch size and thread count, so a request's tokens
// do not depend on what else was scheduled with it (the property the scheduler tests check).
inline float dot(const float* a, const float* b, int n) {
    Lanes acc = {};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        acc = mul_add(acc, load_lanes(a + i), load_lanes(b + i));
    return reduce_lanes(acc, a, b, i, n);
}
// fold_lanes of four accumulators at once. With AVX, three horizontal adds form (a0+a1),
// (a2+a3)... then their pairs, then low half + high half for all four: the same tree as
// fold_lanes, so the same bits, at a fraction of the instructions (they are a large share of
// the matmul's epilogue).
inline void fold_lanes4(const Lanes acc[4], float out[4]) {
#if defined(__AVX__)
    __m256 ab = _mm256_hadd_ps((__m256)acc[0], (__m256)acc[1]);
    __m256 cd = _mm256_hadd_ps((__m256)acc[2], (__m256)acc[3]);
    __m256 abcd = _mm256_hadd_ps(ab, cd);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
    for (int j = 0; j < 4; ++j)
        out[j] = s[j];
#else
    for (int j = 0; j < 4; ++j)
        out[j] = fold_lanes(acc[j]);
#endif
}
// out = weight * x / sqrt(mean(x^2) + eps), over n values.
void rmsnorm(float* out, const float* x, const float* weight, int n, float eps);
// x[i] = e^x[i] (cpu_ops.cpp says how, and how closely); softmax and swiglu use the same.
void exp_inplace(float* x, int n);
void softmax(float* x, int n);
// Rotates one head vector in place for position `pos`. `inv_freq` has head_dim/2 entries.
void rope(float* head, int head_dim, int pos, const float* inv_freq, RopeStyle style);
// The same rotation in two halves, so that a position's angles serve every head and layer:
// cos_sin[2i], cos_sin[2i+1] = cos, sin of pos * inv_freq[i] for i < head_dim/2.
void rope_angles(int pos, const float* inv_freq, int half, float* cos_sin);
void rope_rotate(float* head, int head_dim, const float* cos_sin, RopeStyle style);
// a[i] = silu(a[i]) * b[i]
void swiglu(float* a, const float* b, int n);

}  // namespace kvscope
