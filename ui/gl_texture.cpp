#include "ui/gl_texture.h"

#include <GL/gl.h>

namespace kvscope::ui {

Texture::~Texture() {
    if (id_) glDeleteTextures(1, &id_);
}

void Texture::upload(int width, int height, const std::vector<uint32_t>& pixels) {
    if (!id_) glGenTextures(1, &id_);
    glBindTexture(GL_TEXTURE_2D, id_);
    glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MIN_FILTER, GL_NEAREST);
    glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_MAG_FILTER, GL_NEAREST);
    glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_WRAP_S, GL_CLAMP_TO_EDGE);
    glTexParameteri(GL_TEXTURE_2D, GL_TEXTURE_WRAP_T, GL_CLAMP_TO_EDGE);
    glPixelStorei(GL_UNPACK_ALIGNMENT, 4);
    // ABGR in a little-endian uint32 is R,G,B,A in memory.
    glTexImage2D(GL_TEXTURE_2D, 0, GL_RGBA, width, height, 0, GL_RGBA, GL_UNSIGNED_BYTE,
                 pixels.data());
    width_ = width;
    height_ = height;
}

}  // namespace kvscope::ui
