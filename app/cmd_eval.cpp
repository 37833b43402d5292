// `kvscope eval`: what storing less costs in quality. One row per setting (eviction policy,
// budget, KV dtype), the full cache first: perplexity of held-out text scored as decode under
// the setting, agreement of its greedy tokens with the full cache's, the most K/V bytes one
// sequence held, and the tokens evicted.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "app/backend_flag.h"
#include "app/commands.h"
#include "app/data_paths.h"
#include "app/eviction_flags.h"
#include "app/matmul_flag.h"
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
    int32_t sinks = 4;
    int32_t window = -1;
    std::string window_aggregate = "max";
    std::string layer_budget = "uniform";
    bool compact = false;     // --compact: the default, accepted for scripts written for it
    bool no_compact = false;  // --no-compact: keep the holes
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
};

// The rows to run, the full cache first; every setting checked before any work.
Result<std::vector<Row>> plan_rows(const EvalOptions& o) {
    std::vector<Row> rows;
    rows.push_back({"none", "full", "f32", {}, {}, 1.0});
    auto aggregate = parse_window_aggregate(o.window_aggregate);
    if (!aggregate) return aggregate.error();
    auto dtypes = split_list("--kv-dtype", o.dtypes);
    auto policies = split_list("--policy", o.policies);
    auto budgets = split_list("--kv-budget", o.budgets);
    for (const auto* list : {&dtypes, &policies, &budgets})
        if (!*list) return list->error();
    for (const std::string& dtype : *dtypes) {
        auto parsed = parse_kv_dtype(dtype);
        if (!parsed) return Error{"--kv-dtype: " + parsed.error().message};
        auto compact = compaction_for(o.compact, o.no_compact, *parsed);
        if (!compact) return compact.error();
        for (const std::string& policy : *policies) {
            if (policy == "none") {  // the full cache; in f32 it is the first row already
                if (dtype != "f32") rows.push_back({"none", "full", dtype, {}, {}, 0.0});
                continue;
            }
            for (const std::string& budget : *budgets) {
                Row r{policy, budget, dtype, {}, {}, 0.0};
                r.eviction.policy = policy;
                r.eviction.sinks = o.sinks;
                r.eviction.window = o.window;
                r.eviction.window_aggregate = *aggregate;
                r.eviction.compact = *compact;
                r.eviction.layer_budget =
                    o.layer_budget == "pyramid" ? LayerBudget::kPyramid : LayerBudget::kUniform;
                if (Status s = parse_kv_budget(budget, r.eviction); !s) return s.error();
                if (Status s = validate_eviction_options(r.eviction); !s) return s.error();
                rows.push_back(std::move(r));
            }
        }
    }
    return rows;
}

int run_eval(const EvalOptions& o) {
    auto rows = plan_rows(o);
    if (!rows) return usage_error(rows.error().message);
    auto text = read_text_file(o.text);
    if (!text) return fail(text.error().message);
    auto loaded = load_model(o.model);
    if (!loaded) return fail(loaded.error().message);
    auto model = std::make_shared<const LoadedModel>(std::move(loaded).value());
    if (!model->tokenizer) return fail(o.model + " has no tokenizer to read the text with");
    std::vector<int32_t> tokens = model->tokenizer->encode(*text, true);
    EngineOptions eo;
    eo.threads = o.threads;
    eo.matmul = o.matmul;
    eo.num_blocks = eval_blocks_needed(o.settings, eo.block_size);
    eo.backend = backend_factory(o.backend);
    ProgressLine progress;
    for (size_t i = 0; i < rows->size(); ++i) {
        Row& row = (*rows)[i];
        eo.kv_dtype = *parse_kv_dtype(row.dtype);
        auto engine = Engine::create(model, eo);
        if (!engine) return fail(engine.error().message);
        std::unique_ptr<KvEvictor> evictor;
        if (row.eviction.active()) {
            auto e = KvEvictor::create(row.eviction, model->config.n_layers);
            if (!e) return usage_error(e.error().message);
            evictor = std::move(e).value();
        }
        std::string label = row.policy + " " + row.budget + " " + row.dtype;
        auto result =
            evaluate(**engine, tokens, o.settings, evictor.get(), [&](int32_t done, int32_t total) {
                if (progress.due() || done == total)
                    progress.show("setting " + std::to_string(i + 1) + " of " +
                                  std::to_string(rows->size()) + " (" + label + "): chunk " +
                                  std::to_string(done) + " of " + std::to_string(total));
            });
        if (!result) return fail(result.error().message);
        row.result = std::move(result).value();
        double agree = 0;
        const auto& base = rows->front().result.greedy;
        for (size_t k = 0; k < row.result.greedy.size(); ++k)
            agree += agreement(row.result.greedy[k], base[k], o.settings.agree_tokens);
        row.agreement = agree / static_cast<double>(row.result.greedy.size());
    }
    progress.clear();
    const EvalResult& first = rows->front().result;
    std::fprintf(stderr,
                 "kvscope eval: %s, %d chunks of %d tokens (%lld scored), %d greedy tokens each\n",
                 terminal_safe(o.text).c_str(), first.chunks, o.settings.ctx,
                 static_cast<long long>(first.scored_tokens), o.settings.agree_tokens);
    if (!o.no_compact && std::any_of(rows->begin(), rows->end(), [](const Row& r) {
            return r.eviction.active() && r.dtype == "int4";
        }))
        std::fprintf(stderr,
                     "kvscope eval: note: int4 rows keep their holes (int4 keys are quantized "
                     "together per block and cannot move), so their kv_bytes_peak counts the "
                     "blocks the holes keep\n");
    if (o.json) {
        nlohmann::json out = nlohmann::json::array();
        for (const Row& r : *rows)
            out.push_back({{"policy", r.policy},
                           {"kv_budget", r.budget},
                           {"kv_dtype", r.dtype},
                           {"perplexity", r.result.perplexity},
                           {"agreement", r.agreement},
                           {"kv_bytes_peak", r.result.kv_bytes_peak},
                           {"tokens_evicted", r.result.tokens_evicted}});
        std::printf("%s\n", json_terminal_safe(out.dump(2)).c_str());
        return 0;
    }
    std::printf("%-10s %-9s %-8s %11s %10s %14s %14s\n", "policy", "kv_budget", "kv_dtype",
                "perplexity", "agreement", "kv_bytes_peak", "tokens_evicted");
    for (const Row& r : *rows)
        std::printf("%-10s %-9s %-8s %11.4f %10.3f %14lld %14lld\n", r.policy.c_str(),
                    r.budget.c_str(), r.dtype.c_str(), r.result.perplexity, r.agreement,
                    static_cast<long long>(r.result.kv_bytes_peak),
                    static_cast<long long>(r.result.tokens_evicted));
    return 0;
}
}  // namespace

Command register_eval(CLI::App& cli) {
    auto o = std::make_shared<EvalOptions>();
    CLI::App* sub = cli.add_subcommand(
        "eval", "Quality of storing less: perplexity and agreement per eviction policy and budget");
    sub->add_option("--model", o->model, kModelOptionHelp);
    sub->add_option("--text", o->text, "Held-out text to score")->required();
    sub->add_option("--ctx", o->settings.ctx, "Tokens per chunk: half prompt, half scored")
        ->check(CLI::Range(4, 1 << 20))
        ->capture_default_str();
    sub->add_option("--policy", o->policies, "Policies, comma separated (none is always first)")
        ->capture_default_str();
    sub->add_option("--kv-budget", o->budgets, "Budgets, comma separated: N tokens or P%")
        ->capture_default_str();
    sub->add_option("--kv-dtype", o->dtypes, "KV dtypes, comma separated")->capture_default_str();
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
    sub->add_option("--threads", o->threads, "Worker threads (0 = all cores)")
        ->check(CLI::Range(0, 1024))
        ->capture_default_str();
    add_matmul_flag(*sub, o->matmul);
    add_backend_flag(*sub, o->backend);
    sub->add_flag("--json", o->json, "One JSON array, a row per setting");
    return {sub, [o] {
                if (check_backend(o->backend)) return 1;
                return resolve_model(o->model) ? 1 : run_eval(*o);
            }};
}

}  // namespace kvscope::app
