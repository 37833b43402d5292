#include "ui/plot.h"

#include <imgui.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>

namespace kvscope::ui {

namespace {
struct Columns {
    const void* data = nullptr;
    size_t size = 0;
    int64_t lo = 0, hi = 0;
    int columns = 0;
    double fixed_max = 0;
    double vmax = 0;
    std::vector<float> mn, mx;
};

// One entry per (track, data series); the UI runs on one thread.
Columns& cached_columns(const char* label, const void* series) {
    static std::map<std::pair<std::string, const void*>, Columns> cache;
    return cache[{label, series}];
}

// A track's points: StepSummary rows (a Track's value of each), or steps with a value each.
struct Summaries {
    const std::vector<StepSummary>& rows;
    const Track& track;
    const void* key() const { return &rows; }
    const void* data() const { return rows.data(); }
    size_t size() const { return rows.size(); }
    int64_t step(size_t i) const { return rows[i].step; }
    double value(size_t i) const { return track.value(rows[i]); }
};
struct Values {
    const std::vector<int64_t>& steps;
    const std::vector<float>& values;
    const void* key() const { return &values; }
    const void* data() const { return values.data(); }
    size_t size() const { return std::min(steps.size(), values.size()); }
    int64_t step(size_t i) const { return steps[i]; }
    double value(size_t i) const { return values[i]; }
};

// Index of the first point with step >= s.
template <class Data>
size_t lower(const Data& d, int64_t s) {
    size_t a = 0, b = d.size();
    while (a < b) {
        size_t m = a + (b - a) / 2;
        if (d.step(m) < s)
            a = m + 1;
        else
            b = m;
    }
    return a;
}

template <class Data>
int64_t plot(const Track& t, const Data& steps, int64_t lo, int64_t hi, int64_t cursor,
             float height, const Data* overlay) {
    const float label_w = 150.0f * ImGui::GetIO().FontGlobalScale;
    ImVec2 origin = ImGui::GetCursorScreenPos();
    float width = std::max(50.0f, ImGui::GetContentRegionAvail().x - label_w);
    ImDrawList* dl = ImGui::GetWindowDrawList();
    size_t at = lower(steps, cursor);
    char value[64] = "-";
    if (at < steps.size() && steps.step(at) == cursor)
        std::snprintf(value, sizeof value, t.format, steps.value(at));
    dl->AddText(origin, 0xffd0d0d0, t.label);
    dl->AddText(ImVec2(origin.x, origin.y + ImGui::GetTextLineHeight()), t.color, value);
    ImVec2 p0(origin.x + label_w, origin.y);
    ImVec2 p1(p0.x + width, p0.y + height);
    dl->AddRectFilled(p0, p1, 0xff1c1c1c);
    ImGui::Dummy(ImVec2(label_w + width, height + 2));
    bool hovered = ImGui::IsItemHovered();
    if (hovered && t.note && ImGui::GetMousePos().x < p0.x) ImGui::SetTooltip("%s", t.note);
    if (hi <= lo) hi = lo + 1;
    auto x_of = [&](int64_t s) {
        return p0.x +
               static_cast<float>(static_cast<double>(s - lo) / static_cast<double>(hi - lo)) *
                   width;
    };
    auto draw = [&](const Data& data, uint32_t color) {
        const int columns = static_cast<int>(width);
        // The per-column min / max only change with the data or the view; scrubbing moves just
        // the cursor, so a 100 000-step track is not walked again every frame.
        Columns& col = cached_columns(t.label, data.key());
        if (col.data != data.data() || col.size != data.size() || col.lo != lo || col.hi != hi ||
            col.columns != columns || col.fixed_max != t.fixed_max) {
            col = Columns{data.data(), data.size(), lo, hi, columns,
                          t.fixed_max, t.fixed_max, {}, {}};
            double& vmax = col.vmax;
            size_t a = lower(data, lo), b = lower(data, hi + 1);
            if (vmax <= 0)
                for (size_t i = a; i < b; ++i)
                    vmax = std::max(vmax, data.value(i));
            if (t.limit > 0) vmax = std::max(vmax, t.limit * 1.05);  // the limit stays in view
            if (vmax <= 0) vmax = 1;
            col.mn.assign(static_cast<size_t>(columns), 1e30f);
            col.mx.assign(static_cast<size_t>(columns), -1e30f);
            for (size_t i = a; i < b; ++i) {
                int c = std::clamp(static_cast<int>(x_of(data.step(i)) - p0.x), 0, columns - 1);
                float v = static_cast<float>(data.value(i) / vmax);
                col.mn[static_cast<size_t>(c)] = std::min(col.mn[static_cast<size_t>(c)], v);
                col.mx[static_cast<size_t>(c)] = std::max(col.mx[static_cast<size_t>(c)], v);
            }
        }
        const double vmax = col.vmax;
        const std::vector<float>&mn = col.mn, &mx = col.mx;
        float prev_x = -1, prev_y = -1;
        for (int c = 0; c < columns; ++c) {
            if (mx[static_cast<size_t>(c)] < -1e29f) continue;
            float y0 = p1.y - mn[static_cast<size_t>(c)] * (height - 2),
                  y1 = p1.y - mx[static_cast<size_t>(c)] * (height - 2);
            float x = p0.x + static_cast<float>(c);
            dl->AddLine(ImVec2(x, y0 + 0.5f), ImVec2(x, y1 - 0.5f), color);
            if (prev_x >= 0) dl->AddLine(ImVec2(prev_x, prev_y), ImVec2(x, y1), color);
            prev_x = x;
            prev_y = y1;
        }
        char top[64];
        std::snprintf(top, sizeof top, t.format, vmax);
        dl->AddText(ImVec2(p1.x - ImGui::CalcTextSize(top).x - 2, p0.y), 0xff808080, top);
    };
    if (overlay) draw(*overlay, 0xff909090);
    draw(steps, t.color);
    if (t.limit > 0) {
        const double vmax = cached_columns(t.label, steps.key()).vmax;
        const float y = p1.y - static_cast<float>(t.limit / vmax) * (height - 2);
        dl->AddLine(ImVec2(p0.x, y), ImVec2(p1.x, y), 0xff4040ff, 1.5f);
    }
    float cx = x_of(cursor);
    dl->AddLine(ImVec2(cx, p0.y), ImVec2(cx, p1.y), 0xffffffff, 1.5f);
    if (hovered) {
        float mx = ImGui::GetMousePos().x;
        if (mx >= p0.x)
            return lo +
                   static_cast<int64_t>(
                       static_cast<double>(mx - p0.x) / width * static_cast<double>(hi - lo) + 0.5);
    }
    return -1;
}
}  // namespace

int64_t plot_track(const Track& t, const std::vector<StepSummary>& steps, int64_t lo, int64_t hi,
                   int64_t cursor, float height, const std::vector<StepSummary>* overlay) {
    Summaries main{steps, t};
    if (!overlay) return plot(t, main, lo, hi, cursor, height, static_cast<Summaries*>(nullptr));
    Summaries other{*overlay, t};
    return plot(t, main, lo, hi, cursor, height, &other);
}

int64_t plot_series(const Track& t, const std::vector<int64_t>& steps,
                    const std::vector<float>& values, int64_t lo, int64_t hi, int64_t cursor,
                    float height) {
    return plot(t, Values{steps, values}, lo, hi, cursor, height, static_cast<Values*>(nullptr));
}

}  // namespace kvscope::ui
