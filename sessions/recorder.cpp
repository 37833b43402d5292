#include "sessions/recorder.h"

#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "base/file_lock.h"
#include "base/input_file.h"
#include "base/output_file.h"
#include "base/version.h"
#include "sessions/bandwidth_json.h"
#include "sessions/event_codec.h"
#include "sessions/session_schema.h"
#include "sessions/sqlite_util.h"
#include "sessions/step_summary.h"

namespace kvscope {

struct Recorder::Db {
    SqliteDb db;
    SqliteStatement insert_step, insert_keyframe, insert_string, insert_attention;
    std::unordered_map<std::string, uint32_t> strings;
    std::vector<std::pair<uint32_t, std::string>> new_strings;
    EventEncoder encoder{[this](const std::string& s) { return intern(s); }};

    uint32_t intern(const std::string& s) {
        auto it = strings.find(s);
        if (it != strings.end()) return it->second;
        auto id = static_cast<uint32_t>(strings.size() + 1);
        strings.emplace(s, id);
        new_strings.emplace_back(id, s);
        return id;
    }
};

Recorder::Recorder(std::string path, const RecorderOptions& options)
    : path_(std::move(path)), options_(options), db_(std::make_unique<Db>()) {}

Result<std::unique_ptr<Recorder>> Recorder::create(const std::string& path, const RunInfo& info,
                                                   const RecorderOptions& options) {
    if (Status s = check_output_path(path, {.force = options.replace_existing}); !s)
        return s.error();
    std::unique_ptr<Recorder> r(new Recorder(path, options));
    r->part_path_ = path + ".part";
    const std::string& part = r->part_path_;
    auto locked = lock_file(part, /*create=*/true);
    if (!locked) {
        const std::string& m = locked.error().message;
        if (m.find("another kvscope") != std::string::npos)
            return Error{"another kvscope is recording to " + path + " right now (" + part +
                         " is locked)"};
        return locked.error();
    }
    r->part_lock_ = std::move(locked->fd);
    std::error_code ec;
    struct stat st {};
    bool leftover = !locked->created && ((fstat(r->part_lock_.get(), &st) == 0 && st.st_size > 0) ||
                                         std::filesystem::exists(part + "-wal", ec));
    if (leftover && !options.replace_existing)
        return Error{part +
                     " is left from a recording that did not finish: recover it with "
                     "`kvscope check --repair " +
                     part +
                     "`, move it away, or pass --force "
                     "to discard it"};
    // Ours now (locked; fresh, or a leftover the user asked to discard).
    std::filesystem::remove(part + "-wal", ec);
    std::filesystem::remove(part + "-shm", ec);
    if (ftruncate(r->part_lock_.get(), 0) != 0)
        return Error{"cannot write " + part + ": " + errno_text(errno)};
    // From here on a failure removes the part file again: it holds nothing of the user's.
    struct RemovePartOnFailure {
        Recorder* r;
        ~RemovePartOnFailure() {
            if (!r) return;
            r->db_->db = {};
            std::error_code e;
            for (const char* suffix : {"-wal", "-shm", ""})
                std::filesystem::remove(r->part_path_ + suffix, e);
        }
    } cleanup{r.get()};

    Db& d = *r->db_;
    auto opened = SqliteDb::open(part, SQLITE_OPEN_READWRITE);
    if (!opened) return opened.error();
    d.db = std::move(opened).value();
    // Schema and metadata are committed to the main file before WAL begins, so the file alone
    // is a session from the first moment (a copy taken mid-run without its -wal still opens).
    if (Status s = d.db.exec("PRAGMA page_size=8192"); !s) return s.error();
    if (Status s = d.db.exec("BEGIN"); !s) return s.error();
    if (Status s = d.db.exec(kSessionSchemaSql); !s) return s.error();
    nlohmann::json run = {
        {"num_blocks", info.num_blocks},     {"block_size", info.block_size},
        {"allocator", info.allocator},       {"model", info.model},
        {"backend", info.backend},           {"n_layers", info.n_layers},
        {"n_heads", info.n_heads},           {"n_kv_heads", info.n_kv_heads},
        {"head_dim", info.head_dim},         {"vocab_size", info.vocab_size},
        {"weight_bytes", info.weight_bytes}, {"kv_bytes_per_block", info.kv_bytes_per_block},
        {"options", info.options_json},      {"threads", info.threads}};
    if (info.bandwidth.known()) run["memory_bandwidth"] = bandwidth_to_json(info.bandwidth);
    if (!info.publishers.empty()) run["publishers"] = info.publishers;
    auto meta = d.db.prepare("INSERT INTO meta(key, value) VALUES(?, ?)");
    if (!meta) return meta.error();
    for (auto [k, v] :
         {std::pair<std::string, std::string>{"format", kSessionFormat},
          {"kvscope_version", kVersion},
          {"run", run.dump()},
          {"created_unix", std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                              std::chrono::system_clock::now().time_since_epoch())
                                              .count())}}) {
        meta->bind_text(1, k);
        meta->bind_text(2, v);
        if (Status s = meta->step_done(); !s) return s.error();
        meta->reset();
    }
    if (Status s = d.db.exec("PRAGMA user_version=" + std::to_string(kSessionSchemaVersion)); !s)
        return s.error();
    if (Status s = d.db.exec("COMMIT"); !s) return s.error();
    for (const char* sql : {"PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL"})
        if (Status s = d.db.exec(sql); !s) return s.error();
    auto prep = [&](SqliteStatement& st, const char* sql) -> Status {
        auto p = d.db.prepare(sql);
        if (!p) return p.error();
        st = std::move(p).value();
        return {};
    };
    if (Status s = prep(d.insert_step,
                        "INSERT INTO step "
                        "VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
        !s)
        return s.error();
    if (Status s = prep(d.insert_keyframe, "INSERT OR REPLACE INTO keyframe VALUES(?,?,?)"); !s)
        return s.error();
    if (Status s = prep(d.insert_string, "INSERT INTO strings VALUES(?,?)"); !s) return s.error();
    if (Status s = prep(d.insert_attention,
                        "INSERT INTO attention(step, request, layer, head, qpos, format, probs) "
                        "VALUES(?,?,?,?,?,?,?)");
        !s)
        return s.error();
    r->state_ = TimelineState(info);
    r->writer_ = std::thread([p = r.get()] { p->writer_loop(); });
    cleanup.r = nullptr;
    return r;
}

Recorder::~Recorder() {
    (void)close();
}

void Recorder::stamp(Event& event) {
    if (event.seq_no == 0) event.seq_no = next_seq_++;
    if (event.t_ns == 0) event.t_ns = host_now_ns();
}

void Recorder::emit(Event&& event) {
    stamp(event);
    std::lock_guard lock(mutex_);
    queued_seq_ = event.seq_no;
    queue_.push_back(std::move(event));
}

void Recorder::emit_all(std::vector<Event>& events) {
    for (Event& e : events)
        stamp(e);
    if (events.empty()) return;
    std::lock_guard lock(mutex_);
    queued_seq_ = events.back().seq_no;
    queue_.insert(queue_.end(), std::make_move_iterator(events.begin()),
                  std::make_move_iterator(events.end()));
}

Status Recorder::flush() {
    std::unique_lock lock(mutex_);
    if (!writer_.joinable()) return error_;
    uint64_t target = queued_seq_;
    flush_requested_ = true;
    wake_.notify_one();
    flushed_.wait(lock, [&] { return committed_seq_ >= target || !error_.ok() || stop_; });
    return error_;
}

Status Recorder::close() {
    {
        std::lock_guard lock(mutex_);
        if (!writer_.joinable()) return error_;
        stop_ = true;
    }
    wake_.notify_one();
    writer_.join();
    db_->insert_step = {};
    db_->insert_keyframe = {};
    db_->insert_string = {};
    db_->insert_attention = {};
    if (error_.ok()) error_ = finish_file();
    db_->db = {};
    if (!error_.ok()) {
        error_ = Error{error_.error().message + "; what was recorded up to step " +
                       std::to_string(last_step_written()) + " is in " + part_path_ +
                       " (`kvscope check --repair " + part_path_ + "`)"};
    }
    part_lock_.reset();
    return error_;
}

// The attention index, the WAL folded into the file, journal DELETE (readers then leave no
// -wal or -shm), the step count read back; then the rename that makes it the user's file.
Status Recorder::finish_file() {
    SqliteDb& db = db_->db;
    if (Status s = db.exec(kSessionIndexSql); !s) return s;
    auto checkpoint = db.prepare("PRAGMA wal_checkpoint(TRUNCATE)");
    if (!checkpoint) return checkpoint.error();
    Status err;
    if (!checkpoint->next(err) || checkpoint->column_int(0) != 0)
        return err.ok() ? db.error("cannot fold the write-ahead log into the file") : err;
    checkpoint.value() = {};
    // Everything is in the main file now. Leaving WAL mode fails while another program has
    // the file open (a second kvscope watching it); the file is complete either way, and the
    // empty -wal goes when that program closes it.
    (void)db.exec("PRAGMA journal_mode=DELETE");
    auto count = db.prepare("SELECT count(*), coalesce(max(step), -1) FROM step");
    if (!count) return count.error();
    if (!count->next(err)) return err.ok() ? db.error("cannot read the steps back") : err;
    if (count->column_int(0) != steps_written_ || count->column_int(1) != last_step_written())
        return Error{part_path_ + ": read back " + std::to_string(count->column_int(0)) +
                     " steps, wrote " + std::to_string(steps_written_)};
    count.value() = {};
    db = {};
    if (::rename(part_path_.c_str(), path_.c_str()) != 0)
        return Error{"cannot rename " + part_path_ + " to " + path_ + ": " + errno_text(errno)};
    sync_parent_folder(path_);
    return {};
}

uint64_t Recorder::events_written() const {
    return written_;
}

void Recorder::writer_loop() {
    // Below the engine's threads: when the cores are all busy decoding, the engine goes first and
    // the writer catches up in the gaps (it needs a few percent of one core).
    (void)setpriority(PRIO_PROCESS, static_cast<id_t>(syscall(SYS_gettid)), 10);
    std::vector<Event> batch;
    uint64_t taken = 0;  // highest seq_no the writer has taken off the queue
    auto last_checkpoint = std::chrono::steady_clock::now();
    for (;;) {
        bool final, stopping;
        {
            std::unique_lock lock(mutex_);
            wake_.wait_for(lock, std::chrono::milliseconds(options_.flush_interval_ms),
                           [&] { return stop_ || flush_requested_; });
            batch.swap(queue_);
            stopping = stop_;
            final = stop_ || flush_requested_;
            flush_requested_ = false;
        }
        if (!batch.empty()) taken = batch.back().seq_no;
        // After a failed write nothing more is written: the file keeps a gapless run of steps
        // up to the last committed batch, which `check` accepts.
        bool failed_before = failed();
        Status s = batch.empty() || failed_before ? Status{} : write_batch(batch);
        // A flush or close also writes the step still being gathered.
        if (final && s.ok() && !failed_before && !pending_step_.empty()) {
            std::vector<Event> last;
            last.swap(pending_step_);
            s = db_->db.exec("BEGIN");
            if (s.ok()) {
                s = write_step(last);
                s = end_transaction(s);
            }
        }
        batch.clear();
        // The main file follows the log about once a second, so a copy of it taken alone (no
        // -wal) mid-run is a session that lags by that much rather than an empty one. A failed
        // checkpoint loses nothing (the log still has it), but it is the first sign of a full
        // disk: it stops the recording like any failed write.
        auto now = std::chrono::steady_clock::now();
        if (s.ok() && !failed_before && now - last_checkpoint > std::chrono::seconds(1)) {
            s = db_->db.exec("PRAGMA wal_checkpoint(PASSIVE)");
            last_checkpoint = now;
        }
        std::lock_guard lock(mutex_);
        if (!s.ok() && error_.ok()) {
            error_ = s;
            failed_.store(true, std::memory_order_relaxed);
        }
        if (final) committed_seq_ = taken;
        flushed_.notify_all();
        if (stopping) return;
    }
}

Status Recorder::write_batch(std::vector<Event>& batch) {
    if (Status s = db_->db.exec("BEGIN"); !s) return s;
    Status result;
    for (Event& e : batch) {
        if (!pending_step_.empty() && e.step != pending_step_.front().step) {
            std::vector<Event> done;
            done.swap(pending_step_);
            result = write_step(done);
            if (!result) break;
        }
        pending_step_.push_back(std::move(e));
    }
    return end_transaction(result);
}

Status Recorder::end_transaction(Status result) {
    if (result.ok()) result = db_->db.exec("COMMIT");
    if (!result.ok()) {
        (void)db_->db.exec("ROLLBACK");
        steps_uncommitted_ = 0;
        return result;
    }
    steps_written_ += steps_uncommitted_;
    steps_uncommitted_ = 0;
    last_step_written_.store(last_step_uncommitted_);
    return result;
}

Status Recorder::write_step(std::vector<Event>& events) {
    Db& d = *db_;
    StepSummary sum;
    summarize_step(events, sum);
    d.encoder.clear();
    for (Event& e : events) {
        if (e.kind == EventKind::kAttentionRow) {
            // Rows go to their own table, queryable by request / layer / head / position.
            auto& st = d.insert_attention;
            st.bind_int(1, e.step);
            st.bind_int(2, e.request);
            st.bind_int(3, e.a);
            st.bind_int(4, e.b);
            st.bind_int(5, e.c);
            st.bind_int(6, 1);
            st.bind_blob(7, e.payload.data(), e.payload.size());
            if (Status s = st.step_done(); !s) return s;
            st.reset();
            e.payload.clear();  // the event itself stays in the step, without its data
        }
        d.encoder.add(e);
        state_.apply(e);
    }
    for (auto& [id, text] : d.new_strings) {
        d.insert_string.bind_int(1, id);
        d.insert_string.bind_text(2, text);
        if (Status s = d.insert_string.step_done(); !s) return s;
        d.insert_string.reset();
    }
    d.new_strings.clear();
    auto& st = d.insert_step;
    int i = 1;
    st.bind_int(i++, sum.step);
    st.bind_int(i++, static_cast<int64_t>(sum.first_seq));
    st.bind_int(i++, static_cast<int64_t>(sum.last_seq));
    st.bind_int(i++, sum.t_begin_ns);
    st.bind_int(i++, sum.t_end_ns);
    st.bind_int(i++, sum.n_events);
    st.bind_int(i++, sum.running);
    st.bind_int(i++, sum.waiting);
    st.bind_int(i++, sum.swapped);
    st.bind_int(i++, sum.prefill_tokens);
    st.bind_int(i++, sum.decode_tokens);
    st.bind_int(i++, sum.blocks_used);
    st.bind_int(i++, sum.blocks_cached);
    st.bind_double(i++, sum.fragmentation);
    st.bind_double(i++, sum.internal_fragmentation);
    st.bind_double(i++, sum.external_fragmentation);
    st.bind_double(i++, sum.utilization);
    st.bind_double(i++, sum.prefix_hit_rate);
    st.bind_double(i++, sum.step_seconds);
    for (int64_t ns : sum.phase_ns)
        st.bind_int(i++, ns);
    st.bind_blob(i++, d.encoder.bytes().data(), d.encoder.bytes().size());
    for (int64_t v : {sum.weight_bytes, sum.kv_read_bytes, sum.kv_written_bytes,
                      sum.activation_bytes, sum.ops_ns})
        st.bind_int(i++, v);
    if (Status s = st.step_done(); !s) return s;
    st.reset();
    written_ += events.size();
    ++steps_uncommitted_;
    last_step_uncommitted_ = sum.step;
    events_since_keyframe_ += static_cast<int64_t>(events.size());
    if (events_since_keyframe_ >= options_.keyframe_events) {
        auto blob = state_.serialize();
        d.insert_keyframe.bind_int(1, state_.step);
        d.insert_keyframe.bind_int(2, static_cast<int64_t>(state_.last_seq_no));
        d.insert_keyframe.bind_blob(3, blob.data(), blob.size());
        if (Status s = d.insert_keyframe.step_done(); !s) return s;
        d.insert_keyframe.reset();
        events_since_keyframe_ = 0;
    }
    return {};
}

}  // namespace kvscope
