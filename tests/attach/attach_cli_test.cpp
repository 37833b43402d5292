// kvscope attach and publish as a user runs them: a recorded, check-clean session and a summary
// from real sockets, and one-line refusals of bad input (exit 2 usage, 1 failure).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_support.h"

namespace kvscope::test {
namespace {

void expect_one_line(const CommandResult& r, int code, const std::string& mentions) {
    EXPECT_EQ(r.exit_code, code) << r.err;
    EXPECT_NE(r.err.find(mentions), std::string::npos) << r.err;
    EXPECT_LE(std::count(r.err.begin(), r.err.end(), '\n'), 2) << r.err;  // CLI11 adds a hint
}

TEST(AttachCli, RecordsWhatPublishSendsAndSummarizesIt) {
    std::string dir = temp_dir();
    // Ports from the pid keep parallel test runs apart.
    const int base = 20000 + (getpid() % 2000) * 4;
    auto ep = [&](int i) { return "tcp://127.0.0.1:" + std::to_string(base + i); };
    // publish waits 2 s for subscribers, sends for about 0.4 s, then answers replay requests for
    // 2 s more; attach ends at 3 s and asks for anything after the last batch it saw (a
    // withheld last batch is found that way).
    int pub = start_command({kvscope_binary(), "publish", "--endpoint", ep(0), "--replay", ep(2),
                             "--ranks",        "2",       "--events",   "800", "--batch",  "8",
                             "--rate",         "2000",    "--gaps",     "0.1", "--format", "sglang",
                             "--hash",         "bytes",   "--wait-ms",  "2000"});
    int attach = start_command({kvscope_binary(), "attach", ep(0), ep(1), "--replay", ep(2), ep(3),
                                "--duration", "3", "--record", dir + "/a.kvs", "--summary-json",
                                dir + "/a.json"});
    EXPECT_EQ(wait_command(pub), 0);
    ASSERT_EQ(wait_command(attach), 0);
    auto j = nlohmann::json::parse(read_file(dir + "/a.json"));
    ASSERT_EQ(j["ranks"].size(), 2u);
    for (const auto& r : j["ranks"]) {
        EXPECT_EQ(r["events"].get<int64_t>(), 800);
        EXPECT_EQ(r["batches_lost"].get<int64_t>(), 0);
        EXPECT_EQ(r["gaps"], r["gaps_filled"]);
        EXPECT_EQ(r["malformed_frames"].get<int64_t>(), 0);
    }
    EXPECT_EQ(j["ranks"][1]["rank"].get<int>(), 1);
    auto check = run_command({kvscope_binary(), "check", dir + "/a.kvs"});
    EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
    auto inspect = run_command({kvscope_binary(), "inspect", dir + "/a.kvs"});
    EXPECT_NE(inspect.out.find("attached"), std::string::npos) << inspect.out;
}

TEST(AttachCli, BadInputIsRefusedInOneLine) {
    std::string dir = temp_dir();
    expect_one_line(run_command({kvscope_binary(), "attach"}), 2, "endpoints");
    expect_one_line(run_command({kvscope_binary(), "attach", "not-an-endpoint", "--duration", "1"}),
                    2, "not-an-endpoint");
    expect_one_line(run_command({kvscope_binary(), "attach", "tcp://127.0.0.1:1", "--replay",
                                 "tcp://127.0.0.1:2", "tcp://127.0.0.1:3"}),
                    2, "one replay endpoint per endpoint");
    std::string existing = write_file(dir + "/mine.kvs", "precious");
    expect_one_line(run_command({kvscope_binary(), "attach", "tcp://127.0.0.1:1", "--record",
                                 existing, "--duration", "1"}),
                    1, "exists");
    EXPECT_EQ(read_file(existing), "precious");
    expect_one_line(run_command({kvscope_binary(), "publish", "--endpoint", "ipc:///tmp/x",
                                 "--ranks", "2", "--duration", "1"}),
                    2, "port");
    std::string not_session = write_file(dir + "/not.kvs", "hello");
    expect_one_line(run_command({kvscope_binary(), "publish", "--endpoint", "tcp://127.0.0.1:*",
                                 "--session", not_session, "--duration", "1"}),
                    1, "not.kvs");
    expect_one_line(run_command({kvscope_binary(), "publish", "--endpoint", "tcp://127.0.0.1:1",
                                 "--format", "json"}),
                    2, "--format");
}

}  // namespace
}  // namespace kvscope::test
