#include "ui/palette.h"

#include <algorithm>
#include <cmath>

namespace kvscope::ui {

namespace {
constexpr uint32_t rgb(uint32_t r, uint32_t g, uint32_t b) {
    return 0xff000000u | (b << 16) | (g << 8) | r;
}
constexpr uint32_t kOkabeIto[] = {rgb(230, 159, 0),  rgb(86, 180, 233), rgb(0, 158, 115),
                                  rgb(240, 228, 66), rgb(0, 114, 178),  rgb(213, 94, 0),
                                  rgb(204, 121, 167)};
constexpr uint32_t kTol[] = {rgb(204, 102, 119), rgb(51, 34, 136),   rgb(221, 204, 119),
                             rgb(17, 119, 51),   rgb(136, 204, 238), rgb(136, 34, 85),
                             rgb(68, 170, 153),  rgb(153, 153, 51),  rgb(170, 68, 153)};
}  // namespace

uint32_t owner_color(int request, PaletteKind palette) {
    if (request < 0) return kFreeColor;
    if (palette == PaletteKind::kTolMuted) return kTol[static_cast<unsigned>(request) % 9];
    return kOkabeIto[static_cast<unsigned>(request) % 7];
}

uint32_t medium_color(int medium) {
    // GPU, CPU, STORAGE, CPU_PINNED, DISK, EXTERNAL, then anything else.
    constexpr uint32_t kMedia[] = {rgb(86, 180, 233), rgb(230, 159, 0), rgb(0, 114, 178),
                                   rgb(240, 228, 66), rgb(0, 158, 115), rgb(204, 121, 167)};
    return medium >= 0 && medium < 6 ? kMedia[medium] : rgb(154, 154, 154);
}

uint32_t shade(uint32_t c, float fill) {
    fill = std::clamp(fill, 0.0f, 1.0f);
    float k = 0.35f + 0.65f * fill;
    auto ch = [&](int shift) {
        return static_cast<uint32_t>(static_cast<float>((c >> shift) & 0xff) * k);
    };
    return 0xff000000u | (ch(16) << 16) | (ch(8) << 8) | ch(0);
}

uint32_t heat_color(float t) {
    // Five viridis stops, linearly interpolated.
    static const float stops[5][3] = {
        {68, 1, 84}, {59, 82, 139}, {33, 145, 140}, {94, 201, 98}, {253, 231, 37}};
    t = std::clamp(t, 0.0f, 1.0f) * 4.0f;
    int i = std::min(3, static_cast<int>(t));
    float f = t - static_cast<float>(i);
    auto mix = [&](int ch) {
        return static_cast<uint32_t>(stops[i][ch] + (stops[i + 1][ch] - stops[i][ch]) * f);
    };
    return rgb(mix(0), mix(1), mix(2));
}

}  // namespace kvscope::ui
