// Block pool map: one cell per physical block, coloured by owner, shaded by fill, marked when
// shared or cached. The cells are one texture (a single draw call at any pool size); hover and
// click work out the cell from the mouse position.
#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "ui/gl_texture.h"
#include "ui/step_bytes.h"
#include "ui/ui_context.h"

namespace kvscope::ui {

namespace {
// Tokens held in block `b` by request `r` (from its table position and token count).
int tokens_in_block(const RequestState& r, int logical, int block_size) {
    return std::clamp(r.num_tokens() - logical * block_size, 0, block_size);
}

struct BlockInfo {
    int fill = 0;      // most tokens any holder keeps there
    int logical = -1;  // its index in the first holder's table
};
}  // namespace

void draw_block_pool_panel(UiContext& ctx, Side side) {
    const bool main = side == Side::kMain;
    static Texture textures[2];
    static std::vector<uint32_t> pixels;
    Texture& texture = textures[main ? 0 : 1];
    ImGui::Begin(main ? "Block pool" : "Block pool (right)");
    const TimelineState* s = ctx.state_of(side);
    if (ctx.compare) {
        SessionReader& shown = main ? *ctx.session : *ctx.compare;
        text_disabled_wrapped((main ? "Left: " : "Right: ") + shown.path() + ", step " +
                              std::to_string(main ? ctx.view.cursor : ctx.compare_step));
    }
    if (!s || s->blocks.empty()) {
        ImGui::TextDisabled("%s", !main && !ctx.compare_note.empty() ? ctx.compare_note.c_str()
                                                                     : "No session open.");
        ImGui::End();
        return;
    }
    const int32_t selected_request = ctx.selected_request_in(side);
    const int n = static_cast<int>(s->blocks.size());
    const int bs = s->info.block_size;
    std::vector<BlockInfo> info(static_cast<size_t>(n));
    for (const auto& [i, r] : s->requests)
        for (size_t l = 0; l < r.block_table.size(); ++l) {
            int b = r.block_table[l];
            if (b < 0 || b >= n) continue;
            auto& bi = info[static_cast<size_t>(b)];
            bi.fill = std::max(bi.fill, tokens_in_block(r, static_cast<int>(l), bs));
            if (bi.logical < 0) bi.logical = static_cast<int>(l);
        }
    ImGui::TextWrapped("%d blocks x %d tokens (%s)  used %d  free %d  cached %d", n, bs,
                       s->info.allocator.c_str(), s->blocks_used(), n - s->blocks_used(),
                       s->blocks_cached());
    // Real bytes: a quantized cache's blocks are smaller (scales included).
    if (s->info.kv_bytes_per_block > 0)
        text_disabled_wrapped(
            "K/V " + s->info.kv_dtype + ": " + std::to_string(s->info.kv_bytes_per_block / 1024) +
            " KiB a block" +
            (s->info.eviction_policy != "none"
                 ? "; eviction " + s->info.eviction_policy + " (paler: blocks with evicted slots)"
                 : ""));
    // What this step moved, beside the blocks it moved it from (Kernels has the ops).
    if (const StepSummary* sum = ctx.step_summary(side); sum && sum->bytes_moved() > 0)
        draw_step_bytes(*sum, ctx.session_of(side)->info().bandwidth_limit_gbps());
    // Token eviction: the share of a block's slots (over layers and KV heads) still holding.
    const int lanes = std::max(1, s->info.n_layers * std::max(s->info.n_kv_heads, 1));
    auto kept_share = [&](const BlockState& st) {
        return 1.0f - static_cast<float>(st.lane_holes) / static_cast<float>(bs * lanes);
    };
    {  // Legend, drawn with the same marks as the cells.
        ImDrawList* dl = ImGui::GetWindowDrawList();
        float h = ImGui::GetTextLineHeight();
        // Each swatch and its label flow onto the next line when the panel is narrow.
        bool first = true;
        auto swatch = [&](uint32_t color, const char* label, int mark) {
            if (!first)
                same_line_if_fits(h + 2 * ImGui::GetStyle().ItemSpacing.x +
                                  ImGui::CalcTextSize(label).x);
            first = false;
            ImVec2 p = ImGui::GetCursorScreenPos();
            dl->AddRectFilled(p, ImVec2(p.x + h, p.y + h), color);
            if (mark == 1)
                dl->AddCircleFilled(ImVec2(p.x + h * 0.5f, p.y + h * 0.5f), h * 0.18f, 0xffffffff);
            if (mark == 2)
                dl->AddLine(ImVec2(p.x + 1, p.y + h - 2), ImVec2(p.x + h - 1, p.y + 1), 0xff9a9a9a);
            ImGui::Dummy(ImVec2(h, h));
            ImGui::SameLine();
            ImGui::TextDisabled("%s", label);
        };
        swatch(owner_color(0, ctx.view.palette), "request (dimmer = emptier)", 0);
        swatch(shade(owner_color(1, ctx.view.palette), 1.0f), "shared", 1);
        swatch(kCachedColor, "cached, free", 2);
        swatch(kFreeColor, "free", 0);
    }
    ImVec2 avail = ImGui::GetContentRegionAvail();
    avail.y = std::max(avail.y, 40.0f);
    // Square cells, as large as fit.
    int cols = std::max(
        1, static_cast<int>(std::ceil(std::sqrt(static_cast<double>(n) * avail.x / avail.y))));
    int rows = (n + cols - 1) / cols;
    float cell = std::max(
        1.0f, std::min(avail.x / static_cast<float>(cols), avail.y / static_cast<float>(rows)));
    pixels.assign(static_cast<size_t>(cols) * rows, kHoleColor);
    for (int b = 0; b < n; ++b) {
        const BlockState& st = s->blocks[static_cast<size_t>(b)];
        uint32_t c = st.free()
                         ? (st.cached() ? kCachedColor : kFreeColor)
                         : shade(owner_color(st.owners.empty() ? st.alloc_owner : st.owners.front(),
                                             ctx.view.palette),
                                 static_cast<float>(info[static_cast<size_t>(b)].fill) /
                                     static_cast<float>(bs) * kept_share(st));
        if (st.refcount > 1)
            c = (c & 0xff000000u) | ((c & 0x00fefefe) >> 1) | 0x00808080u;  // shared: paler
        pixels[static_cast<size_t>(b)] = c;
    }
    texture.upload(cols, rows, pixels);
    ImVec2 origin = ImGui::GetCursorScreenPos();
    ImVec2 size(cell * static_cast<float>(cols), cell * static_cast<float>(rows));
    ImGui::InvisibleButton("##pool", size);
    ImDrawList* dl = ImGui::GetWindowDrawList();
    dl->AddImage(texture.imgui_id(), origin, ImVec2(origin.x + size.x, origin.y + size.y));
    auto cell_rect = [&](int b, uint32_t color, float thickness) {
        float x = origin.x + static_cast<float>(b % cols) * cell,
              y = origin.y + static_cast<float>(b / cols) * cell;
        dl->AddRect(ImVec2(x, y), ImVec2(x + cell, y + cell), color, 0.0f, 0, thickness);
    };
    // Gaps between cells, so neighbouring blocks of one request stay countable.
    if (cell >= 8.0f) {
        for (int c = 1; c < cols; ++c) {
            float x = origin.x + static_cast<float>(c) * cell;
            dl->AddLine(ImVec2(x, origin.y), ImVec2(x, origin.y + size.y), kHoleColor);
        }
        for (int r = 1; r < rows; ++r) {
            float y = origin.y + static_cast<float>(r) * cell;
            dl->AddLine(ImVec2(origin.x, y), ImVec2(origin.x + size.x, y), kHoleColor);
        }
    }
    // Block ids, when there is room for them.
    if (cell >= 4.0f * ImGui::GetFontSize()) {
        char id[16];
        for (int b = 0; b < n; ++b) {
            std::snprintf(id, sizeof id, "%d", b);
            dl->AddText(ImVec2(origin.x + static_cast<float>(b % cols) * cell + 3,
                               origin.y + static_cast<float>(b / cols) * cell + 2),
                        0xb0ffffff, id);
        }
    }
    // Marks drawn per cell only while cells are big enough to see them.
    if (cell >= 6.0f) {
        for (int b = 0; b < n; ++b) {
            const BlockState& st = s->blocks[static_cast<size_t>(b)];
            float x = origin.x + static_cast<float>(b % cols) * cell,
                  y = origin.y + static_cast<float>(b / cols) * cell;
            if (st.refcount > 1)
                dl->AddCircleFilled(ImVec2(x + cell * 0.5f, y + cell * 0.5f), cell * 0.18f,
                                    0xffffffff);
            if (st.cached())
                dl->AddLine(ImVec2(x + 1, y + cell - 2), ImVec2(x + cell - 1, y + 1), 0xff9a9a9a);
        }
    }
    if (selected_request >= 0) {
        auto it = s->requests.find(selected_request);
        if (it != s->requests.end())
            for (int b : it->second.block_table)
                if (b >= 0 && b < n) cell_rect(b, 0xffffffff, 2.0f);
    }
    // Block ids mean nothing across two runs: the selected block is the main run's.
    if (main && ctx.view.selected_block >= 0 && ctx.view.selected_block < n)
        cell_rect(ctx.view.selected_block, 0xff00ffff, 3.0f);
    if (ctx.before_first_step() && ctx.controller) {
        // The first thing a newcomer sees: an empty pool and what to press.
        const char* hint = "All blocks free. Space plays, N steps one iteration.";
        ImVec2 t = ImGui::CalcTextSize(hint);
        ImVec2 c(origin.x + size.x * 0.5f, origin.y + size.y * 0.5f);
        dl->AddRectFilled(ImVec2(c.x - t.x * 0.5f - 8, c.y - t.y * 0.5f - 5),
                          ImVec2(c.x + t.x * 0.5f + 8, c.y + t.y * 0.5f + 5), 0xe0202020, 4.0f);
        dl->AddText(ImVec2(c.x - t.x * 0.5f, c.y - t.y * 0.5f), 0xffffffff, hint);
    }

    int hovered = -1;
    if (ImGui::IsItemHovered()) {
        ImVec2 m = ImGui::GetMousePos();
        int cx = static_cast<int>((m.x - origin.x) / cell),
            cy = static_cast<int>((m.y - origin.y) / cell);
        if (cx >= 0 && cx < cols && cy >= 0) hovered = cy * cols + cx;
    }
    if (main && ctx.scripted.hover_block >= 0) hovered = ctx.scripted.hover_block;
    if (hovered >= n) hovered = -1;
    if (main) ctx.view.hovered_block = hovered;
    if (hovered >= 0) {
        int b = hovered;
        const BlockState& st = s->blocks[static_cast<size_t>(b)];
        ImGui::BeginTooltip();
        ImGui::Text("block %d", b);
        ImGui::Text("refcount %d%s", st.refcount, st.refcount > 1 ? " (shared)" : "");
        if (st.lane_holes > 0)
            ImGui::Text("%d of %d slots (x layers x KV heads) evicted: %.0f%% still held",
                        st.lane_holes, bs * lanes, 100.0 * kept_share(st));
        if (st.hash)
            ImGui::Text("prefix hash %016llx%s", static_cast<unsigned long long>(*st.hash),
                        st.cached() ? " (cached, free)" : "");
        if (st.free() && !st.cached()) ImGui::TextUnformatted("free");
        if (st.alloc_step >= 0)
            ImGui::Text("allocated at step %lld", static_cast<long long>(st.alloc_step));
        for (int owner : st.owners) {
            auto it = s->requests.find(owner);
            if (it == s->requests.end()) continue;
            const RequestState& r = it->second;
            int logical = -1;
            for (size_t l = 0; l < r.block_table.size(); ++l)
                if (r.block_table[l] == b) logical = static_cast<int>(l);
            std::string text;
            for (int t = logical * bs;
                 logical >= 0 && t < std::min(r.num_tokens(), (logical + 1) * bs); ++t)
                text += r.token_text[static_cast<size_t>(t)];
            ImGui::Text("owner %s (logical block %d, %d tokens)", r.name.c_str(), logical,
                        logical >= 0 ? tokens_in_block(r, logical, bs) : 0);
            if (!text.empty()) ImGui::TextWrapped("\"%s\"", text.c_str());
        }
        ImGui::EndTooltip();
        if (ImGui::IsItemClicked()) {
            if (main) ctx.view.selected_block = b;
            if (!st.owners.empty()) {
                auto owner = s->requests.find(st.owners.front());
                if (owner != s->requests.end()) ctx.select_request_named(owner->second.name);
            }
        }
    }
    ImGui::End();
}

}  // namespace kvscope::ui
