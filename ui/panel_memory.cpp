// Memory: utilization and internal / external fragmentation over time, cached blocks, and the
// second session of a comparison drawn behind in grey. (Bandwidth is the Timeline's.) For an
// attached deployment, which publishes no pool to fragment: the blocks held per medium over all
// ranks and per rank over all media, and the blocks stored and gone per step (the churn).
#include <imgui.h>

#include <algorithm>

#include "ui/palette.h"
#include "ui/plot.h"
#include "ui/ui_context.h"

namespace kvscope::ui {

namespace {
void draw_attached_memory(UiContext& ctx, int64_t lo, int64_t hi) {
    const auto& totals = ctx.attached_totals();
    const std::vector<int64_t>& held_steps = ctx.attached_steps();
    const AttachedHistory& history = ctx.attached_history();
    const size_t n = totals.size() + 2;
    const float spacing = ImGui::GetStyle().ItemSpacing.y + 2.0f;
    const float h = std::clamp(ImGui::GetContentRegionAvail().y / static_cast<float>(n) - spacing,
                               10.0f * ctx.view.font_scale, 34.0f * ctx.view.font_scale);
    ctx.drawn_memory_tracks = 0;
    auto draw = [&](const Track& t, const std::vector<int64_t>& steps,
                    const std::vector<float>& values) {
        int64_t at = plot_series(t, steps, values, lo, hi, ctx.view.cursor, h);
        if (at >= 0 && ImGui::IsMouseDown(ImGuiMouseButton_Left)) ctx.set_cursor(at);
        ++ctx.drawn_memory_tracks;
    };
    for (const UiContext::AttachedSeries& t : totals) {
        // A medium's sum over ranks in the medium's colour (the block maps'); a rank's over its
        // media in grey, which no medium uses.
        const uint32_t color =
            t.publisher >= 0 ? 0xffc8c8c8 : medium_color(static_cast<int>(t.medium));
        draw(Track{t.label.c_str(), nullptr, color, "%.0f"}, held_steps, t.values);
    }
    draw(Track{"stored / step", nullptr, 0xff73b400, "%.0f"}, history.steps, history.stored);
    draw(Track{"gone / step", nullptr, 0xff005ed5, "%.0f"}, history.steps, history.gone);
    text_disabled_wrapped(
        "Blocks held per medium over all ranks and per rank over all media; "
        "blocks stored and gone (evicted, cleared) per step: the churn.");
}
}  // namespace

void draw_memory_panel(UiContext& ctx) {
    ImGui::Begin("Memory");
    if (!ctx.session || ctx.session->steps().empty()) {
        ImGui::TextDisabled("No steps recorded yet.");
        ctx.drawn_memory_tracks = 0;
        ImGui::End();
        return;
    }
    const auto& steps = ctx.session->steps();
    const std::vector<StepSummary>* other = ctx.compare ? &ctx.compare->steps() : nullptr;
    int64_t lo = ctx.view.view_hi < 0 ? steps.front().step : ctx.view.view_lo;
    int64_t hi = ctx.view.view_hi < 0 ? steps.back().step : ctx.view.view_hi;
    if (other && !other->empty()) hi = std::max(hi, other->back().step);
    if (ctx.attached()) {  // no grey overlay: a comparison lines up engine runs
        draw_attached_memory(ctx, lo, hi);
        ImGui::End();
        return;
    }
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
    ctx.drawn_memory_tracks = 0;
    for (const Track& t : tracks) {
        int64_t at = plot_track(t, steps, lo, hi, ctx.view.cursor, h, other);
        if (at >= 0 && ImGui::IsMouseDown(ImGuiMouseButton_Left)) ctx.set_cursor(at);
        ++ctx.drawn_memory_tracks;
    }
    ImGui::End();
}

}  // namespace kvscope::ui
