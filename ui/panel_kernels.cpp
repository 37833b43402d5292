// Kernels: the selected step's ops on a time axis, as a profiler draws them. One lane per
// thread or stream (the CPU backend's ops fork and join over its pool, so one host lane whose
// label says how many threads each op ran on): a row of layers above the row of ops, then a row
// per GPU stream when a GPU's kernels were traced, and the GPU's sampled DRAM bandwidth. Wheel to
// zoom at the mouse, drag to pan, double-click for the whole step; hover an op for its time,
// bytes, bandwidth and share of the machine's limit. Under it, the step's bytes split and the
// roofline per op kind (time, bytes, arithmetic intensity, GB/s, GFLOP/s).
#include <imgui.h>
#include <imgui_internal.h>  // ImRect

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "ui/step_bytes.h"
#include "ui/ui_context.h"

namespace kvscope::ui {

namespace {
// Op colours by what the op is: projections (weights-bound) in blues and greens, attention and
// the KV write in the KV colours, norms and elementwise ops in greys and purples, host work in
// pink.
uint32_t op_color(const std::string& name) {
    static const std::map<std::string, uint32_t> kColors = {
        {"qkv", 0xffd08a3a},       {"attn_out", 0xffb27200}, {"ffn_gate_up", 0xff73b400},
        {"ffn_down", 0xff4f9e2f},  {"lm_head", 0xffe0b056},  {"attention", 0xff009fe6},
        {"kv_write", 0xff005ed5},  {"rope", 0xffa779cc},     {"swiglu", 0xffc090b0},
        {"attn_norm", 0xff8a8a8a}, {"ffn_norm", 0xff8a8a8a}, {"output_norm", 0xff8a8a8a},
        {"embed", 0xff707070},     {"schedule", 0xffa779cc}, {"sample", 0xffcc79a7},
        {"evict", 0xff6060c0}};
    // A GPU kernel ("op|kernel") takes its op's colour.
    const GpuKernelText gpu = split_gpu_kernel_text(name);
    auto it = kColors.find(gpu.op.empty() ? name : std::string(gpu.op));
    return it != kColors.end() ? it->second : 0xff5ab4e6;
}

std::string duration_text(int64_t ns) {
    char buf[32];
    if (ns >= 1000000)
        std::snprintf(buf, sizeof buf, "%.2f ms", static_cast<double>(ns) / 1e6);
    else if (ns >= 1000)
        std::snprintf(buf, sizeof buf, "%.1f us", static_cast<double>(ns) / 1e3);
    else
        std::snprintf(buf, sizeof buf, "%lld ns", static_cast<long long>(ns));
    return buf;
}

void op_tooltip(const OpRecord& op, double limit) {
    ImGui::BeginTooltip();
    ImGui::Text("%s%s", op.name.c_str(),
                op.layer >= 0 ? (", layer " + std::to_string(op.layer)).c_str() : "");
    if (op.lane != 0) {
        ImGui::Text("%s on GPU stream %d, %d threads launched",
                    duration_text(op.end_ns - op.start_ns).c_str(), op.lane, op.threads);
        ImGui::EndTooltip();
        return;
    }
    ImGui::Text("%s on %d thread%s", duration_text(op.end_ns - op.start_ns).c_str(), op.threads,
                op.threads == 1 ? "" : "s");
    if (op.cost_known) {
        const KernelCost& c = op.cost;
        ImGui::Text("%s: weights %s, KV read %s, KV written %s, activations %s",
                    byte_size_text(static_cast<double>(c.bytes())).c_str(),
                    byte_size_text(static_cast<double>(c.weight_bytes)).c_str(),
                    byte_size_text(static_cast<double>(c.kv_read_bytes)).c_str(),
                    byte_size_text(static_cast<double>(c.kv_written_bytes)).c_str(),
                    byte_size_text(static_cast<double>(c.activation_bytes)).c_str());
        if (limit > 0)
            ImGui::Text("%.1f GB/s, %.0f%% of the machine's %.1f GB/s", op.gbps(),
                        100 * op.gbps() / limit, limit);
        else
            ImGui::Text("%.1f GB/s", op.gbps());
        if (c.flops > 0)
            ImGui::Text("%.2f GFLOP/s, %.2f flops per byte",
                        op.seconds() > 0 ? static_cast<double>(c.flops) / op.seconds() / 1e9 : 0.0,
                        c.bytes() > 0
                            ? static_cast<double>(c.flops) / static_cast<double>(c.bytes())
                            : 0.0);
    } else {
        ImGui::TextDisabled("bytes unknown (the event carries no cost)");
    }
    ImGui::EndTooltip();
}
// Op kinds on a log-log roofline: arithmetic intensity (flops per byte moved) across, achieved
// GFLOP/s up; the diagonal is the memory roof (the machine's bandwidth times intensity). An op
// on the diagonal is bound by memory; one far below it by something else (latency, its own
// arithmetic, threads meeting). The compute roof is not drawn: kvscope does not measure it.
// Returns how many kinds were placed.
int draw_roofline(const std::vector<OpKindTotals>& kinds, double limit) {
    const ImVec2 avail = ImGui::GetContentRegionAvail();
    const float line = ImGui::GetTextLineHeight();
    if (avail.y < line * 4 || avail.x < 100) return 0;
    double x_lo = 1e30, x_hi = 0, y_lo = 1e30, y_hi = 0;
    for (const OpKindTotals& k : kinds)
        if (k.intensity() > 0 && k.gflops() > 0) {
            x_lo = std::min(x_lo, k.intensity());
            x_hi = std::max(x_hi, k.intensity());
            y_lo = std::min(y_lo, k.gflops());
            y_hi = std::max(y_hi, k.gflops());
        }
    if (x_hi <= 0) {
        ImGui::TextDisabled("No op of this step both computes and moves bytes.");
        return 0;
    }
    // Whole decades around the points, the roof kept in view where it crosses them.
    const double lx0 = std::floor(std::log10(x_lo)), lx1 = std::ceil(std::log10(x_hi) + 0.3);
    if (limit > 0) y_hi = std::max(y_hi, limit * x_lo);
    const double ly0 = std::floor(std::log10(y_lo)), ly1 = std::ceil(std::log10(y_hi) + 0.1);
    ImDrawList* dl = ImGui::GetWindowDrawList();
    const ImVec2 o = ImGui::GetCursorScreenPos();
    const float left = 48.0f * ImGui::GetIO().FontGlobalScale, bottom = line + 4;
    const ImVec2 p0(o.x + left, o.y + 2), p1(o.x + avail.x - 4, o.y + avail.y - bottom);
    ImGui::InvisibleButton("##roofline", avail);
    dl->AddRectFilled(p0, p1, 0xff1c1c1c);
    auto X = [&](double x) {
        return p0.x + static_cast<float>((std::log10(x) - lx0) / (lx1 - lx0)) * (p1.x - p0.x);
    };
    auto Y = [&](double y) {
        return p1.y - static_cast<float>((std::log10(y) - ly0) / (ly1 - ly0)) * (p1.y - p0.y);
    };
    char buf[32];
    for (double d = lx0; d <= lx1; ++d) {
        const float x = X(std::pow(10.0, d));
        dl->AddLine(ImVec2(x, p0.y), ImVec2(x, p1.y), 0xff333333);
        std::snprintf(buf, sizeof buf, "%g", std::pow(10.0, d));
        dl->AddText(ImVec2(x - ImGui::CalcTextSize(buf).x * 0.5f, p1.y + 2), 0xff909090, buf);
    }
    for (double d = ly0; d <= ly1; ++d) {
        const float y = Y(std::pow(10.0, d));
        dl->AddLine(ImVec2(p0.x, y), ImVec2(p1.x, y), 0xff333333);
        std::snprintf(buf, sizeof buf, "%g", std::pow(10.0, d));
        dl->AddText(ImVec2(o.x, y - line * 0.5f), 0xff909090, buf);
    }
    dl->AddText(ImVec2(p0.x + 4, p0.y + 2), 0xff909090, "GFLOP/s");
    const char* across = "flops per byte";
    dl->AddText(ImVec2(p1.x - ImGui::CalcTextSize(across).x - 4, p1.y - line - 2), 0xff909090,
                across);
    dl->PushClipRect(p0, p1, true);
    if (limit > 0) {  // GFLOP/s = GB/s x flops/byte, a straight line on log-log axes
        const double xa = std::pow(10.0, lx0), xb = std::pow(10.0, lx1);
        dl->AddLine(ImVec2(X(xa), Y(limit * xa)), ImVec2(X(xb), Y(limit * xb)), 0xff4040ff, 1.5f);
    }
    int placed = 0;
    const OpKindTotals* under = nullptr;
    const ImVec2 mouse = ImGui::GetMousePos();
    const bool hovered = ImGui::IsItemHovered();
    std::vector<ImRect> labels;  // where names went: one that would overlap moves or is left out
    for (const OpKindTotals& k : kinds) {
        if (k.intensity() <= 0 || k.gflops() <= 0) continue;
        const ImVec2 c(X(k.intensity()), Y(k.gflops()));
        dl->AddCircleFilled(c, 4.0f * ImGui::GetIO().FontGlobalScale, op_color(k.name));
        const ImVec2 ts = ImGui::CalcTextSize(k.name.c_str());
        for (float dy : {-0.5f, 0.5f, -1.5f, 1.5f}) {
            ImRect r(ImVec2(c.x + 6, c.y + dy * line),
                     ImVec2(c.x + 6 + ts.x, c.y + dy * line + ts.y));
            if (std::any_of(labels.begin(), labels.end(),
                            [&](const ImRect& o) { return o.Overlaps(r); }))
                continue;
            labels.push_back(r);
            dl->AddText(r.Min, op_color(k.name), k.name.c_str());
            break;
        }
        if (hovered && std::abs(mouse.x - c.x) < 6 && std::abs(mouse.y - c.y) < 6) under = &k;
        ++placed;
    }
    dl->PopClipRect();
    if (under) {
        ImGui::BeginTooltip();
        ImGui::Text("%s: %.2f flops per byte, %.2f GFLOP/s, %.1f GB/s", under->name.c_str(),
                    under->intensity(), under->gflops(), under->gbps());
        if (limit > 0)
            ImGui::Text("memory roof at this intensity: %.2f GFLOP/s (%.0f%% of it)",
                        limit * under->intensity(), 100 * under->gbps() / limit);
        ImGui::EndTooltip();
    }
    return placed;
}
}  // namespace

void draw_kernels_panel(UiContext& ctx) {
    ImGui::Begin("Kernels");
    ctx.drawn_kernels = {};
    if (!ctx.session || ctx.before_first_step()) {
        ImGui::TextDisabled("The ops of a step appear here once it has run.");
        ImGui::End();
        return;
    }
    ViewState& v = ctx.view;
    const UiContext::StepWork& work = ctx.step_work();
    const std::vector<OpRecord>&ops = work.host, &gpu = work.gpu;
    const std::vector<HbmSampleRecord>& hbm = work.hbm;
    const StepSummary* sum = ctx.step_summary();
    const double limit = ctx.session->info().bandwidth_limit_gbps();
    if (ops.empty() && gpu.empty() && hbm.empty()) {
        text_disabled_wrapped("Step " + std::to_string(v.cursor) +
                              ": no ops recorded (an idle step, or a recording made before "
                              "kvscope recorded op spans).");
        ImGui::End();
        return;
    }
    if (sum) draw_step_bytes(*sum, limit);

    // Time axis over the step's ops, zoomed and panned.
    int64_t t0 = INT64_MAX, t1 = INT64_MIN;
    for (const auto* lane_ops : {&ops, &gpu})
        for (const OpRecord& op : *lane_ops)
            t0 = std::min(t0, op.start_ns), t1 = std::max(t1, op.end_ns);
    for (const HbmSampleRecord& h : hbm)
        t0 = std::min(t0, h.start_ns), t1 = std::max(t1, h.end_ns);
    int32_t threads = 0;
    for (const OpRecord& op : ops)
        threads = std::max(threads, op.threads);
    std::vector<int32_t> streams;  // the GPU lanes, in order
    for (const OpRecord& op : gpu)
        if (std::find(streams.begin(), streams.end(), op.lane) == streams.end())
            streams.push_back(op.lane);
    std::sort(streams.begin(), streams.end());
    double peak_gbps = 0;
    for (const HbmSampleRecord& h : hbm)
        peak_gbps = std::max(peak_gbps, h.gbps());
    const double span = static_cast<double>(std::max<int64_t>(t1 - t0, 1));
    v.kern_zoom = std::clamp(v.kern_zoom, 1.0f, 10000.0f);
    v.kern_pan = std::clamp(v.kern_pan, 0.0f, 1.0f - 1.0f / v.kern_zoom);
    const double view_ns = span / v.kern_zoom,
                 view_t0 = static_cast<double>(t0) + v.kern_pan * span;

    const float fs = v.font_scale, line = ImGui::GetTextLineHeight();
    const float label_w = 110.0f * fs;
    const float row_h = line + 6 * fs;
    ImVec2 origin = ImGui::GetCursorScreenPos();
    const float w = std::max(60.0f, ImGui::GetContentRegionAvail().x - label_w);
    const float bandwidth_h = hbm.empty() ? 0.0f : 2 * row_h;
    const float axis_h = line + 4 * fs,
                h = axis_h + static_cast<float>(2 + streams.size()) * row_h + bandwidth_h + 2;
    ImDrawList* dl = ImGui::GetWindowDrawList();
    const ImVec2 c0(origin.x + label_w, origin.y), c1(c0.x + w, c0.y + h);
    ImGui::InvisibleButton("##kernels", ImVec2(label_w + w, h));
    const bool hovered = ImGui::IsItemHovered();
    const ImVec2 mouse = ImGui::GetMousePos();
    if (hovered && mouse.x >= c0.x) {
        const float wheel = ImGui::GetIO().MouseWheel;
        if (wheel != 0) {  // zoom around the time under the mouse
            const double at = view_t0 + (mouse.x - c0.x) / w * view_ns;
            v.kern_zoom = std::clamp(v.kern_zoom * (wheel > 0 ? 1.25f : 0.8f), 1.0f, 10000.0f);
            const double new_view = span / v.kern_zoom;
            v.kern_pan = static_cast<float>((at - (mouse.x - c0.x) / w * new_view - t0) / span);
        }
        if (ImGui::IsMouseDoubleClicked(ImGuiMouseButton_Left)) v.kern_zoom = 1, v.kern_pan = 0;
    }
    if (ImGui::IsItemActive() && ImGui::IsMouseDragging(ImGuiMouseButton_Left))
        v.kern_pan -= ImGui::GetIO().MouseDelta.x / w / v.kern_zoom;
    auto x_of = [&](int64_t t) {
        return c0.x + static_cast<float>((static_cast<double>(t) - view_t0) / view_ns) * w;
    };

    dl->AddRectFilled(c0, c1, 0xff1c1c1c);
    dl->PushClipRect(c0, c1, true);
    // Ticks at a round step of time, about every 90 pixels.
    const double want = view_ns * 90.0 * fs / w;
    double tick = 1;
    while (tick * 10 <= want)
        tick *= 10;
    if (tick * 5 <= want)
        tick *= 5;
    else if (tick * 2 <= want)
        tick *= 2;
    for (double t = std::ceil((view_t0 - static_cast<double>(t0)) / tick) * tick;
         t <= view_t0 - static_cast<double>(t0) + view_ns; t += tick) {
        const float x = x_of(t0 + static_cast<int64_t>(t));
        dl->AddLine(ImVec2(x, c0.y), ImVec2(x, c1.y), 0xff333333);
        // Ticks are round numbers: no decimals ("100 us", "1.5 ms").
        char tick_label[32];
        if (t >= 1e6)
            std::snprintf(tick_label, sizeof tick_label, "%g ms", t / 1e6);
        else if (t >= 1e3)
            std::snprintf(tick_label, sizeof tick_label, "%g us", t / 1e3);
        else
            std::snprintf(tick_label, sizeof tick_label, "%g ns", t);
        dl->AddText(ImVec2(x + 2, c0.y), 0xff909090, tick_label);
    }
    const float layer_y = c0.y + axis_h, op_y = layer_y + row_h;
    auto box = [&](float x0, float x1, float y, uint32_t color, const std::string& label,
                   const std::string& short_label = "") {
        x1 = std::max(x1, x0 + 1.0f);
        dl->AddRectFilled(ImVec2(x0, y + 1), ImVec2(x1, y + row_h - 1), color);
        if (x1 - x0 > 6) dl->AddRect(ImVec2(x0, y + 1), ImVec2(x1, y + row_h - 1), 0x60000000);
        // A label only where it fits (else the short one): a clipped word reads as another op.
        for (const std::string* text : {&label, &short_label}) {
            const ImVec2 ts = ImGui::CalcTextSize(text->c_str());
            if (text->empty() || ts.x + 4 > x1 - x0) continue;
            const float lx = std::max(x0 + 2, std::min(c0.x + 2, x1 - ts.x - 2));
            dl->AddText(ImVec2(lx, y + (row_h - ts.y) * 0.5f), 0xff000000, text->c_str());
            break;
        }
    };
    for (const auto& [layer, s] : layer_spans(ops.empty() ? gpu : ops))
        box(x_of(s.first), x_of(s.second), layer_y, (layer % 2) ? 0xff5a5a5a : 0xff6e6e6e,
            "layer " + std::to_string(layer), std::to_string(layer));
    // Whether the mouse is over [x0, x1) x [y, y + height) (a box is at least a pixel wide).
    auto pointed_at = [&](float x0, float x1, float y, float height) {
        return hovered && mouse.y >= y && mouse.y < y + height && mouse.x >= x0 &&
               mouse.x < std::max(x1, x0 + 1);
    };
    const OpRecord* under = nullptr;
    const OpRecord* widest = nullptr;
    for (const OpRecord& op : ops) {
        const float x0 = x_of(op.start_ns), x1 = x_of(op.end_ns);
        box(x0, x1, op_y, op_color(op.name), op.name);
        if (!widest || op.end_ns - op.start_ns > widest->end_ns - widest->start_ns) widest = &op;
        if (pointed_at(x0, x1, op_y, row_h)) under = &op;
    }
    // A row per GPU stream: the kernels it ran, coloured by the op that launched them.
    for (size_t i = 0; i < streams.size(); ++i) {
        const float y = op_y + static_cast<float>(i + 1) * row_h;
        for (const OpRecord& op : gpu) {
            if (op.lane != streams[i]) continue;
            const float x0 = x_of(op.start_ns), x1 = x_of(op.end_ns);
            const GpuKernelText name = split_gpu_kernel_text(op.name);
            box(x0, x1, y, op_color(op.name), std::string(name.kernel), std::string(name.op));
            if (pointed_at(x0, x1, y, row_h)) under = &op;
        }
    }
    // The GPU's DRAM bandwidth as its samples measured it: one bar per sample, scaled to the
    // step's highest.
    const float bw_y = op_y + static_cast<float>(1 + streams.size()) * row_h;
    const HbmSampleRecord* under_sample = nullptr;
    for (const HbmSampleRecord& hs : hbm) {
        const float x0 = x_of(hs.start_ns), x1 = std::max(x_of(hs.end_ns), x0 + 1.0f);
        const float frac = peak_gbps > 0 ? static_cast<float>(hs.gbps() / peak_gbps) : 0.0f;
        dl->AddRectFilled(ImVec2(x0, bw_y + bandwidth_h * (1 - frac)),
                          ImVec2(x1, bw_y + bandwidth_h), 0xff3fb0e0);
        if (pointed_at(x0, x1, bw_y, bandwidth_h)) under_sample = &hs;
    }
    dl->PopClipRect();
    dl->AddText(ImVec2(origin.x, layer_y + (row_h - line) * 0.5f), 0xffd0d0d0, "host lane");
    char lane[48];
    std::snprintf(lane, sizeof lane, "%d thread%s", threads, threads == 1 ? "" : "s");
    dl->AddText(ImVec2(origin.x, op_y + (row_h - line) * 0.5f), 0xff909090, lane);
    for (size_t i = 0; i < streams.size(); ++i) {
        std::snprintf(lane, sizeof lane, "GPU stream %d", streams[i]);
        dl->AddText(
            ImVec2(origin.x, op_y + static_cast<float>(i + 1) * row_h + (row_h - line) * 0.5f),
            0xff909090, lane);
    }
    if (!hbm.empty()) {
        std::snprintf(lane, sizeof lane, "DRAM %.0f GB/s", peak_gbps);
        dl->AddText(ImVec2(origin.x, bw_y + (bandwidth_h - line) * 0.5f), 0xff909090, lane);
    }
    if (under) op_tooltip(*under, limit);
    if (under_sample) {
        ImGui::BeginTooltip();
        ImGui::Text("DRAM %.1f GB/s over %s (sampled)", under_sample->gbps(),
                    duration_text(under_sample->end_ns - under_sample->start_ns).c_str());
        ImGui::Text("read %s, written %s",
                    byte_size_text(static_cast<double>(under_sample->read)).c_str(),
                    byte_size_text(static_cast<double>(under_sample->written)).c_str());
        ImGui::EndTooltip();
    }

    auto& g = ctx.drawn_kernels;
    g.step = v.cursor;
    g.ops = static_cast<int>(ops.size());
    g.gpu_kernels = static_cast<int>(gpu.size());
    g.gpu_streams = static_cast<int>(streams.size());
    g.hbm_samples = static_cast<int>(hbm.size());
    g.hbm_peak_gbps = peak_gbps;
    g.x = c0.x, g.y = c0.y, g.w = w, g.h = h;
    if (widest) {
        g.widest = widest->name;
        g.widest_x0 = std::max(c0.x, x_of(widest->start_ns));
        g.widest_x1 = std::min(c1.x, x_of(widest->end_ns));
        g.widest_y0 = op_y + 1;
        g.widest_y1 = op_y + row_h - 1;
        g.widest_color = op_color(widest->name);
    }

    // The roofline per op kind, slowest first: as a table, or on a chart.
    if (ImGui::RadioButton("table", !v.kern_roofline)) v.kern_roofline = false;
    ImGui::SameLine();
    if (ImGui::RadioButton("roofline", v.kern_roofline)) v.kern_roofline = true;
    std::vector<OpKindTotals> kinds = totals_by_kind(ops);
    if (v.kern_roofline) {
        g.roofline_points = draw_roofline(kinds, limit);
        ImGui::End();
        return;
    }
    std::sort(kinds.begin(), kinds.end(),
              [](const OpKindTotals& a, const OpKindTotals& b) { return a.ns > b.ns; });
    const double step_ns = sum ? sum->step_seconds * 1e9 : 0.0;
    int64_t ops_ns = 0;
    for (const OpKindTotals& k : kinds)
        ops_ns += k.ns;
    ImVec2 avail = ImGui::GetContentRegionAvail();
    const ImGuiTableFlags flags = ImGuiTableFlags_ScrollY | ImGuiTableFlags_RowBg |
                                  ImGuiTableFlags_BordersInnerV | ImGuiTableFlags_SizingStretchProp;
    if (avail.y > line * 2 && ImGui::BeginTable("##roofline", 8, flags, ImVec2(0, avail.y))) {
        ImGui::TableSetupScrollFreeze(0, 1);
        for (const char* c : {"op", "n", "time", "% step", "bytes", "GB/s", "% limit", "flop/B"})
            ImGui::TableSetupColumn(c);
        ImGui::TableHeadersRow();
        auto row = [&](const std::string& name, int n, int64_t ns, double bytes, double gbps,
                       double intensity, uint32_t color) {
            ImGui::TableNextRow();
            ImGui::TableNextColumn();
            ImGui::TextColored(ImGui::ColorConvertU32ToFloat4(color), "%s", name.c_str());
            ImGui::TableNextColumn();
            if (n > 0) ImGui::Text("%d", n);
            ImGui::TableNextColumn();
            ImGui::TextUnformatted(duration_text(ns).c_str());
            ImGui::TableNextColumn();
            if (step_ns > 0) ImGui::Text("%.1f", 100.0 * static_cast<double>(ns) / step_ns);
            ImGui::TableNextColumn();
            if (bytes > 0) ImGui::TextUnformatted(byte_size_text(bytes).c_str());
            ImGui::TableNextColumn();
            if (bytes > 0) ImGui::Text("%.1f", gbps);
            ImGui::TableNextColumn();
            if (bytes > 0 && limit > 0) ImGui::Text("%.0f", 100 * gbps / limit);
            ImGui::TableNextColumn();
            if (intensity > 0) ImGui::Text("%.2f", intensity);
        };
        for (const OpKindTotals& k : kinds)
            row(k.name, k.count, k.ns, static_cast<double>(k.cost.bytes()), k.gbps(), k.intensity(),
                op_color(k.name));
        // What no op covers: event reporting and bookkeeping between the ops.
        if (step_ns > static_cast<double>(ops_ns))
            row("other", 0, static_cast<int64_t>(step_ns) - ops_ns, 0, 0, 0, 0xff909090);
        ImGui::EndTable();
    }
    ImGui::End();
}

}  // namespace kvscope::ui
