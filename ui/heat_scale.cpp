#include "ui/heat_scale.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace kvscope::ui {

namespace {
constexpr std::array<const char*, kNumHeatScales> kNames = {"linear", "sqrt", "log", "row"};
// log(1 + p) / log(256): 0 stays 0, the smallest stored probability (1/255) lands at 1/8 of the
// ramp, 1.0 at its top.
const float kLog256 = std::log(256.0f);
}  // namespace

const char* heat_scale_name(HeatScale s) {
    return kNames[static_cast<size_t>(s)];
}

std::optional<HeatScale> parse_heat_scale(std::string_view name) {
    for (size_t i = 0; i < kNames.size(); ++i)
        if (name == kNames[i]) return static_cast<HeatScale>(i);
    return std::nullopt;
}

float heat_level(int p, int row_max, HeatScale s) {
    const float x = static_cast<float>(std::clamp(p, 0, 255)) / 255.0f;
    switch (s) {
        case HeatScale::kLinear:
            return x;
        case HeatScale::kSqrt:
            return std::sqrt(x);
        case HeatScale::kLog:
            return std::log1p(static_cast<float>(std::clamp(p, 0, 255))) / kLog256;
        case HeatScale::kRow:
            return row_max > 0 ? std::min(1.0f, static_cast<float>(p) / static_cast<float>(row_max))
                               : 0.0f;
    }
    return x;
}

float heat_probability(float t, HeatScale s) {
    t = std::clamp(t, 0.0f, 1.0f);
    switch (s) {
        case HeatScale::kSqrt:
            return t * t;
        case HeatScale::kLog:
            return std::expm1(t * kLog256) / 255.0f;
        case HeatScale::kLinear:
        case HeatScale::kRow:
            return t;
    }
    return t;
}

}  // namespace kvscope::ui
