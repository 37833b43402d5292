#pragma once
// What each step of a run cost, and two runs set against each other step by step: its wall time,
// and the flops and bytes its ops report (the step's `kernel` events: the step row keeps bytes
// only). A run without a KV cache against one with it is the case this is for: the same token a
// step on both sides, each of the uncached run's steps recomputing the whole text so far.
// Compare shows it in the window and prints it (`kvscope compare A B --costs`): one function for
// both.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/result.h"
#include "sessions/session_reader.h"

namespace kvscope {

struct StepCost {
    int64_t step = 0;
    int32_t tokens = 0;  // tokens the step ran through the model (prefill and decode)
    double seconds = 0;  // the step's wall time
    int64_t flops = 0;   // summed over its ops
    int64_t bytes = 0;   // moved by its ops
};

// The flops of each step in [first, last] that has ops, summed over its `kernel` events, as
// (step, flops) in step order: what the Timeline plots, read again only for steps it lacks.
Result<std::vector<std::pair<int64_t, int64_t>>> step_flops(SessionReader& reader, int64_t first,
                                                            int64_t last);
// Every step of the run in order. Steps recorded without op spans show 0 flops and bytes.
Result<std::vector<StepCost>> step_costs(SessionReader& reader);

// left / right, or 0 where right is 0.
double cost_ratio(double left, double right);

struct CostComparison {
    struct Row {
        StepCost left, right;
        double flops_ratio = 0, seconds_ratio = 0;  // left / right
    };
    std::vector<Row> rows;             // steps both runs have, matched by their index in the run
    StepCost left_total, right_total;  // over those steps; `step` is their count
    double flops_ratio = 0, seconds_ratio = 0;
};

CostComparison compare_costs(const std::vector<StepCost>& left, const std::vector<StepCost>& right);
Result<CostComparison> compare_costs(SessionReader& left, SessionReader& right);

// The comparison as text: a line per step, then the totals (what `compare --costs` prints).
std::string cost_comparison_text(const CostComparison& c);

}  // namespace kvscope
