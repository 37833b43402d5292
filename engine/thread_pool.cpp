#include "engine/thread_pool.h"

namespace kvscope {

ThreadPool::ThreadPool(int num_threads) {
    for (int i = 1; i < num_threads; ++i)
        workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard lock(mutex_);
        stop_ = true;
    }
    wake_.notify_all();
    for (auto& t : workers_)
        t.join();
}

namespace {
void chunk_of(int64_t n, int parts, int index, int64_t& begin, int64_t& end) {
    begin = n * index / parts;
    end = n * (index + 1) / parts;
}
}  // namespace

void ThreadPool::worker_loop(int index) {
    uint64_t seen = 0;
    for (;;) {
        const std::function<void(int64_t, int64_t)>* job;
        int64_t n;
        {
            std::unique_lock lock(mutex_);
            wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
            if (stop_) return;
            seen = generation_;
            job = job_;
            n = job_n_;
        }
        int64_t begin, end;
        chunk_of(n, num_threads(), index, begin, end);
        if (begin < end) (*job)(begin, end);
        if (pending_.fetch_sub(1) == 1) {
            std::lock_guard lock(mutex_);
            done_.notify_one();
        }
    }
}

void ThreadPool::parallel_for(int64_t n, int64_t cost,
                              const std::function<void(int64_t, int64_t)>& fn) {
    if (n <= 0) return;
    if (workers_.empty() || cost < kMinParallelWork || n == 1) {
        fn(0, n);
        return;
    }
    {
        std::lock_guard lock(mutex_);
        job_ = &fn;
        job_n_ = n;
        pending_.store(static_cast<int>(workers_.size()));
        ++generation_;
    }
    wake_.notify_all();
    int64_t begin, end;
    chunk_of(n, num_threads(), 0, begin, end);
    if (begin < end) fn(begin, end);
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return pending_.load() == 0; });
}

}  // namespace kvscope
