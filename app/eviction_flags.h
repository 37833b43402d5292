#pragma once
// The token-eviction flags of generate, run, gui and eval: --policy, --kv-budget, --sinks,
// --window, --layer-budget.

#include <CLI/CLI.hpp>
#include <memory>
#include <string>

#include "engine/kv_eviction.h"

namespace kvscope::app {

struct EvictionFlags {
    std::string policy = "none";
    std::string kv_budget;  // "N" tokens or "P%" of the sequence so far
    int32_t sinks = 4;
    int32_t window = -1;
    std::string layer_budget = "uniform";
    bool compact = false;

    // Null for --policy none; else the evictor, or a message naming the flag that is wrong.
    Result<std::shared_ptr<const KvEvictor>> evictor(int32_t n_layers) const;
    Result<EvictionOptions> options() const;
};

void add_eviction_flags(CLI::App& sub, EvictionFlags& flags);

}  // namespace kvscope::app
