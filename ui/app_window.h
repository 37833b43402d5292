#pragma once
// The kvscope window: GLFW + OpenGL 3.3 + Dear ImGui, the panel layout, keyboard shortcuts,
// file drops, persisted view settings, and the headless-friendly screenshot and script modes
// used by tests and for the README's pictures.

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "ui/controller.h"

namespace kvscope::ui {

struct WindowOptions {
    int width = 1600, height = 900;
    std::string replay_path;           // replay this session (when there is no controller)
    std::string compare_path;          // second session for Compare
    Controller* controller = nullptr;  // live run
    // Set from outside the window (Ctrl-C in the terminal): the window closes as if its close
    // button had been pressed.
    const std::atomic<bool>* close_requested = nullptr;
    // A live run that ends on its own (attach --duration) closes the window when it ends, unless
    // a script drives the window (the script then says when to quit).
    bool close_when_finished = false;
    std::string startup_error;  // shown in the window (a model that failed to load...)
    std::string hint;           // one line shown at start
    // Screenshot mode: render `frames` frames (after `step`, focused on `panel`), write a PNG
    // of the whole window, exit.
    std::string screenshot_path;
    int frames = 3;
    long long step = -1;
    std::string panel;
    bool crop_to_panel = false;  // the PNG holds only `panel`'s window (for documentation)
    std::string script_path;     // commands driven one per frame (see app_window.cpp)
    float font_scale = 0;        // 0: the saved setting
    // At exit, a JSON summary of every frame: CPU time to build it (panels + ImGui), time to
    // render it (GL, to glFinish), draw calls, vertices; how a frame's cost is measured without
    // a profiler, and what the README's responsiveness numbers come from.
    std::string frame_stats_path;
    bool force = false;  // screenshots, dumps and frame stats may replace files that exist
    // Files the command reads besides the sessions and the script (a live run's model and
    // workload): never written over, whatever the window is asked to write.
    std::vector<std::string> inputs;
};

// Whether a window can be opened here: the error says why not (no display...) in one line.
// A command that would connect or create files for the window asks this first.
Status check_display();

// Returns the process exit status: 0; 1 when the window could not be created, a screenshot
// could not be written, or what the window was opened on (model, workload, session) failed to
// load (the window shows why while it is open; stderr says it at exit).
int run_window(const WindowOptions& options);

}  // namespace kvscope::ui
