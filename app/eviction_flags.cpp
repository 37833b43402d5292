#include "app/eviction_flags.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "app/number_flag.h"
#include "base/terminal_text.h"

namespace kvscope::app {

const char* const kWindowHelp =
    "h2o / snapkv / morphkv: recent tokens always kept (default: half the budget for h2o, the "
    "32-token observation window for snapkv, 32 but at most half the budget for morphkv, whose "
    "window's queries rank the older tokens)";
const char* const kWindowAggregateHelp =
    "morphkv: an older token's score from the window's queries: max (the most attention any one "
    "gave it; MorphKV's choice for long responses) or sum (its choice for long inputs)";
const char* const kNoCompactHelp =
    "Keep a policy's holes instead of moving kept tokens into them after each step (to look at "
    "them in the block map); they keep most blocks allocated. int4 and int2 always keep them";
const char* const kKvDtypeLayersHelp =
    "A KV dtype per layer range, e.g. 0-1:int8,2-5:int2 (MiniKV: early layers more bits); "
    "layers not named keep --kv-dtype";
const char* const kKvDtypeHelp =
    "How K and V are stored: f32 | f16 | int8 (per token and head) | int4 or int2 (KIVI: keys "
    "per channel, values per token) | mixed:HI/LO:P% (ZipCache: in each layer and KV head the "
    "P% of tokens with the highest normalized attention stay in HI, the rest go to LO, decided "
    "every block of tokens; HI f32, f16 or int8, e.g. mixed:int8/int2:20%)";
const char* const kMergeLayersHelp =
    "MiniCache: from layer FROM on, adjacent layer pairs (FROM, FROM+1), (FROM+2, FROM+3)... "
    "share one SLERP direction (t = 0.6) per token and KV head, each layer keeping its norm; "
    "tokens whose directions are further apart than --merge-distance stay unmerged. f32, f16 or "
    "int8, no --policy";
const char* const kMergeDistanceHelp =
    "--merge-layers: the angular distance (arccos of the cosine over pi: 0 the same direction, "
    "0.5 orthogonal, 1 opposite) past which a token's K or V keeps its layers apart";
const char* const kCompactHelp =
    "Close a policy's holes after each step: the default now, accepted so that scripts keep "
    "working";

Result<WindowAggregate> parse_window_aggregate(const std::string& text) {
    if (text == "max") return WindowAggregate::kMax;
    if (text == "sum") return WindowAggregate::kSum;
    return Error{"--window-aggregate " + quote_for_message(text) + " must be max or sum"};
}

Result<bool> compaction_for(bool compact, bool no_compact, const std::vector<KvDtype>& dtypes) {
    if (compact && no_compact)
        return Error{
            "--compact and --no-compact contradict each other: compaction is the "
            "default, give --no-compact alone to keep the holes"};
    auto grouped = std::find_if(dtypes.begin(), dtypes.end(), kv_keys_grouped_per_block);
    if (compact && grouped != dtypes.end())
        return Error{std::string("--compact cannot move ") + kv_dtype_name(*grouped) +
                     " keys: they are quantized together per block"};
    return !no_compact && grouped == dtypes.end();
}

Result<KvDtype> parse_kv_dtype_flag(const std::string& text, bool with_layers,
                                    std::optional<KvMixed>& mixed) {
    mixed.reset();
    if (!is_kv_mixed(text)) {
        auto d = parse_kv_dtype(text);
        if (!d) return Error{"--kv-dtype: " + d.error().message};
        return d;
    }
    auto m = parse_kv_mixed(text);
    if (!m) return Error{"--kv-dtype " + m.error().message};
    if (with_layers)
        return Error{"--kv-dtype " + quote_for_message(text) +
                     " cannot go with --kv-dtype-layers: mixed precision chooses per token, a "
                     "schedule per layer (give one of them)"};
    mixed = *m;
    return m->hi;
}

Status check_merge_layers(int32_t from, const std::vector<KvDtype>& dtypes, bool mixed) {
    if (from < 0) return {};
    if (mixed)
        return Error{
            "--merge-layers cannot go with --kv-dtype mixed: a merged token's direction "
            "is stored once for two layers, in one precision"};
    for (KvDtype d : dtypes)
        if (kv_keys_grouped_per_block(d))
            return Error{std::string("--merge-layers cannot rewrite ") + kv_dtype_name(d) +
                         " keys: they are quantized together per block (give f32, f16 or int8)"};
    return {};
}

Result<std::vector<KvDtypeRange>> parse_kv_dtype_layers_flag(const std::string& text) {
    auto ranges = parse_kv_dtype_layers(text);
    if (!ranges) return Error{"--kv-dtype-layers: " + ranges.error().message};
    return ranges;
}

std::vector<KvDtype> dtypes_in(KvDtype others, const std::vector<KvDtypeRange>& ranges) {
    std::vector<KvDtype> dtypes = {others};
    for (const KvDtypeRange& r : ranges)
        dtypes.push_back(r.dtype);
    return dtypes;
}

Result<std::vector<KvDtypeRange>> EvictionFlags::dtype_ranges() const {
    if (kv_dtype_layers.empty()) return std::vector<KvDtypeRange>();
    return parse_kv_dtype_layers_flag(kv_dtype_layers);
}

bool EvictionFlags::compacts() const {
    auto d = dtype();
    auto ranges = dtype_ranges();
    if (!d || !ranges) return false;
    auto c = compaction_for(false, no_compact, dtypes_in(*d, *ranges));
    return c && *c;
}

Result<EvictionOptions> EvictionFlags::options() const {
    EvictionOptions o;
    o.policy = policy;
    o.sinks = sinks;
    o.window = window;
    o.layer_budget = layer_budget == "pyramid" ? LayerBudget::kPyramid : LayerBudget::kUniform;
    if (!positions.empty()) {
        auto mode = parse_position_mode(positions);
        if (!mode) return mode.error();
        o.positions = *mode;
    }
    if (compact && !o.active())
        return Error{"--compact needs a --policy: with none there are no holes to close"};
    if (no_compact && !o.active())
        return Error{"--no-compact needs a --policy: with none there are no holes to keep"};
    auto aggregate = parse_window_aggregate(window_aggregate);
    if (!aggregate) return aggregate.error();
    o.window_aggregate = *aggregate;
    if (!kv_budget.empty()) {
        if (!o.active()) return Error{"--kv-budget needs a --policy to keep the cache within it"};
        if (Status s = parse_kv_budget(kv_budget, o); !s) return s.error();
    }
    if (Status s = validate_eviction_options(o); !s) return s.error();
    auto d = dtype();
    if (!d) return d.error();
    if (cache_off() && o.active())
        return Error{"--kv-cache off keeps no tokens for --policy " + policy + " to evict"};
    if (cache_off() && merge_layers >= 0)
        return Error{"--kv-cache off keeps no K/V between steps for --merge-layers to merge"};
    if (cache_off() && (*d != KvDtype::kF32 || !kv_dtype_layers.empty() || is_kv_mixed(kv_dtype)))
        return Error{
            "--kv-cache off stores no K/V between steps: a --kv-dtype has nothing to "
            "quantize"};
    o.compact = compacts();
    o.mixed = *mixed();  // checked by dtype()
    o.merge_from = merge_layers;
    o.merge_max_distance = merge_distance;
    if (Status s = validate_eviction_options(o); !s) return s.error();
    return o;
}

std::string EvictionFlags::needs_paged_allocator() const {
    const std::string what = policy != "none"    ? "--policy " + policy
                             : merge_layers >= 0 ? std::string("--merge-layers")
                                                 : "--kv-dtype " + kv_dtype;
    return what +
           " needs the paged allocator: a contiguous reservation has no blocks to give "
           "back, nor lanes to keep";
}

nlohmann::json EvictionFlags::to_json() const {
    return nlohmann::json{
        {"policy", policy},
        {"kv_budget", kv_budget},
        {"sinks", sinks},
        {"window", window},
        {"window_aggregate", window_aggregate},
        {"layer_budget", layer_budget},
        {"compact", compacts()},
        // What RoPE did, also when the policy's default chose it.
        {"positions",
         positions.empty() ? (policy == "streaming" ? "cache" : "absolute") : positions},
        {"kv_dtype", kv_dtype},
        {"kv_dtype_layers", kv_dtype_layers},
        {"merge_layers", merge_layers},
        {"merge_distance", merge_distance},
        {"kv_cache", kv_cache}};
}

Result<KvDtype> EvictionFlags::dtype() const {
    std::optional<KvMixed> m;
    auto d = parse_kv_dtype_flag(kv_dtype, !kv_dtype_layers.empty(), m);
    if (!d) return d.error();
    auto ranges = dtype_ranges();
    if (!ranges) return ranges.error();
    const std::vector<KvDtype> dtypes = dtypes_in(*d, *ranges);
    if (auto c = compaction_for(compact, no_compact, dtypes); !c) return c.error();
    if (Status s = check_merge_layers(merge_layers, dtypes, m.has_value()); !s) return s.error();
    return d;
}

Result<std::optional<KvMixed>> EvictionFlags::mixed() const {
    std::optional<KvMixed> m;
    auto d = parse_kv_dtype_flag(kv_dtype, !kv_dtype_layers.empty(), m);
    if (!d) return d.error();
    return m;
}

std::optional<KvDtype> EvictionFlags::kv_low() const {
    auto m = mixed();
    if (!m || !*m) return std::nullopt;
    return (*m)->lo;
}

Result<std::vector<KvDtype>> EvictionFlags::layer_dtypes(int32_t n_layers) const {
    auto d = dtype();
    if (!d) return d.error();
    if (kv_dtype_layers.empty()) return std::vector<KvDtype>();
    auto per_layer = kv_dtypes_per_layer(*dtype_ranges(), *d, n_layers);  // checked by dtype()
    if (!per_layer) return Error{"--kv-dtype-layers: " + per_layer.error().message};
    return per_layer;
}

Result<std::shared_ptr<const KvEvictor>> EvictionFlags::evictor(int32_t n_layers) const {
    auto o = options();
    if (!o) return o.error();
    if (!o->stores_less()) return std::shared_ptr<const KvEvictor>();
    auto e = KvEvictor::create(*o, n_layers);
    if (!e) return e.error();
    return std::shared_ptr<const KvEvictor>(std::move(e).value());
}

void add_eviction_flags(CLI::App& sub, EvictionFlags& f) {
    std::vector<std::string> policies = {"none"};
    for (const std::string& p : eviction_policy_names())
        policies.push_back(p);
    sub.add_option("--policy", f.policy,
                   "Token eviction: none | streaming | h2o | snapkv | tova | knorm | morphkv")
        ->check(CLI::IsMember(policies))
        ->capture_default_str();
    sub.add_option("--kv-budget", f.kv_budget,
                   "Tokens each layer and KV head keeps: N, or P% of the sequence so far");
    sub.add_option("--sinks", f.sinks, "streaming: first tokens always kept")
        ->check(CLI::Range(0, 1 << 20))
        ->capture_default_str();
    sub.add_option("--window", f.window, kWindowHelp)->check(CLI::Range(0, 1 << 20));
    sub.add_option("--window-aggregate", f.window_aggregate, kWindowAggregateHelp)
        ->check(CLI::IsMember({"max", "sum"}))
        ->capture_default_str();
    sub.add_option("--layer-budget", f.layer_budget,
                   "uniform, or pyramid (lower layers keep more; the same total)")
        ->check(CLI::IsMember({"uniform", "pyramid"}))
        ->capture_default_str();
    sub.add_option("--kv-dtype", f.kv_dtype, kKvDtypeHelp)->capture_default_str();
    sub.add_option("--merge-layers", f.merge_layers, kMergeLayersHelp)
        ->check(CLI::Range(0, 1 << 20));
    sub.add_option("--merge-distance", f.merge_distance, kMergeDistanceHelp)
        ->check(finite_number(0, 1))
        ->capture_default_str();
    sub.add_option("--kv-dtype-layers", f.kv_dtype_layers, kKvDtypeLayersHelp);
    sub.add_option("--positions", f.positions,
                   "Where RoPE puts the kept tokens: cache (their places in the cache, as "
                   "StreamingLLM; the default for streaming) | absolute (their positions in the "
                   "text; the default for the other policies)")
        ->check(CLI::IsMember({"cache", "absolute"}));
    sub.add_option("--kv-cache", f.kv_cache,
                   "off: keep no K/V between steps, so each step runs the whole text so far "
                   "through the model again (what a KV cache saves; one sequence)")
        ->check(CLI::IsMember({"on", "off"}))
        ->capture_default_str();
    sub.add_flag("--no-compact", f.no_compact, kNoCompactHelp);
    sub.add_flag("--compact", f.compact, kCompactHelp);
}

}  // namespace kvscope::app
