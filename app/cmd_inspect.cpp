// `kvscope inspect FILE.kvs [--step N] [--json]`: the state of a recorded run at a step.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "base/terminal_text.h"
#include "sessions/attention_summary.h"
#include "sessions/session_reader.h"
#include "sessions/state_json.h"
#include "sessions/step_ops.h"

namespace kvscope::app {

namespace {
struct InspectOptions {
    std::string path;
    int64_t step = -1;
    bool step_given = false;
    bool json = false;
    int32_t attention_recent = 0;  // > 0: summarize the captured heads instead
};

int run_attention_summary(const InspectOptions& o) {
    auto reader = SessionReader::open(o.path, /*step_summaries=*/false);
    if (!reader) return fail(reader.error().message);
    auto heads = summarize_attention(**reader, o.attention_recent);
    if (!heads) return fail(heads.error().message);
    if (heads->empty())
        return fail(o.path + ": no attention was captured (record with --capture-attention)");
    if (o.json) {
        nlohmann::json j = nlohmann::json::array();
        for (const HeadSummary& h : *heads)
            j.push_back({{"layer", h.layer},
                         {"head", h.head},
                         {"rows", h.rows},
                         {"mean_on_first", h.mean_on_first},
                         {"mean_on_recent", h.mean_on_recent}});
        std::printf(
            "%s\n",
            json_terminal_safe(nlohmann::json{{"recent", o.attention_recent}, {"heads", j}}.dump(2))
                .c_str());
        return 0;
    }
    std::string recent = "p(last " + std::to_string(o.attention_recent) + ")";
    std::printf("%-6s %-5s %8s %12s %14s\n", "layer", "head", "rows", "p(first)", recent.c_str());
    for (const HeadSummary& h : *heads)
        std::printf("%-6d %-5d %8lld %12.4f %14.4f%s\n", h.layer, h.head,
                    static_cast<long long>(h.rows), h.mean_on_first, h.mean_on_recent,
                    h.mean_on_first > 0.3    ? "  sink"
                    : h.mean_on_recent > 0.5 ? "  local"
                                             : "");
    return 0;
}

int run_inspect(const InspectOptions& o) {
    if (o.attention_recent > 0) return run_attention_summary(o);
    auto reader = SessionReader::open(o.path, /*step_summaries=*/false);
    if (!reader) return fail(reader.error().message);
    SessionReader& r = **reader;
    int64_t last = r.last_step();
    int64_t step = o.step_given ? o.step : last;
    if (o.step_given && (step < 0 || step > last))
        return fail("step " + std::to_string(step) + " is outside the session (steps 0.." +
                    std::to_string(last) + ")");
    auto state = r.state_at(step);
    if (!state) return fail(state.error().message);
    // The plain summary prints no generated text: it need not be built.
    auto document = state_to_json(**state, last + 1, /*generated_text=*/o.json);
    if (!document) return fail(o.path + ": " + document.error().message);
    nlohmann::json& j = *document;
    // The kinds a step's summary and ops are made of: a step's tokens may be many, their texts
    // long, and none of it is needed here.
    auto step_events = r.events(step, step,
                                {EventKind::kStepBegin, EventKind::kStepEnd, EventKind::kPhase,
                                 EventKind::kMetric, EventKind::kKernel});
    if (!step_events) return fail(step_events.error().message);
    nlohmann::json ops = step_ops_json(*step_events, r.info());
    if (o.json) {
        j.update(ops);
        std::printf("%s\n", json_terminal_safe(j.dump(2)).c_str());
        return 0;
    }
    const auto& pool = j["pool"];
    std::printf("%s: step %lld of %lld\n", terminal_safe(o.path).c_str(),
                static_cast<long long>(step), static_cast<long long>(last));
    std::printf("pool: %d blocks of %d tokens (%s): %d used, %d free, %d cached\n",
                pool["total"].get<int>(), pool["block_size"].get<int>(),
                terminal_safe(pool["allocator"].get<std::string>()).c_str(),
                pool["used"].get<int>(), pool["free"].get<int>(), pool["cached"].get<int>());
    for (const auto& [name, value] : (*state)->metrics)
        std::printf("  %-24s %g\n", terminal_safe(name).c_str(), value);
    if (!ops["ops"].empty()) {
        const double limit = ops["bandwidth_limit_gbps"].get<double>();
        const auto& b = ops["bytes"];
        std::printf(
            "ops: %zu, %.3f of %.3f ms; moved %.2f MB (weights %.2f, KV read %.2f, KV "
            "written %.3f, activations %.3f) at %.2f GB/s",
            ops["ops"].size(), ops["ops_seconds"].get<double>() * 1e3,
            ops["step_seconds"].get<double>() * 1e3, ops["bytes_moved"].get<double>() / 1e6,
            b["weights"].get<double>() / 1e6, b["kv_read"].get<double>() / 1e6,
            b["kv_written"].get<double>() / 1e6, b["activations"].get<double>() / 1e6,
            ops["bandwidth_gbps"].get<double>());
        if (limit > 0)
            std::printf(", %.0f%% of this recording machine's %.1f GB/s\n",
                        100 * ops["bandwidth_fraction"].get<double>(), limit);
        else
            std::printf(" (the recording machine's limit is unknown)\n");
    }
    std::printf("requests:\n");
    for (const auto& q : j["requests"]) {
        std::string table;
        for (int b : q["block_table"])
            table += (table.empty() ? "" : " ") + std::to_string(b);
        std::printf("  %-10s %-9s %4d tokens  blocks [%s]\n",
                    terminal_safe(q["id"].get<std::string>()).c_str(),
                    q["state"].get<std::string>().c_str(), q["num_tokens"].get<int>(),
                    table.c_str());
    }
    return 0;
}
}  // namespace

Command register_inspect(CLI::App& cli) {
    auto o = std::make_shared<InspectOptions>();
    CLI::App* sub =
        cli.add_subcommand("inspect", "Print the state of a recorded session at a step");
    sub->add_option("file", o->path, "Session file (.kvs)")->required();
    sub->add_option("--step", o->step, "Step (default: the last)")->each([o](const std::string&) {
        o->step_given = true;
    });
    sub->add_flag("--json", o->json, "Print one JSON document");
    sub->add_option("--attention-summary", o->attention_recent,
                    "Per captured head: mean attention on token 0 and on the last W tokens")
        ->check(CLI::Range(1, 1 << 20))
        ->excludes("--step");
    return {sub, [o] { return run_inspect(*o); }};
}

}  // namespace kvscope::app
