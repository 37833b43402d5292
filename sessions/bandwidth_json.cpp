#include "sessions/bandwidth_json.h"

#include <algorithm>
#include <cmath>

namespace kvscope {

nlohmann::json bandwidth_to_json(const MemoryBandwidth& bw) {
    return {{"read_1_gbps", bw.read_1_gbps},
            {"copy_1_gbps", bw.copy_1_gbps},
            {"read_all_gbps", bw.read_all_gbps},
            {"copy_all_gbps", bw.copy_all_gbps},
            {"threads_all", bw.threads_all},
            {"buffer_bytes", bw.buffer_bytes},
            {"cpu", bw.cpu}};
}

MemoryBandwidth bandwidth_from_json(const nlohmann::json& j) {
    MemoryBandwidth bw;
    if (!j.is_object()) return bw;
    auto gbps = [&](const char* key) {
        auto it = j.find(key);
        if (it == j.end() || !it->is_number()) return 0.0;
        double v = it->get<double>();
        return std::isfinite(v) && v > 0 && v < 1e5 ? v : 0.0;
    };
    bw.read_1_gbps = gbps("read_1_gbps");
    bw.copy_1_gbps = gbps("copy_1_gbps");
    bw.read_all_gbps = gbps("read_all_gbps");
    bw.copy_all_gbps = gbps("copy_all_gbps");
    auto count = [&](const char* key, double most) {
        auto it = j.find(key);
        return it != j.end() && it->is_number() ? std::clamp(it->get<double>(), 0.0, most) : 0.0;
    };
    bw.threads_all = static_cast<int32_t>(count("threads_all", 65536));
    bw.buffer_bytes = static_cast<int64_t>(count("buffer_bytes", 1e15));
    if (auto it = j.find("cpu"); it != j.end() && it->is_string()) bw.cpu = it->get<std::string>();
    return bw;
}

}  // namespace kvscope
