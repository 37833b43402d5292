#pragma once
// Exports a session into formats other tools open: Chrome/Perfetto trace-event JSON (steps,
// phases, kernels, counter tracks) and CSV of the per-step metrics.

#include <string>

#include "probes/result.h"

namespace kvscope {

class SessionReader;

Status export_perfetto(SessionReader& reader, const std::string& out_path);
Status export_csv(SessionReader& reader, const std::string& out_path);

}  // namespace kvscope
