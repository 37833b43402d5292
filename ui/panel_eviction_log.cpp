// Eviction log: every eviction (of cached blocks and of tokens), compaction move, preemption, swap
// and rejection, filterable; a click moves the cursor to that step and selects the request.
#include <imgui.h>

#include <algorithm>
#include <string>

#include "ui/ui_context.h"

namespace kvscope::ui {

namespace {
std::string describe(const Event& e) {
    switch (e.kind) {
        case EventKind::kPreempt:
            return std::string("preempted by ") +
                   (e.a == static_cast<int32_t>(PreemptMode::kSwap) ? "swap" : "recompute") + ", " +
                   std::to_string(e.b) + " blocks released";
        case EventKind::kBlockEvict:
            return "cached block " + std::to_string(e.block) + " evicted: " + e.text;
        case EventKind::kTokenEvict:
            return "token " + std::to_string(e.c) + " (layer " + std::to_string(e.a) + ", head " +
                   std::to_string(e.b) + ") score " + std::to_string(e.value) + ": " + e.text;
        case EventKind::kTokenMove:
            return "token " + std::to_string(e.c) + " (layer " + std::to_string(e.a) + ", head " +
                   std::to_string(e.b) + ") moved from slot " + std::to_string(e.wide >> 32) +
                   " to " + std::to_string(e.wide & 0xffffffff) + " (compaction)";
        case EventKind::kSwapOut:
            return std::to_string(e.a) + " blocks swapped out";
        case EventKind::kSwapIn:
            return std::to_string(e.a) + " blocks swapped in";
        case EventKind::kRequestReject:
            return "rejected: " + e.text;
        default:
            return std::string(event_kind_name(e.kind));
    }
}
}  // namespace

void draw_eviction_log_panel(UiContext& ctx) {
    ImGui::Begin("Evictions");
    // preempt, block evict, token evict, token move, swap/reject
    static bool show[5] = {true, true, true, true, true};
    const char* labels[5] = {"preemptions", "cache evictions", "token evictions",
                             "compaction moves", "swaps / rejects"};
    for (int i = 0; i < 5; ++i) {
        if (i > 0)
            same_line_if_fits(ImGui::GetFrameHeight() + ImGui::GetStyle().ItemInnerSpacing.x +
                              ImGui::CalcTextSize(labels[i]).x);
        ImGui::Checkbox(labels[i], &show[i]);
    }
    char filter[128];
    std::snprintf(filter, sizeof filter, "%s", ctx.view.eviction_filter.c_str());
    ImGui::SetNextItemWidth(200);
    if (ImGui::InputTextWithHint("##filter", "filter by request", filter, sizeof filter))
        ctx.view.eviction_filter = filter;
    const auto& log = ctx.eviction_log();
    std::vector<const Event*> shown;
    for (const Event& e : log) {
        int group = e.kind == EventKind::kPreempt      ? 0
                    : e.kind == EventKind::kBlockEvict ? 1
                    : e.kind == EventKind::kTokenEvict ? 2
                    : e.kind == EventKind::kTokenMove  ? 3
                                                       : 4;
        if (!show[group]) continue;
        if (!ctx.view.eviction_filter.empty()) {
            std::string name = e.request >= 0 && ctx.state && ctx.state->requests.count(e.request)
                                   ? ctx.state->requests.at(e.request).name
                                   : "";
            if (name.find(ctx.view.eviction_filter) == std::string::npos) continue;
        }
        shown.push_back(&e);
    }
    ImGui::TextDisabled("%zu of %zu entries", shown.size(), log.size());
    ctx.drawn_log_rows = shown.size();
    ctx.drawn_log_token_evictions =
        static_cast<size_t>(std::count_if(shown.begin(), shown.end(), [](const Event* e) {
            return e->kind == EventKind::kTokenEvict;
        }));
    if (ImGui::BeginTable(
            "##log", 4,
            ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY | ImGuiTableFlags_BordersInnerV)) {
        ImGui::TableSetupColumn("step", ImGuiTableColumnFlags_WidthFixed, 60);
        ImGui::TableSetupColumn("request", ImGuiTableColumnFlags_WidthFixed, 90);
        ImGui::TableSetupColumn("kind", ImGuiTableColumnFlags_WidthFixed, 100);
        ImGui::TableSetupColumn("what and why");
        ImGui::TableHeadersRow();
        ImGuiListClipper clipper;
        clipper.Begin(static_cast<int>(shown.size()));
        while (clipper.Step())
            for (int i = clipper.DisplayStart; i < clipper.DisplayEnd; ++i) {
                const Event& e = *shown[static_cast<size_t>(i)];
                ImGui::TableNextRow();
                ImGui::TableNextColumn();
                char label[32];
                std::snprintf(label, sizeof label, "%lld##%d", static_cast<long long>(e.step), i);
                if (ImGui::Selectable(label, e.step == ctx.view.cursor,
                                      ImGuiSelectableFlags_SpanAllColumns)) {
                    ctx.set_cursor(e.step);
                    if (e.request >= 0) ctx.view.selected_request = e.request;
                    if (e.block >= 0) ctx.view.selected_block = e.block;
                }
                ImGui::TableNextColumn();
                std::string name =
                    e.request >= 0 && ctx.state && ctx.state->requests.count(e.request)
                        ? ctx.state->requests.at(e.request).name
                        : (e.request >= 0 ? std::string("#").append(std::to_string(e.request))
                                          : std::string("-"));
                ImGui::TextUnformatted(name.c_str());
                ImGui::TableNextColumn();
                ImGui::TextUnformatted(std::string(event_kind_name(e.kind)).c_str());
                ImGui::TableNextColumn();
                ImGui::TextUnformatted(describe(e).c_str());
            }
        ImGui::EndTable();
    }
    ImGui::End();
}

}  // namespace kvscope::ui
