// `kvscope export F.kvs --format sqlite`: every event a row of its kind's table, counted the same
// as the session reader counts them; steps, requests and run beside; documented; and refused,
// leaving nothing behind, where it must not write.
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/stat.h>

#include <filesystem>
#include <map>

#include "sessions/recorder.h"
#include "sessions/session_reader.h"
#include "sessions/sql_export.h"
#include "test_support.h"

namespace kvscope {
namespace {

namespace fs = std::filesystem;

test::CommandResult kvscope(std::vector<std::string> args) {
    return test::run_kvscope(std::move(args), 300);
}

// The one text a query returns.
std::string query_text(sqlite3* db, const std::string& sql) {
    sqlite3_stmt* s = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr), SQLITE_OK)
        << sql << ": " << sqlite3_errmsg(db);
    std::string v = "(no row)";
    if (s && sqlite3_step(s) == SQLITE_ROW)
        v = sqlite3_column_type(s, 0) == SQLITE_NULL
                ? "NULL"
                : reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
    sqlite3_finalize(s);
    return v;
}

// The one number a query returns.
int64_t query_int(sqlite3* db, const std::string& sql) {
    sqlite3_stmt* s = nullptr;
    EXPECT_EQ(sqlite3_prepare_v2(db, sql.c_str(), -1, &s, nullptr), SQLITE_OK)
        << sql << ": " << sqlite3_errmsg(db);
    int64_t v = -1;
    if (s && sqlite3_step(s) == SQLITE_ROW) v = sqlite3_column_int64(s, 0);
    sqlite3_finalize(s);
    return v;
}

// Nothing but `expected` (by name) in `dir`: no temporary file left by a failed export.
void expect_only(const std::string& dir, const std::set<std::string>& expected,
                 const std::string& what) {
    for (const auto& e : fs::directory_iterator(dir))
        EXPECT_TRUE(expected.count(e.path().filename().string()))
            << what << " left " << e.path().filename();
}

TEST(SqlExport, EveryEventOfTheSampleIsARowOfItsKindAsTheReaderCountsThem) {
    auto sample = test::source_file("assets/sessions/sample-chat.kvs");
    ASSERT_TRUE(sample);
    const std::string dir = test::temp_dir(), out = dir + "/sample.db";
    auto r = kvscope({"export", *sample, "--format", "sqlite", "--out", out});
    ASSERT_EQ(r.exit_code, 0) << r.err;

    auto reader = SessionReader::open(*sample);
    ASSERT_TRUE(reader.ok()) << reader.error().message;
    std::map<EventKind, int64_t> counted;
    std::map<std::string, int64_t> evict_reasons;
    int64_t total = 0;
    ASSERT_TRUE((*reader)
                    ->for_each_event((*reader)->first_step(), (*reader)->last_step(), {},
                                     [&](const Event& e, const SharedText& text) -> Status {
                                         ++counted[e.kind];
                                         ++total;
                                         if (e.kind == EventKind::kTokenEvict) {
                                             std::string t = text.str();
                                             evict_reasons[t.substr(t.find(": ") + 2)]++;
                                         }
                                         return {};
                                     })
                    .ok());

    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open_v2(out.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
    int64_t rows = 0;
    for (int k = 1; k < kNumEventKinds; ++k) {
        const auto kind = static_cast<EventKind>(k);
        const std::string name(event_kind_name(kind));
        const int64_t n = query_int(db, "SELECT count(*) FROM " + name);
        EXPECT_EQ(n, counted[kind]) << name;
        EXPECT_EQ(query_int(db, "SELECT count(*) FROM events WHERE kind = '" + name + "'"), n);
        rows += n;
    }
    EXPECT_EQ(rows, total);
    EXPECT_GT(total, 10000);
    // What the sample holds, decoded: steps, requests, tokens, blocks.
    EXPECT_EQ(query_int(db, "SELECT count(*) FROM steps"),
              static_cast<int64_t>((*reader)->steps().size()));
    EXPECT_EQ(query_int(db, "SELECT count(*) FROM requests"), 6);
    EXPECT_EQ(query_int(db, "SELECT count(*) FROM requests WHERE finish_step IS NOT NULL"), 6);
    EXPECT_EQ(query_int(db, "SELECT value FROM run WHERE key = 'num_blocks'"),
              (*reader)->info().num_blocks);
    EXPECT_EQ(query_int(db, "SELECT count(*) FROM block_alloc WHERE block < 0 OR request < 0"), 0);
    EXPECT_EQ(query_int(db, "SELECT sum(n_events) FROM steps"), total);
    // Each table is indexed by step.
    EXPECT_EQ(query_int(db,
                        "SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name "
                        "LIKE '%_by_step'"),
              kNumEventKinds - 1);
    // The reasons of token evictions, as the query asks for them.
    for (const auto& [reason, n] : evict_reasons)
        EXPECT_EQ(query_int(db, "SELECT count(*) FROM token_evict WHERE reason = '" + reason + "'"),
                  n)
            << reason;
    sqlite3_close(db);
    expect_only(dir, {"sample.db"}, "export");
}

// What a kind packs into its fields comes out decoded and named, written by the real Recorder.
TEST(SqlExport, PackedFieldsAndPayloadsComeOutDecoded) {
    const std::string dir = test::temp_dir(), path = dir + "/packed.kvs";
    RunInfo info;
    info.num_blocks = 8;
    auto rec = Recorder::create(path, info);
    ASSERT_TRUE(rec.ok()) << rec.error().message;
    auto emit = [&](Event e) { (*rec)->emit(std::move(e)); };
    emit({.kind = EventKind::kRequestArrive,
          .step = 1,
          .request = 0,
          .a = 5,
          .b = 9,
          .c = 1,
          .text = "chat-0"});
    emit({.kind = EventKind::kTokenEvict,
          .step = 2,
          .request = 0,
          .block = 3,
          .a = 4,
          .b = 1,
          .c = 17,
          .wide = 5,
          .value = 0.25,
          .text = "h2o: low-accumulated-attention"});
    emit({.kind = EventKind::kTokenMove,
          .step = 2,
          .request = 0,
          .block = 3,
          .a = 4,
          .b = 1,
          .c = 18,
          .wide = (int64_t{9} << 32) | 5});
    emit({.kind = EventKind::kPreempt, .step = 3, .request = 0, .a = 1, .b = 2});
    emit({.kind = EventKind::kRequestFinish, .step = 4, .request = 0, .a = 9, .b = 1});
    emit({.kind = EventKind::kPhase, .step = 4, .a = 3, .wide = 1234});
    Event kernel{.kind = EventKind::kKernel, .step = 4, .a = 2, .wide = 500, .text = "attn"};
    kernel.cost = {.weight_bytes = 10,
                   .kv_read_bytes = 20,
                   .kv_written_bytes = 30,
                   .activation_bytes = 40,
                   .flops = 50};
    emit(kernel);
    Event hbm{.kind = EventKind::kHbmSample, .step = 4, .wide = 900, .value = 30};
    encode_hbm_bytes({.read = 20, .written = 10}, hbm.payload);
    emit(hbm);
    Event stored{.kind = EventKind::kKvStored,
                 .step = 5,
                 .block = 6,
                 .a = 1,
                 .b = static_cast<int32_t>(KvMedium::kCpu),
                 .c = 3,
                 .wide = -2};
    StoredBlock sb;
    sb.has_parent = true;
    sb.parent = 77;
    sb.tokens = {11, 12, 13};
    sb.group = 1;
    sb.group_kind = "sliding_window";
    sb.sliding_window = 128;
    encode_stored_block(sb, stored.payload);
    emit(stored);
    ASSERT_TRUE((*rec)->close().ok());

    auto reader = SessionReader::open(path);
    ASSERT_TRUE(reader.ok()) << reader.error().message;
    const std::string db_path = dir + "/packed.db";
    auto n = export_sqlite(**reader, db_path, "packed.db");
    ASSERT_TRUE(n.ok()) << n.error().message;
    EXPECT_EQ(n->events, 9);
    EXPECT_EQ(n->requests, 1);
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open_v2(db_path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
    auto row = [&](const std::string& sql) { return query_text(db, sql); };
    EXPECT_EQ(row("SELECT policy || '/' || reason || '/' || layer || '/' || kv_head || '/' || "
                  "position || '/' || slot || '/' || score FROM token_evict"),
              "h2o/low-accumulated-attention/4/1/17/5/0.25");
    EXPECT_EQ(row("SELECT from_slot || '>' || to_slot FROM token_move"), "9>5");
    EXPECT_EQ(row("SELECT mode FROM preempt"), "swap");
    EXPECT_EQ(row("SELECT finish FROM request_finish"), "end_token");
    EXPECT_EQ(row("SELECT phase || ' ' || duration_ns FROM phase"), "attention 1234");
    EXPECT_EQ(row("SELECT op || ' ' || weight_bytes || ' ' || kv_read_bytes || ' ' || "
                  "kv_written_bytes || ' ' || activation_bytes || ' ' || flops FROM kernel"),
              "attn 10 20 30 40 50");
    EXPECT_EQ(row("SELECT kernel FROM kernel"), "NULL");  // a host op has no GPU kernel
    EXPECT_EQ(row("SELECT read_bytes || ' ' || written_bytes FROM hbm_sample"), "20 10");
    EXPECT_EQ(row("SELECT medium || ' ' || parent || ' ' || token_ids || ' ' || cache_group || ' '"
                  " || group_kind || ' ' || sliding_window || ' ' || printf('%x', hash) "
                  "FROM kv_stored"),
              "CPU 77 11 12 13 1 sliding_window 128 fffffffffffffffe");
    EXPECT_EQ(row("SELECT request_id || ' ' || prompt_tokens || ' ' || generated_tokens || ' ' || "
                  "finish || ' ' || arrive_step || ' ' || finish_step FROM requests"),
              "chat-0 5 9 end_token 1 4");
    EXPECT_EQ(row("SELECT group_concat(kind, ',') FROM (SELECT kind FROM events ORDER BY seq_no)"),
              "request_arrive,token_evict,token_move,preempt,request_finish,phase,kernel,"
              "hbm_sample,kv_stored");
    sqlite3_close(db);
}

TEST(SqlExport, TheDocumentationNamesEveryTableAndColumn) {
    auto doc_path = test::source_file("docs/sql-export.md");
    ASSERT_TRUE(doc_path) << "docs/sql-export.md is missing";
    const std::string doc = test::read_file(*doc_path);
    for (int k = 1; k < kNumEventKinds; ++k) {
        const auto kind = static_cast<EventKind>(k);
        const std::string name(event_kind_name(kind));
        EXPECT_NE(doc.find("`" + name + "`"), std::string::npos) << name;
        for (const SqlColumn& c : sql_event_columns(kind)) {
            // Each kind's row of the table lists its columns in order.
            const size_t row = doc.find("| `" + name + "` |");
            ASSERT_NE(row, std::string::npos) << name;
            const std::string line = doc.substr(row, doc.find('\n', row) - row);
            EXPECT_NE(line.find(c.name), std::string::npos) << name << "." << c.name;
        }
    }
    auto readme = test::source_file("README.md");
    ASSERT_TRUE(readme);
    EXPECT_NE(test::read_file(*readme).find("docs/sql-export.md"), std::string::npos);
}

TEST(SqlExport, RefusesWhereItMustNotWriteAndLeavesNothingHalfWritten) {
    auto sample = test::source_file("assets/sessions/sample-chat.kvs");
    ASSERT_TRUE(sample);
    const std::string dir = test::temp_dir();
    const std::string input = dir + "/s.kvs";
    fs::copy_file(*sample, input);
    const std::string input_bytes = test::read_file(input);
    const std::string kept = test::write_file(dir + "/kept.db", "a user's file\n");
    const std::string folder = dir + "/folder";
    fs::create_directory(folder);
    const std::string fifo = dir + "/pipe";
    ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
    // A session cut short: its first 64 KiB, and one with its step rows' bytes overwritten.
    const std::string truncated =
        test::write_file(dir + "/truncated.kvs", input_bytes.substr(0, 65536));
    std::string damaged_bytes = input_bytes;
    for (size_t i = damaged_bytes.size() / 2; i < damaged_bytes.size() / 2 + 200000; ++i)
        damaged_bytes[i] = static_cast<char>(i * 131);
    const std::string damaged = test::write_file(dir + "/damaged.kvs", damaged_bytes);
    // One that opens well and fails halfway through: step 300's events are garbage, found only
    // once the rows before them are written.
    const std::string bad_step = dir + "/bad-step.kvs";
    fs::copy_file(*sample, bad_step);
    {
        sqlite3* db = nullptr;
        ASSERT_EQ(sqlite3_open(bad_step.c_str(), &db), SQLITE_OK);
        ASSERT_EQ(sqlite3_exec(db, "UPDATE step SET events = x'14ffff' WHERE step = 300", nullptr,
                               nullptr, nullptr),
                  SQLITE_OK);
        ASSERT_EQ(sqlite3_changes(db), 1);
        sqlite3_close(db);
    }
    const std::set<std::string> there = {"s.kvs",         "kept.db",     "folder",      "pipe",
                                         "truncated.kvs", "damaged.kvs", "bad-step.kvs"};
    struct Case {
        std::vector<std::string> args;
        std::string says;
    };
    const auto sql = [](const std::string& in, const std::string& out) {
        return std::vector<std::string>{"export", in, "--format", "sqlite", "--out", out};
    };
    auto forced = [](std::vector<std::string> a) {
        a.push_back("--force");
        return a;
    };
    for (const Case& c : {
             Case{sql(input, folder), "is a directory"},
             Case{forced(sql(input, folder)), "is a directory"},
             Case{forced(sql(input, fifo)), "FIFO"},
             Case{forced(sql(input, input)), "one of this command's inputs"},
             Case{sql(input, kept), "already exists"},
             Case{sql(truncated, dir + "/t.db"), "truncated.kvs"},
             Case{sql(damaged, dir + "/d.db"), "damaged.kvs"},
             Case{sql(bad_step, dir + "/b.db"), "bad-step.kvs: step 300"},
         }) {
        auto r = kvscope(c.args);
        std::string what = c.args[1] + " -> " + c.args[5];
        EXPECT_TRUE(r.exit_code == 1 || r.exit_code == 2) << what << ": " << r.exit_code;
        EXPECT_NE(r.err.find(c.says), std::string::npos) << what << ": " << r.err;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << what << ": " << r.err;
        expect_only(dir, there, what);
    }
    EXPECT_EQ(test::read_file(input), input_bytes);
    EXPECT_EQ(test::read_file(kept), "a user's file\n");
    // With --force it replaces the file, whole.
    auto r = kvscope(forced(sql(input, kept)));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(test::read_file(kept).substr(0, 15), "SQLite format 3");
}

}  // namespace
}  // namespace kvscope
