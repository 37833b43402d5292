// Session files built to make a reader hold far more than they hold: a long string named over
// and over, a step of millions of tiny events, a million steps, columns SQLite computes as they
// are read, another database's write-ahead log, a crashed recording in a read-only folder. Each
// reader runs as the real binary under a memory limit (prlimit --as; ASan's RSS ceiling in a
// sanitized build), so holding gigabytes again fails the test rather than the machine; each
// answer is a result or one line saying why.
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "sessions/event_codec.h"
#include "sessions/session_reader.h"
#include "sessions/session_schema.h"
#include "test_support.h"

namespace kvscope {
namespace {

namespace fs = std::filesystem;

// Far below what the readers reached (6 GB and more), far above what they need (under 100 MB).
constexpr int64_t kMemoryLimit = 1'500'000'000;

test::CommandResult kvscope_limited(std::vector<std::string> args, int timeout = 300) {
    args.insert(args.begin(), test::kvscope_binary());
    return test::run_command(test::within_memory(std::move(args), kMemoryLimit), timeout);
}

// A result, or one line that says why (`check`'s list of problems aside): never a crash, a hang
// or running out of memory.
void expect_bounded(const test::CommandResult& r, const std::string& what, bool one_line = true) {
    EXPECT_FALSE(r.signaled) << what << " crashed: " << r.err;
    EXPECT_NE(r.exit_code, -2) << what << " hung";
    EXPECT_EQ(r.err.find("out of memory"), std::string::npos) << what << ": " << r.err;
    EXPECT_EQ(r.err.find("bad_alloc"), std::string::npos) << what << ": " << r.err;
    if (r.exit_code != 0 && one_line) {
        EXPECT_LE(std::count(r.err.begin(), r.err.end(), '\n'), 1) << what << ": " << r.err;
    }
}

void sql(const std::string& path, const std::string& statement) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    char* err = nullptr;
    EXPECT_EQ(sqlite3_exec(db, statement.c_str(), nullptr, nullptr, &err), SQLITE_OK)
        << (err ? err : "") << "\n"
        << statement.substr(0, 300);
    sqlite3_free(err);
    sqlite3_close(db);
}

int64_t sql_int(const std::string& path, const std::string& query) {
    sqlite3* db = nullptr;
    sqlite3_stmt* q = nullptr;
    int64_t out = -1;
    if (sqlite3_open(path.c_str(), &db) == SQLITE_OK &&
        sqlite3_prepare_v2(db, query.c_str(), -1, &q, nullptr) == SQLITE_OK &&
        sqlite3_step(q) == SQLITE_ROW)
        out = sqlite3_column_int64(q, 0);
    sqlite3_finalize(q);
    sqlite3_close(db);
    return out;
}

// Appends a step after the session's last, its events `blob` (holding `n_events` events
// numbered from the session's next sequence number on).
void append_step(const std::string& path, const std::vector<uint8_t>& blob, int64_t n_events) {
    const int64_t step = sql_int(path, "SELECT max(step) FROM step") + 1;
    const int64_t first = sql_int(path, "SELECT max(last_seq) FROM step") + 1;
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    sqlite3_stmt* q = nullptr;
    ASSERT_EQ(sqlite3_prepare_v2(db,
                                 "INSERT INTO step(step, first_seq, last_seq, t_begin_ns, "
                                 "t_end_ns, n_events, events) VALUES(?, ?, ?, 0, 0, ?, ?)",
                                 -1, &q, nullptr),
              SQLITE_OK);
    sqlite3_bind_int64(q, 1, step);
    sqlite3_bind_int64(q, 2, first);
    sqlite3_bind_int64(q, 3, first + n_events - 1);
    sqlite3_bind_int64(q, 4, n_events);
    sqlite3_bind_blob64(q, 5, blob.data(), blob.size(), SQLITE_TRANSIENT);
    EXPECT_EQ(sqlite3_step(q), SQLITE_DONE) << sqlite3_errmsg(db);
    sqlite3_finalize(q);
    sqlite3_close(db);
}

class ReaderBounds : public ::testing::Test {
  protected:
    void SetUp() override {
        dir_ = test::temp_dir();
        auto sample = test::source_file("assets/sessions/sample-chat.kvs");
        ASSERT_TRUE(sample) << "the bundled sample session is missing";
        sample_ = *sample;
    }
    std::string copy_of_sample(const std::string& name) {
        std::string path = dir_ + "/" + name;
        fs::copy_file(sample_, path, fs::copy_options::overwrite_existing);
        return path;
    }
    std::string dir_, sample_;
};

// One 8 MB string, interned once, named by 2 000 token events of a new request: 16 GB for a
// reader that copies it per event. Each reader answers within the limit: the texts are shared.
TEST_F(ReaderBounds, OneLongStringNamedThousandsOfTimesIsHeldOnce) {
    std::string path = copy_of_sample("long-string.kvs");
    const int64_t text_id = sql_int(path, "SELECT max(id) FROM strings") + 1;
    sql(path, "DELETE FROM keyframe; INSERT INTO strings VALUES(" + std::to_string(text_id) +
                  ", printf('%.*c', 8388608, 'x'))");
    const int64_t first_seq = sql_int(path, "SELECT max(last_seq) FROM step") + 1;
    EventEncoder enc([&](const std::string&) { return static_cast<uint32_t>(text_id); });
    const int kTokens = 2000;
    Event arrive;
    arrive.kind = EventKind::kRequestArrive;
    arrive.seq_no = static_cast<uint64_t>(first_seq);
    arrive.request = 900;
    arrive.text = "long";
    enc.add(arrive);
    for (int i = 0; i < kTokens; ++i) {
        Event t;
        t.kind = EventKind::kToken;
        t.seq_no = static_cast<uint64_t>(first_seq + 1 + i);
        t.request = 900;
        t.a = i;
        t.b = 7;
        t.text = "long";
        enc.add(t);
    }
    append_step(path, enc.bytes(), kTokens + 1);

    auto check = kvscope_limited({"check", path});
    expect_bounded(check, "check");
    EXPECT_EQ(check.exit_code, 0) << check.err;
    auto inspect = kvscope_limited({"inspect", path});
    expect_bounded(inspect, "inspect");
    EXPECT_EQ(inspect.exit_code, 0) << inspect.err;
    // As JSON the text is written out once per token: refused, saying so.
    auto json = kvscope_limited({"inspect", path, "--json"});
    expect_bounded(json, "inspect --json");
    EXPECT_EQ(json.exit_code, 1);
    EXPECT_NE(json.err.find("more than one document holds"), std::string::npos) << json.err;
    auto exported =
        kvscope_limited({"export", path, "--format", "perfetto", "--out", dir_ + "/t.json"});
    expect_bounded(exported, "export");
    EXPECT_EQ(exported.exit_code, 0) << exported.err;
    auto published = kvscope_limited({"publish", "--session", path, "--endpoint",
                                      "tcp://127.0.0.1:" + std::to_string(41000 + getpid() % 2000),
                                      "--duration", "0.2"});
    expect_bounded(published, "publish --session");
    EXPECT_EQ(published.exit_code, 0) << published.err;
    EXPECT_NE(published.err.find("blocks from"), std::string::npos) << published.err;
}

// A step of 15 million events of four bytes each: 2.5 GB as a list of events, which check held.
// It reads them one at a time, and lists a handful of problems, not one per event.
TEST_F(ReaderBounds, AStepOfMillionsOfEventsIsCheckedOneEventAtATime) {
    std::string path = copy_of_sample("big-step.kvs");
    const int64_t first_seq = sql_int(path, "SELECT max(last_seq) FROM step") + 1;
    const int64_t kEvents = 15'000'000;
    EventEncoder enc([](const std::string&) { return 1u; });
    Event e;
    e.kind = EventKind::kPhase;  // changes nothing a state holds
    for (int64_t i = 0; i < kEvents; ++i) {
        e.seq_no = static_cast<uint64_t>(first_seq + i);
        enc.add(e);
    }
    ASSERT_GT(enc.bytes().size(), size_t{40} << 20);
    append_step(path, enc.bytes(), kEvents);
    auto check = kvscope_limited({"check", path});
    expect_bounded(check, "check");
    EXPECT_EQ(check.exit_code, 0) << check.err;
    EXPECT_NE(check.out.find("ok"), std::string::npos) << check.out;
    // Every event out of order now: the list stops at 50 and counts the rest.
    sql(path,
        "UPDATE step SET first_seq = first_seq + 1 WHERE step = (SELECT max(step) FROM step)");
    std::vector<uint8_t> shuffled;
    {
        EventEncoder bad([](const std::string&) { return 1u; });
        for (int64_t i = 0; i < 3'000'000; ++i) {
            e.seq_no = static_cast<uint64_t>(first_seq + 2 * i);
            bad.add(e);
        }
        shuffled = bad.bytes();
    }
    append_step(path, shuffled, 3'000'000);
    auto problems = kvscope_limited({"check", path});
    expect_bounded(problems, "check of a damaged step", /*one_line=*/false);
    EXPECT_EQ(problems.exit_code, 1);
    EXPECT_LT(std::count(problems.err.begin(), problems.err.end(), '\n'), 60) << problems.err;
    EXPECT_NE(problems.err.find("more problems"), std::string::npos) << problems.err;
}

// A million steps exported as a Perfetto trace: written as it is read, in the memory of one
// step. (It held the whole document: 12 GB for a million steps.)
TEST_F(ReaderBounds, AnExportOfManyStepsIsWrittenAsItIsRead) {
    std::string path = copy_of_sample("many-steps.kvs");
    // A tenth of the steps under ASan, whose Debug build exports some 30 times slower (300 000
    // steps ran past the 300 s this test gives); the Release build holds the full count to the
    // memory limit, which the whole document held in memory would pass 2.4 times over.
    const int kSteps = test::sanitized_build() ? 30000 : 300000;
    sql(path,
        "DELETE FROM keyframe; DELETE FROM attention; DELETE FROM step; WITH RECURSIVE n(i) AS "
        "(SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < " +
            std::to_string(kSteps - 1) +
            ") INSERT INTO step SELECT i, i + 1, i + 1, i * 1000000, i * 1000000 + 900000, 1, 1, "
            "0, 0, 0, 1, 5, 2, 0.1, 0.05, 0.05, 0.5, 0.2, 0.0009, 1000, 0, 50000, 20000, 20000, "
            "1000, X'02010001', 0, 0, 0, 0, 0 FROM n");
    const std::string out = dir_ + "/many.json";
    auto r = kvscope_limited({"export", path, "--format", "perfetto", "--out", out});
    expect_bounded(r, "export perfetto");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    // Whole and valid: it ends the way the document does, and its last step is there.
    std::string text = test::read_file(out);
    EXPECT_EQ(text.substr(0, 16), "{\"traceEvents\":[");
    EXPECT_NE(text.find("\"step " + std::to_string(kSteps - 1) + "\""), std::string::npos);
    EXPECT_EQ(text.back(), '}');
    auto parsed = nlohmann::json::parse(text, nullptr, false);
    EXPECT_FALSE(parsed.is_discarded());
    text.clear();
    auto csv = kvscope_limited({"export", path, "--format", "csv", "--out", dir_ + "/many.csv"});
    expect_bounded(csv, "export csv");
    EXPECT_EQ(csv.exit_code, 0) << csv.err;

    // Ctrl-C in the middle of it: the temporary file beside the target goes with the process.
    int pid = test::start_command({test::kvscope_binary(), "export", path, "--format", "perfetto",
                                   "--out", dir_ + "/cut.json"});
    bool started = false;
    for (int i = 0; i < 400 && !started; ++i) {
        for (const auto& f : fs::directory_iterator(dir_))
            started |= f.path().filename().string().rfind("cut.json.tmp-", 0) == 0 &&
                       fs::file_size(f.path()) > 0;
        if (!started) std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
    ASSERT_TRUE(started) << "the export never began writing";
    kill(pid, SIGINT);
    EXPECT_EQ(test::wait_command(pid), 128 + SIGINT);
    for (const auto& f : fs::directory_iterator(dir_))
        EXPECT_EQ(f.path().filename().string().find(".tmp-"), std::string::npos) << f.path();
    EXPECT_FALSE(fs::exists(dir_ + "/cut.json"));
}

// Columns, views and triggers SQLite computes as they are read, able to build gigabytes from a
// small file for every reader: refused by name before anything is read.
TEST_F(ReaderBounds, SchemaTricksAreRefusedBeforeAnythingIsRead) {
    struct Trick {
        std::string name, sql, expect;
    };
    std::string step_sql = kSessionSchemaSql;
    step_sql = step_sql.substr(step_sql.find("CREATE TABLE step("));
    step_sql = step_sql.substr(0, step_sql.find(";") + 1);
    std::string generated_events = step_sql;
    generated_events.replace(generated_events.find("events BLOB NOT NULL"), 20,
                             "events BLOB NOT NULL GENERATED ALWAYS AS "
                             "(zeroblob(200000000)) VIRTUAL");
    const std::string columns =
        "step, first_seq, last_seq, t_begin_ns, t_end_ns, n_events, running, waiting, swapped, "
        "prefill_tokens, decode_tokens, blocks_used, blocks_cached, fragmentation, "
        "internal_fragmentation, external_fragmentation, utilization, prefix_hit_rate, "
        "step_seconds, schedule_ns, prefill_ns, decode_ns, attention_ns, mlp_ns, sample_ns, "
        "weight_bytes, kv_read_bytes, kv_written_bytes, activation_bytes, ops_ns";
    const std::vector<Trick> tricks = {
        {"generated strings",
         "ALTER TABLE strings RENAME TO s0; CREATE TABLE strings(id INTEGER PRIMARY KEY, text "
         "TEXT NOT NULL GENERATED ALWAYS AS (printf('%.*c', 300000000, 'x')) VIRTUAL); INSERT "
         "INTO strings(id) SELECT id FROM s0; DROP TABLE s0;",
         "computed from an expression"},
        {"generated events",
         "ALTER TABLE step RENAME TO s0; " + generated_events + " INSERT INTO step(" + columns +
             ") SELECT " + columns + " FROM s0; DROP TABLE s0;",
         "computed from an expression"},
        {"view", "CREATE VIEW big AS SELECT zeroblob(500000000) AS b;", "has a view"},
        {"trigger", "CREATE TRIGGER t AFTER INSERT ON meta BEGIN SELECT zeroblob(500000000); END;",
         "has a trigger"},
        {"expression index", "CREATE INDEX e ON step(step * 2);", "on an expression"},
        {"extra column", "ALTER TABLE meta ADD COLUMN x TEXT;", "not one kvscope writes"},
    };
    for (const Trick& t : tricks) {
        std::string path = copy_of_sample("trick.kvs");
        sql(path, t.sql);
        for (std::vector<std::string> args :
             {std::vector<std::string>{"check", path},
              {"inspect", path},
              {"export", path, "--format", "csv", "--out", dir_ + "/trick.csv"},
              {"check", "--repair", path}}) {
            auto r = kvscope_limited(args, 60);
            expect_bounded(r, t.name + ": " + args[0]);
            EXPECT_EQ(r.exit_code, 1) << t.name << ": " << args[0];
            EXPECT_NE(r.err.find(t.expect), std::string::npos)
                << t.name << ": " << args[0] << ": " << r.err;
        }
        EXPECT_FALSE(fs::exists(dir_ + "/trick.csv"));
    }
}

// The write-ahead log of a database in WAL mode, copied out while it is open.
std::string wal_of_new_database(const std::string& path, int page_size = 8192) {
    sqlite3* db = nullptr;
    EXPECT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    const std::string setup = "PRAGMA page_size=" + std::to_string(page_size) +
                              "; PRAGMA journal_mode=WAL; PRAGMA wal_autocheckpoint=0; CREATE "
                              "TABLE t(x); INSERT INTO t VALUES(randomblob(20000));";
    EXPECT_EQ(sqlite3_exec(db, setup.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
    std::string wal = test::read_file(path + "-wal");
    sqlite3_close(db);
    return wal;
}

// A log beside a session whose frames are not its header's (spliced from two, damaged, or
// restarted and cut off before its first frame): SQLite folds none of it in, and repair said it
// had folded it. Now it says it held nothing usable, and the file is unchanged. A log of pages of
// another size (another database's) is left alone, and nothing is done.
TEST_F(ReaderBounds, RepairSaysWhatAWriteAheadLogHeldAndLeavesAnotherDatabasesAlone) {
    std::string path = copy_of_sample("wal.kvs");
    const std::string a = wal_of_new_database(dir_ + "/a.db"),
                      b = wal_of_new_database(dir_ + "/b.db"),
                      small = wal_of_new_database(dir_ + "/small.db", 4096);
    ASSERT_GT(a.size(), 32u);
    ASSERT_GT(b.size(), 32u);
    const std::string before = test::read_file(path);
    // Pages of 4 KiB beside a session of 8 KiB pages: another database's, left alone.
    test::write_file(path + "-wal", small);
    auto other = kvscope_limited({"check", "--repair", path});
    expect_bounded(other, "check --repair");
    EXPECT_EQ(other.exit_code, 1) << other.out;
    EXPECT_EQ(other.out.find("folded"), std::string::npos) << other.out;
    EXPECT_NE(other.err.find("is not " + path + "'s write-ahead log"), std::string::npos)
        << other.err;
    EXPECT_NE(other.err.find("pages are 4096 bytes"), std::string::npos) << other.err;
    EXPECT_EQ(test::read_file(path + "-wal"), small);
    EXPECT_EQ(test::read_file(path), before);
    // Spliced: a's header, b's frames (pages of the session's size): only the salts tell.
    const std::string spliced = a.substr(0, 32) + b.substr(32);
    test::write_file(path + "-wal", spliced);
    auto r = kvscope_limited({"check", "--repair", path});
    expect_bounded(r, "check --repair");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out.find("folded its"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("held no frame it could use"), std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists(path + "-wal"));
    // Its own log, as a crash leaves it, is still folded in.
    fs::remove(path + "-wal");
    sql(path, "PRAGMA journal_mode=WAL");
    {
        sqlite3* db = nullptr;
        ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
        sqlite3_exec(db, "PRAGMA wal_autocheckpoint=0; INSERT INTO meta VALUES('note', 'kept')",
                     nullptr, nullptr, nullptr);
        fs::copy_file(path, dir_ + "/crashed.kvs");
        fs::copy_file(path + "-wal", dir_ + "/crashed.kvs-wal");
        sqlite3_close(db);
    }
    auto own = kvscope_limited({"check", "--repair", dir_ + "/crashed.kvs"});
    EXPECT_EQ(own.exit_code, 0) << own.err;
    EXPECT_NE(own.out.find("folded its write-ahead log"), std::string::npos) << own.out;
    EXPECT_EQ(sql_int(dir_ + "/crashed.kvs", "SELECT count(*) FROM meta WHERE key = 'note'"), 1);
}

}  // namespace
}  // namespace kvscope
