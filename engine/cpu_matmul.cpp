// [SECTION] Exact: weights converted to fp32 a chunk at a time, summed in dot()'s order
// [SECTION] Fast: 8-bit activations, integer block dot products (Q8_0, Q4_0)
// [SECTION] Entry point
#include "engine/cpu_matmul.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "engine/cpu_ops.h"
#include "engine/thread_pool.h"

// GCC 12 reports its own AVX-512 intrinsics (which start from a deliberately undefined register)
// as maybe-uninitialized wherever they are inlined.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
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
// as fp16 (here its fp32 value), codes round(x * 127 / max|x|), ties to even. Beside it, for
// each group of four codes, minus their sum times 8: Q4_0's integer block dot starts from these,
// so its stored nibbles (q + 8) enter the unsigned side of the byte multiply with no sign fix-up
// per block. The lanes are the same exact integers either way.
struct ActivationBlock {
    float d;
    int8_t q[32];
    int32_t minus8_sums[8];
    int32_t minus128_sums[8];  // the same for Q8_0 bytes + 128 (the 16-lane path)
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
            out[b].minus128_sums[l] = -128 * sum;
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
    __m256i start, unsigned_w, signed_x;
    if constexpr (kOffsetCodes<T>) {
        start = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.minus8_sums));
        unsigned_w = w;
        signed_x = x;
    } else {  // |w| times x with w's sign
        start = _mm256_setzero_si256();
        unsigned_w = _mm256_sign_epi8(w, w);
        signed_x = _mm256_sign_epi8(x, w);
    }
    if constexpr (kByteDotAccumulates) return _mm256_dpbusd_epi32(start, unsigned_w, signed_x);
    return _mm256_add_epi32(
        start, _mm256_madd_epi16(_mm256_maddubs_epi16(unsigned_w, signed_x), _mm256_set1_epi16(1)));
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

#if defined(KVSCOPE_PAIRED_BYTE_DOTS)
// Two weight rows per 16-lane register: lanes 0-7 row j's, 8-15 row j+1's. The integer lanes
// are the same exact sums as the 8-lane path's (weights enter the unsigned side as stored Q4_0
// nibbles or Q8_0 bytes + 128, the dot starting from the activations' offset sums: there is no
// 512-bit sign instruction), and each fp32 lane takes the same scaled sums in the same order, so
// the bits are those of the 8-lane tile.
template <GgmlType T>
inline __m512i weight_code_pair(const uint8_t* blk0, const uint8_t* blk1) {
    if constexpr (T == GgmlType::Q8_0) {
        const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk0 + 2));
        const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk1 + 2));
        return _mm512_xor_si512(_mm512_inserti64x4(_mm512_zextsi256_si512(lo), hi, 1),
                                _mm512_set1_epi8(-128));
    } else {
        // [codes j | codes j+1] -> nibbles [low j, low j+1, high j, high j+1] -> 128-bit lanes
        // reordered to [low j, high j, low j+1, high j+1].
        const __m256i both = _mm256_inserti128_si256(
            _mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk0 + 2))),
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk1 + 2)), 1);
        const __m512i split = _mm512_and_si512(
            _mm512_inserti64x4(_mm512_zextsi256_si512(both), _mm256_srli_epi16(both, 4), 1),
            _mm512_set1_epi8(0x0f));
        return _mm512_shuffle_i64x2(split, split, _MM_SHUFFLE(3, 1, 2, 0));
    }
}

template <GgmlType T, int R, int W>
[[gnu::always_inline]] inline void fast_tile_pairs(const ActivationBlock* xq, int blocks,
                                                   const uint8_t* const (&wr)[W],
                                                   Lanes (&acc)[R][W]) {
    constexpr int kBytes = T == GgmlType::Q8_0 ? 34 : 18;
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
            const uint8_t* blk0 = wr[2 * p] + b * kBytes;
            const uint8_t* blk1 = wr[2 * p + 1] + b * kBytes;
            qw[p] = weight_code_pair<T>(blk0, blk1);
            dw[p] = _mm512_insertf32x8(_mm512_zextps256_ps512(_mm256_set1_ps(half_at(blk0))),
                                       _mm256_set1_ps(half_at(blk1)), 1);
        }
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            const ActivationBlock& xb = xq[static_cast<int64_t>(r) * blocks + b];
            const __m512i qx =
                _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.q)));
            const __m512i start =
                _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(
                    T == GgmlType::Q8_0 ? xb.minus128_sums : xb.minus8_sums)));
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
template <GgmlType T, int R, int W>
[[gnu::always_inline]] inline void fast_tile_lanes(const ActivationBlock* xq, int blocks,
                                                   const uint8_t* const (&wr)[W],
                                                   Lanes (&acc)[R][W]) {
    constexpr int kBytes = T == GgmlType::Q8_0 ? 34 : 18;
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
}

template <GgmlType T, int R, int W>
[[gnu::always_inline]] inline void fast_tile(const ActivationBlock* xq, int k, const Matrix& w,
                                             int64_t o, float* out) {
    const int blocks = k / 32;
    const int64_t n_out = w.rows;
    const uint8_t* wr[W];
    for (int j = 0; j < W; ++j)
        wr[j] = w.row(o + j);
    Lanes acc[R][W] = {};
#if defined(KVSCOPE_PAIRED_BYTE_DOTS)
    constexpr bool kPairs = R > 1 && W % 2 == 0;
#else
    constexpr bool kPairs = false;
#endif
    if constexpr (kPairs) {
#if defined(KVSCOPE_PAIRED_BYTE_DOTS)
        fast_tile_pairs<T, R, W>(xq, blocks, wr, acc);
#endif
    } else {
        fast_tile_lanes<T, R, W>(xq, blocks, wr, acc);
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
        over_tiles<kFastTileRows, kFastTileWeights, false>(
            n_rows, begin, end, static_cast<int64_t>(blocks) * sizeof(ActivationBlock),
            [&]<int R, int W>(int r, int64_t o) {
                const ActivationBlock* xs = xq + static_cast<int64_t>(r) * blocks;
                float* os = out + static_cast<int64_t>(r) * w.rows;
                if (w.type == GgmlType::Q8_0)
                    fast_tile<GgmlType::Q8_0, R, W>(xs, k, w, o, os);
                else
                    fast_tile<GgmlType::Q4_0, R, W>(xs, k, w, o, os);
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
