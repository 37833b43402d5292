// Help: every key and mouse action, over the window (F1).
#include <imgui.h>

#include "ui/ui_context.h"

namespace kvscope::ui {

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
