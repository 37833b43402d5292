// `kvscope workload`: writes a generated workload (JSONL) for a model.
#include <cstdio>
#include <memory>

#include "app/commands.h"
#include "app/data_paths.h"
#include "base/output_file.h"
#include "base/terminal_text.h"
#include "engine/model_loader.h"
#include "engine/workload.h"
#include "engine/workload_generator.h"

namespace kvscope::app {

namespace {
struct WorkloadOptions {
    std::string model;
    std::string kind = "chat";
    int32_t requests = 100;
    uint64_t seed = 1;
    std::string out;
    bool force = false;
};

int run_workload(const WorkloadOptions& o) {
    if (check_output(o.out, o.force, {o.model})) return 1;
    auto kind = parse_workload_kind(o.kind);
    if (!kind) return fail(kind.error().message);
    auto model = load_model(o.model);
    if (!model) return fail(model.error().message);
    // Each request is written as it is made (a million of them held at once took 2.45 GB): to
    // stdout, or into the output file, which takes its place only once whole.
    std::unique_ptr<OutputFile> file;
    if (!o.out.empty()) {
        auto created = OutputFile::create(o.out, {.force = o.force, .inputs = {o.model}});
        if (!created) return fail(created.error().message);
        file = std::move(created).value();
    }
    int64_t written = 0;
    generate_workload(kind.value(), o.requests, o.seed, model->tokenizer.get(),
                      model->config.vocab_size, model->config.context_length,
                      [&](const GeneratedRequest& g) {
                          std::string line = request_to_json(g.request, g.prompt_text) + "\n";
                          ++written;
                          if (file) return static_cast<bool>(file->stream() << line);
                          line = json_terminal_safe(line);
                          return std::fwrite(line.data(), 1, line.size(), stdout) == line.size();
                      });
    if (!file) return 0;
    Status w = file->commit();
    if (!w) return fail(w.error().message);
    std::fprintf(stderr, "kvscope: wrote %lld requests to %s\n", static_cast<long long>(written),
                 terminal_safe(o.out).c_str());
    return 0;
}
}  // namespace

Command register_workload(CLI::App& cli) {
    auto o = std::make_shared<WorkloadOptions>();
    CLI::App* sub = cli.add_subcommand("workload", "Generate a serving workload (JSONL)");
    sub->add_option("--model", o->model, kModelOptionHelp);
    sub->add_option("--kind", o->kind, "chat | shared-prefix | long-tail | burst")
        ->check(CLI::IsMember({"chat", "shared-prefix", "long-tail", "burst"}))
        ->capture_default_str();
    sub->add_option("--requests", o->requests, "Number of requests")
        ->check(CLI::Range(1, 1000000))
        ->capture_default_str();
    sub->add_option("--seed", o->seed, "Seed")->capture_default_str();
    sub->add_option("--out", o->out, "Output file (stdout without it)");
    add_force_flag(*sub, o->force);
    return {sub, [o] { return resolve_model(o->model) ? 1 : run_workload(*o); }};
}

}  // namespace kvscope::app
