// `kvscope attach`: follows running vLLM or SGLang publishers' KV-cache events, reports gaps and
// what every rank holds, and records it as a session that replays like any other. With --gui
// the window shows it live, as a recording that grows.
#include <chrono>
#include <cstdio>
#include <memory>

#include "app/attach_session.h"
#include "app/commands.h"
#include "app/number_flag.h"
#include "app/progress_line.h"
#include "app/stop_signal.h"
#ifdef KVSCOPE_HAVE_GUI
#include "app/attach_controller.h"
#include "app/live_recording.h"
#include "app/window_flags.h"
#include "ui/app_window.h"
#endif

namespace kvscope::app {

namespace {
struct AttachCliOptions {
    AttachFlags attach;
    bool gui = false;
#ifdef KVSCOPE_HAVE_GUI
    ui::WindowOptions window;
#endif
};

// Following in the terminal, with a progress line.
int follow_in_terminal(const AttachFlags& f) {
    ProgressLine progress;
    auto attacher = create_attacher(f, [&progress] { progress.clear(); });
    if (!attacher) return usage_error(attacher.error().message);
    std::unique_ptr<Recorder> recorder;
    if (!f.record.empty()) {
        auto rec = record_attached(f.record, **attacher, f.force);
        if (!rec) return fail(rec.error().message);
        recorder = std::move(rec).value();
    }
    announce_attach(f, "Ctrl-C ends it");
    const std::atomic<bool>& stop = stop_on_interrupt();
    auto start = std::chrono::steady_clock::now();
    auto seconds = [&] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    Status ran = (*attacher)->run(recorder.get(), stop, f.duration, [&] {
        if (progress.due()) progress.show(attach_progress((*attacher)->stats(), seconds()));
    });
    progress.clear();
    const double elapsed = seconds();
    Status closed = recorder ? recorder->close() : Status{};
    return report_attach(f, **attacher, closed, ran, elapsed);
}

#ifdef KVSCOPE_HAVE_GUI
// Following in the window: the recording (to --record, or a temporary file) is what it shows;
// closing the window (or Ctrl-C) ends the attach, then the summary is the terminal's.
int follow_in_window(const AttachFlags& f, ui::WindowOptions window) {
    if (window.step >= 0)
        return usage_error(
            "--step does not apply to attach: a deployment moves on wall time (--duration "
            "ends it)");
    if (Status display = ui::check_display(); !display) return fail(display.error().message);
    // From the recording's first byte on, Ctrl-C closes it properly rather than killing.
    const std::atomic<bool>& stop = stop_on_interrupt();
    auto attacher = create_attacher(f, {});
    if (!attacher) return usage_error(attacher.error().message);
    const bool keep = !f.record.empty();
    auto rec =
        record_attached(keep ? f.record : temporary_session_path(), **attacher, f.force || !keep);
    if (!rec) return fail(rec.error().message);
    auto recording = LiveRecording::open(std::move(rec).value(), keep);
    if (!recording) return fail(recording.error().message);
    auto controller = AttachController::start(std::move(attacher).value(),
                                              std::move(recording).value(), stop, f.duration);
    announce_attach(f, f.duration > 0 ? "closing the window, Ctrl-C or --duration ends it"
                                      : "closing the window or Ctrl-C ends it");
    window.controller = controller.get();
    window.close_requested = &stop;
    window.close_when_finished = f.duration > 0;
    window.force = f.force;
    window.hint =
        "Following live: Left/Right look back, End follows again; close the window to end the "
        "attach.";
    const int window_status = ui::run_window(window);
    Status closed = controller->finish();
    const int rc = report_attach(f, controller->attacher(), closed, controller->followed(),
                                 controller->seconds());
    return rc != 0 ? rc : window_status;
}
#endif

int run_attach(const AttachCliOptions& o) {
    if (int rc = check_attach_outputs(o.attach)) return rc;
#ifdef KVSCOPE_HAVE_GUI
    if (o.gui) return follow_in_window(o.attach, o.window);
#endif
    return follow_in_terminal(o.attach);
}
}  // namespace

Command register_attach(CLI::App& cli) {
    auto o = std::make_shared<AttachCliOptions>();
    AttachFlags& f = o->attach;
    CLI::App* sub = cli.add_subcommand(
        "attach", "Follow a vLLM or SGLang deployment's KV-cache events (ZeroMQ) and record them");
    sub->add_option("endpoints", f.endpoints,
                    "Publisher endpoints, one per rank, e.g. tcp://HOST:5557 tcp://HOST:5558")
        ->required();
    sub->add_option("--replay", f.replay,
                    "Replay endpoints, one per publisher in the same order, to fill gaps");
    sub->add_option("--topic", f.topic, "Subscribe to this topic (a prefix; default: all)");
    sub->add_option("--record", f.record, "Record to a session file (.kvs)");
    sub->add_option("--duration", f.duration, "Stop after this many seconds (default: Ctrl-C)")
        ->check(finite_number(0, 1e7));
    sub->add_option("--summary-json", f.summary_json, "Write per-publisher counts as JSON here");
    sub->add_option("--blocks-per-rank", f.blocks_per_rank,
                    "Most blocks tracked per publisher at once (the session's pool share)")
        ->check(CLI::Range(1, 1 << 22));
    sub->add_option("--tick-ms", f.tick_ms, "Length of one recorded step, in milliseconds")
        ->check(CLI::Range(1, 60000));
    sub->add_option("--max-message-bytes", f.max_message_bytes,
                    "Refuse (count and say) a batch larger than this many bytes (default 16 MiB)")
        ->check(CLI::Range(int64_t{1024}, int64_t{1} << 32));
    add_force_flag(*sub, f.force);
#ifdef KVSCOPE_HAVE_GUI
    sub->add_flag("--gui", o->gui,
                  "Show it live in the window; closing the window ends the attach (without "
                  "--record the recording is a temporary file)");
    add_window_flags(*sub, o->window);
#endif
    return {sub, [o] { return run_attach(*o); }};
}

}  // namespace kvscope::app
