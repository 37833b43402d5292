#include "sessions/sqlite_util.h"

#include "base/input_file.h"

namespace kvscope {

std::string sqlite_failure(sqlite3* db) {
    if (!db) return "no database";
    std::string msg = sqlite3_errmsg(db);
    int code = sqlite3_errcode(db) & 0xff;
    int err = sqlite3_system_errno(db);
    if (err != 0 && (code == SQLITE_IOERR || code == SQLITE_FULL || code == SQLITE_CANTOPEN ||
                     code == SQLITE_READONLY))
        msg += " (" + errno_text(err) + ")";
    return msg;
}

SqliteStatement& SqliteStatement::operator=(SqliteStatement&& o) noexcept {
    if (this != &o) {
        sqlite3_finalize(stmt_);
        stmt_ = o.stmt_;
        o.stmt_ = nullptr;
    }
    return *this;
}

SqliteStatement::~SqliteStatement() {
    sqlite3_finalize(stmt_);
}

bool SqliteStatement::next(Status& error) {
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc != SQLITE_DONE)
        error = Error{"database error: " + sqlite_failure(sqlite3_db_handle(stmt_))};
    return false;
}

Status SqliteStatement::step_done() {
    int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_DONE || rc == SQLITE_ROW) return {};
    return Error{"database write failed: " + sqlite_failure(sqlite3_db_handle(stmt_))};
}

std::string SqliteStatement::column_text(int i) const {
    const unsigned char* t = sqlite3_column_text(stmt_, i);
    int n = sqlite3_column_bytes(stmt_, i);
    return t ? std::string(reinterpret_cast<const char*>(t), static_cast<size_t>(n))
             : std::string();
}

const uint8_t* SqliteStatement::column_blob(int i, size_t& size) const {
    const void* p = sqlite3_column_blob(stmt_, i);
    size = static_cast<size_t>(sqlite3_column_bytes(stmt_, i));
    return static_cast<const uint8_t*>(p);
}

SqliteDb& SqliteDb::operator=(SqliteDb&& o) noexcept {
    if (this != &o) {
        sqlite3_close_v2(db_);
        db_ = o.db_;
        path_ = std::move(o.path_);
        o.db_ = nullptr;
    }
    return *this;
}

SqliteDb::~SqliteDb() {
    sqlite3_close_v2(db_);
}

Result<SqliteDb> SqliteDb::open(const std::string& path, int flags) {
    SqliteDb d;
    d.path_ = path;
    int rc = sqlite3_open_v2(path.c_str(), &d.db_, flags, nullptr);
    if (rc != SQLITE_OK) {
        std::string msg = d.db_ ? sqlite_failure(d.db_) : "cannot open";
        return Error{path + ": " + msg};
    }
    sqlite3_busy_timeout(d.db_, 2000);
    return d;
}

Error SqliteDb::error(const std::string& what) const {
    return Error{path_ + ": " + what + ": " + sqlite_failure(db_)};
}

Status SqliteDb::exec(const std::string& sql) {
    char* err = nullptr;
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
        sqlite3_free(err);
        return Error{path_ + ": " + sqlite_failure(db_)};
    }
    return {};
}

Result<SqliteStatement> SqliteDb::prepare(const std::string& sql) {
    sqlite3_stmt* s = nullptr;
    if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &s, nullptr) != SQLITE_OK)
        return error("cannot prepare a query");
    return SqliteStatement(s);
}

}  // namespace kvscope
