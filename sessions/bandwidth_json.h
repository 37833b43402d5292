#pragma once
// A machine's memory bandwidth as JSON, one form for a session's run info, the bandwidth cache
// and `bench memory --json`. Reading takes any object: figures outside (0, 100 TB/s) read as
// unknown (0) rather than being drawn as a limit, and a field of the wrong type throws
// nlohmann::json's type_error for the caller to report.

#include <nlohmann/json.hpp>

#include "probes/memory_bandwidth.h"

namespace kvscope {

nlohmann::json bandwidth_to_json(const MemoryBandwidth& bw);
MemoryBandwidth bandwidth_from_json(const nlohmann::json& j);

}  // namespace kvscope
