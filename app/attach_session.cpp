#include "app/attach_session.h"

#include <cstdio>
#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "base/output_file.h"
#include "base/terminal_text.h"

namespace kvscope::app {

namespace {
double per_second(int64_t n, double seconds) {
    return seconds > 0 ? static_cast<double>(n) / seconds : 0.0;
}

nlohmann::json names_json(const std::vector<attach::NameCount>& names) {
    nlohmann::json j = nlohmann::json::object();
    for (const attach::NameCount& n : names)
        j[n.name] = n.count;
    return j;
}

nlohmann::json groups_json(const std::vector<attach::GroupCounts>& groups) {
    nlohmann::json j = nlohmann::json::array();
    for (const attach::GroupCounts& g : groups)
        j.push_back({{"group_idx", g.group},
                     {"kind", g.kind},
                     {"sliding_window", g.sliding_window},
                     {"blocks_stored", g.blocks_stored},
                     {"blocks_removed", g.blocks_removed},
                     {"blocks_cached", g.held}});
    return j;
}

nlohmann::json notes_json(const std::vector<attach::PublisherNote>& notes) {
    nlohmann::json j = nlohmann::json::array();
    for (const attach::PublisherNote& n : notes)
        j.push_back({{"note", n.text}, {"count", n.count}});
    return j;
}

nlohmann::json stats_to_json(const std::vector<attach::PublisherStats>& stats,
                             int64_t shared_hashes_peak, double active_seconds, double seconds) {
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
                         {"oversized_batches", s.oversized},
                         {"unknown_event_types", names_json(s.unknown_event_names)},
                         {"unknown_field_names", names_json(s.unknown_field_names)},
                         {"unknown_media", names_json(s.unknown_media)},
                         {"malformed_reasons", names_json(s.malformed_reasons)},
                         {"groups", groups_json(s.groups)},
                         {"notes", notes_json(s.notes)},
                         {"removed_unknown", s.removed_unknown},
                         {"overflow", s.overflow},
                         {"joined_at_seq", s.joined_at_seq},
                         {"batches_after_end", s.batches_after_end},
                         {"after_end_cut_short", s.after_end_cut_short},
                         {"churn", s.churn},
                         {"churn_per_second", per_second(s.churn, seconds)},
                         {"blocks_stored_again", s.stored_again},
                         {"blocks_shared_peak", s.shared_peak}});
    }
    return {{"ranks", ranks},
            {"seconds", seconds},
            {"events", events},
            {"events_per_second", per_second(events, seconds)},
            {"hashes_shared_peak", shared_hashes_peak},
            {"active_seconds", active_seconds},
            {"events_per_active_second", per_second(events, active_seconds)}};
}
}  // namespace

int check_attach_outputs(const AttachFlags& f) {
    if (!f.record.empty() && f.record == f.summary_json)
        return fail("--record and --summary-json name the same file, " + f.record);
    for (const std::string& out : {f.record, f.summary_json})
        if (check_output(out, f.force, {})) return 1;
    return 0;
}

Result<std::unique_ptr<attach::Attacher>> create_attacher(
    const AttachFlags& f, const std::function<void()>& before_note) {
    attach::AttachOptions ao;
    ao.endpoints = f.endpoints;
    ao.replay_endpoints = f.replay;
    ao.topic = f.topic;
    ao.blocks_per_publisher = f.blocks_per_rank;
    ao.tick_ms = f.tick_ms;
    ao.max_message_bytes = static_cast<size_t>(f.max_message_bytes);
    auto attacher = attach::Attacher::create(ao);
    if (attacher)
        (*attacher)->set_note_sink([before_note](const std::string& line) {
            if (before_note) before_note();
            std::fprintf(stderr, "kvscope attach: %s\n", terminal_safe(line).c_str());
        });
    return attacher;
}

Result<std::unique_ptr<Recorder>> record_attached(const std::string& path,
                                                  const attach::Attacher& attacher, bool replace) {
    RecorderOptions ro;
    ro.replace_existing = replace;
    return Recorder::create(path, attacher.run_info(), ro);
}

void announce_attach(const AttachFlags& f, const std::string& how_it_ends) {
    std::fprintf(stderr, "kvscope attach: following %zu publisher%s%s; %s\n", f.endpoints.size(),
                 f.endpoints.size() == 1 ? "" : "s",
                 f.replay.empty() ? " (no replay: gaps cannot be filled)" : "",
                 how_it_ends.c_str());
}

std::string attach_progress(const std::vector<attach::PublisherStats>& stats, double seconds) {
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

int report_attach(const AttachFlags& f, const attach::Attacher& attacher,
                  const Status& recording_closed, const Status& followed, double seconds) {
    int rc = 0;
    if (!recording_closed)
        rc = fail(recording_closed.error().message);
    else if (!f.record.empty())
        std::fprintf(stderr, "kvscope attach: recorded %lld steps to %s\n",
                     static_cast<long long>(attacher.steps()), terminal_safe(f.record).c_str());
    if (!followed) rc = fail(followed.error().message);
    const auto stats = attacher.stats();
    std::printf("%-28s %5s %10s %9s %9s %8s %9s %9s %8s %8s %6s %7s %9s %9s\n", "publisher", "rank",
                "events", "stored", "removed", "cached", "churn", "churn/s", "again", "shared",
                "gaps", "filled", "lost", "malformed");
    for (const auto& s : stats)
        std::printf(
            "%-28s %5d %10lld %9lld %9lld %8lld %9lld %9.0f %8lld %8lld %6llu %7llu %9llu %9lld\n",
            terminal_safe(s.endpoint).c_str(), s.rank, static_cast<long long>(s.events),
            static_cast<long long>(s.blocks_stored), static_cast<long long>(s.blocks_removed),
            static_cast<long long>(s.blocks_cached), static_cast<long long>(s.churn),
            per_second(s.churn, seconds), static_cast<long long>(s.stored_again),
            static_cast<long long>(s.shared_peak), static_cast<unsigned long long>(s.gaps),
            static_cast<unsigned long long>(s.gaps_filled),
            static_cast<unsigned long long>(s.batches_lost),
            static_cast<long long>(s.malformed_frames + s.malformed_events));
    if (stats.size() > 1)
        std::printf("hashes held by several publishers at once, at most: %lld\n",
                    static_cast<long long>(attacher.shared_hashes_peak()));
    // Cache groups (vLLM's hybrid cache), when a publisher has more than one.
    for (const auto& s : stats) {
        if (s.groups.size() < 2) continue;
        for (const attach::GroupCounts& g : s.groups)
            std::printf("%-28s group %d%s%s%s: %lld stored, %lld removed, %lld cached\n",
                        terminal_safe(s.endpoint).c_str(), g.group, g.kind.empty() ? "" : " (",
                        terminal_safe(g.kind).c_str(), g.kind.empty() ? "" : ")",
                        static_cast<long long>(g.blocks_stored),
                        static_cast<long long>(g.blocks_removed), static_cast<long long>(g.held));
    }
    // Why: what each publisher sent that attach could not take in as sent.
    for (const auto& s : stats)
        for (const attach::PublisherNote& n : s.notes)
            std::printf("%-28s note: %s (%llu)\n", terminal_safe(s.endpoint).c_str(),
                        terminal_safe(n.text).c_str(), static_cast<unsigned long long>(n.count));
    for (const auto& s : stats) {
        if (s.batches_lost > 0)
            std::fprintf(stderr,
                         "kvscope attach: %s: %llu batches (about %llu events) lost and not "
                         "replayable; what it holds may be incomplete\n",
                         terminal_safe(s.endpoint).c_str(),
                         static_cast<unsigned long long>(s.batches_lost),
                         static_cast<unsigned long long>(s.events_lost));
        if (s.batches_after_end > 0)
            std::fprintf(stderr,
                         "kvscope attach: %s: %s%llu batches were published after the last one "
                         "taken in, still queued or dropped on the way when attach ended (not "
                         "recorded)\n",
                         terminal_safe(s.endpoint).c_str(),
                         s.after_end_cut_short ? "at least " : "",
                         static_cast<unsigned long long>(s.batches_after_end));
        if (s.overflow > 0)
            std::fprintf(stderr,
                         "kvscope attach: %s: %lld blocks not tracked: more than "
                         "--blocks-per-rank %d held at once\n",
                         terminal_safe(s.endpoint).c_str(), static_cast<long long>(s.overflow),
                         f.blocks_per_rank);
    }
    if (!f.summary_json.empty()) {
        Status w = write_output_file(
            f.summary_json,
            stats_to_json(stats, attacher.shared_hashes_peak(), attacher.active_seconds(), seconds)
                    .dump(2) +
                "\n",
            {.force = f.force, .inputs = {}});
        if (!w) rc = fail(w.error().message);
    }
    return rc;
}

}  // namespace kvscope::app
