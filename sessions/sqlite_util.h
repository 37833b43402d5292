#pragma once
// Thin RAII wrappers over the SQLite C API that turn its error codes into Status values.

#include <sqlite3.h>

#include <cstdint>
#include <string>

#include "base/result.h"

namespace kvscope {

// SQLite's message for the last error on `db`, with the system's reason when there is one:
// "database or disk is full (no space left on device)".
std::string sqlite_failure(sqlite3* db);

class SqliteStatement {
  public:
    SqliteStatement() = default;
    explicit SqliteStatement(sqlite3_stmt* s) : stmt_(s) {}
    SqliteStatement(SqliteStatement&& o) noexcept : stmt_(o.stmt_) { o.stmt_ = nullptr; }
    SqliteStatement& operator=(SqliteStatement&& o) noexcept;
    ~SqliteStatement();

    void bind_int(int i, int64_t v) { sqlite3_bind_int64(stmt_, i, v); }
    void bind_double(int i, double v) { sqlite3_bind_double(stmt_, i, v); }
    void bind_text(int i, const std::string& v) {
        sqlite3_bind_text(stmt_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT);
    }
    void bind_blob(int i, const void* data, size_t n) {
        sqlite3_bind_blob64(stmt_, i, n ? data : "", n, SQLITE_TRANSIENT);
    }
    // SQLITE_ROW -> true, SQLITE_DONE -> false; errors set `error`.
    bool next(Status& error);
    Status step_done();
    void reset() {
        sqlite3_reset(stmt_);
        sqlite3_clear_bindings(stmt_);
    }
    int64_t column_int(int i) const { return sqlite3_column_int64(stmt_, i); }
    bool column_is_null(int i) const { return sqlite3_column_type(stmt_, i) == SQLITE_NULL; }
    double column_double(int i) const { return sqlite3_column_double(stmt_, i); }
    int column_type(int i) const { return sqlite3_column_type(stmt_, i); }
    std::string column_text(int i) const;
    const uint8_t* column_blob(int i, size_t& size) const;
    sqlite3_stmt* get() const { return stmt_; }

  private:
    sqlite3_stmt* stmt_ = nullptr;
};

class SqliteDb {
  public:
    SqliteDb() = default;
    SqliteDb(SqliteDb&& o) noexcept : db_(o.db_), path_(std::move(o.path_)) { o.db_ = nullptr; }
    SqliteDb& operator=(SqliteDb&& o) noexcept;
    ~SqliteDb();

    static Result<SqliteDb> open(const std::string& path, int flags);
    Status exec(const std::string& sql);
    Result<SqliteStatement> prepare(const std::string& sql);
    sqlite3* get() const { return db_; }
    const std::string& path() const { return path_; }
    Error error(const std::string& what) const;

  private:
    sqlite3* db_ = nullptr;
    std::string path_;
};

}  // namespace kvscope
