#include "sessions/step_ops.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "sessions/step_summary.h"
#include "sessions/timeline_state.h"

namespace kvscope {

std::vector<OpRecord> ops_of(const std::vector<Event>& events) {
    std::vector<OpRecord> ops;
    for (const Event& e : events) {
        if (e.kind != EventKind::kKernel) continue;
        OpRecord op;
        op.name = e.text;
        op.layer = e.a;
        op.threads = e.b;
        op.lane = e.c;
        op.start_ns = e.t_ns;
        op.end_ns = e.t_ns + (e.wide > 0 ? e.wide : 0);
        // Decoded events carry their cost; a payload left on one is one that did not decode.
        op.cost_known = e.payload.empty();
        op.cost = op.cost_known ? e.cost : KernelCost{};
        ops.push_back(std::move(op));
    }
    return ops;
}

namespace {
std::vector<OpRecord> ops_on(const std::vector<OpRecord>& ops, bool gpu) {
    std::vector<OpRecord> out;
    for (const OpRecord& op : ops)
        if ((op.lane != 0) == gpu) out.push_back(op);
    return out;
}
}  // namespace

std::vector<OpRecord> host_ops(const std::vector<OpRecord>& ops) {
    return ops_on(ops, false);
}

std::vector<OpRecord> gpu_ops(const std::vector<OpRecord>& ops) {
    return ops_on(ops, true);
}

std::vector<HbmSampleRecord> hbm_samples_of(const std::vector<Event>& events) {
    std::vector<HbmSampleRecord> samples;
    for (const Event& e : events) {
        if (e.kind != EventKind::kHbmSample) continue;
        HbmSampleRecord s;
        s.start_ns = e.t_ns;
        s.end_ns = std::max(e.t_ns, e.wide);
        s.total = e.value;
        HbmBytes split;
        if (decode_hbm_bytes(e.payload, split)) s.read = split.read, s.written = split.written;
        samples.push_back(s);
    }
    return samples;
}

std::map<int32_t, std::pair<int64_t, int64_t>> layer_spans(const std::vector<OpRecord>& ops) {
    std::map<int32_t, std::pair<int64_t, int64_t>> layers;
    for (const OpRecord& op : ops) {
        if (op.layer < 0) continue;
        auto [it, fresh] = layers.try_emplace(op.layer, op.start_ns, op.end_ns);
        if (!fresh) it->second.second = std::max(it->second.second, op.end_ns);
    }
    return layers;
}

std::vector<OpKindTotals> totals_by_kind(const std::vector<OpRecord>& ops) {
    std::vector<OpKindTotals> rows;
    std::unordered_map<std::string, size_t> at;
    for (const OpRecord& op : ops) {
        auto [it, fresh] = at.try_emplace(op.name, rows.size());
        if (fresh) {
            rows.emplace_back();
            rows.back().name = op.name;
        }
        OpKindTotals& row = rows[it->second];
        ++row.count;
        row.ns += op.end_ns - op.start_ns;
        row.cost += op.cost;
    }
    return rows;
}

nlohmann::json step_ops_json(const std::vector<Event>& step_events, const RunInfo& info) {
    using json = nlohmann::json;
    StepSummary sum;
    summarize_step(step_events, sum);
    std::vector<OpRecord> ops = ops_of(step_events);
    auto split = [](const KernelCost& k) {
        return json{{"weights", k.weight_bytes},
                    {"kv_read", k.kv_read_bytes},
                    {"kv_written", k.kv_written_bytes},
                    {"activations", k.activation_bytes}};
    };
    json jops = json::array();
    for (const OpRecord& op : ops)
        jops.push_back({{"name", op.name},
                        {"layer", op.layer},
                        {"start_ns", op.start_ns},
                        {"end_ns", op.end_ns},
                        {"threads", op.threads},
                        {"lane", op.lane},
                        {"bytes", op.cost.bytes()},
                        {"split", split(op.cost)},
                        {"flops", op.cost.flops}});
    json roofline = json::array();
    const double limit = info.bandwidth_limit_gbps();
    // The roofline is the host's: a GPU's kernels carry no modelled bytes (their time and the
    // DRAM bytes sampled over it are listed on their own).
    for (const OpKindTotals& t : totals_by_kind(host_ops(ops)))
        roofline.push_back({{"name", t.name},
                            {"count", t.count},
                            {"seconds", static_cast<double>(t.ns) * 1e-9},
                            {"bytes", t.cost.bytes()},
                            {"flops", t.cost.flops},
                            {"intensity_flops_per_byte", t.intensity()},
                            {"gbps", t.gbps()},
                            {"gflops", t.gflops()},
                            {"fraction_of_limit", limit > 0 ? t.gbps() / limit : 0.0}});
    json samples = json::array();
    for (const HbmSampleRecord& h : hbm_samples_of(step_events))
        samples.push_back({{"start_ns", h.start_ns},
                           {"end_ns", h.end_ns},
                           {"read_bytes", h.read},
                           {"written_bytes", h.written},
                           {"gbps", h.gbps()}});
    const double ops_s = static_cast<double>(sum.ops_ns) * 1e-9;
    return {{"ops", std::move(jops)},
            {"hbm_samples", std::move(samples)},
            {"bytes_moved", sum.bytes_moved()},
            {"bytes", split(sum.moved())},
            {"step_seconds", sum.step_seconds},
            {"ops_seconds", ops_s},
            {"other_seconds", std::max(0.0, sum.step_seconds - ops_s)},
            {"bandwidth_gbps", sum.bandwidth_gbps()},
            {"bandwidth_limit_gbps", limit},
            {"bandwidth_fraction", limit > 0 ? sum.bandwidth_gbps() / limit : 0.0},
            {"roofline", std::move(roofline)}};
}

}  // namespace kvscope
