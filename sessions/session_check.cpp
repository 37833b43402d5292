#include "sessions/session_check.h"

#include <sqlite3.h>

#include "sessions/session_reader.h"
#include "sessions/sqlite_util.h"

namespace kvscope {

CheckReport check_session(const std::string& path) {
    CheckReport rep;
    auto reader = SessionReader::open(path);
    if (!reader) {
        rep.problems.push_back(reader.error().message);
        return rep;
    }
    rep.opened = true;
    SessionReader& r = **reader;
    {
        auto db = SqliteDb::open(path, SQLITE_OPEN_READONLY);
        if (db) {
            auto q = db->prepare("PRAGMA integrity_check");
            Status err;
            if (q) {
                while (q->next(err)) {
                    std::string line = q->column_text(0);
                    if (line != "ok") rep.problems.push_back("sqlite integrity: " + line);
                }
            }
            if (!err.ok()) rep.problems.push_back(err.error().message);
        }
    }
    rep.steps = static_cast<int64_t>(r.steps().size());
    rep.keyframes = static_cast<int64_t>(r.keyframes().size());
    uint64_t expect_seq = 1;
    int64_t prev_step = -1;
    TimelineState state(r.info());
    size_t next_keyframe = 0;
    for (const StepSummary& s : r.steps()) {
        if (s.step <= prev_step)
            rep.problems.push_back("step " + std::to_string(s.step) + " is out of order");
        prev_step = s.step;
        auto events = r.events(s.step, s.step);
        if (!events) {
            rep.problems.push_back(events.error().message);
            continue;
        }
        rep.events += static_cast<int64_t>(events->size());
        if (static_cast<int32_t>(events->size()) != s.n_events)
            rep.problems.push_back("step " + std::to_string(s.step) + ": says " +
                                   std::to_string(s.n_events) + " events, holds " +
                                   std::to_string(events->size()));
        for (const Event& e : *events) {
            if (e.seq_no != expect_seq) {
                rep.problems.push_back(
                    "step " + std::to_string(s.step) + ": event " + std::to_string(e.seq_no) +
                    " follows " + std::to_string(expect_seq - 1) + " (events lost or reordered)");
                expect_seq = e.seq_no;
            }
            ++expect_seq;
            state.apply(e);
        }
        if (!events->empty() &&
            (events->front().seq_no != s.first_seq || events->back().seq_no != s.last_seq))
            rep.problems.push_back("step " + std::to_string(s.step) +
                                   ": sequence range does not match its events");
        while (next_keyframe < r.keyframes().size() &&
               r.keyframes()[next_keyframe].first <= s.step) {
            auto [kstep, kseq] = r.keyframes()[next_keyframe++];
            if (kstep != s.step) {
                rep.problems.push_back("keyframe at step " + std::to_string(kstep) +
                                       " has no step row");
                continue;
            }
            auto blob = r.keyframe_blob(kstep);
            std::string msg;
            auto kf = blob ? TimelineState::deserialize(blob.value(), r.info(), msg) : std::nullopt;
            if (!kf) {
                rep.problems.push_back("keyframe at step " + std::to_string(kstep) + ": " +
                                       (blob ? msg : blob.error().message));
                continue;
            }
            state.step = s.step;
            if (!(*kf == state) || kseq != state.last_seq_no)
                rep.problems.push_back("keyframe at step " + std::to_string(kstep) +
                                       " disagrees with the events before it");
        }
    }
    if (rep.problems.size() > 50) {
        size_t more = rep.problems.size() - 50;
        rep.problems.resize(50);
        rep.problems.push_back("... and " + std::to_string(more) + " more problems");
    }
    return rep;
}

}  // namespace kvscope
