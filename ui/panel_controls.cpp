// Controls: play / pause / step / run N / run to the end, speed, a prompt box, the engine
// settings (changing one restarts the run), recording, view settings. An attached deployment
// live gets none of the run's controls: only following the newest step, and how it is doing.
#include <imgui.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "ui/ui_context.h"

namespace kvscope::ui {

void draw_controls_panel(UiContext& ctx) {
    ImGui::Begin("Controls");
    ViewState& v = ctx.view;
    ImGui::TextWrapped("%s", ctx.title.c_str());
    ImGui::Separator();
    if (ctx.controller && ctx.attached()) {
        // A deployment sets its own pace, settings and requests: nothing here plays, steps,
        // restarts or prompts it. The window follows its newest step unless told otherwise.
        Controller& c = *ctx.controller;
        ImGui::TextUnformatted(c.finished() ? "Attach ended" : "Following the deployment");
        ImGui::Checkbox("show the newest step [End]", &v.follow_live);
        if (std::string progress = c.progress(); !progress.empty())
            ImGui::TextWrapped("%s", progress.c_str());
        std::string recording = c.recording_path();
        text_disabled_wrapped(recording.empty() ? "Recording to a temporary file, removed at exit."
                                                : "Recording to " + recording + ".");
        text_disabled_wrapped(c.finished() ? "Close the window for the summary."
                                           : "Close the window to end the attach and print "
                                             "its summary.");
        // What the publishers sent that could not be taken in as sent, once per kind.
        const std::vector<std::string> notes = c.notes();
        ctx.drawn_controls_notes = notes;
        if (!notes.empty()) {
            ImGui::Separator();
            ImGui::TextUnformatted("Notes (also on stderr and in the summary):");
            for (const std::string& n : notes)
                ImGui::TextWrapped("%s", n.c_str());
        }
    } else if (ctx.controller) {
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
        if (!st.kv_cache)
            text_disabled_wrapped(
                "KV cache off (--kv-cache off): every step runs the whole text through the model "
                "again, in blocks freed when the next step starts.");
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
        bool prefix = st.prefix_cache && st.kv_cache;  // no cache, no prefix to share
        ImGui::BeginDisabled(!st.kv_cache);
        if (ImGui::Checkbox("prefix cache", &prefix)) {
            st.prefix_cache = prefix;
            changed = true;
        }
        ImGui::EndDisabled();
        int pre = st.preempt == "swap" ? 1 : 0;
        if (ImGui::Combo("preemption", &pre, "recompute\0swap\0")) {
            st.preempt = pre ? "swap" : "recompute";
            changed = true;
        }
        // Storing less: each change restarts the run, like the pool settings above.
        static const char* const policies[] = {"none", "streaming", "h2o",    "snapkv",
                                               "tova", "knorm",     "morphkv"};
        int policy = 0;
        for (int i = 0; i < 7; ++i)
            if (st.policy == policies[i]) policy = i;
        ImGui::SetNextItemWidth(120);
        if (ImGui::Combo("eviction", &policy,
                         "none\0streaming\0h2o\0snapkv\0tova\0knorm\0morphkv\0")) {
            st.policy = policies[policy];
            if (st.policy != "none" && st.kv_budget.empty()) st.kv_budget = "50%";
            if (st.policy == "none") st.kv_budget.clear();
            changed = true;
        }
        if (st.policy != "none") {
            static char budget[32];
            std::snprintf(budget, sizeof budget, "%s", st.kv_budget.c_str());
            ImGui::SetNextItemWidth(120);
            if (ImGui::InputText("budget", budget, sizeof budget,
                                 ImGuiInputTextFlags_EnterReturnsTrue)) {
                st.kv_budget = budget;
                changed = true;
            }
            if (ImGui::IsItemHovered())
                ImGui::SetTooltip("Tokens each layer's KV head keeps: N, or P%% of the sequence");
            ImGui::SetNextItemWidth(120);
            changed |= ImGui::InputInt("sinks", &st.sinks);
            int pyramid = st.layer_budget == "pyramid";
            ImGui::SetNextItemWidth(120);
            if (ImGui::Combo("per layer", &pyramid, "uniform\0pyramid\0")) {
                st.layer_budget = pyramid ? "pyramid" : "uniform";
                changed = true;
            }
            changed |= ImGui::Checkbox("compact", &st.compact);
            if (ImGui::IsItemHovered())
                ImGui::SetTooltip(
                    "Move kept tokens into the holes after each step, so blocks go "
                    "back (off: the holes stay, to look at; int4 and int2 always keep them)");
        }
        static const char* const dtypes[] = {"f32", "f16", "int8", "int4", "int2"};
        int dtype = 0;
        for (int i = 0; i < 5; ++i)
            if (st.kv_dtype == dtypes[i]) dtype = i;
        ImGui::SetNextItemWidth(120);
        if (ImGui::Combo("KV dtype", &dtype, "f32\0f16\0int8\0int4\0int2\0")) {
            st.kv_dtype = dtypes[dtype];
            changed = true;
        }
        changed |= ImGui::Checkbox("record", &st.record);
        std::string recording = c.recording_path();
        text_disabled_wrapped(st.record ? "to " + (recording.empty() ? st.record_path : recording)
                                        : "to a temporary file, removed at exit");
        if (changed) {
            st.block_size = std::clamp(st.block_size, 1, 4096);
            st.num_blocks = std::clamp(st.num_blocks, 1, 1 << 20);
            st.max_batch_tokens = std::clamp(st.max_batch_tokens, 1, 1 << 20);
            st.sinks = std::clamp(st.sinks, 0, 1 << 20);
            Status s = c.restart(st);
            v.message = s.ok() ? "Restarted with the new settings." : s.error().message;
            v.cursor = 0;
            v.playing = false;
        }
    } else if (ctx.session) {
        ImGui::TextUnformatted("Replay");
        // Buttons flow onto a second line in a narrow panel.
        auto button = [](const char* text, bool first = false) {
            if (!first)
                same_line_if_fits(ImGui::CalcTextSize(text).x +
                                  2 * ImGui::GetStyle().FramePadding.x);
            return ImGui::Button(text);
        };
        if (button("<< [Home]", true)) ctx.set_cursor(0);
        if (button("< [Left]")) ctx.set_cursor(v.cursor - 1);
        if (button(v.playing ? "Pause" : "Play")) v.playing = !v.playing;
        if (button("> [Right]")) ctx.set_cursor(v.cursor + 1);
        if (button(">> [End]")) ctx.set_cursor(ctx.last_step());
        const RunInfo& info = ctx.session->info();
        ImGui::Text("%d blocks x %d tokens, %s", info.num_blocks, info.block_size,
                    info.allocator.c_str());
        ImGui::TextWrapped("model: %s", info.model.c_str());
        text_disabled_wrapped("Drop another .kvs file on the window to open it.");
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

}  // namespace kvscope::ui
