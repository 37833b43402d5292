#include "sessions/export.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <ostream>

#include "sessions/session_reader.h"

namespace kvscope {

Status export_perfetto(SessionReader& reader, std::ostream& out) {
    using json = nlohmann::json;
    const auto& steps = reader.steps();
    int64_t t0 = steps.empty() ? 0 : steps.front().t_begin_ns;
    auto us = [&](int64_t ns) { return static_cast<double>(ns - t0) / 1000.0; };
    json events = json::array();
    const int pid = 1, tid_steps = 1, tid_phases = 2;
    events.push_back({{"ph", "M"},
                      {"name", "process_name"},
                      {"pid", pid},
                      {"args", {{"name", "kvscope " + reader.info().backend}}}});
    events.push_back({{"ph", "M"},
                      {"name", "thread_name"},
                      {"pid", pid},
                      {"tid", tid_steps},
                      {"args", {{"name", "engine steps"}}}});
    events.push_back({{"ph", "M"},
                      {"name", "thread_name"},
                      {"pid", pid},
                      {"tid", tid_phases},
                      {"args", {{"name", "phases"}}}});
    for (const StepSummary& s : steps) {
        int64_t dur_ns = static_cast<int64_t>(s.step_seconds * 1e9);
        events.push_back({{"ph", "X"},
                          {"name", "step " + std::to_string(s.step)},
                          {"pid", pid},
                          {"tid", tid_steps},
                          {"ts", us(s.t_begin_ns)},
                          {"dur", static_cast<double>(dur_ns) / 1000.0},
                          {"args",
                           {{"prefill_tokens", s.prefill_tokens},
                            {"decode_tokens", s.decode_tokens},
                            {"running", s.running},
                            {"waiting", s.waiting},
                            {"swapped", s.swapped}}}});
        // Scheduling, the forward pass (prefill or decode) and sampling run one after the other
        // inside a step; attention and MLP are parts of the forward pass (summed over layers),
        // drawn nested in it.
        auto slice = [&](Phase p, int64_t start) {
            int64_t ns = s.phase_ns[static_cast<int>(p)];
            if (ns <= 0) return start;
            events.push_back({{"ph", "X"},
                              {"name", std::string(phase_name(p))},
                              {"pid", pid},
                              {"tid", tid_phases},
                              {"ts", us(start)},
                              {"dur", static_cast<double>(ns) / 1000.0}});
            return start + ns;
        };
        int64_t at = slice(Phase::kSchedule, s.t_begin_ns);
        for (Phase forward : {Phase::kPrefill, Phase::kDecode}) {
            int64_t end = slice(forward, at);
            if (end == at) continue;
            slice(Phase::kMlp, slice(Phase::kAttention, at));
            at = end;
        }
        slice(Phase::kSample, at);
        double ts = us(s.t_begin_ns);
        auto counter = [&](const char* name, double v) {
            events.push_back(
                {{"ph", "C"}, {"name", name}, {"pid", pid}, {"ts", ts}, {"args", {{"value", v}}}});
        };
        counter("blocks_used", s.blocks_used);
        counter("blocks_cached", s.blocks_cached);
        counter("fragmentation", s.fragmentation);
        counter("utilization", s.utilization);
        counter("prefix_hit_rate", s.prefix_hit_rate);
        counter("running", s.running);
    }
    // GPU kernels and bandwidth samples, when the run had them.
    auto gpu = reader.events(reader.first_step(), reader.last_step(),
                             {EventKind::kKernel, EventKind::kHbmSample});
    if (!gpu) return gpu.error();
    for (const Event& e : gpu.value()) {
        if (e.kind == EventKind::kKernel) {
            events.push_back({{"ph", "X"},
                              {"name", e.text},
                              {"pid", 2},
                              {"tid", e.c},
                              {"ts", us(e.t_ns)},
                              {"dur", static_cast<double>(e.wide - e.t_ns) / 1000.0},
                              {"args", {{"grid", e.a}, {"block", e.b}, {"step", e.step}}}});
        } else {
            double secs = static_cast<double>(e.wide - e.t_ns) / 1e9;
            events.push_back({{"ph", "C"},
                              {"name", "hbm_bandwidth_GBps"},
                              {"pid", 2},
                              {"ts", us(e.t_ns)},
                              {"args", {{"value", secs > 0 ? e.value / secs / 1e9 : 0.0}}}});
        }
    }
    json doc = {{"traceEvents", std::move(events)},
                {"displayTimeUnit", "ms"},
                {"otherData",
                 {{"session", reader.path()},
                  {"num_blocks", reader.info().num_blocks},
                  {"block_size", reader.info().block_size}}}};
    out << doc.dump();
    return {};
}

Status export_csv(SessionReader& reader, std::ostream& out_stream) {
    std::string out =
        "step,t_begin_ns,step_seconds,running,waiting,swapped,prefill_tokens,decode_tokens,blocks_"
        "used,"
        "blocks_cached,fragmentation,internal_fragmentation,external_fragmentation,utilization,"
        "prefix_hit_rate\n";
    char line[512];
    for (const StepSummary& s : reader.steps()) {
        std::snprintf(
            line, sizeof line, "%lld,%lld,%.9g,%d,%d,%d,%d,%d,%d,%d,%.9g,%.9g,%.9g,%.9g,%.9g\n",
            static_cast<long long>(s.step), static_cast<long long>(s.t_begin_ns), s.step_seconds,
            s.running, s.waiting, s.swapped, s.prefill_tokens, s.decode_tokens, s.blocks_used,
            s.blocks_cached, s.fragmentation, s.internal_fragmentation, s.external_fragmentation,
            s.utilization, s.prefix_hit_rate);
        out += line;
    }
    out_stream << out;
    return {};
}

}  // namespace kvscope
