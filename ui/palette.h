#pragma once
// Colours: request owners from a colour-blind-safe qualitative palette (Okabe-Ito, then Paul
// Tol's muted set), and a perceptual ramp for heatmaps. Colours are ImGui's packed ABGR.

#include <cstdint>

namespace kvscope::ui {

enum class PaletteKind { kOkabeIto = 0, kTolMuted = 1 };

uint32_t owner_color(int request, PaletteKind palette);
// Blends a colour towards the background by `fill` in [0, 1] (1 = full colour).
uint32_t shade(uint32_t color, float fill);
// Where an attached deployment keeps a block (KvMedium as an int, GPU = 0): Okabe-Ito colours,
// grey for media neither engine documents.
uint32_t medium_color(int medium);
// Viridis-like ramp for t in [0, 1].
uint32_t heat_color(float t);

constexpr uint32_t kFreeColor = 0xff2a2a2a;
constexpr uint32_t kCachedColor = 0xff5a5a5a;
constexpr uint32_t kHoleColor = 0xff101010;

}  // namespace kvscope::ui
