// The matmul is batch- and thread-invariant: every element equals dot() bit for bit.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "engine/cpu_ops.h"
#include "engine/thread_pool.h"

namespace kvscope {
namespace {

TEST(CpuOps, MatmulEqualsDotBitForBitForAnyBatchAndThreads) {
    std::mt19937 rng(3);
    std::normal_distribution<float> dist;
    for (int k : {1, 7, 8, 64, 67}) {
        const int rows = 37;  // prime, so every tile width leaves a tail
        std::vector<float> w(static_cast<size_t>(rows) * k), x(static_cast<size_t>(13) * k);
        for (auto& v : w)
            v = dist(rng);
        for (auto& v : x)
            v = dist(rng);
        Matrix m{w.data(), rows, k};
        for (int threads : {1, 2, 3}) {
            ThreadPool pool(threads);
            for (int n = 1; n <= 13; ++n) {  // two tiles of rows and every remainder
                std::vector<float> out(static_cast<size_t>(n) * rows);
                matmul(pool, x.data(), n, m, out.data());
                for (int r = 0; r < n; ++r)
                    for (int o = 0; o < rows; ++o) {
                        float want =
                            dot(&w[static_cast<size_t>(o) * k], &x[static_cast<size_t>(r) * k], k);
                        float got = out[static_cast<size_t>(r) * rows + o];
                        ASSERT_EQ(std::memcmp(&want, &got, sizeof(float)), 0)
                            << "k=" << k << " n=" << n << " threads=" << threads << " r=" << r
                            << " o=" << o;
                    }
            }
        }
    }
}

TEST(CpuOps, ParallelForCoversEveryIndexOnce) {
    ThreadPool pool(3);
    for (int64_t n : {1, 2, 5, 1000}) {
        std::vector<int> hits(static_cast<size_t>(n), 0);
        pool.parallel_for(n, ThreadPool::kMinParallelWork * 4, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i)
                ++hits[static_cast<size_t>(i)];
        });
        for (int h : hits)
            ASSERT_EQ(h, 1);
    }
}

}  // namespace
}  // namespace kvscope
