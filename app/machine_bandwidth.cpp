#include "app/machine_bandwidth.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/input_file.h"
#include "base/json_input.h"
#include "base/output_file.h"
#include "base/terminal_text.h"
#include "sessions/bandwidth_json.h"

namespace kvscope::app {

namespace {
// Larger is not a cache file of ours.
constexpr size_t kMaxCacheBytes = 64 * 1024;

int32_t cores() {
    return static_cast<int32_t>(std::max(1u, std::thread::hardware_concurrency()));
}
}  // namespace

std::string bandwidth_cache_path() {
    std::string dir;
    if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x)
        dir = x;
    else if (const char* h = std::getenv("HOME"); h && *h)
        dir = std::string(h) + "/.cache";
    else
        return "";
    return dir + "/kvscope/memory-bandwidth.json";
}

void save_machine_bandwidth(const MemoryBandwidth& bw) {
    const std::string path = bandwidth_cache_path();
    if (path.empty()) return;
    std::error_code ec;
    // Something other than a file there (a FIFO would block the write): leave it be.
    if (std::filesystem::exists(path, ec) && !std::filesystem::is_regular_file(path, ec)) {
        std::fprintf(stderr, "kvscope: note: %s is not a file; the bandwidth is not kept\n",
                     terminal_safe(path).c_str());
        return;
    }
    std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
    nlohmann::json j = bandwidth_to_json(bw);
    j["cores"] = cores();
    if (Status s = write_output_file(path, j.dump(1) + "\n", {.force = true}); !s)
        std::fprintf(stderr, "kvscope: note: cannot keep the bandwidth measurement: %s\n",
                     terminal_safe(s.error().message).c_str());
}

MemoryBandwidth machine_bandwidth() {
    const std::string path = bandwidth_cache_path();
    const std::string cpu = cpu_model_name();
    std::error_code ec;
    if (!path.empty() && std::filesystem::exists(path, ec)) {
        auto text = read_input_file(path, "bandwidth cache", kMaxCacheBytes);
        auto j = text ? parse_json(text.value()) : Result<nlohmann::json>(text.error());
        if (j && j->is_object() && j->value("cpu", nlohmann::json()) == cpu &&
            j->value("cores", nlohmann::json()) == cores()) {
            MemoryBandwidth bw = bandwidth_from_json(*j);
            // Every figure there and plausible, or none is used.
            if (bw.read_1_gbps > 0 && bw.copy_1_gbps > 0 && bw.read_all_gbps > 0 &&
                bw.copy_all_gbps > 0)
                return bw;
        }
    }
    std::fprintf(stderr, "kvscope: measuring this machine's memory bandwidth (once; kept in %s)\n",
                 path.empty() ? "nowhere: no HOME" : terminal_safe(path).c_str());
    MemoryBandwidth bw = measure_memory_bandwidth();
    save_machine_bandwidth(bw);
    return bw;
}

}  // namespace kvscope::app
