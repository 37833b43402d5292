#include "sessions/step_costs.h"

#include <algorithm>
#include <cstdio>

namespace kvscope {

Result<std::vector<std::pair<int64_t, int64_t>>> step_flops(SessionReader& reader, int64_t first,
                                                            int64_t last) {
    std::vector<std::pair<int64_t, int64_t>> out;
    Status walked = reader.for_each_event(first, last, {EventKind::kKernel},
                                          [&](const Event& e, const SharedText&) {
                                              if (out.empty() || out.back().first != e.step)
                                                  out.emplace_back(e.step, 0);
                                              out.back().second += e.cost.flops;
                                              return Status{};
                                          });
    if (!walked) return walked.error();
    return out;
}

Result<std::vector<StepCost>> step_costs(SessionReader& reader) {
    const auto& steps = reader.steps();
    if (steps.empty()) return std::vector<StepCost>();
    auto flops = step_flops(reader, steps.front().step, steps.back().step);
    if (!flops) return flops.error();
    std::vector<StepCost> out;
    auto f = flops->begin();
    for (const StepSummary& s : steps) {
        StepCost c;
        c.step = s.step;
        c.tokens = s.prefill_tokens + s.decode_tokens;
        c.seconds = s.step_seconds;
        c.bytes = s.bytes_moved();
        while (f != flops->end() && f->first < s.step)
            ++f;
        if (f != flops->end() && f->first == s.step) c.flops = f->second;
        out.push_back(c);
    }
    return out;
}

double cost_ratio(double left, double right) {
    return right != 0 ? left / right : 0.0;
}

CostComparison compare_costs(const std::vector<StepCost>& left,
                             const std::vector<StepCost>& right) {
    CostComparison c;
    const size_t n = std::min(left.size(), right.size());
    auto add = [](StepCost& total, const StepCost& step) {
        ++total.step;
        total.tokens += step.tokens;
        total.seconds += step.seconds;
        total.flops += step.flops;
        total.bytes += step.bytes;
    };
    for (size_t i = 0; i < n; ++i) {
        CostComparison::Row row{left[i], right[i]};
        row.flops_ratio =
            cost_ratio(static_cast<double>(row.left.flops), static_cast<double>(row.right.flops));
        row.seconds_ratio = cost_ratio(row.left.seconds, row.right.seconds);
        c.rows.push_back(row);
        add(c.left_total, left[i]);
        add(c.right_total, right[i]);
    }
    c.flops_ratio = cost_ratio(static_cast<double>(c.left_total.flops),
                               static_cast<double>(c.right_total.flops));
    c.seconds_ratio = cost_ratio(c.left_total.seconds, c.right_total.seconds);
    return c;
}

Result<CostComparison> compare_costs(SessionReader& left, SessionReader& right) {
    auto a = step_costs(left);
    if (!a) return a.error();
    auto b = step_costs(right);
    if (!b) return b.error();
    return compare_costs(*a, *b);
}

std::string cost_comparison_text(const CostComparison& c) {
    std::string out =
        "step    tokens left right   MFLOP left    right  left/right   ms left   right  "
        "left/right\n";
    char line[256];
    auto add = [&](const std::string& label, const StepCost& a, const StepCost& b,
                   double flops_ratio, double seconds_ratio) {
        std::snprintf(line, sizeof line, "%-7s %11d %5d %11.1f %8.1f %10.2fx %9.2f %7.2f %10.2fx\n",
                      label.c_str(), a.tokens, b.tokens, static_cast<double>(a.flops) * 1e-6,
                      static_cast<double>(b.flops) * 1e-6, flops_ratio, a.seconds * 1e3,
                      b.seconds * 1e3, seconds_ratio);
        out += line;
    };
    for (const auto& r : c.rows)
        add(std::to_string(r.left.step), r.left, r.right, r.flops_ratio, r.seconds_ratio);
    add("total", c.left_total, c.right_total, c.flops_ratio, c.seconds_ratio);
    return out;
}

}  // namespace kvscope
