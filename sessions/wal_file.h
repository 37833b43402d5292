#pragma once
// A session's write-ahead log ("<path>-wal"), looked at before SQLite is: SQLite folds in any
// log it finds beside a database, whatever database wrote it, and deletes one whose frames it
// cannot use when its last connection closes, so the log is judged first.

#include <string>

#include "base/result.h"

namespace kvscope {

std::string wal_path(const std::string& path);

// Whether the log beside `path` (if any) can be this database's, by SQLite's WAL format: its
// header's magic, version and checksum, the database's page size, and its first frame's salts
// and checksum. A log that fails is another database's (or damaged): folding it in would fold
// nothing and delete it. The error names the log and what does not match.
Status check_wal_belongs(const std::string& path);

// A database with a log beside it, or in WAL mode, can only be opened where SQLite may create
// and write files beside it ("-shm"). The error, when its folder cannot be written, names the
// folder and why, and says what to do: `verb` is what could not be done ("repair", "open").
Status check_wal_folder_writable(const std::string& path, const std::string& verb);

}  // namespace kvscope
