// Memory: utilization and internal / external fragmentation over time, cached blocks, and the
// second session of a comparison drawn behind in grey. (Bandwidth is the Timeline's.)
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
    const std::vector<StepSummary>* other = ctx.compare ? &ctx.compare->steps() : nullptr;
    int64_t lo = ctx.view.view_hi < 0 ? steps.front().step : ctx.view.view_lo;
    int64_t hi = ctx.view.view_hi < 0 ? steps.back().step : ctx.view.view_hi;
    if (other && !other->empty()) hi = std::max(hi, other->back().step);
    if (other)
        text_disabled_wrapped("Grey: " + ctx.compare->path() + " (" +
                              ctx.compare->info().allocator + " allocator)");
    std::vector<Track> tracks = {
        {"utilization", [](const StepSummary& s) { return s.utilization; }, 0xff73b400, "%.3f",
         1.0},
        {"internal frag.", [](const StepSummary& s) { return s.internal_fragmentation; },
         0xff005ed5, "%.3f", 1.0},
        {"external frag.", [](const StepSummary& s) { return s.external_fragmentation; },
         0xffa779cc, "%.3f", 1.0},
        {"cached blocks", [](const StepSummary& s) { return static_cast<double>(s.blocks_cached); },
         0xff909090, "%.0f"},
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
