// Memory: utilization and internal / external fragmentation over time, the estimated memory
// traffic on the CPU, and the second session of a comparison drawn behind in grey.
#include <imgui.h>

#include <algorithm>

#include "ui/plot.h"
#include "ui/ui_context.h"

namespace kvscope::ui {

void draw_memory_panel(UiContext& ctx) {
    ImGui::Begin("Memory");
    if (!ctx.session || ctx.session->steps().empty()) {
        ImGui::TextDisabled("No steps recorded yet.");
        ImGui::End();
        return;
    }
    const auto& steps = ctx.session->steps();
    const RunInfo& info = ctx.session->info();
    const std::vector<StepSummary>* other = ctx.compare ? &ctx.compare->steps() : nullptr;
    int64_t lo = ctx.view.view_hi < 0 ? steps.front().step : ctx.view.view_lo;
    int64_t hi = ctx.view.view_hi < 0 ? steps.back().step : ctx.view.view_hi;
    if (other && !other->empty()) hi = std::max(hi, other->back().step);
    if (other)
        text_disabled_wrapped("Grey: " + ctx.compare->path() + " (" +
                              ctx.compare->info().allocator + " allocator)");
    const int64_t per_block = info.kv_bytes_per_block, weights = info.weight_bytes;
    std::vector<Track> tracks = {
        {"utilization", [](const StepSummary& s) { return s.utilization; }, 0xff73b400, "%.3f",
         1.0},
        {"internal frag.", [](const StepSummary& s) { return s.internal_fragmentation; },
         0xff005ed5, "%.3f", 1.0},
        {"external frag.", [](const StepSummary& s) { return s.external_fragmentation; },
         0xffa779cc, "%.3f", 1.0},
        {"cached blocks", [](const StepSummary& s) { return static_cast<double>(s.blocks_cached); },
         0xff909090, "%.0f"},
        {"GB/s (estimate)",
         [per_block, weights](const StepSummary& s) {
             // CPU: no counters. Each step reads every weight once and the K/V of the blocks in
             // use.
             double bytes = static_cast<double>(weights) +
                            static_cast<double>(s.blocks_used) * static_cast<double>(per_block);
             return s.step_seconds > 0 ? bytes / s.step_seconds / 1e9 : 0.0;
         },
         0xff42e4f0, "%.2f", 0,
         "On the CPU backend bandwidth is an estimate (weights + K/V in use per step), not a "
         "measurement."},
    };
    // Tracks share the panel's height (within limits), so all of them show in a short panel.
    const float spacing = ImGui::GetStyle().ItemSpacing.y + 2.0f;
    const float h =
        std::clamp(ImGui::GetContentRegionAvail().y / static_cast<float>(tracks.size()) - spacing,
                   10.0f * ctx.view.font_scale, 34.0f * ctx.view.font_scale);
    for (const Track& t : tracks) {
        int64_t at = plot_track(t, steps, lo, hi, ctx.view.cursor, h, other);
        if (at >= 0 && ImGui::IsMouseDown(ImGuiMouseButton_Left)) ctx.set_cursor(at);
    }
    ImGui::End();
}

}  // namespace kvscope::ui
