// [SECTION] Exact: weights converted to fp32 a chunk at a time, summed in dot()'s order
// [SECTION] Fast: 8-bit activations, integer block dot products (Q8_0, Q4_0, Q4_1)
// [SECTION] Entry point
#include "engine/cpu_matmul.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

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

// Runs tile<R>(rows [r, r + R)) over the input rows: full tiles of kTileRows, then the rest.
template <template <int> class Tile, class... Args>
void over_row_tiles(int n_rows, Args&&... args) {
    int r = 0;
    for (; r + kTileRows <= n_rows; r += kTileRows)
        Tile<kTileRows>::run(r, args...);
    [&]<int... I>(std::integer_sequence<int, I...>) {
        // Exactly one remainder size (1 .. kTileRows - 1) matches.
        ((n_rows - r == I + 1 ? (Tile<I + 1>::run(r, args...), 0) : 0), ...);
    }
    (std::make_integer_sequence<int, kTileRows - 1>{});
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
#pragma GCC unroll 8
            for (int r = 0; r < R; ++r) {
                Lanes vx = load_lanes(xr[r] + i);
#pragma GCC unroll 8
                for (int j = 0; j < W; ++j)
                    acc[r][j] = mul_add(acc[r][j], vw[j], vx);
            }
        }
        if (c1 == k) break;  // c0 stays at the last chunk, which holds the tail
    }
    const int tail = k - k8;
    for (int r = 0; r < R; ++r) {
        float sums[W];
        if constexpr (W == 4) {
            const float* const none[4] = {};
            reduce_lanes4(acc[r], none, none, k, k, sums);
        } else {
            for (int j = 0; j < W; ++j)
                sums[j] = reduce_lanes(acc[r][j], nullptr, nullptr, k, k);
        }
        for (int j = 0; j < W; ++j)
            out[r * n_out + o + j] = add_tail(sums[j], wr[j] + (k8 - c0), xr[r] + k8, 0, tail);
    }
}

template <int R>
struct ExactRows {
    // Input rows [r, r + R) against weight rows [begin, end): tiles of kTileWeights, then one by
    // one (a 1-wide tile is dot() itself).
    static void run(int r, const float* x, const WeightReader& rd, int64_t begin, int64_t end,
                    float* out, float* scratch) {
        const int k = rd.w.cols;
        const float* xs = x + static_cast<int64_t>(r) * k;
        float* os = out + static_cast<int64_t>(r) * rd.w.rows;
        int64_t o = begin;
        for (; o + kTileWeights <= end; o += kTileWeights)
            exact_tile<R, kTileWeights>(xs, rd, o, os, scratch);
        for (; o < end; ++o)
            exact_tile<R, 1>(xs, rd, o, os, scratch);
    }
};

void matmul_exact(ThreadPool& pool, const float* x, int n_rows, const Matrix& w, float* out) {
    const WeightReader rd(w);
    const int64_t cost = static_cast<int64_t>(n_rows) * w.rows * w.cols;
    pool.parallel_for(w.rows, cost, [&](int64_t begin, int64_t end) {
        alignas(64) float scratch[kTileWeights * kChunk];
        over_row_tiles<ExactRows>(n_rows, x, rd, begin, end, out, scratch);
    });
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// [SECTION] Entry point
// ---------------------------------------------------------------------------------------------

void matmul(ThreadPool& pool, const float* x, int n_rows, const Matrix& w, float* out,
            MatmulMode mode) {
    (void)mode;
    matmul_exact(pool, x, n_rows, w, out);
}

}  // namespace kvscope
