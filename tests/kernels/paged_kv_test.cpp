// Writing K/V through block tables and moving blocks, against the engine's own cache
// (engine/kv_cache.h): same bytes in the same places.
#include "kernels/paged_kv.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <numeric>

#include "cuda_test_util.h"
#include "engine/kv_cache.h"

namespace kvscope {
namespace {

using kernels::DType;
using test::DeviceBuffer;

// Pinned host memory, freed with the object.
struct PinnedBuffer {
    explicit PinnedBuffer(size_t bytes) : size(bytes) {
        if (cudaMallocHost(&p, bytes) != cudaSuccess) {
            p = nullptr;
            ADD_FAILURE() << "cudaMallocHost of " << bytes << " bytes failed";
        }
    }
    ~PinnedBuffer() {
        if (p) cudaFreeHost(p);
    }
    PinnedBuffer(const PinnedBuffer&) = delete;
    PinnedBuffer& operator=(const PinnedBuffer&) = delete;
    uint8_t* bytes() const { return static_cast<uint8_t*>(p); }
    void* p = nullptr;
    size_t size;
};

struct Tables {
    int stride = 0;
    std::vector<int32_t> table;  // [seqs][stride], -1 holes and unused entries
    std::vector<int32_t> len;    // slots per sequence
};

// Ragged tables over a shuffled pool: sequence lengths from 1 slot to several blocks, some
// logical blocks holes (-1), every physical block used at most once.
Tables random_tables(std::mt19937& rng, int seqs, int block_size, int num_blocks, int max_len,
                     bool holes) {
    Tables t;
    std::uniform_int_distribution<int> len_dist(1, max_len);
    for (int s = 0; s < seqs; ++s)
        t.len.push_back(len_dist(rng));
    t.len[0] = 1;
    t.stride = (*std::max_element(t.len.begin(), t.len.end()) + block_size - 1) / block_size;
    t.table.assign(static_cast<size_t>(seqs) * t.stride, -1);
    std::vector<int32_t> pool(static_cast<size_t>(num_blocks));
    std::iota(pool.begin(), pool.end(), 0);
    std::shuffle(pool.begin(), pool.end(), rng);
    size_t next = 0;
    std::bernoulli_distribution hole(0.2);
    for (int s = 0; s < seqs; ++s) {
        const int blocks = (t.len[static_cast<size_t>(s)] + block_size - 1) / block_size;
        for (int b = 0; b < blocks; ++b) {
            // The last block holds the newest slot: never a hole.
            if (holes && b + 1 < blocks && hole(rng)) continue;
            if (next == pool.size()) {
                ADD_FAILURE() << "pool too small for the tables";
                return t;
            }
            t.table[static_cast<size_t>(s) * t.stride + b] = pool[next++];
        }
    }
    return t;
}

TEST(KernelPagedKv, WriteLandsWhereTheEngineCacheKeepsIt) {
    KVSCOPE_REQUIRE_CUDA_DEVICE();
    std::mt19937 rng(10);
    struct Shape {
        int block_size, n_kv_heads, head_dim;
    };
    for (const Shape& s : {Shape{16, 2, 64}, Shape{1, 1, 8}, Shape{8, 8, 128}, Shape{32, 3, 80}}) {
        for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
            ModelConfig config;
            config.n_layers = 1;
            config.n_heads = config.n_kv_heads = s.n_kv_heads;
            config.head_dim = s.head_dim;
            const int num_blocks = 64, seqs = 5;
            // At most num_blocks / seqs blocks per sequence: the pool always suffices.
            Tables t = random_tables(rng, seqs, s.block_size, num_blocks,
                                     std::min((num_blocks / seqs - 1) * s.block_size, 200), true);
            // Some tokens of every sequence, holes included: those must be skipped.
            std::vector<int32_t> tok_seq, tok_slot;
            for (int q = 0; q < seqs; ++q)
                for (int slot = 0; slot < t.len[static_cast<size_t>(q)]; ++slot)
                    if (rng() % 3 != 0) {
                        tok_seq.push_back(q);
                        tok_slot.push_back(slot);
                    }
            tok_seq.push_back(0);
            tok_slot.push_back(-1);  // no slot: skipped
            const int n = static_cast<int>(tok_seq.size());
            const int kv_dim = s.n_kv_heads * s.head_dim;
            auto k = test::random_floats(rng, static_cast<size_t>(n) * kv_dim, -4.0f, 4.0f);
            auto v = test::random_floats(rng, static_cast<size_t>(n) * kv_dim, -4.0f, 4.0f);

            // What the engine stores (f32, f16), or the same layout by hand (bf16).
            const size_t elem = kernels::dtype_bytes(dtype);
            const size_t block_bytes = static_cast<size_t>(s.block_size) * kv_dim * elem;
            std::vector<uint8_t> want_k(block_bytes * num_blocks, 0), want_v = want_k;
            KvCacheStorage engine(config, s.block_size, num_blocks,
                                  dtype == DType::kF16 ? KvDtype::kF16 : KvDtype::kF32);
            for (int i = 0; i < n; ++i) {
                const int slot = tok_slot[static_cast<size_t>(i)];
                if (slot < 0) continue;
                const int32_t block =
                    t.table[static_cast<size_t>(tok_seq[static_cast<size_t>(i)]) * t.stride +
                            slot / s.block_size];
                if (block < 0) continue;
                const float* kt = &k[static_cast<size_t>(i) * kv_dim];
                const float* vt = &v[static_cast<size_t>(i) * kv_dim];
                if (dtype != DType::kBF16) {
                    engine.write(0, block, slot % s.block_size, kt, vt);
                    continue;
                }
                const size_t at =
                    (static_cast<size_t>(block) * s.block_size + slot % s.block_size) * kv_dim;
                for (int e = 0; e < kv_dim; ++e) {
                    const uint16_t kb = test::float_to_bf16(kt[e]), vb = test::float_to_bf16(vt[e]);
                    std::memcpy(&want_k[(at + e) * 2], &kb, 2);
                    std::memcpy(&want_v[(at + e) * 2], &vb, 2);
                }
            }
            if (dtype != DType::kBF16) {
                std::vector<uint8_t> saved;
                for (int b = 0; b < num_blocks; ++b) {
                    engine.save_block(b, saved);  // one layer: [K block][V block]
                    ASSERT_EQ(saved.size(), 2 * block_bytes);
                    std::copy_n(saved.begin(), block_bytes, want_k.begin() + b * block_bytes);
                    std::copy_n(saved.begin() + static_cast<long>(block_bytes), block_bytes,
                                want_v.begin() + b * block_bytes);
                }
            }

            DeviceBuffer<uint8_t> dk(want_k.size()), dv(want_v.size());
            KVSCOPE_CUDA_OK(cudaMemset(dk.get(), 0, dk.size()));
            KVSCOPE_CUDA_OK(cudaMemset(dv.get(), 0, dv.size()));
            DeviceBuffer<float> dks(k), dvs(v);
            DeviceBuffer<int32_t> dtable(t.table), dseq(tok_seq), dslot(tok_slot);
            kernels::PagedKvCache cache{dk.get(),     dv.get(),     dtype,     num_blocks,
                                        s.block_size, s.n_kv_heads, s.head_dim};
            KVSCOPE_CUDA_OK(kernels::write_paged_kv(cache, {dtable.get(), t.stride}, dks.get(),
                                                    dvs.get(), dseq.get(), dslot.get(), n));
            KVSCOPE_CUDA_OK(cudaDeviceSynchronize());
            EXPECT_TRUE(dk.download() == want_k)
                << "keys, " << kernels::dtype_name(dtype) << ", block size " << s.block_size;
            EXPECT_TRUE(dv.download() == want_v)
                << "values, " << kernels::dtype_name(dtype) << ", block size " << s.block_size;
        }
    }
}

// `pools` host pools of num_blocks * block_bytes random bytes each.
std::vector<std::vector<uint8_t>> random_pools(std::mt19937& rng, int pools, int num_blocks,
                                               int64_t block_bytes) {
    std::vector<std::vector<uint8_t>> out(static_cast<size_t>(pools));
    for (auto& p : out) {
        p.resize(static_cast<size_t>(num_blocks * block_bytes));
        for (auto& b : p)
            b = static_cast<uint8_t>(rng());
    }
    return out;
}

// Pairs (src, dst) over distinct blocks: no block is both read and written.
std::vector<int32_t> random_pairs(std::mt19937& rng, int num_blocks, int count) {
    std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), rng);
    ids.resize(static_cast<size_t>(2 * count));
    return ids;
}

void apply_pairs(std::vector<std::vector<uint8_t>>& dst,
                 const std::vector<std::vector<uint8_t>>& src, const std::vector<int32_t>& pairs,
                 int64_t block_bytes) {
    for (size_t p = 0; p < dst.size(); ++p)
        for (size_t i = 0; i + 1 < pairs.size(); i += 2) {
            if (pairs[i] < 0 || pairs[i + 1] < 0) continue;
            std::copy_n(src[p].begin() + pairs[i] * block_bytes, block_bytes,
                        dst[p].begin() + pairs[i + 1] * block_bytes);
        }
}

TEST(KernelPagedKv, CopyBlocksIsCopyOnWriteInEveryPool) {
    KVSCOPE_REQUIRE_CUDA_DEVICE();
    std::mt19937 rng(11);
    // 16-byte, 4-byte and byte copies.
    for (int64_t block_bytes : {int64_t{16 * 2 * 64 * 2}, int64_t{12}, int64_t{7}}) {
        const int pools = 6, num_blocks = 40;  // K and V of three layers
        auto host = random_pools(rng, pools, num_blocks, block_bytes);
        std::vector<DeviceBuffer<uint8_t>> dev(pools);
        std::vector<void*> ptrs;
        for (int p = 0; p < pools; ++p) {
            dev[static_cast<size_t>(p)].upload(host[static_cast<size_t>(p)]);
            ptrs.push_back(dev[static_cast<size_t>(p)].get());
        }
        auto pairs = random_pairs(rng, num_blocks, 9);
        pairs[4] = -1;  // a pair with no source: skipped
        DeviceBuffer<void*> dptrs(ptrs);
        DeviceBuffer<int32_t> dpairs(pairs);
        KVSCOPE_CUDA_OK(
            kernels::copy_blocks(dptrs.get(), dptrs.get(), pools, block_bytes, dpairs.get(), 9));
        KVSCOPE_CUDA_OK(cudaDeviceSynchronize());
        auto want = host;
        apply_pairs(want, host, pairs, block_bytes);
        for (int p = 0; p < pools; ++p)
            EXPECT_TRUE(dev[static_cast<size_t>(p)].download() == want[static_cast<size_t>(p)])
                << "pool " << p << ", block bytes " << block_bytes;
    }
}

TEST(KernelPagedKv, SwapOutAndInThroughPinnedHostMemory) {
    KVSCOPE_REQUIRE_CUDA_DEVICE();
    std::mt19937 rng(12);
    const int pools = 4, num_blocks = 32, host_blocks = 24;
    const int64_t block_bytes = 16 * 8 * 128 * 2;  // a block of one layer, 8 KV heads, f16
    for (bool by_kernel : {true, false}) {
        auto host = random_pools(rng, pools, num_blocks, block_bytes);
        std::vector<DeviceBuffer<uint8_t>> dev(pools);
        std::vector<std::unique_ptr<PinnedBuffer>> pinned;
        std::vector<void*> dev_ptrs, host_ptrs;
        for (int p = 0; p < pools; ++p) {
            dev[static_cast<size_t>(p)].upload(host[static_cast<size_t>(p)]);
            dev_ptrs.push_back(dev[static_cast<size_t>(p)].get());
            pinned.push_back(std::make_unique<PinnedBuffer>(host_blocks * block_bytes));
            std::memset(pinned.back()->p, 0, pinned.back()->size);
            host_ptrs.push_back(pinned.back()->p);
        }
        // Out: device blocks -> host blocks; a run of consecutive pairs becomes one copy.
        std::vector<int32_t> out = {5, 0, 6, 1, 7, 2, 20, 9, 3, 23, 31, 4};
        // In: host blocks -> other device blocks.
        std::vector<int32_t> in = {0, 10, 1, 11, 9, 30, 23, 8};
        auto run = [&](std::vector<void*>& dst, std::vector<void*>& src,
                       const std::vector<int32_t>& pairs) -> cudaError_t {
            const int n = static_cast<int>(pairs.size() / 2);
            if (!by_kernel)
                return kernels::swap_blocks(dst.data(), src.data(), pools, block_bytes,
                                            pairs.data(), n);
            DeviceBuffer<void*> ddst(dst), dsrc(src);
            DeviceBuffer<int32_t> dpairs(pairs);
            cudaError_t e =
                kernels::copy_blocks(ddst.get(), dsrc.get(), pools, block_bytes, dpairs.get(), n);
            cudaError_t s = cudaDeviceSynchronize();
            return e != cudaSuccess ? e : s;
        };
        KVSCOPE_CUDA_OK(run(host_ptrs, dev_ptrs, out));
        KVSCOPE_CUDA_OK(cudaDeviceSynchronize());
        std::vector<std::vector<uint8_t>> want_host(
            pools, std::vector<uint8_t>(static_cast<size_t>(host_blocks * block_bytes), 0));
        apply_pairs(want_host, host, out, block_bytes);
        for (int p = 0; p < pools; ++p)
            EXPECT_TRUE(std::equal(want_host[static_cast<size_t>(p)].begin(),
                                   want_host[static_cast<size_t>(p)].end(),
                                   pinned[static_cast<size_t>(p)]->bytes()))
                << "swapped out, pool " << p << (by_kernel ? " (kernel)" : " (memcpy)");
        KVSCOPE_CUDA_OK(run(dev_ptrs, host_ptrs, in));
        KVSCOPE_CUDA_OK(cudaDeviceSynchronize());
        auto want_dev = host;
        apply_pairs(want_dev, want_host, in, block_bytes);
        for (int p = 0; p < pools; ++p)
            EXPECT_TRUE(dev[static_cast<size_t>(p)].download() == want_dev[static_cast<size_t>(p)])
                << "swapped in, pool " << p << (by_kernel ? " (kernel)" : " (memcpy)");
    }
}

TEST(KernelPagedKv, RefusesBadArguments) {
    KVSCOPE_REQUIRE_CUDA_DEVICE();
    kernels::PagedKvCache cache;
    EXPECT_EQ(kernels::write_paged_kv(cache, {}, nullptr, nullptr, nullptr, nullptr, 1),
              cudaErrorInvalidValue);
    EXPECT_EQ(kernels::copy_blocks(nullptr, nullptr, 1, 16, nullptr, 1), cudaErrorInvalidValue);
    EXPECT_EQ(kernels::swap_blocks(nullptr, nullptr, 1, 0, nullptr, 1), cudaErrorInvalidValue);
}

}  // namespace
}  // namespace kvscope
