#include "ui/step_bytes.h"

#include <imgui.h>

#include <cstdio>

#include "ui/ui_context.h"

namespace kvscope::ui {

std::string byte_size_text(double bytes) {
    char buf[32];
    if (bytes >= 1e9)
        std::snprintf(buf, sizeof buf, "%.2f GB", bytes / 1e9);
    else if (bytes >= 1e6)
        std::snprintf(buf, sizeof buf, "%.2f MB", bytes / 1e6);
    else if (bytes >= 1e3)
        std::snprintf(buf, sizeof buf, "%.1f KB", bytes / 1e3);
    else
        std::snprintf(buf, sizeof buf, "%.0f B", bytes);
    return buf;
}

std::string step_bandwidth_text(const StepSummary& s, double limit_gbps) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s moved at %.1f GB/s",
                  byte_size_text(static_cast<double>(s.bytes_moved())).c_str(), s.bandwidth_gbps());
    std::string out = buf;
    if (limit_gbps > 0) {
        std::snprintf(buf, sizeof buf, ", %.0f%% of the recording machine's %.1f GB/s",
                      100 * s.bandwidth_gbps() / limit_gbps, limit_gbps);
        out += buf;
    }
    return out;
}

void draw_step_bytes(const StepSummary& s, double limit_gbps) {
    const double total = static_cast<double>(s.bytes_moved());
    if (total <= 0) return;
    ImDrawList* dl = ImGui::GetWindowDrawList();
    const float h = ImGui::GetTextLineHeight() * 0.8f;
    const float w = std::max(40.0f, ImGui::GetContentRegionAvail().x);
    ImVec2 p = ImGui::GetCursorScreenPos();
    struct Part {
        int64_t bytes;
        uint32_t color;
        const char* label;
    } parts[] = {{s.weight_bytes, kWeightBytesColor, "weights"},
                 {s.kv_read_bytes, kKvReadBytesColor, "KV read"},
                 {s.kv_written_bytes, kKvWrittenBytesColor, "KV written"},
                 {s.activation_bytes, kActivationBytesColor, "activations"}};
    float x = p.x;
    for (const Part& part : parts) {
        // At least a pixel, so that a part that exists is never invisible.
        float pw =
            part.bytes > 0
                ? std::max(1.0f, static_cast<float>(static_cast<double>(part.bytes) / total) * w)
                : 0.0f;
        dl->AddRectFilled(ImVec2(x, p.y), ImVec2(std::min(x + pw, p.x + w), p.y + h), part.color);
        x += pw;
    }
    ImGui::Dummy(ImVec2(w, h));
    bool first = true;
    for (const Part& part : parts) {
        std::string label =
            std::string(part.label) + " " + byte_size_text(static_cast<double>(part.bytes));
        const float lh = ImGui::GetTextLineHeight();
        if (!first)
            same_line_if_fits(lh + 2 * ImGui::GetStyle().ItemSpacing.x +
                              ImGui::CalcTextSize(label.c_str()).x);
        first = false;
        ImVec2 q = ImGui::GetCursorScreenPos();
        dl->AddRectFilled(ImVec2(q.x, q.y + lh * 0.25f), ImVec2(q.x + lh * 0.5f, q.y + lh * 0.75f),
                          part.color);
        ImGui::Dummy(ImVec2(lh * 0.5f, lh));
        ImGui::SameLine();
        ImGui::TextDisabled("%s", label.c_str());
    }
    text_disabled_wrapped(step_bandwidth_text(s, limit_gbps));
}

}  // namespace kvscope::ui
