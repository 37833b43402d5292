#include "sessions/session_check.h"

#include <sqlite3.h>

#include "sessions/session_reader.h"
#include "sessions/sqlite_util.h"

namespace kvscope {

namespace {
// Steps are 64-bit; past 2^53 the plots' doubles could no longer tell neighbours apart.
constexpr int64_t kMaxStep = int64_t{1} << 53;

bool names_block(EventKind k) {
    switch (k) {
        case EventKind::kBlockAlloc:
        case EventKind::kBlockFree:
        case EventKind::kBlockShare:
        case EventKind::kBlockHashed:
        case EventKind::kCowCopy:
        case EventKind::kPrefixHit:
        case EventKind::kBlockEvict:
        case EventKind::kTokenMove:
        case EventKind::kKvStored:
        case EventKind::kKvRemoved:
            return true;
        default:
            return false;
    }
}

// A token or block-table entry past the end of the request's list (the Timeline ignores it).
const char* skips_ahead(const TimelineState& state, const Event& e) {
    bool token = e.kind == EventKind::kToken;
    bool table =
        (e.kind == EventKind::kBlockAlloc || e.kind == EventKind::kBlockShare) && e.request >= 0;
    if (!token && !table) return nullptr;
    auto it = state.requests.find(e.request);
    size_t have = it == state.requests.end()
                      ? 0
                      : (token ? it->second.token_ids.size() : it->second.block_table.size());
    return e.a > static_cast<int64_t>(have) ? (token ? "token position" : "block-table entry")
                                            : nullptr;
}

// An attached deployment's block event: in its publisher's range, a medium kvscope names, a
// payload that decodes. The Timeline ignores what breaks these; check says so.
const char* bad_kv_event(const RunInfo& info, const Event& e) {
    if (e.kind != EventKind::kKvStored && e.kind != EventKind::kKvRemoved) return nullptr;
    if (info.publishers.empty()) return "is in a session that attached to no publisher";
    if (info.publisher_of(e.block) != e.a) return "names a block outside its publisher's range";
    if (e.b < 0 || e.b >= kNumKvMedia) return "names an unknown medium";
    StoredBlock stored;
    if (e.kind == EventKind::kKvStored && !decode_stored_block(e.payload, stored))
        return "has a payload that does not decode";
    return nullptr;
}

// The problems found, as many as a report lists (kMaxListed) kept and the rest counted: a
// damaged file can have a problem per event, millions of lines nobody reads.
class ProblemList {
  public:
    static constexpr size_t kMaxListed = 50;
    explicit ProblemList(std::vector<std::string>& out) : out_(out) {}
    // Ends the list with how many more there were.
    void finish() {
        if (more_ > 0) out_.push_back("... and " + std::to_string(more_) + " more problems");
        more_ = 0;
    }
    void add(std::string problem) {
        if (out_.size() < kMaxListed)
            out_.push_back(std::move(problem));
        else
            ++more_;
    }

  private:
    std::vector<std::string>& out_;
    size_t more_ = 0;
};

// Every captured attention row: one u8 probability per key 0..qpos, a layer and head the
// model has, a step the session has. The heatmap drops rows it cannot place; check says so.
void check_attention_rows(const std::string& path, SessionReader& r, ProblemList& problems) {
    auto db = SqliteDb::open(path, SQLITE_OPEN_READONLY);
    if (!db) return;
    auto q = db->prepare(
        "SELECT id, step, request, layer, head, qpos, format, length(probs) FROM attention");
    if (!q) {
        problems.add("the attention table is unreadable");
        return;
    }
    const RunInfo& info = r.info();
    Status err;
    int64_t bad = 0;
    std::string first;
    while (q->next(err)) {
        int64_t id = q->column_int(0), step = q->column_int(1), layer = q->column_int(3),
                head = q->column_int(4), qpos = q->column_int(5), format = q->column_int(6),
                len = q->column_int(7);
        std::string why;
        if (format != 1)
            why = "has format " + std::to_string(format) + " (1 is u8 probabilities)";
        else if (qpos < 0 || len != qpos + 1)
            why = "at query position " + std::to_string(qpos) + " holds " + std::to_string(len) +
                  " probabilities, not " + std::to_string(qpos + 1);
        else if (layer < 0 || layer >= info.n_layers || head < 0 || head >= info.n_heads)
            why = "names layer " + std::to_string(layer) + " head " + std::to_string(head) +
                  ", which the model (" + std::to_string(info.n_layers) + " layers of " +
                  std::to_string(info.n_heads) + " heads) does not have";
        else if (step < r.first_step() || step > r.last_step())
            why = "is at step " + std::to_string(step) + ", outside the session's steps";
        if (why.empty()) continue;
        if (bad++ == 0) first = "attention row " + std::to_string(id) + " " + why;
    }
    if (!err.ok()) problems.add("attention table: " + err.error().message);
    if (bad == 1) problems.add(first);
    if (bad > 1)
        problems.add(first + " (and " + std::to_string(bad - 1) + " more attention rows like it)");
}
}  // namespace

CheckReport check_session(const std::string& path) {
    CheckReport rep;
    auto reader = SessionReader::open(path);
    if (!reader) {
        rep.problems.push_back(reader.error().message);
        return rep;
    }
    rep.opened = true;
    SessionReader& r = **reader;
    ProblemList problems(rep.problems);
    {
        auto db = SqliteDb::open(path, SQLITE_OPEN_READONLY);
        if (db) {
            auto q = db->prepare("PRAGMA integrity_check");
            Status err;
            if (q) {
                while (q->next(err)) {
                    std::string line = q->column_text(0);
                    if (line != "ok") problems.add("sqlite integrity: " + line);
                }
            }
            if (!err.ok()) problems.add(err.error().message);
        }
    }
    rep.steps = static_cast<int64_t>(r.steps().size());
    rep.keyframes = static_cast<int64_t>(r.keyframes().size());
    uint64_t expect_seq = 1;
    int64_t prev_step = -1;
    TimelineState state(r.info());
    size_t next_keyframe = 0;
    const int32_t pool = r.info().num_blocks;
    for (const StepSummary& s : r.steps()) {
        if (s.step <= prev_step)
            problems.add("step " + std::to_string(s.step) + " is out of order");
        if (s.step < 0 || s.step > kMaxStep)
            problems.add("step " + std::to_string(s.step) + " is outside 0.." +
                         std::to_string(kMaxStep));
        prev_step = s.step;
        // One event at a time: a step may hold more events than fit in memory as a list.
        int64_t count = 0;
        uint64_t first_seq = 0, last_seq = 0;
        Status walked = r.for_each_event(
            s.step, s.step, {}, [&](const Event& e, const SharedText& text) -> Status {
                if (count++ == 0) first_seq = e.seq_no;
                last_seq = e.seq_no;
                if (names_block(e.kind) && (e.block < 0 || e.block >= pool))
                    problems.add("step " + std::to_string(s.step) + ": a " +
                                 std::string(event_kind_name(e.kind)) + " event names block " +
                                 std::to_string(e.block) + ", the pool holds " +
                                 std::to_string(pool));
                if (const char* why = bad_kv_event(r.info(), e))
                    problems.add("step " + std::to_string(s.step) + ": a " +
                                 std::string(event_kind_name(e.kind)) + " event " + why);
                if (const char* why = skips_ahead(state, e))
                    problems.add("step " + std::to_string(s.step) + ": request " +
                                 std::to_string(e.request) + "'s " + why +
                                 " skips ahead of what it holds");
                if (e.seq_no != expect_seq) {
                    problems.add("step " + std::to_string(s.step) + ": event " +
                                 std::to_string(e.seq_no) + " follows " +
                                 std::to_string(expect_seq - 1) + " (events lost or reordered)");
                    expect_seq = e.seq_no;
                }
                ++expect_seq;
                state.apply(e, text);
                return {};
            });
        if (!walked) problems.add(walked.error().message);
        rep.events += count;
        if (walked && count != s.n_events)
            problems.add("step " + std::to_string(s.step) + ": says " + std::to_string(s.n_events) +
                         " events, holds " + std::to_string(count));
        if (walked && count > 0 && (first_seq != s.first_seq || last_seq != s.last_seq))
            problems.add("step " + std::to_string(s.step) +
                         ": sequence range does not match its events");
        while (next_keyframe < r.keyframes().size() &&
               r.keyframes()[next_keyframe].first <= s.step) {
            auto [kstep, kseq] = r.keyframes()[next_keyframe++];
            if (kstep != s.step) {
                problems.add("keyframe at step " + std::to_string(kstep) + " has no step row");
                continue;
            }
            auto blob = r.keyframe_blob(kstep);
            std::string msg;
            auto kf = blob ? TimelineState::deserialize(blob.value(), r.info(), msg) : std::nullopt;
            if (!kf) {
                problems.add("keyframe at step " + std::to_string(kstep) + ": " +
                             (blob ? msg : blob.error().message));
                continue;
            }
            state.step = s.step;
            if (!(*kf == state) || kseq != state.last_seq_no)
                problems.add("keyframe at step " + std::to_string(kstep) +
                             " disagrees with the events before it");
        }
    }
    check_attention_rows(path, r, problems);
    problems.finish();
    return rep;
}

}  // namespace kvscope
