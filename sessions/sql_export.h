#pragma once
// Exports a session into an SQLite database of typed tables, for SQL and pandas: one table per
// event kind named after it (token_evict, block_alloc, ...) with the kind's fields under their
// meaning (layer, kv_head, score, policy, reason...), and steps, requests and run beside them.
// docs/sql-export.md documents the schema and why it is a table per kind.

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.h"
#include "probes/event.h"

namespace kvscope {

class SessionReader;

struct SqlExportCounts {
    int64_t events = 0, steps = 0, requests = 0;
};

// Writes the whole session into the database at `db_path`, which must be a new, empty file (the
// caller owns naming it and renaming it into place: an OutputFile's temporary). One transaction,
// no journal: a failure leaves a file the caller throws away, never one it keeps. Messages name
// the output `shown_as` (the path the user gave), the input by its own path.
Result<SqlExportCounts> export_sqlite(SessionReader& reader, const std::string& db_path,
                                      const std::string& shown_as);

// The table an event kind's rows go to and its columns after seq_no, step and t_ns, as
// "name TYPE" pairs: what the tests and the documentation check against.
struct SqlColumn {
    std::string name, type;
};
std::vector<SqlColumn> sql_event_columns(EventKind kind);

}  // namespace kvscope
