// Session files as users meet them: bad files refused clearly, a recording killed with
// SIGKILL still readable up to its last flushed batch, exports that agree with the Timeline.
#include <gtest/gtest.h>
#include <signal.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fcntl.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "sessions/export.h"
#include "sessions/session_check.h"
#include "sessions/session_reader.h"
#include "test_support.h"

namespace kvscope {
namespace {

test::CommandResult kvscope(std::vector<std::string> args, int timeout = 120) {
    return test::run_kvscope(std::move(args), timeout);
}

// A real recording of the bundled model serving a small workload.
std::string record(const std::string& dir) {
    std::optional<std::string> model = test::bundled_model();
    std::string w = dir + "/w.jsonl";
    EXPECT_EQ(kvscope({"workload", "--model", *model, "--kind", "burst", "--requests", "12",
                       "--seed", "4", "--out", w})
                  .exit_code,
              0);
    std::string path = dir + "/s.kvs";
    auto r = kvscope(
        {"run", "--model", *model, "--workload", w, "--num-blocks", "48", "--record", path});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return path;
}

void sql(const std::string& path, const std::string& statement) {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
    char* err = nullptr;
    EXPECT_EQ(sqlite3_exec(db, statement.c_str(), nullptr, nullptr, &err), SQLITE_OK)
        << (err ? err : "");
    sqlite3_free(err);
    sqlite3_close(db);
}

class SessionFiles : public ::testing::Test {
  protected:
    void SetUp() override { dir_ = test::temp_dir(); }
    std::string dir_;
};

TEST_F(SessionFiles, BadFilesAreRefusedWithAClearMessage) {
    std::string good = record(dir_);
    std::string bytes = test::read_file(good);
    struct Case {
        std::string name, path, expect;
    };
    std::vector<Case> cases;
    auto copy = [&](const std::string& name) {
        std::string p = dir_ + "/" + name;
        std::filesystem::copy_file(good, p, std::filesystem::copy_options::overwrite_existing);
        return p;
    };
    cases.push_back({"missing", dir_ + "/nope.kvs", "no such file"});
    cases.push_back({"empty", test::write_file(dir_ + "/empty.kvs", ""), "not an SQLite file"});
    std::mt19937 rng(5);
    std::string noise(8192, '\0');
    for (char& c : noise)
        c = static_cast<char>(rng());
    cases.push_back(
        {"random bytes", test::write_file(dir_ + "/noise.kvs", noise), "not an SQLite file"});
    cases.push_back(
        {"truncated", test::write_file(dir_ + "/cut.kvs", bytes.substr(0, bytes.size() / 3)), ""});
    {
        std::string p = dir_ + "/other.kvs";
        sql(p, "CREATE TABLE notes(x TEXT); INSERT INTO notes VALUES('hello');");
        cases.push_back({"valid SQLite, not a session", p, "not a kvscope session"});
    }
    {
        std::string p = copy("newer.kvs");
        sql(p, "PRAGMA user_version=99");
        cases.push_back({"newer schema", p, "newer than this kvscope understands"});
    }
    {
        std::string p = copy("notable.kvs");
        sql(p, "DROP TABLE keyframe");
        cases.push_back({"missing table", p, "missing its 'keyframe' table"});
    }
    {
        std::string p = copy("wide.kvs");
        sql(p,
            "UPDATE meta SET value='{\"num_blocks\": 4294967301, \"block_size\": 16}' WHERE "
            "key='run'");
        cases.push_back({"pool wider than 32 bits", p, "absurd pool dimensions"});
    }
    {
        std::string p = copy("badrun.kvs");
        sql(p, "UPDATE meta SET value='{\"num_blocks\": -5, \"block_size\": 16}' WHERE key='run'");
        cases.push_back({"absurd run info", p, "absurd pool dimensions"});
    }
    {
        // Run info nested 100 000 deep (every JSON kvscope reads stops at 64 levels).
        std::string p = copy("deeprun.kvs");
        sql(p,
            "UPDATE meta SET value = '{\"num_blocks\": 48, \"block_size\": 16, \"x\": ' || "
            "replace(hex(zeroblob(100000)), '00', '[') || replace(hex(zeroblob(100000)), '00', "
            "']') || '}' WHERE key = 'run'");
        cases.push_back({"deeply nested run info", p,
                         "session run info: arrays and objects nested more than 64 deep"});
    }
    for (const Case& c : cases) {
        auto r = SessionReader::open(c.path);
        std::string msg = r ? "" : r.error().message;
        // A truncated file may still open (SQLite reads lazily); then check must flag it.
        if (r && c.name == "truncated") {
            CheckReport rep = check_session(c.path);
            EXPECT_FALSE(rep.problems.empty()) << c.name;
            continue;
        }
        ASSERT_FALSE(r.ok()) << c.name;
        EXPECT_NE(msg.find(c.expect), std::string::npos) << c.name << ": " << msg;
        auto cli = kvscope({"inspect", c.path});
        EXPECT_EQ(cli.exit_code, 1) << c.name;
        EXPECT_FALSE(cli.signaled);
        auto chk = kvscope({"check", c.path});
        EXPECT_EQ(chk.exit_code, 1) << c.name;
    }
    // Corrupt event data inside an otherwise valid file: check names the step.
    std::string p = copy("badblob.kvs");
    sql(p, "UPDATE step SET events = x'ff00ff00' WHERE step = 3");
    auto chk = kvscope({"check", p});
    EXPECT_EQ(chk.exit_code, 1);
    EXPECT_NE(chk.err.find("step 3"), std::string::npos) << chk.err;
    // A step past the end is a usage error with the valid range.
    auto past = kvscope({"inspect", good, "--step", "999999"});
    EXPECT_EQ(past.exit_code, 1);
    EXPECT_NE(past.err.find("outside the session"), std::string::npos) << past.err;
}

// 20 SIGKILLs at random moments of a recording: every file left passes check, holds a gapless
// run of steps from the first, and after --repair the file alone (no -wal) is all of it.
TEST_F(SessionFiles, TwentyKillsDuringRecordingLeaveCheckableFiles) {
    std::string w = dir_ + "/long.jsonl";
    {
        std::ofstream f(w);
        for (int i = 0; i < 400; ++i)
            f << "{\"id\":\"k" << i << "\",\"arrival_step\":" << i * 20 << ",\"prompt_ids\":[1,"
              << 2 + i % 50 << "],\"max_tokens\":200}\n";
    }
    std::mt19937 rng(20);
    int with_steps = 0;
    for (int kill_no = 0; kill_no < 20; ++kill_no) {
        std::string path = dir_ + "/killed" + std::to_string(kill_no) + ".kvs";
        int pid = test::start_command({test::kvscope_binary(), "run", "--workload", w,
                                       "--num-blocks", "256", "--record", path, "--threads", "1"});
        for (int i = 0; i < 400 && !std::filesystem::exists(path + ".part"); ++i)
            usleep(10000);
        usleep(100000 + rng() % 1200000);
        kill(pid, SIGKILL);
        ASSERT_EQ(test::wait_command(pid), 128 + SIGKILL) << "run " << kill_no << " finished";
        // The recording never reached its name; what it wrote is in the .part file.
        EXPECT_FALSE(std::filesystem::exists(path));
        path += ".part";
        auto chk = kvscope({"check", path});
        ASSERT_EQ(chk.exit_code, 0) << "kill " << kill_no << ": " << chk.err;
        auto r = SessionReader::open(path);
        ASSERT_TRUE(r.ok()) << r.error().message;
        size_t steps = (*r)->steps().size();
        with_steps += steps > 0;
        // Every step up to the last one written is there, without gaps in the event sequence.
        uint64_t expect = 1;
        for (const auto& s : (*r)->steps()) {
            EXPECT_EQ(s.first_seq, expect) << "kill " << kill_no << ", step " << s.step;
            expect = s.last_seq + 1;
        }
        if (steps > 0) {
            auto state = (*r)->state_at((*r)->last_step());
            ASSERT_TRUE(state.ok()) << state.error().message;
        }
        r.value().reset();
        auto repaired = kvscope({"check", "--repair", path});
        ASSERT_EQ(repaired.exit_code, 0) << repaired.err;
        std::string alone = dir_ + "/alone" + std::to_string(kill_no) + ".kvs";
        std::filesystem::copy_file(path, alone);
        auto a = SessionReader::open(alone);
        ASSERT_TRUE(a.ok()) << a.error().message;
        EXPECT_EQ((*a)->steps().size(), steps) << "kill " << kill_no;
    }
    EXPECT_GT(with_steps, 10);  // most kills came after the first flushes
}

// A finished recording is one file: nothing beside it, and a copy of it alone is all of it.
TEST_F(SessionFiles, AFinishedRecordingIsOneSelfContainedFile) {
    std::string path = record(dir_);
    for (const char* suffix : {"-wal", "-shm", ".part", ".part-wal", ".part-shm"})
        EXPECT_FALSE(std::filesystem::exists(path + suffix)) << suffix;
    auto original = SessionReader::open(path);
    ASSERT_TRUE(original.ok());
    std::string copy = dir_ + "/copy.kvs";
    std::filesystem::copy_file(path, copy);
    auto r = SessionReader::open(copy);
    ASSERT_TRUE(r.ok()) << r.error().message;
    EXPECT_EQ((*r)->steps().size(), (*original)->steps().size());
    EXPECT_EQ(kvscope({"check", copy}).exit_code, 0);
}

// Sessions that used to pass check and then show wrong values.
TEST_F(SessionFiles, CheckAndInspectRefuseWhatWouldBeShownWrong) {
    std::string good = record(dir_);
    struct Case {
        const char* name;
        const char* damage;  // SQL run on a copy of the recording
        std::vector<std::string> command;
        const char* expect;  // in the one-line error
    };
    const Case cases[] = {
        // A pool wider than 32 bits was read as 5 blocks ("pool: 0 blocks" for 2^32).
        {"wide",
         "UPDATE meta SET value = json_set(value, '$.num_blocks', 4294967301) WHERE key = 'run'",
         {"inspect"},
         "absurd pool dimensions (4294967301 blocks"},
        {"far",
         "UPDATE step SET step = step + 18014398509481984 WHERE step = (SELECT max(step) FROM "
         "step)",
         {"check"},
         "is outside 0..9007199254740992"},
        // Step 4 holds step 5's events again: check says where, and inspect refuses rather than
        // print a state built from them.
        {"shuffled",
         "UPDATE step SET events = (SELECT events FROM step WHERE step = 5) WHERE step = 4",
         {"check"},
         "events lost or reordered"},
        {"shuffled", nullptr, {"inspect", "--step", "8"}, "out of order or missing"},
        // A block id outside the pool.
        {"stray",
         "UPDATE meta SET value = json_set(value, '$.num_blocks', 2) WHERE key = 'run'",
         {"check"},
         "the pool holds 2"},
    };
    for (const Case& c : cases) {
        std::string path = dir_ + "/" + c.name + ".kvs";
        if (c.damage) {
            std::filesystem::copy_file(good, path);
            sql(path, c.damage);
        }
        std::vector<std::string> args = {c.command[0], path};
        args.insert(args.end(), c.command.begin() + 1, c.command.end());
        auto r = kvscope(args);
        EXPECT_EQ(r.exit_code, 1) << c.name << " " << c.command[0] << ": " << r.out;
        EXPECT_NE(r.err.find(c.expect), std::string::npos) << c.name << ": " << r.err;
    }
}

// Attention rows of the wrong length were dropped without a word by the summary and the heatmap.
TEST_F(SessionFiles, AttentionRowsOfTheWrongLengthAreReported) {
    std::string path = dir_ + "/att.kvs";
    auto g =
        kvscope({"generate", "--max-tokens", "12", "--capture-attention", "1:0", "--record", path});
    ASSERT_EQ(g.exit_code, 0) << g.err;
    ASSERT_EQ(kvscope({"inspect", path, "--attention-summary", "4"}).exit_code, 0);
    sql(path, "UPDATE attention SET probs = x'ff' WHERE id = (SELECT max(id) FROM attention)");
    auto c = kvscope({"check", path});
    EXPECT_EQ(c.exit_code, 1);
    EXPECT_NE(c.err.find("holds 1 probabilities, not"), std::string::npos) << c.err;
    auto summary = kvscope({"inspect", path, "--attention-summary", "4"});
    EXPECT_EQ(summary.exit_code, 1);
    EXPECT_NE(summary.err.find("holds 1 probabilities"), std::string::npos) << summary.err;
}

TEST_F(SessionFiles, PerfettoAndCsvExportsMatchTheTimeline) {
    std::string path = record(dir_);
    auto r = SessionReader::open(path);
    ASSERT_TRUE(r.ok());
    std::ostringstream perfetto, csv_text;
    ASSERT_TRUE(export_perfetto(**r, perfetto).ok());
    ASSERT_TRUE(export_csv(**r, csv_text).ok());
    auto trace = nlohmann::json::parse(perfetto.str());
    ASSERT_TRUE(trace.contains("traceEvents"));
    std::map<std::string, std::vector<double>> counters;
    int steps = 0;
    for (const auto& e : trace["traceEvents"]) {
        if (e["ph"] == "C")
            counters[e["name"].get<std::string>()].push_back(e["args"]["value"].get<double>());
        if (e["ph"] == "X" && e["name"].get<std::string>().rfind("step ", 0) == 0) ++steps;
    }
    ASSERT_EQ(static_cast<size_t>(steps), (*r)->steps().size());
    ASSERT_EQ(counters["blocks_used"].size(), (*r)->steps().size());
    // The counter tracks carry the Timeline's numbers at every step.
    for (size_t i = 0; i < (*r)->steps().size(); ++i) {
        const StepSummary& s = (*r)->steps()[i];
        auto state = (*r)->state_at(s.step);
        ASSERT_TRUE(state.ok());
        EXPECT_EQ(counters["blocks_used"][i], (*state)->blocks_used()) << "step " << s.step;
        EXPECT_DOUBLE_EQ(counters["fragmentation"][i], (*state)->metrics.at("fragmentation"));
        EXPECT_DOUBLE_EQ(counters["prefix_hit_rate"][i], (*state)->metrics.at("prefix_hit_rate"));
    }
    std::istringstream csv(csv_text.str());
    std::string line;
    size_t rows = 0;
    while (std::getline(csv, line))
        ++rows;
    EXPECT_EQ(rows, (*r)->steps().size() + 1);
    // The CLI writes the same thing and refuses an unknown format.
    EXPECT_EQ(
        kvscope({"export", path, "--format", "perfetto", "--out", dir_ + "/c.json"}).exit_code, 0);
    EXPECT_EQ(kvscope({"export", path, "--format", "pdf", "--out", dir_ + "/c.pdf"}).exit_code, 2);
}

}  // namespace
}  // namespace kvscope
