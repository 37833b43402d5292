#include "sessions/schema_check.h"

#include <algorithm>
#include <cctype>
#include <vector>

#include "sessions/session_schema.h"

namespace kvscope {

namespace {
constexpr const char* kTables[] = {"meta", "strings", "step", "keyframe", "attention"};
// The columns schema version 1's step table has: version 2 appended the rest.
constexpr size_t kStepColumnsV1 = 26;

// One row of PRAGMA table_xinfo: all that decides what reading the column computes.
struct Column {
    std::string name, type, default_value;
    bool not_null = false, has_default = false;
    int64_t primary_key = 0, hidden = 0;
    bool operator==(const Column&) const = default;
};

std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return s;
}

Result<std::vector<Column>> columns_of(SqliteDb& db, const std::string& table) {
    auto q = db.prepare(
        "SELECT name, type, \"notnull\", dflt_value, pk, hidden FROM "
        "pragma_table_xinfo(?)");
    if (!q) return q.error();
    q->bind_text(1, table);
    std::vector<Column> out;
    Status err;
    while (q->next(err)) {
        Column c;
        c.name = q->column_text(0);
        c.type = lower(q->column_text(1));
        c.not_null = q->column_int(2) != 0;
        c.has_default = !q->column_is_null(3);
        c.default_value = q->column_text(3);
        c.primary_key = q->column_int(4);
        c.hidden = q->column_int(5);
        out.push_back(std::move(c));
    }
    if (!err.ok()) return err.error();
    return out;
}

// The tables as kvscope creates them, read back from a database that holds only them.
Result<SqliteDb> reference_schema() {
    auto db = SqliteDb::open(":memory:", SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    if (!db) return db.error();
    if (Status s = db->exec(kSessionSchemaSql); !s) return s.error();
    return db;
}

// Why `column` is not what kvscope writes there, in words.
std::string what_differs(const Column& have, const Column* want) {
    if (!want) return "column '" + have.name + "' is not one kvscope writes";
    if (have.hidden == 2 || have.hidden == 3)
        return "column '" + have.name +
               "' is computed from an expression (GENERATED ALWAYS), which kvscope never writes";
    if (have.hidden != 0) return "column '" + have.name + "' is a hidden column";
    if (have.has_default)
        return "column '" + have.name + "' has a default value (" + have.default_value +
               "), which kvscope never writes";
    if (have.name != want->name)
        return "column '" + have.name + "' stands where kvscope writes '" + want->name + "'";
    return "column '" + have.name + "' is declared otherwise than kvscope writes it";
}
}  // namespace

Status check_session_schema(SqliteDb& db, const std::string& path, int32_t version) {
    auto refuse = [&](const std::string& why) {
        return Error{path + ": not a session kvscope reads: " + why +
                     " (a file kvscope wrote has none; it could make reading it build gigabytes)"};
    };
    auto objects = db.prepare("SELECT type, name, tbl_name, coalesce(sql, '') FROM sqlite_master");
    if (!objects) return Error{path + ": corrupt database (cannot read its table list)"};
    Status err;
    while (objects->next(err)) {
        const std::string type = objects->column_text(0), name = objects->column_text(1),
                          sql = lower(objects->column_text(3));
        if (type == "view" || type == "trigger")
            return refuse("it has a " + type + " ('" + name + "')");
        if (type == "table" && sql.rfind("create virtual table", 0) == 0)
            return refuse("it has a virtual table ('" + name + "')");
        if (type != "index") continue;
        auto index = db.prepare("SELECT partial FROM pragma_index_list(?) WHERE name = ?");
        auto keys = db.prepare("SELECT count(*) FROM pragma_index_xinfo(?) WHERE cid = -2");
        if (!index || !keys) return Error{path + ": corrupt database (cannot read its indexes)"};
        index->bind_text(1, objects->column_text(2));
        index->bind_text(2, name);
        keys->bind_text(1, name);
        if ((index->next(err) && index->column_int(0) != 0) ||
            (keys->next(err) && keys->column_int(0) != 0))
            return refuse("its index '" + name + "' is on an expression or has a WHERE clause");
    }
    if (!err.ok()) return Error{path + ": corrupt database: " + err.error().message};

    auto reference = reference_schema();
    if (!reference) return reference.error();
    for (const char* table : kTables) {
        auto want = columns_of(*reference, table);
        auto have = columns_of(db, table);
        if (!want) return want.error();
        if (!have) return Error{path + ": corrupt database: " + have.error().message};
        if (version == 1 && std::string(table) == "step" && want->size() > kStepColumnsV1)
            want->resize(kStepColumnsV1);
        for (size_t i = 0; i < have->size(); ++i) {
            const Column* expect = i < want->size() ? &(*want)[i] : nullptr;
            if (!expect || !((*have)[i] == *expect))
                return refuse("its '" + std::string(table) + "' table's " +
                              what_differs((*have)[i], expect));
        }
        if (have->size() < want->size())
            return Error{path + ": session '" + std::string(table) + "' table lacks column '" +
                         (*want)[have->size()].name + "' (damaged, or not written by kvscope)"};
    }
    return {};
}

}  // namespace kvscope
