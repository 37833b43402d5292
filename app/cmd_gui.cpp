// The front end's commands: `kvscope` alone and `kvscope gui` (live run), `kvscope replay`
// (a recording), `kvscope compare` (two recordings). All take the screenshot / script flags.
#include <algorithm>
#include <cstdio>
#include <memory>

#include "app/backend_flag.h"
#include "app/commands.h"
#include "app/context_size.h"
#include "app/data_paths.h"
#include "app/live_controller.h"
#include "app/serving_flags.h"
#include "app/window_flags.h"
#include "engine/model_loader.h"
#include "engine/workload.h"
#include "engine/workload_generator.h"
#include "sessions/step_costs.h"
#include "ui/app_window.h"

namespace kvscope::app {

namespace {
struct GuiOptions {
    std::string model;
    std::string workload;
    Backend backend = Backend::kCpu;
    ServingFlags serving;
    ui::WindowOptions window;
    bool record = false;
    std::string record_path = "kvscope-live.kvs";
};

// The demo the GUI opens with: a chat workload that shares prompts and fills the pool.
std::vector<Request> demo_workload(const LoadedModel& m) {
    std::vector<Request> out;
    for (auto& g : generate_workload(WorkloadKind::kChat, 24, 7, m.tokenizer.get(),
                                     m.config.vocab_size, m.config.context_length))
        out.push_back(std::move(g.request));
    return out;
}

int run_gui(GuiOptions& o) {
    if (auto e = o.serving.eviction.options(); !e) return usage_error(e.error().message);
    if (check_backend(o.backend)) return 1;
    auto model_path = model_path_or_bundled(o.model);
    if (!model_path) {
        o.window.startup_error = model_path.error().message;  // shown, then exit status 1
        return open_window(o.window);
    }
    o.model = model_path.value();
    o.window.inputs = {o.model, o.workload};
    if (o.record && check_output(o.record_path, o.window.force, o.window.inputs)) return 1;
    auto loaded = load_model_with_context(o.model, o.serving.ctx_size);
    if (!loaded) {
        // The window still opens, with the reason on screen.
        o.window.startup_error = "Could not load the model: " + loaded.error().message;
        return open_window(o.window);
    }
    std::shared_ptr<const LoadedModel> model = std::move(loaded).value();
    // A layer range past the model's is a wrong flag like the others: refused before the window.
    if (auto l = o.serving.eviction.layer_dtypes(model->config.n_layers); !l)
        return usage_error(l.error().message);
    if (Status m = validate_merge_layers(o.serving.eviction.merge_layers, model->config.n_layers);
        !m)
        return usage_error(m.error().message);
    std::vector<Request> requests;
    std::string name = "demo (24 chat requests)";
    if (!o.workload.empty()) {
        auto w = load_workload(o.workload, model->tokenizer.get(), model->config.vocab_size,
                               model->config.context_length);
        if (!w) {
            o.window.startup_error = w.error().message;
            return open_window(o.window);
        }
        requests = std::move(w).value();
        name = o.workload;
    } else {
        requests = demo_workload(*model);
    }
    if (o.serving.eviction.cache_off() && o.serving.allocator == "contiguous")
        return usage_error(
            "--kv-cache off allocates blocks as the text grows: it needs the paged "
            "allocator");
    if (o.serving.eviction.cache_off()) {
        // One sequence, recomputed whole at every step: the demo's first request alone.
        if (o.workload.empty()) {
            requests.resize(std::min<size_t>(requests.size(), 1));
            for (Request& r : requests)
                r.n = 1;
            name = "demo (1 chat request, no KV cache)";
        } else if (requests.size() > 1 || (!requests.empty() && requests[0].n > 1)) {
            return usage_error("--kv-cache off runs one sequence: " + o.workload + " has " +
                               std::to_string(requests.size()) + " requests (or samples)");
        }
    }
    LiveSettings s;
    s.block_size = o.serving.block_size;
    s.num_blocks = o.serving.num_blocks;
    s.max_batch_tokens = o.serving.max_batch_tokens;
    s.allocator = o.serving.allocator;
    s.prefix_cache = o.serving.prefix_cache == "on";
    s.preempt = o.serving.preempt;
    s.capture_attention = o.serving.capture_attention;
    s.policy = o.serving.eviction.policy;
    s.kv_budget = o.serving.eviction.kv_budget;
    s.sinks = o.serving.eviction.sinks;
    s.window = o.serving.eviction.window;
    s.window_aggregate = o.serving.eviction.window_aggregate;
    s.layer_budget = o.serving.eviction.layer_budget;
    s.positions = o.serving.eviction.positions;
    s.compact = !o.serving.eviction.no_compact;
    s.kv_dtype = o.serving.eviction.kv_dtype;
    s.kv_dtype_layers = o.serving.eviction.kv_dtype_layers;
    s.merge_layers = o.serving.eviction.merge_layers;
    s.merge_distance = o.serving.eviction.merge_distance;
    s.kv_cache = !o.serving.eviction.cache_off();
    s.record = o.record;
    s.record_path = o.record_path;
    s.record_force = o.window.force;
    EngineOptions eo = o.serving.engine_options();
    eo.backend = backend_factory(o.backend, /*gpu_probes=*/true);
    auto live = LiveController::create(model, std::move(requests), name, s, eo);
    if (!live) {
        o.window.startup_error = live.error().message;
        return open_window(o.window);
    }
    o.window.controller = live->get();
    return open_window(o.window);
}

// `compare A B --costs`: the two runs' step costs as the Compare panel sets them side by side.
int print_costs(const std::string& a, const std::string& b) {
    auto left = SessionReader::open(a);
    if (!left) return fail(left.error().message);
    auto right = SessionReader::open(b);
    if (!right) return fail(right.error().message);
    auto c = compare_costs(**left, **right);
    if (!c) return fail(c.error().message);
    std::fputs(cost_comparison_text(*c).c_str(), stdout);
    return 0;
}

std::shared_ptr<GuiOptions> gui_defaults() {
    auto o = std::make_shared<GuiOptions>();
    o->serving.num_blocks = 96;
    o->serving.max_batch_tokens = 256;
    o->serving.capture_attention = "all";
    return o;
}
}  // namespace

GuiCommands register_gui(CLI::App& cli) {
    auto live = gui_defaults();
    auto bare = gui_defaults();
    CLI::App* gui = cli.add_subcommand("gui", "Open the window on a live run");
    gui->add_option("--model", live->model, kModelOptionHelp);
    gui->add_option("--workload", live->workload,
                    "Workload file (JSONL); default: a generated chat workload");
    add_backend_flag(*gui, live->backend);
    add_serving_flags(*gui, live->serving);
    gui->add_flag("--record", live->record, "Keep the session file of the run");
    gui->add_option("--record-path", live->record_path, "Where --record writes")
        ->capture_default_str();
    add_window_flags(*gui, live->window);

    auto replay = std::make_shared<ui::WindowOptions>();
    CLI::App* rep = cli.add_subcommand("replay", "Open a recorded session (.kvs)");
    rep->add_option("file", replay->replay_path, "Session file")->required();
    add_window_flags(*rep, *replay);

    auto cmp = std::make_shared<ui::WindowOptions>();
    CLI::App* compare = cli.add_subcommand("compare", "Open two sessions side by side");
    compare->add_option("a", cmp->replay_path, "First session")->required();
    compare->add_option("b", cmp->compare_path, "Second session")->required();
    auto costs = std::make_shared<bool>(false);
    compare->add_flag("--costs", *costs,
                      "Print each step's flops and time in both runs, their ratios and the "
                      "totals, instead of opening the window");
    add_window_flags(*compare, *cmp);

    // `kvscope` with no subcommand takes the window flags too.
    add_window_flags(cli, bare->window);
    GuiCommands out;
    out.commands = {{gui, [live] { return run_gui(*live); }},
                    {rep, [replay] { return open_window(*replay); }},
                    {compare, [cmp, costs] {
                         return *costs ? print_costs(cmp->replay_path, cmp->compare_path)
                                       : open_window(*cmp);
                     }}};
    out.bare = [bare] { return run_gui(*bare); };
    return out;
}

}  // namespace kvscope::app
