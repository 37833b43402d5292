#pragma once
// The window's flags (screenshot, script, size...), one "Window" group shared by every command
// that opens the window: gui, replay, compare, bare kvscope and attach --gui.

#include <CLI/CLI.hpp>

#include "ui/app_window.h"

namespace kvscope::app {

// Adds the flags to `sub`, filling `window`. A command that has its own --force already keeps
// it, and copies it into window.force itself.
void add_window_flags(CLI::App& sub, ui::WindowOptions& window);

// Opens the window; Ctrl-C or SIGTERM in the terminal closes it as its close button does (the
// settings and layout are saved, a recording is finished) unless the caller set its own flag.
int open_window(ui::WindowOptions& window);

}  // namespace kvscope::app
