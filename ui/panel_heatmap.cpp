// Attention heatmap: query position (rows) x key position (columns) for one request, layer and
// head. The image is built at screen resolution for the visible region (each pixel the max of
// the cells it covers, sampled), so zoomed-out views of long sequences stay cheap; it is rebuilt
// only when the data or the view changes. An evicted key is grey in the rows computed after it
// went (earlier rows show the attention it had), and a strip above the map says what the policy
// kept and dropped at the cursor's step; rows the prefix cache supplied were never computed and
// stay empty.
#include <imgui.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>

#include "ui/gl_texture.h"
#include "ui/heat_scale.h"
#include "ui/ui_context.h"

namespace kvscope::ui {

namespace {
// The ramp under the map, and what its ends and middle stand for on the scale shown.
void draw_legend(HeatScale scale, float width) {
    const float h = ImGui::GetTextLineHeight();
    const ImVec2 at = ImGui::GetCursorScreenPos();
    ImDrawList* dl = ImGui::GetWindowDrawList();
    constexpr int kSteps = 64;
    for (int i = 0; i < kSteps; ++i)
        dl->AddRectFilled(ImVec2(at.x + width * static_cast<float>(i) / kSteps, at.y),
                          ImVec2(at.x + width * static_cast<float>(i + 1) / kSteps, at.y + h),
                          heat_color((static_cast<float>(i) + 0.5f) / kSteps));
    ImGui::Dummy(ImVec2(width, h));
    ImGui::SameLine();
    char text[96];
    if (scale == HeatScale::kRow)
        std::snprintf(text, sizeof text, "per row: 0 .. half .. the row's largest");
    else
        std::snprintf(text, sizeof text, "%s: 0 .. %.3g .. 1", heat_scale_name(scale),
                      static_cast<double>(heat_probability(0.5f, scale)));
    ImGui::TextDisabled("%s", text);
}
}  // namespace

void draw_heatmap_panel(UiContext& ctx, Side side) {
    // One picture per side of a comparison.
    const bool main = side == Side::kMain;
    static Texture textures[2];
    static std::vector<uint32_t> pixel_sets[2];
    static std::string built[2];
    Texture& texture = textures[main ? 0 : 1];
    std::vector<uint32_t>& pixels = pixel_sets[main ? 0 : 1];
    std::string& built_for = built[main ? 0 : 1];
    ImGui::Begin(main ? "Attention" : "Attention (right)");
    const TimelineState* s = ctx.state_of(side);
    const int64_t cursor = ctx.cursor_of(side);
    if (!s || s->info.n_layers == 0) {
        text_disabled_wrapped("No attention captured (run with --capture-attention).");
        ImGui::End();
        return;
    }
    ViewState& v = ctx.view;
    if (main && v.heat_request < 0 && v.selected_request >= 0) v.heat_request = v.selected_request;
    if (main && v.heat_request < 0 && !s->requests.empty())
        v.heat_request = s->requests.begin()->first;
    // The right-hand run shows what the left picks: the same request (by name), layer and head.
    const int32_t request = ctx.request_in(side, v.heat_request);
    auto it = s->requests.find(request);
    // Labels before their widgets ("layer [4]", not "[4] layer"); each label and its picker
    // flow onto the next line when the panel is narrow (1280x720).
    const float picker = 90 * v.font_scale;
    auto label = [&](const char* text, float widget_w, bool first = false) {
        if (!first)
            same_line_if_fits(ImGui::CalcTextSize(text).x + ImGui::GetStyle().ItemSpacing.x +
                              widget_w);
        ImGui::AlignTextToFramePadding();
        ImGui::TextUnformatted(text);
        ImGui::SameLine();
    };
    if (!main) {
        text_disabled_wrapped("request " +
                              (it != s->requests.end() ? it->second.name.str() : std::string("-")) +
                              ", layer " + std::to_string(v.heat_layer) + ", head " +
                              std::to_string(v.heat_head) + ": as picked on the left");
    } else {
        label("request", 140 * v.font_scale, true);
        ImGui::SetNextItemWidth(140 * v.font_scale);
        if (ImGui::BeginCombo("##request",
                              it != s->requests.end() ? it->second.name.c_str() : "-")) {
            for (const auto& [i, r] : s->requests)
                if (ImGui::Selectable(r.name.c_str(), i == v.heat_request)) v.heat_request = i;
            ImGui::EndCombo();
        }
    }
    const auto& captured = ctx.captured_heads(side);
    auto is_captured = [&](int layer, int head) {
        return std::find(captured.begin(), captured.end(), std::make_pair(layer, head)) !=
               captured.end();
    };
    // Until the user picks, show a head that was captured (a run may capture only layer 4).
    if (main && !v.heat_picked && !captured.empty() && !is_captured(v.heat_layer, v.heat_head)) {
        v.heat_layer = captured.front().first;
        v.heat_head = captured.front().second;
    }
    if (main) {
        label("layer", picker);
        ImGui::SetNextItemWidth(picker);
        v.heat_picked |= ImGui::SliderInt("##layer", &v.heat_layer, 0, s->info.n_layers - 1);
        label("head", picker);
        ImGui::SetNextItemWidth(picker);
        v.heat_picked |= ImGui::SliderInt("##head", &v.heat_head, 0, s->info.n_heads - 1);
        int group = s->info.n_kv_heads > 0 ? s->info.n_heads / s->info.n_kv_heads : 1;
        std::string kv_head = "(KV head " + std::to_string(v.heat_head / std::max(group, 1)) + ")";
        same_line_if_fits(ImGui::CalcTextSize(kv_head.c_str()).x);
        ImGui::TextDisabled("%s", kv_head.c_str());
        label("colour", picker);
        ImGui::SetNextItemWidth(picker);
        if (ImGui::BeginCombo("##scale", heat_scale_name(v.heat_scale))) {
            for (int i = 0; i < kNumHeatScales; ++i)
                if (ImGui::Selectable(heat_scale_name(static_cast<HeatScale>(i)),
                                      static_cast<HeatScale>(i) == v.heat_scale))
                    v.heat_scale = static_cast<HeatScale>(i);
            ImGui::EndCombo();
        }
    }
    if (it == s->requests.end()) {
        ImGui::TextDisabled("No request selected.");
        ImGui::End();
        return;
    }
    const RequestState& req = it->second;
    const auto& rows = ctx.attention_rows(request, v.heat_layer, v.heat_head, side);
    // Rows recorded after the cursor are in the cache too; the heatmap shows the step's view.
    size_t shown = 0;
    int q_max = 0;
    for (const auto& r : rows)
        if (r.step <= cursor) {
            ++shown;
            q_max = std::max(q_max, r.query_pos);
        }
    if (shown == 0) {
        if (!captured.empty() && !is_captured(v.heat_layer, v.heat_head))
            text_disabled_wrapped("Layer " + std::to_string(v.heat_layer) + " head " +
                                  std::to_string(v.heat_head) +
                                  " was not captured; this run "
                                  "captured " +
                                  std::to_string(captured.size()) + " heads (layer " +
                                  std::to_string(captured.front().first) + " head " +
                                  std::to_string(captured.front().second) + " first).");
        else
            text_disabled_wrapped(
                "No attention rows for this request, layer and head up to this step.");
        ImGui::End();
        return;
    }
    const int n = q_max + 1;  // square: keys 0..q_max
    std::vector<const AttentionRow*> by_q(static_cast<size_t>(n), nullptr);
    std::vector<int> captured_q;  // query positions with a row, ascending
    for (const auto& r : rows) {
        if (r.step > cursor) break;  // rows are in step order
        if (!by_q[static_cast<size_t>(r.query_pos)]) captured_q.push_back(r.query_pos);
        by_q[static_cast<size_t>(r.query_pos)] = &r;  // later rows (recompute) win
    }
    std::sort(captured_q.begin(), captured_q.end());
    // Keys evicted from this request (by any policy, for this layer and the KV head this query
    // head reads, or all of them).
    const int kv_group =
        std::max(1, s->info.n_kv_heads > 0 ? s->info.n_heads / s->info.n_kv_heads : 1);
    std::vector<uint8_t> evicted(static_cast<size_t>(n), 0);
    std::vector<const Event*> evicted_by(static_cast<size_t>(n), nullptr);  // for the tooltip
    // The step after which each key was gone: rows computed later never saw it.
    constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
    std::vector<int64_t> evicted_at(static_cast<size_t>(n), kNever);
    const std::vector<Event>& log = ctx.eviction_log(side);
    for (const Event& e : log)
        if (e.kind == EventKind::kTokenEvict && e.request == request && e.step <= cursor &&
            (e.a < 0 || e.a == v.heat_layer) && (e.b < 0 || e.b == v.heat_head / kv_group) &&
            e.c >= 0 && e.c < n) {
            evicted[static_cast<size_t>(e.c)] = 1;
            if (!evicted_by[static_cast<size_t>(e.c)]) evicted_by[static_cast<size_t>(e.c)] = &e;
            evicted_at[static_cast<size_t>(e.c)] =
                std::min(evicted_at[static_cast<size_t>(e.c)], e.step);
        }
    const bool evicting = s->info.eviction_policy != "none";
    // What each key is to the policy at this step, read from its decisions alone (no model of
    // the policy): evicted; kept though a newer key went (kept by score: heavy hitters, or
    // streaming's sinks); or newer than every key evicted so far (the recent tokens).
    int newest_evicted = -1;
    for (int k = 0; k < n; ++k)
        if (evicted[static_cast<size_t>(k)]) newest_evicted = k;
    const int sinks = s->info.eviction_policy == "streaming" ? s->info.eviction_sinks : 0;
    enum class KeyRole { kRecent, kSink, kKeptByScore, kEvicted };
    auto role = [&](int k) {
        if (evicted[static_cast<size_t>(k)]) return KeyRole::kEvicted;
        if (k > newest_evicted) return KeyRole::kRecent;
        return k < sinks ? KeyRole::kSink : KeyRole::kKeptByScore;
    };
    if (evicting)
        text_disabled_wrapped(
            "Top strip, key by key: recent (green), kept by score over newer "
            "keys (blue), sinks (orange), evicted by " +
            s->info.eviction_policy + " (grey).");

    // Rows missing at the top are a question every first look asks: say why.
    if (!captured_q.empty() && captured_q.front() > 0)
        text_disabled_wrapped("Query rows 0-" + std::to_string(captured_q.front() - 1) +
                              " were not computed here (prefix cache hit) or not captured.");
    ImVec2 avail = ImGui::GetContentRegionAvail();
    const float legend_h = ImGui::GetTextLineHeightWithSpacing();
    float square = std::max(
        32.0f, std::min(avail.x, avail.y - 4 - legend_h -
                                     (evicting ? std::max(6.0f, 8.0f * v.font_scale) : 0)));
    // Zoom and pan belong to the left map; the right one follows, clamped to its own keys.
    const float zoom = std::clamp(v.heat_zoom, 1.0f, static_cast<float>(n));
    const float span = static_cast<float>(n) / zoom;
    const float pan_x = std::clamp(v.heat_pan_x, 0.0f, static_cast<float>(n) - span);
    const float pan_y = std::clamp(v.heat_pan_y, 0.0f, static_cast<float>(n) - span);
    if (main) {
        v.heat_zoom = zoom;
        v.heat_pan_x = pan_x;
        v.heat_pan_y = pan_y;
    }
    int res = std::max(1, std::min(static_cast<int>(square), static_cast<int>(std::ceil(span))));
    char key[200];
    // The cursor is part of it: which keys are evicted depends on the step shown.
    std::snprintf(key, sizeof key, "%p/%zu/%d/%d/%g/%g/%g/%d/%zu/%lld/%d",
                  static_cast<const void*>(rows.data()), shown, n, request, zoom, pan_x, pan_y, res,
                  log.size(), static_cast<long long>(cursor), static_cast<int>(v.heat_scale));
    if (built_for != key) {
        built_for = key;
        pixels.assign(static_cast<size_t>(res) * res, 0xff141414);
        float per = span / static_cast<float>(res);
        // Level of detail: a pixel covering many cells shows the largest of them. Keys: the
        // exact maximum over the pixel's key range (a contiguous byte run, so it vectorizes);
        // queries: up to three of the rows captured in the pixel's range (captures may be
        // sparse). Sinks and one-token diagonals stay visible at any zoom; the cost is bounded
        // by the screen times the visible keys.
        std::vector<int> k_lo(static_cast<size_t>(res)), k_hi(static_cast<size_t>(res));
        for (int px = 0; px < res; ++px) {
            float x0 = pan_x + static_cast<float>(px) * per;
            k_lo[static_cast<size_t>(px)] =
                per > 1.0f ? static_cast<int>(std::ceil(x0)) : static_cast<int>(x0 + 0.5f * per);
            k_hi[static_cast<size_t>(px)] = per > 1.0f
                                                ? std::max(k_lo[static_cast<size_t>(px)] + 1,
                                                           static_cast<int>(std::ceil(x0 + per)))
                                                : k_lo[static_cast<size_t>(px)] + 1;
        }
        // A cell is grey when a key it covers was gone before its row was computed: before that
        // the row shows the attention the key really had.
        auto first_gone = [&](int k0, int k1) {
            int64_t m = kNever;
            for (int k = k0; k < k1; ++k)
                m = std::min(m, evicted_at[static_cast<size_t>(k)]);
            return m;
        };
        std::vector<int64_t> column_gone(static_cast<size_t>(res), kNever);
        for (int px = 0; px < res; ++px)
            column_gone[static_cast<size_t>(px)] = first_gone(
                k_lo[static_cast<size_t>(px)], std::min(k_hi[static_cast<size_t>(px)], n));
        // Per row: each row's largest probability, over the keys it saw.
        std::vector<int> row_max(by_q.size(), 0);
        if (v.heat_scale == HeatScale::kRow)
            for (size_t q = 0; q < by_q.size(); ++q)
                if (const AttentionRow* row = by_q[q]) {
                    const auto end =
                        std::min(row->probs.size(), static_cast<size_t>(row->query_pos) + 1);
                    if (end > 0)
                        row_max[q] = *std::max_element(row->probs.begin(),
                                                       row->probs.begin() + static_cast<long>(end));
                }
        std::vector<const AttentionRow*> pixel_rows;
        for (int py = 0; py < res; ++py) {
            float y0 = pan_y + static_cast<float>(py) * per;
            pixel_rows.clear();
            if (per > 1.0f) {
                auto lo = std::lower_bound(captured_q.begin(), captured_q.end(),
                                           static_cast<int>(std::ceil(y0)));
                auto hi =
                    std::lower_bound(lo, captured_q.end(), static_cast<int>(std::ceil(y0 + per)));
                long count = hi - lo;
                for (long a = 0; a < std::min<long>(3, count); ++a)
                    pixel_rows.push_back(
                        by_q[static_cast<size_t>(*(lo + (2 * a + 1) * count / 6))]);
            } else if (static_cast<int>(y0 + 0.5f * per) < n) {
                pixel_rows.push_back(by_q[static_cast<size_t>(y0 + 0.5f * per)]);
            }
            for (int px = 0; px < res; ++px) {
                float best = -1;  // the highest level on the ramp the pixel covers
                bool gone = false;
                for (const AttentionRow* row : pixel_rows) {
                    if (!row) continue;
                    int k0 = k_lo[static_cast<size_t>(px)];
                    int k1 = std::min({k_hi[static_cast<size_t>(px)], row->query_pos + 1,
                                       static_cast<int>(row->probs.size())});
                    if (k0 >= k1) continue;
                    const uint8_t* p = row->probs.data();
                    const int most = *std::max_element(p + k0, p + k1);
                    const size_t q = static_cast<size_t>(row->query_pos);
                    best = std::max(
                        best, heat_level(most, q < row_max.size() ? row_max[q] : 0, v.heat_scale));
                    const int64_t went = k1 == k_hi[static_cast<size_t>(px)]
                                             ? column_gone[static_cast<size_t>(px)]
                                             : first_gone(k0, k1);  // the diagonal
                    gone |= went < row->step;
                }
                if (best >= 0)
                    pixels[static_cast<size_t>(py) * res + px] =
                        gone ? 0xff5a5a5a : heat_color(best);
            }
        }
        texture.upload(res, res, pixels);
    }
    const float px_per_pos = square / span;
    auto& geometry = ctx.drawn_heatmap[main ? 0 : 1];
    geometry = {};
    if (evicting) {
        // What the policy keeps at this step, key by key, in a strip above the map, at any zoom.
        const float strip = std::max(6.0f, 8.0f * v.font_scale);
        ImVec2 at = ImGui::GetCursorScreenPos();
        geometry.strip_y = at.y;
        geometry.strip_h = strip - 1;
        ImGui::Dummy(ImVec2(square, strip));
        ImDrawList* strip_dl = ImGui::GetWindowDrawList();
        for (int k = static_cast<int>(pan_x); k < n && k < pan_x + span + 1; ++k) {
            float x0 = at.x + (static_cast<float>(k) - pan_x) * px_per_pos;
            static constexpr uint32_t kRoleColor[] = {0xff6ac46a, 0xff00a0ff, 0xffe6b45a,
                                                      0xff9a9a9a};
            uint32_t color = kRoleColor[static_cast<int>(role(k))];
            strip_dl->AddRectFilled(
                ImVec2(std::max(x0, at.x), at.y),
                ImVec2(std::min(x0 + std::max(px_per_pos, 1.0f), at.x + square), at.y + strip - 1),
                color);
        }
    }
    ImVec2 origin = ImGui::GetCursorScreenPos();
    geometry.x = origin.x;
    geometry.y = origin.y;
    geometry.side = square;
    geometry.keys = n;
    geometry.pan_x = pan_x;
    geometry.span = span;
    ImGui::InvisibleButton("##heat", ImVec2(square, square));
    ImDrawList* dl = ImGui::GetWindowDrawList();
    dl->AddImage(texture.imgui_id(), origin, ImVec2(origin.x + square, origin.y + square));
    // Block boundaries as grid lines, while they are at least 4 pixels apart.
    int bs = s->info.block_size;
    if (px_per_pos * static_cast<float>(bs) >= 4.0f) {
        for (int k = (static_cast<int>(pan_x) / bs + 1) * bs; k < pan_x + span; k += bs) {
            float x = origin.x + (static_cast<float>(k) - pan_x) * px_per_pos;
            dl->AddLine(ImVec2(x, origin.y), ImVec2(x, origin.y + square), 0x40ffffff);
        }
        for (int q = (static_cast<int>(pan_y) / bs + 1) * bs; q < pan_y + span; q += bs) {
            float y = origin.y + (static_cast<float>(q) - pan_y) * px_per_pos;
            dl->AddLine(ImVec2(origin.x, y), ImVec2(origin.x + square, y), 0x40ffffff);
        }
    }
    int hq = -1, hk = -1;
    if (ImGui::IsItemHovered()) {  // either map says what is under the mouse; the left one zooms
        ImVec2 m = ImGui::GetMousePos();
        hk = static_cast<int>(pan_x + (m.x - origin.x) / px_per_pos);
        hq = static_cast<int>(pan_y + (m.y - origin.y) / px_per_pos);
        float wheel = main ? ImGui::GetIO().MouseWheel : 0.0f;
        if (wheel != 0) {  // zoom about the mouse
            float old_span = span;
            v.heat_zoom *= wheel > 0 ? 1.25f : 0.8f;
            v.heat_zoom = std::clamp(v.heat_zoom, 1.0f, static_cast<float>(n));
            float new_span = static_cast<float>(n) / v.heat_zoom;
            v.heat_pan_x += (static_cast<float>(hk) - v.heat_pan_x) * (1 - new_span / old_span);
            v.heat_pan_y += (static_cast<float>(hq) - v.heat_pan_y) * (1 - new_span / old_span);
        }
        if (main && ImGui::IsMouseDragging(ImGuiMouseButton_Left)) {
            ImVec2 d = ImGui::GetIO().MouseDelta;
            v.heat_pan_x -= d.x / px_per_pos;
            v.heat_pan_y -= d.y / px_per_pos;
        }
    }
    if (main && ctx.scripted.hover_q >= 0) {
        hq = ctx.scripted.hover_q;
        hk = ctx.scripted.hover_k;
    }
    if (main) {
        v.heat_hover_q = hq;
        v.heat_hover_k = hk;
    }
    if (hq >= 0 && hq < n && hk >= 0 && hk <= hq) {
        const AttentionRow* row = by_q[static_cast<size_t>(hq)];
        float p = row && static_cast<size_t>(hk) < row->probs.size()
                      ? static_cast<float>(row->probs[static_cast<size_t>(hk)]) / 255.0f
                      : 0.0f;
        auto text = [&](int pos) {
            return pos < req.num_tokens() ? req.token_text[static_cast<size_t>(pos)].str()
                                          : std::string("?");
        };
        float x = origin.x + (static_cast<float>(hk) - pan_x + 0.5f) * px_per_pos;
        float y = origin.y + (static_cast<float>(hq) - pan_y + 0.5f) * px_per_pos;
        dl->AddCircle(ImVec2(x, y), std::max(3.0f, px_per_pos), 0xffffffff);
        ImGui::BeginTooltip();
        ImGui::Text("query %d \"%s\"  ->  key %d \"%s\"", hq, text(hq).c_str(), hk,
                    text(hk).c_str());
        ImGui::Text("probability %.3f%s", p, row ? "" : " (row not captured)");
        if (const Event* e = evicted_by[static_cast<size_t>(hk)])
            ImGui::Text("key evicted at step %lld by %s (score %.4g)",
                        static_cast<long long>(e->step), e->text.c_str(), e->value);
        else if (evicting)
            ImGui::TextUnformatted(role(hk) == KeyRole::kRecent
                                       ? "key kept: newer than every key evicted so far"
                                   : role(hk) == KeyRole::kSink
                                       ? "key kept: a sink (streaming keeps the first tokens)"
                                       : "key kept by its score while newer keys were evicted");
        ImGui::EndTooltip();
    }
    draw_legend(v.heat_scale, std::min(square, 160.0f * v.font_scale));
    ImGui::End();
}

}  // namespace kvscope::ui
