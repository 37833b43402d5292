// The kernels around the CUDA backend's 16-bit products (split_gemm.h) and the capture of
// attention probabilities (attention_probs.h), against plain host arithmetic.
#include "kernels/split_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "cuda_test_util.h"
#include "engine/kv_quant.h"
#include "kernels/attention_probs.h"

namespace kvscope {
namespace {

using kernels::DType;
using test::DeviceBuffer;

float half_bits_to_float(uint16_t h, DType t) {
    return t == DType::kF16 ? half_to_float(h) : test::bf16_to_float(h);
}

TEST(KernelSplitHalves, HiPlusLoCarriesAlmostF32) {
    KVSCOPE_REQUIRE_CUDA_DEVICE();
    std::mt19937 rng(3);
    const int n = 1000;
    // Rows of very different magnitudes (f16 alone would overflow the first), a row of zeros,
    // and a row holding a NaN.
    const std::vector<float> magnitude = {3e5f, 1.0f, 1e-3f, 0.0f, 2.0f};
    const int rows = static_cast<int>(magnitude.size());
    std::vector<float> x;
    for (float m : magnitude) {
        auto r = test::random_floats(rng, n, -1.0f, 1.0f);
        for (float& v : r)
            v *= m;
        x.insert(x.end(), r.begin(), r.end());
    }
    x[static_cast<size_t>(4 * n + 7)] = std::numeric_limits<float>::quiet_NaN();
    for (DType t : {DType::kF16, DType::kBF16}) {
        SCOPED_TRACE(kernels::dtype_name(t));
        DeviceBuffer<float> dx(x), scale(static_cast<size_t>(rows));
        DeviceBuffer<uint16_t> out(2 * x.size());
        KVSCOPE_CUDA_OK(
            kernels::split_halves(out.get(), t, scale.get(), dx.get(), rows, n, nullptr));
        KVSCOPE_CUDA_OK(cudaDeviceSynchronize());
        const auto halves = out.download();
        const auto s = scale.download();
        for (int r = 0; r < rows; ++r) {
            double row_max = 0;
            for (int i = 0; i < n; ++i)
                if (std::isfinite(x[static_cast<size_t>(r * n + i)]))
                    row_max =
                        std::max(row_max, std::fabs(double{x[static_cast<size_t>(r * n + i)]}));
            if (row_max > 0) {
                const double ratio = row_max / s[static_cast<size_t>(r)];
                EXPECT_GE(ratio, 16384.0) << "row " << r;
                EXPECT_LT(ratio, 32768.0) << "row " << r;
            } else {
                EXPECT_EQ(s[static_cast<size_t>(r)], 1.0f);
            }
            for (int i = 0; i < n; ++i) {
                const size_t at = static_cast<size_t>(r * n + i);
                const double hi = half_bits_to_float(halves[at], t);
                const double lo = half_bits_to_float(halves[x.size() + at], t);
                const double got = (hi + lo) * s[static_cast<size_t>(r)];
                if (!std::isfinite(x[at])) {
                    EXPECT_TRUE(std::isnan(got));
                    continue;
                }
                // hi + lo keep 16 (bf16) or 22 (f16) bits; f16's subnormal lo adds 2^-25 * s.
                const double allowed =
                    std::fabs(double{x[at]}) / 65536.0 + s[static_cast<size_t>(r)] / (1 << 24);
                ASSERT_LE(std::fabs(got - x[at]), allowed) << "row " << r << ", " << i;
            }
        }
    }
}

TEST(KernelJoinHalves, SegmentsBiasAccumulateAndTheFirstNonFinite) {
    KVSCOPE_REQUIRE_CUDA_DEVICE();
    std::mt19937 rng(4);
    const int rows = 5, w0 = 7, w1 = 3, w2 = 12, total = w0 + w1 + w2;
    auto y = test::random_floats(rng, 2 * rows * total, -2.0f, 2.0f);
    auto bias = test::random_floats(rng, total);
    const std::vector<float> scale = {1.0f, 0.5f, 4.0f, 1.0f / 1024, 2048.0f};
    std::vector<std::vector<float>> before = {test::random_floats(rng, rows * w0),
                                              test::random_floats(rng, rows * w1),
                                              test::random_floats(rng, rows * w2)};
    // A non-finite value at (row 3, column 2 of segment 1), and a NaN later.
    y[static_cast<size_t>(3 * total + w0 + 2)] = std::numeric_limits<float>::infinity();
    y[static_cast<size_t>(4 * total + 1)] = std::numeric_limits<float>::quiet_NaN();
    DeviceBuffer<float> dy(y), db(bias), ds(scale), o0(before[0]), o1(before[1]), o2(before[2]);
    DeviceBuffer<unsigned long long> bad(1);
    KVSCOPE_CUDA_OK(cudaMemset(bad.get(), 0xff, sizeof(unsigned long long)));
    const kernels::JoinSegment seg[3] = {
        {o0.get(), w0, true}, {o1.get(), w1, false}, {o2.get(), w2, true}};
    KVSCOPE_CUDA_OK(
        kernels::join_halves(seg, 3, dy.get(), ds.get(), db.get(), rows, bad.get(), nullptr));
    KVSCOPE_CUDA_OK(cudaDeviceSynchronize());
    const std::vector<std::vector<float>> got = {o0.download(), o1.download(), o2.download()};
    const int widths[3] = {w0, w1, w2};
    for (int r = 0; r < rows; ++r)
        for (int c = 0, k = 0, off = 0; c < total; ++c) {
            if (c - off >= widths[k]) off += widths[k++];
            const size_t at = static_cast<size_t>(r * total + c);
            float v = (y[at] + y[static_cast<size_t>(rows * total) + at]) *
                          scale[static_cast<size_t>(r)] +
                      bias[static_cast<size_t>(c)];
            const size_t o = static_cast<size_t>(r * widths[k] + c - off);
            if (k != 1) v += before[static_cast<size_t>(k)][o];
            const float g = got[static_cast<size_t>(k)][o];
            if (std::isnan(v))
                EXPECT_TRUE(std::isnan(g));
            else
                EXPECT_FLOAT_EQ(g, v) << "row " << r << ", column " << c;
        }
    const unsigned long long first = bad.download()[0];
    EXPECT_EQ(first >> 1, static_cast<unsigned long long>(3 * total + w0 + 2));
    EXPECT_EQ(first & 1, 0u) << "an Inf, not a NaN";
}

TEST(KernelGatherRows, CopiesTheRowsNamed) {
    KVSCOPE_REQUIRE_CUDA_DEVICE();
    std::mt19937 rng(5);
    auto in = test::random_floats(rng, 6 * 9);
    const std::vector<int32_t> rows = {5, 0, 5, 2};
    DeviceBuffer<float> din(in), out(rows.size() * 9);
    DeviceBuffer<int32_t> dr(rows);
    KVSCOPE_CUDA_OK(kernels::gather_rows(out.get(), din.get(), dr.get(), 4, 9, nullptr));
    KVSCOPE_CUDA_OK(cudaDeviceSynchronize());
    const auto got = out.download();
    for (size_t i = 0; i < rows.size(); ++i)
        for (size_t j = 0; j < 9; ++j)
            EXPECT_EQ(got[i * 9 + j], in[static_cast<size_t>(rows[i]) * 9 + j]);
}

// Probabilities of chosen (row, head) pairs against a double-precision softmax over the slots a
// row sees, skipping table holes and evicted slots (their K is NaN, so reading one shows).
TEST(KernelAttentionProbs, MatchesTheSoftmaxOverHeldSlots) {
    KVSCOPE_REQUIRE_CUDA_DEVICE();
    std::mt19937 rng(6);
    const int bs = 4, n_kv = 2, hd = 16, n_heads = 6, blocks = 12, group = n_heads / n_kv;
    // Sequence 0: slots 0..10 over blocks {3, -1 (a hole), 7}; sequence 1: slots 0..5, {1, 9}.
    const int stride = 3;
    const std::vector<int32_t> table = {3, -1, 7, 1, 9, -1};
    const std::vector<int32_t> row_seq = {0, 0, 1}, row_slot = {9, 10, 5};
    const int slot_stride = 11;
    std::vector<int32_t> slot_pos(static_cast<size_t>(2 * n_kv * slot_stride));
    for (int s = 0; s < 2; ++s)
        for (int h = 0; h < n_kv; ++h)
            for (int t = 0; t < slot_stride; ++t)
                slot_pos[static_cast<size_t>((s * n_kv + h) * slot_stride + t)] =
                    (t == 2 && h == 1) || (t == 9 && s == 0 && h == 0) ? -1 : t;
    const size_t elems = static_cast<size_t>(blocks) * bs * n_kv * hd;
    for (DType dtype : {DType::kF32, DType::kF16}) {
        SCOPED_TRACE(kernels::dtype_name(dtype));
        auto k = test::random_floats(rng, elems, -1.0f, 1.0f);
        auto index = [&](int block, int slot, int h) {
            return ((static_cast<size_t>(block) * bs + slot) * n_kv + h) * hd;
        };
        // Evicted slots and the hole's would-be block hold NaN: reading them would show.
        for (int i = 0; i < hd; ++i) {
            k[index(3, 2, 1) + i] = NAN;  // sequence 0, slot 2, KV head 1
            k[index(1, 2, 1) + i] = NAN;  // sequence 1, slot 2, KV head 1
            k[index(7, 1, 0) + i] = NAN;  // sequence 0, slot 9, KV head 0
        }
        std::vector<uint16_t> k16(elems);
        for (size_t i = 0; i < elems; ++i) {
            k16[i] = float_to_half(k[i]);
            if (dtype == DType::kF16) k[i] = half_to_float(k16[i]);
        }
        auto q = test::random_floats(rng, 3 * n_heads * hd, -2.0f, 2.0f);
        std::vector<int32_t> items;
        for (int r = 0; r < 3; ++r)
            for (int h = 0; h < n_heads; ++h)
                items.insert(items.end(), {r, h});
        const int num_items = static_cast<int>(items.size() / 2);
        DeviceBuffer<float> dk(k), dq(q);
        DeviceBuffer<uint16_t> dk16(k16);
        DeviceBuffer<int32_t> dt(table), ds(row_seq), dsl(row_slot), dp(slot_pos), di(items);
        DeviceBuffer<uint8_t> out(static_cast<size_t>(num_items) * slot_stride);
        kernels::AttentionProbsParams p;
        p.items = di.get();
        p.num_items = num_items;
        p.q = dq.get();
        p.n_heads = n_heads;
        p.cache.k = dtype == DType::kF32 ? static_cast<void*>(dk.get()) : dk16.get();
        p.cache.v = p.cache.k;
        p.cache.dtype = dtype;
        p.cache.num_blocks = blocks;
        p.cache.block_size = bs;
        p.cache.n_kv_heads = n_kv;
        p.cache.head_dim = hd;
        p.tables = {dt.get(), stride};
        p.row_seq = ds.get();
        p.row_slot = dsl.get();
        p.slot_pos = dp.get();
        p.slot_pos_stride = slot_stride;
        p.out = out.get();
        p.out_stride = slot_stride;
        KVSCOPE_CUDA_OK(kernels::attention_probabilities(p, nullptr));
        KVSCOPE_CUDA_OK(cudaDeviceSynchronize());
        const auto got = out.download();
        for (int i = 0; i < num_items; ++i) {
            const int r = items[static_cast<size_t>(2 * i)],
                      h = items[static_cast<size_t>(2 * i + 1)];
            const int s = row_seq[static_cast<size_t>(r)], kvh = h / group;
            const int len = row_slot[static_cast<size_t>(r)] + 1;
            std::vector<double> score(static_cast<size_t>(len), -INFINITY);
            double mx = -INFINITY;
            for (int t = 0; t < len; ++t) {
                const int block = table[static_cast<size_t>(s * stride + t / bs)];
                if (block < 0 ||
                    slot_pos[static_cast<size_t>((s * n_kv + kvh) * slot_stride + t)] < 0)
                    continue;
                double d = 0;
                for (int e = 0; e < hd; ++e)
                    d += double{q[static_cast<size_t>((r * n_heads + h) * hd + e)]} *
                         k[index(block, t % bs, kvh) + e];
                score[static_cast<size_t>(t)] = d / std::sqrt(double{hd});
                mx = std::max(mx, score[static_cast<size_t>(t)]);
            }
            double sum = 0;
            for (double sc : score)
                sum += std::isfinite(sc) ? std::exp(sc - mx) : 0.0;
            for (int t = 0; t < len; ++t) {
                const double prob = std::isfinite(score[static_cast<size_t>(t)])
                                        ? std::exp(score[static_cast<size_t>(t)] - mx) / sum
                                        : 0.0;
                const int want = static_cast<int>(prob * 255.0 + 0.5);
                ASSERT_NEAR(got[static_cast<size_t>(i * slot_stride + t)], want, 1)
                    << "row " << r << ", head " << h << ", slot " << t;
            }
        }
    }
}

}  // namespace
}  // namespace kvscope
