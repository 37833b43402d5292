#pragma once
// The flags of storing less, on generate, run and gui: token eviction (--policy, --kv-budget,
// --sinks, --window, --window-aggregate, --layer-budget, --no-compact, --positions) and the KV
// dtype (--kv-dtype, and per layer --kv-dtype-layers); and storing nothing (--kv-cache off). A
// policy's holes are closed after every step unless --no-compact: holes scattered over blocks kept
// 0.8 of the full cache's blocks at a 25% budget. --compact, the default now, is still accepted so
// that scripts written for it keep working.

#include <CLI/CLI.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/kv_eviction.h"
#include "engine/kv_quant.h"

namespace kvscope::app {

struct EvictionFlags {
    std::string policy = "none";
    std::string kv_budget;  // "N" tokens or "P%" of the sequence so far
    int32_t sinks = 4;
    int32_t window = -1;
    std::string window_aggregate = "max";
    std::string layer_budget = "uniform";
    bool compact = false;     // --compact given: the default, refused where it cannot be done
    bool no_compact = false;  // --no-compact: keep the holes (to look at them in the block map)
    std::string positions;    // "cache" | "absolute"; empty: the policy's default
    std::string kv_dtype = "f32";               // a dtype, or mixed:HI/LO:P%
    std::string kv_dtype_layers;                // "0-1:int8,2-5:int2"; empty: every layer kv_dtype
    int32_t merge_layers = -1;                  // --merge-layers FROM; -1: no merging
    double merge_distance = kMergeMaxDistance;  // --merge-distance
    std::string kv_cache = "on";                // off: every step recomputes the whole text

    // Whether holes are closed: unless --no-compact, and never where a layer is int4 or int2,
    // whose keys are quantized together per block and cannot move one by one.
    bool compacts() const;
    bool cache_off() const { return kv_cache == "off"; }
    // The dtype of the layers --kv-dtype-layers does not name (mixed: its high dtype), or a
    // message; checks the schedule's form too, that --compact is not asked of int4 / int2 keys,
    // and what --merge-layers cannot go with.
    Result<KvDtype> dtype() const;
    // --kv-dtype mixed:HI/LO:P% parsed; none for a plain dtype.
    Result<std::optional<KvMixed>> mixed() const;
    // The low tier the storage keeps (EngineOptions::kv_low): mixed's LO, or none.
    std::optional<KvDtype> kv_low() const;
    // One dtype per layer for a model of `n_layers`, or empty without --kv-dtype-layers; a
    // message if a range goes past the model's layers.
    Result<std::vector<KvDtype>> layer_dtypes(int32_t n_layers) const;

    // Null for --policy none; else the evictor, or a message naming the flag that is wrong.
    Result<std::shared_ptr<const KvEvictor>> evictor(int32_t n_layers) const;
    Result<EvictionOptions> options() const;
    // Why these flags cannot run on the contiguous allocator (they all act on a sequence's
    // lanes, kept with its paged blocks), naming the flag that asks for them.
    std::string needs_paged_allocator() const;
    // The flags as a JSON object, recorded with sessions (with the serving flags, the
    // window's workload...).
    nlohmann::json to_json() const;

  private:
    // --kv-dtype-layers parsed; none without it.
    Result<std::vector<KvDtypeRange>> dtype_ranges() const;
};

void add_eviction_flags(CLI::App& sub, EvictionFlags& flags);

// --window-aggregate's value as the engine's; the message names the flag.
Result<WindowAggregate> parse_window_aggregate(const std::string& text);
// --compact and --no-compact against each other and the dtypes of a setting's layers: the
// compaction it gets.
Result<bool> compaction_for(bool compact, bool no_compact, const std::vector<KvDtype>& dtypes);
// --kv-dtype's value: a dtype, or mixed:HI/LO:P% (then `mixed` gets it and HI is returned); the
// message names the flag. A mixed value beside a --kv-dtype-layers schedule is refused.
Result<KvDtype> parse_kv_dtype_flag(const std::string& text, bool with_layers,
                                    std::optional<KvMixed>& mixed);
// --merge-layers FROM against what a setting stores: only dtypes whose tokens are written one by
// one (f32, f16, int8), and not mixed, can be rewritten with a shared direction.
Status check_merge_layers(int32_t from, const std::vector<KvDtype>& dtypes, bool mixed);
// --kv-dtype-layers parsed, and the dtypes a setting stores in: `others` and the schedule's.
Result<std::vector<KvDtypeRange>> parse_kv_dtype_layers_flag(const std::string& text);
std::vector<KvDtype> dtypes_in(KvDtype others, const std::vector<KvDtypeRange>& ranges);
// --kv-dtype-layers' help, shared with eval.
extern const char* const kKvDtypeLayersHelp;
// --kv-dtype's and --merge-layers' help, shared with eval.
extern const char* const kKvDtypeHelp;
extern const char* const kMergeLayersHelp;
extern const char* const kMergeDistanceHelp;

// The help of the flags eval shares with generate, run and gui.
extern const char* const kWindowHelp;
extern const char* const kWindowAggregateHelp;
extern const char* const kNoCompactHelp;
extern const char* const kCompactHelp;

}  // namespace kvscope::app
