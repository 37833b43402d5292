// `kvscope eval`: what storing less costs in quality. One row per setting (eviction policy,
// budget, KV dtype), the full cache first: perplexity of held-out text scored as decode under
// the setting, agreement of its greedy tokens with the full cache's, the most K/V bytes one
// sequence held, and the tokens evicted. With --stream: the text fed token by token under each
// setting past the model's context (StreamingLLM's evaluation), perplexity per window of it.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "app/backend_flag.h"
#include "app/commands.h"
#include "app/data_paths.h"
#include "app/eviction_flags.h"
#include "app/matmul_flag.h"
#include "app/number_flag.h"
#include "app/progress_line.h"
#include "app/text_file.h"
#include "base/terminal_text.h"
#include "engine/kv_eval.h"
#include "engine/model_loader.h"
#include "engine/tokenizer.h"

namespace kvscope::app {

namespace {
struct EvalOptions {
    std::string model;
    std::string text;
    EvalSettings settings;
    std::string policies = "none";
    std::string budgets = "50%";
    std::string dtypes = "f32";
    std::string dtype_layers;  // --kv-dtype-layers: one more row setting per policy and budget
    std::string merges;        // --merge-layers: FROM values, comma separated, a row each
    double merge_distance = kMergeMaxDistance;
    int32_t sinks = 4;
    int32_t window = -1;
    std::string window_aggregate = "max";
    std::string layer_budget = "uniform";
    bool compact = false;     // --compact: the default, accepted for scripts written for it
    bool no_compact = false;  // --no-compact: keep the holes
    std::string positions;    // comma separated; empty: each policy's default
    bool stream = false;
    StreamSettings stream_settings;
    bool ctx_given = false;
    int32_t threads = 0;
    MatmulMode matmul = MatmulMode::kExact;
    Backend backend = Backend::kCpu;
    bool json = false;
};

// "a,b,c" as its items. An empty item (",,,", "25%,", "") names no setting and is refused:
// skipping it left eval running the full cache alone.
Result<std::vector<std::string>> split_list(const std::string& flag, const std::string& text) {
    std::vector<std::string> out;
    for (size_t start = 0;;) {
        const size_t comma = text.find(',', start);
        out.push_back(text.substr(start, comma == std::string::npos ? comma : comma - start));
        if (out.back().empty())
            return Error{flag + " " + quote_for_message(text) +
                         " has an empty item: give its values separated by single commas"};
        if (comma == std::string::npos) return out;
        start = comma + 1;
    }
}

struct Row {
    std::string policy, budget, dtype;
    EvictionOptions eviction;
    EvalResult result;
    double agreement = 1.0;
    StreamResult stream;
    std::string dtype_layers;        // --kv-dtype-layers; empty: every layer `dtype`
    bool names_every_layer = false;  // the schedule leaves no layer to `dtype`
    // "f32", "0-1:int8,2-5:int2", "0-1:int8,others:f32", "mixed:int8/int2:20%",
    // "f32,merge:3": the KV dtype column
    std::string dtype_label() const {
        std::string l = dtype;
        if (!dtype_layers.empty())
            l = names_every_layer ? dtype_layers : dtype_layers + ",others:" + dtype;
        if (eviction.merge_from >= 0) l += ",merge:" + std::to_string(eviction.merge_from);
        return l;
    }
    // The setting, as both --json outputs begin each row.
    nlohmann::json setting_json() const {
        return {{"policy", policy},
                {"kv_budget", budget},
                {"kv_dtype", dtype},
                {"kv_dtype_layers", dtype_layers},
                {"merge_layers", eviction.merge_from},
                {"positions", position_mode_name(eviction)}};
    }
    // "none full f32", "streaming 256 f32 cache": the setting in a table's header
    std::string label() const {
        std::string l = policy + " " + budget + " " + dtype_label();
        if (eviction.policy == "streaming") l += std::string(" ") + position_mode_name(eviction);
        return l;
    }
};

// A row of the full cache or of a policy, before it runs.
Row make_row(const std::string& policy, const std::string& budget, const std::string& dtype,
             const std::string& dtype_layers) {
    Row r;
    r.policy = policy;
    r.budget = budget;
    r.dtype = dtype;
    r.dtype_layers = dtype_layers;
    r.agreement = 0.0;
    return r;
}

// --positions as modes, checked against the policies: cache applies to streaming only, so it is
// refused beside a policy that scores (whose rows could not take it) or without streaming.
Result<std::vector<PositionMode>> plan_positions(const EvalOptions& o,
                                                 const std::vector<std::string>& policies) {
    if (o.positions.empty()) return std::vector<PositionMode>{PositionMode::kPolicyDefault};
    auto items = split_list("--positions", o.positions);
    if (!items) return items.error();
    std::vector<PositionMode> modes;
    for (const std::string& item : *items) {
        auto mode = parse_position_mode(item);
        if (!mode) return mode.error();
        modes.push_back(*mode);
    }
    const bool streaming =
        std::find(policies.begin(), policies.end(), "streaming") != policies.end();
    for (PositionMode mode : modes)
        for (const std::string& policy : policies) {
            if (policy == "streaming" || (policy == "none" && streaming)) continue;
            EvictionOptions probe;
            probe.policy = policy;
            probe.positions = mode;
            if (Status s = validate_eviction_options(probe); !s) return s.error();
        }
    return modes;
}

// The rows to run, the full cache first; every setting checked before any work.
Result<std::vector<Row>> plan_rows(const EvalOptions& o) {
    std::vector<Row> rows;
    rows.push_back(make_row("none", "full", "f32", ""));
    rows.back().agreement = 1.0;
    auto aggregate = parse_window_aggregate(o.window_aggregate);
    if (!aggregate) return aggregate.error();
    auto dtypes = split_list("--kv-dtype", o.dtypes);
    auto policies = split_list("--policy", o.policies);
    auto budgets = split_list("--kv-budget", o.budgets);
    for (const auto* list : {&dtypes, &policies, &budgets})
        if (!*list) return list->error();
    // Each --merge-layers FROM: one more row, the full cache in the first --kv-dtype, merged.
    std::vector<int32_t> merges;
    if (!o.merges.empty()) {
        auto items = split_list("--merge-layers", o.merges);
        if (!items) return items.error();
        for (const std::string& item : *items) {
            if (item.size() > 6 || item.find_first_not_of("0123456789") != std::string::npos)
                return Error{"--merge-layers " + quote_for_message(item) +
                             " must be a layer number, from 0"};
            merges.push_back(std::stoi(item));
        }
    }
    auto positions = plan_positions(o, *policies);
    if (!positions) return positions.error();
    // Each --kv-dtype for every layer, then the schedule over the first one's.
    std::vector<std::pair<std::string, std::string>> storings;  // (dtype, dtype_layers)
    for (const std::string& dtype : *dtypes)
        storings.emplace_back(dtype, "");
    if (!o.dtype_layers.empty()) storings.emplace_back(dtypes->front(), o.dtype_layers);
    for (const auto& [dtype, layers] : storings) {
        std::optional<KvMixed> mixed;
        auto parsed = parse_kv_dtype_flag(dtype, !layers.empty(), mixed);
        if (!parsed) return parsed.error();
        std::vector<KvDtypeRange> ranges;
        if (!layers.empty()) {
            auto r = parse_kv_dtype_layers_flag(layers);
            if (!r) return r.error();
            ranges = std::move(r).value();
        }
        auto compact = compaction_for(o.compact, o.no_compact, dtypes_in(*parsed, ranges));
        if (!compact) return compact.error();
        for (const std::string& policy : *policies) {
            if (o.stream && policy == "snapkv")
                return Error{
                    "--stream feeds the text as decode from its first token: there is "
                    "no prompt for --policy snapkv to compress (give streaming, h2o, "
                    "tova or knorm)"};
            if (policy == "none") {  // the full cache; in f32 it is the first row already
                if (dtype != "f32" || !layers.empty()) {
                    rows.push_back(make_row("none", "full", dtype, layers));
                    rows.back().eviction.mixed = mixed;
                }
                continue;
            }
            // Only streaming's rows differ by --positions; the others keep absolute positions.
            const std::vector<PositionMode> modes =
                policy == "streaming" ? *positions
                                      : std::vector<PositionMode>{PositionMode::kPolicyDefault};
            for (const std::string& budget : *budgets)
                for (PositionMode mode : modes) {
                    Row r = make_row(policy, budget, dtype, layers);
                    r.eviction.policy = policy;
                    r.eviction.sinks = o.sinks;
                    r.eviction.window = o.window;
                    r.eviction.window_aggregate = *aggregate;
                    r.eviction.compact = *compact;
                    r.eviction.positions = mode;
                    r.eviction.mixed = mixed;
                    r.eviction.layer_budget =
                        o.layer_budget == "pyramid" ? LayerBudget::kPyramid : LayerBudget::kUniform;
                    if (Status s = parse_kv_budget(budget, r.eviction); !s) return s.error();
                    if (Status s = validate_eviction_options(r.eviction); !s) return s.error();
                    rows.push_back(std::move(r));
                }
        }
    }
    for (int32_t from : merges) {
        std::optional<KvMixed> mixed;
        auto first = parse_kv_dtype_flag(dtypes->front(), false, mixed);
        if (!first) return first.error();
        if (Status s = check_merge_layers(from, {*first}, mixed.has_value()); !s) return s.error();
        rows.push_back(make_row("none", "full", dtypes->front(), ""));
        rows.back().eviction.merge_from = from;
        rows.back().eviction.merge_max_distance = o.merge_distance;
        if (Status s = validate_eviction_options(rows.back().eviction); !s) return s.error();
    }
    return rows;
}

// --stream's output: the per-window perplexity of each setting side by side (a column each),
// then the whole text's and what RoPE and the cache held.
int print_stream(const EvalOptions& o, const std::vector<Row>& rows, int64_t text_tokens) {
    const StreamResult& first = rows.front().stream;
    std::fprintf(stderr,
                 "kvscope eval --stream: %s, %lld of %lld tokens scored one decode step each, "
                 "windows of %d; the full cache restarts every %d tokens\n",
                 terminal_safe(o.text).c_str(), static_cast<long long>(first.scored_tokens),
                 static_cast<long long>(text_tokens - 1), o.stream_settings.window_tokens,
                 o.stream_settings.full_cache_ctx);
    if (o.json) {
        nlohmann::json out = nlohmann::json::array();
        for (const Row& r : rows) {
            nlohmann::json windows = nlohmann::json::array();
            for (const StreamWindow& w : r.stream.windows)
                windows.push_back({{"first", w.first},
                                   {"last", w.last},
                                   {"scored_tokens", w.scored},
                                   {"perplexity", w.perplexity}});
            nlohmann::json row = r.setting_json();
            row.update({{"perplexity", r.stream.perplexity},
                        {"scored_tokens", r.stream.scored_tokens},
                        {"rope_position_max", r.stream.rope_position_max},
                        {"kv_bytes_peak", r.stream.kv_bytes_peak},
                        {"tokens_evicted", r.stream.tokens_evicted},
                        {"windows", std::move(windows)}});
            out.push_back(std::move(row));
        }
        std::printf("%s\n", json_terminal_safe(out.dump(2)).c_str());
        return 0;
    }
    std::vector<int> width;
    std::printf("%-17s", "tokens");
    for (const Row& r : rows) {
        width.push_back(std::max(12, static_cast<int>(r.label().size())));
        std::printf("  %*s", width.back(), r.label().c_str());
    }
    std::printf("\n");
    auto line = [&](const std::string& head, auto&& cell) {
        std::printf("%-17s", head.c_str());
        for (size_t k = 0; k < rows.size(); ++k)
            std::printf("  %*s", width[k], cell(rows[k]).c_str());
        std::printf("\n");
    };
    auto fixed4 = [](double v) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.4f", v);
        return std::string(buf);
    };
    // Every setting scores the same tokens, so its windows line up with the first's.
    for (size_t w = 0; w < first.windows.size(); ++w)
        line(std::to_string(first.windows[w].first) + "-" + std::to_string(first.windows[w].last),
             [&](const Row& r) {
                 return w < r.stream.windows.size() ? fixed4(r.stream.windows[w].perplexity)
                                                    : std::string("-");
             });
    line("all", [&](const Row& r) { return fixed4(r.stream.perplexity); });
    line("rope_position_max",
         [&](const Row& r) { return std::to_string(r.stream.rope_position_max); });
    line("kv_bytes_peak", [&](const Row& r) { return std::to_string(r.stream.kv_bytes_peak); });
    line("tokens_evicted", [&](const Row& r) { return std::to_string(r.stream.tokens_evicted); });
    return 0;
}

int print_chunks(const EvalOptions& o, const std::vector<Row>& rows) {
    const EvalResult& first = rows.front().result;
    std::fprintf(stderr,
                 "kvscope eval: %s, %d chunks of %d tokens (%lld scored), %d greedy tokens each\n",
                 terminal_safe(o.text).c_str(), first.chunks, o.settings.ctx,
                 static_cast<long long>(first.scored_tokens), o.settings.agree_tokens);
    if (o.json) {
        nlohmann::json out = nlohmann::json::array();
        for (const Row& r : rows) {
            nlohmann::json row = r.setting_json();
            row.update({{"perplexity", r.result.perplexity},
                        {"agreement", r.agreement},
                        {"kv_bytes_peak", r.result.kv_bytes_peak},
                        {"tokens_evicted", r.result.tokens_evicted}});
            out.push_back(std::move(row));
        }
        std::printf("%s\n", json_terminal_safe(out.dump(2)).c_str());
        return 0;
    }
    std::printf("%-10s %-9s %-8s %-9s %11s %10s %14s %14s\n", "policy", "kv_budget", "kv_dtype",
                "positions", "perplexity", "agreement", "kv_bytes_peak", "tokens_evicted");
    for (const Row& r : rows)
        std::printf("%-10s %-9s %-8s %-9s %11.4f %10.3f %14lld %14lld\n", r.policy.c_str(),
                    r.budget.c_str(), r.dtype_label().c_str(), position_mode_name(r.eviction),
                    r.result.perplexity, r.agreement,
                    static_cast<long long>(r.result.kv_bytes_peak),
                    static_cast<long long>(r.result.tokens_evicted));
    return 0;
}

int run_eval(EvalOptions o) {
    auto rows = plan_rows(o);
    if (!rows) return usage_error(rows.error().message);
    auto text = read_text_file(o.text);
    if (!text) return fail(text.error().message);
    auto loaded = load_model(o.model);
    if (!loaded) return fail(loaded.error().message);
    auto model = std::make_shared<const LoadedModel>(std::move(loaded).value());
    if (!model->tokenizer) return fail(o.model + " has no tokenizer to read the text with");
    std::vector<int32_t> tokens = model->tokenizer->encode(*text, true);
    // --stream: the full cache restarts where the model's context is full, or at --ctx.
    o.stream_settings.full_cache_ctx = o.ctx_given ? o.settings.ctx : model->config.context_length;
    EngineOptions eo;
    eo.threads = o.threads;
    eo.matmul = o.matmul;
    eo.num_blocks = o.stream
                        ? stream_blocks_needed(static_cast<int64_t>(tokens.size()), eo.block_size)
                        : eval_blocks_needed(o.settings, eo.block_size);
    eo.backend = backend_factory(o.backend);
    // The schedule's ranges against the model's layers, before any row runs.
    std::vector<std::vector<KvDtype>> layer_dtypes;
    for (Row& row : *rows) {
        layer_dtypes.emplace_back();
        if (row.dtype_layers.empty()) continue;
        const auto ranges = *parse_kv_dtype_layers(row.dtype_layers);
        auto per_layer =
            kv_dtypes_per_layer(ranges, *parse_kv_dtype(row.dtype), model->config.n_layers);
        if (!per_layer) return usage_error("--kv-dtype-layers: " + per_layer.error().message);
        layer_dtypes.back() = std::move(per_layer).value();
        int32_t named = 0;  // ranges do not overlap
        for (const KvDtypeRange& r : ranges)
            named += r.last - r.first + 1;
        row.names_every_layer = named == model->config.n_layers;
    }
    for (const Row& row : *rows)
        if (Status s = validate_merge_layers(row.eviction.merge_from, model->config.n_layers); !s)
            return usage_error(s.error().message);
    ProgressLine progress;
    for (size_t i = 0; i < rows->size(); ++i) {
        Row& row = (*rows)[i];
        std::optional<KvMixed> mixed;
        eo.kv_dtype = *parse_kv_dtype_flag(row.dtype, false, mixed);  // checked by plan_rows
        eo.kv_low = mixed ? std::optional<KvDtype>(mixed->lo) : std::nullopt;
        eo.kv_dtype_layers = layer_dtypes[i];
        auto engine = Engine::create(model, eo);
        if (!engine) return fail(engine.error().message);
        std::unique_ptr<KvEvictor> evictor;
        if (row.eviction.stores_less()) {
            auto e = KvEvictor::create(row.eviction, model->config.n_layers);
            if (!e) return usage_error(e.error().message);
            evictor = std::move(e).value();
        }
        auto show = [&](const std::string& what, int64_t done, int64_t total) {
            if (progress.due() || done == total)
                progress.show("setting " + std::to_string(i + 1) + " of " +
                              std::to_string(rows->size()) + " (" + row.label() + "): " + what +
                              " " + std::to_string(done) + " of " + std::to_string(total));
        };
        if (o.stream) {
            auto result =
                evaluate_stream(**engine, tokens, o.stream_settings, evictor.get(),
                                [&](int64_t done, int64_t total) { show("token", done, total); });
            if (!result) return fail(result.error().message);
            row.stream = std::move(result).value();
            continue;
        }
        auto result = evaluate(**engine, tokens, o.settings, evictor.get(),
                               [&](int32_t done, int32_t total) { show("chunk", done, total); });
        if (!result) return fail(result.error().message);
        row.result = std::move(result).value();
        double agree = 0;
        const auto& base = rows->front().result.greedy;
        for (size_t k = 0; k < row.result.greedy.size(); ++k)
            agree += agreement(row.result.greedy[k], base[k], o.settings.agree_tokens);
        row.agreement = agree / static_cast<double>(row.result.greedy.size());
    }
    progress.clear();
    // Compaction is off without --no-compact only where a layer is int4 or int2.
    if (!o.no_compact && std::any_of(rows->begin(), rows->end(), [](const Row& r) {
            return r.eviction.active() && !r.eviction.compact;
        }))
        std::fprintf(stderr,
                     "kvscope eval: note: int4 and int2 rows keep their holes (their keys are "
                     "quantized together per block and cannot move), so their kv_bytes_peak "
                     "counts the blocks the holes keep\n");
    return o.stream ? print_stream(o, *rows, static_cast<int64_t>(tokens.size()))
                    : print_chunks(o, *rows);
}
}  // namespace

Command register_eval(CLI::App& cli) {
    auto o = std::make_shared<EvalOptions>();
    CLI::App* sub = cli.add_subcommand(
        "eval", "Quality of storing less: perplexity and agreement per eviction policy and budget");
    sub->add_option("--model", o->model, kModelOptionHelp);
    sub->add_option("--text", o->text, "Held-out text to score")->required();
    CLI::Option* ctx =
        sub->add_option("--ctx", o->settings.ctx,
                        "Tokens per chunk: half prompt, half scored (--stream: where the full "
                        "cache restarts; default the model's context)")
            ->check(CLI::Range(4, 1 << 20))
            ->capture_default_str();
    sub->add_option("--policy", o->policies, "Policies, comma separated (none is always first)")
        ->capture_default_str();
    sub->add_option("--kv-budget", o->budgets, "Budgets, comma separated: N tokens or P%")
        ->capture_default_str();
    sub->add_option("--kv-dtype", o->dtypes,
                    "KV dtypes, comma separated, each a row: f32 | f16 | int8 | int4 | int2 | "
                    "mixed:HI/LO:P% (ZipCache, e.g. mixed:int8/int2:20%)")
        ->capture_default_str();
    sub->add_option("--merge-layers", o->merges,
                    "More rows: the full cache in the first --kv-dtype with layers merged from "
                    "each FROM, comma separated (MiniCache; see generate --help)");
    sub->add_option("--merge-distance", o->merge_distance, kMergeDistanceHelp)
        ->check(finite_number(0, 1))
        ->capture_default_str();
    sub->add_option("--kv-dtype-layers", o->dtype_layers,
                    "One more setting: a KV dtype per layer range, e.g. 0-1:int8,2-5:int2 "
                    "(layers not named take the first --kv-dtype)");
    sub->add_option("--agree-tokens", o->settings.agree_tokens,
                    "Greedy tokens compared with the full cache's")
        ->check(CLI::Range(1, 1 << 16))

        ->capture_default_str();
    sub->add_option("--chunks", o->settings.max_chunks, "At most this many chunks (0: all)")
        ->check(CLI::Range(0, 1 << 20))

        ->capture_default_str();
    sub->add_option("--sinks", o->sinks, "streaming: first tokens always kept")
        ->check(CLI::Range(0, 1 << 20))
        ->capture_default_str();
    sub->add_option("--window", o->window, kWindowHelp)->check(CLI::Range(0, 1 << 20));
    sub->add_option("--window-aggregate", o->window_aggregate, kWindowAggregateHelp)
        ->check(CLI::IsMember({"max", "sum"}))
        ->capture_default_str();
    sub->add_option("--layer-budget", o->layer_budget, "uniform | pyramid")
        ->check(CLI::IsMember({"uniform", "pyramid"}))
        ->capture_default_str();
    sub->add_flag("--no-compact", o->no_compact, kNoCompactHelp);
    sub->add_flag("--compact", o->compact, kCompactHelp);
    sub->add_option("--positions", o->positions,
                    "streaming: where RoPE puts the kept tokens, comma separated: cache (their "
                    "places in the cache, StreamingLLM; the default) | absolute");
    CLI::Option* stream = sub->add_flag(
        "--stream", o->stream,
        "Feed the whole text token by token under each setting, past the model's context, "
        "and report perplexity per window of it");
    stream->excludes("--chunks")->excludes("--agree-tokens");
    sub->add_option("--max-tokens", o->stream_settings.max_tokens,
                    "--stream: score at most this many tokens of the text (default: all)")
        ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
        ->needs(stream);
    sub->add_option("--window-tokens", o->stream_settings.window_tokens,
                    "--stream: scored tokens per row of the per-window table")
        ->check(CLI::Range(1, 1 << 24))
        ->capture_default_str()
        ->needs(stream);
    sub->add_option("--threads", o->threads, "Worker threads (0 = all cores)")
        ->check(CLI::Range(0, 1024))
        ->capture_default_str();
    add_matmul_flag(*sub, o->matmul);
    add_backend_flag(*sub, o->backend);
    sub->add_flag("--json", o->json, "One JSON array, a row per setting");
    return {sub, [o, ctx] {
                o->ctx_given = ctx->count() > 0;
                if (check_backend(o->backend)) return 1;
                return resolve_model(o->model) ? 1 : run_eval(*o);
            }};
}

}  // namespace kvscope::app
