#include "app/progress_line.h"

#include <unistd.h>

#include <cstdio>

namespace kvscope::app {

ProgressLine::ProgressLine() : enabled_(isatty(STDERR_FILENO) == 1) {}

bool ProgressLine::due() const {
    return enabled_ && std::chrono::steady_clock::now() - last_ >= std::chrono::milliseconds(100);
}

void ProgressLine::show(const std::string& text) {
    if (!enabled_) return;
    last_ = std::chrono::steady_clock::now();
    // Carriage return, the text, erase to the end of the line.
    std::fprintf(stderr, "\r%s\033[K", text.c_str());
    std::fflush(stderr);
    shown_ = true;
}

void ProgressLine::clear() {
    if (!shown_) return;
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
    shown_ = false;
}

double ProgressLine::elapsed_seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

std::string format_duration(double seconds) {
    auto s = static_cast<long long>(seconds + 0.5);
    char buf[32];
    if (s >= 3600)
        std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
    else
        std::snprintf(buf, sizeof buf, "%lld:%02lld", s / 60, s % 60);
    return buf;
}

}  // namespace kvscope::app
