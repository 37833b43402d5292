#include <cmath>

#include "kernels/cuda_common.cuh"
#include "kernels/paged_attention_decode.cuh"
#include "kernels/paged_attention_split.cuh"

namespace kvscope::kernels::detail {

namespace {
constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
// Blocks of 128 threads one SM holds at once at the kernel's register count (about 150): the
// splits aim at one full wave of them.
constexpr int kBlocksPerSm = 3;
// Fewest slots a split takes: below it the block's fixed work (queries in, the warps' merge,
// the split's partial out) outweighs its keys.
constexpr int kMinSplitSlots = 128;

struct DecodeArgs {
    const float* q;
    float* out;
    const void* k;
    const void* v;
    int num_blocks, bs_shift, n_kv_heads;
    const int32_t* table;
    int table_stride;
    const int32_t* kv_len;
    const int32_t* slot_pos;
    int slot_pos_stride;
    int n_heads, group, head_tiles;
    float scale_log2;  // scale * log2(e): scores are kept in base 2
    int splits;
    SplitWorkspace ws;
    int num_rows;
};

// Chunks of 16 bytes in a key's head_dim elements of a 16-bit cache; 0 when not 8, 16 or 32, or
// when the cache is f32 (rare on a GPU: the tiled kernel serves it).
int chunks_per_key(const PagedAttentionParams& p) {
    if (p.cache.dtype == DType::kF32) return 0;
    const int c = p.cache.head_dim * static_cast<int>(dtype_bytes(p.cache.dtype)) / 16;
    return c == 8 || c == 16 || c == 32 ? c : 0;
}
// 1, 4 or 8 heads per block: a group of 2 or 3 pays for idle heads' arithmetic (the kernel waits
// on memory) rather than for more instantiations in every binary that links the kernels.
int heads_per_block(const PagedAttentionParams& p) {
    const int group = p.n_heads / p.cache.n_kv_heads;
    return group == 1 ? 1 : group <= 4 ? 4 : 8;
}
// Keys per warp row (32 / C) times rows per step (U).
__host__ __device__ constexpr int rows_per_step(int g, int elems) {
    return g * elems >= 64 ? 2 : 4;
}

template <class T, int C, int G>
__global__ void __launch_bounds__(kThreads, kBlocksPerSm) warp_decode_kernel(const DecodeArgs a) {
    constexpr int E = kPer16<T>;  // elements per 16 bytes
    constexpr int HD = C * E;
    constexpr int KPW = 32 / C;  // keys a warp reads at once
    constexpr int U = rows_per_step(G, E);
    constexpr int STEP = U * KPW;  // keys of one warp step
    __shared__ float o_s[kWarps][G][HD];
    __shared__ float m_s[kWarps][G], l_s[kWarps][G];

    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int key_sub = lane / C, part = lane % C;
    const int seq = blockIdx.y;
    const int kvh = blockIdx.x / a.head_tiles, head_tile = blockIdx.x % a.head_tiles;
    const int head0 = kvh * a.group + head_tile * G;
    const int nh = min(G, a.group - head_tile * G);
    const int split = blockIdx.z;
    const int kv_len = a.kv_len[seq];
    int begin = 0, end = kv_len;
    if (a.splits > 1) {
        const int per = ceil_div(ceil_div(kv_len, a.splits), kWarps * STEP) * kWarps * STEP;
        begin = min(kv_len, split * per);
        end = min(kv_len, begin + per);
    }

    // This lane's chunk of every query head of the tile, pre-scaled to base 2.
    float qf[G][E];
#pragma unroll
    for (int g = 0; g < G; ++g) {
        const float* qr = a.q + (static_cast<int64_t>(seq) * a.n_heads + head0 + g) * HD + part * E;
#pragma unroll
        for (int e = 0; e < E; e += 4) {
            const float4 v = g < nh ? *reinterpret_cast<const float4*>(qr + e) : float4{};
            qf[g][e] = v.x * a.scale_log2;
            qf[g][e + 1] = v.y * a.scale_log2;
            qf[g][e + 2] = v.z * a.scale_log2;
            qf[g][e + 3] = v.w * a.scale_log2;
        }
    }

    const int32_t* table = a.table + static_cast<int64_t>(seq) * a.table_stride;
    const int32_t* pos =
        a.slot_pos
            ? a.slot_pos + (static_cast<int64_t>(seq) * a.n_kv_heads + kvh) * a.slot_pos_stride
            : nullptr;
    const int bs_mask = (1 << a.bs_shift) - 1;
    // Slot -> its index among the cache's slots (block * block_size + offset), or -1 where it is
    // not read: past the split, a hole in the table, out of the pool, or evicted from the lane.
    auto locate = [&](int slot) {
        if (slot >= end) return -1;
        const int logical = slot >> a.bs_shift;
        const int block = logical < a.table_stride ? __ldg(table + logical) : -1;
        const bool held = !pos || slot >= a.slot_pos_stride || __ldg(pos + slot) >= 0;
        return block >= 0 && block < a.num_blocks && held ? (block << a.bs_shift) | (slot & bs_mask)
                                                          : -1;
    };
    const int64_t slot_elems = static_cast<int64_t>(a.n_kv_heads) * HD;
    const T* kg = static_cast<const T*>(a.k) + static_cast<int64_t>(kvh) * HD + part * E;
    const T* vg = static_cast<const T*>(a.v) + static_cast<int64_t>(kvh) * HD + part * E;

    float m[G], l[G], o[G][E];
#pragma unroll
    for (int g = 0; g < G; ++g) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
#pragma unroll
        for (int e = 0; e < E; ++e)
            o[g][e] = 0.0f;
    }

    int loc[U];
    const int first = begin + warp * STEP;
#pragma unroll
    for (int u = 0; u < U; ++u)
        loc[u] = locate(first + u * KPW + key_sub);
    for (int base = first; base < end; base += kWarps * STEP) {
        uint4 kr[U], vr[U];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            kr[u] = vr[u] = uint4{};
            if (loc[u] >= 0) {
                const int64_t off = static_cast<int64_t>(loc[u]) * slot_elems;
                kr[u] = __ldg(reinterpret_cast<const uint4*>(kg + off));
                vr[u] = __ldg(reinterpret_cast<const uint4*>(vg + off));
            }
        }
        // The next step's table entries, in flight with this step's K/V.
        int loc_next[U];
#pragma unroll
        for (int u = 0; u < U; ++u)
            loc_next[u] = locate(base + kWarps * STEP + u * KPW + key_sub);

        // Scores: each lane's part of q . k, summed over the key's C lanes.
        float s[U][G];
#pragma unroll
        for (int u = 0; u < U; ++u) {
            float kf[E];
            unpack16<T>(kr[u], kf);
#pragma unroll
            for (int g = 0; g < G; ++g) {
                float acc = 0.0f;
#pragma unroll
                for (int e = 0; e < E; ++e)
                    acc = fmaf(qf[g][e], kf[e], acc);
                s[u][g] = acc;
            }
        }
#pragma unroll
        for (int off = 1; off < C; off <<= 1)
#pragma unroll
            for (int u = 0; u < U; ++u)
#pragma unroll
                for (int g = 0; g < G; ++g)
                    s[u][g] += __shfl_xor_sync(0xffffffffu, s[u][g], off);

                    // Online softmax; the max is the warp's, so the lanes' partial sums and outputs
                    // (each of its own keys) add up at the end.
#pragma unroll
        for (int g = 0; g < G; ++g) {
#pragma unroll
            for (int u = 0; u < U; ++u)
                if (loc[u] < 0) s[u][g] = -INFINITY;
            float mx = s[0][g];
#pragma unroll
            for (int u = 1; u < U; ++u)
                mx = fmaxf(mx, s[u][g]);
#pragma unroll
            for (int off = C; off < 32; off <<= 1)
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
            const float m_new = fmaxf(m[g], mx);
            if (m_new == -INFINITY) {  // nothing seen yet by the warp
#pragma unroll
                for (int u = 0; u < U; ++u)
                    s[u][g] = 0.0f;
                continue;
            }
            const float alpha = exp2f(m[g] - m_new);
            float sum = 0.0f;
#pragma unroll
            for (int u = 0; u < U; ++u) {
                s[u][g] = exp2f(s[u][g] - m_new);
                sum += s[u][g];
            }
            l[g] = l[g] * alpha + sum;
#pragma unroll
            for (int e = 0; e < E; ++e)
                o[g][e] *= alpha;
            m[g] = m_new;
        }

        // O += P V
#pragma unroll
        for (int u = 0; u < U; ++u) {
            float vf[E];
            unpack16<T>(vr[u], vf);
#pragma unroll
            for (int g = 0; g < G; ++g)
#pragma unroll
                for (int e = 0; e < E; ++e)
                    o[g][e] = fmaf(s[u][g], vf[e], o[g][e]);
        }
#pragma unroll
        for (int u = 0; u < U; ++u)
            loc[u] = loc_next[u];
    }

    // The warp's keys were spread over its 32 / C key lanes: add them up, then merge the warps.
#pragma unroll
    for (int off = C; off < 32; off <<= 1)
#pragma unroll
        for (int g = 0; g < G; ++g) {
            l[g] += __shfl_xor_sync(0xffffffffu, l[g], off);
#pragma unroll
            for (int e = 0; e < E; ++e)
                o[g][e] += __shfl_xor_sync(0xffffffffu, o[g][e], off);
        }
    if (key_sub == 0)
#pragma unroll
        for (int g = 0; g < G; ++g)
#pragma unroll
            for (int e = 0; e < E; ++e)
                o_s[warp][g][part * E + e] = o[g][e];
    if (lane == 0)
#pragma unroll
        for (int g = 0; g < G; ++g) {
            m_s[warp][g] = m[g];
            l_s[warp][g] = l[g];
        }
    __syncthreads();

    for (int i = threadIdx.x; i < nh * HD; i += kThreads) {
        const int g = i / HD, d = i % HD;
        float mx = -INFINITY;
#pragma unroll
        for (int w = 0; w < kWarps; ++w)
            if (l_s[w][g] > 0.0f) mx = fmaxf(mx, m_s[w][g]);
        float sum = 0.0f, acc = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w)
            if (l_s[w][g] > 0.0f) {
                const float f = exp2f(m_s[w][g] - mx);
                sum += l_s[w][g] * f;
                acc += o_s[w][g][d] * f;
            }
        const int64_t row_head = static_cast<int64_t>(seq) * a.n_heads + head0 + g;
        const float value = sum > 0.0f ? acc / sum : 0.0f;
        if (a.splits == 1) {
            a.out[row_head * HD + d] = value;
            continue;
        }
        const int64_t at = static_cast<int64_t>(split) * a.num_rows * a.n_heads + row_head;
        a.ws.out[at * HD + d] = value;
        if (d == 0) {
            a.ws.ml[at * 2] = mx;
            a.ws.ml[at * 2 + 1] = sum;
        }
    }
}

template <class T, int C, int G>
cudaError_t launch(const DecodeArgs& a, dim3 grid, cudaStream_t stream) {
    warp_decode_kernel<T, C, G><<<grid, kThreads, 0, stream>>>(a);
    return cudaGetLastError();
}

template <class T, int C>
cudaError_t launch_g(const DecodeArgs& a, int g, dim3 grid, cudaStream_t stream) {
    switch (g) {
        case 1:
            return launch<T, C, 1>(a, grid, stream);
        case 4:
            return launch<T, C, 4>(a, grid, stream);
        case 8:
            return launch<T, C, 8>(a, grid, stream);
    }
    return cudaErrorInvalidValue;
}

template <class T>
cudaError_t launch_c(const DecodeArgs& a, int c, int g, dim3 grid, cudaStream_t stream) {
    switch (c) {
        case 8:
            return launch_g<T, 8>(a, g, grid, stream);
        case 16:
            return launch_g<T, 16>(a, g, grid, stream);
        case 32:
            return launch_g<T, 32>(a, g, grid, stream);
    }
    return cudaErrorInvalidValue;
}
}  // namespace

bool warp_decode_applies(const PagedAttentionParams& p) {
    const int bs = p.cache.block_size;
    return p.decode_kernel != DecodeKernel::kTiled && chunks_per_key(p) != 0 && bs > 0 &&
           (bs & (bs - 1)) == 0;
}

int warp_decode_blocks(const PagedAttentionParams& p) {
    const int group = p.n_heads / p.cache.n_kv_heads;
    return p.num_seqs * p.cache.n_kv_heads * ceil_div(group, heads_per_block(p));
}

int warp_decode_splits(const PagedAttentionParams& p) {
    const int blocks = warp_decode_blocks(p);
    if (blocks <= 0) return 1;
    const int wave = kBlocksPerSm * sm_count() / blocks;
    const int by_length = p.max_kv_len / kMinSplitSlots;
    int splits = wave < by_length ? wave : by_length;
    if (splits > 128) splits = 128;
    return splits > 1 ? splits : 1;
}

cudaError_t warp_decode(const PagedAttentionParams& p, int splits, cudaStream_t stream) {
    DecodeArgs a{};
    a.q = p.q;
    a.out = p.out;
    a.k = p.cache.k;
    a.v = p.cache.v;
    a.num_blocks = p.cache.num_blocks;
    a.bs_shift = __builtin_ctz(static_cast<unsigned>(p.cache.block_size));
    a.n_kv_heads = p.cache.n_kv_heads;
    a.table = p.tables.table;
    a.table_stride = p.tables.stride;
    a.kv_len = p.kv_len;
    a.slot_pos = p.slot_pos;
    a.slot_pos_stride = p.slot_pos_stride;
    a.n_heads = p.n_heads;
    a.group = p.n_heads / p.cache.n_kv_heads;
    const int g = heads_per_block(p);
    a.head_tiles = ceil_div(a.group, g);
    a.scale_log2 = scale_log2(p);
    a.splits = splits;
    a.num_rows = p.num_seqs;
    if (splits > 1)
        a.ws = split_workspace(p.workspace, splits, p.num_seqs, p.n_heads, p.cache.head_dim);
    if (p.num_seqs > 65535 || splits > 65535) return cudaErrorInvalidValue;
    const dim3 grid(static_cast<unsigned>(p.cache.n_kv_heads * a.head_tiles),
                    static_cast<unsigned>(p.num_seqs), static_cast<unsigned>(splits));
    const int c = chunks_per_key(p);
    cudaError_t e = cudaErrorInvalidValue;
    switch (p.cache.dtype) {
        case DType::kF32:  // f32 caches go to the tiled kernel (warp_decode_applies)
            break;
        case DType::kF16:
            e = launch_c<__half>(a, c, g, grid, stream);
            break;
        case DType::kBF16:
            e = launch_c<__nv_bfloat16>(a, c, g, grid, stream);
            break;
    }
    if (e != cudaSuccess || splits <= 1) return e;
    return merge_attention_splits(p.out, a.ws, splits, p.num_seqs, p.n_heads, p.cache.head_dim,
                                  stream);
}

}  // namespace kvscope::kernels::detail
