#include <cmath>

#include "kernels/cuda_common.cuh"
#include "kernels/paged_attention.h"
#include "kernels/paged_attention_decode.cuh"
#include "kernels/paged_attention_split.cuh"

namespace kvscope::kernels {

namespace {
using detail::ceil_div;
using detail::cp_async16;
using detail::cp_async_commit;
using detail::cp_async_wait;
using detail::Elem;
using detail::kPer16;
using detail::load16;
using detail::load4;
using detail::sm_count;
using detail::warp_max;
using detail::warp_sum;

constexpr int kThreads = 128;
constexpr int kDecodeRows = 8;    // a query's whole group for the usual GQA groups (<= 8)
constexpr int kPrefillRows = 32;  // (query, head) rows sharing one pass over the keys
// Shared memory a block may take before the key tile shrinks: two blocks of 100 KiB fit an
// H100's SM (228 KiB), and an A100's (164 KiB) holds one.
constexpr size_t kSmemBudget = 100 * 1024;
// 16-byte chunks of a K (or V) tile per thread: tile * head_dim * elem <= kSmemBudget / 4 keeps
// tile * head_dim * elem / 16 / kThreads under 13 (the launcher checks it).
constexpr int kMaxChunksPerThread = 16;

struct Args {
    const float* q;
    float* out;
    const void* k;
    const void* v;
    int num_blocks, block_size, n_kv_heads, head_dim;
    const int32_t* table;
    int table_stride;
    const int32_t* q_start;  // null: row s is sequence s's one query
    const int32_t* kv_len;
    const int32_t* slot_pos;
    int slot_pos_stride;
    int n_heads, group;
    float scale_log2;  // scale * log2(e): scores are kept in base 2
    int tile;          // key slots per tile: 16, 32 or 64
    int heads_per_tile, head_tiles;
    int pv_lanes;  // threads across head_dim in P.V (4 dims each)
    int splits;
    detail::SplitWorkspace ws;  // splits > 1 (paged_attention_split.cuh)
    int num_q_rows;
};

// Dynamic shared memory of one block, in this order (every part 16-byte aligned):
//   K/V tiles [2 stages][K, V][tile][head_dim elements + 16 bytes of pad]
//   q  [rows][head_dim] f32, pre-scaled by scale * log2(e)
//   s  [rows][tile + 1] f32: scores, then probabilities
//   m, l, alpha [rows] f32; valid [2 stages][tile] int
__host__ __device__ inline size_t row_bytes(int head_dim, size_t elem) {
    return head_dim * elem + 16;
}
size_t smem_bytes(int rows, int tile, int head_dim, size_t elem) {
    return 4 * static_cast<size_t>(tile) * row_bytes(head_dim, elem) +
           static_cast<size_t>(rows) * head_dim * 4 + static_cast<size_t>(rows) * (tile + 1) * 4 +
           3 * static_cast<size_t>(rows) * 4 + 2 * static_cast<size_t>(tile) * 4;
}

template <class T, int ROWS>
__global__ void __launch_bounds__(kThreads) paged_attention_kernel(const Args a) {
    extern __shared__ __align__(16) unsigned char smem[];
    constexpr int E = kPer16<T>;  // elements per 16 bytes
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int hd = a.head_dim, tile = a.tile, bs = a.block_size;
    const int row_elems = static_cast<int>(row_bytes(hd, sizeof(T)) / sizeof(T));
    T* kv_s = reinterpret_cast<T*>(smem);
    float* q_s =
        reinterpret_cast<float*>(smem + 4 * static_cast<size_t>(tile) * row_elems * sizeof(T));
    float* s_s = q_s + ROWS * hd;
    const int s_stride = tile + 1;  // odd: P[r][t] of different rows fall in different banks
    float* m_s = s_s + ROWS * s_stride;
    float* l_s = m_s + ROWS;
    float* alpha_s = l_s + ROWS;
    int* valid_s = reinterpret_cast<int*>(alpha_s + ROWS);

    // Which rows and keys this block owns.
    const int seq = blockIdx.y;
    const int kvh = blockIdx.x / a.head_tiles;
    const int hq = a.heads_per_tile;
    const int head0 = kvh * a.group + (blockIdx.x % a.head_tiles) * hq;
    const int nh = min(hq, a.group - (blockIdx.x % a.head_tiles) * hq);  // heads in use
    const int q_per_tile = ROWS / hq;
    const int split = blockIdx.z % a.splits;
    const int qb = (blockIdx.z / a.splits) * q_per_tile;  // first query (of the sequence's)
    const int row0 = a.q_start ? a.q_start[seq] : seq;
    const int nq_seq = a.q_start ? a.q_start[seq + 1] - row0 : 1;
    if (qb >= nq_seq) return;
    const int nq = min(q_per_tile, nq_seq - qb);
    const int R = nq * hq;  // row r: query qb + r / hq, head head0 + r % hq (in use if < nh)
    const int kv_len = a.kv_len[seq];
    const int first_limit = kv_len - nq_seq + qb + 1;  // keys of query qb: slots < this
    int begin = 0, end = max(0, min(kv_len, first_limit + nq - 1));
    if (a.splits > 1) {
        const int per = ceil_div(ceil_div(end, a.splits), tile) * tile;
        begin = min(end, split * per);
        end = min(end, begin + per);
    }
    const int n_tiles = ceil_div(end - begin, tile);

    // Key tile `it` -> stage `stage`, asynchronously. Slots past `end`, in holes of the block
    // table and evicted from this lane are zero-filled and marked invalid.
    const int chunks_per_row = hd / E;
    const int32_t* table = a.table + static_cast<int64_t>(seq) * a.table_stride;
    const int32_t* pos =
        a.slot_pos
            ? a.slot_pos + (static_cast<int64_t>(seq) * a.n_kv_heads + kvh) * a.slot_pos_stride
            : nullptr;
    const int64_t slot_elems = static_cast<int64_t>(a.n_kv_heads) * hd;
    const T* kg = static_cast<const T*>(a.k);
    const T* vg = static_cast<const T*>(a.v);
    // Each thread's chunks are looked up first and copied after, so that the table (and lane)
    // reads of a tile are in flight together: interleaved with the copies they were one
    // dependent global load after another, the tile's latency times eight.
    const int chunks = tile * chunks_per_row;  // at most kMaxChunksPerThread * kThreads
    auto load_tile = [&](int it, int stage) {
        const int t0 = begin + it * tile;
        T* ks = kv_s + static_cast<size_t>(stage) * 2 * tile * row_elems;
        T* vs = ks + static_cast<size_t>(tile) * row_elems;
        int64_t off[kMaxChunksPerThread];
        bool ok[kMaxChunksPerThread];
#pragma unroll
        for (int j = 0; j < kMaxChunksPerThread; ++j) {
            const int c = tid + j * kThreads;
            const int slot = t0 + c / chunks_per_row;
            int block = -1;
            if (c < chunks && slot < end && slot / bs < a.table_stride) block = table[slot / bs];
            const bool held = !pos || slot >= a.slot_pos_stride || pos[slot] >= 0;
            ok[j] = block >= 0 && block < a.num_blocks && held;
            off[j] = ok[j] ? (static_cast<int64_t>(block) * bs + slot % bs) * slot_elems +
                                 static_cast<int64_t>(kvh) * hd + (c % chunks_per_row) * E
                           : 0;
        }
#pragma unroll
        for (int j = 0; j < kMaxChunksPerThread; ++j) {
            const int c = tid + j * kThreads;
            if (c >= chunks) break;
            const int tt = c / chunks_per_row, part = c % chunks_per_row;
            cp_async16(ks + tt * row_elems + part * E, kg + off[j], ok[j]);
            cp_async16(vs + tt * row_elems + part * E, vg + off[j], ok[j]);
            if (part == 0) valid_s[stage * tile + tt] = ok[j];
        }
        cp_async_commit();
    };
    if (n_tiles > 0) load_tile(0, 0);  // in flight while the queries load

    for (int i = tid; i < ROWS * hd; i += kThreads) {
        const int r = i / hd, d = i % hd;
        float x = 0.0f;
        if (r < R && r % hq < nh)
            x = a.q[(static_cast<int64_t>(row0 + qb + r / hq) * a.n_heads + head0 + r % hq) * hd +
                    d] *
                a.scale_log2;
        q_s[i] = x;
    }
    if (tid < ROWS) {
        m_s[tid] = -INFINITY;
        l_s[tid] = 0.0f;
    }
    __syncthreads();

    // P.V: thread (c, rg) owns dims [4c, 4c + 4) and [4(c + L), ...) of rows rg, rg + nrg...
    const int L = a.pv_lanes, nrg = kThreads / L, c = tid % L, rg = tid / L;
    const bool two_passes = 4 * L < hd;
    float o[2][ROWS / 4][4];
#pragma unroll
    for (int pass = 0; pass < 2; ++pass)
#pragma unroll
        for (int j = 0; j < ROWS / 4; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e)
                o[pass][j][e] = 0.0f;

    // Scores: thread (t, rgs) owns key t of the tile for rows rgs, rgs + tg...
    const int t_own = tid % tile, rgs = tid / tile, tg = kThreads / tile;

    for (int it = 0; it < n_tiles; ++it) {
        const int stage = it & 1;
        if (it + 1 < n_tiles) {
            load_tile(it + 1, stage ^ 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const T* ks = kv_s + static_cast<size_t>(stage) * 2 * tile * row_elems;
        const T* vs = ks + static_cast<size_t>(tile) * row_elems;
        const int t0 = begin + it * tile;

        {  // S = Q K^T (base 2), masked
            float acc[ROWS / 2];
#pragma unroll
            for (int j = 0; j < ROWS / 2; ++j)
                acc[j] = 0.0f;
            const T* kr = ks + t_own * row_elems;
            for (int d = 0; d < hd; d += E) {
                float kf[E];
                load16(kr + d, kf);
#pragma unroll
                for (int j = 0; j < ROWS / 2; ++j) {
                    const int r = rgs + j * tg;
                    if (r < R) {
                        const float* qr = q_s + r * hd + d;
#pragma unroll
                        for (int e = 0; e < E; e += 4) {
                            const float4 qv = *reinterpret_cast<const float4*>(qr + e);
                            acc[j] += qv.x * kf[e] + qv.y * kf[e + 1] + qv.z * kf[e + 2] +
                                      qv.w * kf[e + 3];
                        }
                    }
                }
            }
            const bool tv = valid_s[stage * tile + t_own] != 0;
            const int slot = t0 + t_own;
#pragma unroll
            for (int j = 0; j < ROWS / 2; ++j) {
                const int r = rgs + j * tg;
                if (r < R) {
                    const bool seen = tv && slot < first_limit + r / hq;  // causal by slot
                    s_s[r * s_stride + t_own] = seen ? acc[j] : -INFINITY;
                }
            }
        }
        __syncthreads();

        // Online softmax, a warp per row.
        for (int r = warp; r < R; r += kThreads / 32) {
            float* sr = s_s + r * s_stride;
            const float v0 = lane < tile ? sr[lane] : -INFINITY;
            const float v1 = lane + 32 < tile ? sr[lane + 32] : -INFINITY;
            const float m_old = m_s[r];
            const float m_new = fmaxf(m_old, warp_max(fmaxf(v0, v1)));
            float p0 = 0.0f, p1 = 0.0f, alpha = 1.0f;
            if (m_new != -INFINITY) {  // else nothing seen yet: no output to rescale
                alpha = exp2f(m_old - m_new);
                p0 = exp2f(v0 - m_new);
                p1 = exp2f(v1 - m_new);
            }
            const float sum = warp_sum(p0 + p1);
            __syncwarp();  // every lane has read m_s[r] before lane 0 writes it (racecheck)
            if (lane < tile) sr[lane] = p0;
            if (lane + 32 < tile) sr[lane + 32] = p1;
            if (lane == 0) {
                m_s[r] = m_new;
                l_s[r] = l_s[r] * alpha + sum;
                alpha_s[r] = alpha;
            }
        }
        __syncthreads();

        // O = O * alpha + P V
#pragma unroll
        for (int j = 0; j < ROWS / 4; ++j) {
            const int r = rg + j * nrg;
            if (r < R) {
                const float al = alpha_s[r];
#pragma unroll
                for (int pass = 0; pass < 2; ++pass)
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        o[pass][j][e] *= al;
            }
        }
        const int d0 = 4 * c, d1 = 4 * (c + L);
        const int t_end = min(tile, end - t0);  // slots past `end` have p = 0
        for (int t = 0; t < t_end; ++t) {
            const T* vr = vs + t * row_elems;
            float v0[4] = {0, 0, 0, 0}, v1[4] = {0, 0, 0, 0};
            if (d0 < hd) load4(vr + d0, v0);
            if (two_passes && d1 < hd) load4(vr + d1, v1);
#pragma unroll
            for (int j = 0; j < ROWS / 4; ++j) {
                const int r = rg + j * nrg;
                if (r < R) {
                    const float p = s_s[r * s_stride + t];
#pragma unroll
                    for (int e = 0; e < 4; ++e)
                        o[0][j][e] += p * v0[e];
                    if (two_passes)
#pragma unroll
                        for (int e = 0; e < 4; ++e)
                            o[1][j][e] += p * v1[e];
                }
            }
        }
        __syncthreads();  // the next iteration's copy reuses this stage
    }

    // Out: normalized by the row's sum (zeros when it saw nothing); with splits, the partial
    // output and the row's (max, sum) for the merge.
#pragma unroll
    for (int j = 0; j < ROWS / 4; ++j) {
        const int r = rg + j * nrg;
        if (r >= R || r % hq >= nh) continue;
        const int64_t row_head =
            static_cast<int64_t>(row0 + qb + r / hq) * a.n_heads + head0 + r % hq;
        const float l = l_s[r];
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        float* dst =
            a.splits > 1
                ? a.ws.out +
                      (static_cast<int64_t>(split) * a.num_q_rows * a.n_heads + row_head) * hd
                : a.out + row_head * hd;
#pragma unroll
        for (int pass = 0; pass < 2; ++pass) {
            const int d = 4 * (c + pass * L);
            if (d < hd && (pass == 0 || two_passes))
                *reinterpret_cast<float4*>(dst + d) =
                    make_float4(o[pass][j][0] * inv, o[pass][j][1] * inv, o[pass][j][2] * inv,
                                o[pass][j][3] * inv);
        }
    }
    if (a.splits > 1 && tid < R && tid % hq < nh) {
        const int64_t row_head =
            static_cast<int64_t>(row0 + qb + tid / hq) * a.n_heads + head0 + tid % hq;
        float* ml =
            a.ws.ml + (static_cast<int64_t>(split) * a.num_q_rows * a.n_heads + row_head) * 2;
        ml[0] = m_s[tid];
        ml[1] = l_s[tid];
    }
}

int heads_per_tile(int group, int rows) {
    return group < rows ? group : rows;
}

template <DType D, int ROWS>
cudaError_t launch(const PagedAttentionParams& p, bool prefill, int splits, cudaStream_t stream) {
    using T = typename Elem<D>::type;
    const int hd = p.cache.head_dim;
    Args a{};
    a.q = p.q;
    a.out = p.out;
    a.k = p.cache.k;
    a.v = p.cache.v;
    a.num_blocks = p.cache.num_blocks;
    a.block_size = p.cache.block_size;
    a.n_kv_heads = p.cache.n_kv_heads;
    a.head_dim = hd;
    a.table = p.tables.table;
    a.table_stride = p.tables.stride;
    a.q_start = prefill ? p.q_start : nullptr;
    a.kv_len = p.kv_len;
    a.slot_pos = p.slot_pos;
    a.slot_pos_stride = p.slot_pos_stride;
    a.n_heads = p.n_heads;
    a.group = p.n_heads / p.cache.n_kv_heads;
    a.scale_log2 = detail::scale_log2(p);
    a.tile = 64;
    const int chunks_per_row = hd * static_cast<int>(sizeof(T)) / 16;
    while (a.tile > 16 && (smem_bytes(ROWS, a.tile, hd, sizeof(T)) > kSmemBudget ||
                           a.tile * chunks_per_row > kMaxChunksPerThread * kThreads))
        a.tile /= 2;
    if (a.tile * chunks_per_row > kMaxChunksPerThread * kThreads) return cudaErrorInvalidValue;
    a.heads_per_tile = heads_per_tile(a.group, ROWS);
    a.head_tiles = ceil_div(a.group, a.heads_per_tile);
    a.pv_lanes = 32;
    while (a.pv_lanes > 1 && 4 * a.pv_lanes > hd)
        a.pv_lanes /= 2;
    a.splits = splits;
    a.num_q_rows = p.num_seqs;  // decode: one row per sequence (prefill never splits)
    if (splits > 1) a.ws = detail::split_workspace(p.workspace, splits, p.num_seqs, p.n_heads, hd);
    const int q_tiles =
        prefill ? ceil_div(p.max_q_len > 0 ? p.max_q_len : 1, ROWS / a.heads_per_tile) : 1;
    const int64_t z = static_cast<int64_t>(q_tiles) * splits;
    if (p.num_seqs > 65535 || z > 65535) return cudaErrorInvalidValue;
    const dim3 grid(static_cast<unsigned>(p.cache.n_kv_heads * a.head_tiles),
                    static_cast<unsigned>(p.num_seqs), static_cast<unsigned>(z));
    const size_t smem = smem_bytes(ROWS, a.tile, hd, sizeof(T));
    // Raised once per instantiation to the budget (a call per launch costs host time each
    // step); every tile choice above stays within it.
    static const cudaError_t raised = cudaFuncSetAttribute(
        paged_attention_kernel<T, ROWS>, cudaFuncAttributeMaxDynamicSharedMemorySize,
        static_cast<int>(kSmemBudget));
    if (smem > 48 * 1024 && raised != cudaSuccess) return raised;
    paged_attention_kernel<T, ROWS><<<grid, kThreads, smem, stream>>>(a);
    if (cudaError_t e = cudaGetLastError(); e != cudaSuccess) return e;
    if (splits > 1)
        return detail::merge_attention_splits(p.out, a.ws, splits, p.num_seqs, p.n_heads, hd,
                                              stream);
    return cudaSuccess;
}

bool valid_params(const PagedAttentionParams& p) {
    const PagedKvCache& c = p.cache;
    if (!p.q || !p.out || !c.k || !c.v || !p.tables.table || !p.kv_len) return false;
    if (p.num_seqs < 0 || p.n_heads <= 0 || c.n_kv_heads <= 0 || p.n_heads % c.n_kv_heads != 0)
        return false;
    if (c.block_size <= 0 || c.num_blocks <= 0 || p.tables.stride <= 0) return false;
    if (p.slot_pos && p.slot_pos_stride <= 0) return false;
    const int per16 = static_cast<int>(16 / dtype_bytes(c.dtype));
    return c.head_dim > 0 && c.head_dim <= 256 && c.head_dim % per16 == 0;
}

template <int ROWS>
cudaError_t dispatch(const PagedAttentionParams& p, bool prefill, int splits, cudaStream_t stream) {
    switch (p.cache.dtype) {
        case DType::kF32:
            return launch<DType::kF32, ROWS>(p, prefill, splits, stream);
        case DType::kF16:
            return launch<DType::kF16, ROWS>(p, prefill, splits, stream);
        case DType::kBF16:
            return launch<DType::kBF16, ROWS>(p, prefill, splits, stream);
    }
    return cudaErrorInvalidValue;
}
}  // namespace

int paged_attention_splits(const PagedAttentionParams& p) {
    if (p.q_start) return 1;
    if (p.num_splits > 0) return p.num_splits;
    if (p.cache.n_kv_heads <= 0 || p.num_seqs <= 0) return 1;
    if (detail::warp_decode_applies(p)) return detail::warp_decode_splits(p);
    const int group = p.n_heads / p.cache.n_kv_heads;
    const int blocks =
        p.num_seqs * p.cache.n_kv_heads * ceil_div(group, heads_per_tile(group, kDecodeRows));
    const int want = ceil_div(2 * sm_count(), blocks);
    const int by_length = p.max_kv_len / 256;
    int splits = want < by_length ? want : by_length;
    if (splits > 128) splits = 128;
    return splits > 1 ? splits : 1;
}

size_t paged_attention_workspace_bytes(const PagedAttentionParams& p) {
    const int splits = paged_attention_splits(p);
    if (splits <= 1) return 0;
    return static_cast<size_t>(splits) * p.num_seqs * p.n_heads * (p.cache.head_dim + 2) *
           sizeof(float);
}

cudaError_t paged_attention_decode(const PagedAttentionParams& params, cudaStream_t stream) {
    PagedAttentionParams p = params;
    p.q_start = nullptr;
    if (!valid_params(p)) return cudaErrorInvalidValue;
    if (p.num_seqs == 0) return cudaSuccess;
    const int splits = paged_attention_splits(p);
    if (splits > 1 && (!p.workspace || p.workspace_bytes < paged_attention_workspace_bytes(p)))
        return cudaErrorInvalidValue;
    if (detail::warp_decode_applies(p)) return detail::warp_decode(p, splits, stream);
    return dispatch<kDecodeRows>(p, false, splits, stream);
}

cudaError_t paged_attention_prefill(const PagedAttentionParams& p, cudaStream_t stream) {
    if (!valid_params(p) || !p.q_start) return cudaErrorInvalidValue;
    if (p.num_seqs == 0) return cudaSuccess;
    return dispatch<kPrefillRows>(p, true, 1, stream);
}

namespace detail {
namespace {
// out = the splits' partial outputs weighted by l_s * 2^(m_s - max m). One block per (head, row).
__global__ void merge_splits_kernel(float* out, const float* ws_out, const float* ws_ml, int splits,
                                    int num_rows, int n_heads, int head_dim) {
    const int64_t row_head = static_cast<int64_t>(blockIdx.y) * n_heads + blockIdx.x;
    const int64_t split_stride = static_cast<int64_t>(num_rows) * n_heads;
    float m_max = -INFINITY;
    for (int s = 0; s < splits; ++s) {
        const float* ml = ws_ml + (s * split_stride + row_head) * 2;
        if (ml[1] > 0.0f) m_max = fmaxf(m_max, ml[0]);
    }
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float acc = 0.0f, total = 0.0f;
        for (int s = 0; s < splits; ++s) {
            const float* ml = ws_ml + (s * split_stride + row_head) * 2;
            if (!(ml[1] > 0.0f)) continue;
            const float w = ml[1] * exp2f(ml[0] - m_max);
            acc += w * ws_out[(s * split_stride + row_head) * head_dim + d];
            total += w;
        }
        out[row_head * head_dim + d] = total > 0.0f ? acc / total : 0.0f;
    }
}

}  // namespace

cudaError_t merge_attention_splits(float* out, SplitWorkspace ws, int splits, int num_rows,
                                   int n_heads, int head_dim, cudaStream_t stream) {
    const int threads = head_dim >= 128 ? 128 : ((head_dim + 31) / 32) * 32;
    merge_splits_kernel<<<dim3(static_cast<unsigned>(n_heads), static_cast<unsigned>(num_rows)),
                          threads, 0, stream>>>(out, ws.out, ws.ml, splits, num_rows, n_heads,
                                                head_dim);
    return cudaGetLastError();
}

int sm_count() {
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess) return 1;
    // Asked once per device: the launchers size their grids by it at every call.
    static int known[64] = {};
    if (device < 0 || device >= 64) return 1;
    if (known[device] == 0) {
        int sms = 0;
        if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
            sms <= 0)
            return 1;
        known[device] = sms;
    }
    return known[device];
}
}  // namespace detail

}  // namespace kvscope::kernels
