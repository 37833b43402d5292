#pragma once
// The machine's memory bandwidth, measured as STREAM does: a read (sum) and a copy loop over
// buffers well past the last-level cache, on one thread and on all of them, best of a few
// passes. A decode step reads every weight and the whole KV cache once, so this is the limit a
// step's achieved bandwidth is judged against.

#include <cstdint>
#include <string>

namespace kvscope {

struct MemoryBandwidth {
    double read_1_gbps = 0, copy_1_gbps = 0;      // one thread
    double read_all_gbps = 0, copy_all_gbps = 0;  // `threads_all` threads
    int32_t threads_all = 0;
    int64_t buffer_bytes = 0;  // each buffer (copy uses two)
    std::string cpu;           // model name, as /proc/cpuinfo says it
    bool known() const { return read_1_gbps > 0; }
    // The limit for a run on `threads` threads: read bandwidth, since decode mostly reads.
    double limit_gbps(int32_t threads) const {
        return threads > 1 && read_all_gbps > 0 ? read_all_gbps : read_1_gbps;
    }
};

struct BandwidthOptions {
    int32_t threads = 0;       // 0: every core
    int64_t buffer_bytes = 0;  // 0: 4x the last-level cache, at least 128 MiB
    int32_t passes = 5;        // best of
};

// Measures; takes a fraction of a second. Allocates two buffers of buffer_bytes.
MemoryBandwidth measure_memory_bandwidth(const BandwidthOptions& options = {});

// The CPU's model name and the last-level cache size (0 when unknown), from /proc and /sys.
std::string cpu_model_name();
int64_t last_level_cache_bytes();

}  // namespace kvscope
