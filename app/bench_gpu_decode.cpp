// `kvscope bench gpu --decode` (app/bench_gpu_decode.h).
#include "app/bench_gpu_decode.h"

#ifdef KVSCOPE_HAVE_CUDA
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <thread>

#include "app/commands.h"
#include "app/data_paths.h"
#include "base/terminal_text.h"
#include "engine/engine.h"
#include "engine/op_trace.h"
#include "engine_cuda/cuda_forward.h"
#include "probes/gpu_probes_module.h"

namespace kvscope::app {

namespace {
struct DecodeRow {
    int batch = 0, context = 0;
    double tokens_per_second = 0, bound_tokens_per_second = 0;
    int64_t bytes_per_step = 0;
    int64_t bytes_all_steps = 0;  // warm-up steps included: what a trace of the run covers
};

// `steps` decode steps (after two untimed ones) of `batch` sequences whose caches end at
// `context` slots, each step timed end to end: tables uploaded, the layers, logits copied back.
// The K/V the sequences attend to are left as the cache holds them: a step reads the same bytes
// whatever they are. The bound is the bytes a step must read (the weights once, every sequence's
// K/V) over the measured copy bandwidth.
constexpr int kWarmSteps = 2;

Result<DecodeRow> time_decode(Engine& e, int batch, int context, int steps, double copy_gbps,
                              int64_t weight_bytes) {
    using clock = std::chrono::steady_clock;
    constexpr int kWarm = kWarmSteps;
    const int first = context - kWarm - steps;  // positions first .. context - 1 are decoded
    if (first < 1)
        return Error{"--context " + std::to_string(context) + " is too short for " +
                     std::to_string(steps) + " steps"};
    std::vector<BlockTable> tables(static_cast<size_t>(batch));
    auto release = [&] {
        for (BlockTable& t : tables)
            e.blocks().free(t);
    };
    for (BlockTable& t : tables)
        if (Status s = e.blocks().grow(t, first); !s) {
            release();
            return s.error();
        }
    const ModelConfig& c = e.config();
    const int64_t kv_token = int64_t{2} * c.n_layers * c.kv_dim() * 2;  // K and V, f16
    DecodeRow row;
    std::vector<float> logits;
    double seconds = 0;
    for (int i = 0; i < kWarm + steps; ++i) {
        ForwardBatch b;
        for (BlockTable& t : tables) {
            if (Status s = e.blocks().grow(t, first + i + 1); !s) {
                release();
                return s.error();
            }
            b.tokens.push_back(1);
            b.chunks.push_back({&t, first + i, 1, true});
        }
        const auto t0 = clock::now();
        Status ran = e.forward().run(b, logits);
        if (i >= kWarm) seconds += std::chrono::duration<double>(clock::now() - t0).count();
        if (!ran) {
            release();
            return ran.error();
        }
        row.bytes_all_steps += weight_bytes + int64_t{batch} * (first + i + 1) * kv_token;
    }
    release();
    const double mean_slots = first + kWarm + (steps + 1) / 2.0;
    row.batch = batch;
    row.context = context;
    row.tokens_per_second = batch * steps / seconds;
    row.bytes_per_step = weight_bytes + static_cast<int64_t>(batch * mean_slots * kv_token);
    row.bound_tokens_per_second = batch * copy_gbps * 1e9 / static_cast<double>(row.bytes_per_step);
    return row;
}

// The one GpuProbes the backend is made with, in front of whichever probes the current round
// started (none, the trace, the trace and DRAM sampling): CUPTI allows one set per process, and
// the bench alternates them on one engine rather than uploading the weights once per setting.
// The backend asks for op ids once, at start; each new set is given the names in the same order,
// so its ids are the same.
class SwitchedProbes final : public GpuProbes {
  public:
    ~SwitchedProbes() override {
        std::vector<Event> dropped;
        stop(dropped);
    }
    // Stops what runs (its events into `out`) and starts `options` (null: none). Fails, saying
    // why, when the parts asked for do not all start.
    Status use(const GpuProbeOptions* options, std::vector<Event>& out) {
        stop(out);
        if (!options) return {};
        GpuProbeStart s = load_gpu_probes(*options, executable_dir());
        std::string notes;
        for (const std::string& n : s.notes)
            notes += (notes.empty() ? "" : "; ") + n;
        if (!s.probes || (options->activity && !s.probes->tracing()) ||
            (options->sampling && !s.probes->sampling()))
            return Error{notes.empty() ? std::string("the GPU probes did not start") : notes};
        for (size_t i = 0; i < names_.size(); ++i)
            if (s.probes->op(names_[i]) != static_cast<int32_t>(i))
                return Error{"the GPU probes numbered the op " + names_[i] + " differently"};
        on_ = std::move(s.probes);
        return {};
    }

    int32_t op(std::string_view name) override {
        for (size_t i = 0; i < names_.size(); ++i)
            if (names_[i] == name) return static_cast<int32_t>(i);
        names_.emplace_back(name);
        return static_cast<int32_t>(names_.size() - 1);
    }
    GpuCorrelation* correlation() override { return on_ ? on_->correlation() : nullptr; }
    void collect(int64_t step, std::vector<Event>& out) override {
        if (on_) on_->collect(step, out);
    }
    void stop(std::vector<Event>& out) override {
        if (!on_) return;
        on_->stop(out);
        for (const std::string& p : on_->problems())
            problems_.push_back(p);
        on_.reset();
    }
    bool tracing() const override { return on_ && on_->tracing(); }
    bool sampling() const override { return on_ && on_->sampling(); }
    GpuEventCounts counts() const override { return on_ ? on_->counts() : GpuEventCounts{}; }
    std::vector<std::string> problems() const override { return problems_; }

  private:
    std::unique_ptr<GpuProbes> on_;
    std::vector<std::string> names_;
    std::vector<std::string> problems_;
};

// Where a traced step's GPU time goes: per op, its kernels' time and launches per step, and the
// sum over all ops against the span from the first kernel's start to the last one's end (the
// rest is the GPU waiting for the host: launches, the step's uploads, the logits' download).
nlohmann::json gpu_time_by_op(const std::vector<Event>& events, int steps) {
    std::map<std::string, std::pair<int64_t, int64_t>> ops;  // ns, launches
    int64_t busy = 0, from = INT64_MAX, to = INT64_MIN;
    for (const Event& e : events) {
        if (e.kind != EventKind::kKernel || e.c == 0) continue;
        const GpuKernelText t = split_gpu_kernel_text(e.text);
        auto& [ns, launches] = ops[t.op.empty() ? std::string("(none)") : std::string(t.op)];
        ns += e.wide;
        ++launches;
        busy += e.wide;
        from = std::min(from, e.t_ns);
        to = std::max(to, e.t_ns + e.wide);
    }
    nlohmann::json j = nlohmann::json::object();
    for (const auto& [op, v] : ops)
        j["ops"][op] = {{"us_per_step", static_cast<double>(v.first) / 1e3 / steps},
                        {"launches_per_step", static_cast<double>(v.second) / steps}};
    j["kernel_us_per_step"] = static_cast<double>(busy) / 1e3 / steps;
    j["span_us_per_step"] = from < to ? static_cast<double>(to - from) / 1e3 / steps : 0.0;
    return j;
}

struct ProbeMode {
    const char* name;
    bool activity, sampling, graphs;
};
// Decode steps replay CUDA graphs, traced or not; "off-launches" and "trace-launches" run them
// as launches, for what the graphs save and what the trace costs each way.
constexpr ProbeMode kProbeModes[] = {
    {"off", false, false, true},  {"off-launches", false, false, false},
    {"trace", true, false, true}, {"trace+dram", true, true, true},
    {"dram", false, true, true},  {"trace-launches", true, false, false},
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}

// Decode with the probes off, tracing, and tracing while sampling DRAM, in turn for `rounds`
// rounds (this machine's speed drifts: alternating keeps the comparison fair). In the sampled
// rounds, the DRAM bytes the samples counted while the steps' kernels ran, against the bytes the
// steps must move (DecodeRow::bytes_all_steps: the weights once a step and every sequence's K/V;
// activations, a few MB, are left out).
int run_probe_overhead(Engine& e, SwitchedProbes& probes, const DecodeBenchOptions& o,
                       double copy_gbps, int64_t weight_bytes, nlohmann::json* out) {
    const int batch = o.batches.front(), context = o.contexts.front();
    std::vector<double> tps[std::size(kProbeModes)];
    std::vector<double> dram_ratio;
    int64_t last_sampled = 0, last_expected = 0;
    nlohmann::json by_op;
    OpTrace trace;
    for (int round = 0; round < o.probe_rounds; ++round)
        for (size_t m = 0; m < std::size(kProbeModes); ++m) {
            const ProbeMode& mode = kProbeModes[m];
            GpuProbeOptions po;
            po.activity = mode.activity;
            po.sampling = mode.sampling;
            std::vector<Event> events;
            if (Status s = probes.use(mode.activity || mode.sampling ? &po : nullptr, events); !s)
                return fail("bench gpu --probe-overhead: " + std::string(mode.name) + ": " +
                            s.error().message);
            trace.device_events.clear();
            e.forward().set_trace(mode.activity ? &trace : nullptr);
            e.forward().set_step_graphs(mode.graphs);
            auto row = time_decode(e, batch, context, o.steps, copy_gbps, weight_bytes);
            e.forward().set_trace(nullptr);
            e.forward().set_step_graphs(true);
            if (!row) return fail("bench gpu: " + row.error().message);
            tps[m].push_back(row->tokens_per_second);
            if (mode.activity && !mode.sampling && mode.graphs)
                by_op = gpu_time_by_op(trace.device_events, kWarmSteps + o.steps);
            if (!mode.activity || !mode.sampling) continue;
            // The last samples reach the drain thread a few intervals after the work.
            std::this_thread::sleep_for(std::chrono::milliseconds(5 * po.drain_interval_ms));
            events = std::move(trace.device_events);
            if (Status s = probes.use(nullptr, events); !s) return fail(s.error().message);
            int64_t from = INT64_MAX, to = INT64_MIN;
            for (const Event& ev : events)
                if (ev.kind == EventKind::kKernel && ev.c != 0) {
                    from = std::min(from, ev.t_ns);
                    to = std::max(to, ev.t_ns + ev.wide);
                }
            if (from >= to)
                return fail("bench gpu --probe-overhead: the trace holds no GPU kernels");
            const HbmBytes in = hbm_bytes_within(events, from, to);
            last_sampled = in.read + in.written;
            last_expected = row->bytes_all_steps;
            dram_ratio.push_back(static_cast<double>(last_sampled) /
                                 static_cast<double>(last_expected));
        }
    std::vector<Event> rest;
    (void)probes.use(nullptr, rest);
    const double off = median(tps[0]);
    nlohmann::json j = {{"batch", batch},
                        {"context", context},
                        {"steps", o.steps},
                        {"rounds", o.probe_rounds},
                        {"dram_sampled_over_expected", median(dram_ratio)},
                        {"dram_sampled_bytes_last_round", last_sampled},
                        {"dram_expected_bytes_last_round", last_expected},
                        {"problems", probes.problems()},
                        {"gpu_time_by_op", by_op}};
    for (size_t m = 0; m < std::size(kProbeModes); ++m) {
        j["tokens_per_second"][kProbeModes[m].name] = median(tps[m]);
        j["tokens_per_second_each_round"][kProbeModes[m].name] = tps[m];
        j["cost"][kProbeModes[m].name] = off > 0 ? 1.0 - median(tps[m]) / off : 0.0;
        // Against decode by launches (for trace-launches: the trace's cost where it traces
        // every launch).
        const double launches = median(tps[1]);
        j["cost_vs_launches"][kProbeModes[m].name] =
            launches > 0 ? 1.0 - median(tps[m]) / launches : 0.0;
    }
    if (o.json) {
        (*out)["probe_overhead"] = j;
        return 0;
    }
    std::printf("probes, batch %d, context %d, median of %d alternated rounds of %d steps:\n",
                batch, context, o.probe_rounds, o.steps);
    for (size_t m = 0; m < std::size(kProbeModes); ++m)
        std::printf("  %-11s %10.1f tokens/s  %+6.2f%%\n", kProbeModes[m].name, median(tps[m]),
                    -100.0 * j["cost"][kProbeModes[m].name].get<double>());
    std::printf(
        "  DRAM sampled while the kernels ran: %.3f GB; the steps must move %.3f GB "
        "(%.1f%%)\n",
        static_cast<double>(last_sampled) / 1e9, static_cast<double>(last_expected) / 1e9,
        100.0 * median(dram_ratio));
    for (const std::string& p : probes.problems())
        std::printf("  problem: %s\n", terminal_safe(p).c_str());
    std::printf("  GPU time per step by op (traced): %s\n", terminal_safe(by_op.dump()).c_str());
    return 0;
}
}  // namespace

int run_decode_bench(const DecodeBenchOptions& o, int device, double copy_gbps,
                     nlohmann::json* out) {
    auto loaded = load_model(o.model);
    if (!loaded) return fail(loaded.error().message);
    auto model = std::make_shared<const LoadedModel>(std::move(loaded).value());
    const int max_batch = *std::max_element(o.batches.begin(), o.batches.end());
    const int max_context = *std::max_element(o.contexts.begin(), o.contexts.end());
    if (max_context > model->config.context_length)
        return fail("bench gpu: --context " + std::to_string(max_context) + " is past " +
                    terminal_safe(o.model) + "'s context of " +
                    std::to_string(model->config.context_length));
    EngineOptions eo;
    eo.kv_dtype = KvDtype::kF16;
    eo.num_blocks = max_batch * BlockManager::blocks_for(max_context, eo.block_size);
    CudaForwardOptions co;
    co.device = device;
    // Declared before the engine, so it outlives the backend that holds it.
    SwitchedProbes probes;
    if (o.probe_rounds > 0) co.probes = &probes;
    eo.backend = cuda_backend(co);
    auto engine = Engine::create(model, eo);
    if (!engine) return fail("bench gpu: " + engine.error().message);
    const int64_t weight_bytes = cuda_weight_bytes(model->config, model->weights);
    if (!o.json) {
        std::printf(
            "decode, %s on device %d: %.2f GB of 16-bit weights, f16 K/V; bound = (weights + K/V "
            "a step reads) / copy bandwidth %.0f GB/s\n",
            terminal_safe(o.model).c_str(), device, static_cast<double>(weight_bytes) / 1e9,
            copy_gbps);
        std::printf("  %5s %8s %12s %14s %9s\n", "batch", "context", "tokens/s", "bound tokens/s",
                    "of bound");
    }
    nlohmann::json rows = nlohmann::json::array();
    for (int context : o.contexts)
        for (int batch : o.batches) {
            auto row = time_decode(**engine, batch, context, o.steps, copy_gbps, weight_bytes);
            if (!row) return fail("bench gpu: " + row.error().message);
            const DecodeRow& r = row.value();
            if (o.json) {
                rows.push_back({{"batch", r.batch},
                                {"context", r.context},
                                {"tokens_per_second", r.tokens_per_second},
                                {"bound_tokens_per_second", r.bound_tokens_per_second},
                                {"bytes_per_step", r.bytes_per_step}});
                continue;
            }
            std::printf("  %5d %8d %12.1f %14.1f %8.0f%%\n", r.batch, r.context,
                        r.tokens_per_second, r.bound_tokens_per_second,
                        100.0 * r.tokens_per_second / r.bound_tokens_per_second);
            std::fflush(stdout);
        }
    if (o.json) (*out)["decode"] = rows;
    if (o.probe_rounds > 0)
        return run_probe_overhead(**engine, probes, o, copy_gbps, weight_bytes, out);
    return 0;
}

}  // namespace kvscope::app
#endif
