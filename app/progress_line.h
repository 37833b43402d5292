#pragma once
// One status line on stderr that updates in place while a long command works ("step 120,
// 3 456 tokens, 1 234 tokens/s, 45 of 400 requests done, about 0:12 left"), so a run is never
// silent for its whole length. Only when stderr is a terminal: logs and pipes get no escape
// codes and no partial lines.

#include <chrono>
#include <string>

namespace kvscope::app {

class ProgressLine {
  public:
    ProgressLine();  // enabled when stderr is a terminal
    explicit ProgressLine(bool enabled) : enabled_(enabled) {}
    ~ProgressLine() { clear(); }
    ProgressLine(const ProgressLine&) = delete;
    ProgressLine& operator=(const ProgressLine&) = delete;

    // Whether show() draws at all (stderr is a terminal): off one, a long command logs whole
    // lines of progress now and then instead.
    bool on_terminal() const { return enabled_; }
    // Whether show() would draw now (at most ten times a second): callers skip building text.
    bool due() const;
    void show(const std::string& text);
    // Removes the line, so what is printed next starts on a clean line.
    void clear();
    double elapsed_seconds() const;

  private:
    bool enabled_ = false;
    bool shown_ = false;
    std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now(), last_{};
};

// "0:12", "3:04", "1:02:03".
std::string format_duration(double seconds);

}  // namespace kvscope::app
