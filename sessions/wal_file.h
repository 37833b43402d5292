#pragma once
// A session's write-ahead log ("<path>-wal"), looked at before SQLite is: SQLite folds in any
// log it finds beside a database, whatever database wrote it, and deletes one whose frames it
// cannot use when its last connection closes, so the log is judged first.

#include <string>

#include "base/result.h"

namespace kvscope {

std::string wal_path(const std::string& path);

// What the log beside a database holds, by SQLite's WAL format.
enum class WalContents {
    kNone,    // no log, or an empty one
    kUnused,  // no frame SQLite would use: its header's checksum fails, or its first frame's
              // salts or checksum are not its header's (a log restarted after a checkpoint and
              // cut off before its first new frame, a damaged one, one spliced from two). SQLite
              // folds nothing in and removes it; nothing of any database's is lost with it.
    kFrames,  // frames SQLite folds in
};

// What the log beside `path` holds. A log that cannot be this database's at all (not an SQLite
// log, an unknown version, pages of another size than the database's) is an error naming the
// log and what does not match: SQLite would drop it, and it may be another database's.
Result<WalContents> check_wal_belongs(const std::string& path);

// A database with a log beside it, or in WAL mode, can only be opened where SQLite may create
// and write files beside it ("-shm"). The error, when its folder cannot be written, names the
// folder and why, and says what to do: `verb` is what could not be done ("repair", "open").
Status check_wal_folder_writable(const std::string& path, const std::string& verb);

}  // namespace kvscope
