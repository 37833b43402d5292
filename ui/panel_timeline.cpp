// Timeline: the scrubber and per-step tracks over the whole run. Click or drag to move the
// cursor (every panel follows); drag with the right button to zoom into a range; double-click
// to see everything again.
#include <imgui.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "ui/plot.h"
#include "ui/ui_context.h"

namespace kvscope::ui {

namespace {
double phase_ms(const StepSummary& s, Phase p) {
    return static_cast<double>(s.phase_ns[static_cast<int>(p)]) / 1e6;
}
}  // namespace

void draw_timeline_panel(UiContext& ctx) {
    ImGui::Begin("Timeline");
    if (!ctx.session || ctx.session->steps().empty()) {
        ImGui::TextDisabled("No steps recorded yet.");
        ImGui::End();
        return;
    }
    ViewState& v = ctx.view;
    const auto& steps = ctx.session->steps();
    int64_t first = steps.front().step, last = steps.back().step;
    int64_t lo = v.view_hi < 0 ? first : std::max(first, v.view_lo);
    int64_t hi = v.view_hi < 0 ? last : std::min(last, v.view_hi);
    // 64-bit: a run with long idle gaps between arrivals numbers its steps past 2^31.
    long long cursor = v.cursor, first_ll = first, last_ll = last;
    ImGui::SetNextItemWidth(-1);
    if (ImGui::SliderScalar("##step", ImGuiDataType_S64, &cursor, &first_ll, &last_ll, "step %lld"))
        ctx.set_cursor(cursor);
    static int64_t zoom_from = -1;
    const double limit = ctx.session->info().bandwidth_limit_gbps();
    const float h = 30.0f * v.font_scale;
    std::vector<Track> tracks = {
        {"step time (ms)", [](const StepSummary& s) { return s.step_seconds * 1e3; }, 0xff5ab4e6,
         "%.2f"},
        {"  prefill (ms)", [](const StepSummary& s) { return phase_ms(s, Phase::kPrefill); },
         0xff009ee6, "%.2f"},
        {"  decode (ms)", [](const StepSummary& s) { return phase_ms(s, Phase::kDecode); },
         0xff73b400, "%.2f"},
        {"    attention (ms)", [](const StepSummary& s) { return phase_ms(s, Phase::kAttention); },
         0xff4fb0e0, "%.2f"},
        {"    MLP (ms)", [](const StepSummary& s) { return phase_ms(s, Phase::kMlp); }, 0xff3c9a50,
         "%.2f"},
        {"  sampling (ms)", [](const StepSummary& s) { return phase_ms(s, Phase::kSample); },
         0xffcc79a7, "%.3f"},
        {"  schedule (ms)", [](const StepSummary& s) { return phase_ms(s, Phase::kSchedule); },
         0xffa779cc, "%.3f"},
        {"bandwidth (GB/s)", [](const StepSummary& s) { return s.bandwidth_gbps(); }, 0xff42e4f0,
         "%.1f", 0,
         "Bytes the step's ops moved (weights, KV read and written, activations) over the step's "
         "time. Red: the recording machine's measured read bandwidth.",
         limit},
        {"bytes moved (MB)",
         [](const StepSummary& s) { return static_cast<double>(s.bytes_moved()) * 1e-6; },
         0xff42c0f0, "%.2f"},
        {"tokens in step",
         [](const StepSummary& s) {
             return static_cast<double>(s.prefill_tokens + s.decode_tokens);
         },
         0xffe0e0e0, "%.0f"},
        {"blocks used", [](const StepSummary& s) { return static_cast<double>(s.blocks_used); },
         0xff00b4f0, "%.0f", static_cast<double>(ctx.session->info().num_blocks)},
        {"fragmentation", [](const StepSummary& s) { return s.fragmentation; }, 0xff005ed5, "%.3f",
         1.0},
        {"prefix hit rate", [](const StepSummary& s) { return s.prefix_hit_rate; }, 0xff73b400,
         "%.3f", 1.0},
        {"running", [](const StepSummary& s) { return static_cast<double>(s.running); }, 0xffb27200,
         "%.0f"},
    };
    auto follow = [&](int64_t at) {
        if (at < 0) return;
        if (ImGui::IsMouseDoubleClicked(ImGuiMouseButton_Left))
            v.view_hi = -1;
        else if (ImGui::IsMouseDown(ImGuiMouseButton_Left))
            ctx.set_cursor(at);
        if (ImGui::IsMouseClicked(ImGuiMouseButton_Right)) zoom_from = at;
        if (ImGui::IsMouseReleased(ImGuiMouseButton_Right) && zoom_from >= 0 && at != zoom_from) {
            v.view_lo = std::min(at, zoom_from);
            v.view_hi = std::max(at, zoom_from);
            zoom_from = -1;
        }
    };
    if (ctx.attached()) {
        // An attached deployment has no engine steps to time or requests to count: per rank and
        // medium, the blocks held (the attach/<rank>/<MEDIUM> metrics of each 100 ms tick).
        ctx.drawn_deployment.tracks = 0;
        const std::vector<int64_t>& at_steps = ctx.attached_steps();
        for (const UiContext::AttachedSeries& series : ctx.attached_series()) {
            Track t{series.label.c_str(), nullptr, medium_color(static_cast<int>(series.medium)),
                    "%.0f"};
            follow(plot_series(t, at_steps, series.values, lo, hi, v.cursor, h));
            ++ctx.drawn_deployment.tracks;
        }
        text_disabled_wrapped("Blocks each rank holds per medium, out of its " +
                              std::to_string(ctx.session->info().blocks_per_publisher()) +
                              " slots. Showing steps " + std::to_string(lo) + ".." +
                              std::to_string(hi) + ". Right-drag to zoom, double-click to reset.");
        ImGui::End();
        return;
    }
    for (const Track& t : tracks)
        follow(plot_track(t, steps, lo, hi, v.cursor, h));
    if (const UiContext::FlopsSeries& flops = ctx.step_flops(); !flops.steps.empty()) {
        Track t{"flops (MFLOP)",
                nullptr,
                0xff6080f0,
                "%.1f",
                0,
                "What the step's ops computed, from their shapes: it grows with the tokens the "
                "step ran (without a KV cache, the whole text so far)."};
        follow(plot_series(t, flops.steps, flops.mflops, lo, hi, v.cursor, h));
    }
    char limit_text[96] = "unknown (recorded before kvscope measured it)";
    if (limit > 0) std::snprintf(limit_text, sizeof limit_text, "%.1f GB/s", limit);
    text_disabled_wrapped(std::string("Bandwidth: bytes the ops moved over step time; red line: "
                                      "the recording machine's read bandwidth, ") +
                          limit_text + ". The selected step's ops: Kernels.");
    text_disabled_wrapped("Showing steps " + std::to_string(lo) + ".." + std::to_string(hi) +
                          ". Right-drag to zoom, double-click to reset.");
    ImGui::End();
}

}  // namespace kvscope::ui
