#pragma once
// How the Attention panel maps a probability onto its colour ramp. Attention is heavy-tailed:
// the first token and the diagonal take most of every row, and on a linear scale the rest, where
// a head's structure is, all looks like zero. Log (the default) spreads the small probabilities
// over the ramp; per row divides each row by its largest value, so rows that spread their
// attention show where it goes as brightly as rows that do not.

#include <optional>
#include <string_view>

namespace kvscope::ui {

enum class HeatScale { kLinear = 0, kSqrt = 1, kLog = 2, kRow = 3 };
constexpr HeatScale kDefaultHeatScale = HeatScale::kLog;
constexpr int kNumHeatScales = 4;

// "linear", "sqrt", "log", "row": the names the Attention panel and scripts use.
const char* heat_scale_name(HeatScale s);
std::optional<HeatScale> parse_heat_scale(std::string_view name);

// Where a probability `p` (u8, 255 = 1.0) falls on the ramp [0, 1]; `row_max` is the largest in
// its row (kRow only; 0 gives 0).
float heat_level(int p, int row_max, HeatScale s);
// The inverse, for the legend: the probability (for kRow, the fraction of the row's largest) at
// ramp level t.
float heat_probability(float t, HeatScale s);

}  // namespace kvscope::ui
