// `kvscope attach`: follows running vLLM or SGLang publishers' KV-cache events, reports gaps and
// what every rank holds, and records it as a session that replays like any other.
#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "app/progress_line.h"
#include "app/stop_signal.h"
#include "attach/attacher.h"
#include "base/output_file.h"
#include "base/terminal_text.h"
#include "sessions/recorder.h"

namespace kvscope::app {

namespace {
struct AttachCliOptions {
    std::vector<std::string> endpoints;
    std::vector<std::string> replay;
    std::string topic;
    std::string record;
    std::string summary_json;
    double duration = 0;
    int32_t blocks_per_rank = 65536;
    int32_t tick_ms = 100;
    bool force = false;
};

nlohmann::json stats_to_json(const std::vector<attach::PublisherStats>& stats, double seconds) {
    nlohmann::json ranks = nlohmann::json::array();
    int64_t events = 0;
    for (const auto& s : stats) {
        events += s.events;
        ranks.push_back({{"endpoint", s.endpoint},
                         {"rank", s.rank},
                         {"events", s.events},
                         {"batches", s.batches},
                         {"blocks_stored", s.blocks_stored},
                         {"blocks_removed", s.blocks_removed},
                         {"blocks_cached", s.blocks_cached},
                         {"gaps", s.gaps},
                         {"gaps_filled", s.gaps_filled},
                         {"batches_lost", s.batches_lost},
                         {"events_lost", s.events_lost},
                         {"malformed_frames", s.malformed_frames},
                         {"malformed_events", s.malformed_events},
                         {"unknown_events", s.unknown_events},
                         {"unknown_fields", s.unknown_fields},
                         {"stale_batches", s.stale},
                         {"restarts", s.restarts},
                         {"removed_unknown", s.removed_unknown},
                         {"overflow", s.overflow},
                         {"joined_at_seq", s.joined_at_seq},
                         {"batches_after_end", s.batches_after_end}});
    }
    return {{"ranks", ranks},
            {"seconds", seconds},
            {"events", events},
            {"events_per_second", seconds > 0 ? static_cast<double>(events) / seconds : 0.0}};
}

std::string progress_text(const std::vector<attach::PublisherStats>& stats, double seconds) {
    int64_t events = 0, cached = 0, lost = 0, gaps = 0;
    for (const auto& s : stats) {
        events += s.events;
        cached += s.blocks_cached;
        lost += s.batches_lost;
        gaps += s.gaps;
    }
    return std::to_string(stats.size()) + " publisher" + (stats.size() == 1 ? "" : "s") + ", " +
           std::to_string(events) + " events (" +
           std::to_string(static_cast<long long>(seconds > 0 ? events / seconds : 0)) + "/s), " +
           std::to_string(cached) + " blocks cached, " + std::to_string(gaps) + " gaps, " +
           std::to_string(lost) + " batches lost";
}

int run_attach(const AttachCliOptions& o) {
    if (!o.record.empty() && o.record == o.summary_json)
        return fail("--record and --summary-json name the same file, " + o.record);
    for (const std::string& out : {o.record, o.summary_json})
        if (check_output(out, o.force, {})) return 1;
    attach::AttachOptions ao;
    ao.endpoints = o.endpoints;
    ao.replay_endpoints = o.replay;
    ao.topic = o.topic;
    ao.blocks_per_publisher = o.blocks_per_rank;
    ao.tick_ms = o.tick_ms;
    auto attacher = attach::Attacher::create(ao);
    if (!attacher) return usage_error(attacher.error().message);
    std::unique_ptr<Recorder> recorder;
    if (!o.record.empty()) {
        RecorderOptions ro;
        ro.replace_existing = o.force;
        auto rec = Recorder::create(o.record, (*attacher)->run_info(), ro);
        if (!rec) return fail(rec.error().message);
        recorder = std::move(rec).value();
    }
    std::fprintf(stderr, "kvscope attach: following %zu publisher%s%s; Ctrl-C ends it\n",
                 o.endpoints.size(), o.endpoints.size() == 1 ? "" : "s",
                 o.replay.empty() ? " (no replay: gaps cannot be filled)" : "");
    const std::atomic<bool>& stop = stop_on_interrupt();
    ProgressLine progress;
    auto start = std::chrono::steady_clock::now();
    auto seconds = [&] {
        return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    Status ran = (*attacher)->run(recorder.get(), stop, o.duration, [&] {
        if (progress.due()) progress.show(progress_text((*attacher)->stats(), seconds()));
    });
    progress.clear();
    const double elapsed = seconds();
    auto stats = (*attacher)->stats();
    int rc = 0;
    if (recorder) {
        Status closed = recorder->close();
        if (!closed)
            rc = fail(closed.error().message);
        else
            std::fprintf(stderr, "kvscope attach: recorded %lld steps to %s\n",
                         static_cast<long long>((*attacher)->steps()),
                         terminal_safe(o.record).c_str());
    }
    if (!ran) rc = fail(ran.error().message);
    std::printf("%-28s %5s %10s %9s %9s %8s %6s %7s %9s %9s\n", "publisher", "rank", "events",
                "stored", "removed", "cached", "gaps", "filled", "lost", "malformed");
    for (const auto& s : stats)
        std::printf("%-28s %5d %10lld %9lld %9lld %8lld %6lld %7lld %9lld %9lld\n",
                    terminal_safe(s.endpoint).c_str(), s.rank, static_cast<long long>(s.events),
                    static_cast<long long>(s.blocks_stored),
                    static_cast<long long>(s.blocks_removed),
                    static_cast<long long>(s.blocks_cached), static_cast<long long>(s.gaps),
                    static_cast<long long>(s.gaps_filled), static_cast<long long>(s.batches_lost),
                    static_cast<long long>(s.malformed_frames));
    for (const auto& s : stats) {
        if (s.batches_lost > 0)
            std::fprintf(stderr,
                         "kvscope attach: %s: %lld batches (about %lld events) lost and not "
                         "replayable; what it holds may be incomplete\n",
                         terminal_safe(s.endpoint).c_str(), static_cast<long long>(s.batches_lost),
                         static_cast<long long>(s.events_lost));
        if (s.batches_after_end > 0)
            std::fprintf(stderr,
                         "kvscope attach: %s: %lld batches arrived but were still queued when "
                         "attach ended (not recorded)\n",
                         terminal_safe(s.endpoint).c_str(),
                         static_cast<long long>(s.batches_after_end));
        if (s.overflow > 0)
            std::fprintf(stderr,
                         "kvscope attach: %s: %lld blocks not tracked: more than "
                         "--blocks-per-rank %d held at once\n",
                         terminal_safe(s.endpoint).c_str(), static_cast<long long>(s.overflow),
                         o.blocks_per_rank);
    }
    if (!o.summary_json.empty()) {
        Status w = write_output_file(o.summary_json, stats_to_json(stats, elapsed).dump(2) + "\n",
                                     {.force = o.force, .inputs = {}});
        if (!w) rc = fail(w.error().message);
    }
    return rc;
}
}  // namespace

Command register_attach(CLI::App& cli) {
    auto o = std::make_shared<AttachCliOptions>();
    CLI::App* sub = cli.add_subcommand(
        "attach", "Follow a vLLM or SGLang deployment's KV-cache events (ZeroMQ) and record them");
    sub->add_option("endpoints", o->endpoints,
                    "Publisher endpoints, one per rank, e.g. tcp://HOST:5557 tcp://HOST:5558")
        ->required();
    sub->add_option("--replay", o->replay,
                    "Replay endpoints, one per publisher in the same order, to fill gaps");
    sub->add_option("--topic", o->topic, "Subscribe to this topic (a prefix; default: all)");
    sub->add_option("--record", o->record, "Record to a session file (.kvs)");
    sub->add_option("--duration", o->duration, "Stop after this many seconds (default: Ctrl-C)")
        ->check(CLI::Range(0.0, 1e7));
    sub->add_option("--summary-json", o->summary_json, "Write per-publisher counts as JSON here");
    sub->add_option("--blocks-per-rank", o->blocks_per_rank,
                    "Most blocks tracked per publisher at once (the session's pool share)")
        ->check(CLI::Range(1, 1 << 22));
    sub->add_option("--tick-ms", o->tick_ms, "Length of one recorded step, in milliseconds")
        ->check(CLI::Range(1, 60000));
    add_force_flag(*sub, o->force);
    return {sub, [o] { return run_attach(*o); }};
}

}  // namespace kvscope::app
