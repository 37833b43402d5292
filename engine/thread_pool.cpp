#include "engine/thread_pool.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace kvscope {

namespace {
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#endif
}
// Polls `ready` up to `polls` times; true as soon as it holds.
template <class Ready>
bool spin_until(Ready ready, int polls) {
    for (int i = 0; i < polls; ++i) {
        if (ready()) return true;
        cpu_relax();
    }
    return false;
}
}  // namespace

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
        spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; }, kSpinPolls);
        {
            std::unique_lock lock(mutex_);
            wake_.wait(lock, [&] { return stop_ || generation_.load() != seen; });
            if (stop_) return;
            seen = generation_.load();
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
        generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    int64_t begin, end;
    chunk_of(n, num_threads(), 0, begin, end);
    if (begin < end) fn(begin, end);
    if (spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; }, kSpinPolls))
        return;
    std::unique_lock lock(mutex_);
    done_.wait(lock, [&] { return pending_.load() == 0; });
}

}  // namespace kvscope
