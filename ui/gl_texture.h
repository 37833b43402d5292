#pragma once
// An RGBA texture rebuilt from a CPU buffer when its contents change: one draw call shows a
// whole block map or heatmap, however many cells it has.

#include <cstdint>
#include <vector>

namespace kvscope::ui {

class Texture {
  public:
    Texture() = default;
    ~Texture();
    Texture(const Texture&) = delete;
    Texture& operator=(const Texture&) = delete;

    // pixels: width * height packed ABGR (ImGui colour order), row-major from the top.
    void upload(int width, int height, const std::vector<uint32_t>& pixels);
    void* imgui_id() const { return reinterpret_cast<void*>(static_cast<uintptr_t>(id_)); }
    int width() const { return width_; }
    int height() const { return height_; }

  private:
    unsigned id_ = 0;
    int width_ = 0, height_ = 0;
};

}  // namespace kvscope::ui
