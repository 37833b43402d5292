#include "app/live_controller.h"

#include <nlohmann/json.hpp>

#include "app/data_paths.h"
#include "app/live_recording.h"
#include "app/recording.h"
#include "base/output_file.h"
#include "engine/attention_spec.h"
#include "engine/tokenizer.h"

namespace kvscope::app {

EvictionFlags eviction_flags(const LiveSettings& s) {
    EvictionFlags f;
    f.policy = s.policy;
    f.kv_budget = s.kv_budget;
    f.sinks = s.sinks;
    f.window = s.window;
    f.window_aggregate = s.window_aggregate;
    f.layer_budget = s.layer_budget;
    // The checkbox is what the window wishes (int4 and int2 keep their holes whatever it says);
    // with no policy there are no holes, and --no-compact would be refused.
    f.no_compact = s.policy != "none" && !s.compact;
    // --positions applies to streaming: the Controls panel can switch to a policy it does not
    // apply to, which then keeps its own (absolute) positions rather than failing to restart.
    if (s.policy == "streaming") f.positions = s.positions;
    f.kv_dtype = s.kv_dtype;
    f.kv_dtype_layers = s.kv_dtype_layers;
    f.merge_layers = s.merge_layers;
    f.merge_distance = s.merge_distance;
    f.kv_cache = s.kv_cache ? "on" : "off";
    return f;
}

Result<std::unique_ptr<LiveController>> LiveController::create(
    std::shared_ptr<const LoadedModel> model, std::vector<Request> workload,
    std::string workload_name, const LiveSettings& settings, const EngineOptions& base) {
    std::unique_ptr<LiveController> c(new LiveController());
    c->model_ = std::move(model);
    c->workload_ = std::move(workload);
    c->workload_name_ = std::move(workload_name);
    c->settings_ = settings;
    c->base_ = base;
    if (Status s = c->start(); !s) return s.error();
    return c;
}

LiveController::~LiveController() {
    stop_recording();
}

void LiveController::stop_recording() {
    scheduler_.reset();
    if (engine_) engine_->reporter().probe = nullptr;
    recording_.reset();
}

Status LiveController::start() {
    stop_recording();
    EvictionFlags storing = eviction_flags(settings_);
    EngineOptions eo = base_;  // threads and matmul from the command line; the rest live
    eo.block_size = settings_.block_size;
    eo.num_blocks = settings_.num_blocks;
    auto dtype = storing.dtype();
    if (!dtype) return dtype.error();
    eo.kv_dtype = *dtype;
    auto layer_dtypes = storing.layer_dtypes(model_->config.n_layers);
    if (!layer_dtypes) return layer_dtypes.error();
    eo.kv_dtype_layers = std::move(layer_dtypes).value();
    eo.kv_low = storing.kv_low();
    if (Status s = validate_merge_layers(storing.merge_layers, model_->config.n_layers); !s)
        return s.error();
    auto engine = Engine::create(model_, eo);
    if (!engine) return engine.error();
    engine_ = std::move(engine).value();
    ServingOptions so;
    so.max_batch_tokens = settings_.max_batch_tokens;
    so.allocator = settings_.allocator == "contiguous" ? Allocator::kContiguous : Allocator::kPaged;
    so.prefix_cache = settings_.prefix_cache;
    so.preempt = settings_.preempt == "swap" ? PreemptMode::kSwap : PreemptMode::kRecompute;
    so.kv_cache = settings_.kv_cache;
    auto capture = parse_attention_spec(settings_.capture_attention, model_->config);
    if (!capture) return capture.error();
    so.capture_attention = capture.value();
    auto evictor = storing.evictor(model_->config.n_layers);
    if (!evictor) return evictor.error();
    so.evictor = std::move(evictor).value();
    if (so.evictor && so.allocator == Allocator::kContiguous)
        return Error{"token eviction needs the paged allocator"};
    problem_.clear();
    // The first run may replace a file at the record path when forced; a restart's run never
    // replaces the one before it.
    bool replace = settings_.record_force && starts_++ == 0;
    const std::string path = !settings_.record ? temporary_session_path()
                             : replace         ? settings_.record_path
                                               : first_free_path(settings_.record_path);
    nlohmann::json options = storing.to_json();
    options["workload"] = workload_name_;
    auto rec = start_recording(path, *engine_, settings_.allocator, options.dump(),
                               replace || !settings_.record);
    if (!rec) return rec.error();
    scheduler_ = std::make_unique<Scheduler>(*engine_, so, workload_);
    auto recording = LiveRecording::open(std::move(rec).value(), settings_.record);
    if (!recording) {
        stop_recording();
        return recording.error();
    }
    recording_ = std::move(recording).value();
    return {};
}

int LiveController::step(int n) {
    int ran = 0;
    for (; ran < n && scheduler_->step(); ++ran) {
    }
    if (Status s = recording_->sync(); !s && problem_.empty()) problem_ = s.error().message;
    if (!scheduler_->error().ok() && problem_.empty())
        problem_ = scheduler_->error().error().message;
    if (scheduler_->stopped_by_probe() && problem_.empty())
        problem_ = "the recording stopped: " + recording_->recorder().flush().error().message;
    return ran;
}

bool LiveController::finished() const {
    return scheduler_->done();
}

Status LiveController::restart(const LiveSettings& settings) {
    // Settings that cannot work are refused before the run that is there is given up.
    if (auto o = eviction_flags(settings).options(); !o) return o.error();
    if (settings.policy != "none" && settings.allocator == "contiguous")
        return Error{"token eviction needs the paged allocator"};
    if (!settings.kv_cache && settings.allocator == "contiguous")
        return Error{"without a KV cache blocks are allocated as the text grows: paged only"};
    settings_ = settings;
    return start();
}

Status LiveController::add_prompt(const std::string& text, int max_tokens) {
    if (!model_->tokenizer)
        return Error{"this model has no tokenizer: prompts can only be given as ids in a workload"};
    Request r;
    r.id = "live";
    r.id += std::to_string(++added_);
    if (Status s = model_->tokenizer->check_fits(text, model_->config.context_length, "the prompt");
        !s)
        return s;
    r.prompt = model_->tokenizer->encode(text, model_->tokenizer->wants_bos());
    if (r.prompt.empty()) return Error{"the prompt is empty"};
    r.max_tokens = max_tokens;
    scheduler_->add_request(r);
    workload_.push_back(r);  // a restart replays it too
    return {};
}

std::vector<PendingRequest> LiveController::pending() const {
    std::vector<PendingRequest> out;
    const Tokenizer* tok = model_->tokenizer.get();
    for (const Request* r : scheduler_->not_arrived()) {
        PendingRequest p;
        p.id = r->id;
        p.arrival_step = r->arrival_step;
        p.prompt_tokens = static_cast<int>(r->prompt.size());
        p.max_tokens = r->max_tokens;
        if (tok) p.prompt_text = tok->decode(r->prompt, /*strip_space_prefix=*/true);
        out.push_back(std::move(p));
    }
    return out;
}

std::string LiveController::describe() const {
    return "live: " + model_path_for_recording(model_->path) + " (" + model_->format +
           ", CPU)\nworkload: " + workload_name_;
}

}  // namespace kvscope::app
