// Controls: play / pause / step / run N / run to the end, speed, a prompt box, the engine
// settings (changing one restarts the run), recording, view settings.
#include <imgui.h>

#include <string>
#include <tuple>

#include <algorithm>
#include <cstdio>

#include "sessions/request_progress.h"
#include "ui/ui_context.h"

namespace kvscope::ui {

void draw_controls_panel(UiContext& ctx) {
    ImGui::Begin("Controls");
    ViewState& v = ctx.view;
    ImGui::TextWrapped("%s", ctx.title.c_str());
    ImGui::Separator();
    if (ctx.controller) {
        Controller& c = *ctx.controller;
        if (ImGui::Button(v.playing ? "Pause [Space]" : "Play [Space]")) v.playing = !v.playing;
        ImGui::SameLine();
        if (ImGui::Button("Step [N]")) c.step(1);
        ImGui::SetNextItemWidth(80);
        ImGui::InputInt("##n", &v.run_n);
        v.run_n = std::max(1, v.run_n);
        ImGui::SameLine();
        if (ImGui::Button("Run N [R]")) c.step(v.run_n);
        ImGui::SameLine();
        if (ImGui::Button("To end [E]")) c.step(1 << 30);
        ImGui::SetNextItemWidth(160);
        ImGui::SliderFloat("steps/s", &v.steps_per_second, 1.0f, 120.0f, "%.0f",
                           ImGuiSliderFlags_Logarithmic);
        ImGui::Separator();
        static char prompt[512] = "And God said,";
        static int max_tokens = 48;
        ImGui::InputTextMultiline("##prompt", prompt, sizeof prompt, ImVec2(-1, 60));
        ImGui::SetNextItemWidth(100);
        ImGui::InputInt("max tokens", &max_tokens);
        if (ImGui::Button("Add request")) {
            Status s = c.add_prompt(prompt, std::max(1, max_tokens));
            v.message = s.ok() ? "Request added; it arrives at the next step." : s.error().message;
        }
        ImGui::Separator();
        LiveSettings st = c.settings();
        bool changed = false;
        ImGui::SetNextItemWidth(120);
        changed |= ImGui::InputInt("block size", &st.block_size);
        ImGui::SetNextItemWidth(120);
        changed |= ImGui::InputInt("pool blocks", &st.num_blocks);
        ImGui::SetNextItemWidth(120);
        changed |= ImGui::InputInt("batch tokens", &st.max_batch_tokens);
        int alloc = st.allocator == "contiguous" ? 1 : 0;
        if (ImGui::Combo("allocator", &alloc, "paged\0contiguous\0")) {
            st.allocator = alloc ? "contiguous" : "paged";
            changed = true;
        }
        changed |= ImGui::Checkbox("prefix cache", &st.prefix_cache);
        int pre = st.preempt == "swap" ? 1 : 0;
        if (ImGui::Combo("preemption", &pre, "recompute\0swap\0")) {
            st.preempt = pre ? "swap" : "recompute";
            changed = true;
        }
        ImGui::TextDisabled("eviction policy: none (token eviction comes later)");
        ImGui::TextDisabled("KV dtype: fp32");
        changed |= ImGui::Checkbox("record to", &st.record);
        ImGui::SameLine();
        ImGui::TextDisabled("%s", st.record_path.c_str());
        if (changed) {
            st.block_size = std::clamp(st.block_size, 1, 4096);
            st.num_blocks = std::clamp(st.num_blocks, 1, 1 << 20);
            st.max_batch_tokens = std::clamp(st.max_batch_tokens, 1, 1 << 20);
            Status s = c.restart(st);
            v.message = s.ok() ? "Restarted with the new settings." : s.error().message;
            v.cursor = 0;
            v.playing = false;
        }
    } else if (ctx.session) {
        ImGui::TextUnformatted("Replay");
        if (ImGui::Button("<< [Home]")) ctx.set_cursor(0);
        ImGui::SameLine();
        if (ImGui::Button("< [Left]")) ctx.set_cursor(v.cursor - 1);
        ImGui::SameLine();
        if (ImGui::Button(v.playing ? "Pause" : "Play")) v.playing = !v.playing;
        ImGui::SameLine();
        if (ImGui::Button("> [Right]")) ctx.set_cursor(v.cursor + 1);
        ImGui::SameLine();
        if (ImGui::Button(">> [End]")) ctx.set_cursor(ctx.last_step());
        const RunInfo& info = ctx.session->info();
        ImGui::Text("%d blocks x %d tokens, %s", info.num_blocks, info.block_size,
                    info.allocator.c_str());
        ImGui::TextWrapped("model: %s", info.model.c_str());
        ImGui::TextDisabled("Drop another .kvs file on the window to open it.");
    }
    ImGui::Separator();
    ctx.drawn_controls_status = ctx.run_status();
    ImGui::TextWrapped("%s", ctx.drawn_controls_status.c_str());
    if (ctx.state) {
        for (const char* m : {"blocks_used", "fragmentation", "utilization", "prefix_hit_rate"}) {
            auto it = ctx.state->metrics.find(m);
            if (it != ctx.state->metrics.end()) ImGui::Text("%-16s %.3f", m, it->second);
        }
    }
    ImGui::Separator();
    ImGui::SetNextItemWidth(120);
    ImGui::SliderFloat("font", &v.font_scale, 0.75f, 3.0f, "%.2fx");
    int pal = static_cast<int>(v.palette);
    ImGui::SetNextItemWidth(120);
    if (ImGui::Combo("palette", &pal, "Okabe-Ito\0Tol muted\0"))
        v.palette = static_cast<PaletteKind>(pal);
    ImGui::TextDisabled("F1: keys and help");
    ImGui::End();
}

void draw_compare_panel(UiContext& ctx) {
    if (!ctx.compare) return;
    ImGui::Begin("Compare");
    ViewState& v = ctx.view;
    // Same step, or the step at which the selected request got as far on the right as it is on
    // the left (paged and contiguous runs of one workload reach a request at different steps).
    ImGui::RadioButton("same step", &v.compare_align, 0);
    ImGui::SameLine();
    ImGui::RadioButton("same progress of the selected request", &v.compare_align, 1);
    int64_t right_step = v.cursor;
    if (v.compare_align == 1) {
        static std::tuple<const void*, int64_t, int32_t> key{nullptr, -1, -1};
        static int64_t found = -1;
        static std::string what;
        const RequestState* sel = nullptr;
        if (ctx.state) {
            auto it = ctx.state->requests.find(v.selected_request);
            if (it != ctx.state->requests.end()) sel = &it->second;
        }
        if (!sel) {
            ImGui::TextDisabled("Select a request (click it in Requests or Block pool).");
        } else {
            std::tuple<const void*, int64_t, int32_t> now{ctx.compare.get(), v.cursor,
                                                          v.selected_request};
            if (now != key) {
                key = now;
                found = first_step_with_tokens(*ctx.compare, sel->name, sel->num_tokens());
                what = sel->name + " at " + std::to_string(sel->num_tokens()) + " tokens";
            }
            if (found < 0)
                ImGui::TextDisabled("%s: not reached on the right.", what.c_str());
            else
                ImGui::Text("%s: left step %lld, right step %lld", what.c_str(),
                            static_cast<long long>(v.cursor), static_cast<long long>(found));
            if (found >= 0) right_step = found;
        }
    }
    auto other = ctx.compare->state_at(right_step);
    const TimelineState* a = ctx.state;
    const TimelineState* b = other ? other.value() : nullptr;
    if (!a || !b) {
        ImGui::TextDisabled("%s", other ? "No state at this step." : other.error().message.c_str());
        ImGui::End();
        return;
    }
    auto metric = [](const TimelineState* s, const char* m) {
        auto it = s->metrics.find(m);
        return it == s->metrics.end() ? 0.0 : it->second;
    };
    auto tokens_per_s = [](SessionReader& r, int64_t step) {
        double secs = 0;
        long long toks = 0;
        for (const auto& s : r.steps()) {
            if (s.step > step) break;
            secs += s.step_seconds;
            toks += s.decode_tokens + (s.prefill_tokens > 0 ? 1 : 0);
        }
        return secs > 0 ? static_cast<double>(toks) / secs : 0.0;
    };
    if (ImGui::BeginTable("##cmp", 4, ImGuiTableFlags_Borders)) {
        ImGui::TableSetupColumn(right_step == v.cursor ? "at this step" : "at the aligned steps");
        ImGui::TableSetupColumn(ctx.session->info().allocator.c_str());
        ImGui::TableSetupColumn(ctx.compare->info().allocator.c_str());
        ImGui::TableSetupColumn("difference");
        ImGui::TableHeadersRow();
        auto row = [](const char* name, double x, double y, const char* fmt) {
            ImGui::TableNextRow();
            ImGui::TableNextColumn();
            ImGui::TextUnformatted(name);
            char buf[64];
            for (double v : {x, y, x - y}) {
                ImGui::TableNextColumn();
                std::snprintf(buf, sizeof buf, fmt, v);
                ImGui::TextUnformatted(buf);
            }
        };
        row("blocks used", a->blocks_used(), b->blocks_used(), "%.0f");
        row("fragmentation", metric(a, "fragmentation"), metric(b, "fragmentation"), "%.3f");
        row("utilization", metric(a, "utilization"), metric(b, "utilization"), "%.3f");
        row("prefix hit rate", metric(a, "prefix_hit_rate"), metric(b, "prefix_hit_rate"), "%.3f");
        int ra = 0, rb = 0;
        for (const auto& [i, r] : a->requests)
            ra += r.phase == RequestPhase::kRunning;
        for (const auto& [i, r] : b->requests)
            rb += r.phase == RequestPhase::kRunning;
        row("running requests", ra, rb, "%.0f");
        row("tokens/s so far", tokens_per_s(*ctx.session, ctx.view.cursor),
            tokens_per_s(*ctx.compare, right_step), "%.1f");
        ImGui::EndTable();
    }
    ImGui::TextDisabled("Left: %s", ctx.session->path().c_str());
    ImGui::TextDisabled("Right: %s", ctx.compare->path().c_str());
    ImGui::End();
}

void draw_help_overlay(UiContext& ctx) {
    if (!ctx.view.show_help) return;
    ImGui::SetNextWindowPos(ImGui::GetMainViewport()->GetCenter(), ImGuiCond_Always,
                            ImVec2(0.5f, 0.5f));
    ImGui::Begin("Help", &ctx.view.show_help, ImGuiWindowFlags_AlwaysAutoResize);
    static const char* const keys[][2] = {
        {"Space", "play / pause"},
        {"N", "step one engine iteration (live)"},
        {"R", "run N iterations (live)"},
        {"E", "run to the end (live)"},
        {"Left / Right", "previous / next step"},
        {"Home / End", "first / last step"},
        {"Ctrl + / Ctrl -", "font size (projectors)"},
        {"P", "switch the colour palette"},
        {"F1", "this help"},
        {"mouse", "hover a block or heatmap cell for details; click a block to select its request"},
        {"timeline", "click to move the cursor, right-drag to zoom, double-click to reset"},
        {"files", "drop a .kvs session on the window to replay it"},
    };
    if (ImGui::BeginTable("##keys", 2)) {
        for (const auto& k : keys) {
            ImGui::TableNextRow();
            ImGui::TableNextColumn();
            ImGui::TextUnformatted(k[0]);
            ImGui::TableNextColumn();
            ImGui::TextUnformatted(k[1]);
        }
        ImGui::EndTable();
    }
    ImGui::End();
}

}  // namespace kvscope::ui
