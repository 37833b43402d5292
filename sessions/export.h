#pragma once
// Exports a session into formats other tools open: Chrome/Perfetto trace-event JSON (steps,
// phases, host ops, a GPU's kernels on a track per stream, counter tracks, the GPU's DRAM
// bandwidth from its PM samples among them) and CSV of the per-step metrics.

#include <ostream>

#include "base/result.h"

namespace kvscope {

class SessionReader;

// Each writes its whole document to `out`; the caller decides where that goes (an OutputFile).
Status export_perfetto(SessionReader& reader, std::ostream& out);
Status export_csv(SessionReader& reader, std::ostream& out);

}  // namespace kvscope
