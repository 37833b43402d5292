// `kvscope run`: serves a workload to completion with the continuous-batching scheduler.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "app/backend_flag.h"
#include "app/commands.h"
#include "app/context_size.h"
#include "app/data_paths.h"
#include "app/progress_line.h"
#include "app/recording.h"
#include "app/serving_flags.h"
#include "base/output_file.h"
#include "base/terminal_text.h"
#include "engine/model_loader.h"
#include "engine/scheduler.h"
#include "engine/workload.h"

namespace kvscope::app {

namespace {
struct RunOptions {
    std::string model;
    std::string workload;
    ServingFlags serving;
    Backend backend = Backend::kCpu;
    std::string summary_json;
    std::string record;
    bool force = false;
};

nlohmann::json summary_to_json(const ServingSummary& s) {
    nlohmann::json j;
    j["requests"] = s.requests;
    j["requests_rejected"] = s.rejected;
    j["rejected"] = s.rejected_reasons;  // request id -> why
    j["tokens"] = s.tokens;
    j["steps"] = s.steps;
    j["seconds"] = s.seconds;
    j["tokens_per_second"] = s.tokens_per_second;
    j["peak_blocks_used"] = s.peak_blocks_used;
    j["mean_fragmentation"] = s.mean_fragmentation;
    j["peak_fragmentation"] = s.peak_fragmentation;
    j["prefix_hit_rate"] = s.prefix_hit_rate;
    j["prompt_tokens"] = s.prompt_tokens;
    j["prefill_tokens_computed"] = s.prefill_tokens_computed;
    j["preemptions"] = s.preemptions;
    j["swaps_out"] = s.swaps_out;
    j["cow_copies"] = s.cow_copies;
    j["tokens_evicted"] = s.tokens_evicted;
    j["max_running"] = s.max_running;
    j["schedule_seconds"] = s.schedule_seconds;
    j["forward_seconds"] = s.forward_seconds;
    j["outputs"] = s.outputs;
    return j;
}

// "step 120, 3 456 tokens, 1 234 tokens/s, 45 of 400 requests done, about 0:12 left".
std::string run_progress(const Scheduler& scheduler, int64_t requests, const ProgressLine& line) {
    int64_t done = 0, tokens = 0;
    for (const Sequence& q : scheduler.sequences()) {
        if (q.sample == 0)
            done += q.state == SequenceState::kFinished || q.state == SequenceState::kRejected;
        tokens += std::max(0, q.generated());
    }
    double seconds = line.elapsed_seconds();
    std::string text =
        "step " + std::to_string(scheduler.current_step()) + ", " + std::to_string(tokens) +
        " tokens, " + std::to_string(static_cast<long long>(seconds > 0 ? tokens / seconds : 0)) +
        " tokens/s, " + std::to_string(done) + " of " + std::to_string(requests) + " requests done";
    if (done > 0 && done < requests)
        text += ", about " +
                format_duration(seconds / static_cast<double>(done) *
                                static_cast<double>(requests - done)) +
                " left";
    return text;
}

int run_serving(const RunOptions& o) {
    auto storing = o.serving.eviction.options();
    if (!storing) return usage_error(storing.error().message);
    if (storing->stores_less() && o.serving.allocator == "contiguous")
        return usage_error(o.serving.eviction.needs_paged_allocator());
    if (o.serving.eviction.cache_off())
        return usage_error(
            "--kv-cache off runs one sequence (generate, gui): run serves a whole workload");
    if (!o.record.empty() && o.record == o.summary_json)
        return fail("--record and --summary-json name the same file, " + o.record);
    for (const std::string& out : {o.record, o.summary_json})
        if (check_output(out, o.force, {o.model, o.workload})) return 1;
    auto loaded = load_model_with_context(o.model, o.serving.ctx_size);
    if (!loaded) return fail(loaded.error().message);
    std::shared_ptr<const LoadedModel> model = std::move(loaded).value();
    auto requests = load_workload(o.workload, model->tokenizer.get(), model->config.vocab_size,
                                  model->config.context_length);
    if (!requests) return fail(requests.error().message);
    EngineOptions eo = o.serving.engine_options();
    auto layer_dtypes = o.serving.eviction.layer_dtypes(model->config.n_layers);
    if (!layer_dtypes) return usage_error(layer_dtypes.error().message);
    eo.kv_dtype_layers = std::move(layer_dtypes).value();
    if (Status s = validate_merge_layers(o.serving.eviction.merge_layers, model->config.n_layers);
        !s)
        return usage_error(s.error().message);
    eo.backend = backend_factory(o.backend, !o.record.empty());
    auto engine = Engine::create(model, eo);
    if (!engine) return fail(engine.error().message);
    std::unique_ptr<Recorder> recorder;
    if (!o.record.empty()) {
        auto rec =
            start_recording(o.record, **engine, o.serving.allocator, o.serving.to_json(), o.force);
        if (!rec) return fail(rec.error().message);
        recorder = std::move(rec).value();
    }
    auto serving = o.serving.serving_options(model->config);
    if (!serving) return fail(serving.error().message);
    const auto total = static_cast<int64_t>(requests->size());
    Scheduler scheduler(**engine, serving.value(), std::move(requests).value());
    ProgressLine progress;
    while (scheduler.step())
        if (progress.due()) progress.show(run_progress(scheduler, total, progress));
    progress.clear();
    ServingSummary s = scheduler.summary();
    if (recorder && finish_recording(recorder, **engine) != 0) return 1;
    if (!scheduler.error().ok()) return fail(scheduler.error().error().message);
    for (const auto& [id, why] : s.rejected_reasons)
        std::fprintf(stderr, "kvscope run: request %s rejected: %s\n", terminal_safe(id).c_str(),
                     why.c_str());

    std::fprintf(
        stderr,
        "kvscope run: %s, %s allocator, %d blocks of %d tokens, prefix cache %s, preempt by %s\n",
        terminal_safe(o.workload).c_str(), o.serving.allocator.c_str(),
        (*engine)->options().num_blocks, (*engine)->options().block_size,
        o.serving.prefix_cache.c_str(), o.serving.preempt.c_str());
    std::printf("requests            %d (%d rejected)\n", s.requests, s.rejected);
    std::printf("tokens generated    %lld\n", static_cast<long long>(s.tokens));
    std::printf("steps               %lld\n", static_cast<long long>(s.steps));
    std::printf("tokens/s            %.1f\n", s.tokens_per_second);
    std::printf("peak blocks used    %d of %d\n", s.peak_blocks_used,
                (*engine)->options().num_blocks);
    std::printf("max running         %d\n", s.max_running);
    std::printf("fragmentation       mean %.2f%%, peak %.2f%% of the pool\n",
                100 * s.mean_fragmentation, 100 * s.peak_fragmentation);
    // Recompute after preemption prefills again, so the computed count can pass the prompts'.
    std::printf(
        "prefix hit rate     %.2f%% (prompts %lld tokens; prefill computed %lld, "
        "recompute included)\n",
        100 * s.prefix_hit_rate, static_cast<long long>(s.prompt_tokens),
        static_cast<long long>(s.prefill_tokens_computed));
    std::printf("preemptions         %d (%d by swap)\n", s.preemptions, s.swaps_out);
    std::printf("copy-on-write       %lld blocks\n", static_cast<long long>(s.cow_copies));
    if (o.serving.eviction.policy != "none")
        std::printf("tokens evicted      %lld (%s, every layer and KV head)\n",
                    static_cast<long long>(s.tokens_evicted), o.serving.eviction.policy.c_str());
    double overhead = s.seconds > 0 ? s.schedule_seconds / s.seconds : 0.0;
    std::printf("scheduler overhead  %.2f%% of step time\n", 100 * overhead);
    if (!o.summary_json.empty()) {
        Status w = write_output_file(o.summary_json, summary_to_json(s).dump(2) + "\n",
                                     {.force = o.force, .inputs = {o.model, o.workload}});
        if (!w) return fail(w.error().message);
    }
    return 0;
}
}  // namespace

Command register_run(CLI::App& cli) {
    auto o = std::make_shared<RunOptions>();
    CLI::App* sub = cli.add_subcommand("run", "Serve a workload to completion and print a summary");
    sub->add_option("--model", o->model, kModelOptionHelp);
    sub->add_option("--workload", o->workload, "Workload file (JSONL)")->required();
    add_serving_flags(*sub, o->serving);
    add_backend_flag(*sub, o->backend);
    sub->add_option("--summary-json", o->summary_json, "Write the summary as JSON here");
    sub->add_option("--record", o->record, "Record the run to a session file (.kvs)");
    add_force_flag(*sub, o->force);
    return {sub, [o] {
                if (check_backend(o->backend)) return 1;
                return resolve_model(o->model) ? 1 : run_serving(*o);
            }};
}

}  // namespace kvscope::app
