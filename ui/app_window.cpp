// [SECTION] Index
//   Settings     view settings saved between runs (font scale, palette; layout in imgui.ini)
//   Script       the --script language: one command per frame
//   Layout       where each panel goes, for 1920x1080 and down to 1280x720
//   Frame        input, live stepping, panels
//   Screenshot   reading back the frame into a PNG
//   Frame stats  per-frame build / render time, draw calls, vertices (--frame-stats)
//   run_window   setup and the main loop
#include "ui/app_window.h"

#include <GL/gl.h>
#include <GLFW/glfw3.h>
#include <backends/imgui_impl_glfw.h>
#include <backends/imgui_impl_opengl3.h>
#include <imgui.h>
#include <imgui_internal.h>  // FindWindowByName, for --crop
#include <stb_image_write.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <vector>

#include "base/input_file.h"
#include "base/output_file.h"
#include "base/terminal_text.h"
#include "ui/saved_layout.h"
#include "ui/ui_context.h"

namespace kvscope::ui {

namespace fs = std::filesystem;

// [SECTION] Settings -----------------------------------------------------------------------------
namespace {
fs::path config_dir() {
    const char* xdg = std::getenv("XDG_CONFIG_HOME");
    const char* home = std::getenv("HOME");
    fs::path base = xdg    ? fs::path(xdg)
                    : home ? fs::path(home) / ".config"
                           : fs::temp_directory_path();
    return base / "kvscope";
}

// The settings file is the program's own, but it lives in the user's home and outlives versions:
// read it as any input (a FIFO or a device there would block or never end), bounded, and keep
// the defaults, saying why in one line, for what does not parse.
void load_settings(ViewState& v) {
    const fs::path path = config_dir() / "settings.txt";
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(path, ec))) return;
    auto text = read_input_file(path.string(), "settings file", 4096);
    if (!text) {
        std::fprintf(stderr, "kvscope: ignoring the saved view settings: %s\n",
                     terminal_safe(text.error().message).c_str());
        return;
    }
    std::istringstream f(*text);
    std::string key;
    while (f >> key) {
        if (key == "font_scale") {
            float scale = 0;
            if (f >> scale && std::isfinite(scale)) v.font_scale = scale;
        } else if (key == "palette") {
            int p = 0;
            f >> p;
            v.palette = p == 1 ? PaletteKind::kTolMuted : PaletteKind::kOkabeIto;
        }
        f.clear();
    }
    v.font_scale = std::clamp(v.font_scale, 0.5f, 4.0f);
}

// Only over a regular file (or none): whatever else stands at that name was said at load and is
// left alone.
void save_settings(const ViewState& v) {
    std::error_code ec;
    fs::create_directories(config_dir(), ec);
    const fs::path path = config_dir() / "settings.txt";
    const fs::file_status st = fs::symlink_status(path, ec);
    if (fs::exists(st) && !fs::is_regular_file(st)) return;
    std::ostringstream text;
    text << "font_scale " << v.font_scale << "\npalette " << static_cast<int>(v.palette) << "\n";
    (void)write_output_file(path.string(), text.str(), {.force = true});
}

// Hands the saved layout at `path` to Dear ImGui once it has been checked (saved_layout.h): a
// layout that fails the check is dropped, saying so in one line, and the defaults are used (the
// next save writes a sound one). False when `path` is not a regular file (a FIFO, a device, a
// link to one): then nothing is read from or written to it.
bool load_saved_layout(const std::string& path) {
    std::error_code ec;
    if (!fs::exists(fs::symlink_status(path, ec))) return true;
    auto text = read_input_file(path, "saved window layout", size_t{1} << 20);
    if (!text) {
        std::fprintf(stderr, "kvscope: ignoring the saved window layout: %s\n",
                     terminal_safe(text.error().message).c_str());
        return fs::is_regular_file(fs::symlink_status(path, ec));
    }
    if (std::string why = check_saved_layout(*text); !why.empty()) {
        std::fprintf(stderr, "kvscope: ignoring the saved window layout %s: %s\n",
                     terminal_safe(path).c_str(), terminal_safe(why).c_str());
        ImGui::LoadIniSettingsFromMemory("", 0);
        return true;
    }
    ImGui::LoadIniSettingsFromMemory(text->data(), text->size());
    return true;
}

// [SECTION] Script -------------------------------------------------------------------------------
// One command per frame:
//   step N          run N live iterations (or move the replay cursor by N)
//   seek S          put the cursor at step S
//   select-block B  select block B (and its request)
//   select-request R
//   hover-block B   show block B's tooltip (as if the mouse were there)
//   hover-heatmap Q K
//   heatmap R L H   pick request R, layer L, head H for the heatmap
//   zoom F          heatmap zoom factor
//   heat-scale S    heatmap colour scale: linear | sqrt | log | row
//   kernels V       the Kernels panel's lower half: table | roofline
//   search TEXT     the Deployment panel's search (a hash prefix or token ids; empty clears)
//   filter TEXT     the Evictions panel's filter (a request; attached: rank N, a medium or a
//                   hash prefix; empty clears)
//   pick-tree T     pick prefix tree T in the Prefix trees panel (-1: none)
//   drop PATH       as if PATH were dropped on the window
//   compare-align M 0: same step, 1: same progress of the selected request
//   wait N          render N frames
//   wait-blocks N   render frames until the Deployment panel shows N blocks held, or the live
//                   run has finished (an attached deployment, which grows on its own)
//   wait-progress TEXT  render frames until the live run's progress line (the Controls panel's:
//                   an attached deployment's events, gaps, losses) has TEXT, or it has finished
//   wait-finished   render frames until an attached deployment's run has ended (--duration)
//   screenshot PATH [PANEL]  write the current frame (only PANEL's window, if named)
//   dump PATH       write what the window shows as JSON: the status texts, the cursor, where
//                   the heatmaps are, where compared runs' tokens differ, what the Evictions
//                   log listed (rows, the first), the Memory panel's tracks, and per panel
//                   its size and its content's (a panel whose content is wider than it
//                   without a horizontal scrollbar clips)
//   quit
struct Script {
    std::vector<std::string> lines;
    size_t next = 0;
    int wait = 0;
    // What a wait-blocks, wait-progress or wait-finished command waits for, asked every frame
    // until true.
    std::function<bool()> until;
};

bool load_script(const std::string& path, Script& s, std::string& error) {
    auto text = read_input_file(path, "script", size_t{16} << 20);
    if (!text) {
        error = text.error().message;
        return false;
    }
    std::istringstream f(text.value());
    for (std::string line; std::getline(f, line);)
        if (!line.empty() && line[0] != '#') s.lines.push_back(line);
    return true;
}

// [SECTION] Layout -------------------------------------------------------------------------------
// Sets where the next panel goes the first time it appears (imgui.ini remembers moves).
void place(const char*, float x, float y, float w, float h) {
    ImGui::SetNextWindowPos(ImVec2(x, y), ImGuiCond_FirstUseEver);
    ImGui::SetNextWindowSize(ImVec2(w, h), ImGuiCond_FirstUseEver);
}

// [SECTION] Outputs ------------------------------------------------------------------------------
// The rules for every file the window writes (--screenshot, --frame-stats, a script's
// screenshot and dump): the same for all, so a script cannot do what a flag may not. An existing
// file is replaced only with --force, and never a file the command reads: the sessions shown
// (one dropped on the window too), the script, a live run's model and workload.
OutputRules output_rules(const WindowOptions& o, const UiContext* ctx) {
    OutputRules rules{.force = o.force, .inputs = o.inputs};
    rules.inputs.insert(rules.inputs.end(), {o.replay_path, o.compare_path, o.script_path});
    if (ctx && ctx->session) rules.inputs.push_back(ctx->session->path());
    if (ctx && ctx->compare) rules.inputs.push_back(ctx->compare->path());
    return rules;
}

// [SECTION] Screenshot ---------------------------------------------------------------------------
// The rectangle (x, y from the top left, w, h) of a panel's window, clipped to the framebuffer.
bool panel_rect(const std::string& name, int fb_w, int fb_h, int r[4]) {
    ImGuiWindow* win = ImGui::FindWindowByName(name.c_str());
    if (!win) return false;
    int x0 = std::clamp(static_cast<int>(win->Pos.x), 0, fb_w);
    int y0 = std::clamp(static_cast<int>(win->Pos.y), 0, fb_h);
    int x1 = std::clamp(static_cast<int>(win->Pos.x + win->Size.x), 0, fb_w);
    int y1 = std::clamp(static_cast<int>(win->Pos.y + win->Size.y), 0, fb_h);
    r[0] = x0;
    r[1] = y0;
    r[2] = x1 - x0;
    r[3] = y1 - y0;
    return r[2] > 0 && r[3] > 0;
}

// Writes the rectangle `rect` (x, y from the top left, w, h) of the framebuffer.
Status write_screenshot(const std::string& path, const OutputRules& rules, int fb_h,
                        const int rect[4]) {
    int x = rect[0], w = rect[2], h = rect[3];
    int gl_y = fb_h - rect[1] - h;  // GL rows count from the bottom
    std::vector<unsigned char> pixels(static_cast<size_t>(w) * h * 4);
    glPixelStorei(GL_PACK_ALIGNMENT, 1);
    glReadBuffer(GL_BACK);
    glReadPixels(x, gl_y, w, h, GL_RGBA, GL_UNSIGNED_BYTE, pixels.data());
    std::vector<unsigned char> flipped(pixels.size());
    for (int y = 0; y < h; ++y)
        std::copy_n(&pixels[static_cast<size_t>(h - 1 - y) * w * 4], static_cast<size_t>(w) * 4,
                    &flipped[static_cast<size_t>(y) * w * 4]);
    std::string png;
    auto append = [](void* ctx, void* data, int size) {
        static_cast<std::string*>(ctx)->append(static_cast<const char*>(data),
                                               static_cast<size_t>(size));
    };
    if (stbi_write_png_to_func(append, &png, w, h, 4, flipped.data(), w * 4) == 0)
        return Error{"cannot encode the screenshot for " + path};
    return write_output_file(path, png, rules);
}

// [SECTION] Frame stats --------------------------------------------------------------------------
struct FrameSample {
    double build_ms, render_ms;
    int draw_calls, vertices;
};

FrameSample draw_data_counts(const ImDrawData* d) {
    FrameSample f{0, 0, 0, 0};
    if (!d) return f;
    for (int i = 0; i < d->CmdListsCount; ++i)
        f.draw_calls += d->CmdLists[i]->CmdBuffer.Size;
    f.vertices = d->TotalVtxCount;
    return f;
}

std::string frame_stats_json(const std::vector<FrameSample>& frames) {
    auto summary = [&](auto field) {
        std::vector<double> v;
        for (const FrameSample& f : frames)
            v.push_back(static_cast<double>(field(f)));
        std::sort(v.begin(), v.end());
        auto at = [&](double q) {
            return v.empty() ? 0.0
                             : v[std::min(v.size() - 1,
                                          static_cast<size_t>(q * static_cast<double>(v.size())))];
        };
        char buf[160];
        std::snprintf(buf, sizeof buf, "{\"median\": %.3f, \"p95\": %.3f, \"max\": %.3f}", at(0.5),
                      at(0.95), v.empty() ? 0.0 : v.back());
        return std::string(buf);
    };
    std::ostringstream f;
    f << "{\"frames\": " << frames.size()
      << ",\n \"build_ms\": " << summary([](const FrameSample& s) { return s.build_ms; })
      << ",\n \"render_ms\": " << summary([](const FrameSample& s) { return s.render_ms; })
      << ",\n \"frame_ms\": "
      << summary([](const FrameSample& s) { return s.build_ms + s.render_ms; })
      << ",\n \"draw_calls\": " << summary([](const FrameSample& s) { return s.draw_calls; })
      << ",\n \"vertices\": " << summary([](const FrameSample& s) { return s.vertices; })
      << ",\n \"per_frame_ms\": [";
    for (size_t i = 0; i < frames.size(); ++i)
        f << (i ? ", " : "") << frames[i].build_ms + frames[i].render_ms;
    f << "],\n \"per_frame_build_ms\": [";
    for (size_t i = 0; i < frames.size(); ++i)
        f << (i ? ", " : "") << frames[i].build_ms;
    f << "]}\n";
    return f.str();
}

// Writes the frame (or only `panel`'s window, when named) to `path`; returns the exit status:
// 0, 1 when the file cannot be written, 2 when there is no such panel.
int shoot(const std::string& path, const OutputRules& rules, const std::string& panel, int w, int h,
          bool announce) {
    int rect[4] = {0, 0, w, h};
    if (!panel.empty() && !panel_rect(panel, w, h, rect)) {
        std::fprintf(stderr, "kvscope: error: no panel named '%s' to crop to\n",
                     terminal_safe(panel).c_str());
        return 2;
    }
    if (Status s = write_screenshot(path, rules, h, rect); !s) {
        std::fprintf(stderr, "kvscope: error: %s\n", terminal_safe(s.error().message).c_str());
        return 1;
    }
    if (announce)
        std::fprintf(stderr, "kvscope: wrote %s (%dx%d)\n", terminal_safe(path).c_str(), rect[2],
                     rect[3]);
    return 0;
}

UiContext* g_ctx = nullptr;  // for the GLFW drop callback

void on_drop(GLFWwindow*, int count, const char** paths) {
    if (count > 0 && g_ctx) g_ctx->open_session(paths[0]);
}
}  // namespace

// [SECTION] Frame
// ----------------------------------------------------------------------------------
namespace {
void handle_keys(UiContext& ctx) {
    ImGuiIO& io = ImGui::GetIO();
    if (io.WantTextInput) return;
    ViewState& v = ctx.view;
    // Dear ImGui 1.86 indexes keys by the backend's codes (GLFW's here).
    auto pressed = [](int glfw_key) { return ImGui::IsKeyPressed(glfw_key); };
    if (pressed(GLFW_KEY_F1)) v.show_help = !v.show_help;
    if (pressed(GLFW_KEY_SPACE)) v.playing = !v.playing;
    if (pressed(GLFW_KEY_LEFT)) ctx.set_cursor(v.cursor - 1);
    if (pressed(GLFW_KEY_RIGHT)) ctx.set_cursor(v.cursor + 1);
    if (pressed(GLFW_KEY_HOME)) ctx.set_cursor(0);
    if (pressed(GLFW_KEY_END)) ctx.set_cursor(ctx.last_step());
    if (pressed(GLFW_KEY_P))
        v.palette =
            v.palette == PaletteKind::kOkabeIto ? PaletteKind::kTolMuted : PaletteKind::kOkabeIto;
    if (io.KeyCtrl && pressed(GLFW_KEY_EQUAL)) v.font_scale = std::min(4.0f, v.font_scale * 1.15f);
    if (io.KeyCtrl && pressed(GLFW_KEY_MINUS)) v.font_scale = std::max(0.5f, v.font_scale / 1.15f);
    if (ctx.controller && !ctx.attached()) {  // a deployment sets its own pace
        if (pressed(GLFW_KEY_N)) ctx.controller->step(1);
        if (pressed(GLFW_KEY_R)) ctx.controller->step(v.run_n);
        if (pressed(GLFW_KEY_E)) ctx.controller->step(1 << 30);
    }
}

// The `dump` command's JSON (hand-written: ui/ links no JSON library).
std::string window_report(UiContext& ctx, int w, int h) {
    auto quoted = [](const std::string& t) {
        std::string out = "\"";
        for (char c : t) {
            if (c == '"' || c == '\\') out += '\\';
            if (static_cast<unsigned char>(c) >= 0x20) out += c;
        }
        return out + "\"";
    };
    std::ostringstream j;
    j << "{\"width\": " << w << ", \"height\": " << h << ", \"cursor\": " << ctx.view.cursor
      << ", \"compare_step\": " << ctx.compare_step << ", \"last_step\": " << ctx.last_step()
      << ",\n \"status_bar\": " << quoted(ctx.drawn_status_bar)
      << ",\n \"controls_status\": " << quoted(ctx.drawn_controls_status)
      << ",\n \"message\": " << quoted(ctx.view.message)
      << ",\n \"finished\": " << (ctx.controller && ctx.controller->finished() ? "true" : "false")
      << ",\n \"progress\": " << quoted(ctx.controller ? ctx.controller->progress() : "");
    j << ",\n \"controls_notes\": [";
    for (size_t i = 0; i < ctx.drawn_controls_notes.size(); ++i)
        j << (i ? ", " : "") << quoted(ctx.drawn_controls_notes[i]);
    j << "]";
    for (int side = 0; side < 2; ++side) {
        const auto& hm = ctx.drawn_heatmap[side];
        j << ",\n \"" << (side == 0 ? "heatmap" : "heatmap_right") << "\": {\"x\": " << hm.x
          << ", \"y\": " << hm.y << ", \"side\": " << hm.side << ", \"strip_y\": " << hm.strip_y
          << ", \"strip_h\": " << hm.strip_h << ", \"keys\": " << hm.keys
          << ", \"pan_x\": " << hm.pan_x << ", \"span\": " << hm.span << "}";
    }
    j << ",\n \"heat_scale\": " << quoted(heat_scale_name(ctx.view.heat_scale));
    j << ",\n \"divergences\": [";
    if (ctx.compare)
        for (const TokenDivergence& d : ctx.divergences())
            j << (&d == &ctx.divergences().front() ? "" : ", ")
              << "{\"request\": " << quoted(d.request) << ", \"position\": " << d.position
              << ", \"left_step\": " << d.left_step << ", \"right_step\": " << d.right_step << "}";
    j << "]";
    const auto& k = ctx.drawn_kernels;
    j << ",\n \"kernels\": {\"step\": " << k.step << ", \"ops\": " << k.ops << ", \"x\": " << k.x
      << ", \"y\": " << k.y << ", \"w\": " << k.w << ", \"h\": " << k.h
      << ", \"widest\": " << quoted(k.widest) << ", \"widest_x0\": " << k.widest_x0
      << ", \"widest_x1\": " << k.widest_x1 << ", \"widest_y0\": " << k.widest_y0
      << ", \"widest_y1\": " << k.widest_y1 << ", \"widest_color\": " << k.widest_color
      << ", \"roofline_points\": " << k.roofline_points << ", \"gpu_kernels\": " << k.gpu_kernels
      << ", \"gpu_streams\": " << k.gpu_streams << ", \"hbm_samples\": " << k.hbm_samples
      << ", \"hbm_peak_gbps\": " << k.hbm_peak_gbps << "}";
    const auto& dep = ctx.drawn_deployment;
    auto ints = [](const std::vector<int32_t>& v) {
        std::string out = "[";
        for (size_t i = 0; i < v.size(); ++i)
            out += (i ? ", " : "") + std::to_string(v[i]);
        return out + "]";
    };
    j << ",\n \"deployment\": {\"shown\": " << (dep.shown ? "true" : "false")
      << ", \"publishers\": " << dep.publishers << ", \"held\": " << dep.held
      << ", \"trees\": " << dep.trees << ", \"tracks\": " << dep.tracks
      << ", \"search\": " << quoted(ctx.view.deploy_search)
      << ", \"search_summary\": " << quoted(dep.search_summary)
      << ", \"search_blocks\": " << ints(dep.search_blocks)
      << ", \"search_blocks_per_publisher\": " << ints(dep.search_blocks_per_publisher)
      << ", \"hovered_block\": " << dep.hovered_block << ", \"tooltip\": " << quoted(dep.tooltip)
      << ", \"maps\": [" <<
        [&] {
            std::string m;
            for (size_t i = 0; i < dep.maps.size(); ++i)
                m += (i ? ", " : "") + quoted(dep.maps[i]);
            return m;
        }()
      << "]"
      << "}";
    j << ",\n \"eviction_log\": {\"rows\": " << ctx.drawn_log_rows
      << ", \"token_evictions\": " << ctx.drawn_log_token_evictions
      << ", \"first_row\": " << quoted(ctx.drawn_log_first_row) << "}"
      << ",\n \"memory\": {\"tracks\": " << ctx.drawn_memory_tracks << "},\n \"panels\": [";
    bool first = true;
    for (ImGuiWindow* win : GImGui->Windows) {
        if (!win->WasActive || win->Hidden || (win->Flags & ImGuiWindowFlags_ChildWindow) ||
            win->Name[0] == '#')
            continue;
        float inner_w = win->InnerRect.GetWidth() - 2 * win->WindowPadding.x;
        float inner_h = win->InnerRect.GetHeight() - 2 * win->WindowPadding.y;
        j << (first ? "\n  " : ",\n  ") << "{\"name\": " << quoted(win->Name)
          << ", \"x\": " << win->Pos.x << ", \"y\": " << win->Pos.y << ", \"w\": " << win->Size.x
          << ", \"h\": " << win->Size.y << ", \"inner_w\": " << inner_w
          << ", \"inner_h\": " << inner_h << ", \"content_w\": " << win->ContentSize.x
          << ", \"content_h\": " << win->ContentSize.y
          << ", \"scrollbar_x\": " << (win->ScrollbarX ? "true" : "false")
          << ", \"scrollbar_y\": " << (win->ScrollbarY ? "true" : "false") << "}";
        first = false;
    }
    j << "\n]}\n";
    return j.str();
}

// Runs one script command; returns false at `quit`.
bool run_script_command(UiContext& ctx, const WindowOptions& o, Script& s, int w, int h,
                        std::string& error) {
    if (s.wait > 0) {
        --s.wait;
        return true;
    }
    if (s.until) {
        if (!s.until()) return true;
        s.until = nullptr;
    }
    if (s.next >= s.lines.size()) return false;
    std::istringstream in(s.lines[s.next++]);
    std::string cmd;
    in >> cmd;
    // A simulated hover lasts until the next command that is not a wait or a screenshot.
    if (cmd.rfind("wait", 0) != 0 && cmd != "screenshot" && cmd != "__shoot")
        ctx.scripted = ScriptedInput{};
    if (cmd == "step") {
        long long n = 1;
        in >> n;
        if (ctx.controller)
            ctx.controller->step(static_cast<int>(n));
        else
            ctx.set_cursor(ctx.view.cursor + n);
    } else if (cmd == "seek") {
        long long n = 0;
        in >> n;
        ctx.set_cursor(n);
    } else if (cmd == "select-block") {
        in >> ctx.view.selected_block;
        if (ctx.state && ctx.view.selected_block >= 0 &&
            ctx.view.selected_block < static_cast<int>(ctx.state->blocks.size())) {
            const auto& owners =
                ctx.state->blocks[static_cast<size_t>(ctx.view.selected_block)].owners;
            if (!owners.empty()) ctx.view.selected_request = owners.front();
        }
    } else if (cmd == "select-request") {
        in >> ctx.view.selected_request;
        ctx.view.heat_request = ctx.view.selected_request;
    } else if (cmd == "hover-block") {
        in >> ctx.scripted.hover_block;
    } else if (cmd == "hover-heatmap") {
        in >> ctx.scripted.hover_q >> ctx.scripted.hover_k;
    } else if (cmd == "heatmap") {
        in >> ctx.view.heat_request >> ctx.view.heat_layer >> ctx.view.heat_head;
        ctx.view.heat_picked = true;
    } else if (cmd == "zoom") {
        in >> ctx.view.heat_zoom;
    } else if (cmd == "heat-scale") {
        std::string name;
        in >> name;
        auto scale = parse_heat_scale(name);
        if (!scale) {
            error = "script: heat-scale '" + name + "' must be linear, sqrt, log or row";
            return false;
        }
        ctx.view.heat_scale = *scale;
    } else if (cmd == "kernels") {
        std::string which;
        in >> which;
        ctx.view.kern_roofline = which == "roofline";
    } else if (cmd == "search") {
        std::getline(in >> std::ws, ctx.view.deploy_search);
    } else if (cmd == "filter") {
        std::getline(in >> std::ws, ctx.view.eviction_filter);
    } else if (cmd == "pick-tree") {
        in >> ctx.view.selected_tree;
    } else if (cmd == "compare-align") {
        in >> ctx.view.compare_align;
    } else if (cmd == "drop") {
        std::string path;
        std::getline(in >> std::ws, path);
        on_drop(nullptr, 1, std::vector<const char*>{path.c_str()}.data());  // as GLFW calls it
    } else if (cmd == "wait") {
        in >> s.wait;
    } else if (cmd == "wait-blocks") {
        int n = 1;
        in >> n;
        // Until the blocks are drawn, or none can come any more.
        s.until = [&ctx, n] {
            return ctx.drawn_deployment.held >= n || !ctx.controller || ctx.controller->finished();
        };
    } else if (cmd == "wait-progress") {
        std::string text;
        std::getline(in >> std::ws, text);
        s.until = [&ctx, text] {
            return !ctx.controller || ctx.controller->finished() ||
                   ctx.controller->progress().find(text) != std::string::npos;
        };
    } else if (cmd == "wait-finished") {
        if (!ctx.controller || !ctx.attached()) {
            error = "script: wait-finished needs a run that ends on its own (kvscope attach --gui)";
            return false;
        }
        s.until = [&ctx] { return ctx.controller->finished(); };
    } else if (cmd == "screenshot") {
        std::string path, panel;
        in >> path;
        std::getline(in >> std::ws, panel);
        // The frame being built is drawn after this command; keep hovers for it and shoot next.
        s.lines.insert(s.lines.begin() + static_cast<long>(s.next),
                       "__shoot " + path + "\t" + panel);
        return true;
    } else if (cmd == "dump") {
        std::string path;
        std::getline(in >> std::ws, path);
        if (Status d = write_output_file(path, window_report(ctx, w, h), output_rules(o, &ctx));
            !d) {
            error = d.error().message;
            return false;
        }
    } else if (cmd == "__shoot") {
        return true;  // handled after rendering
    } else if (cmd == "quit") {
        return false;
    } else {
        error = "script: unknown command '" + cmd + "'";
        return false;
    }
    (void)w;
    (void)h;
    return true;
}

void draw_frame(UiContext& ctx, const WindowOptions& o, int w, int h, bool focus_panel) {
    ImGui::GetIO().FontGlobalScale = ctx.view.font_scale;
    float W = static_cast<float>(w), H = static_cast<float>(h);
    float left = std::max(260.0f, W * 0.17f), bottom = H * 0.34f,
          right = std::max(320.0f, W * 0.30f);
    float mid = W - left - right;
    float top_h = H - bottom - 24;
    place("Controls", 0, 0, left, H - 24);
    draw_controls_panel(ctx);
    if (ctx.compare) {
        // Side by side: each run's block map and heatmap over its request list at the aligned
        // moment, the curves overlaid and the table of differences underneath.
        float half = (W - left) / 2, third = (W - left) / 3;
        float pool_w = half * 0.5f, upper = top_h * 0.6f;
        place("Block pool", left, 0, pool_w, upper);
        draw_block_pool_panel(ctx, Side::kMain);
        place("Attention", left + pool_w, 0, half - pool_w, upper);
        draw_heatmap_panel(ctx, Side::kMain);
        place("Requests", left, upper, half, top_h - upper);
        draw_requests_panel(ctx, Side::kMain);
        place("Block pool (right)", left + half, 0, pool_w, upper);
        draw_block_pool_panel(ctx, Side::kCompared);
        place("Attention (right)", left + half + pool_w, 0, half - pool_w, upper);
        draw_heatmap_panel(ctx, Side::kCompared);
        place("Requests (right)", left + half, upper, half, top_h - upper);
        draw_requests_panel(ctx, Side::kCompared);
        place("Timeline", left, top_h, third, bottom);
        draw_timeline_panel(ctx);
        place("Memory", left + third, top_h, third, bottom);
        draw_memory_panel(ctx);
        place("Compare", left + 2 * third, top_h, third, bottom);
        draw_compare_panel(ctx);
    } else if (ctx.attached()) {
        // A deployment followed with `kvscope attach`: its ranks' blocks and prefix trees take
        // the place of the engine's block pool, requests, kernels and attention.
        place("Deployment", left, 0, mid, top_h);
        draw_deployment_panel(ctx);
        place("Prefix trees", left + mid, 0, right, top_h);
        draw_prefix_tree_panel(ctx);
    } else {
        place("Block pool", left, 0, mid, top_h * 0.5f);
        draw_block_pool_panel(ctx);
        // The selected step's requests and, beside them, where its time and bytes went.
        place("Requests", left, top_h * 0.5f, mid * 0.45f, top_h * 0.5f);
        draw_requests_panel(ctx);
        place("Kernels", left + mid * 0.45f, top_h * 0.5f, mid * 0.55f, top_h * 0.5f);
        draw_kernels_panel(ctx);
        place("Attention", left + mid, 0, right, top_h);
        draw_heatmap_panel(ctx);
    }
    if (!ctx.compare) {  // one run, engine or attached: the same bottom row
        place("Timeline", left, top_h, mid, bottom);
        draw_timeline_panel(ctx);
        place("Memory", left + mid, top_h, right, bottom * 0.5f);
        draw_memory_panel(ctx);
        place("Evictions", left + mid, top_h + bottom * 0.5f, right, bottom * 0.5f);
        draw_eviction_log_panel(ctx);
    }
    draw_help_overlay(ctx);
    if (focus_panel && !o.panel.empty()) ImGui::SetWindowFocus(o.panel.c_str());
    // Status line.
    ImGui::SetNextWindowPos(ImVec2(0, H - 24), ImGuiCond_Always);
    ImGui::SetNextWindowSize(ImVec2(W, 24), ImGuiCond_Always);
    ImGui::Begin("##status", nullptr,
                 ImGuiWindowFlags_NoDecoration | ImGuiWindowFlags_NoMove |
                     ImGuiWindowFlags_NoSavedSettings | ImGuiWindowFlags_NoFocusOnAppearing |
                     ImGuiWindowFlags_NoBringToFrontOnFocus);
    // Where the run is (the same words as the Controls panel), then the latest hint or error.
    ctx.drawn_status_bar = ctx.run_status();
    ImGui::TextUnformatted(ctx.drawn_status_bar.c_str());
    if (!ctx.view.message.empty()) {
        ImGui::SameLine();
        ImGui::TextDisabled("|");
        ImGui::SameLine();
        if (ctx.view.message_is_error)
            ImGui::TextColored(ImVec4(1.0f, 0.35f, 0.3f, 1.0f), "%s", ctx.view.message.c_str());
        else
            ImGui::TextUnformatted(ctx.view.message.c_str());
    }
    ImGui::End();
}
}  // namespace

// [SECTION] run_window
// -----------------------------------------------------------------------------
namespace {
// GLFW's own report of a failed start is folded into the one line (no error callback yet).
Status init_glfw() {
    if (glfwInit()) return {};
    const char* why = nullptr;
    glfwGetError(&why);
    return Error{std::string("cannot open a window (") + (why ? why : "no display?") +
                 "): set DISPLAY or run under Xvfb"};
}
}  // namespace

Status check_display() {
    if (Status s = init_glfw(); !s) return s;
    glfwTerminate();
    return {};
}

int run_window(const WindowOptions& o) {
    for (const std::string* out : {&o.screenshot_path, &o.frame_stats_path}) {
        if (out->empty()) continue;
        Status s = check_output_path(*out, output_rules(o, nullptr));
        if (!s) {
            std::fprintf(stderr, "kvscope: error: %s\n", terminal_safe(s.error().message).c_str());
            return 1;
        }
    }
    if (Status s = init_glfw(); !s) {
        std::fprintf(stderr, "kvscope: error: %s\n", terminal_safe(s.error().message).c_str());
        return 1;
    }
    glfwSetErrorCallback([](int code, const char* text) {
        std::fprintf(stderr, "kvscope: GLFW error %d: %s\n", code, text);
    });
    glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
    glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 3);
    glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
    bool headless = !o.screenshot_path.empty() || !o.script_path.empty();
    if (headless) glfwWindowHint(GLFW_RESIZABLE, GLFW_FALSE);
    GLFWwindow* window = glfwCreateWindow(o.width, o.height, "kvscope", nullptr, nullptr);
    if (!window) {
        std::fprintf(stderr, "kvscope: error: cannot create an OpenGL 3.3 window\n");
        glfwTerminate();
        return 1;
    }
    glfwMakeContextCurrent(window);
    glfwSwapInterval(headless ? 0 : 1);
    IMGUI_CHECKVERSION();
    ImGui::CreateContext();
    ImGuiIO& io = ImGui::GetIO();
    // The side-by-side layout of a comparison is remembered apart from the usual one.
    static std::string ini_path =
        (config_dir() / (o.compare_path.empty() ? "imgui.ini" : "imgui-compare.ini")).string();
    io.IniFilename = nullptr;
    if (!headless) {
        std::error_code ec;
        fs::create_directories(config_dir(), ec);
        io.IniFilename = load_saved_layout(ini_path) ? ini_path.c_str() : nullptr;
    }
    ImGui::StyleColorsDark();
    ImGui_ImplGlfw_InitForOpenGL(window, true);
    ImGui_ImplOpenGL3_Init("#version 330");

    UiContext ctx;
    g_ctx = &ctx;
    // What the window was opened on and could not load: shown while open, an error exit after.
    std::string startup_failure;
    glfwSetDropCallback(window, on_drop);
    if (!headless) load_settings(ctx.view);
    if (o.font_scale > 0) ctx.view.font_scale = o.font_scale;
    if (o.controller) {
        ctx.controller = o.controller;
        ctx.session = &o.controller->session();
        ctx.title = o.controller->describe();
        ctx.view.message =
            o.hint.empty() ? "Space plays, N steps one iteration, F1 lists every key." : o.hint;
    } else if (!o.replay_path.empty()) {
        if (!ctx.open_session(o.replay_path)) startup_failure = ctx.view.message;
    } else {
        ctx.title = "no session";
    }
    if (!o.compare_path.empty() && !ctx.open_compare(o.compare_path))
        startup_failure = ctx.view.message;
    if (!o.startup_error.empty()) {
        startup_failure = ctx.view.message = o.startup_error;
        ctx.view.message_is_error = true;
    }
    if (o.step >= 0) {
        if (ctx.controller)
            ctx.controller->step(static_cast<int>(std::min<long long>(o.step, INT32_MAX)));
        ctx.set_cursor(o.step);
    }

    Script script;
    std::string script_error;
    if (!o.script_path.empty() && !load_script(o.script_path, script, script_error)) {
        std::fprintf(stderr, "kvscope: error: %s\n", terminal_safe(script_error).c_str());
        return 2;
    }
    int status = 0;
    int frame = 0;
    auto last_play = std::chrono::steady_clock::now();
    double play_credit = 0;
    std::vector<FrameSample> frame_stats;
    using clock = std::chrono::steady_clock;
    const bool end_with_the_run = o.close_when_finished && o.script_path.empty() && ctx.controller;
    while (!glfwWindowShouldClose(window) && !(o.close_requested && o.close_requested->load()) &&
           !(end_with_the_run && ctx.controller->finished())) {
        glfwPollEvents();
        auto t_build = clock::now();
        ImGui_ImplOpenGL3_NewFrame();
        ImGui_ImplGlfw_NewFrame();
        ImGui::NewFrame();
        int w, h;
        glfwGetFramebufferSize(window, &w, &h);
        bool keep_going = true;
        if (!o.script_path.empty())
            keep_going = run_script_command(ctx, o, script, w, h, script_error);
        if (!headless) handle_keys(ctx);
        // Live: advance while playing; the cursor follows the newest step unless moved back.
        auto now = std::chrono::steady_clock::now();
        double dt = std::chrono::duration<double>(now - last_play).count();
        last_play = now;
        if (ctx.controller && ctx.attached()) {
            // A deployment moves on wall time: what it sent is taken in every frame, played or
            // not, headless or not.
            ctx.controller->step(1);
        } else if (ctx.view.playing && !headless) {
            play_credit += dt * ctx.view.steps_per_second;
            int n = static_cast<int>(play_credit);
            play_credit -= n;
            if (n > 0) {
                if (ctx.controller) {
                    if (ctx.controller->step(n) == 0) ctx.view.playing = false;
                } else if (ctx.view.cursor >= ctx.last_step()) {
                    ctx.view.playing = false;
                } else {
                    ctx.set_cursor(ctx.view.cursor + n);
                }
            }
        }
        if (ctx.controller && ctx.view.follow_live) ctx.view.cursor = ctx.last_step();
        if (ctx.controller) {
            if (std::string p = ctx.controller->problem(); !p.empty()) {
                ctx.view.message = p;
                ctx.view.message_is_error = true;
            }
        }
        ctx.update_state();
        draw_frame(ctx, o, w, h, frame == 0);
        ImGui::Render();
        auto t_render = clock::now();
        glViewport(0, 0, w, h);
        glClearColor(0.08f, 0.08f, 0.09f, 1.0f);
        glClear(GL_COLOR_BUFFER_BIT);
        ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
        if (!o.frame_stats_path.empty()) {
            glFinish();  // so the GL work is inside the measured frame
            FrameSample f = draw_data_counts(ImGui::GetDrawData());
            f.build_ms = std::chrono::duration<double, std::milli>(t_render - t_build).count();
            f.render_ms =
                std::chrono::duration<double, std::milli>(clock::now() - t_render).count();
            frame_stats.push_back(f);
        }
        ++frame;
        if (!o.script_path.empty() && script.next > 0 && script.next <= script.lines.size() &&
            script.lines[script.next - 1].rfind("__shoot ", 0) == 0) {
            std::string path = script.lines[script.next - 1].substr(8);
            std::string panel = path.substr(path.find('\t') + 1);
            path.resize(path.find('\t'));
            if ((status = shoot(path, output_rules(o, &ctx), panel, w, h, false)) != 0) break;
        }
        if (!o.screenshot_path.empty() && frame >= o.frames) {
            status = shoot(o.screenshot_path, output_rules(o, &ctx), o.crop_to_panel ? o.panel : "",
                           w, h, true);
            break;
        }
        glfwSwapBuffers(window);
        if (!keep_going) {
            if (!script_error.empty()) {
                std::fprintf(stderr, "kvscope: error: %s\n", terminal_safe(script_error).c_str());
                status = 2;
            }
            break;
        }
    }
    if (!o.frame_stats_path.empty()) {
        Status s = write_output_file(o.frame_stats_path, frame_stats_json(frame_stats),
                                     output_rules(o, &ctx));
        if (!s) {
            std::fprintf(stderr, "kvscope: error: %s\n", terminal_safe(s.error().message).c_str());
            status = 1;
        }
    }
    if (!startup_failure.empty()) {
        std::fprintf(stderr, "kvscope: error: %s\n", terminal_safe(startup_failure).c_str());
        if (status == 0) status = 1;
    }
    if (!headless) save_settings(ctx.view);
    g_ctx = nullptr;
    ImGui_ImplOpenGL3_Shutdown();
    ImGui_ImplGlfw_Shutdown();
    ImGui::DestroyContext();
    glfwDestroyWindow(window);
    glfwTerminate();
    return status;
}

}  // namespace kvscope::ui
