#pragma once
// A one-line track over a range of steps, drawn as min/max per pixel column so that 100 000
// steps cost as much as the panel is wide. Returns the step under the mouse, or -1.

#include <cstdint>
#include <functional>
#include <vector>

#include "sessions/step_summary.h"

namespace kvscope::ui {

struct Track {
    const char* label;
    std::function<double(const StepSummary&)> value;
    uint32_t color;
    const char* format;          // printf format for the value at the cursor
    double fixed_max = 0;        // 0: scale to the data
    const char* note = nullptr;  // shown while the mouse is over the track's label
    double limit = 0;            // > 0: a red line at this value (a machine's limit)
};

int64_t plot_track(const Track& track, const std::vector<StepSummary>& steps, int64_t lo,
                   int64_t hi, int64_t cursor, float height,
                   const std::vector<StepSummary>* overlay = nullptr);
// The same for a series that is no StepSummary field: values[i] at steps[i] (steps ascending),
// such as an attached publisher's blocks held on one medium. `track.value` is not used.
int64_t plot_series(const Track& track, const std::vector<int64_t>& steps,
                    const std::vector<float>& values, int64_t lo, int64_t hi, int64_t cursor,
                    float height);

}  // namespace kvscope::ui
