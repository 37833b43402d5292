#include "sessions/export.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <set>

#include "sessions/session_reader.h"
#include "sessions/step_ops.h"

namespace kvscope {

namespace {
// Writes the trace's events into its document as they are made: an export of any length holds
// one step's events at a time, never the document. A text that is not UTF-8 (an op name from a
// damaged file) is written with replacement characters rather than stopping the export.
class TraceWriter {
  public:
    explicit TraceWriter(std::ostream& out) : out_(out) { out_ << "{\"traceEvents\":["; }
    void add(const nlohmann::json& event) {
        out_ << (first_ ? "" : ",") << dump(event);
        first_ = false;
    }
    // Closes the event list and writes the document's other members.
    void finish(const nlohmann::json& members) {
        out_ << "]";
        for (const auto& [key, value] : members.items())
            out_ << "," << dump(key) << ":" << dump(value);
        out_ << "}";
    }

  private:
    static std::string dump(const nlohmann::json& j) {
        return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
    std::ostream& out_;
    bool first_ = true;
};

// A GPU DRAM sample, as the counter tracks need it.
struct HbmSample {
    int64_t start_ns = 0, end_ns = 0;
    double bytes = 0;
    HbmBytes split;
};
}  // namespace

Status export_perfetto(SessionReader& reader, std::ostream& out) {
    using json = nlohmann::json;
    TraceWriter trace(out);
    std::optional<int64_t> t0;  // the first step's start: time 0 of the trace
    auto us = [&](int64_t ns) { return static_cast<double>(ns - t0.value_or(0)) / 1000.0; };
    const int pid = 1, tid_steps = 1, tid_phases = 2;
    trace.add({{"ph", "M"},
               {"name", "process_name"},
               {"pid", pid},
               {"args", {{"name", "kvscope " + reader.info().backend}}}});
    trace.add({{"ph", "M"},
               {"name", "thread_name"},
               {"pid", pid},
               {"tid", tid_steps},
               {"args", {{"name", "engine steps"}}}});
    trace.add({{"ph", "M"},
               {"name", "thread_name"},
               {"pid", pid},
               {"tid", tid_phases},
               {"args", {{"name", "phases"}}}});
    const double limit = reader.info().bandwidth_limit_gbps();
    const int pid_gpu = 2;
    std::set<int32_t> lanes;
    std::vector<HbmSample> samples;
    // Ops (kernel events) by step: host ops nest inside their step's slice on the steps track,
    // under a slice per layer; a GPU's kernels get a track per stream.
    Status walked = reader.for_each_step(
        {EventKind::kKernel, EventKind::kHbmSample},
        [&](const StepSummary& s, std::vector<Event>& step_events) -> Status {
            if (!t0) t0 = s.t_begin_ns;
            std::vector<OpRecord> ops;
            for (OpRecord& op : ops_of(step_events))
                if (op.lane == 0) ops.push_back(std::move(op));
            // The step's slice covers its ops (scheduling starts before step_begin is
            // reported), so that Perfetto nests them.
            int64_t begin = s.t_begin_ns,
                    end = s.t_begin_ns + static_cast<int64_t>(s.step_seconds * 1e9);
            for (const OpRecord& op : ops) {
                begin = std::min(begin, op.start_ns);
                end = std::max(end, op.end_ns);
            }
            trace.add({{"ph", "X"},
                       {"name", "step " + std::to_string(s.step)},
                       {"pid", pid},
                       {"tid", tid_steps},
                       {"ts", us(begin)},
                       {"dur", static_cast<double>(end - begin) / 1000.0},
                       {"args",
                        {{"prefill_tokens", s.prefill_tokens},
                         {"decode_tokens", s.decode_tokens},
                         {"running", s.running},
                         {"waiting", s.waiting},
                         {"swapped", s.swapped},
                         {"bytes_moved", s.bytes_moved()},
                         {"bandwidth_gbps", s.bandwidth_gbps()}}}});
            for (const auto& [layer, span] : layer_spans(ops))
                trace.add({{"ph", "X"},
                           {"name", "layer " + std::to_string(layer)},
                           {"pid", pid},
                           {"tid", tid_steps},
                           {"ts", us(span.first)},
                           {"dur", static_cast<double>(span.second - span.first) / 1000.0}});
            for (const OpRecord& op : ops)
                trace.add({{"ph", "X"},
                           {"name", op.name},
                           {"pid", pid},
                           {"tid", tid_steps},
                           {"ts", us(op.start_ns)},
                           {"dur", static_cast<double>(op.end_ns - op.start_ns) / 1000.0},
                           {"args",
                            {{"layer", op.layer},
                             {"threads", op.threads},
                             {"bytes", op.cost.bytes()},
                             {"weight_bytes", op.cost.weight_bytes},
                             {"kv_read_bytes", op.cost.kv_read_bytes},
                             {"kv_written_bytes", op.cost.kv_written_bytes},
                             {"activation_bytes", op.cost.activation_bytes},
                             {"flops", op.cost.flops},
                             {"gbps", op.gbps()}}}});
            // Scheduling, the forward pass (prefill or decode) and sampling run one after the
            // other inside a step; attention and MLP are parts of the forward pass (summed over
            // layers), drawn nested in it.
            auto slice = [&](Phase p, int64_t start) {
                int64_t ns = s.phase_ns[static_cast<int>(p)];
                if (ns <= 0) return start;
                trace.add({{"ph", "X"},
                           {"name", std::string(phase_name(p))},
                           {"pid", pid},
                           {"tid", tid_phases},
                           {"ts", us(start)},
                           {"dur", static_cast<double>(ns) / 1000.0}});
                return start + ns;
            };
            int64_t at = slice(Phase::kSchedule, s.t_begin_ns);
            for (Phase forward : {Phase::kPrefill, Phase::kDecode}) {
                int64_t end_of = slice(forward, at);
                if (end_of == at) continue;
                slice(Phase::kMlp, slice(Phase::kAttention, at));
                at = end_of;
            }
            slice(Phase::kSample, at);
            double ts = us(s.t_begin_ns);
            auto counter = [&](const char* name, double v) {
                trace.add({{"ph", "C"},
                           {"name", name},
                           {"pid", pid},
                           {"ts", ts},
                           {"args", {{"value", v}}}});
            };
            counter("blocks_used", s.blocks_used);
            counter("blocks_cached", s.blocks_cached);
            counter("fragmentation", s.fragmentation);
            counter("utilization", s.utilization);
            counter("prefix_hit_rate", s.prefix_hit_rate);
            counter("running", s.running);
            if (s.bytes_moved() > 0) {
                counter("bandwidth_GBps", s.bandwidth_gbps());
                if (limit > 0) counter("bandwidth_limit_GBps", limit);
            }
            // A GPU's kernels, copies and sets on a track per stream, when the run had them:
            // named by kernel, filed under the op that launched it.
            for (const Event& e : step_events) {
                if (e.kind == EventKind::kHbmSample) {
                    HbmSample sample{e.t_ns, e.wide, e.value, {}};
                    if (!decode_hbm_bytes(e.payload, sample.split)) sample.split = {};
                    samples.push_back(sample);
                    continue;
                }
                if (e.c == 0) continue;  // a host op, drawn above
                const GpuKernelText name = split_gpu_kernel_text(e.text);
                json args = {{"step", e.step}};
                if (!name.op.empty()) args["op"] = std::string(name.op);
                if (e.a >= 0) args["layer"] = e.a;
                if (e.b > 0) args["threads"] = e.b;
                if (e.value > 0) args["bytes"] = e.value;
                trace.add({{"ph", "X"},
                           {"name", std::string(name.kernel)},
                           {"cat", name.op.empty() ? std::string("gpu") : std::string(name.op)},
                           {"pid", pid_gpu},
                           {"tid", e.c},
                           {"ts", us(e.t_ns)},
                           {"dur", static_cast<double>(e.wide) / 1000.0},
                           {"args", std::move(args)}});
                lanes.insert(e.c);
            }
            return {};
        });
    if (!walked) return walked;
    if (!lanes.empty() || !samples.empty())
        trace.add(
            {{"ph", "M"}, {"name", "process_name"}, {"pid", pid_gpu}, {"args", {{"name", "GPU"}}}});
    for (int32_t lane : lanes)
        trace.add({{"ph", "M"},
                   {"name", "thread_name"},
                   {"pid", pid_gpu},
                   {"tid", lane},
                   {"args", {{"name", "stream " + std::to_string(lane - 1)}}}});
    // DRAM bandwidth as counter tracks, total and split, from the PM samples in time order. A
    // counter holds its value until the next point, so it drops to 0 where sampling stopped (or
    // lost samples) rather than drawing the last sample's rate across the gap. Samples of no
    // length carry no rate and are left out.
    std::stable_sort(samples.begin(), samples.end(), [](const HbmSample& a, const HbmSample& b) {
        return a.start_ns < b.start_ns;
    });
    auto hbm = [&](int64_t t, double total, double read, double written) {
        for (auto [name, v] :
             {std::pair{"hbm_bandwidth_GBps", total}, std::pair{"hbm_read_GBps", read},
              std::pair{"hbm_write_GBps", written}})
            trace.add({{"ph", "C"},
                       {"name", name},
                       {"pid", pid_gpu},
                       {"ts", us(t)},
                       {"args", {{"value", v}}}});
    };
    for (size_t i = 0; i < samples.size(); ++i) {
        const HbmSample& e = samples[i];
        if (e.end_ns <= e.start_ns) continue;
        const double ns = static_cast<double>(e.end_ns - e.start_ns);
        // Bytes per ns are GB/s.
        hbm(e.start_ns, e.bytes / ns, static_cast<double>(e.split.read) / ns,
            static_cast<double>(e.split.written) / ns);
        size_t next = i + 1;
        while (next < samples.size() && samples[next].end_ns <= samples[next].start_ns)
            ++next;
        if (next == samples.size() || samples[next].start_ns > e.end_ns) hbm(e.end_ns, 0, 0, 0);
    }
    trace.finish({{"displayTimeUnit", "ms"},
                  {"otherData",
                   {{"session", reader.path()},
                    {"num_blocks", reader.info().num_blocks},
                    {"block_size", reader.info().block_size}}}});
    return {};
}

Status export_csv(SessionReader& reader, std::ostream& out) {
    out << "step,t_begin_ns,step_seconds,running,waiting,swapped,prefill_tokens,decode_tokens,"
           "blocks_"
           "used,"
           "blocks_cached,fragmentation,internal_fragmentation,external_fragmentation,utilization,"
           "prefix_hit_rate,weight_bytes,kv_read_bytes,kv_written_bytes,activation_bytes,bytes_"
           "moved,"
           "bandwidth_gbps,bandwidth_fraction\n";
    const double limit = reader.info().bandwidth_limit_gbps();
    char line[512];
    return reader.for_each_step({}, [&](const StepSummary& s, std::vector<Event>&) -> Status {
        std::snprintf(
            line, sizeof line,
            "%lld,%lld,%.9g,%d,%d,%d,%d,%d,%d,%d,%.9g,%.9g,%.9g,%.9g,%.9g,%lld,%lld,%lld,%lld,%lld,"
            "%.9g,%.9g\n",
            static_cast<long long>(s.step), static_cast<long long>(s.t_begin_ns), s.step_seconds,
            s.running, s.waiting, s.swapped, s.prefill_tokens, s.decode_tokens, s.blocks_used,
            s.blocks_cached, s.fragmentation, s.internal_fragmentation, s.external_fragmentation,
            s.utilization, s.prefix_hit_rate, static_cast<long long>(s.weight_bytes),
            static_cast<long long>(s.kv_read_bytes), static_cast<long long>(s.kv_written_bytes),
            static_cast<long long>(s.activation_bytes), static_cast<long long>(s.bytes_moved()),
            s.bandwidth_gbps(), limit > 0 ? s.bandwidth_gbps() / limit : 0.0);
        out << line;
        return {};
    });
}

}  // namespace kvscope
