#include "sessions/sql_export.h"

#include <array>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "sessions/session_reader.h"
#include "sessions/sqlite_util.h"

namespace kvscope {

namespace {
// What a column holds, decoded from the event: the raw fields, names for the enums the fields
// hold, the texts split where a kind packs two things into one, and the payloads' fields.
enum class Field : uint8_t {
    kRequest,
    kBlock,
    kA,
    kB,
    kC,
    kWide,
    kValue,
    kText,
    kTextBefore,   // "policy: reason" -> policy
    kTextAfter,    //                  -> reason
    kPhaseName,    // a
    kPreemptName,  // a
    kFinishName,   // b
    kMediumName,   // b
    kSlotFrom,     // wide >> 32
    kSlotTo,       // wide & 0xffffffff
    kOp,           // "op|kernel" -> op
    kKernel,       //            -> kernel
    kWeightBytes,
    kKvReadBytes,
    kKvWrittenBytes,
    kActivationBytes,
    kFlops,
    kHbmRead,
    kHbmWritten,
    kPayload,
    kParent,  // kv_stored's payload
    kTokenIds,
    kTokenPairs,
    kCacheGroup,
    kGroupKind,
    kSlidingWindow,
};

struct ColumnSpec {
    const char* name;
    const char* type;
    Field field;
};

constexpr const char* kInt = "INTEGER";
constexpr const char* kReal = "REAL";
constexpr const char* kTextType = "TEXT";
constexpr const char* kBlob = "BLOB";

// Each kind's columns, from the table in probes/event.h: one place says what a field means.
std::vector<ColumnSpec> kind_columns(EventKind kind) {
    using F = Field;
    switch (kind) {
        case EventKind::kStepBegin:
            return {{"scheduled_seqs", kInt, F::kA},
                    {"prefill_tokens", kInt, F::kB},
                    {"decode_tokens", kInt, F::kC}};
        case EventKind::kStepEnd:
            return {{"running", kInt, F::kA},
                    {"waiting", kInt, F::kB},
                    {"swapped", kInt, F::kC},
                    {"step_seconds", kReal, F::kValue}};
        case EventKind::kPhase:
            return {{"phase", kTextType, F::kPhaseName}, {"duration_ns", kInt, F::kWide}};
        case EventKind::kRequestArrive:
            return {{"request", kInt, F::kRequest},
                    {"prompt_tokens", kInt, F::kA},
                    {"max_tokens", kInt, F::kB},
                    {"n_samples", kInt, F::kC},
                    {"request_id", kTextType, F::kText}};
        case EventKind::kRequestAdmit:
            return {{"request", kInt, F::kRequest},
                    {"tokens_cached", kInt, F::kA},
                    {"resumed", kInt, F::kB}};
        case EventKind::kRequestFinish:
            return {{"request", kInt, F::kRequest},
                    {"generated_tokens", kInt, F::kA},
                    {"finish", kTextType, F::kFinishName}};
        case EventKind::kRequestReject:
            return {{"request", kInt, F::kRequest},
                    {"needed_blocks", kInt, F::kA},
                    {"pool_blocks", kInt, F::kB},
                    {"reason", kTextType, F::kText}};
        case EventKind::kBlockAlloc:
            return {{"request", kInt, F::kRequest},
                    {"block", kInt, F::kBlock},
                    {"logical_index", kInt, F::kA}};
        case EventKind::kBlockFree:
        case EventKind::kBlockShare:
            return {{"request", kInt, F::kRequest},
                    {"block", kInt, F::kBlock},
                    {"logical_index", kInt, F::kA},
                    {"refcount_after", kInt, F::kB}};
        case EventKind::kBlockHashed:
            return {{"block", kInt, F::kBlock},
                    {"logical_index", kInt, F::kA},
                    {"hash", kInt, F::kWide}};
        case EventKind::kCowCopy:
            return {{"request", kInt, F::kRequest},
                    {"block", kInt, F::kBlock},
                    {"logical_index", kInt, F::kA},
                    {"src_block", kInt, F::kB}};
        case EventKind::kPrefixHit:
            return {{"request", kInt, F::kRequest},
                    {"block", kInt, F::kBlock},
                    {"logical_index", kInt, F::kA},
                    {"tokens_reused", kInt, F::kB},
                    {"hash", kInt, F::kWide}};
        case EventKind::kPrefixMiss:
            return {{"request", kInt, F::kRequest},
                    {"logical_index", kInt, F::kA},
                    {"hash", kInt, F::kWide}};
        case EventKind::kBlockEvict:
            return {{"block", kInt, F::kBlock},
                    {"hash", kInt, F::kWide},
                    {"reason", kTextType, F::kText}};
        case EventKind::kTokenEvict:
            return {{"request", kInt, F::kRequest},
                    {"block", kInt, F::kBlock},
                    {"layer", kInt, F::kA},
                    {"kv_head", kInt, F::kB},
                    {"position", kInt, F::kC},
                    {"slot", kInt, F::kWide},
                    {"score", kReal, F::kValue},
                    {"policy", kTextType, F::kTextBefore},
                    {"reason", kTextType, F::kTextAfter}};
        case EventKind::kTokenPrecision:
            return {{"request", kInt, F::kRequest},
                    {"block", kInt, F::kBlock},
                    {"layer", kInt, F::kA},
                    {"kv_head", kInt, F::kB},
                    {"position", kInt, F::kC},
                    {"slot", kInt, F::kWide},
                    {"normalized_attention", kReal, F::kValue},
                    {"change", kTextType, F::kText}};
        case EventKind::kLayerMerge:
            return {{"request", kInt, F::kRequest},  {"lower_layer", kInt, F::kA},
                    {"tokens_merged", kInt, F::kB},  {"tokens_retained", kInt, F::kC},
                    {"bytes_saved", kInt, F::kWide}, {"max_distance", kReal, F::kValue},
                    {"what", kTextType, F::kText}};
        case EventKind::kTokenMove:
            return {{"request", kInt, F::kRequest}, {"block", kInt, F::kBlock},
                    {"layer", kInt, F::kA},         {"kv_head", kInt, F::kB},
                    {"position", kInt, F::kC},      {"from_slot", kInt, F::kSlotFrom},
                    {"to_slot", kInt, F::kSlotTo}};
        case EventKind::kPreempt:
            return {{"request", kInt, F::kRequest},
                    {"mode", kTextType, F::kPreemptName},
                    {"blocks_released", kInt, F::kB}};
        case EventKind::kSwapOut:
        case EventKind::kSwapIn:
            return {
                {"request", kInt, F::kRequest}, {"blocks", kInt, F::kA}, {"bytes", kInt, F::kWide}};
        case EventKind::kAttentionRow:
            return {{"request", kInt, F::kRequest},
                    {"layer", kInt, F::kA},
                    {"head", kInt, F::kB},
                    {"query_pos", kInt, F::kC},
                    {"probs", kBlob, F::kPayload}};
        case EventKind::kToken:
            return {{"request", kInt, F::kRequest},
                    {"position", kInt, F::kA},
                    {"token_id", kInt, F::kB},
                    {"is_prompt", kInt, F::kC},
                    {"piece", kTextType, F::kText}};
        case EventKind::kKernel:
            return {{"layer", kInt, F::kA},
                    {"threads", kInt, F::kB},
                    {"lane", kInt, F::kC},
                    {"duration_ns", kInt, F::kWide},
                    {"copy_bytes", kReal, F::kValue},
                    {"op", kTextType, F::kOp},
                    {"kernel", kTextType, F::kKernel},
                    {"weight_bytes", kInt, F::kWeightBytes},
                    {"kv_read_bytes", kInt, F::kKvReadBytes},
                    {"kv_written_bytes", kInt, F::kKvWrittenBytes},
                    {"activation_bytes", kInt, F::kActivationBytes},
                    {"flops", kInt, F::kFlops}};
        case EventKind::kHbmSample:
            return {{"end_ns", kInt, F::kWide},
                    {"bytes", kReal, F::kValue},
                    {"read_bytes", kInt, F::kHbmRead},
                    {"written_bytes", kInt, F::kHbmWritten}};
        case EventKind::kMetric:
            return {{"name", kTextType, F::kText}, {"value", kReal, F::kValue}};
        case EventKind::kKvStored:
            return {{"block", kInt, F::kBlock},
                    {"publisher", kInt, F::kA},
                    {"medium", kTextType, F::kMediumName},
                    {"tokens", kInt, F::kC},
                    {"hash", kInt, F::kWide},
                    {"parent", kInt, F::kParent},
                    {"token_ids", kTextType, F::kTokenIds},
                    {"token_pairs", kInt, F::kTokenPairs},
                    {"cache_group", kInt, F::kCacheGroup},
                    {"group_kind", kTextType, F::kGroupKind},
                    {"sliding_window", kInt, F::kSlidingWindow}};
        case EventKind::kKvRemoved:
            return {{"block", kInt, F::kBlock},
                    {"publisher", kInt, F::kA},
                    {"medium", kTextType, F::kMediumName},
                    {"refs_after", kInt, F::kC},
                    {"hash", kInt, F::kWide}};
        case EventKind::kKvCleared:
            return {{"publisher", kInt, F::kA}, {"blocks_freed", kInt, F::kC}};
        case EventKind::kKvGap:
            return {{"publisher", kInt, F::kA},
                    {"filled", kInt, F::kB},
                    {"batches", kInt, F::kC},
                    {"first_seq", kInt, F::kWide},
                    {"lost", kTextType, F::kText}};
    }
    return {};
}

std::string_view preempt_mode_name(int32_t a) {
    return a == static_cast<int32_t>(PreemptMode::kSwap) ? "swap" : "recompute";
}

std::string_view finish_name(int32_t b) {
    switch (static_cast<FinishReason>(b)) {
        case FinishReason::kLength:
            return "length";
        case FinishReason::kEndToken:
            return "end_token";
        case FinishReason::kContextFull:
            return "context_full";
    }
    return "unknown";
}

// One kind's insert and the decoding its columns need, bound column by column, kRowsPerInsert
// rows to a statement: executing one statement per event cost more than the rows themselves.
// Texts from the session's string table are bound in place (SQLITE_STATIC: the reader holds
// them to the end); what is decoded per event is copied. 64 rows of at most 15 parameters stay
// within the 999 parameters a statement may have in SQLite before 3.32.
constexpr int kRowsPerInsert = 64;

class KindTable {
  public:
    KindTable(EventKind kind, SqliteStatement insert)
        : kind_(kind),
          columns_(kind_columns(kind)),
          row_params_(3 + static_cast<int>(columns_.size())),
          insert_(std::move(insert)) {
        for (const ColumnSpec& c : columns_) {
            needs_payload_ = needs_payload_ || c.field >= Field::kHbmRead;
        }
    }

    // INSERT INTO kind SELECT * FROM (VALUES (?, ...), ...) WHERE column1 IS NOT NULL: a last
    // batch that is not full leaves its unused rows' seq_no NULL.
    static std::string insert_sql(EventKind kind) {
        std::string values;
        for (int r = 0; r < kRowsPerInsert; ++r) {
            std::string one;
            for (size_t i = 0; i < kind_columns(kind).size(); ++i)
                one += ",?";
            values += std::string(r ? "," : "") + "(?,?,?" + one + ")";
        }
        return "INSERT INTO " + std::string(event_kind_name(kind)) + " SELECT * FROM (VALUES " +
               values + ") WHERE column1 IS NOT NULL";
    }

    Status add(const Event& e, const SharedText& text) {
        sqlite3_stmt* s = insert_.get();
        const int base = pending_ * row_params_;
        sqlite3_bind_int64(s, base + 1, static_cast<int64_t>(e.seq_no));
        sqlite3_bind_int64(s, base + 2, e.step);
        sqlite3_bind_int64(s, base + 3, e.t_ns);
        if (needs_payload_) decode_payload(e);
        std::string_view t = text.view();
        int i = base + 4;
        for (const ColumnSpec& c : columns_)
            bind(s, i++, c.field, e, t);
        return ++pending_ == kRowsPerInsert ? run() : Status{};
    }

    // Writes the rows of a batch not yet full.
    Status flush() {
        if (pending_ == 0) return {};
        for (int r = pending_; r < kRowsPerInsert; ++r)
            sqlite3_bind_null(insert_.get(), r * row_params_ + 1);
        return run();
    }

  private:
    Status run() {
        Status err = insert_.step_done();
        sqlite3_reset(insert_.get());
        pending_ = 0;
        return err;
    }
    static void bind_view(sqlite3_stmt* s, int i, std::string_view v) {
        sqlite3_bind_text(s, i, v.data(), static_cast<int>(v.size()), SQLITE_STATIC);
    }
    static void bind_or_null(sqlite3_stmt* s, int i, std::string_view v) {
        v.empty() ? (void)sqlite3_bind_null(s, i) : bind_view(s, i, v);
    }
    static void bind_copy(sqlite3_stmt* s, int i, std::string_view v) {
        sqlite3_bind_text(s, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    }
    static std::string_view before(std::string_view t) {
        size_t at = t.find(": ");
        return at == std::string_view::npos ? t : t.substr(0, at);
    }
    static std::string_view after(std::string_view t) {
        size_t at = t.find(": ");
        return at == std::string_view::npos ? std::string_view() : t.substr(at + 2);
    }

    void decode_payload(const Event& e) {
        hbm_ = {};
        stored_ = {};
        token_ids_.clear();
        if (kind_ == EventKind::kHbmSample) hbm_ok_ = decode_hbm_bytes(e.payload, hbm_);
        if (kind_ == EventKind::kKvStored) {
            stored_ok_ = decode_stored_block(e.payload, stored_);
            for (int32_t id : stored_.tokens)
                token_ids_ += (token_ids_.empty() ? "" : " ") + std::to_string(id);
        }
    }

    void bind(sqlite3_stmt* s, int i, Field f, const Event& e, std::string_view t) {
        switch (f) {
            case Field::kRequest:
                sqlite3_bind_int(s, i, e.request);
                break;
            case Field::kBlock:
                sqlite3_bind_int(s, i, e.block);
                break;
            case Field::kA:
                sqlite3_bind_int(s, i, e.a);
                break;
            case Field::kB:
                sqlite3_bind_int(s, i, e.b);
                break;
            case Field::kC:
                sqlite3_bind_int(s, i, e.c);
                break;
            case Field::kWide:
                sqlite3_bind_int64(s, i, e.wide);
                break;
            case Field::kValue:
                sqlite3_bind_double(s, i, e.value);
                break;
            case Field::kText:
                bind_view(s, i, t);
                break;
            case Field::kTextBefore:
                bind_view(s, i, before(t));
                break;
            case Field::kTextAfter:
                bind_view(s, i, after(t));
                break;
            case Field::kPhaseName:
                bind_view(s, i, phase_name(static_cast<Phase>(e.a)));
                break;
            case Field::kPreemptName:
                bind_view(s, i, preempt_mode_name(e.a));
                break;
            case Field::kFinishName:
                bind_view(s, i, finish_name(e.b));
                break;
            case Field::kMediumName:
                bind_view(s, i, kv_medium_name(static_cast<KvMedium>(e.b)));
                break;
            case Field::kSlotFrom:
                sqlite3_bind_int64(s, i, static_cast<int64_t>(static_cast<uint64_t>(e.wide) >> 32));
                break;
            case Field::kSlotTo:
                sqlite3_bind_int64(s, i, e.wide & 0xffffffff);
                break;
            // A host op's text is the op; a GPU's is "op|kernel" or the kernel alone.
            case Field::kOp:
                bind_or_null(s, i, e.c == kHostLane ? t : split_gpu_kernel_text(t).op);
                break;
            case Field::kKernel:
                bind_or_null(
                    s, i, e.c == kHostLane ? std::string_view() : split_gpu_kernel_text(t).kernel);
                break;
            case Field::kWeightBytes:
                sqlite3_bind_int64(s, i, e.cost.weight_bytes);
                break;
            case Field::kKvReadBytes:
                sqlite3_bind_int64(s, i, e.cost.kv_read_bytes);
                break;
            case Field::kKvWrittenBytes:
                sqlite3_bind_int64(s, i, e.cost.kv_written_bytes);
                break;
            case Field::kActivationBytes:
                sqlite3_bind_int64(s, i, e.cost.activation_bytes);
                break;
            case Field::kFlops:
                sqlite3_bind_int64(s, i, e.cost.flops);
                break;
            // A payload that does not decode leaves its columns NULL: the row still counts.
            case Field::kHbmRead:
                hbm_ok_ ? sqlite3_bind_int64(s, i, hbm_.read) : sqlite3_bind_null(s, i);
                break;
            case Field::kHbmWritten:
                hbm_ok_ ? sqlite3_bind_int64(s, i, hbm_.written) : sqlite3_bind_null(s, i);
                break;
            case Field::kPayload:
                if (e.payload.empty())
                    sqlite3_bind_null(s, i);
                else
                    sqlite3_bind_blob64(s, i, e.payload.data(), e.payload.size(), SQLITE_TRANSIENT);
                break;
            case Field::kParent:
                if (stored_ok_ && stored_.has_parent)
                    sqlite3_bind_int64(s, i, static_cast<int64_t>(stored_.parent));
                else
                    sqlite3_bind_null(s, i);
                break;
            case Field::kTokenIds:
                stored_ok_ ? bind_copy(s, i, token_ids_) : (void)sqlite3_bind_null(s, i);
                break;
            case Field::kTokenPairs:
                stored_ok_ ? sqlite3_bind_int(s, i, stored_.token_pairs ? 1 : 0)
                           : sqlite3_bind_null(s, i);
                break;
            case Field::kCacheGroup:
                stored_ok_&& stored_.group >= 0 ? sqlite3_bind_int(s, i, stored_.group)
                                                : sqlite3_bind_null(s, i);
                break;
            case Field::kGroupKind:
                stored_ok_ && !stored_.group_kind.empty() ? bind_copy(s, i, stored_.group_kind)
                                                          : (void)sqlite3_bind_null(s, i);
                break;
            case Field::kSlidingWindow:
                stored_ok_&& stored_.sliding_window >= 0
                    ? sqlite3_bind_int(s, i, stored_.sliding_window)
                    : sqlite3_bind_null(s, i);
                break;
        }
    }

    EventKind kind_;
    std::vector<ColumnSpec> columns_;
    int row_params_;
    SqliteStatement insert_;
    int pending_ = 0;
    bool needs_payload_ = false;
    HbmBytes hbm_;
    bool hbm_ok_ = false;
    StoredBlock stored_;
    bool stored_ok_ = false;
    std::string token_ids_;
};

constexpr const char* kStepsSql = R"sql(
CREATE TABLE steps(
  step INTEGER PRIMARY KEY, first_seq INTEGER, last_seq INTEGER, t_begin_ns INTEGER,
  t_end_ns INTEGER, n_events INTEGER, running INTEGER, waiting INTEGER, swapped INTEGER,
  prefill_tokens INTEGER, decode_tokens INTEGER, blocks_used INTEGER, blocks_cached INTEGER,
  fragmentation REAL, internal_fragmentation REAL, external_fragmentation REAL, utilization REAL,
  prefix_hit_rate REAL, step_seconds REAL, schedule_ns INTEGER, prefill_ns INTEGER,
  decode_ns INTEGER, attention_ns INTEGER, mlp_ns INTEGER, sample_ns INTEGER,
  weight_bytes INTEGER, kv_read_bytes INTEGER, kv_written_bytes INTEGER,
  activation_bytes INTEGER, ops_ns INTEGER);
CREATE TABLE run(key TEXT PRIMARY KEY, value);
)sql";

// Made from the request_* tables once they are filled: one row per request index.
constexpr const char* kRequestsSql = R"sql(
CREATE TABLE requests(
  request INTEGER PRIMARY KEY, request_id TEXT, arrive_step INTEGER, prompt_tokens INTEGER,
  max_tokens INTEGER, admit_step INTEGER, finish_step INTEGER, generated_tokens INTEGER,
  finish TEXT, reject_reason TEXT);
INSERT INTO requests
  SELECT r.request, r.request_id, r.step, r.prompt_tokens, r.max_tokens,
    (SELECT min(step) FROM request_admit a WHERE a.request = r.request),
    f.step, f.generated_tokens, f.finish,
    (SELECT reason FROM request_reject j WHERE j.request = r.request)
  FROM (SELECT *, min(seq_no) FROM request_arrive GROUP BY request) r
  LEFT JOIN (SELECT *, max(seq_no) FROM request_finish GROUP BY request) f
    ON f.request = r.request;
)sql";

Status write_steps(SqliteDb& db, const std::vector<StepSummary>& steps) {
    std::string sql = "INSERT INTO steps VALUES(?";
    for (int i = 1; i < 30; ++i)
        sql += ",?";
    auto q = db.prepare(sql + ")");
    if (!q) return q.error();
    for (const StepSummary& s : steps) {
        int i = 1;
        for (int64_t v :
             {s.step, static_cast<int64_t>(s.first_seq), static_cast<int64_t>(s.last_seq),
              s.t_begin_ns, s.t_end_ns, int64_t{s.n_events}, int64_t{s.running}, int64_t{s.waiting},
              int64_t{s.swapped}, int64_t{s.prefill_tokens}, int64_t{s.decode_tokens},
              int64_t{s.blocks_used}, int64_t{s.blocks_cached}})
            q->bind_int(i++, v);
        for (double v : {s.fragmentation, s.internal_fragmentation, s.external_fragmentation,
                         s.utilization, s.prefix_hit_rate, s.step_seconds})
            q->bind_double(i++, v);
        for (int64_t v : s.phase_ns)
            q->bind_int(i++, v);
        for (int64_t v :
             {s.weight_bytes, s.kv_read_bytes, s.kv_written_bytes, s.activation_bytes, s.ops_ns})
            q->bind_int(i++, v);
        if (Status st = q->step_done(); !st) return st;
        q->reset();
    }
    return {};
}

Status write_run(SqliteDb& db, const SessionReader& reader) {
    const RunInfo& r = reader.info();
    auto q = db.prepare("INSERT INTO run VALUES(?, ?)");
    if (!q) return q.error();
    auto put = [&](const char* key, const nlohmann::json& v) -> Status {
        q->bind_text(1, key);
        if (v.is_string())
            q->bind_text(2, v.get<std::string>());
        else if (v.is_number_integer())
            q->bind_int(2, v.get<int64_t>());
        else if (v.is_number())
            q->bind_double(2, v.get<double>());
        else
            q->bind_text(2, v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
        Status s = q->step_done();
        q->reset();
        return s;
    };
    const std::pair<const char*, nlohmann::json> rows[] = {
        {"schema_version", reader.schema_version()},
        {"model", r.model},
        {"backend", r.backend},
        {"num_blocks", r.num_blocks},
        {"block_size", r.block_size},
        {"allocator", r.allocator},
        {"n_layers", r.n_layers},
        {"n_heads", r.n_heads},
        {"n_kv_heads", r.n_kv_heads},
        {"head_dim", r.head_dim},
        {"vocab_size", r.vocab_size},
        {"weight_bytes", r.weight_bytes},
        {"kv_bytes_per_block", r.kv_bytes_per_block},
        {"kv_dtype", r.kv_dtype},
        {"eviction_policy", r.eviction_policy},
        {"eviction_sinks", r.eviction_sinks},
        {"threads", r.threads},
        {"bandwidth_limit_gbps", r.bandwidth_limit_gbps()},
        {"publishers", r.publishers},
        {"options_json", r.options_json},
    };
    for (const auto& [key, value] : rows)
        if (Status s = put(key, value); !s) return s;
    return {};
}
}  // namespace

std::vector<SqlColumn> sql_event_columns(EventKind kind) {
    std::vector<SqlColumn> out;
    for (const ColumnSpec& c : kind_columns(kind))
        out.push_back({c.name, c.type});
    return out;
}

Result<SqlExportCounts> export_sqlite(SessionReader& reader, const std::string& db_path,
                                      const std::string& shown_as) {
    // One thread uses this connection: no mutex around every bind and step.
    auto opened =
        SqliteDb::open(db_path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX);
    if (!opened) return Error{"cannot write " + shown_as + ": " + opened.error().message};
    SqliteDb& db = *opened;
    // Every failure on the database is the output's, named as the user named it (not by the
    // temporary name it is written under).
    auto write_failed = [&] {
        return Error{"cannot write " + shown_as + ": " + sqlite_failure(db.get())};
    };
    // A new file the caller renames into place only when this returns: nothing needs a journal
    // or a sync per page, and the one transaction takes everything.
    if (!db.exec("PRAGMA journal_mode=OFF; PRAGMA synchronous=OFF; "
                 "PRAGMA locking_mode=EXCLUSIVE; PRAGMA temp_store=MEMORY; "
                 "PRAGMA cache_size=-8192; BEGIN"))
        return write_failed();
    std::string schema = kStepsSql, view;
    for (int k = 1; k < kNumEventKinds; ++k) {
        const auto kind = static_cast<EventKind>(k);
        const std::string name(event_kind_name(kind));
        std::string create =
            "CREATE TABLE " + name +
            "(seq_no INTEGER NOT NULL, step INTEGER NOT NULL, t_ns INTEGER NOT NULL";
        std::string request = "NULL", block = "NULL";
        for (const ColumnSpec& c : kind_columns(kind)) {
            create += std::string(", ") + c.name + " " + c.type;
            if (std::string_view(c.name) == "request") request = "request";
            if (std::string_view(c.name) == "block") block = "block";
        }
        // The index is kept as rows come: events arrive in step order, so each entry goes at
        // the end of the index, cheaper than sorting them all once the rows are in.
        schema += create + ");\nCREATE INDEX " + name + "_by_step ON " + name + "(step);\n";
        view += std::string(view.empty() ? "" : " UNION ALL ") + "SELECT '" + name +
                "' AS kind, seq_no, step, t_ns, " + request + " AS request, " + block +
                " AS block FROM " + name;
    }
    schema += "CREATE VIEW events AS " + view + ";\n";
    if (!db.exec(schema)) return write_failed();

    SqlExportCounts counts;
    {
        std::array<std::optional<KindTable>, kNumEventKinds> tables;
        for (int k = 1; k < kNumEventKinds; ++k) {
            const auto kind = static_cast<EventKind>(k);
            auto q = db.prepare(KindTable::insert_sql(kind));
            if (!q) return write_failed();
            tables[static_cast<size_t>(k)].emplace(kind, std::move(*q));
        }
        bool insert_failed = false;
        Status walked = reader.for_each_event(
            std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), {},
            [&](const Event& e, const SharedText& text) -> Status {
                auto k = static_cast<size_t>(e.kind);
                if (k == 0 || k >= tables.size()) return {};  // the reader refuses these already
                ++counts.events;
                Status s = tables[k]->add(e, text);
                insert_failed = !s;
                return s;
            });
        if (insert_failed) return write_failed();
        if (!walked) return walked.error();  // the input's: corrupt or truncated
        for (auto& t : tables)
            if (t && !t->flush()) return write_failed();
    }  // statements finalized before the transaction ends
    if (!write_steps(db, reader.steps()) || !write_run(db, reader)) return write_failed();
    counts.steps = static_cast<int64_t>(reader.steps().size());

    if (!db.exec(std::string(kRequestsSql) + "COMMIT;")) return write_failed();
    auto n = db.prepare("SELECT count(*) FROM requests");
    if (!n) return write_failed();
    Status err;
    if (n->next(err)) counts.requests = n->column_int(0);
    if (!err) return write_failed();
    return counts;
}

}  // namespace kvscope
