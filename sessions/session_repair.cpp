#include "sessions/session_repair.h"

#include <sqlite3.h>
#include <unistd.h>

#include <filesystem>

#include "base/file_lock.h"
#include "base/input_file.h"
#include "sessions/schema_check.h"
#include "sessions/session_schema.h"
#include "sessions/sqlite_util.h"
#include "sessions/wal_file.h"

namespace kvscope {

Result<RepairReport> repair_session(const std::string& path) {
    {
        // A session at all? (and no FIFO: lock_file opens non-blocking but SQLite would not)
        auto fd = open_input_file(path, "session file");
        if (!fd) return fd.error();
        char magic[16] = {};
        if (::read(fd->get(), magic, 16) != 16 || std::string(magic, 15) != "SQLite format 3")
            return Error{path + ": not a kvscope session (not an SQLite file)"};
    }
    // Before SQLite opens the file: it would fold in another database's log or delete it, and
    // it writes beside the file to open it at all.
    auto wal_contents = check_wal_belongs(path);
    if (!wal_contents) return wal_contents.error();
    if (Status s = check_wal_folder_writable(path, "repair"); !s) return s.error();
    auto lock = lock_file(path, /*create=*/false);
    if (!lock) {
        if (lock.error().message.find("another kvscope") != std::string::npos)
            return Error{path + " is being recorded right now; repair it once that run has ended"};
        return lock.error();
    }
    RepairReport rep;
    std::error_code ec;
    std::string wal = wal_path(path);
    if (std::filesystem::exists(wal, ec)) {
        rep.had_wal = true;
        rep.wal_bytes = static_cast<long long>(std::filesystem::file_size(wal, ec));
        rep.wal_had_frames = *wal_contents == WalContents::kFrames;
    }
    auto opened = SqliteDb::open(path, SQLITE_OPEN_READWRITE);
    if (!opened) return opened.error();
    SqliteDb& db = opened.value();
    Status err;
    auto tables = db.prepare(
        "SELECT count(*) FROM sqlite_master WHERE type='table' AND name IN ('meta','attention')");
    if (!tables || !tables->next(err) || tables->column_int(0) != 2)
        return Error{path + ": not a kvscope session (or too damaged to repair: " +
                     (err.ok() ? std::string("its tables are missing") : err.error().message) +
                     ")"};
    tables.value() = {};
    auto version = db.prepare("PRAGMA user_version");
    if (!version || !version->next(err)) return db.error("cannot read its schema version");
    if (Status s = check_session_schema(db, path, static_cast<int32_t>(version->column_int(0))); !s)
        return s.error();
    version.value() = {};
    {
        auto index = db.prepare(
            "SELECT count(*) FROM sqlite_master WHERE type='index' AND name='attention_by_row'");
        if (index && index->next(err)) rep.added_index = index->column_int(0) == 0;
    }
    if (Status s = db.exec(kSessionIndexSql); !s) return s.error();
    auto checkpoint = db.prepare("PRAGMA wal_checkpoint(TRUNCATE)");
    if (!checkpoint) return checkpoint.error();
    if (!checkpoint->next(err) || checkpoint->column_int(0) != 0)
        return err.ok()
                   ? db.error("another program has the file open; close it and repair again")
                   : Error{"cannot fold the write-ahead log into " + path + ": " +
                           err.error().message + " (a full disk? free some space, repair again)"};
    checkpoint.value() = {};
    auto mode = db.prepare("PRAGMA journal_mode=DELETE");
    if (!mode) return mode.error();
    if (!mode->next(err) || mode->column_text(0) != "delete")
        return err.ok() ? db.error("another program has the file open; close it and repair again")
                        : err.error();
    return rep;
}

}  // namespace kvscope
