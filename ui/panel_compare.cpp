// Compare: two recordings of one workload side by side (paged vs contiguous, a full cache vs a
// policy or a quantized cache). The block maps, request lists and heatmaps of both runs are the
// Block pool / Requests / Attention panels drawn for each side; this panel holds how the two are
// aligned, the table of differences at that moment, and where their tokens first differ. The
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

// What sets a run apart in a comparison: its allocator, and how it stores less.
std::string run_label(const RunInfo& info) {
    std::string out = info.allocator;
    if (info.eviction_policy != "none") out += ", " + info.eviction_policy;
    if (info.kv_dtype != "f32") out += ", " + info.kv_dtype;
    if (!info.kv_cache) out += ", no KV cache";
    return out;
}

// The request to report: the selected one, else the heatmap's, else the first that differs.
const TokenDivergence* divergence_to_show(UiContext& ctx) {
    const auto& all = ctx.divergences();
    if (all.empty()) return nullptr;
    if (ctx.state)
        for (int32_t pick : {ctx.view.selected_request, ctx.view.heat_request}) {
            auto it = ctx.state->requests.find(pick);
            if (it == ctx.state->requests.end()) continue;
            for (const TokenDivergence& d : all)
                if (d.request == it->second.name) return &d;
        }
    for (const TokenDivergence& d : all)
        if (!d.identical()) return &d;
    return &all.front();
}

// What the left run's steps cost against the right's: at the cursor's step (the runs matched
// step for step) and over every step both have. A run without a KV cache against one with it
// shows the ratio climbing with the text.
void draw_costs(UiContext& ctx) {
    const CostComparison& c = ctx.costs();
    if (c.rows.empty() || c.right_total.flops == 0) return;
    for (const CostComparison::Row& r : c.rows) {
        if (r.left.step != ctx.view.cursor) continue;
        ImGui::TextWrapped(
            "Step %lld: left %.1f MFLOP in %.2f ms, right %.1f MFLOP in %.2f ms: "
            "%.2fx the flops, %.2fx the time.",
            static_cast<long long>(r.left.step), static_cast<double>(r.left.flops) * 1e-6,
            r.left.seconds * 1e3, static_cast<double>(r.right.flops) * 1e-6, r.right.seconds * 1e3,
            r.flops_ratio, r.seconds_ratio);
        break;
    }
    ImGui::TextWrapped(
        "All %lld steps: left %.2f GFLOP in %.2f s, right %.2f GFLOP in %.2f s: "
        "%.2fx the flops, %.2fx the time.",
        static_cast<long long>(c.left_total.step), static_cast<double>(c.left_total.flops) * 1e-9,
        c.left_total.seconds, static_cast<double>(c.right_total.flops) * 1e-9,
        c.right_total.seconds, c.flops_ratio, c.seconds_ratio);
}

void draw_divergence(UiContext& ctx) {
    const auto& all = ctx.divergences();
    if (all.empty()) {
        text_disabled_wrapped("No request ran in both recordings, so no tokens to compare.");
        return;
    }
    size_t differ = 0;
    for (const TokenDivergence& d : all)
        differ += !d.identical();
    const TokenDivergence& d = *divergence_to_show(ctx);
    if (all.size() > 1) ImGui::Text("Tokens: %zu of %zu requests differ", differ, all.size());
    if (d.identical()) {
        ImGui::TextWrapped("%s: the same %d tokens in both runs.", d.request.c_str(), d.compared);
        return;
    }
    auto side = [](int64_t step, const std::string& text) {
        return step < 0 ? std::string("stopped before it")
                        : "\"" + text + "\" at step " + std::to_string(step);
    };
    ImGui::TextWrapped("%s: tokens first differ at position %d: left %s, right %s.",
                       d.request.c_str(), d.position, side(d.left_step, d.left_text).c_str(),
                       side(d.right_step, d.right_text).c_str());
    const int64_t go = d.left_step >= 0 ? d.left_step : d.right_step;
    if (go >= 0 && ImGui::SmallButton("Go to that step")) ctx.set_cursor(go);
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
    draw_divergence(ctx);  // first: for a policy against the full cache it is the headline
    draw_costs(ctx);
    if (ImGui::BeginTable("##cmp", 4,
                          ImGuiTableFlags_Borders | ImGuiTableFlags_SizingStretchProp)) {
        ImGui::TableSetupColumn(ctx.compare_step == v.cursor ? "at this step" : "at aligned steps");
        ImGui::TableSetupColumn(("left: " + run_label(ctx.session->info())).c_str());
        ImGui::TableSetupColumn(("right: " + run_label(ctx.compare->info())).c_str());
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
