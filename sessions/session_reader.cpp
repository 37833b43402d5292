#include "sessions/session_reader.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "base/input_file.h"
#include "base/json_input.h"
#include "base/terminal_text.h"
#include "sessions/bandwidth_json.h"
#include "sessions/event_codec.h"
#include "sessions/schema_check.h"
#include "sessions/session_schema.h"
#include "sessions/sqlite_util.h"
#include "sessions/wal_file.h"

namespace kvscope {

struct SessionReader::Impl {
    SqliteDb db;
    SqliteStatement step_events;
};

SessionReader::SessionReader() : impl_(std::make_unique<Impl>()) {}
SessionReader::~SessionReader() = default;

namespace {
constexpr const char* kRequiredTables[] = {"meta", "strings", "step", "keyframe", "attention"};

// Migrations from older schema versions, applied to an in-memory copy when needed. Version 1
// is the first; a v2 reader adds "1 -> 2" here.
Status migrate(SqliteDb&, int32_t from) {
    // Version 1 lacks the step table's byte columns: load_tail() reads them as zeros.
    if (from == kSessionSchemaVersion || from == 1) return {};
    return Error{"no migration from session schema version " + std::to_string(from)};
}

// The step table's columns a StepSummary holds, in read_step_summary's order (version 1 files
// lack the byte columns: read as zeros).
constexpr int kStepSummaryColumns = 30;
std::string step_summary_columns(int32_t schema_version) {
    return "step, first_seq, last_seq, t_begin_ns, t_end_ns, n_events, running, waiting, swapped, "
           "prefill_tokens, decode_tokens, blocks_used, blocks_cached, fragmentation, "
           "internal_fragmentation, external_fragmentation, utilization, prefix_hit_rate, "
           "step_seconds, schedule_ns, prefill_ns, decode_ns, attention_ns, mlp_ns, sample_ns, " +
           std::string(
               schema_version >= 2
                   ? "weight_bytes, kv_read_bytes, kv_written_bytes, activation_bytes, ops_ns"
                   : "0, 0, 0, 0, 0");
}

StepSummary read_step_summary(const SqliteStatement& q) {
    StepSummary s;
    int c = 0;
    s.step = q.column_int(c++);
    s.first_seq = static_cast<uint64_t>(q.column_int(c++));
    s.last_seq = static_cast<uint64_t>(q.column_int(c++));
    s.t_begin_ns = q.column_int(c++);
    s.t_end_ns = q.column_int(c++);
    for (int32_t* v : {&s.n_events, &s.running, &s.waiting, &s.swapped, &s.prefill_tokens,
                       &s.decode_tokens, &s.blocks_used, &s.blocks_cached})
        *v = static_cast<int32_t>(q.column_int(c++));
    for (double* v : {&s.fragmentation, &s.internal_fragmentation, &s.external_fragmentation,
                      &s.utilization, &s.prefix_hit_rate, &s.step_seconds})
        *v = q.column_double(c++);
    for (int64_t& ns : s.phase_ns)
        ns = q.column_int(c++);
    for (int64_t* v :
         {&s.weight_bytes, &s.kv_read_bytes, &s.kv_written_bytes, &s.activation_bytes, &s.ops_ns})
        *v = q.column_int(c++);
    return s;
}

// Decodes one step's blob, handing the events of `kinds` (all when empty) to `visit`.
Status visit_step_events(const std::string& path, int64_t step, const uint8_t* blob, size_t size,
                         const std::vector<SharedText>& strings,
                         const std::vector<EventKind>& kinds,
                         const SessionReader::EventVisit& visit) {
    Status stopped;
    std::string msg;
    bool ok = decode_events(
        blob, size, 0, step, strings,
        [&](const Event& e, const SharedText& text) {
            if (!kinds.empty() && std::find(kinds.begin(), kinds.end(), e.kind) == kinds.end())
                return true;
            stopped = visit(e, text);
            return stopped.ok();
        },
        msg);
    if (!stopped) return stopped;
    if (!ok) return Error{path + ": step " + std::to_string(step) + ": " + msg};
    return {};
}

// Appends `e` with its own copy of its text, counting what the list holds: refused past
// kMaxEventBytes, naming the steps being read.
Status hold_event(std::vector<Event>& out, size_t& held, const Event& e, const SharedText& text,
                  const std::string& path, int64_t first, int64_t last) {
    held += sizeof(Event) + text.size() + e.payload.size();
    if (held > SessionReader::kMaxEventBytes)
        return Error{path + ": " +
                     (first == last ? "step " + std::to_string(first) + " holds"
                                    : "steps " + std::to_string(first) + " to " +
                                          std::to_string(last) + " hold") +
                     " more than " + std::to_string(SessionReader::kMaxEventBytes >> 20) +
                     " MiB of events once decoded (a long text named over and over?), more than "
                     "kvscope holds at once"};
    out.push_back(e);
    out.back().text = text.str();
    return {};
}
}  // namespace

Result<std::unique_ptr<SessionReader>> SessionReader::open(const std::string& path,
                                                           bool step_summaries) {
    {
        auto fd = open_input_file(path, "session file");
        if (!fd) return fd.error();
        char magic[16] = {};
        if (::read(fd->get(), magic, 16) != 16 || std::string(magic, 15) != "SQLite format 3")
            return Error{path + ": not a kvscope session (not an SQLite file)"};
    }
    std::unique_ptr<SessionReader> r(new SessionReader());
    r->path_ = path;
    r->load_step_summaries_ = step_summaries;
    auto db = SqliteDb::open(path, SQLITE_OPEN_READONLY);
    if (!db) return db.error();
    r->impl_->db = std::move(db).value();
    SqliteDb& d = r->impl_->db;
    Status err;

    auto version = d.prepare("PRAGMA user_version");
    if (!version) {
        // A recording that did not finish, in a folder SQLite may not write beside it, is not
        // corrupt: say where it can be opened.
        if (Status s = check_wal_folder_writable(path, "open"); !s) return s.error();
        return Error{path + ": not a readable SQLite database (corrupt or truncated?)"};
    }
    if (!version->next(err))
        return Error{path +
                     ": corrupt database: " + (err.ok() ? "no version" : err.error().message)};
    r->schema_version_ = static_cast<int32_t>(version->column_int(0));
    for (const char* table : kRequiredTables) {
        auto q = d.prepare(
            std::string("SELECT 1 FROM sqlite_master WHERE type='table' AND name='") + table + "'");
        if (!q) return Error{path + ": corrupt database (cannot read its table list)"};
        if (!q->next(err)) {
            if (!err.ok()) return Error{path + ": corrupt database: " + err.error().message};
            if (r->schema_version_ == 0 && std::string(table) == "meta")
                return Error{path +
                             ": not a kvscope session (an SQLite file without kvscope tables)"};
            return Error{path + ": session is missing its '" + table + "' table"};
        }
    }
    if (r->schema_version_ > kSessionSchemaVersion)
        return Error{path + ": session schema version " + std::to_string(r->schema_version_) +
                     " is newer than this kvscope understands (" +
                     std::to_string(kSessionSchemaVersion) + "); open it with a newer kvscope"};
    if (r->schema_version_ >= 1)
        if (Status s = check_session_schema(d, path, r->schema_version_); !s) return s.error();
    auto meta = d.prepare("SELECT key, value FROM meta");
    if (!meta) return meta.error();
    std::string format, run_json;
    while (meta->next(err)) {
        std::string k = meta->column_text(0);
        if (k == "format") format = meta->column_text(1);
        if (k == "run") run_json = meta->column_text(1);
    }
    if (!err.ok()) return Error{path + ": corrupt database: " + err.error().message};
    if (format != kSessionFormat)
        return Error{path + ": not a kvscope session (meta.format is " + quote_for_message(format) +
                     ")"};
    if (r->schema_version_ < 1) return Error{path + ": session has no schema version (corrupt?)"};
    if (Status s = migrate(d, r->schema_version_); !s)
        return Error{path + ": " + s.error().message};

    auto parsed_run = parse_json(run_json);
    if (!parsed_run) return Error{path + ": session run info: " + parsed_run.error().message};
    if (!parsed_run->is_object()) return Error{path + ": session run info is not a JSON object"};
    const nlohmann::json& run = parsed_run.value();
    try {
        RunInfo& i = r->info_;
        // Read wide and range-checked: get<int32_t> would wrap 2^32 + 5 to 5 without a word.
        auto num_blocks = run.at("num_blocks").get<int64_t>();
        auto block_size = run.at("block_size").get<int64_t>();
        if (num_blocks < 0 || num_blocks > kMaxSessionBlocks || block_size <= 0 ||
            block_size > 65536)
            return Error{path + ": session run info has absurd pool dimensions (" +
                         std::to_string(num_blocks) + " blocks of " + std::to_string(block_size) +
                         " tokens; at most " + std::to_string(kMaxSessionBlocks) + " of 65536)"};
        i.num_blocks = static_cast<int32_t>(num_blocks);
        i.block_size = static_cast<int32_t>(block_size);
        i.allocator = run.value("allocator", "paged");
        i.model = run.value("model", "");
        i.backend = run.value("backend", "cpu");
        // The model's dimensions size what readers build (the heatmap's layers x heads, the
        // window's grids): a file's negative or absurd figures are refused here, where check,
        // inspect, export and the window all open it, rather than trusted by one of them.
        const struct {
            const char* key;
            int32_t* field;
            int64_t most;
        } dims[] = {{"n_layers", &i.n_layers, 4096},
                    {"n_heads", &i.n_heads, 4096},
                    {"n_kv_heads", &i.n_kv_heads, 4096},
                    {"head_dim", &i.head_dim, 65536},
                    {"vocab_size", &i.vocab_size, int64_t{1} << 26}};
        for (const auto& d : dims) {
            const int64_t v = run.value(d.key, int64_t{0});
            if (v < 0 || v > d.most)
                return Error{path + ": session run info has an absurd " + d.key + " (" +
                             std::to_string(v) + "; 0 to " + std::to_string(d.most) + ")"};
            *d.field = static_cast<int32_t>(v);
        }
        if (i.n_kv_heads > i.n_heads)
            return Error{path + ": session run info has more KV heads (" +
                         std::to_string(i.n_kv_heads) + ") than heads (" +
                         std::to_string(i.n_heads) + ")"};
        i.options_json = run.value("options", "");
        // The storing-less settings, when the run had any (older files have none).
        auto parsed_options = parse_json(i.options_json);
        if (parsed_options && parsed_options->is_object()) {
            const nlohmann::json& options = parsed_options.value();
            if (options.contains("policy") && options["policy"].is_string())
                i.eviction_policy = options["policy"].get<std::string>();
            if (options.contains("sinks") && options["sinks"].is_number_integer())
                i.eviction_sinks = options["sinks"].get<int32_t>();
            if (options.contains("kv_dtype") && options["kv_dtype"].is_string())
                i.kv_dtype = options["kv_dtype"].get<std::string>();
            if (options.contains("kv_cache") && options["kv_cache"].is_string())
                i.kv_cache = options["kv_cache"].get<std::string>() != "off";
        }
        i.weight_bytes = std::max<int64_t>(run.value("weight_bytes", int64_t{0}), 0);
        i.kv_bytes_per_block = std::max<int64_t>(run.value("kv_bytes_per_block", int64_t{0}), 0);
        i.threads = std::clamp(run.value("threads", 0), 0, 1 << 16);
        // The recording machine's bandwidth (absent in older files: unknown).
        if (auto bw = run.find("memory_bandwidth"); bw != run.end())
            i.bandwidth = bandwidth_from_json(*bw);
        // An attached deployment's publishers, each an equal share of the pool.
        if (auto pubs = run.find("publishers"); pubs != run.end()) {
            if (!pubs->is_array() || pubs->empty() || pubs->size() > kMaxPublishers ||
                i.num_blocks % static_cast<int32_t>(pubs->size()) != 0)
                return Error{path + ": session run info has a malformed publisher list"};
            for (const auto& p : *pubs)
                i.publishers.push_back(p.get<std::string>());
        }
    } catch (const std::exception& e) {
        return Error{path + ": session run info is incomplete: " + e.what()};
    }

    r->strings_.assign(1, SharedText());
    if (Status s = r->load_tail(); !s) return s.error();
    auto ev = d.prepare("SELECT step, events FROM step WHERE step > ? AND step <= ? ORDER BY step");
    if (!ev) return ev.error();
    r->impl_->step_events = std::move(ev).value();
    return r;
}

Status SessionReader::refresh() {
    return load_tail();
}

Status SessionReader::load_tail() {
    SqliteDb& d = impl_->db;
    Status err;
    auto strings = d.prepare("SELECT id, text FROM strings WHERE id >= ? ORDER BY id");
    if (!strings) return strings.error();
    strings->bind_int(1, static_cast<int64_t>(strings_.size()));
    while (strings->next(err)) {
        auto id = strings->column_int(0);
        if (id != static_cast<int64_t>(strings_.size()))
            return Error{path_ + ": session string table has gaps"};
        strings_.emplace_back(strings->column_text(1));
    }
    if (!err.ok()) return Error{path_ + ": corrupt database: " + err.error().message};

    // Two queries: SQLite answers a lone min() or max() on the key from the index, but scans
    // the whole table for both at once.
    for (auto [sql, out] : {std::pair{"SELECT min(step) FROM step", &first_step_},
                            std::pair{"SELECT max(step) FROM step", &last_step_}}) {
        auto q = d.prepare(sql);
        if (!q) return Error{path_ + ": session 'step' table is unreadable"};
        if (q->next(err) && !q->column_is_null(0)) *out = q->column_int(0);
        if (!err.ok()) return Error{path_ + ": corrupt database: " + err.error().message};
    }
    if (!load_step_summaries_) return load_keyframes();

    auto steps = d.prepare("SELECT " + step_summary_columns(schema_version_) +
                           " FROM step WHERE step > ? ORDER BY step");
    if (!steps) return Error{path_ + ": session 'step' table has the wrong columns"};
    steps->bind_int(1, steps_.empty() ? -1 : steps_.back().step);
    while (steps->next(err))
        steps_.push_back(read_step_summary(*steps));
    if (!err.ok()) return Error{path_ + ": corrupt database: " + err.error().message};
    return load_keyframes();
}

Status SessionReader::load_keyframes() {
    SqliteDb& d = impl_->db;
    Status err;
    auto kf = d.prepare("SELECT step, seq FROM keyframe WHERE step > ? ORDER BY step");
    if (!kf) return kf.error();
    kf->bind_int(1, keyframes_.empty() ? -1 : keyframes_.back().first);
    while (kf->next(err))
        keyframes_.emplace_back(kf->column_int(0), static_cast<uint64_t>(kf->column_int(1)));
    if (!err.ok()) return Error{path_ + ": corrupt database: " + err.error().message};

    return {};
}

Status SessionReader::apply_steps(TimelineState& state, int64_t after, int64_t up_to) {
    auto& q = impl_->step_events;
    q.reset();
    q.bind_int(1, after);
    q.bind_int(2, up_to);
    Status err;
    while (q.next(err)) {
        int64_t step = q.column_int(0);
        size_t n = 0;
        const uint8_t* blob = q.column_blob(1, n);
        Status s = visit_step_events(
            path_, step, blob, n, strings_, {},
            [&](const Event& e, const SharedText& text) -> Status {
                // A state built from events out of order or with some missing would be wrong
                // without looking wrong; `check` lists every such place.
                if (e.seq_no != state.last_seq_no + 1)
                    return Error{path_ + ": step " + std::to_string(step) + ": event " +
                                 std::to_string(e.seq_no) + " follows " +
                                 std::to_string(state.last_seq_no) +
                                 ": the session's events are out of order or missing (`kvscope "
                                 "check` lists the problems)"};
                state.apply(e, text);
                return {};
            });
        if (!s) {
            q.reset();
            return s;
        }
        state.step = std::max(state.step, step);
    }
    q.reset();
    if (!err.ok()) return Error{path_ + ": corrupt database: " + err.error().message};
    return {};
}

Result<const TimelineState*> SessionReader::state_at(int64_t step) {
    step = std::clamp<int64_t>(step, -1, std::max<int64_t>(last_step(), -1));
    // The keyframe at or before `step`.
    auto kf =
        std::upper_bound(keyframes_.begin(), keyframes_.end(), std::make_pair(step, UINT64_MAX));
    int64_t kf_step = kf == keyframes_.begin() ? -1 : std::prev(kf)->first;
    bool continue_cursor = cursor_ && cursor_->step <= step && cursor_->step >= kf_step;
    if (cursor_ && cursor_->step == step) return &*cursor_;
    if (!continue_cursor) {
        if (kf_step < 0) {
            cursor_.emplace(info_);
        } else {
            auto blob = keyframe_blob(kf_step);
            if (!blob) return blob.error();
            std::string msg;
            auto s = TimelineState::deserialize(blob.value(), info_, msg);
            if (!s)
                return Error{path_ + ": keyframe at step " + std::to_string(kf_step) + ": " + msg};
            cursor_ = std::move(*s);
        }
    }
    if (Status s = apply_steps(*cursor_, cursor_->step, step); !s) {
        cursor_.reset();
        return s.error();
    }
    cursor_->step = step;
    return &*cursor_;
}

Result<std::vector<uint8_t>> SessionReader::keyframe_blob(int64_t step) {
    auto q = impl_->db.prepare("SELECT state FROM keyframe WHERE step = ?");
    if (!q) return q.error();
    q->bind_int(1, step);
    Status err;
    if (!q->next(err))
        return Error{path_ + ": keyframe at step " + std::to_string(step) + " is missing"};
    size_t n = 0;
    const uint8_t* p = q->column_blob(0, n);
    return std::vector<uint8_t>(p, p + n);
}

Status SessionReader::for_each_event(int64_t first, int64_t last,
                                     const std::vector<EventKind>& kinds, const EventVisit& visit) {
    auto q = impl_->db.prepare(
        "SELECT step, events FROM step WHERE step >= ? AND step <= ? ORDER BY step");
    if (!q) return q.error();
    q->bind_int(1, first);
    q->bind_int(2, last);
    Status err;
    while (q->next(err)) {
        size_t n = 0;
        int64_t step = q->column_int(0);
        const uint8_t* blob = q->column_blob(1, n);
        if (Status s = visit_step_events(path_, step, blob, n, strings_, kinds, visit); !s)
            return s;
    }
    if (!err.ok()) return Error{path_ + ": corrupt database: " + err.error().message};
    return {};
}

Result<std::vector<Event>> SessionReader::events(int64_t first, int64_t last,
                                                 const std::vector<EventKind>& kinds) {
    std::vector<Event> out;
    size_t held = 0;
    Status s = for_each_event(first, last, kinds, [&](const Event& e, const SharedText& text) {
        return hold_event(out, held, e, text, path_, first, last);
    });
    if (!s) return s.error();
    return out;
}

Status SessionReader::for_each_step(const std::vector<EventKind>& kinds, const StepVisit& visit) {
    auto q = impl_->db.prepare("SELECT " + step_summary_columns(schema_version_) +
                               ", events FROM step ORDER BY step");
    if (!q) return Error{path_ + ": session 'step' table has the wrong columns"};
    Status err;
    std::vector<Event> events;
    while (q->next(err)) {
        const StepSummary step = read_step_summary(*q);
        size_t n = 0, held = 0;
        const uint8_t* blob = q->column_blob(kStepSummaryColumns, n);
        events.clear();
        if (!kinds.empty()) {
            Status s = visit_step_events(path_, step.step, blob, n, strings_, kinds,
                                         [&](const Event& e, const SharedText& text) {
                                             return hold_event(events, held, e, text, path_,
                                                               step.step, step.step);
                                         });
            if (!s) return s;
        }
        if (Status v = visit(step, events); !v) return v;
    }
    if (!err.ok()) return Error{path_ + ": corrupt database: " + err.error().message};
    return {};
}

Result<std::vector<AttentionRow>> SessionReader::attention(int32_t request, int32_t layer,
                                                           int32_t head, int64_t up_to_step,
                                                           int64_t after_step) {
    auto q = impl_->db.prepare(
        "SELECT step, qpos, probs FROM attention WHERE request = ? AND layer = ? AND head = ? AND "
        "step <= ? AND step > ? ORDER BY step, qpos");
    if (!q) return q.error();
    q->bind_int(1, request);
    q->bind_int(2, layer);
    q->bind_int(3, head);
    q->bind_int(4, up_to_step);
    q->bind_int(5, after_step);
    Status err;
    std::vector<AttentionRow> out;
    while (q->next(err)) {
        AttentionRow r;
        r.step = q->column_int(0);
        r.request = request;
        r.layer = layer;
        r.head = head;
        r.query_pos = static_cast<int32_t>(q->column_int(1));
        size_t n = 0;
        const uint8_t* p = q->column_blob(2, n);
        if (r.query_pos < 0 || n != static_cast<size_t>(r.query_pos) + 1)
            return Error{path_ + ": the attention row of request " + std::to_string(request) +
                         ", layer " + std::to_string(layer) + ", head " + std::to_string(head) +
                         " at query position " + std::to_string(r.query_pos) + " holds " +
                         std::to_string(n) + " probabilities, not " +
                         std::to_string(static_cast<int64_t>(r.query_pos) + 1) +
                         " (`kvscope check` lists every such row)"};
        r.probs.assign(p, p + n);
        out.push_back(std::move(r));
    }
    if (!err.ok()) return Error{path_ + ": corrupt database: " + err.error().message};
    return out;
}

Result<std::optional<int64_t>> SessionReader::first_attention_step() {
    auto q = impl_->db.prepare("SELECT min(step) FROM attention");
    if (!q) return q.error();
    Status err;
    std::optional<int64_t> out;
    if (q->next(err) && !q->column_is_null(0)) out = q->column_int(0);
    if (!err.ok()) return Error{path_ + ": corrupt database: " + err.error().message};
    return out;
}

Result<std::vector<std::pair<int32_t, int32_t>>> SessionReader::captured_heads() {
    auto q = impl_->db.prepare("SELECT DISTINCT layer, head FROM attention ORDER BY layer, head");
    if (!q) return q.error();
    Status err;
    std::vector<std::pair<int32_t, int32_t>> out;
    while (q->next(err))
        out.emplace_back(static_cast<int32_t>(q->column_int(0)),
                         static_cast<int32_t>(q->column_int(1)));
    if (!err.ok()) return Error{path_ + ": corrupt database: " + err.error().message};
    return out;
}

std::vector<int32_t> SessionReader::captured_requests(int32_t layer, int32_t head) {
    std::vector<int32_t> out;
    auto q = impl_->db.prepare(
        "SELECT DISTINCT request FROM attention WHERE layer = ? AND head = ? ORDER BY request");
    if (!q) return out;
    q->bind_int(1, layer);
    q->bind_int(2, head);
    Status err;
    while (q->next(err))
        out.push_back(static_cast<int32_t>(q->column_int(0)));
    return out;
}

}  // namespace kvscope
