// Requests: each request's block table as a row of cells (logical -> physical), holes and a
// contiguous reservation's unused tail visible, and the selected request's tokens with the
// prompt / generated boundary.
#include <imgui.h>

#include <algorithm>
#include <string>
#include <vector>

#include "ui/ui_context.h"

namespace kvscope::ui {

void draw_requests_panel(UiContext& ctx, Side side) {
    const bool main = side == Side::kMain;
    ImGui::Begin(main ? "Requests" : "Requests (right)");
    const TimelineState* s = ctx.state_of(side);
    if (!s) {
        ImGui::TextDisabled("%s", !main && !ctx.compare_note.empty() ? ctx.compare_note.c_str()
                                                                     : "No session open.");
        ImGui::End();
        return;
    }
    const int32_t selected_request = ctx.selected_request_in(side);
    // Before a live run's first step the queue is all there is to see. After it the panel shows
    // what a replay of the recording shows at the same step (the status line counts the rest).
    static const std::vector<PendingRequest> none;
    const std::vector<PendingRequest>& queue =
        main && ctx.before_first_step() ? ctx.pending_requests() : none;
    static bool show_finished = false;  // one setting for both sides of a comparison
    ImGui::Checkbox("show finished", &show_finished);
    const int bs = s->info.block_size;
    std::vector<const RequestState*> rows;
    for (const auto& [i, r] : s->requests)
        if (show_finished ||
            (r.phase != RequestPhase::kFinished && r.phase != RequestPhase::kRejected))
            rows.push_back(&r);
    // Running first, then waiting, swapped, finished.
    std::stable_sort(rows.begin(), rows.end(), [](const RequestState* a, const RequestState* b) {
        return static_cast<int>(a->phase) < static_cast<int>(b->phase);
    });
    same_line_if_fits(ImGui::CalcTextSize("000 shown, 000 not arrived yet").x);
    if (queue.empty())
        ImGui::TextDisabled("%zu shown", rows.size());
    else
        ImGui::TextDisabled("%zu shown, %zu not arrived yet", rows.size(), queue.size());
    const float cell = 10.0f * ctx.view.font_scale;
    ImGui::BeginChild("##rows", ImVec2(0, ImGui::GetContentRegionAvail().y * 0.62f), false,
                      ImGuiWindowFlags_HorizontalScrollbar);
    ImGuiListClipper clipper;
    clipper.Begin(static_cast<int>(rows.size()));
    while (clipper.Step()) {
        for (int i = clipper.DisplayStart; i < clipper.DisplayEnd; ++i) {
            const RequestState& r = *rows[static_cast<size_t>(i)];
            ImGui::PushID(r.index);
            bool selected = selected_request == r.index;
            char label[160];
            std::snprintf(label, sizeof label, "%-10s %-8s %4d tok", r.name.c_str(),
                          request_phase_name(r.phase), r.num_tokens());
            // The label column gives way in a narrow panel; the block strip then scrolls.
            const float label_w =
                std::min(260.0f * ctx.view.font_scale, ImGui::GetContentRegionAvail().x * 0.6f);
            if (ImGui::Selectable(label, selected, 0, ImVec2(label_w, 0)))
                ctx.select_request_named(r.name);
            ImGui::SameLine();
            ImVec2 p = ImGui::GetCursorScreenPos();
            ImDrawList* dl = ImGui::GetWindowDrawList();
            int used_blocks = (r.num_tokens() + bs - 1) / bs;
            for (size_t l = 0; l < r.block_table.size(); ++l) {
                int b = r.block_table[l];
                float x = p.x + static_cast<float>(l) * (cell + 1);
                uint32_t c;
                if (b < 0)
                    c = kHoleColor;
                else if (static_cast<int>(l) >= used_blocks)
                    c = 0xff505050;  // reserved, unused
                else
                    c = shade(owner_color(r.index, ctx.view.palette),
                              static_cast<float>(
                                  std::clamp(r.num_tokens() - static_cast<int>(l) * bs, 0, bs)) /
                                  static_cast<float>(bs));
                dl->AddRectFilled(ImVec2(x, p.y + 1), ImVec2(x + cell, p.y + 1 + cell), c);
                if (main && b >= 0 && b == ctx.view.selected_block)
                    dl->AddRect(ImVec2(x, p.y + 1), ImVec2(x + cell, p.y + 1 + cell), 0xff00ffff, 0,
                                0, 2);
            }
            ImGui::Dummy(ImVec2(static_cast<float>(r.block_table.size()) * (cell + 1), cell + 2));
            if (ImGui::IsItemHovered() && !r.block_table.empty()) {
                float mx = ImGui::GetMousePos().x - p.x;
                auto l = static_cast<size_t>(std::max(0.0f, mx / (cell + 1)));
                if (l < r.block_table.size())
                    ImGui::SetTooltip("logical block %zu -> physical %d", l, r.block_table[l]);
            }
            ImGui::PopID();
        }
    }
    // A live run's queue: what will arrive, and when, with the start of each prompt.
    if (!queue.empty()) {
        ImGui::Separator();
        ImGui::TextDisabled(
            "Queued: they arrive as the run steps (Space plays, N steps one iteration).");
        for (const PendingRequest& p : queue) {
            std::string text = p.prompt_text.substr(0, 120);
            for (char& c : text)
                if (c == '\n' || c == '\t') c = ' ';
            ImGui::Text("%-10s step %-4lld %3d tok, up to %d more", p.id.c_str(),
                        static_cast<long long>(p.arrival_step), p.prompt_tokens, p.max_tokens);
            if (!text.empty()) {
                ImGui::SameLine();
                ImGui::TextDisabled("%s%s", text.c_str(), p.prompt_text.size() > 120 ? "..." : "");
            }
        }
    }
    ImGui::EndChild();
    ImGui::Separator();
    auto it = s->requests.find(selected_request);
    if (it == s->requests.end()) {
        text_disabled_wrapped("Click a request or a block to see its tokens.");
    } else {
        const RequestState& r = it->second;
        ImGui::TextWrapped("%s: %s, %d prompt + %d generated tokens, %d preemptions",
                           r.name.c_str(), request_phase_name(r.phase), r.prompt_len,
                           std::max(0, r.num_tokens() - r.prompt_len), r.preemptions);
        ImGui::BeginChild("##tokens", ImVec2(0, 0), true);
        std::string prompt, generated;
        for (int t = 0; t < r.num_tokens(); ++t)
            (t < r.prompt_len ? prompt : generated) += r.token_text[static_cast<size_t>(t)];
        ImGui::PushTextWrapPos(0.0f);
        ImGui::TextDisabled("%s", prompt.c_str());
        ImGui::TextColored(ImVec4(0.95f, 0.75f, 0.3f, 1.0f), "%s",
                           generated.empty() ? "(nothing generated yet)" : generated.c_str());
        ImGui::PopTextWrapPos();
        ImGui::EndChild();
    }
    ImGui::End();
}

}  // namespace kvscope::ui
