// Compare: two recordings of one workload side by side (paged vs contiguous, say). The block
// maps and request lists of both runs are the Block pool / Requests panels drawn for each side;
// this panel holds how the two are aligned and the table of differences at that moment. The
// Memory panel draws the second run's curves behind the first's.
#include <imgui.h>

#include <cstdio>
#include <string>

#include "ui/ui_context.h"

namespace kvscope::ui {

namespace {
double metric(const TimelineState& s, const char* name) {
    auto it = s.metrics.find(name);
    return it == s.metrics.end() ? 0.0 : it->second;
}

int running(const TimelineState& s) {
    int n = 0;
    for (const auto& [i, r] : s.requests)
        n += r.phase == RequestPhase::kRunning;
    return n;
}

// Tokens per second of engine time up to `step`.
double tokens_per_second(SessionReader& r, int64_t step) {
    double seconds = 0;
    long long tokens = 0;
    for (const auto& s : r.steps()) {
        if (s.step > step) break;
        seconds += s.step_seconds;
        tokens += s.decode_tokens + (s.prefill_tokens > 0 ? 1 : 0);
    }
    return seconds > 0 ? static_cast<double>(tokens) / seconds : 0.0;
}
}  // namespace

void draw_compare_panel(UiContext& ctx) {
    if (!ctx.compare) return;
    ImGui::Begin("Compare");
    ViewState& v = ctx.view;
    ImGui::RadioButton("same step", &v.compare_align, 0);
    same_line_if_fits(ImGui::CalcTextSize("same progress of the selected request").x + 30);
    ImGui::RadioButton("same progress of the selected request", &v.compare_align, 1);
    if (!ctx.compare_note.empty()) text_disabled_wrapped(ctx.compare_note);
    const TimelineState* a = ctx.state;
    const TimelineState* b = ctx.compare_state;
    if (!a || !b) {
        ImGui::End();
        return;
    }
    if (ImGui::BeginTable("##cmp", 4,
                          ImGuiTableFlags_Borders | ImGuiTableFlags_SizingStretchProp)) {
        ImGui::TableSetupColumn(ctx.compare_step == v.cursor ? "at this step" : "at aligned steps");
        ImGui::TableSetupColumn(("left: " + ctx.session->info().allocator).c_str());
        ImGui::TableSetupColumn(("right: " + ctx.compare->info().allocator).c_str());
        ImGui::TableSetupColumn("left - right");
        ImGui::TableHeadersRow();
        auto row = [](const char* name, double x, double y, const char* fmt) {
            ImGui::TableNextRow();
            ImGui::TableNextColumn();
            ImGui::TextUnformatted(name);
            char buf[64];
            for (double value : {x, y, x - y}) {
                ImGui::TableNextColumn();
                std::snprintf(buf, sizeof buf, fmt, value);
                ImGui::TextUnformatted(buf);
            }
        };
        row("step", static_cast<double>(v.cursor), static_cast<double>(ctx.compare_step), "%.0f");
        row("blocks used", a->blocks_used(), b->blocks_used(), "%.0f");
        row("blocks cached", a->blocks_cached(), b->blocks_cached(), "%.0f");
        row("fragmentation", metric(*a, "fragmentation"), metric(*b, "fragmentation"), "%.3f");
        row("utilization", metric(*a, "utilization"), metric(*b, "utilization"), "%.3f");
        row("prefix hit rate", metric(*a, "prefix_hit_rate"), metric(*b, "prefix_hit_rate"),
            "%.3f");
        row("running requests", running(*a), running(*b), "%.0f");
        row("tokens/s so far", tokens_per_second(*ctx.session, v.cursor),
            tokens_per_second(*ctx.compare, ctx.compare_step), "%.1f");
        ImGui::EndTable();
    }
    ImGui::End();
}

}  // namespace kvscope::ui
