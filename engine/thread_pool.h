#pragma once
// A fixed set of worker threads for data-parallel loops. parallel_for splits [0, n) into
// contiguous chunks, one per thread, and returns when all are done. Work that is too small to
// pay for waking threads runs inline. Workers and the caller spin briefly before sleeping:
// decode calls parallel_for dozens of times per token, and a futex wake-up per call cost more
// than the matmuls (2 threads ran 3.5x slower than 1 on a 2-core VM before the spin).

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kvscope {

class ThreadPool {
  public:
    explicit ThreadPool(int num_threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int num_threads() const { return static_cast<int>(workers_.size()) + 1; }
    // fn(begin, end) over [0, n). `cost` estimates the work in multiply-adds; below
    // kMinParallelWork the loop runs on the calling thread.
    void parallel_for(int64_t n, int64_t cost, const std::function<void(int64_t, int64_t)>& fn);

    static constexpr int64_t kMinParallelWork = 1 << 16;
    // Polls of an atomic before falling back to the condition variable (tens of microseconds).
    static constexpr int kSpinPolls = 1 << 14;

  private:
    void worker_loop(int index);

    std::vector<std::thread> workers_;
    std::mutex mutex_;
    std::condition_variable wake_, done_;
    const std::function<void(int64_t, int64_t)>* job_ = nullptr;
    int64_t job_n_ = 0;
    std::atomic<uint64_t> generation_{0};
    std::atomic<int> pending_{0};
    bool stop_ = false;
};

}  // namespace kvscope
