#include "probes/memory_bandwidth.h"

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cstring>
#include <fstream>
#include <memory>
#include <thread>
#include <vector>

namespace kvscope {

namespace {

using Clock = std::chrono::steady_clock;

// Sum of 64-bit words with eight accumulators, so the loop is bound by loads, not by one
// dependency chain; returned so the compiler cannot drop it.
uint64_t read_words(const uint64_t* p, size_t n) {
    uint64_t a[8] = {};
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; ++k)
            a[k] += p[i + static_cast<size_t>(k)];
    for (; i < n; ++i)
        a[0] += p[i];
    uint64_t s = 0;
    for (uint64_t v : a)
        s += v;
    return s;
}

// One timed pass of `work` over [0, words) split across `threads` threads (each touches its own
// contiguous part); returns the seconds from the first thread's start to the last one's end,
// taken by the workers themselves (a caller preempted between barriers would misread it).
template <class Work>
double timed_pass(int threads, size_t words, Work work) {
    if (threads <= 1) {
        auto t0 = Clock::now();
        work(size_t{0}, words);
        return std::chrono::duration<double>(Clock::now() - t0).count();
    }
    std::barrier start(threads);
    std::vector<Clock::time_point> began(static_cast<size_t>(threads)),
        ended(static_cast<size_t>(threads));
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
        pool.emplace_back([&, t] {
            size_t lo = words * static_cast<size_t>(t) / static_cast<size_t>(threads);
            size_t hi = words * static_cast<size_t>(t + 1) / static_cast<size_t>(threads);
            start.arrive_and_wait();
            began[static_cast<size_t>(t)] = Clock::now();
            work(lo, hi);
            ended[static_cast<size_t>(t)] = Clock::now();
        });
    for (std::thread& th : pool)
        th.join();
    return std::chrono::duration<double>(*std::max_element(ended.begin(), ended.end()) -
                                         *std::min_element(began.begin(), began.end()))
        .count();
}

std::atomic<uint64_t> g_sink{0};

}  // namespace

std::string cpu_model_name() {
    std::ifstream in("/proc/cpuinfo");
    for (std::string line; std::getline(in, line);)
        if (line.rfind("model name", 0) == 0) {
            auto colon = line.find(':');
            if (colon == std::string::npos) break;
            std::string name = line.substr(colon + 1);
            name.erase(0, name.find_first_not_of(" \t"));
            return name.substr(0, 200);
        }
    return "unknown CPU";
}

int64_t last_level_cache_bytes() {
    int64_t best = 0;
    for (int index = 0; index < 8; ++index) {
        std::ifstream in("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) +
                         "/size");
        std::string size;
        if (!(in >> size) || size.empty()) continue;
        char unit = size.back();
        int64_t v = 0;
        for (char ch : size) {
            if (ch < '0' || ch > '9') break;
            v = v * 10 + (ch - '0');
            if (v > (int64_t{1} << 40)) break;
        }
        if (unit == 'K') v <<= 10;
        if (unit == 'M') v <<= 20;
        best = std::max(best, v);
    }
    return best;
}

MemoryBandwidth measure_memory_bandwidth(const BandwidthOptions& options) {
    MemoryBandwidth out;
    out.cpu = cpu_model_name();
    int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    out.threads_all = options.threads > 0 ? options.threads : hw;
    int64_t bytes = options.buffer_bytes;
    if (bytes <= 0) bytes = std::max<int64_t>(4 * last_level_cache_bytes(), int64_t{128} << 20);
    const size_t words = static_cast<size_t>(bytes) / sizeof(uint64_t);
    out.buffer_bytes = static_cast<int64_t>(words * sizeof(uint64_t));
    std::unique_ptr<uint64_t[]> src(new uint64_t[words]), dst(new uint64_t[words]);
    // Touch every page first: faulting them in is not bandwidth.
    for (size_t i = 0; i < words; ++i)
        src[i] = i;
    std::memset(dst.get(), 0, words * sizeof(uint64_t));
    const int passes = std::max(1, options.passes);
    auto best = [&](int threads, auto work) {
        double fastest = 1e30;
        for (int p = 0; p < passes; ++p)
            fastest = std::min(fastest, timed_pass(threads, words, work));
        return fastest;
    };
    auto read = [&](size_t lo, size_t hi) { g_sink += read_words(src.get() + lo, hi - lo); };
    auto copy = [&](size_t lo, size_t hi) {
        std::memcpy(dst.get() + lo, src.get() + lo, (hi - lo) * sizeof(uint64_t));
        g_sink += dst[lo];
    };
    const double b = static_cast<double>(out.buffer_bytes);
    out.read_1_gbps = b / best(1, read) / 1e9;
    out.copy_1_gbps = 2 * b / best(1, copy) / 1e9;  // STREAM counts the read and the write
    out.read_all_gbps = b / best(out.threads_all, read) / 1e9;
    out.copy_all_gbps = 2 * b / best(out.threads_all, copy) / 1e9;
    return out;
}

}  // namespace kvscope
