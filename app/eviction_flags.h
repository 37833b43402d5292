#pragma once
// The flags of storing less, on generate, run and gui: token eviction (--policy, --kv-budget,
// --sinks, --window, --layer-budget, --compact, --positions) and the KV dtype (--kv-dtype).

#include <CLI/CLI.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "engine/kv_eviction.h"
#include "engine/kv_quant.h"

namespace kvscope::app {

struct EvictionFlags {
    std::string policy = "none";
    std::string kv_budget;  // "N" tokens or "P%" of the sequence so far
    int32_t sinks = 4;
    int32_t window = -1;
    std::string layer_budget = "uniform";
    bool compact = false;
    std::string positions;  // "cache" | "absolute"; empty: the policy's default
    std::string kv_dtype = "f32";

    // The dtype, or a message; --compact cannot move int4 keys (grouped over a block).
    Result<KvDtype> dtype() const;

    // Null for --policy none; else the evictor, or a message naming the flag that is wrong.
    Result<std::shared_ptr<const KvEvictor>> evictor(int32_t n_layers) const;
    Result<EvictionOptions> options() const;
    // The flags as a JSON object, recorded with sessions (with the serving flags, the
    // window's workload...).
    nlohmann::json to_json() const;
};

void add_eviction_flags(CLI::App& sub, EvictionFlags& flags);

}  // namespace kvscope::app
