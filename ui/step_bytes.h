#pragma once
// What a step moved, as the Block pool and Kernels panels both show it: one stacked bar of
// weights / KV read / KV written / activations, and one line of the sums and the bandwidth
// achieved against the recording machine's limit.

#include <cstdint>
#include <string>

#include "sessions/step_summary.h"

namespace kvscope::ui {

// Okabe-Ito colours (ABGR), one per kind of bytes.
inline constexpr uint32_t kWeightBytesColor = 0xffb27200;     // blue
inline constexpr uint32_t kKvReadBytesColor = 0xff009fe6;     // orange
inline constexpr uint32_t kKvWrittenBytesColor = 0xff005ed5;  // vermillion
inline constexpr uint32_t kActivationBytesColor = 0xff999999;

// "1.50 MB", "820 KB", "96 B".
std::string byte_size_text(double bytes);
// "19.0 MB at 69.2 GB/s, 152% of this machine's 45.6 GB/s" (the limit part only when known).
std::string step_bandwidth_text(const StepSummary& s, double limit_gbps);
// The bar, as wide as the panel, and a legend line under it.
void draw_step_bytes(const StepSummary& s, double limit_gbps);

}  // namespace kvscope::ui
