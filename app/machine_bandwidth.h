#pragma once
// This machine's memory bandwidth, measured once and kept in
// $XDG_CACHE_HOME/kvscope/memory-bandwidth.json (~/.cache/kvscope/ without it), keyed by the
// CPU model and core count: recordings carry it so each step's bandwidth can be judged against
// the machine that ran it.

#include <string>

#include "probes/memory_bandwidth.h"

namespace kvscope::app {

std::string bandwidth_cache_path();  // "" when neither XDG_CACHE_HOME nor HOME is set

// The cached figures when they are this machine's, else a fresh measurement (a note on stderr;
// about a second), written back to the cache when it can be. A corrupt or foreign cache is
// measured over, never trusted.
MemoryBandwidth machine_bandwidth();

// Writes `bw` to the cache (a failure is only a note: the cache is a convenience).
void save_machine_bandwidth(const MemoryBandwidth& bw);

}  // namespace kvscope::app
