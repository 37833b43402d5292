#pragma once
// `kvscope bench gpu --decode`: end-to-end decode tokens/s on the CUDA engine backend at several
// batch sizes and context lengths, against the bound the copy bandwidth sets; with
// --probe-overhead, the same decode with the GPU probes off, tracing, and tracing while sampling
// DRAM, alternated over rounds, and the DRAM bytes the samples counted against the bytes the
// steps must move. Defined in CUDA builds only (KVSCOPE_HAVE_CUDA).

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace kvscope::app {

struct DecodeBenchOptions {
    std::string model;
    std::vector<int> batches, contexts;
    int steps = 32;
    bool json = false;
    // Rounds of (off, trace, trace + DRAM sampling) at the first batch and context; 0: none.
    int probe_rounds = 0;
};

// Prints a table, or with `json` sets (*out)["decode"] (and ["probe_overhead"]). Returns the
// exit status; failures are said in one line.
int run_decode_bench(const DecodeBenchOptions& o, int device, double copy_gbps,
                     nlohmann::json* out);

}  // namespace kvscope::app
