#pragma once
// The `.kvs` session file: SQLite, PRAGMA user_version = schema version; WAL while it is being
// recorded (as "<name>.part"), one self-contained file (journal DELETE) once finished.
//
// [SECTION] Tables (schema v2, one run per file)
//   meta(key TEXT PRIMARY KEY, value TEXT)       format, kvscope version, run info (JSON)...
//   strings(id INTEGER PRIMARY KEY, text TEXT)   interned event texts (metric names, pieces)
//   step(step INTEGER PRIMARY KEY, first_seq, last_seq, t_begin_ns, t_end_ns, n_events,
//        running, waiting, swapped, prefill_tokens, decode_tokens, blocks_used, blocks_cached,
//        fragmentation, internal_fragmentation, external_fragmentation, utilization,
//        prefix_hit_rate, step_seconds, schedule_ns .. sample_ns (phases), events BLOB,
//        weight_bytes, kv_read_bytes, kv_written_bytes, activation_bytes, ops_ns)
//        One row per engine step: the scalars every plot needs, and the step's events packed
//        by event_codec.h. Its primary key is the (run, step) index of the design.
//        Version 2 added the last five (bytes the step's ops moved, time they cover); version
//        1 files read as zeros there.
//   keyframe(step INTEGER PRIMARY KEY, seq INTEGER, state BLOB)
//        TimelineState at the end of `step` (TimelineState::serialize's binary form; files
//        from before it hold CBOR, which still loads), written whenever enough events have
//        passed since the previous one, so a seek replays a bounded number of events.
//   attention(id INTEGER PRIMARY KEY, step, request, layer, head, qpos, format, probs BLOB)
//        captured attention rows (format 1: u8 probabilities, 255 = 1.0), indexed by
//        (request, layer, head, qpos) once the recording is closed.

#include <cstdint>

namespace kvscope {

constexpr int32_t kSessionSchemaVersion = 2;
constexpr const char* kSessionFormat = "kvscope-session";

constexpr const char* kSessionSchemaSql = R"sql(
CREATE TABLE meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE strings(id INTEGER PRIMARY KEY, text TEXT NOT NULL);
CREATE TABLE step(
  step INTEGER PRIMARY KEY, first_seq INTEGER NOT NULL, last_seq INTEGER NOT NULL,
  t_begin_ns INTEGER, t_end_ns INTEGER, n_events INTEGER NOT NULL,
  running INTEGER, waiting INTEGER, swapped INTEGER, prefill_tokens INTEGER, decode_tokens INTEGER,
  blocks_used INTEGER, blocks_cached INTEGER, fragmentation REAL, internal_fragmentation REAL,
  external_fragmentation REAL, utilization REAL, prefix_hit_rate REAL, step_seconds REAL,
  schedule_ns INTEGER, prefill_ns INTEGER, decode_ns INTEGER, attention_ns INTEGER, mlp_ns INTEGER,
  sample_ns INTEGER, events BLOB NOT NULL, weight_bytes INTEGER, kv_read_bytes INTEGER,
  kv_written_bytes INTEGER, activation_bytes INTEGER, ops_ns INTEGER);
CREATE TABLE keyframe(step INTEGER PRIMARY KEY, seq INTEGER NOT NULL, state BLOB NOT NULL);
CREATE TABLE attention(
  id INTEGER PRIMARY KEY, step INTEGER NOT NULL, request INTEGER NOT NULL, layer INTEGER NOT NULL,
  head INTEGER NOT NULL, qpos INTEGER NOT NULL, format INTEGER NOT NULL, probs BLOB NOT NULL);
)sql";

// Built when the recording closes, not while it runs: maintaining it per row cost the engine
// more than the rows themselves. A file cut off by a crash lacks it; readers then scan.
constexpr const char* kSessionIndexSql =
    "CREATE INDEX IF NOT EXISTS attention_by_row ON attention(request, layer, head, qpos)";

}  // namespace kvscope
