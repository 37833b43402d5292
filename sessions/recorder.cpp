#include "sessions/recorder.h"

#include <sqlite3.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <unordered_map>

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
    std::error_code ec;
    std::filesystem::remove(path, ec);
    std::filesystem::remove(path + "-wal", ec);
    std::filesystem::remove(path + "-shm", ec);
    std::unique_ptr<Recorder> r(new Recorder(path, options));
    Db& d = *r->db_;
    auto opened = SqliteDb::open(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    if (!opened) return opened.error();
    d.db = std::move(opened).value();
    for (const char* sql :
         {"PRAGMA journal_mode=WAL", "PRAGMA synchronous=NORMAL", "PRAGMA page_size=8192"}) {
        if (Status s = d.db.exec(sql); !s) return s.error();
    }
    if (Status s = d.db.exec("BEGIN"); !s) return s.error();
    if (Status s = d.db.exec(kSessionSchemaSql); !s) return s.error();
    nlohmann::json run = {
        {"num_blocks", info.num_blocks},     {"block_size", info.block_size},
        {"allocator", info.allocator},       {"model", info.model},
        {"backend", info.backend},           {"n_layers", info.n_layers},
        {"n_heads", info.n_heads},           {"n_kv_heads", info.n_kv_heads},
        {"head_dim", info.head_dim},         {"vocab_size", info.vocab_size},
        {"weight_bytes", info.weight_bytes}, {"kv_bytes_per_block", info.kv_bytes_per_block},
        {"options", info.options_json}};
    auto meta = d.db.prepare("INSERT INTO meta(key, value) VALUES(?, ?)");
    if (!meta) return meta.error();
    for (auto [k, v] :
         {std::pair<std::string, std::string>{"format", kSessionFormat},
          {"kvscope_version", "0.1.0"},
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
    auto prep = [&](SqliteStatement& st, const char* sql) -> Status {
        auto p = d.db.prepare(sql);
        if (!p) return p.error();
        st = std::move(p).value();
        return {};
    };
    if (Status s =
            prep(d.insert_step,
                 "INSERT INTO step VALUES(?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
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
    return r;
}

Recorder::~Recorder() {
    (void)close();
}

void Recorder::emit(Event&& event) {
    if (event.seq_no == 0) event.seq_no = next_seq_++;
    if (event.t_ns == 0) event.t_ns = host_now_ns();
    std::lock_guard lock(mutex_);
    queued_seq_ = event.seq_no;
    queue_.push_back(std::move(event));
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
    if (error_.ok()) error_ = db_->db.exec(kSessionIndexSql);
    if (error_.ok()) (void)db_->db.exec("PRAGMA wal_checkpoint(TRUNCATE)");
    // A finished recording is one self-contained file: readers (read-only) then leave no -wal or
    // -shm beside it. A recording cut off by a crash stays in WAL mode, which readers handle.
    if (error_.ok()) (void)db_->db.exec("PRAGMA journal_mode=DELETE");
    db_->db = {};
    return error_;
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
        Status s = batch.empty() ? Status{} : write_batch(batch);
        // A flush or close also writes the step still being gathered.
        if (final && s.ok() && !pending_step_.empty()) {
            std::vector<Event> last;
            last.swap(pending_step_);
            s = db_->db.exec("BEGIN");
            if (s.ok()) {
                s = write_step(last);
                Status c = db_->db.exec(s.ok() ? "COMMIT" : "ROLLBACK");
                if (s.ok()) s = c;
            }
        }
        batch.clear();
        std::lock_guard lock(mutex_);
        if (!s.ok() && error_.ok()) error_ = s;
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
    if (Status c = db_->db.exec(result.ok() ? "COMMIT" : "ROLLBACK"); result.ok() && !c) result = c;
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
    if (Status s = st.step_done(); !s) return s;
    st.reset();
    written_ += events.size();
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
