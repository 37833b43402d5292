// The thread pool under every kernel.
#include <gtest/gtest.h>

#include <vector>

#include "engine/thread_pool.h"

namespace kvscope {
namespace {

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
