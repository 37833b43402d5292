// [SECTION] Exact: weights converted to fp32 a chunk at a time, summed in dot()'s order
// [SECTION] Fast: 8-bit activations, integer block dot products (Q8_0, Q4_0)
// [SECTION] Entry point
#include "engine/cpu_matmul.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "engine/cpu_ops.h"
#include "engine/thread_pool.h"

namespace kvscope {

const char* matmul_mode_name(MatmulMode mode) {
    return mode == MatmulMode::kFast ? "fast" : "exact";
}

std::optional<MatmulMode> parse_matmul_mode(const std::string& name) {
    if (name == "exact") return MatmulMode::kExact;
    if (name == "fast") return MatmulMode::kFast;
    return std::nullopt;
}

namespace {

// 5 x 4 needs 25 vector registers: AVX-512VL's 32. With 16 (AVX2), 6 x 2 (15) fits. Measured
// on 128-token prefill shapes of the bundled model: 5 x 4 is about 1.5x the old 4 x 2.
#if defined(__AVX512VL__)
constexpr int kTileRows = 5, kTileWeights = 4;
#else
constexpr int kTileRows = 6, kTileWeights = 2;
#endif

// Calls fn.template operator()<R>(r) for input rows [r, r + R): full tiles of kTileRows, then
// the one remainder size (1 .. kTileRows - 1) that is left.
template <class Fn>
void over_row_tiles(int n_rows, Fn&& fn) {
    int r = 0;
    for (; r + kTileRows <= n_rows; r += kTileRows)
        fn.template operator()<kTileRows>(r);
    [&]<int... I>(std::integer_sequence<int, I...>) {
        ((n_rows - r == I + 1 ? (fn.template operator()<I + 1>(r), 0) : 0), ...);
    }
    (std::make_integer_sequence<int, kTileRows - 1>{});
}

// Calls tile.template operator()<W>(o) for weight rows [o, o + W) over [begin, end): tiles of
// kTileWeights, then one by one. A single input row (decode) is tiled only when kDecodeTiles:
// fast mode's integer block dots ran decode fastest one weight row at a time (Q8_0, one thread,
// Qwen2.5-0.5B's shape: 48 tokens/s, tiles of 4 rows 44), while exact mode's single fp32 chain
// per row waits on its fused multiply-adds and gains from four independent rows (F16 20 -> 28,
// with the next tile's rows prefetched: see register_tile).
template <int R, bool kDecodeTiles, class Fn>
void over_weight_tiles(int64_t begin, int64_t end, Fn&& tile) {
    int64_t o = begin;
    if constexpr (R > 1 || kDecodeTiles)
        for (; o + kTileWeights <= end; o += kTileWeights)
            tile.template operator()<kTileWeights>(o);
    for (; o < end; ++o)
        tile.template operator()<1>(o);
}

// One step of a tile: R input vectors at `i` against W weight vectors, into R*W accumulators.
template <int R, int W>
[[gnu::always_inline]] inline void multiply_step(Lanes (&acc)[R][W], const Lanes (&vw)[W],
                                                 const float* const (&xr)[R], int i) {
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
        Lanes vx = load_lanes(xr[r] + i);
#pragma GCC unroll 8
        for (int j = 0; j < W; ++j)
            acc[r][j] = mul_add(acc[r][j], vw[j], vx);
    }
}

// A tile's results: each accumulator folded by the fixed tree, then the row's last k % 8 values
// added one by one (tail_w[j] holds weight row j's, as fp32; xr[r] + k8 the input's).
template <int R, int W>
[[gnu::always_inline]] inline void write_tile(const Lanes (&acc)[R][W],
                                              const float* const (&tail_w)[W],
                                              const float* const (&xr)[R], int k, int64_t n_out,
                                              int64_t o, float* out) {
    const int k8 = k / 8 * 8;
    for (int r = 0; r < R; ++r) {
        float sums[W];
        if constexpr (W == 4) {
            fold_lanes4(acc[r], sums);
        } else {
            for (int j = 0; j < W; ++j)
                sums[j] = fold_lanes(acc[r][j]);
        }
        for (int j = 0; j < W; ++j)
            out[r * n_out + o + j] = add_tail(sums[j], tail_w[j], xr[r] + k8, 0, k - k8);
    }
}

// ---------------------------------------------------------------------------------------------
// [SECTION] Exact
// ---------------------------------------------------------------------------------------------

// Values of a weight row converted at a time: a multiple of 8 (the lanes) and of every block
// size, small enough that kTileWeights converted rows stay in L1.
constexpr int kChunk = 256;

// Where a tile reads weight rows as fp32: F32 rows in place (one chunk, the whole row), other
// types converted chunk by chunk into the tile's scratch.
struct WeightReader {
    const Matrix& w;
    int chunk;            // values per chunk
    int64_t chunk_bytes;  // bytes of `chunk` values in the file's type
    explicit WeightReader(const Matrix& m)
        : w(m),
          chunk(m.type == GgmlType::F32 ? m.cols : kChunk),
          chunk_bytes(m.type == GgmlType::F32
                          ? 0
                          : static_cast<int64_t>(ggml_row_bytes(m.type, kChunk).value())) {}
    // Rows [o, o + W), values [c0, c1): rows[j][i - c0] is value i of row o + j.
    template <int W>
    void read(int64_t o, int c0, int c1, float* scratch, const float* rows[W]) const {
        for (int j = 0; j < W; ++j) {
            if (w.type == GgmlType::F32) {
                rows[j] = w.f32() + (o + j) * w.cols + c0;
            } else {
                float* dst = scratch + j * kChunk;
                dequantize_to_f32(w.type, w.row(o + j) + c0 / kChunk * chunk_bytes, dst,
                                  static_cast<size_t>(c1 - c0));
                rows[j] = dst;
            }
        }
    }
};

// One tile of out = x * w^T: R input rows against W weight rows, R*W accumulators in registers,
// each weight vector loaded once per R rows and each input vector once per W weight rows. Every
// output element still sums in dot()'s order (lane j takes values j, j+8, ... across chunks;
// the tree, then the tail), so tiling and chunking change speed, never results.
template <int R, int W>
[[gnu::always_inline]] inline void exact_tile(const float* x, const WeightReader& rd, int64_t o,
                                              float* out, float* scratch) {
    const int k = rd.w.cols;
    const int64_t n_out = rd.w.rows;
    const int k8 = k / 8 * 8;
    const float* xr[R];
    for (int r = 0; r < R; ++r)
        xr[r] = x + static_cast<int64_t>(r) * k;
    Lanes acc[R][W] = {};
    const float* wr[W];
    int c0 = 0;
    for (;; c0 += rd.chunk) {
        const int c1 = std::min(k, c0 + rd.chunk);
        rd.read<W>(o, c0, c1, scratch, wr);
        const int e8 = std::min(c1, k8);
        for (int i = c0; i < e8; i += 8) {
            Lanes vw[W];
#pragma GCC unroll 8
            for (int j = 0; j < W; ++j)
                vw[j] = load_lanes(wr[j] + (i - c0));
            multiply_step<R, W>(acc, vw, xr, i);
        }
        if (c1 == k) break;  // c0 stays at the last chunk, which holds the tail
    }
    const float* tail_w[W];
    for (int j = 0; j < W; ++j)
        tail_w[j] = wr[j] + (k8 - c0);
    write_tile<R, W>(acc, tail_w, xr, k, n_out, o, out);
}

float half_at(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
#if defined(__F16C__)
    return _cvtsh_ss(h);
#else
    return fp16_to_f32(h);
#endif
}

// Converting in registers (AVX2 + F16C): 8 values at a time straight from the row into a
// vector, the same fp32 values dequantize_to_f32 gives (same operations, same rounding), so the
// sums are those of the chunked path. Without these instructions every type takes that path.
#if defined(__AVX2__) && defined(__F16C__)
bool in_registers(GgmlType t) {
    return t == GgmlType::F16 || t == GgmlType::BF16 || t == GgmlType::Q8_0 ||
           t == GgmlType::Q4_0 || t == GgmlType::Q4_1;
}

// A format: kBlock values per group, kBytes bytes per group, a per-group scale (read once per
// group and row) and load(group, s, scale): values 8s .. 8s+7 of the group.
struct F16Format {
    static constexpr int kBlock = 8, kBytes = 16;
    struct Scale {};
    static Scale scale(const uint8_t*) { return {}; }
    static Lanes load(const uint8_t* g, int, Scale) {
        return (Lanes)_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g)));
    }
};
struct Bf16Format {
    static constexpr int kBlock = 8, kBytes = 16;
    struct Scale {};
    static Scale scale(const uint8_t*) { return {}; }
    static Lanes load(const uint8_t* g, int, Scale) {
        __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g)));
        return (Lanes)_mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    }
};
struct Q8Format {  // d * q
    static constexpr int kBlock = 32, kBytes = 34;
    using Scale = __m256;
    static Scale scale(const uint8_t* g) { return _mm256_set1_ps(half_at(g)); }
    static Lanes load(const uint8_t* g, int s, Scale d) {
        __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(g + 2 + 8 * s));
        return (Lanes)_mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
    }
};
// Q4_0 and Q4_1: values 0-15 are the low nibbles of the 16 code bytes, 16-31 the high ones.
inline __m256i nibbles(const uint8_t* codes, int s) {
    __m256i b = _mm256_cvtepu8_epi32(
        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + 8 * (s & 1))));
    return s < 2 ? _mm256_and_si256(b, _mm256_set1_epi32(0x0f)) : _mm256_srli_epi32(b, 4);
}
struct Q40Format {  // d * (q - 8)
    static constexpr int kBlock = 32, kBytes = 18;
    using Scale = __m256;
    static Scale scale(const uint8_t* g) { return _mm256_set1_ps(half_at(g)); }
    static Lanes load(const uint8_t* g, int s, Scale d) {
        __m256i q = _mm256_sub_epi32(nibbles(g + 2, s), _mm256_set1_epi32(8));
        return (Lanes)_mm256_mul_ps(d, _mm256_cvtepi32_ps(q));
    }
};
struct Q41Format {  // d * q + m, two roundings
    static constexpr int kBlock = 32, kBytes = 20;
    struct Scale {
        __m256 d, m;
    };
    static Scale scale(const uint8_t* g) {
        return {_mm256_set1_ps(half_at(g)), _mm256_set1_ps(half_at(g + 2))};
    }
    static Lanes load(const uint8_t* g, int s, Scale sc) {
        return (Lanes)_mm256_add_ps(_mm256_mul_ps(sc.d, _mm256_cvtepi32_ps(nibbles(g + 4, s))),
                                    sc.m);
    }
};

template <class F, int R, int W>
[[gnu::always_inline]] inline void register_tile(const float* x, const Matrix& w, int64_t o,
                                                 float* out) {
    const int k = w.cols, groups = k / F::kBlock, k8 = k / 8 * 8;
    const int64_t n_out = w.rows;
    const uint8_t* wr[W];
    for (int j = 0; j < W; ++j)
        wr[j] = w.row(o + j);
    const float* xr[R];
    for (int r = 0; r < R; ++r)
        xr[r] = x + static_cast<int64_t>(r) * k;
    Lanes acc[R][W] = {};
    for (int g = 0; g < groups; ++g) {
        typename F::Scale sc[W];
        // Decode walks W rows side by side, each only row_bytes long: too short a stream for
        // the hardware prefetcher to follow (four rows without this ran at half of one row's
        // speed), so each new cache line of the next tile's rows is asked for here.
        if constexpr (R == 1 && W > 1)
            if ((g * F::kBytes) % 64 < F::kBytes)
                for (int j = 0; j < W; ++j)
                    _mm_prefetch(
                        reinterpret_cast<const char*>(wr[j] + W * w.row_bytes + g * F::kBytes),
                        _MM_HINT_T0);
#pragma GCC unroll 8
        for (int j = 0; j < W; ++j)
            sc[j] = F::scale(wr[j] + g * F::kBytes);
#pragma GCC unroll 4
        for (int s = 0; s < F::kBlock / 8; ++s) {
            Lanes vw[W];
#pragma GCC unroll 8
            for (int j = 0; j < W; ++j)
                vw[j] = F::load(wr[j] + g * F::kBytes, s, sc[j]);
            multiply_step<R, W>(acc, vw, xr, g * F::kBlock + 8 * s);
        }
    }
    // F16/BF16 rows may end in fewer than 8 values: converted one by one, added after the tree.
    const int tail = k - k8;
    float tails[W][8];
    const float* tail_w[W];
    for (int j = 0; j < W; ++j) {
        if (tail > 0)
            dequantize_to_f32(w.type, wr[j] + static_cast<int64_t>(k8) * 2, tails[j],
                              static_cast<size_t>(tail));
        tail_w[j] = tails[j];
    }
    write_tile<R, W>(acc, tail_w, xr, k, n_out, o, out);
}
template <int R, int W>
void typed_register_tile(const float* x, const Matrix& w, int64_t o, float* out) {
    switch (w.type) {
        case GgmlType::F16:
            return register_tile<F16Format, R, W>(x, w, o, out);
        case GgmlType::BF16:
            return register_tile<Bf16Format, R, W>(x, w, o, out);
        case GgmlType::Q8_0:
            return register_tile<Q8Format, R, W>(x, w, o, out);
        case GgmlType::Q4_0:
            return register_tile<Q40Format, R, W>(x, w, o, out);
        default:
            return register_tile<Q41Format, R, W>(x, w, o, out);
    }
}
#else
bool in_registers(GgmlType) {
    return false;
}
template <int R, int W>
void typed_register_tile(const float*, const Matrix&, int64_t, float*) {}
#endif

void matmul_exact(ThreadPool& pool, const float* x, int n_rows, const Matrix& w, float* out) {
    const int64_t cost = static_cast<int64_t>(n_rows) * w.rows * w.cols;
    const int k = w.cols;
    const bool registers = in_registers(w.type);
    const WeightReader rd(w);
    pool.parallel_for(w.rows, cost, [&](int64_t begin, int64_t end) {
        alignas(64) float scratch[kTileWeights * kChunk];
        over_row_tiles(n_rows, [&]<int R>(int r) {
            const float* xs = x + static_cast<int64_t>(r) * k;
            float* os = out + static_cast<int64_t>(r) * w.rows;
            if (registers) {
                over_weight_tiles<R, true>(
                    begin, end, [&]<int W>(int64_t o) { typed_register_tile<R, W>(xs, w, o, os); });
                return;
            }
            over_weight_tiles<R, false>(
                begin, end, [&]<int W>(int64_t o) { exact_tile<R, W>(xs, rd, o, os, scratch); });
        });
    });
}

// ---------------------------------------------------------------------------------------------
// [SECTION] Fast
// ---------------------------------------------------------------------------------------------

// One 32-value block of an activation row as llama.cpp's Q8_0 holds it: d = max|x| / 127 kept
// as fp16 (here its fp32 value), codes round(x * 127 / max|x|), ties to even. Beside it, for
// each group of four codes, minus their sum times 8: Q4_0's integer block dot starts from these,
// so its stored nibbles (q + 8) enter the unsigned side of the byte multiply with no sign fix-up
// per block. The lanes are the same exact integers either way.
struct ActivationBlock {
    float d;
    int8_t q[32];
    int32_t minus8_sums[8];
};

void quantize_activations(const float* x, int k, ActivationBlock* out) {
    for (int b = 0; b < k / 32; ++b) {
        const float* v = x + 32 * b;
        float amax = 0.0f;
        for (int i = 0; i < 32; ++i)
            amax = std::max(amax, std::fabs(v[i]));
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        out[b].d = fp16_to_f32(f32_to_fp16(amax / 127.0f));
        for (int i = 0; i < 32; ++i)
            out[b].q[i] = static_cast<int8_t>(std::nearbyint(v[i] * id));
        for (int l = 0; l < 8; ++l) {
            const int32_t sum =
                out[b].q[4 * l] + out[b].q[4 * l + 1] + out[b].q[4 * l + 2] + out[b].q[4 * l + 3];
            out[b].minus8_sums[l] = -8 * sum;
        }
    }
}

bool fast_type(GgmlType t) {
    return t == GgmlType::Q8_0 || t == GgmlType::Q4_0;
}

// llama.cpp's final fold of its eight lanes (hsum_float_8).
inline float reduce_lanes_fast(Lanes a) {
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

#if defined(__AVX2__)
#if defined(__AVXVNNI__) || (defined(__AVX512VNNI__) && defined(__AVX512VL__))
constexpr bool kByteDotAccumulates = true;
#else
constexpr bool kByteDotAccumulates = false;
#endif
// Q4_0's nibbles fit the unsigned side even where the byte multiply saturates pairs at int16
// (no VNNI). Q8_0 bytes + 128 would need VNNI and an extra xor per block; measured (Qwen2.5-0.5B's
// shape, one thread) Q4_0 decode went 55 -> 57 tokens/s this way, Q8_0 no faster.
template <GgmlType T>
constexpr bool kOffsetCodes = T == GgmlType::Q4_0;

// The block's 32 weight codes: Q8_0 as stored (signed), Q4_0 nibbles as stored (q + 8, low ones
// first).
template <GgmlType T>
inline __m256i weight_codes(const uint8_t* blk) {
    if constexpr (T == GgmlType::Q8_0) {
        return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
    } else {
        const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 2));
        const __m256i both = _mm256_set_m128i(_mm_srli_epi16(b, 4), b);
        return _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
    }
}
// Eight int32 lanes, lane l the sum of products 4l .. 4l+3 of the block's weight and activation
// codes: exact integers, so every instruction sequence that forms them gives the same lanes.
template <GgmlType T>
inline __m256i dot_lanes(__m256i w, const ActivationBlock& xb) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.q));
    if constexpr (kOffsetCodes<T>) {
        const __m256i start = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.minus8_sums));
        if constexpr (kByteDotAccumulates) {
            return _mm256_dpbusd_epi32(start, w, x);
        } else {
            return _mm256_add_epi32(
                start, _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), _mm256_set1_epi16(1)));
        }
    } else {
        const __m256i aw = _mm256_sign_epi8(w, w), sx = _mm256_sign_epi8(x, w);
        return _mm256_madd_epi16(_mm256_maddubs_epi16(aw, sx), _mm256_set1_epi16(1));
    }
}
#else
template <GgmlType T>
inline void weight_codes(const uint8_t* blk, int8_t out[32]) {
    for (int i = 0; i < 32; ++i)
        out[i] = T == GgmlType::Q8_0 ? static_cast<int8_t>(blk[2 + i])
                                     : static_cast<int8_t>(i < 16 ? (blk[2 + i] & 0x0f) - 8
                                                                  : (blk[2 + i - 16] >> 4) - 8);
}
#endif

template <GgmlType T, int R, int W>
[[gnu::always_inline]] inline void fast_tile(const ActivationBlock* xq, int k, const Matrix& w,
                                             int64_t o, float* out) {
    constexpr int kBytes = T == GgmlType::Q8_0 ? 34 : 18;
    const int blocks = k / 32;
    const int64_t n_out = w.rows;
    const uint8_t* wr[W];
    for (int j = 0; j < W; ++j)
        wr[j] = w.row(o + j);
    Lanes acc[R][W] = {};
    for (int b = 0; b < blocks; ++b) {
        float dw[W];
#if defined(__AVX2__)
        __m256i qw[W];
#pragma GCC unroll 8
        for (int j = 0; j < W; ++j) {
            const uint8_t* blk = wr[j] + b * kBytes;
            dw[j] = half_at(blk);
            qw[j] = weight_codes<T>(blk);
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            const ActivationBlock& xb = xq[static_cast<int64_t>(r) * blocks + b];
#pragma GCC unroll 8
            for (int j = 0; j < W; ++j) {
                const Lanes sum = (Lanes)_mm256_cvtepi32_ps(dot_lanes<T>(qw[j], xb));
                const float d = dw[j] * xb.d;
                acc[r][j] = mul_add(acc[r][j], Lanes{d, d, d, d, d, d, d, d}, sum);
            }
        }
#else
        int8_t qw[W][32];
        for (int j = 0; j < W; ++j) {
            const uint8_t* blk = wr[j] + b * kBytes;
            dw[j] = half_at(blk);
            weight_codes<T>(blk, qw[j]);
        }
        for (int r = 0; r < R; ++r) {
            const ActivationBlock& xb = xq[static_cast<int64_t>(r) * blocks + b];
            for (int j = 0; j < W; ++j) {
                Lanes sum;
                for (int l = 0; l < 8; ++l) {
                    int32_t s = 0;
                    for (int i = 4 * l; i < 4 * l + 4; ++i)
                        s += qw[j][i] * xb.q[i];
                    sum[l] = static_cast<float>(s);
                }
                const float d = dw[j] * xb.d;
                acc[r][j] = mul_add(acc[r][j], Lanes{d, d, d, d, d, d, d, d}, sum);
            }
        }
#endif
    }
    for (int r = 0; r < R; ++r)
        for (int j = 0; j < W; ++j)
            out[r * n_out + o + j] = reduce_lanes_fast(acc[r][j]);
}

void matmul_fast(ThreadPool& pool, const float* x, int n_rows, const Matrix& w, float* out) {
    const int k = w.cols, blocks = k / 32;
    // The caller's buffer (a lambda naming a thread_local would reach each worker's own).
    thread_local std::vector<ActivationBlock> buffer;
    buffer.resize(static_cast<size_t>(n_rows) * static_cast<size_t>(blocks));
    ActivationBlock* xq = buffer.data();
    for (int r = 0; r < n_rows; ++r)
        quantize_activations(x + static_cast<int64_t>(r) * k, k,
                             xq + static_cast<int64_t>(r) * blocks);
    const int64_t cost = static_cast<int64_t>(n_rows) * w.rows * w.cols / 4;
    pool.parallel_for(w.rows, cost, [&](int64_t begin, int64_t end) {
        over_row_tiles(n_rows, [&]<int R>(int r) {
            const ActivationBlock* xs = xq + static_cast<int64_t>(r) * blocks;
            float* os = out + static_cast<int64_t>(r) * w.rows;
            over_weight_tiles<R, false>(begin, end, [&]<int W>(int64_t o) {
                if (w.type == GgmlType::Q8_0)
                    fast_tile<GgmlType::Q8_0, R, W>(xs, k, w, o, os);
                else
                    fast_tile<GgmlType::Q4_0, R, W>(xs, k, w, o, os);
            });
        });
    });
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// [SECTION] Entry point
// ---------------------------------------------------------------------------------------------

void matmul(ThreadPool& pool, const float* x, int n_rows, const Matrix& w, float* out,
            MatmulMode mode) {
    if (mode == MatmulMode::kFast && fast_type(w.type)) return matmul_fast(pool, x, n_rows, w, out);
    matmul_exact(pool, x, n_rows, w, out);
}

}  // namespace kvscope
