#pragma once
// What a session file's schema may hold before anything is read from it. SQLite computes some
// values as they are read: a generated column, a view, a trigger, a virtual table, a column
// default for rows stored before the column, an index on an expression. A file of a few
// megabytes can define any of these to build gigabytes for every row a reader touches, and the
// table names alone do not show it: the columns of every table must be the ones kvscope writes.

#include <cstdint>
#include <string>

#include "base/result.h"
#include "sessions/sqlite_util.h"

namespace kvscope {

// Refuses, naming the first thing that is not kvscope's: a view, trigger or virtual table; a
// table of kvscope's whose columns differ from those of schema `version` (a v1 step table lacks
// the last five); an index on an expression or with a WHERE clause. Other plain tables and
// indexes are left alone: nothing reads them, and reading ours never computes them.
Status check_session_schema(SqliteDb& db, const std::string& path, int32_t version);

}  // namespace kvscope
