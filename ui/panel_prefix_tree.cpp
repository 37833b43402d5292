// Prefix trees: an attached session's held blocks as trees of prefix chains (UiContext::
// attached_index(), built once per state shown). Hot prefixes first (where chains branch, the
// most chains through it first: a shared system prompt), then every tree (a root is a block
// whose parent no one holds): its depth, blocks, chains and the ranks holding it. The list is
// clipped to the rows on screen, so 100 000 trees cost what a screenful does. A picked tree
// opens below as a tree of its chains (runs without branches folded into one line) and is
// outlined in the Deployment panel's maps.
#include <imgui.h>

#include <algorithm>
#include <string>

#include "ui/ui_context.h"

namespace kvscope::ui {

namespace {
std::string ranks_text(const std::vector<int32_t>& publishers) {
    std::string s;
    for (size_t i = 0; i < publishers.size() && i < 16; ++i) {
        if (i) s += ',';
        s += std::to_string(publishers[i]);
    }
    if (publishers.size() > 16) s += ",... (" + std::to_string(publishers.size()) + ")";
    return s;
}

// A node and the run of single children under it, as one tree line; then its branches.
void draw_chain(const AttachedIndex& x, const RunInfo& info, int32_t v, int level) {
    int32_t last = v;
    int run = 1;
    while (x.nodes[static_cast<size_t>(last)].children.size() == 1) {
        last = x.nodes[static_cast<size_t>(last)].children.front();
        ++run;
    }
    const PrefixNode& first = x.nodes[static_cast<size_t>(v)];
    const PrefixNode& end = x.nodes[static_cast<size_t>(last)];
    std::string label = hash_hex(first.hash);
    if (run > 1) label += " .. " + hash_hex(end.hash);
    label += "  " + std::to_string(run) + (run == 1 ? " block" : " blocks") + ", depth " +
             std::to_string(end.depth + 1) + ", " + std::to_string(end.path_tokens) + " tokens, " +
             std::to_string(first.chains) + (first.chains == 1 ? " chain" : " chains") +
             ", ranks " + ranks_text(x.publishers_of(v, info));
    const bool leaf = end.children.empty();
    ImGuiTreeNodeFlags flags = ImGuiTreeNodeFlags_SpanAvailWidth;
    if (leaf) flags |= ImGuiTreeNodeFlags_Leaf | ImGuiTreeNodeFlags_NoTreePushOnOpen;
    if (level < 2) flags |= ImGuiTreeNodeFlags_DefaultOpen;
    ImGui::PushID(v);
    const bool open = ImGui::TreeNodeEx("##chain", flags, "%s", label.c_str());
    ImGui::PopID();
    if (leaf || !open) return;
    constexpr size_t kShown = 64;  // a node's branches listed; the rest counted
    for (size_t i = 0; i < end.children.size() && i < kShown; ++i)
        draw_chain(x, info, end.children[i], level + 1);
    if (end.children.size() > kShown)
        ImGui::TextDisabled("... %zu more branches", end.children.size() - kShown);
    ImGui::TreePop();
}
}  // namespace

void draw_prefix_tree_panel(UiContext& ctx) {
    ImGui::Begin("Prefix trees");
    const TimelineState* s = ctx.state;
    if (!ctx.attached() || !s) {
        text_disabled_wrapped("Prefix trees are shown for attached sessions (kvscope attach).");
        ImGui::End();
        return;
    }
    const AttachedIndex& x = ctx.attached_index();
    const RunInfo& info = s->info;
    const std::vector<int32_t>& hot = x.hot;
    if (ctx.view.selected_tree >= static_cast<int32_t>(x.trees.size())) ctx.view.selected_tree = -1;
    text_disabled_wrapped(std::to_string(x.trees.size()) + " trees of " +
                          std::to_string(x.nodes.size()) +
                          " distinct hashes. A root is a block whose parent no rank holds.");
    const ImGuiTableFlags table_flags = ImGuiTableFlags_RowBg | ImGuiTableFlags_BordersInnerV |
                                        ImGuiTableFlags_ScrollY | ImGuiTableFlags_SizingStretchProp;
    const float line = ImGui::GetTextLineHeightWithSpacing();
    const float avail = ImGui::GetContentRegionAvail().y;
    ImGui::TextUnformatted("Hot prefixes (where chains branch)");
    if (hot.empty()) {
        text_disabled_wrapped("No chain branches: no prefix is shared.");
    } else if (ImGui::BeginTable(
                   "##hot", 5, table_flags,
                   ImVec2(0, std::min(std::max(avail * 0.3f, 4 * line),
                                      line * (static_cast<float>(hot.size()) + 1.5f))))) {
        ImGui::TableSetupScrollFreeze(0, 1);
        ImGui::TableSetupColumn("hash");
        ImGui::TableSetupColumn("blocks");
        ImGui::TableSetupColumn("tokens");
        ImGui::TableSetupColumn("chains");
        ImGui::TableSetupColumn("ranks");
        ImGui::TableHeadersRow();
        for (int32_t v : hot) {
            const PrefixNode& n = x.nodes[static_cast<size_t>(v)];
            ImGui::TableNextRow();
            ImGui::TableNextColumn();
            ImGui::PushID(v);
            if (ImGui::Selectable(hash_hex(n.hash).c_str(), ctx.view.selected_tree == n.tree,
                                  ImGuiSelectableFlags_SpanAllColumns))
                ctx.view.selected_tree = n.tree;
            ImGui::PopID();
            if (ImGui::IsItemHovered())
                ImGui::SetTooltip("%s: the first %d blocks of %d chains (%zu branches)",
                                  hash_hex(n.hash).c_str(), n.depth + 1, n.chains,
                                  n.children.size());
            ImGui::TableNextColumn();
            ImGui::Text("%d", n.depth + 1);
            ImGui::TableNextColumn();
            ImGui::Text("%lld", static_cast<long long>(n.path_tokens));
            ImGui::TableNextColumn();
            ImGui::Text("%d", n.chains);
            ImGui::TableNextColumn();
            ImGui::TextUnformatted(ranks_text(x.publishers_of(v, info)).c_str());
        }
        ImGui::EndTable();
    }
    ImGui::TextUnformatted("Trees (most blocks first)");
    const float trees_h =
        std::max(5 * line, ctx.view.selected_tree >= 0 ? ImGui::GetContentRegionAvail().y * 0.45f
                                                       : ImGui::GetContentRegionAvail().y);
    if (x.trees.empty()) {
        text_disabled_wrapped("No block is held at this step.");
    } else if (ImGui::BeginTable("##trees", 5, table_flags, ImVec2(0, trees_h))) {
        ImGui::TableSetupScrollFreeze(0, 1);
        ImGui::TableSetupColumn("root");
        ImGui::TableSetupColumn("depth");
        ImGui::TableSetupColumn("blocks");
        ImGui::TableSetupColumn("chains");
        ImGui::TableSetupColumn("ranks");
        ImGui::TableHeadersRow();
        ImGuiListClipper clipper;
        clipper.Begin(static_cast<int>(x.trees.size()));
        while (clipper.Step())
            for (int i = clipper.DisplayStart; i < clipper.DisplayEnd; ++i) {
                const PrefixTree& t = x.trees[static_cast<size_t>(i)];
                ImGui::TableNextRow();
                ImGui::TableNextColumn();
                ImGui::PushID(i);
                if (ImGui::Selectable(hash_hex(x.nodes[static_cast<size_t>(t.root)].hash).c_str(),
                                      ctx.view.selected_tree == i,
                                      ImGuiSelectableFlags_SpanAllColumns))
                    ctx.view.selected_tree = ctx.view.selected_tree == i ? -1 : i;
                ImGui::PopID();
                ImGui::TableNextColumn();
                ImGui::Text("%d", t.depth);
                ImGui::TableNextColumn();
                ImGui::Text("%d", t.blocks);
                ImGui::TableNextColumn();
                ImGui::Text("%d", t.chains);
                ImGui::TableNextColumn();
                ImGui::TextUnformatted(ranks_text(t.publishers).c_str());
            }
        ImGui::EndTable();
    }
    if (ctx.view.selected_tree >= 0) {
        const PrefixTree& t = x.trees[static_cast<size_t>(ctx.view.selected_tree)];
        ImGui::Text("Tree %d: %d blocks deep, %d chains", ctx.view.selected_tree + 1, t.depth,
                    t.chains);
        ImGui::BeginChild("##tree", ImVec2(0, 0), false, ImGuiWindowFlags_HorizontalScrollbar);
        draw_chain(x, info, t.root, 0);
        ImGui::EndChild();
    }
    ImGui::End();
}

}  // namespace kvscope::ui
