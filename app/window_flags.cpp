#include "app/window_flags.h"

#include "app/commands.h"
#include "app/stop_signal.h"
#include "app/number_flag.h"

namespace kvscope::app {

void add_window_flags(CLI::App& sub, ui::WindowOptions& w) {
    // One group in --help and one row in the README's table of commands.
    sub.option_defaults()->group("Window");
    sub.add_option("--screenshot", w.screenshot_path,
                   "Render, write the whole window to this PNG, exit");
    sub.add_option("--frames", w.frames, "Frames to render before the screenshot")
        ->check(CLI::Range(1, 100000))
        ->capture_default_str();
    sub.add_option("--step", w.step, "Show this step (live: run this many steps first)")
        ->check(CLI::Range(0LL, 1LL << 40));
    sub.add_option("--panel", w.panel,
                   "Panel to bring to the front (Block pool, Requests, Attention, Timeline, ...)");
    sub.add_flag("--crop", w.crop_to_panel,
                 "With --screenshot and --panel: write only that panel (for documentation)");
    sub.add_option("--script", w.script_path,
                   "Drive the window from a script (see ui/app_window.cpp)");
    sub.add_option("--width", w.width, "Window width")
        ->check(CLI::Range(640, 8192))
        ->capture_default_str();
    sub.add_option("--height", w.height, "Window height")
        ->check(CLI::Range(480, 8192))
        ->capture_default_str();
    sub.add_option("--font-scale", w.font_scale, "Font scale (projectors: 1.5 to 2)")
        ->check(finite_number(0.5, 4));
    sub.add_option("--frame-stats", w.frame_stats_path,
                   "At exit, write per-frame times, draw calls and vertices (JSON) here");
    if (!sub.get_option_no_throw("--force")) add_force_flag(sub, w.force);
    sub.option_defaults()->group("Options");
}

int open_window(ui::WindowOptions& window) {
    if (!window.close_requested) window.close_requested = &stop_on_interrupt();
    return ui::run_window(window);
}

}  // namespace kvscope::app
