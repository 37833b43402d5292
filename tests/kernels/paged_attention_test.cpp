// Paged attention (decode and prefill) against a plain reference with the CPU backend's
// semantics (CpuForward::attention): ragged sequences, block tables with holes, lanes with
// evicted slots, GQA groups from 1 to 32, every K/V dtype, split and unsplit keys. Slots no query
// may read (evicted, in no table, past the sequence) hold NaN, so reading one shows.
#include "kernels/paged_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <sstream>

#include "cuda_test_util.h"
#include "engine/kv_cache.h"
#include "engine/kv_quant.h"

namespace kvscope {
namespace {

using kernels::DType;
using test::DeviceBuffer;

struct SeqSpec {
    int kv_len;  // slots in use, the queries' own included
    int n_q;     // queries: the last n_q slots
};

struct Case {
    DType dtype;
    int block_size, n_kv_heads, group, head_dim;
    std::vector<SeqSpec> seqs;
    bool block_holes = false;  // -1 entries in block tables (before the queries' blocks)
    bool slot_holes = false;   // evicted slots per lane (before the queries' slots)
    int splits = 0;            // decode: 0 = let the launcher pick
};

std::string describe(const Case& c) {
    std::ostringstream s;
    s << kernels::dtype_name(c.dtype) << ", block " << c.block_size << ", " << c.n_kv_heads
      << " KV heads x group " << c.group << ", head_dim " << c.head_dim << ", splits " << c.splits
      << ", seqs (kv_len/n_q):";
    for (const SeqSpec& q : c.seqs)
        s << " " << q.kv_len << "/" << q.n_q;
    return s.str();
}

// A cache in host memory: the bytes to upload, and the values they stand for.
struct HostCache {
    DType dtype;
    int num_blocks, block_size, n_kv_heads, head_dim;
    std::vector<uint8_t> k_bytes, v_bytes;
    std::vector<float> k, v;  // stored values, as floats (NaN where nothing may be read)

    HostCache(DType d, int blocks, int bs, int kvh, int hd)
        : dtype(d), num_blocks(blocks), block_size(bs), n_kv_heads(kvh), head_dim(hd) {
        const size_t n = static_cast<size_t>(blocks) * bs * kvh * hd;
        k.assign(n, std::numeric_limits<float>::quiet_NaN());
        v = k;
        k_bytes.resize(n * kernels::dtype_bytes(d));
        v_bytes.resize(k_bytes.size());
        for (size_t i = 0; i < n; ++i) {
            store(k_bytes, i, k[i]);
            store(v_bytes, i, v[i]);
        }
    }
    size_t index(int block, int slot, int kvh, int d) const {
        return ((static_cast<size_t>(block) * block_size + slot) * n_kv_heads + kvh) * head_dim + d;
    }
    // Stores x (rounded to the dtype) and keeps what was stored.
    void set(std::vector<uint8_t>& bytes, std::vector<float>& values, size_t i, float x) {
        values[i] = store(bytes, i, x);
    }
    float store(std::vector<uint8_t>& bytes, size_t i, float x) const {
        switch (dtype) {
            case DType::kF32:
                std::memcpy(&bytes[i * 4], &x, 4);
                return x;
            case DType::kF16: {
                const uint16_t h = float_to_half(x);
                std::memcpy(&bytes[i * 2], &h, 2);
                return half_to_float(h);
            }
            case DType::kBF16: {
                const uint16_t b = test::float_to_bf16(x);
                std::memcpy(&bytes[i * 2], &b, 2);
                return test::bf16_to_float(b);
            }
        }
        return x;
    }
};

struct Built {
    HostCache cache;
    int stride = 0;
    std::vector<int32_t> table, kv_len, q_start, slot_pos;
    int slot_stride = 0;
    std::vector<float> q;
};

Built build(const Case& c, std::mt19937& rng) {
    const int bs = c.block_size, hd = c.head_dim, kvh = c.n_kv_heads;
    int max_len = 1, total_blocks = 0;
    for (const SeqSpec& s : c.seqs) {
        max_len = std::max(max_len, s.kv_len);
        total_blocks += (s.kv_len + bs - 1) / bs;
    }
    const int num_blocks = total_blocks + 5;  // unused blocks too
    Built b{HostCache(c.dtype, num_blocks, bs, kvh, hd), 0, {}, {}, {}, {}, 0, {}};
    b.stride = (max_len + bs - 1) / bs;
    b.table.assign(c.seqs.size() * static_cast<size_t>(b.stride), -1);
    b.slot_stride = max_len;
    b.slot_pos.assign(c.seqs.size() * static_cast<size_t>(kvh) * max_len, -1);
    std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    size_t next = 0;
    std::bernoulli_distribution block_hole(0.25), slot_hole(0.3);
    std::uniform_real_distribution<float> val(-1.0f, 1.0f);
    int rows = 0;
    b.q_start.push_back(0);
    for (size_t s = 0; s < c.seqs.size(); ++s) {
        const SeqSpec& sp = c.seqs[s];
        const int first_query_slot = sp.kv_len - sp.n_q;
        for (int lb = 0; lb * bs < sp.kv_len; ++lb) {
            // A block holding a query's slot is never a hole (the engine gives back only blocks
            // evicted in every lane, and a new token's slot is kept).
            const bool before_queries = (lb + 1) * bs <= first_query_slot;
            if (c.block_holes && before_queries && block_hole(rng)) continue;
            const int32_t block = ids[next++];
            b.table[s * b.stride + static_cast<size_t>(lb)] = block;
            for (int slot = 0; slot < bs; ++slot) {
                const int pos = lb * bs + slot;
                if (pos >= sp.kv_len) break;  // past the sequence: stays NaN
                for (int h = 0; h < kvh; ++h) {
                    const bool evicted = c.slot_holes && pos < first_query_slot && slot_hole(rng);
                    b.slot_pos[(s * kvh + h) * max_len + pos] = evicted ? -1 : pos;
                    if (evicted) continue;  // its K/V stay NaN
                    for (int d = 0; d < hd; ++d) {
                        const size_t i = b.cache.index(block, slot, h, d);
                        b.cache.set(b.cache.k_bytes, b.cache.k, i, val(rng));
                        b.cache.set(b.cache.v_bytes, b.cache.v, i, val(rng));
                    }
                }
            }
        }
        b.kv_len.push_back(sp.kv_len);
        rows += sp.n_q;
        b.q_start.push_back(rows);
    }
    // Queries scaled up so the softmax is not flat.
    b.q = test::random_floats(rng, static_cast<size_t>(rows) * kvh * c.group * hd, -3.0f, 3.0f);
    return b;
}

// What CpuForward::attention computes, in double.
std::vector<double> reference(const Case& c, const Built& b) {
    const int hd = c.head_dim, kvh = c.n_kv_heads, n_heads = kvh * c.group, bs = c.block_size;
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    std::vector<double> out(b.q.size(), 0.0);
    for (size_t s = 0; s < c.seqs.size(); ++s) {
        const SeqSpec& sp = c.seqs[s];
        for (int j = 0; j < sp.n_q; ++j) {
            const size_t row = static_cast<size_t>(b.q_start[s] + j);
            const int limit = sp.kv_len - sp.n_q + j + 1;
            for (int h = 0; h < n_heads; ++h) {
                const int g = h / c.group;
                const float* q = &b.q[(row * n_heads + h) * hd];
                std::vector<double> score;
                std::vector<size_t> at;
                for (int pos = 0; pos < limit; ++pos) {
                    const int32_t block = b.table[s * b.stride + static_cast<size_t>(pos / bs)];
                    if (block < 0) continue;
                    if (c.slot_holes && b.slot_pos[(s * kvh + g) * b.slot_stride + pos] < 0)
                        continue;
                    const size_t base = b.cache.index(block, pos % bs, g, 0);
                    double dot = 0;
                    for (int d = 0; d < hd; ++d)
                        dot += static_cast<double>(q[d]) * b.cache.k[base + d];
                    score.push_back(dot * scale);
                    at.push_back(base);
                }
                if (score.empty()) continue;  // zeros
                const double mx = *std::max_element(score.begin(), score.end());
                double sum = 0;
                for (double& x : score)
                    sum += (x = std::exp(x - mx));
                double* o = &out[(row * n_heads + h) * hd];
                for (size_t t = 0; t < score.size(); ++t)
                    for (int d = 0; d < hd; ++d)
                        o[d] += score[t] / sum * b.cache.v[at[t] + d];
            }
        }
    }
    return out;
}

// kernel: which decode kernel (paged_attention.h's DecodeKernel).
void run_case(const Case& c, bool prefill, uint32_t seed,
              kernels::DecodeKernel kernel = kernels::DecodeKernel::kDefault) {
    const char* names[] = {"decode: ", "decode (tiled kernel): "};
    SCOPED_TRACE((prefill ? "prefill: " : names[static_cast<int>(kernel)]) + describe(c));
    std::mt19937 rng(seed);
    Built b = build(c, rng);
    std::vector<double> want = reference(c, b);

    DeviceBuffer<uint8_t> dk(b.cache.k_bytes), dv(b.cache.v_bytes);
    DeviceBuffer<int32_t> dtable(b.table), dlen(b.kv_len), dstart(b.q_start), dpos(b.slot_pos);
    DeviceBuffer<float> dq(b.q), dout(b.q.size());
    KVSCOPE_CUDA_OK(cudaMemset(dout.get(), 0xff, dout.size() * sizeof(float)));  // NaN

    kernels::PagedAttentionParams p;
    p.q = dq.get();
    p.out = dout.get();
    p.cache = {dk.get(),     dv.get(),     c.dtype,   b.cache.num_blocks,
               c.block_size, c.n_kv_heads, c.head_dim};
    p.tables = {dtable.get(), b.stride};
    p.q_start = prefill ? dstart.get() : nullptr;
    p.kv_len = dlen.get();
    if (c.slot_holes) {
        p.slot_pos = dpos.get();
        p.slot_pos_stride = b.slot_stride;
    }
    p.num_seqs = static_cast<int>(c.seqs.size());
    p.n_heads = c.n_kv_heads * c.group;
    for (const SeqSpec& s : c.seqs) {
        p.max_q_len = std::max(p.max_q_len, s.n_q);
        p.max_kv_len = std::max(p.max_kv_len, s.kv_len);
    }
    p.num_splits = c.splits;
    p.decode_kernel = kernel;
    DeviceBuffer<uint8_t> workspace(kernels::paged_attention_workspace_bytes(p));
    p.workspace = workspace.get();
    p.workspace_bytes = workspace.size();
    if (!prefill && c.splits > 1) {
        EXPECT_EQ(kernels::paged_attention_splits(p), c.splits);
    }

    KVSCOPE_CUDA_OK(prefill ? kernels::paged_attention_prefill(p)
                            : kernels::paged_attention_decode(p));
    KVSCOPE_CUDA_OK(cudaDeviceSynchronize());
    EXPECT_TRUE(test::all_close(dout.download(), want, 2e-5, 2e-4));
}

TEST(KernelPagedAttention, DecodeMatchesReference) {
    KVSCOPE_REQUIRE_CUDA_DEVICE();
    const std::vector<Case> cases = {
        // Qwen2.5-0.5B's attention (group 7), eviction holes of both kinds, a 1-slot sequence.
        {DType::kF16, 16, 2, 7, 64, {{1, 1}, {17, 1}, {300, 1}, {1000, 1}}, true, true, 0},
        // Llama-3-8B's (8 KV heads, group 4, head_dim 128), long contexts: split by the launcher
        // and by hand.
        {DType::kBF16, 16, 8, 4, 128, {{4096, 1}, {33, 1}, {2000, 1}}, false, false, 0},
        {DType::kBF16, 16, 8, 4, 128, {{4096, 1}, {33, 1}, {2000, 1}}, true, true, 5},
        {DType::kF32, 16, 8, 4, 128, {{1500, 1}, {16, 1}}, true, false, 1},
        // Multi-head (group 1), the widest head, f32 (the smallest key tile), 3 splits.
        {DType::kF32, 32, 1, 1, 256, {{700, 1}, {5, 1}}, true, true, 3},
        // One-slot blocks, group 16 (two head tiles of 8), the narrowest f16 head.
        {DType::kF16, 1, 4, 16, 8, {{50, 1}, {9, 1}}, true, true, 0},
        // head_dim 4 (f32), 80 (not a power of two), a sequence with no slots (zeros out).
        {DType::kF32, 8, 3, 2, 4, {{13, 1}, {64, 1}}, false, true, 2},
        {DType::kF16, 16, 2, 4, 80, {{0, 1}, {70, 1}, {257, 1}}, true, true, 0},
        // MQA-like group 32 (four head tiles), many sequences.
        {DType::kF16,
         16,
         1,
         32,
         128,
         {{3, 1}, {64, 1}, {65, 1}, {129, 1}, {511, 1}, {512, 1}, {900, 1}},
         true,
         false,
         0},
        // The warp kernel's other widths: 32 chunks with group 8, 8 chunks with group 2 (idle
        // heads in its blocks of 4) over 7 splits, 16 chunks with one head per KV head and
        // 64-slot blocks.
        {DType::kBF16, 32, 2, 8, 256, {{3000, 1}, {1, 1}, {129, 1}}, true, true, 0},
        {DType::kF16, 8, 4, 2, 64, {{777, 1}, {40, 1}}, true, true, 7},
        {DType::kF16, 64, 1, 1, 128, {{5000, 1}}, false, true, 0},
    };
    // Each by both decode kernels: the warp kernel takes 16-bit caches with
    // head_dim of 8, 16 or 32 16-byte chunks and power-of-two blocks (the Llama, Qwen and MQA
    // cases here), the tiled kernel the rest.
    uint32_t seed = 100;
    for (const Case& c : cases) {
        for (kernels::DecodeKernel k :
             {kernels::DecodeKernel::kDefault, kernels::DecodeKernel::kTiled})
            run_case(c, false, seed, k);
        ++seed;
    }
}

TEST(KernelPagedAttention, PrefillMatchesReference) {
    KVSCOPE_REQUIRE_CUDA_DEVICE();
    const std::vector<Case> cases = {
        // Whole prompts, a chunk after a cached prefix (chunked prefill / prefix hit), a
        // decode-like single query, and a one-token prompt in one batch.
        {DType::kF16, 16, 2, 7, 64, {{40, 40}, {100, 30}, {17, 1}, {1, 1}}, false, false},
        {DType::kF16, 16, 2, 7, 64, {{40, 40}, {100, 30}, {17, 1}, {1, 1}}, true, true},
        {DType::kBF16, 16, 8, 4, 128, {{200, 64}, {64, 64}}, true, false},
        // Multi-head: 32 queries per block over head_dim 256 in f32.
        {DType::kF32, 32, 1, 1, 256, {{150, 150}}, false, true},
        {DType::kF16, 1, 2, 16, 8, {{30, 10}, {5, 5}}, true, true},
        {DType::kF32, 8, 4, 8, 96, {{300, 20}, {33, 33}}, true, true},
        {DType::kF16, 16, 1, 32, 64, {{50, 5}, {16, 16}}, false, false},
    };
    uint32_t seed = 200;
    for (const Case& c : cases)
        run_case(c, true, seed++);
}

TEST(KernelPagedAttention, ReadsTheEngineCacheAsTheEngineStoresIt) {
    KVSCOPE_REQUIRE_CUDA_DEVICE();
    // K/V written by the engine's KvCacheStorage, blocks uploaded byte for byte; the reference
    // reads them back through the engine (read_lane), as CpuForward::attention does.
    for (KvDtype dtype : {KvDtype::kF32, KvDtype::kF16}) {
        ModelConfig config;
        config.n_layers = 1;
        config.n_kv_heads = 2;
        config.n_heads = 8;
        config.head_dim = 64;
        const int bs = 16, num_blocks = 8, len = 50;
        KvCacheStorage engine(config, bs, num_blocks, dtype);
        const std::vector<int32_t> table = {3, 7, 1, 4};  // 50 slots
        std::mt19937 rng(7);
        for (int pos = 0; pos < len; ++pos) {
            auto k = test::random_floats(rng, static_cast<size_t>(config.kv_dim()));
            auto v = test::random_floats(rng, static_cast<size_t>(config.kv_dim()));
            engine.write(0, table[static_cast<size_t>(pos / bs)], pos % bs, k.data(), v.data());
        }
        const size_t block_bytes = engine.bytes_per_block() / 2;
        std::vector<uint8_t> kb(block_bytes * num_blocks), vb(kb.size()), saved;
        for (int b = 0; b < num_blocks; ++b) {
            engine.save_block(b, saved);
            std::copy_n(saved.begin(), block_bytes,
                        kb.begin() + static_cast<long>(b * block_bytes));
            std::copy_n(saved.begin() + static_cast<long>(block_bytes), block_bytes,
                        vb.begin() + static_cast<long>(b * block_bytes));
        }
        auto q = test::random_floats(rng, static_cast<size_t>(config.q_dim()), -3.0f, 3.0f);
        std::vector<double> want(q.size(), 0.0);
        const int group = config.group_size(), hd = config.head_dim;
        for (int h = 0; h < config.n_heads; ++h) {
            std::vector<float> keys(static_cast<size_t>(bs) * hd), values(keys.size());
            std::vector<double> score;
            std::vector<std::vector<float>> vrows;
            for (int lb = 0; lb * bs < len; ++lb) {
                const int span = std::min(bs, len - lb * bs);
                engine.read_lane(0, table[static_cast<size_t>(lb)], h / group, span, keys.data(),
                                 values.data());
                for (int s = 0; s < span; ++s) {
                    double dot = 0;
                    for (int d = 0; d < hd; ++d)
                        dot += static_cast<double>(q[static_cast<size_t>(h * hd + d)]) *
                               keys[static_cast<size_t>(s * hd + d)];
                    score.push_back(dot / std::sqrt(static_cast<double>(hd)));
                    vrows.emplace_back(values.begin() + s * hd, values.begin() + (s + 1) * hd);
                }
            }
            const double mx = *std::max_element(score.begin(), score.end());
            double sum = 0;
            for (double& x : score)
                sum += (x = std::exp(x - mx));
            for (size_t t = 0; t < score.size(); ++t)
                for (int d = 0; d < hd; ++d)
                    want[static_cast<size_t>(h * hd + d)] +=
                        score[t] / sum * vrows[t][static_cast<size_t>(d)];
        }
        DeviceBuffer<uint8_t> dk(kb), dv(vb);
        DeviceBuffer<int32_t> dtable(table), dlen(std::vector<int32_t>{len});
        DeviceBuffer<float> dq(q), dout(q.size());
        kernels::PagedAttentionParams p;
        p.q = dq.get();
        p.out = dout.get();
        p.cache = {dk.get(),   dv.get(), dtype == KvDtype::kF16 ? DType::kF16 : DType::kF32,
                   num_blocks, bs,       config.n_kv_heads,
                   hd};
        p.tables = {dtable.get(), 4};
        p.kv_len = dlen.get();
        p.num_seqs = 1;
        p.n_heads = config.n_heads;
        p.max_kv_len = len;
        p.num_splits = 1;
        KVSCOPE_CUDA_OK(kernels::paged_attention_decode(p));
        KVSCOPE_CUDA_OK(cudaDeviceSynchronize());
        EXPECT_TRUE(test::all_close(dout.download(), want, 2e-5, 2e-4)) << kv_dtype_name(dtype);
    }
}

TEST(KernelPagedAttention, RefusesShapesItDoesNotTake) {
    KVSCOPE_REQUIRE_CUDA_DEVICE();
    DeviceBuffer<float> buf(1024);
    DeviceBuffer<int32_t> ints(16);
    kernels::PagedAttentionParams p;
    p.q = p.out = buf.get();
    p.cache = {buf.get(), buf.get(), DType::kF16, 4, 16, 2, 12};  // 12 halves: not 16 bytes
    p.tables = {ints.get(), 1};
    p.kv_len = ints.get();
    p.num_seqs = 1;
    p.n_heads = 4;
    EXPECT_EQ(kernels::paged_attention_decode(p), cudaErrorInvalidValue);
    p.cache.head_dim = 16;
    p.n_heads = 3;  // not a multiple of the KV heads
    EXPECT_EQ(kernels::paged_attention_decode(p), cudaErrorInvalidValue);
    p.n_heads = 4;
    EXPECT_EQ(kernels::paged_attention_prefill(p), cudaErrorInvalidValue);  // no q_start
    p.num_splits = 4;
    p.max_kv_len = 4096;
    EXPECT_EQ(kernels::paged_attention_decode(p), cudaErrorInvalidValue);  // no workspace
}

}  // namespace
}  // namespace kvscope
