// Eviction log: every eviction (of cached blocks and of tokens), compaction move, preemption, swap
// and rejection, filterable; a click moves the cursor to that step and selects the request. For
// an attached deployment: every block a rank dropped (BlockRemoved, or all at once when it
// cleared or restarted), where it was kept and how long it had been held.
#include <imgui.h>

#include <algorithm>
#include <cstdio>
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
// How long a block was held, "-" when its store came before what was recorded.
std::string held_for(const AttachedRemoval& r) {
    if (r.age_ns < 0) return "-";
    char out[32];
    std::snprintf(out, sizeof out, "%.3f s", static_cast<double>(r.age_ns) / 1e9);
    return out;
}

std::string describe(const AttachedRemoval& r) {
    std::string out = "block " + hash_hex(r.hash) + (r.cleared ? " cleared" : " evicted");
    if (r.stored_step < 0) return out + " (stored before the recording)";
    if (r.age_ns >= 0) out += ", held " + held_for(r);
    return out + " (stored at step " + std::to_string(r.stored_step) + ")";
}

void draw_attached_evictions(UiContext& ctx) {
    static bool show_evicted = true, show_cleared = true;
    ImGui::Checkbox("evicted", &show_evicted);
    const char* cleared_label = "cleared / restarted";
    same_line_if_fits(ImGui::GetFrameHeight() + ImGui::GetStyle().ItemInnerSpacing.x +
                      ImGui::CalcTextSize(cleared_label).x);
    ImGui::Checkbox(cleared_label, &show_cleared);
    char filter[128];
    std::snprintf(filter, sizeof filter, "%s", ctx.view.eviction_filter.c_str());
    ImGui::SetNextItemWidth(200);
    if (ImGui::InputTextWithHint("##filter", "rank N, medium or hash prefix", filter,
                                 sizeof filter))
        ctx.view.eviction_filter = filter;
    const std::string& f = ctx.view.eviction_filter;
    const auto& removals = ctx.attached_history().removals;
    std::vector<const AttachedRemoval*> shown;
    for (const AttachedRemoval& r : removals) {
        if (!(r.cleared ? show_cleared : show_evicted)) continue;
        if (!f.empty() && f != "rank " + std::to_string(r.publisher) &&
            f != kv_medium_name(r.medium) && !hash_hex(r.hash).starts_with(f))
            continue;
        shown.push_back(&r);
    }
    ImGui::TextDisabled("%zu of %zu blocks gone", shown.size(), removals.size());
    ctx.drawn_log_rows = shown.size();
    ctx.drawn_log_token_evictions = 0;
    ctx.drawn_log_first_row = shown.empty() ? "" : describe(*shown.front());
    if (!ImGui::BeginTable(
            "##log", 5,
            ImGuiTableFlags_RowBg | ImGuiTableFlags_ScrollY | ImGuiTableFlags_BordersInnerV))
        return;
    ImGui::TableSetupColumn("step", ImGuiTableColumnFlags_WidthFixed, 60);
    ImGui::TableSetupColumn("rank", ImGuiTableColumnFlags_WidthFixed, 40);
    ImGui::TableSetupColumn("medium", ImGuiTableColumnFlags_WidthFixed, 60);
    ImGui::TableSetupColumn("held", ImGuiTableColumnFlags_WidthFixed, 60);
    ImGui::TableSetupColumn("block");
    ImGui::TableHeadersRow();
    ImGuiListClipper clipper;
    clipper.Begin(static_cast<int>(shown.size()));
    while (clipper.Step())
        for (int i = clipper.DisplayStart; i < clipper.DisplayEnd; ++i) {
            const AttachedRemoval& r = *shown[static_cast<size_t>(i)];
            ImGui::TableNextRow();
            ImGui::TableNextColumn();
            char label[32];
            std::snprintf(label, sizeof label, "%lld##%d", static_cast<long long>(r.step), i);
            // The block's last step held, where the maps still show it.
            const int64_t last_held = std::max<int64_t>(r.step - 1, 0);
            if (ImGui::Selectable(label, last_held == ctx.view.cursor,
                                  ImGuiSelectableFlags_SpanAllColumns)) {
                ctx.set_cursor(last_held);
                ctx.view.selected_block = r.block;
            }
            ImGui::TableNextColumn();
            ImGui::Text("%d", r.publisher);
            ImGui::TableNextColumn();
            ImGui::TextUnformatted(std::string(kv_medium_name(r.medium)).c_str());
            ImGui::TableNextColumn();
            ImGui::TextUnformatted(held_for(r).c_str());
            ImGui::TableNextColumn();
            ImGui::TextUnformatted(describe(r).c_str());
        }
    ImGui::EndTable();
}
}  // namespace

void draw_eviction_log_panel(UiContext& ctx) {
    ImGui::Begin("Evictions");
    if (ctx.attached()) {
        draw_attached_evictions(ctx);
        ImGui::End();
        return;
    }
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
                                   ? ctx.state->requests.at(e.request).name.str()
                                   : "";
            if (name.find(ctx.view.eviction_filter) == std::string::npos) continue;
        }
        shown.push_back(&e);
    }
    ImGui::TextDisabled("%zu of %zu entries", shown.size(), log.size());
    ctx.drawn_log_rows = shown.size();
    ctx.drawn_log_first_row = shown.empty() ? "" : describe(*shown.front());
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
                        ? ctx.state->requests.at(e.request).name.str()
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
