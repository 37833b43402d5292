// [SECTION] Exact: weights converted to fp32 a chunk at a time, summed in dot()'s order
// [SECTION] Fast: 8-bit activations, integer block dot products (Q8_0; Q4_0 interleaved)
// [SECTION] Entry point
#include "engine/cpu_matmul.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "engine/cpu_ops.h"
#include "engine/q4_0_interleaved.h"
#include "engine/thread_pool.h"

// GCC 12 reports its own AVX-512 intrinsics (which start from a deliberately undefined register)
// as (maybe-)uninitialized wherever they are inlined.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

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

// Tile shapes: input rows x weight rows held in registers.
// - 8-lane tiles (exact mode's chunked path, and every path without AVX-512): 5 x 4 needs 25
//   vector registers, AVX-512VL's 32; with 16 (AVX2), 6 x 2 (15) fits. Measured on 128-token
//   prefill shapes of the bundled model: 5 x 4 is about 1.5x the old 4 x 2.
// - 16-lane tiles (AVX-512, see register_tile): two weight rows share a register, so 6 x 8 is
//   24 accumulators.
#if defined(__AVX512VL__)
constexpr int kTileRows = 5, kTileWeights = 4;
#else
constexpr int kTileRows = 6, kTileWeights = 2;
#endif
// Where the 16-lane tiles exist: exact mode needs AVX-512F/DQ, fast mode's byte dots VNNI/BW.
#if defined(__AVX512F__) && defined(__AVX512DQ__) && defined(__FMA__)
#define KVSCOPE_PAIRED_LANES 1
#endif
#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__FMA__)
#define KVSCOPE_PAIRED_BYTE_DOTS 1
#endif
#if defined(KVSCOPE_PAIRED_LANES)
constexpr bool kPairedLanes = true;
constexpr int kPairedTileRows = 6, kPairedTileWeights = 8;
#else
constexpr bool kPairedLanes = false;
constexpr int kPairedTileRows = kTileRows, kPairedTileWeights = kTileWeights;
#endif
#if defined(KVSCOPE_PAIRED_BYTE_DOTS)
constexpr int kFastTileRows = 4, kFastTileWeights = 8;
#else
constexpr int kFastTileRows = kTileRows, kFastTileWeights = kTileWeights;
#endif
// Weight rows side by side when there is one input row (decode): see over_weight_tiles.
constexpr int kDecodeTileWeights = 4;

// Calls fn.template operator()<R>(r) for input rows [r, r + R) of [r0, r1): full tiles of
// kRows, then the one remainder size (1 .. kRows - 1) that is left.
template <int kRows, class Fn>
void over_row_tiles(int r0, int r1, Fn&& fn) {
    int r = r0;
    for (; r + kRows <= r1; r += kRows)
        fn.template operator()<kRows>(r);
    [&]<int... I>(std::integer_sequence<int, I...>) {
        ((r1 - r == I + 1 ? (fn.template operator()<I + 1>(r), 0) : 0), ...);
    }
    (std::make_integer_sequence<int, kRows - 1>{});
}

// Input rows per pass over a thread's weight rows: as many as keep their activations in about
// half of L2, so each weight tile, read once from memory, stays in L1 while every input row of
// the pass goes past it (the other order streamed the whole matrix from L3 once per row tile).
constexpr int64_t kActivationPassBytes = 512 * 1024;

// Calls tile.template operator()<R, W>(r, o) over every input row tile [r, r + R) and weight
// row tile [o, o + W) of [0, n_rows) x [begin, end), each output element exactly once (which
// tile computes it never changes its value: every tile sums in the same order).
// - Prefill: passes of input rows, in each pass weight tiles of kWeights (then one by one), in
//   each weight tile every row tile of the pass.
// - Decode (one input row): weight rows kDecodeTileWeights at a time when kDecodeTiles, else one
//   by one: fast mode's integer block dots ran decode fastest one weight row at a time (Q8_0,
//   one thread, Qwen2.5-0.5B's shape: 48 tokens/s, tiles of 4 rows 44), while exact mode's
//   single fp32 chain per row waits on its fused multiply-adds and gains from four independent
//   rows (F16 20 -> 28, with the next tile's rows prefetched: see register_tile).
template <int kRows, int kWeights, bool kDecodeTiles, class Fn>
void over_tiles(int n_rows, int64_t begin, int64_t end, int64_t activation_row_bytes, Fn&& tile) {
    if (n_rows == 1) {
        int64_t o = begin;
        if constexpr (kDecodeTiles)
            for (; o + kDecodeTileWeights <= end; o += kDecodeTileWeights)
                tile.template operator()<1, kDecodeTileWeights>(0, o);
        for (; o < end; ++o)
            tile.template operator()<1, 1>(0, o);
        return;
    }
    const int pass_rows = static_cast<int>(std::clamp<int64_t>(
        kActivationPassBytes / std::max<int64_t>(1, activation_row_bytes) / kRows * kRows, kRows,
        n_rows));
    for (int r0 = 0; r0 < n_rows; r0 += pass_rows) {
        const int r1 = std::min(n_rows, r0 + pass_rows);
        int64_t o = begin;
        for (; o + kWeights <= end; o += kWeights)
            over_row_tiles<kRows>(
                r0, r1, [&]<int R>(int r) { tile.template operator()<R, kWeights>(r, o); });
        for (; o < end; ++o)
            over_row_tiles<kRows>(r0, r1,
                                  [&]<int R>(int r) { tile.template operator()<R, 1>(r, o); });
    }
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
        if constexpr (W % 4 == 0) {
            for (int j = 0; j < W; j += 4)
                fold_lanes4(&acc[r][j], &sums[j]);
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
    return t == GgmlType::F32 || t == GgmlType::F16 || t == GgmlType::BF16 || t == GgmlType::Q8_0 ||
           t == GgmlType::Q4_0 || t == GgmlType::Q4_1;
}

// A format: kBlock values per group, kBytes bytes per group, a per-group scale (read once per
// group and row) and load(group, s, scale): values 8s .. 8s+7 of the group.
struct F32Format {
    static constexpr int kBlock = 8, kBytes = 32;
    struct Scale {};
    static Scale scale(const uint8_t*) { return {}; }
    static Lanes load(const uint8_t* g, int, Scale) {
        return load_lanes(reinterpret_cast<const float*>(g));
    }
};
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

#if defined(KVSCOPE_PAIRED_LANES)
// Two weight rows' values i .. i+7 in one 16-lane register (row j in lanes 0-7, row j+1 in
// 8-15), each multiplied by the same eight inputs: every row's lanes take exactly the values and
// the order of the 8-lane tile, so the bits are the same, at half the instructions.
template <class F>
inline __m512 load_pair(const uint8_t* g0, const uint8_t* g1, int s, typename F::Scale s0,
                        typename F::Scale s1) {
    if constexpr (std::is_same_v<F, F16Format>) {
        const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(g0));
        const __m128i hi = _mm_loadu_si128(reinterpret_cast<const __m128i*>(g1));
        return _mm512_cvtph_ps(_mm256_inserti128_si256(_mm256_zextsi128_si256(lo), hi, 1));
    } else {
        return _mm512_insertf32x8(_mm512_zextps256_ps512((__m256)F::load(g0, s, s0)),
                                  (__m256)F::load(g1, s, s1), 1);
    }
}
#endif

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
    constexpr bool kPairs = kPairedLanes && R > 1 && W % 2 == 0;
#if defined(KVSCOPE_PAIRED_LANES)
    constexpr int P = kPairs ? W / 2 : 1;
    __m512 pairs[R][P];
    for (int r = 0; r < R; ++r)
        for (int p = 0; p < P; ++p)
            pairs[r][p] = _mm512_setzero_ps();
#endif
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
            if constexpr (kPairs) {
#if defined(KVSCOPE_PAIRED_LANES)
                __m512 vw[P];
#pragma GCC unroll 8
                for (int p = 0; p < P; ++p)
                    vw[p] = load_pair<F>(wr[2 * p] + g * F::kBytes, wr[2 * p + 1] + g * F::kBytes,
                                         s, sc[2 * p], sc[2 * p + 1]);
                const int i = g * F::kBlock + 8 * s;
#pragma GCC unroll 8
                for (int r = 0; r < R; ++r) {
                    const __m512 vx = _mm512_broadcast_f32x8(_mm256_loadu_ps(xr[r] + i));
#pragma GCC unroll 8
                    for (int p = 0; p < P; ++p)
                        pairs[r][p] = _mm512_fmadd_ps(vw[p], vx, pairs[r][p]);
                }
#endif
            } else {
                Lanes vw[W];
#pragma GCC unroll 8
                for (int j = 0; j < W; ++j)
                    vw[j] = F::load(wr[j] + g * F::kBytes, s, sc[j]);
                multiply_step<R, W>(acc, vw, xr, g * F::kBlock + 8 * s);
            }
        }
    }
#if defined(KVSCOPE_PAIRED_LANES)
    if constexpr (kPairs)
        for (int r = 0; r < R; ++r)
            for (int p = 0; p < P; ++p) {
                acc[r][2 * p] = (Lanes)_mm512_castps512_ps256(pairs[r][p]);
                acc[r][2 * p + 1] = (Lanes)_mm512_extractf32x8_ps(pairs[r][p], 1);
            }
#endif
    // F32/F16/BF16 rows may end in fewer than 8 values: added one by one after the tree.
    const int tail = k - k8;
    float tails[W][8];
    const float* tail_w[W];
    for (int j = 0; j < W; ++j) {
        if (tail > 0)
            dequantize_to_f32(w.type, wr[j] + static_cast<int64_t>(k8) * (F::kBytes / F::kBlock),
                              tails[j], static_cast<size_t>(tail));
        tail_w[j] = tails[j];
    }
    write_tile<R, W>(acc, tail_w, xr, k, n_out, o, out);
}
template <int R, int W>
void typed_register_tile(const float* x, const Matrix& w, int64_t o, float* out) {
    switch (w.type) {
        case GgmlType::F32:
            return register_tile<F32Format, R, W>(x, w, o, out);
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
        const int64_t activation_row_bytes = static_cast<int64_t>(k) * 4;
        if (registers) {
            over_tiles<kPairedTileRows, kPairedTileWeights, true>(
                n_rows, begin, end, activation_row_bytes, [&]<int R, int W>(int r, int64_t o) {
                    typed_register_tile<R, W>(x + static_cast<int64_t>(r) * k, w, o,
                                              out + static_cast<int64_t>(r) * w.rows);
                });
            return;
        }
        alignas(64) float scratch[kTileWeights * kChunk];
        over_tiles<kTileRows, kTileWeights, false>(
            n_rows, begin, end, activation_row_bytes, [&]<int R, int W>(int r, int64_t o) {
                exact_tile<R, W>(x + static_cast<int64_t>(r) * k, rd, o,
                                 out + static_cast<int64_t>(r) * w.rows, scratch);
            });
    });
}

// ---------------------------------------------------------------------------------------------
// [SECTION] Fast
// ---------------------------------------------------------------------------------------------

// One 32-value block of an activation row as llama.cpp's Q8_0 holds it: d = max|x| / 127 kept
// as fp16 (here its fp32 value), codes round(x * 127 / max|x|), ties to even. Beside them, sums
// the integer dots start from, so that weight codes can enter the unsigned side of the byte
// multiply as stored (Q4_0 nibbles q + 8) or shifted (Q8_0 bytes + 128) with no fix-up per
// block: minus 8 times the block's code sum, and minus 128 times each group of four's. The dots
// are the same exact integers either way.
struct ActivationBlock {
    float d;
    int8_t q[32];
    int32_t minus8_sum;
    int32_t minus128_sums[8];  // Q8_0's 16-lane path
};

// The block's offset sums from its codes' sums by groups of four.
inline void set_offset_sums(ActivationBlock& b, const int32_t (&group_sums)[8]) {
    int32_t total = 0;
    for (int l = 0; l < 8; ++l) {
        b.minus128_sums[l] = -128 * group_sums[l];
        total += group_sums[l];
    }
    b.minus8_sum = -8 * total;
}

void quantize_activation_block(const float* v, ActivationBlock& out) {
#if defined(__AVX2__) && defined(__F16C__)
    // The same values as the scalar loop: max is exact in any order, the conversion to integers
    // rounds to nearest even as nearbyint does, F16C's conversion as f32_to_fp16.
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 x[4], m = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
        x[i] = _mm256_loadu_ps(v + 8 * i);
        m = _mm256_max_ps(_mm256_andnot_ps(sign, x[i]), m);
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    out.d = _cvtsh_ss(_cvtss_sh(amax / 127.0f, _MM_FROUND_TO_NEAREST_INT));
    __m256i q[4];
    for (int i = 0; i < 4; ++i)
        q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(x[i], _mm256_set1_ps(id)));
    // Packing works within 128-bit halves: the last permute puts the bytes back in order.
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
    const __m256i bytes =
        _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out.q),
                        _mm256_permutevar8x32_epi32(bytes, order));
    // Sums of four: two pairwise adds give groups [0 2 4 6 | 1 3 5 7].
    const __m256i fours =
        _mm256_hadd_epi32(_mm256_hadd_epi32(q[0], q[1]), _mm256_hadd_epi32(q[2], q[3]));
    int32_t group_sums[8];
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(group_sums),
                        _mm256_permutevar8x32_epi32(fours, order));
#else
    float amax = 0.0f;
    for (int i = 0; i < 32; ++i)
        amax = std::max(amax, std::fabs(v[i]));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    out.d = fp16_to_f32(f32_to_fp16(amax / 127.0f));
    for (int i = 0; i < 32; ++i)
        out.q[i] = static_cast<int8_t>(std::nearbyint(v[i] * id));
    int32_t group_sums[8];
    for (int l = 0; l < 8; ++l)
        group_sums[l] = out.q[4 * l] + out.q[4 * l + 1] + out.q[4 * l + 2] + out.q[4 * l + 3];
#endif
    set_offset_sums(out, group_sums);
}

bool fast_type(GgmlType t) {
    return t == GgmlType::Q8_0 || t == GgmlType::Q4_0;
}

// The block's four codes starting at q[i] as one int32 (for broadcasting to every lane).
inline int32_t four_codes(const int8_t* q) {
    int32_t v;
    std::memcpy(&v, q, 4);
    return v;
}

#if defined(__AVX2__)
#if defined(__AVXVNNI__) || (defined(__AVX512VNNI__) && defined(__AVX512VL__))
constexpr bool kByteDotAccumulates = true;
#else
constexpr bool kByteDotAccumulates = false;
#endif
// start + per int32 lane the four products of unsigned bytes u and signed bytes s. Without VNNI
// the byte multiply saturates pairs of products at int16; the callers' operands never reach it
// (|Q8_0 code| <= 128 or a nibble <= 15, times an activation code in -127..127).
inline __m256i byte_dot(__m256i start, __m256i u, __m256i s) {
    if constexpr (kByteDotAccumulates) return _mm256_dpbusd_epi32(start, u, s);
    return _mm256_add_epi32(start,
                            _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
}
#endif

// ---- Q8_0: a row's blocks in eight int32 lanes of four products, folded as llama.cpp folds.

// llama.cpp's final fold of its eight lanes (hsum_float_8).
inline float reduce_lanes_fast(Lanes a) {
    return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

constexpr int kQ8_0BlockBytes = 34;

#if defined(__AVX2__)
// Eight int32 lanes, lane l the sum of products 4l .. 4l+3 of a Q8_0 block's codes and the
// activation block's: |w| times x with w's sign.
inline __m256i q8_0_dot_lanes(const uint8_t* blk, const ActivationBlock& xb) {
    const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + 2));
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.q));
    return byte_dot(_mm256_setzero_si256(), _mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
}
#endif

#if defined(KVSCOPE_PAIRED_BYTE_DOTS)
// Two weight rows per 16-lane register: lanes 0-7 row j's, 8-15 row j+1's, the same exact
// integer lanes as the 8-lane path's (bytes + 128 on the unsigned side, the dot starting from
// the activations' offset sums: there is no 512-bit sign instruction), and each fp32 lane takes
// the same scaled sums in the same order, so the bits are those of the 8-lane tile.
template <int R, int W>
[[gnu::always_inline]] inline void q8_0_tile_pairs(const ActivationBlock* xq, int blocks,
                                                   const uint8_t* const (&wr)[W],
                                                   Lanes (&acc)[R][W]) {
    constexpr int P = W / 2;
    __m512 pairs[R][P];
    for (int r = 0; r < R; ++r)
        for (int p = 0; p < P; ++p)
            pairs[r][p] = _mm512_setzero_ps();
    for (int b = 0; b < blocks; ++b) {
        __m512i qw[P];
        __m512 dw[P];
#pragma GCC unroll 8
        for (int p = 0; p < P; ++p) {
            const uint8_t* blk0 = wr[2 * p] + b * kQ8_0BlockBytes;
            const uint8_t* blk1 = wr[2 * p + 1] + b * kQ8_0BlockBytes;
            const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk0 + 2));
            const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk1 + 2));
            qw[p] = _mm512_xor_si512(_mm512_inserti64x4(_mm512_zextsi256_si512(lo), hi, 1),
                                     _mm512_set1_epi8(-128));
            dw[p] = _mm512_insertf32x8(_mm512_zextps256_ps512(_mm256_set1_ps(half_at(blk0))),
                                       _mm256_set1_ps(half_at(blk1)), 1);
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            const ActivationBlock& xb = xq[static_cast<int64_t>(r) * blocks + b];
            const __m512i qx =
                _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.q)));
            const __m512i start = _mm512_broadcast_i64x4(
                _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.minus128_sums)));
            const __m512 dx = _mm512_set1_ps(xb.d);
#pragma GCC unroll 8
            for (int p = 0; p < P; ++p) {
                const __m512 sum = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(start, qw[p], qx));
                pairs[r][p] = _mm512_fmadd_ps(_mm512_mul_ps(dw[p], dx), sum, pairs[r][p]);
            }
        }
    }
    for (int r = 0; r < R; ++r)
        for (int p = 0; p < P; ++p) {
            acc[r][2 * p] = (Lanes)_mm512_castps512_ps256(pairs[r][p]);
            acc[r][2 * p + 1] = (Lanes)_mm512_extractf32x8_ps(pairs[r][p], 1);
        }
}
#endif

// The 8-lane tile's blocks: every weight row's codes against every input row's, one register
// per (input row, weight row).
template <int R, int W>
[[gnu::always_inline]] inline void q8_0_tile_lanes(const ActivationBlock* xq, int blocks,
                                                   const uint8_t* const (&wr)[W],
                                                   Lanes (&acc)[R][W]) {
    for (int b = 0; b < blocks; ++b) {
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            const ActivationBlock& xb = xq[static_cast<int64_t>(r) * blocks + b];
#pragma GCC unroll 8
            for (int j = 0; j < W; ++j) {
                const uint8_t* blk = wr[j] + b * kQ8_0BlockBytes;
                Lanes sum;
#if defined(__AVX2__)
                sum = (Lanes)_mm256_cvtepi32_ps(q8_0_dot_lanes(blk, xb));
#else
                for (int l = 0; l < 8; ++l) {
                    int32_t s = 0;
                    for (int i = 4 * l; i < 4 * l + 4; ++i)
                        s += static_cast<int8_t>(blk[2 + i]) * xb.q[i];
                    sum[l] = static_cast<float>(s);
                }
#endif
                const float d = half_at(blk) * xb.d;
                acc[r][j] = mul_add(acc[r][j], Lanes{d, d, d, d, d, d, d, d}, sum);
            }
        }
    }
}

template <int R, int W>
[[gnu::always_inline]] inline void q8_0_tile(const ActivationBlock* xq, int k, const Matrix& w,
                                             int64_t o, float* out) {
    const int blocks = k / 32;
    const int64_t n_out = w.rows;
    const uint8_t* wr[W];
    for (int j = 0; j < W; ++j)
        wr[j] = w.row(o + j);
    Lanes acc[R][W] = {};
#if defined(KVSCOPE_PAIRED_BYTE_DOTS)
    if constexpr (R > 1 && W % 2 == 0)
        q8_0_tile_pairs<R, W>(xq, blocks, wr, acc);
    else
#endif
        q8_0_tile_lanes<R, W>(xq, blocks, wr, acc);
    for (int r = 0; r < R; ++r)
        for (int j = 0; j < W; ++j)
            out[r * n_out + o + j] = reduce_lanes_fast(acc[r][j]);
}

void matmul_q8_0(ThreadPool& pool, const ActivationBlock* xq, int n_rows, const Matrix& w,
                 float* out) {
    const int k = w.cols, blocks = k / 32;
    const int64_t cost = static_cast<int64_t>(n_rows) * w.rows * w.cols / 4;
    pool.parallel_for(w.rows, cost, [&](int64_t begin, int64_t end) {
        over_tiles<kFastTileRows, kFastTileWeights, false>(
            n_rows, begin, end, static_cast<int64_t>(blocks) * sizeof(ActivationBlock),
            [&]<int R, int W>(int r, int64_t o) {
                q8_0_tile<R, W>(xq + static_cast<int64_t>(r) * blocks, k, w, o,
                                out + static_cast<int64_t>(r) * w.rows);
            });
    });
}

// ---- Q4_0, interleaved (q4_0_interleaved.h): one lane per weight row. Each block's 32 products
// sum in integers to the row's exact block dot, then acc = fma(dot, d_w * d_x, acc), block by
// block (as llama.cpp's repacked Q4_0 kernels), so there is nothing to fold at the end.

// Input rows per tile: R accumulators, eight code registers and two dots per row in flight.
constexpr int kInterleavedTileRows = 4;

template <int R>
[[gnu::always_inline]] inline void q4_0_interleaved_tile(const ActivationBlock* xq, int blocks,
                                                         const uint8_t* codes,
                                                         const uint8_t* scales,
                                                         float (&res)[R][kInterleavedRows]) {
#if defined(KVSCOPE_PAIRED_BYTE_DOTS) && defined(__F16C__)
    __m512 acc[R];
    for (int r = 0; r < R; ++r)
        acc[r] = _mm512_setzero_ps();
    const __m512i low = _mm512_set1_epi8(0x0f);
    for (int b = 0; b < blocks; ++b) {
        const uint8_t* c = codes + b * kInterleavedCodeBytes;
        __m512i w[8];
#pragma GCC unroll 4
        for (int m = 0; m < 4; ++m) {
            const __m512i raw = _mm512_load_si512(c + 64 * m);
            w[m] = _mm512_and_si512(raw, low);
            w[m + 4] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low);
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(scales + b * kInterleavedScaleBytes)));
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            const ActivationBlock& xb = xq[static_cast<int64_t>(r) * blocks + b];
            // Two chains of four, so a lone input row (decode) is not one long chain of latencies.
            __m512i even = _mm512_set1_epi32(xb.minus8_sum), odd = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int i = 0; i < 8; i += 2) {
                even = _mm512_dpbusd_epi32(even, w[i], _mm512_set1_epi32(four_codes(xb.q + 4 * i)));
                odd = _mm512_dpbusd_epi32(odd, w[i + 1],
                                          _mm512_set1_epi32(four_codes(xb.q + 4 * i + 4)));
            }
            const __m512 dot = _mm512_cvtepi32_ps(_mm512_add_epi32(even, odd));
            acc[r] = _mm512_fmadd_ps(dot, _mm512_mul_ps(dw, _mm512_set1_ps(xb.d)), acc[r]);
        }
    }
    for (int r = 0; r < R; ++r)
        _mm512_storeu_ps(res[r], acc[r]);
#elif defined(__AVX2__) && defined(__F16C__) && defined(__FMA__)
    // The same in two halves of eight rows (each run's 32 bytes of rows 0-7, then 8-15).
    __m256 acc[R][2];
    for (int r = 0; r < R; ++r)
        acc[r][0] = acc[r][1] = _mm256_setzero_ps();
    const __m256i low = _mm256_set1_epi8(0x0f);
    for (int b = 0; b < blocks; ++b) {
        const uint8_t* c = codes + b * kInterleavedCodeBytes;
        for (int h = 0; h < 2; ++h) {
            __m256i w[8];
            for (int m = 0; m < 4; ++m) {
                const __m256i raw =
                    _mm256_loadu_si256(reinterpret_cast<const __m256i*>(c + 64 * m + 32 * h));
                w[m] = _mm256_and_si256(raw, low);
                w[m + 4] = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low);
            }
            const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(
                reinterpret_cast<const __m128i*>(scales + b * kInterleavedScaleBytes + 16 * h)));
            for (int r = 0; r < R; ++r) {
                const ActivationBlock& xb = xq[static_cast<int64_t>(r) * blocks + b];
                __m256i dot = _mm256_set1_epi32(xb.minus8_sum);
                for (int i = 0; i < 8; ++i)  // nibbles: pairs of products stay inside int16
                    dot = byte_dot(dot, w[i], _mm256_set1_epi32(four_codes(xb.q + 4 * i)));
                acc[r][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot),
                                            _mm256_mul_ps(dw, _mm256_set1_ps(xb.d)), acc[r][h]);
            }
        }
    }
    for (int r = 0; r < R; ++r) {
        _mm256_storeu_ps(res[r], acc[r][0]);
        _mm256_storeu_ps(res[r] + 8, acc[r][1]);
    }
#else
    for (int r = 0; r < R; ++r)
        for (int l = 0; l < kInterleavedRows; ++l)
            res[r][l] = 0.0f;
    for (int b = 0; b < blocks; ++b) {
        const uint8_t* c = codes + b * kInterleavedCodeBytes;
        for (int l = 0; l < kInterleavedRows; ++l) {
            const float dw = half_at(scales + b * kInterleavedScaleBytes + 2 * l);
            for (int r = 0; r < R; ++r) {
                const ActivationBlock& xb = xq[static_cast<int64_t>(r) * blocks + b];
                int32_t dot = xb.minus8_sum;
                for (int m = 0; m < 4; ++m)
                    for (int j = 0; j < 4; ++j) {
                        const uint8_t byte = c[64 * m + 4 * l + j];
                        dot += (byte & 0x0f) * xb.q[4 * m + j] + (byte >> 4) * xb.q[16 + 4 * m + j];
                    }
                const float d = dw * xb.d;
#if defined(__FMA__)
                res[r][l] = std::fma(static_cast<float>(dot), d, res[r][l]);
#else
                res[r][l] = res[r][l] + static_cast<float>(dot) * d;
#endif
            }
        }
    }
#endif
}

void matmul_q4_0(ThreadPool& pool, const ActivationBlock* xq, int n_rows, const Matrix& w,
                 float* out) {
    // Multiplying a matrix nobody interleaved (a one-off call): interleave it for this call.
    std::unique_ptr<uint8_t, void (*)(uint8_t*)> scratch(
        nullptr, [](uint8_t* p) { ::operator delete (p, std::align_val_t{64}); });
    InterleavedQ4_0View v;
    if (w.interleaved) {
        v = interleaved_q4_0_view(w.interleaved, w.rows, w.cols);
    } else {
        scratch.reset(static_cast<uint8_t*>(::operator new (
            static_cast<size_t>(interleaved_q4_0_bytes(w.rows, w.cols)), std::align_val_t{64})));
        v = interleave_q4_0(w, scratch.get());
    }
    const int blocks = v.blocks;
    const int64_t cost = static_cast<int64_t>(n_rows) * w.rows * w.cols / 4;
    pool.parallel_for(v.groups, cost, [&](int64_t begin, int64_t end) {
        over_tiles<kInterleavedTileRows, 1, false>(
            n_rows, begin, end, static_cast<int64_t>(blocks) * sizeof(ActivationBlock),
            [&]<int R, int W>(int r, int64_t g) {
                float res[R][kInterleavedRows];
                q4_0_interleaved_tile<R>(xq + static_cast<int64_t>(r) * blocks, blocks,
                                         v.group_codes(g), v.group_scales(g), res);
                const int64_t o = g * kInterleavedRows;
                const size_t n =
                    static_cast<size_t>(std::min<int64_t>(kInterleavedRows, w.rows - o));
                for (int i = 0; i < R; ++i)
                    std::memcpy(out + (r + i) * static_cast<int64_t>(w.rows) + o, res[i],
                                n * sizeof(float));
            });
    });
}

void matmul_fast(ThreadPool& pool, const float* x, int n_rows, const Matrix& w, float* out) {
    const int k = w.cols, blocks = k / 32;
    // The caller's buffer (a lambda naming a thread_local would reach each worker's own).
    thread_local std::vector<ActivationBlock> buffer;
    buffer.resize(static_cast<size_t>(n_rows) * static_cast<size_t>(blocks));
    ActivationBlock* xq = buffer.data();
    pool.parallel_for(static_cast<int64_t>(n_rows) * blocks, static_cast<int64_t>(n_rows) * k,
                      [&](int64_t begin, int64_t end) {
                          for (int64_t b = begin; b < end; ++b)
                              quantize_activation_block(x + 32 * b, xq[b]);
                      });
    if (w.type == GgmlType::Q8_0)
        matmul_q8_0(pool, xq, n_rows, w, out);
    else
        matmul_q4_0(pool, xq, n_rows, w, out);
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
