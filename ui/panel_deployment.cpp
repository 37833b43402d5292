// Deployment: an attached session's publishers (ranks), each a block map of the blocks it holds
// with every prefix chain laid out together (largest tree first, each depth-first), coloured by
// where the block is kept (GPU, CPU, storage...), and a search box that finds blocks by hash or
// by token ids and marks them in the maps. A rank whose blocks are in several cache groups
// (vLLM's hybrid cache: full attention, sliding window) gets a map per group, so the groups'
// copies of one prefix are drawn apart. The trees come from UiContext::attached_index(),
// built once per state shown; a map is one texture per publisher, so cost follows the screen.
#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "ui/gl_texture.h"
#include "ui/ui_context.h"

namespace kvscope::ui {

namespace {
// A block map's cells: slots in chain order, -1 for the gap left between two trees (only
// around trees of two or more of the publisher's blocks, so lone blocks stay packed).
std::vector<int32_t> cells_of(const AttachedIndex& x, const PublisherHeld& held) {
    auto tree_of = [&](int32_t b) {
        return x.nodes[static_cast<size_t>(x.node_of_block[static_cast<size_t>(b)])].tree;
    };
    std::vector<int32_t> cells;
    cells.reserve(held.order.size() + 16);
    size_t prev_len = 0;
    for (size_t i = 0; i < held.order.size();) {
        size_t j = i;
        while (j < held.order.size() && tree_of(held.order[j]) == tree_of(held.order[i]))
            ++j;
        if (i > 0 && (j - i >= 2 || prev_len >= 2)) cells.push_back(-1);
        cells.insert(cells.end(), held.order.begin() + static_cast<long>(i),
                     held.order.begin() + static_cast<long>(j));
        prev_len = j - i;
        i = j;
    }
    return cells;
}

// Halfway to white, as the block pool draws a shared block.
uint32_t paler(uint32_t c) {
    return (c & 0xff000000u) | ((c & 0x00fefefe) >> 1) | 0x00808080u;
}

std::string ids_text(const std::vector<int32_t>& tokens, size_t limit) {
    std::string s;
    for (size_t i = 0; i < tokens.size() && i < limit; ++i) {
        if (i) s += ' ';
        s += std::to_string(tokens[i]);
    }
    if (tokens.size() > limit) s += " ... (" + std::to_string(tokens.size() - limit) + " more)";
    return s;
}

// "group 1 (sliding_window, window 128)".
std::string group_text(const StoredBlock& b) {
    std::string t = "group " + std::to_string(b.group);
    if (!b.group_kind.empty() || b.sliding_window >= 0) {
        t += " (" + b.group_kind;
        if (b.sliding_window >= 0)
            t += std::string(b.group_kind.empty() ? "" : ", ") + "window " +
                 std::to_string(b.sliding_window);
        t += ")";
    }
    return t;
}

// The hovered block's tooltip, as lines (also what `dump` reports).
std::vector<std::string> tooltip_lines(const TimelineState& s, const AttachedIndex& x, int32_t b) {
    std::vector<std::string> lines;
    const BlockState& st = s.blocks[static_cast<size_t>(b)];
    const AttachedBlock& a = s.attached[static_cast<size_t>(b)];
    const int32_t p = s.info.publisher_of(b);
    lines.push_back("rank " + std::to_string(p) + " (" +
                    (p >= 0 ? s.info.publishers[static_cast<size_t>(p)] : std::string("?")) +
                    "), slot " + std::to_string(b));
    if (!st.hash || st.refcount <= 0) {
        lines.push_back("not held");
        return lines;
    }
    lines.push_back("hash " + hash_hex(*st.hash));
    if (!a.digest.empty()) {  // sent as bytes: the key is their last 8, as vLLM's int form
        std::string hex;
        for (uint8_t c : a.digest) {
            char two[3];
            std::snprintf(two, sizeof two, "%02x", c);
            hex += two;
        }
        lines.push_back("digest " + hex);
    }
    if (a.group >= 0) lines.push_back("cache " + group_text(a));
    if (a.has_parent)
        lines.push_back("parent " + hash_hex(a.parent) +
                        (x.find(a.parent) >= 0 ? "" : " (not held: this block starts a tree)"));
    else
        lines.push_back("no parent: the first block of its chain");
    lines.push_back("medium " + std::string(kv_medium_name(a.medium)) + ", " +
                    std::to_string(st.refcount) +
                    (st.refcount == 1 ? " reference" : " references"));
    if (st.alloc_step >= 0) lines.push_back("stored at step " + std::to_string(st.alloc_step));
    const int32_t v = x.node_of_block[static_cast<size_t>(b)];
    if (v >= 0) {
        const PrefixNode& n = x.nodes[static_cast<size_t>(v)];
        lines.push_back("block " + std::to_string(n.depth + 1) + " of its chain (tree " +
                        std::to_string(n.tree + 1) + "), " + std::to_string(n.path_tokens) +
                        " tokens from the root, " + std::to_string(n.chains) +
                        (n.chains == 1 ? " chain" : " chains") + " through it");
        std::string others;
        for (int32_t o : n.blocks)
            if (o != b)
                others += (others.empty() ? "" : ", ") + std::string("rank ") +
                          std::to_string(s.info.publisher_of(o)) + " " +
                          std::string(kv_medium_name(s.attached[static_cast<size_t>(o)].medium));
        if (!others.empty()) lines.push_back("also held by " + others);
    }
    // The session has no tokenizer for an attached deployment: ids only.
    if (a.token_pairs) {  // SGLang's speculative pages: (token, next token) a position
        std::string pairs;
        for (size_t i = 0; i + 1 < a.tokens.size() && i < 64; i += 2) {
            if (i) pairs += ' ';
            pairs.append("(")
                .append(std::to_string(a.tokens[i]))
                .append(",")
                .append(std::to_string(a.tokens[i + 1]))
                .append(")");
        }
        lines.push_back(std::to_string(a.tokens.size() / 2) + " token pairs: " + pairs);
    } else {
        lines.push_back(std::to_string(a.tokens.size()) + " token ids: " + ids_text(a.tokens, 64));
    }
    return lines;
}
}  // namespace

void draw_deployment_panel(UiContext& ctx) {
    ImGui::Begin("Deployment");
    UiContext::DeploymentGeometry& drawn = ctx.drawn_deployment;
    drawn = UiContext::DeploymentGeometry{};
    const TimelineState* s = ctx.state;
    if (!ctx.attached() || !s || s->attached.size() != s->blocks.size()) {
        text_disabled_wrapped(
            "Not an attached session. `kvscope attach ENDPOINT... --record F.kvs` records a vLLM "
            "or SGLang deployment's KV-cache events; replaying it shows each rank's blocks here.");
        ImGui::End();
        return;
    }
    const AttachedIndex& x = ctx.attached_index();
    const RunInfo& info = s->info;
    const auto publishers = static_cast<int32_t>(info.publishers.size());
    int held = 0;
    for (const PublisherHeld& h : x.publishers)
        held += h.held;
    drawn.shown = true;
    drawn.publishers = publishers;
    drawn.held = held;
    drawn.trees = static_cast<int>(x.trees.size());
    ImGui::TextWrapped(
        "%d ranks x %d slots: %d blocks held, %zu distinct hashes in %zu prefix "
        "trees (step %lld)",
        publishers, info.blocks_per_publisher(), held, x.nodes.size(), x.trees.size(),
        static_cast<long long>(s->step));

    // Search: a hash prefix or token ids.
    static char text[512] = "";
    if (ctx.view.deploy_search != text && !ImGui::IsAnyItemActive())
        std::snprintf(text, sizeof text, "%s", ctx.view.deploy_search.c_str());
    ImGui::SetNextItemWidth(-1);
    if (ImGui::InputTextWithHint("##search", "search: hash prefix (hex) or token ids \"1 345 22\"",
                                 text, sizeof text))
        ctx.view.deploy_search = text;
    const AttachedQuery& query = ctx.attached_query();
    const AttachedMatch& match = ctx.attached_match();
    const bool searching =
        query.kind == AttachedQuery::Kind::kHash || query.kind == AttachedQuery::Kind::kTokens;
    std::vector<uint8_t> marked;
    if (searching) {
        marked.assign(s->blocks.size(), 0);
        for (int32_t b : match.blocks)
            marked[static_cast<size_t>(b)] = 1;
    }
    drawn.search_summary = match.summary;
    drawn.search_blocks.assign(
        match.blocks.begin(),
        match.blocks.begin() + static_cast<long>(std::min<size_t>(match.blocks.size(), 1000)));
    drawn.search_blocks_per_publisher = match.blocks_per_publisher;
    if (query.kind == AttachedQuery::Kind::kInvalid)
        ImGui::TextColored(ImVec4(1.0f, 0.35f, 0.3f, 1.0f), "%s", match.summary.c_str());
    else if (searching)
        ImGui::TextWrapped("%s", match.summary.c_str());
    else
        text_disabled_wrapped(
            "One word is a hash prefix; several numbers are token ids, found "
            "along chains from their roots (\"tokens: 5\" for one id).");

    {  // Legend: the media this state holds, and the marks.
        std::array<int32_t, kNumKvMedia> media{};
        for (const PublisherHeld& h : x.publishers)
            for (int m = 0; m < kNumKvMedia; ++m)
                media[static_cast<size_t>(m)] += h.by_medium[static_cast<size_t>(m)];
        ImDrawList* dl = ImGui::GetWindowDrawList();
        const float h = ImGui::GetTextLineHeight();
        bool first = true;
        auto swatch = [&](uint32_t color, const std::string& label, bool outline) {
            if (!first)
                same_line_if_fits(h + 2 * ImGui::GetStyle().ItemSpacing.x +
                                  ImGui::CalcTextSize(label.c_str()).x);
            first = false;
            ImVec2 p = ImGui::GetCursorScreenPos();
            dl->AddRectFilled(p, ImVec2(p.x + h, p.y + h), color);
            if (outline) dl->AddRect(p, ImVec2(p.x + h, p.y + h), 0xffffffff, 0.0f, 0, 2.0f);
            ImGui::Dummy(ImVec2(h, h));
            ImGui::SameLine();
            ImGui::TextDisabled("%s", label.c_str());
        };
        for (int m = 0; m < kNumKvMedia; ++m)
            if (media[static_cast<size_t>(m)] > 0 || m == 0)
                swatch(medium_color(m), std::string(kv_medium_name(static_cast<KvMedium>(m))),
                       false);
        swatch(paler(medium_color(0)), "2+ references (paler)", false);
        if (searching) swatch(medium_color(0), "found (the rest dimmed)", true);
        if (ctx.view.selected_tree >= 0) swatch(kFreeColor, "picked tree", true);
    }

    // One map per publisher, or per publisher and cache group when it holds several groups.
    struct Map {
        int32_t publisher, group;
        bool split;
        std::vector<int32_t> cells;
    };
    std::vector<Map> maps;
    for (int32_t p = 0; p < publishers; ++p) {
        std::vector<int32_t> cells = cells_of(x, x.publishers[static_cast<size_t>(p)]);
        std::vector<int32_t> groups;
        for (int32_t b : cells)
            if (b >= 0) {
                const int32_t g = s->attached[static_cast<size_t>(b)].group;
                if (std::find(groups.begin(), groups.end(), g) == groups.end()) groups.push_back(g);
            }
        std::sort(groups.begin(), groups.end());
        if (groups.size() <= 1) {
            maps.push_back({p, groups.empty() ? -1 : groups[0], false, std::move(cells)});
            continue;
        }
        for (int32_t g : groups) {
            Map& m = maps.emplace_back(Map{p, g, true, {}});
            for (int32_t b : cells) {
                if (b >= 0 && s->attached[static_cast<size_t>(b)].group != g) continue;
                if (b < 0 && (m.cells.empty() || m.cells.back() < 0)) continue;
                m.cells.push_back(b);
            }
        }
    }
    static std::vector<std::unique_ptr<Texture>> textures;
    static std::vector<uint32_t> pixels;
    while (textures.size() < maps.size())
        textures.push_back(std::make_unique<Texture>());
    const float line = ImGui::GetTextLineHeightWithSpacing();
    const float avail_h = ImGui::GetContentRegionAvail().y;
    const float map_h = std::max(
        3.0f * line, avail_h / static_cast<float>(std::max<size_t>(maps.size(), 1)) - 1.6f * line);
    int hovered = -1;
    const int scripted = ctx.scripted.hover_block;
    for (size_t mi = 0; mi < maps.size(); ++mi) {
        const int32_t p = maps[mi].publisher;
        const PublisherHeld& h = x.publishers[static_cast<size_t>(p)];
        std::string media;
        for (int m = 0; m < kNumKvMedia; ++m)
            if (int c = h.by_medium[static_cast<size_t>(m)]; c > 0)
                media += std::string(media.empty() ? "" : ", ") +
                         std::string(kv_medium_name(static_cast<KvMedium>(m))) + " " +
                         std::to_string(c);
        std::vector<int32_t>& cells = maps[mi].cells;
        std::string label =
            "rank " + std::to_string(p) + "  " + info.publishers[static_cast<size_t>(p)] +
            "  held " + std::to_string(h.held) + " of " +
            std::to_string(info.blocks_per_publisher()) + (media.empty() ? "" : " (" + media + ")");
        if (maps[mi].split) {  // this group's blocks only
            int32_t n = 0;
            for (int32_t b : cells)
                n += b >= 0;
            for (int32_t b : cells)
                if (b >= 0) {
                    label = "rank " + std::to_string(p) + "  " +
                            group_text(s->attached[static_cast<size_t>(b)]) + ": " +
                            std::to_string(n) + " blocks";
                    break;
                }
        }
        drawn.maps.push_back(label);
        ImGui::TextWrapped("%s", label.c_str());
        const int n = std::max(1, static_cast<int>(cells.size()));
        ImVec2 avail(ImGui::GetContentRegionAvail().x, map_h);
        avail.x = std::max(avail.x, 40.0f);
        int cols = std::max(
            1, static_cast<int>(std::ceil(std::sqrt(static_cast<double>(n) * avail.x / avail.y))));
        int rows = (n + cols - 1) / cols;
        float cell = std::max(
            1.0f, std::min(avail.x / static_cast<float>(cols), avail.y / static_cast<float>(rows)));
        // Fewer, bigger cells when they fit on fewer rows: keep cells at most 3 lines tall.
        cell = std::min(cell, 3.0f * line);
        cols = std::max(1, std::min(cols, static_cast<int>(avail.x / cell)));
        rows = (n + cols - 1) / cols;
        pixels.assign(static_cast<size_t>(cols) * rows, kHoleColor);
        for (size_t i = 0; i < cells.size(); ++i) {
            const int32_t b = cells[i];
            if (b < 0) continue;
            const BlockState& st = s->blocks[static_cast<size_t>(b)];
            uint32_t c = medium_color(static_cast<int>(s->attached[static_cast<size_t>(b)].medium));
            if (st.refcount > 1) c = paler(c);  // more references
            if (searching && !marked[static_cast<size_t>(b)]) c = shade(c, 0.0f);
            pixels[i] = c;
        }
        Texture& texture = *textures[mi];
        texture.upload(cols, rows, pixels);
        ImVec2 origin = ImGui::GetCursorScreenPos();
        ImVec2 size(cell * static_cast<float>(cols), cell * static_cast<float>(rows));
        ImGui::PushID(static_cast<int>(mi));
        ImGui::InvisibleButton("##map", ImVec2(std::max(size.x, 1.0f), std::max(size.y, 1.0f)));
        ImGui::PopID();
        ImDrawList* dl = ImGui::GetWindowDrawList();
        dl->AddImage(texture.imgui_id(), origin, ImVec2(origin.x + size.x, origin.y + size.y));
        auto outline = [&](size_t i, uint32_t color, float thickness) {
            float cx = origin.x + static_cast<float>(static_cast<int>(i) % cols) * cell,
                  cy = origin.y + static_cast<float>(static_cast<int>(i) / cols) * cell;
            dl->AddRect(ImVec2(cx, cy), ImVec2(cx + cell, cy + cell), color, 0.0f, 0, thickness);
        };
        if (cell >= 8.0f)  // gaps between cells, so a chain's blocks stay countable
            for (size_t i = 0; i < cells.size(); ++i)
                if (cells[i] >= 0) outline(i, kHoleColor, 1.0f);
        if (cell >= 5.0f)
            for (size_t i = 0; i < cells.size(); ++i) {
                const int32_t b = cells[i];
                if (b < 0) continue;
                if (searching && marked[static_cast<size_t>(b)]) outline(i, 0xffffffff, 2.0f);
                const int32_t v = x.node_of_block[static_cast<size_t>(b)];
                if (ctx.view.selected_tree >= 0 && v >= 0 &&
                    x.nodes[static_cast<size_t>(v)].tree == ctx.view.selected_tree)
                    outline(i, 0xff00ffff, 2.0f);
            }
        size_t at = cells.size();
        if (ImGui::IsItemHovered()) {
            ImVec2 m = ImGui::GetMousePos();
            int cx = static_cast<int>((m.x - origin.x) / cell),
                cy = static_cast<int>((m.y - origin.y) / cell);
            if (cx >= 0 && cx < cols && cy >= 0) at = static_cast<size_t>(cy * cols + cx);
        }
        if (scripted >= 0 && info.publisher_of(scripted) == p)
            for (size_t i = 0; i < cells.size(); ++i)
                if (cells[i] == scripted) at = i;
        if (at < cells.size() && cells[at] >= 0) {
            hovered = cells[at];
            outline(at, 0xffffffff, 1.0f);
            if (ImGui::IsItemClicked()) {
                ctx.view.selected_block = hovered;
                const int32_t v = x.node_of_block[static_cast<size_t>(hovered)];
                if (v >= 0) ctx.view.selected_tree = x.nodes[static_cast<size_t>(v)].tree;
            }
        }
    }
    if (hovered >= 0) {
        ctx.view.hovered_block = hovered;
        drawn.hovered_block = hovered;
        std::vector<std::string> lines = tooltip_lines(*s, x, hovered);
        ImGui::BeginTooltip();
        ImGui::PushTextWrapPos(ImGui::GetFontSize() * 40.0f);
        for (const std::string& l : lines) {
            ImGui::TextUnformatted(l.c_str());
            drawn.tooltip += (drawn.tooltip.empty() ? "" : " | ") + l;
        }
        ImGui::PopTextWrapPos();
        ImGui::EndTooltip();
    }
    ImGui::End();
}

}  // namespace kvscope::ui
