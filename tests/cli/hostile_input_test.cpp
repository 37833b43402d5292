// The real binary against hostile and unlucky conditions: FIFOs where files belong, outputs that
// would destroy a user's file or the command's own input, two recorders on one path, a disk
// that fills mid-run, absurd workloads, control sequences in untrusted text, NaN weights.
// Each case was a hang, a crash, data loss or a silent wrong answer before it was fixed.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>

#include "base/machine_memory.h"
#include "engine/gguf_file.h"
#include "gguf_builder.h"
#include "test_support.h"

namespace kvscope {
namespace {

namespace fs = std::filesystem;

test::CommandResult kvscope(std::vector<std::string> args, int timeout = 120) {
    return test::run_kvscope(std::move(args), timeout);
}

void expect_refused(const test::CommandResult& r, const std::string& expect,
                    const std::string& what) {
    EXPECT_FALSE(r.signaled) << what << " crashed: " << r.err;
    EXPECT_EQ(r.exit_code, 1) << what << "\n" << r.err;
    EXPECT_NE(r.err.find(expect), std::string::npos) << what << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << what << ": not one line\n"
                                                               << r.err;
}

// A workload that keeps the engine busy for a few seconds.
std::string slow_workload(const std::string& dir, int requests = 60) {
    std::string text;
    for (int i = 0; i < requests; ++i)
        text += "{\"id\":\"s" + std::to_string(i) + "\",\"arrival_step\":" + std::to_string(i) +
                ",\"prompt_ids\":[1," + std::to_string(2 + i % 50) + "],\"max_tokens\":300}\n";
    return test::write_file(dir + "/slow.jsonl", text);
}

bool wait_for(const std::string& path, int seconds = 60) {
    for (int i = 0; i < seconds * 20; ++i) {
        if (fs::exists(path)) return true;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
}

// Whether this machine lets the tests make a private mount namespace (root, or user
// namespaces): then a real tmpfs can fill up and be remounted read-only.
bool can_mount() {
    auto r = test::run_command({"/usr/bin/unshare", "-m", "/bin/sh", "-c",
                                "mount -t tmpfs -o size=1m none /mnt && echo ok"},
                               20);
    return r.exit_code == 0 && r.out.find("ok") != std::string::npos;
}

TEST(Hostile, FifosAreRefusedByNameInsteadOfBlockingForever) {
    std::string dir = test::temp_dir(), fifo = dir + "/pipe";
    ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
    struct Case {
        std::vector<std::string> args;
        std::string expect;
    };
    for (const Case& c : {Case{{"generate", "--model", fifo}, "is a FIFO, not a model file"},
                          Case{{"run", "--workload", fifo}, "is a FIFO, not a workload"},
                          Case{{"check", fifo}, "is a FIFO, not a session file"},
                          Case{{"inspect", fifo}, "is a FIFO, not a session file"},
                          Case{{"export", fifo, "--format", "csv", "--out", dir + "/x.csv"},
                               "is a FIFO, not a session file"},
                          Case{{"tokenize", "--file", fifo}, "is a FIFO, not a text file"},
                          Case{{"perplexity", "--file", fifo}, "is a FIFO, not a text file"}}) {
        auto r = kvscope(c.args, 30);
        EXPECT_NE(r.exit_code, -2) << c.args[0] << " hung on a FIFO";
        expect_refused(r, c.expect, c.args[0] + " on a FIFO");
    }
}

TEST(Hostile, OutputsNeverReplaceAFileUnlessForcedNorEverAnInput) {
    std::string dir = test::temp_dir(), model = test::bundled_model();
    std::string w =
        test::write_file(dir + "/w.jsonl", "{\"prompt_ids\":[1,5,9],\"max_tokens\":4}\n");
    const std::string precious = "a user's file, not to be lost\n";
    std::string kept = test::write_file(dir + "/kept.txt", precious);
    // Each output flag aimed at an existing file: refused, the file unchanged.
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"run", "--workload", w, "--record", kept},
          {"run", "--workload", w, "--summary-json", kept},
          {"generate", "--max-tokens", "2", "--record", kept},
          {"workload", "--requests", "2", "--out", kept}}) {
        expect_refused(kvscope(args), "already exists; pass --force", args[0] + " " + args[3]);
        EXPECT_EQ(test::read_file(kept), precious);
    }
    // A session to export; its export over an existing file, then over the session itself.
    std::string s = dir + "/s.kvs";
    ASSERT_EQ(kvscope({"run", "--workload", w, "--record", s}).exit_code, 0);
    std::string session_bytes = test::read_file(s);
    expect_refused(kvscope({"export", s, "--format", "csv", "--out", kept}), "already exists",
                   "export over a file");
    EXPECT_EQ(test::read_file(kept), precious);
    expect_refused(kvscope({"export", s, "--format", "csv", "--out", s, "--force"}),
                   "one of this command's inputs", "export over its own input");
    EXPECT_EQ(test::read_file(s), session_bytes);
    // The model being served and the workload being read, even with --force.
    std::string model_copy = dir + "/m.gguf";
    fs::copy_file(model, model_copy);
    expect_refused(
        kvscope({"run", "--model", model_copy, "--workload", w, "--record", model_copy, "--force"}),
        "one of this command's inputs", "recording over the model");
    expect_refused(kvscope({"run", "--workload", w, "--record", w, "--force"}),
                   "one of this command's inputs", "recording over the workload");
    EXPECT_EQ(test::read_file(model_copy), test::read_file(model));
    // Asked to, it replaces: the old file goes only once the new one is whole.
    auto forced = kvscope({"run", "--workload", w, "--record", kept, "--force"});
    EXPECT_EQ(forced.exit_code, 0) << forced.err;
    EXPECT_EQ(kvscope({"check", kept}).exit_code, 0);
    auto exported = kvscope({"export", s, "--format", "csv", "--out", dir + "/s.csv"});
    EXPECT_EQ(exported.exit_code, 0) << exported.err;
    // Nothing is left beside the outputs.
    for (const auto& e : fs::directory_iterator(dir))
        EXPECT_EQ(e.path().string().find(".tmp-"), std::string::npos) << e.path();
    EXPECT_FALSE(fs::exists(s + ".part"));
}

TEST(Hostile, TheSecondRecorderOnAPathIsRefusedAndTheFirstKeepsItsFile) {
    std::string dir = test::temp_dir(), path = dir + "/same.kvs";
    std::string w = slow_workload(dir, 30);
    int first = test::start_command(
        {test::kvscope_binary(), "run", "--workload", w, "--record", path, "--threads", "1"});
    ASSERT_TRUE(wait_for(path + ".part")) << "the first recorder never started";
    auto second = kvscope({"run", "--workload", w, "--record", path, "--threads", "1"});
    expect_refused(second, "another kvscope is recording to " + path, "second recorder");
    auto forced = kvscope({"run", "--workload", w, "--record", path, "--force"});
    expect_refused(forced, "another kvscope is recording", "second recorder with --force");
    EXPECT_EQ(test::wait_command(first), 0);
    auto check = kvscope({"check", path});
    EXPECT_EQ(check.exit_code, 0) << check.err;
    EXPECT_FALSE(fs::exists(path + ".part"));
}

// Records `workload` to `path` and kills the run (SIGKILL) once its log is being written: what a
// crash leaves, "<path>.part" and its "-wal".
void crash_a_recording(const std::string& path, const std::string& workload) {
    int pid = test::start_command({test::kvscope_binary(), "run", "--workload", workload,
                                   "--record", path, "--threads", "1"});
    bool logging = wait_for(path + ".part-wal");
    if (logging) std::this_thread::sleep_for(std::chrono::milliseconds(800));
    kill(pid, SIGKILL);
    EXPECT_EQ(test::wait_command(pid), 128 + SIGKILL);
    ASSERT_TRUE(logging) << "the recording never wrote its log";
}

TEST(Hostile, ARecordingCutShortIsKeptUntilRepairedOrDiscardedOnPurpose) {
    std::string dir = test::temp_dir(), path = dir + "/cut.kvs";
    std::string w = slow_workload(dir);
    ASSERT_NO_FATAL_FAILURE(crash_a_recording(path, w));
    // A new recording to the same path does not destroy what the killed one left.
    expect_refused(kvscope({"run", "--workload", w, "--record", path}),
                   "is left from a recording that did not finish", "recording over a leftover");
    auto repaired = kvscope({"check", "--repair", path + ".part"});
    ASSERT_EQ(repaired.exit_code, 0) << repaired.err;
    EXPECT_NE(repaired.out.find("folded its write-ahead log"), std::string::npos) << repaired.out;
    EXPECT_FALSE(fs::exists(path + ".part-wal"));
    // Repaired, the file alone is the session: a copy without anything beside it opens.
    fs::copy_file(path + ".part", dir + "/alone.kvs");
    EXPECT_EQ(kvscope({"check", dir + "/alone.kvs"}).exit_code, 0);
    // Discarding it takes --force.
    auto forced = kvscope({"run", "--workload",
                           test::write_file(dir + "/one.jsonl", "{\"prompt_ids\":[1,2]}\n"),
                           "--record", path, "--force"});
    EXPECT_EQ(forced.exit_code, 0) << forced.err;
    EXPECT_FALSE(fs::exists(path + ".part"));
}

// The run stops at the first failed write with the reason, and what was written before it is
// a session `check` accepts. A real full tmpfs where the machine allows a mount namespace,
// else a file-size limit (ulimit -f), which fails the same writes with EFBIG.
TEST(Hostile, AFullDiskStopsTheRunAtTheFailedWriteAndLeavesACheckableFile) {
    std::string dir = test::temp_dir(), bin = test::kvscope_binary();
    std::string w = slow_workload(dir, 200);
    std::string script = "\"$0\" run --workload " + w +
                         " --record s.kvs --threads 1 --summary-json full.json; "
                         "echo run-exit=$?; \"$0\" check s.kvs.part; echo check-exit=$?";
    test::CommandResult r;
    if (can_mount()) {
        std::string mnt = dir + "/small";
        fs::create_directories(mnt);
        r = test::run_command(
            {"/usr/bin/unshare", "-m", "/bin/sh", "-c",
             "mount -t tmpfs -o size=512k none " + mnt + " && cd " + mnt + " && " + script, bin},
            600);
        EXPECT_NE(r.err.find("database or disk is full"), std::string::npos) << r.err;
    } else {
        std::cout << "no mount namespace here: a file-size limit stands in for the full disk\n";
        r = test::run_command(
            {"/bin/sh", "-c", "cd " + dir + " && ulimit -f 4000 && " + script, bin}, 600);
    }
    EXPECT_NE(r.out.find("run-exit=1"), std::string::npos) << r.out << r.err;
    EXPECT_NE(r.err.find("recording failed"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("what was recorded up to step"), std::string::npos) << r.err;
    EXPECT_NE(r.out.find("check-exit=0"), std::string::npos) << r.out << r.err;
    // It stopped there rather than serve all 200 requests first: no summary was written.
    EXPECT_EQ(r.out.find("requests "), std::string::npos) << r.out;
}

TEST(Hostile, WriteTargetsThatCannotBeWrittenSayWhy) {
    std::string dir = test::temp_dir();
    std::string w = test::write_file(dir + "/w.jsonl", "{\"prompt_ids\":[1,2],\"max_tokens\":2}\n");
    expect_refused(kvscope({"run", "--workload", w, "--record", dir + "/no/such/dir/s.kvs"}),
                   "folder " + dir + "/no/such/dir does not exist", "missing folder");
    expect_refused(kvscope({"run", "--workload", w, "--record", dir}), "it is a directory",
                   "a directory as the target");
    expect_refused(kvscope({"workload", "--requests", "2", "--out", dir + "/nope/w.jsonl"}),
                   "does not exist", "workload into a missing folder");
    if (!can_mount()) GTEST_SKIP() << "no mount namespace here for a read-only file system";
    std::string ro = dir + "/ro";
    fs::create_directories(ro);
    auto r = test::run_command({"/usr/bin/unshare", "-m", "/bin/sh", "-c",
                                "mount -t tmpfs none " + ro + " && mount -o remount,ro " + ro +
                                    " && \"$0\" run --workload " + w + " --record " + ro + "/s.kvs",
                                test::kvscope_binary()},
                               60);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("read-only file system"), std::string::npos) << r.err;
}

TEST(Hostile, LongIdleGapsInAWorkloadAreSkippedNotStepped) {
    std::string dir = test::temp_dir();
    std::string w = test::write_file(
        dir + "/gap.jsonl",
        "{\"id\":\"early\",\"prompt_ids\":[1,2,3],\"max_tokens\":4}\n"
        "{\"id\":\"late\",\"prompt_ids\":[1,2,3],\"max_tokens\":4,\"arrival_step\":2147483647}\n");
    auto r = kvscope(
        {"run", "--workload", w, "--record", dir + "/gap.kvs", "--summary-json", dir + "/s.json"},
        60);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto j = nlohmann::json::parse(test::read_file(dir + "/s.json"));
    EXPECT_EQ(j["outputs"].size(), 2u);
    EXPECT_LT(j["steps"].get<int64_t>(), 100);  // iterations run, not 2^31
    EXPECT_LT(fs::file_size(dir + "/gap.kvs"), 1u << 20);
    auto inspect = kvscope({"inspect", dir + "/gap.kvs", "--json"});
    ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
    EXPECT_GT(nlohmann::json::parse(inspect.out)["step"].get<int64_t>(), 2147483647);
}

TEST(Hostile, APromptThatCannotFitTheContextIsRefusedBeforeItIsEncoded) {
    std::string dir = test::temp_dir();
    std::string big(50u << 20, 'a');
    for (size_t i = 1; i < big.size(); i += 2)
        big[i] = ' ';
    std::string w = test::write_file(dir + "/big.jsonl", "{\"prompt\":\"" + big + "\"}\n");
    expect_refused(kvscope({"run", "--workload", w}),
                   "'prompt' is 52428800 bytes, more than the model's context of 512 tokens",
                   "a 50 MB prompt");
    // (A command-line argument may be at most 128 KiB.)
    expect_refused(kvscope({"generate", "--prompt", big.substr(0, 100000)}),
                   "--prompt is 100000 bytes", "a 100 kB --prompt");
    // A 2^64 - 1 max_tokens is reported as written, not as 2^63 - 1.
    std::string huge = test::write_file(
        dir + "/huge.jsonl", "{\"prompt_ids\":[1],\"max_tokens\":18446744073709551615}\n");
    expect_refused(kvscope({"run", "--workload", huge}), "'max_tokens' is 18446744073709551615",
                   "max_tokens past 64 bits");
}

TEST(Hostile, UntrustedTextNeverReachesTheTerminalRaw) {
    std::string dir = test::temp_dir();
    // A request id carrying a window-title sequence, a colour, clear-screen and a newline.
    std::string evil = "\\u001b]0;pwned\\u0007\\u001b[31mred\\u001b[2J\\nline2\\u009b";
    std::string w = test::write_file(dir + "/evil.jsonl", "{\"id\":\"" + evil +
                                                              "\",\"prompt_ids\":[1,2],"
                                                              "\"max_tokens\":2000}\n");
    auto run = kvscope({"run", "--workload", w, "--record", dir + "/evil.kvs", "--num-blocks", "8",
                        "--summary-json", dir + "/s.json"});
    ASSERT_EQ(run.exit_code, 0) << run.err;  // rejected (too big for 8 blocks), with its id
    EXPECT_NE(run.err.find("request \\x1b]0;pwned\\x07"), std::string::npos) << run.err;
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"inspect", dir + "/evil.kvs"},
          {"inspect", dir + "/evil.kvs", "--json"},
          {"workload", "--requests", "3"}}) {
        auto r = kvscope(args);
        ASSERT_EQ(r.exit_code, 0) << r.err;
        for (const std::string* text : {&run.err, &run.out, &r.out, &r.err}) {
            EXPECT_EQ(text->find('\x1b'), std::string::npos) << args[0] << ": " << *text;
            EXPECT_EQ(text->find('\x07'), std::string::npos) << args[0];
            EXPECT_EQ(text->find("\xc2\x9b"), std::string::npos) << args[0];
        }
        if (args.size() == 2) {
            EXPECT_NE(r.out.find("\\x1b[31mred\\x1b[2J\\nline2\\u009b"), std::string::npos)
                << r.out;
        }
        if (args.size() == 3 && args[0] == "inspect") {
            auto j = nlohmann::json::parse(r.out);  // still valid JSON, text intact
            EXPECT_EQ(j["requests"][0]["id"].get<std::string>().substr(0, 4), "\x1b]0;");
        }
    }
}

// A copy of the bundled model with NaN in one tensor of `layer`.
std::string poisoned_model(const std::string& dir, int layer) {
    std::string model = test::bundled_model();
    std::string bytes = test::read_file(model);
    auto f = GgufFile::open(model);
    EXPECT_TRUE(f.ok());
    const GgufTensorInfo* t = f->find_tensor("blk." + std::to_string(layer) + ".ffn_down.weight");
    EXPECT_NE(t, nullptr);
    // 0xff bytes are NaN in F32, F16 and BF16 alike.
    for (size_t i = 0; i < 64; ++i)
        bytes[t->offset + i] = '\xff';
    return test::write_file(dir + "/nan.gguf", bytes);
}

TEST(Hostile, NanWeightsStopTheRunNamingTheLayer) {
    std::string dir = test::temp_dir();
    std::string model = poisoned_model(dir, 2);
    expect_refused(kvscope({"generate", "--model", model, "--prompt", "In the beginning",
                            "--max-tokens", "8"}),
                   "the model produced NaN in layer 2", "generate with NaN weights");
    std::string w = test::write_file(dir + "/w.jsonl", "{\"prompt_ids\":[1,2],\"max_tokens\":4}\n");
    expect_refused(kvscope({"run", "--model", model, "--workload", w}),
                   "the model produced NaN in layer 2", "run with NaN weights");
}

}  // namespace
}  // namespace kvscope

namespace kvscope {
namespace {

// The bandwidth cache is ours, but whatever sits at its path is measured over, never trusted,
// and never stops a recording: garbage, absurd figures, another CPU's, a huge file, a FIFO, a
// directory.
TEST(Hostile, ABadBandwidthCacheIsMeasuredOverAndNeverStopsARecording) {
    const std::string dir = test::temp_dir();
    const std::string bin = test::kvscope_binary();
    struct Case {
        std::string name;
        std::function<void(const std::string& path)> make;
    };
    const std::string cpu_line = "\"cores\": 2, \"cpu\": \"x\"";
    std::vector<Case> cases = {
        {"garbage", [](const std::string& p) { test::write_file(p, "\x1b[2J{{{not json"); }},
        {"absurd",
         [](const std::string& p) {
             test::write_file(p,
                              "{\"read_1_gbps\": 1e300, \"copy_1_gbps\": -4, "
                              "\"read_all_gbps\": \"NaN\", \"copy_all_gbps\": null}");
         }},
        {"huge", [](const std::string& p) { test::write_file(p, std::string(1 << 20, ' ')); }},
        {"fifo", [](const std::string& p) { ASSERT_EQ(::mkfifo(p.c_str(), 0600), 0); }},
        {"directory", [](const std::string& p) { fs::create_directories(p); }},
    };
    for (const Case& c : cases) {
        const std::string cache = dir + "/" + c.name;
        fs::create_directories(cache + "/kvscope");
        c.make(cache + "/kvscope/memory-bandwidth.json");
        const std::string kvs = dir + "/" + c.name + ".kvs";
        auto r = test::run_command({"/usr/bin/env", "XDG_CACHE_HOME=" + cache, bin, "generate",
                                    "--max-tokens", "3", "--record", kvs},
                                   120);
        EXPECT_EQ(r.exit_code, 0) << c.name << ": " << r.err;
        EXPECT_NE(r.err.find("measuring this machine's memory bandwidth"), std::string::npos)
            << c.name << ": " << r.err;
        EXPECT_EQ(r.err.find('\x1b'), std::string::npos) << c.name;
        auto info = test::run_command({bin, "inspect", kvs, "--step", "1", "--json"});
        ASSERT_EQ(info.exit_code, 0) << c.name << ": " << info.err;
        const double limit = nlohmann::json::parse(info.out)["bandwidth_limit_gbps"].get<double>();
        EXPECT_GT(limit, 0.0) << c.name;
        EXPECT_LT(limit, 1e5) << c.name;
    }
    // Once measured, a second run reads the cache instead of measuring again.
    const std::string cache = dir + "/garbage";
    auto again = test::run_command({"/usr/bin/env", "XDG_CACHE_HOME=" + cache, bin, "generate",
                                    "--max-tokens", "3", "--record", dir + "/again.kvs"},
                                   120);
    EXPECT_EQ(again.exit_code, 0) << again.err;
    EXPECT_EQ(again.err.find("measuring"), std::string::npos) << again.err;
}

TEST(Hostile, BenchMemoryTakesOnlySaneSettings) {
    auto ok =
        kvscope({"bench", "memory", "--size", "8", "--passes", "1", "--threads", "2", "--json"});
    ASSERT_EQ(ok.exit_code, 0) << ok.err;
    auto j = nlohmann::json::parse(ok.out);
    for (const char* k : {"read_1_gbps", "copy_1_gbps", "read_all_gbps", "copy_all_gbps"})
        EXPECT_GT(j[k].get<double>(), 0.0) << k;
    EXPECT_EQ(j["buffer_bytes"].get<int64_t>(), int64_t{8} << 20);
    EXPECT_EQ(j["threads_all"].get<int>(), 2);
    for (std::vector<std::string> bad : {std::vector<std::string>{"bench"},
                                         {"bench", "memory", "--passes", "0"},
                                         {"bench", "memory", "--size", "-1"},
                                         {"bench", "memory", "--threads", "99999"},
                                         {"bench", "disk"}}) {
        auto r = kvscope(bad);
        EXPECT_EQ(r.exit_code, 2) << bad.back() << ": " << r.err;
    }
}

// bench cpu on the bundled model: a real run in JSON, then every bad setting refused in one
// line (usage: 2; a test longer than the model's context: 1), before any model is loaded.
TEST(Hostile, BenchCpuRunsItsTestsAndRefusesBadOnes) {
    auto ok = kvscope({"bench", "cpu", "--tests", "pp16,tg4", "--reps", "1", "--threads", "1",
                       "--matmul", "fast", "--json"});
    ASSERT_EQ(ok.exit_code, 0) << ok.err;
    auto j = nlohmann::json::parse(ok.out);
    EXPECT_EQ(j["matmul"].get<std::string>(), "fast");
    EXPECT_GT(j["peak_rss_bytes"].get<int64_t>(), j["weight_bytes"].get<int64_t>() / 2);
    ASSERT_EQ(j["results"].size(), 2u);
    EXPECT_EQ(j["results"][0]["test"].get<std::string>(), "pp16");
    for (const auto& r : j["results"])
        EXPECT_GT(r["tokens_per_second"].get<double>(), 0.0);
    // Test names are kvscope's to read: one line naming the test.
    for (std::string bad : {"xx", "pp0", "pp1234567", "tg12a", "pp-5"}) {
        auto r = kvscope({"bench", "cpu", "--tests", "pp16," + bad});
        EXPECT_EQ(r.exit_code, 2) << bad << ": " << r.err;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
        EXPECT_NE(r.err.find("'" + bad + "' is not a test"), std::string::npos) << r.err;
    }
    // Flags CLI11 checks: its message and status 2.
    for (std::vector<std::string> bad :
         {std::vector<std::string>{"--matmul", "slow"}, {"--reps", "0"}, {"--threads", "-1"}}) {
        std::vector<std::string> args = {"bench", "cpu"};
        args.insert(args.end(), bad.begin(), bad.end());
        auto r = kvscope(args);
        EXPECT_EQ(r.exit_code, 2) << bad.back() << ": " << r.err;
    }
    auto too_long = kvscope({"bench", "cpu", "--tests", "pp999999"});
    EXPECT_EQ(too_long.exit_code, 1) << too_long.err;
    EXPECT_NE(too_long.err.find("tokens of context"), std::string::npos) << too_long.err;
}

}  // namespace
}  // namespace kvscope

namespace kvscope {
namespace {

// Every output of every command is a regular file or a new name: a FIFO nobody reads would
// block the open forever, a device would swallow the bytes. Refused by name, at once, like
// inputs; the FIFO is left as it was.
TEST(Hostile, OutputsThatAreNotRegularFilesAreRefusedInsteadOfBlocking) {
    std::string dir = test::temp_dir(), fifo = dir + "/pipe";
    ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
    auto session = test::source_file("assets/sessions/sample-chat.kvs");
    ASSERT_TRUE(session);
    std::string w = test::write_file(dir + "/w.jsonl", "{\"prompt_ids\":[1,2],\"max_tokens\":2}\n");
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"export", *session, "--format", "csv", "--out", fifo},
          {"export", *session, "--format", "perfetto", "--out", fifo, "--force"},
          {"workload", "--requests", "2", "--out", fifo},
          {"run", "--workload", w, "--summary-json", fifo},
          {"run", "--workload", w, "--record", fifo, "--force"}}) {
        auto r = kvscope(args, 30);
        EXPECT_NE(r.exit_code, -2) << args[0] << " blocked on a FIFO";
        expect_refused(r, "cannot write " + fifo + ": it is a FIFO", args[0] + " " + args[3]);
    }
    struct stat st {};
    ASSERT_EQ(lstat(fifo.c_str(), &st), 0);
    EXPECT_TRUE(S_ISFIFO(st.st_mode));
    expect_refused(kvscope({"export", *session, "--format", "csv", "--out", "/dev/null"}, 30),
                   "it is a device", "export to a device");
}

// A symbolic link that names nothing is still something at that name: replaced only with
// --force (the link, never the file it would name), like a file.
TEST(Hostile, ADanglingSymlinkAtAnOutputIsReplacedOnlyWhenForced) {
    std::string dir = test::temp_dir(), link = dir + "/out.csv", target = dir + "/elsewhere";
    ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
    auto session = test::source_file("assets/sessions/sample-chat.kvs");
    ASSERT_TRUE(session);
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"export", *session, "--format", "csv", "--out", link},
          {"workload", "--requests", "2", "--out", link}}) {
        expect_refused(kvscope(args), "is a symbolic link to nothing; pass --force", args[0]);
        struct stat st {};
        ASSERT_EQ(lstat(link.c_str(), &st), 0);
        EXPECT_TRUE(S_ISLNK(st.st_mode)) << args[0] << " replaced the link";
    }
    auto forced = kvscope({"export", *session, "--format", "csv", "--out", link, "--force"});
    EXPECT_EQ(forced.exit_code, 0) << forced.err;
    struct stat st {};
    ASSERT_EQ(lstat(link.c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode));
    EXPECT_FALSE(fs::exists(target));
}

// A recording cut off by a crash, in a folder kvscope cannot write (here a read-only file
// system): not corrupt, and the answer says so and names the folder, for repair and reading.
TEST(Hostile, ACrashedRecordingInAFolderKvscopeCannotWriteIsNotCalledCorrupt) {
    if (!can_mount()) GTEST_SKIP() << "no mount namespace here for a read-only file system";
    std::string dir = test::temp_dir(), path = dir + "/cut.kvs";
    std::string w = slow_workload(dir);
    ASSERT_NO_FATAL_FAILURE(crash_a_recording(path, w));
    std::string ro = dir + "/ro";
    fs::create_directories(ro);
    auto r = test::run_command(
        {"/usr/bin/unshare", "-m", "/bin/sh", "-c",
         "mount -t tmpfs none " + ro + " && cp " + path + ".part " + path + ".part-wal " + ro +
             "/ && mount -o remount,ro " + ro + " && \"$0\" check --repair " + ro +
             "/cut.kvs.part; echo repair-exit=$?",
         test::kvscope_binary()},
        60);
    EXPECT_NE(r.out.find("repair-exit=1"), std::string::npos) << r.out << r.err;
    EXPECT_NE(r.err.find("cannot repair it in folder " + ro + " (a read-only file system)"),
              std::string::npos)
        << r.err;
    EXPECT_EQ(r.err.find("corrupt database"), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

// Reliability, round two (issue 29): values every parser reads as numbers but no flag can
// mean, JSON deeper than any kvscope writes, and values that were accepted and did the wrong
// thing. Each is refused in one line, with status 2 (usage) or 1 (a bad file), quickly.
void expect_one_line_refusal(const test::CommandResult& r, int code, const std::string& expect,
                             const std::string& what) {
    EXPECT_FALSE(r.signaled) << what << " crashed: " << r.err;
    EXPECT_NE(r.exit_code, -2) << what << " did not end";
    EXPECT_EQ(r.exit_code, code) << what << "\n" << r.err;
    EXPECT_NE(r.err.find(expect), std::string::npos) << what << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << what << ": not one line\n"
                                                               << r.err;
    EXPECT_LT(r.err.size(), 600u) << what;
}

// NaN crashed the sampler (--top-p) and made attach and publish run forever (--duration);
// infinities and numbers past a double fared no better. Every floating-point flag of every
// command, and --kv-budget's numbers, refuse them naming the flag and what it takes.
TEST(Hostile, NonFiniteNumbersAreRefusedByEveryFloatingPointFlag) {
    struct Flag {
        std::vector<std::string> command;
        std::string flag;
        std::string expect;
    };
    const std::string finite = "must be a finite number from ";
    const std::vector<Flag> flags = {
        {{"generate", "--max-tokens", "2", "--temperature", "1"}, "--top-p", finite + "0 to 1"},
        {{"generate", "--max-tokens", "2"}, "--temperature", finite + "0 to 100"},
        {{"attach", "tcp://127.0.0.1:1"}, "--duration", finite + "0 to 10000000"},
        {{"publish", "--endpoint", "tcp://127.0.0.1:*", "--wait-ms", "0"},
         "--duration",
         finite + "0 to 10000000"},
        {{"publish", "--endpoint", "tcp://127.0.0.1:*", "--wait-ms", "0", "--duration", "1"},
         "--rate",
         finite + "0 to 1000000000"},
        {{"publish", "--endpoint", "tcp://127.0.0.1:*", "--wait-ms", "0", "--duration", "1"},
         "--gaps",
         finite + "0 to 1"},
        {{"generate", "--max-tokens", "2", "--policy", "h2o"}, "--kv-budget", "--kv-budget"},
        {{"run", "--workload", "unused.jsonl", "--policy", "h2o"}, "--kv-budget", "--kv-budget"},
        {{"eval", "--text", "unused.txt", "--policy", "h2o"}, "--kv-budget", "--kv-budget"},
    };
    for (const Flag& f : flags)
        for (const std::string value : {"nan", "NaN", "-nan", "inf", "-inf", "infinity", "1e999",
                                        "nan%", "inf%", "", "0x1p3", "1;5", "2 "}) {
            std::vector<std::string> args = f.command;
            args.push_back(f.flag);
            args.push_back(value);
            const std::string what = f.command[0] + " " + f.flag + " '" + value + "'";
            auto r = kvscope(args, 20);
            expect_one_line_refusal(r, 2, f.expect, what);
            EXPECT_NE(r.err.find(f.flag), std::string::npos) << what << ": " << r.err;
        }
    // The window's --font-scale, where the window is built.
    if (kvscope({"replay", "--help"}).exit_code == 0)
        expect_one_line_refusal(
            kvscope({"replay", test::write_file(test::temp_dir() + "/x.kvs", ""), "--font-scale",
                     "nan"}),
            2, "--font-scale: " + finite + "0.5 to 4", "replay --font-scale nan");
}

// 1e-45 over a logit is infinite, and softmax of infinities is NaN: every token came out as the
// last of the vocabulary. A temperature too small to divide by samples as its limit does,
// greedily.
TEST(Hostile, ATemperatureTooSmallToDivideBySamplesGreedily) {
    auto greedy = kvscope({"generate", "--prompt-ids", "1 2 3", "--max-tokens", "12", "--print-ids",
                           "--threads", "1", "--temperature", "0"});
    ASSERT_EQ(greedy.exit_code, 0) << greedy.err;
    for (const char* tiny : {"1e-45", "1e-40", "1e-30"}) {
        auto r = kvscope({"generate", "--prompt-ids", "1 2 3", "--max-tokens", "12", "--print-ids",
                          "--threads", "1", "--temperature", tiny, "--top-p", "0.9"});
        ASSERT_EQ(r.exit_code, 0) << tiny << ": " << r.err;
        EXPECT_EQ(r.out, greedy.out) << tiny;
    }
}

// A workload line of a million nested arrays overflowed the stack (in the message quoting the
// value); every JSON kvscope reads is refused past 64 levels before it is parsed, at any place
// in the line.
TEST(Hostile, DeeplyNestedJsonInAWorkloadIsRefusedInOneLine) {
    const std::string dir = test::temp_dir();
    auto nested = [](size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); };
    struct Case {
        std::string name, line;
    };
    for (const Case& c : {
             Case{"prompt_ids a million deep",
                  "{\"id\":\"r\",\"prompt_ids\":" + nested(1000000) + "}"},
             Case{"prompt_ids 100 000 deep",
                  "{\"id\":\"r\",\"prompt_ids\":" + nested(100000) + "}"},
             Case{"a million deep at the top", nested(1000000)},
             Case{"objects 100 000 deep",
                  [] {
                      std::string s;
                      for (int i = 0; i < 100000; ++i)
                          s += "{\"a\":";
                      return s + "1" + std::string(100000, '}');
                  }()},
             Case{"65 deep", "{\"id\":\"r\",\"prompt_ids\":[1],\"seed\":" + nested(64) + "}"},
         }) {
        const std::string w =
            test::write_file(dir + "/deep.jsonl", "{\"prompt_ids\":[1]}\n" + c.line + "\n");
        expect_one_line_refusal(kvscope({"run", "--workload", w}, 60), 1,
                                "deep.jsonl:2: arrays and objects nested more than 64 deep",
                                c.name);
    }
    // 64 deep parses, and is then refused for what it is.
    const std::string w = test::write_file(
        dir + "/ok.jsonl", "{\"id\":\"r\",\"prompt_ids\":[1],\"seed\":" + nested(63) + "}\n");
    expect_one_line_refusal(kvscope({"run", "--workload", w}), 1,
                            "ok.jsonl:1: 'seed' must be an integer, not an array of 1", "64 deep");
}

// Every field is type-checked before use, the line named; what a message shows of a value or
// key is a few words, however large it is (a 50 MB key was quoted whole).
TEST(Hostile, WorkloadValuesOfTheWrongTypeAreNamedShortlyWithTheirLine) {
    const std::string dir = test::temp_dir();
    const std::string huge(50u << 20, 'k');
    struct Case {
        std::string line, expect;
    };
    for (const Case& c : {
             Case{"{\"" + huge + "\":1}", "unknown field 'kkkkkkkk"},
             Case{"{\"prompt_ids\":[1],\"id\":\"" + huge + "\"}\n{\"prompt_ids\":[1],\"id\":\"" +
                      huge + "\"}",
                  "duplicate request id 'kkkk"},
             Case{"{\"prompt_ids\":[\"" + huge + "\"]}", "'prompt_ids' holds the string 'kkkk"},
             Case{"{\"prompt_ids\":[[1,2]]}", "'prompt_ids' holds an array of 2, not a token id"},
             Case{"{\"prompt_ids\":{\"a\":1}}",
                  "'prompt_ids' must be an array of token ids, not an object"},
             Case{"{\"prompt\":[1]}", "'prompt' must be a string, not an array of 1"},
             Case{"{\"prompt_ids\":[1],\"id\":7}", "'id' must be a string, not 7"},
             Case{"{\"prompt_ids\":[1],\"n\":\"2\"}", "'n' must be an integer, not the string '2'"},
             Case{"{\"prompt_ids\":[1],\"max_tokens\":1e300}",
                  "'max_tokens' must be an integer, not 1e+300"},
             Case{"{\"prompt_ids\":[1],\"temperature\":\"NaN\"}",
                  "'temperature' must be a number, not the string 'NaN'"},
             Case{"{\"prompt_ids\":[1],\"top_p\":1e999}", "a number too large"},
             Case{"{\"prompt_ids\":[1],\"top_p\":null}", "'top_p' must be a number, not null"},
             Case{"\"" + huge + "\"", "expected a JSON object, not the string 'kkkk"},
         }) {
        const std::string w = test::write_file(dir + "/w.jsonl", "# typed\n" + c.line + "\n");
        auto r = kvscope({"run", "--workload", w}, 60);
        expect_one_line_refusal(r, 1, "w.jsonl:", c.expect);
        EXPECT_NE(r.err.find(c.expect), std::string::npos) << r.err.substr(0, 300);
        EXPECT_TRUE(r.err.find("w.jsonl:2: ") != std::string::npos ||
                    r.err.find("w.jsonl:3: ") != std::string::npos)
            << r.err.substr(0, 300);
    }
}

}  // namespace
}  // namespace kvscope

// Issue 29, part C: what another program, a huge setting or a long input did to a run.
namespace kvscope {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

// A copy of the bundled model whose metadata claims a context of `tokens`.
std::string model_claiming_context(const std::string& dir, uint32_t tokens) {
    std::string bytes = test::read_file(test::bundled_model());
    const std::string key = "llama.context_length";
    const size_t at = bytes.find(key);
    EXPECT_NE(at, std::string::npos);
    test::patch(bytes, at + key.size() + 4, tokens);  // after the key: u32 type, then the value
    return test::write_file(dir + "/ctx.gguf", bytes);
}

TEST(Hostile, AModelFileShrinkingUnderARunStopsItSayingSoAndTheRecordingStaysCheckable) {
    std::string dir = test::temp_dir(), model = dir + "/m.gguf", kvs = dir + "/t.kvs";
    fs::copy_file(test::bundled_model(), model);
    test::CommandResult r;
    std::thread run([&] {
        r = kvscope({"generate", "--model", model, "--prompt-ids", "1", "--max-tokens", "500",
                     "--threads", "1", "--record", kvs},
                    300);
    });
    // The recording starts once the model is loaded, just before the first token.
    const bool started = wait_for(kvs + ".part");
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ASSERT_EQ(truncate(model.c_str(), 4096), 0);  // as another program's ftruncate would
    run.join();
    ASSERT_TRUE(started) << r.err;
    expect_refused(r, model + ": the model file changed while in use", "a model cut short");
    auto check = kvscope({"check", kvs});
    EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
}

TEST(Hostile, AHugeContextCostsOnlyTheTokensThatArrive) {
    std::string dir = test::temp_dir();
    auto million = kvscope({"generate", "--ctx-size", "1048576", "--max-tokens", "4"});
    ASSERT_EQ(million.exit_code, 0) << million.err;
    EXPECT_LT(million.peak_rss_bytes,
              test::peak_rss_bound(200 * kMiB));  // 3.1 GB when the context was reserved
    // A model whose metadata claims 2^24 tokens of context: 9.3 GB and over a minute before.
    auto claimed = kvscope({"generate", "--model", model_claiming_context(dir, 1u << 24),
                            "--prompt", "In the beginning", "--max-tokens", "4"},
                           60);
    ASSERT_EQ(claimed.exit_code, 0) << claimed.err;
    EXPECT_LT(claimed.peak_rss_bytes, test::peak_rss_bound(200 * kMiB));
    // A pool asked for by size (half what this machine can spare: 9 GB here) holds only what
    // the requests fill; it was all zero-filled before they started.
    const auto blocks = static_cast<int64_t>(memory_to_spare() / 2 / (3072 * 16));  // 3 KiB a token
    std::string w = test::write_file(dir + "/w.jsonl",
                                     "{\"prompt_ids\":[1,5,9],\"max_tokens\":8}\n"
                                     "{\"prompt_ids\":[1,6],\"max_tokens\":8}\n"
                                     "{\"prompt_ids\":[1,7],\"max_tokens\":8}\n");
    auto pool = kvscope({"run", "--workload", w, "--num-blocks", std::to_string(blocks)});
    ASSERT_EQ(pool.exit_code, 0) << pool.err;
    EXPECT_LT(pool.peak_rss_bytes, test::peak_rss_bound(200 * kMiB));
}

TEST(Hostile, WhatCannotFitTheMachineIsRefusedUpFrontSayingHowBig) {
    const auto memory = static_cast<int64_t>(physical_memory_bytes());
    // The bundled model's K/V: 6 layers x 2 x 64 floats = 3 KiB a token; blocks of 4096 tokens.
    const int64_t blocks = memory / (int64_t{3072} * 4096) + 1;
    std::string w = test::write_file(test::temp_dir() + "/w.jsonl", "{\"prompt_ids\":[1,2]}\n");
    auto pool = kvscope(
        {"run", "--workload", w, "--block-size", "4096", "--num-blocks", std::to_string(blocks)},
        30);
    expect_refused(pool, "a KV cache of " + std::to_string(blocks) + " blocks of 4096 tokens: ",
                   "a pool larger than the machine");
    EXPECT_NE(pool.err.find("this machine can spare"), std::string::npos) << pool.err;
    // bench memory copies between two buffers of --size MiB (at most 65536).
    const int64_t size_mib = memory / kMiB / 2 + 1;
    if (size_mib > 65536) GTEST_SKIP() << "this machine holds two buffers of 64 GiB";
    auto bench = kvscope({"bench", "memory", "--size", std::to_string(size_mib)}, 30);
    expect_refused(bench,
                   "--size " + std::to_string(size_mib) + ": two buffers of " +
                       std::to_string(size_mib) + " MiB: ",
                   "bench buffers larger than the machine");
}

TEST(Hostile, TokenizingALongTextTakesMemoryInProportionToIt) {
    std::string dir = test::temp_dir();
    std::string text;
    for (int i = 0; text.size() < (size_t{20} << 20); ++i)
        text +=
            "And God said, Let there be light: and there was light " + std::to_string(i) + ".\n";
    std::string file = test::write_file(dir + "/long.txt", text);
    auto r = kvscope({"tokenize", "--file", file}, 300);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    // 55 times the text before (one merge heap over all of it); now the text, its ids and a
    // word at a time. The ids are the same: tests/engine/tokenizer_test.cpp.
    EXPECT_LT(r.peak_rss_bytes, test::peak_rss_bound(8 * static_cast<int64_t>(text.size())))
        << r.peak_rss_bytes;
    EXPECT_GT(std::count(r.out.begin(), r.out.end(), ' '), 2'000'000);
}

TEST(Hostile, LongPerplexityRunsShowProgressInALogAndCanBeBounded) {
    std::string text;
    for (int i = 0; i < 400; ++i)
        text += "In the beginning God created the heaven and the earth.\n";
    std::string file = test::write_file(test::temp_dir() + "/t.txt", text);
    auto r = kvscope({"perplexity", "--file", file, "--ctx", "16", "--chunks", "25"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    // stderr is a pipe here: whole lines, every ten chunks, and the run stops at 25 chunks.
    EXPECT_NE(r.err.find("kvscope: chunk 10 of 25, about "), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("kvscope: chunk 20 of 25, about "), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find('\r'), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("25 chunks of 16"), std::string::npos) << r.err;
    EXPECT_NE(r.out.find("[25]"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("[26]"), std::string::npos) << r.out;
    EXPECT_EQ(kvscope({"perplexity", "--file", file, "--chunks", "-1"}).exit_code, 2);
}

TEST(Hostile, LargeMetadataArraysAreHeldAtTheirOwnSize) {
    // Four arrays of 2^24 bytes: 64 MiB of file, which widened to 8 bytes an element took 512.
    const std::string file = test::temp_dir() + "/arrays.gguf";
    {  // gone before the command starts: a child's peak counts what it was forked with
        test::GgufBuilder b;
        b.kv_string("general.architecture", "llama");
        for (int i = 0; i < 4; ++i)
            b.array<uint8_t>("big." + std::to_string(i), test::kGgufU8,
                             std::vector<uint8_t>(size_t{1} << 24, static_cast<uint8_t>(i)));
        test::write_file(file, b.build());
    }
    auto r = kvscope({"generate", "--model", file});
    EXPECT_EQ(r.exit_code, 1) << r.err;  // no model in it, but read through
    EXPECT_NE(r.err.find("embedding_length"), std::string::npos) << r.err;
    EXPECT_LT(r.peak_rss_bytes, test::peak_rss_bound(100 * kMiB));
}

TEST(Hostile, AHugeWorkloadIsWrittenAsItIsMadeNotHeld) {
    std::string dir = test::temp_dir();
    auto small = kvscope({"workload", "--requests", "1000", "--out", dir + "/small.jsonl"});
    auto big = kvscope({"workload", "--requests", "20000", "--out", dir + "/big.jsonl"}, 300);
    ASSERT_EQ(small.exit_code, 0) << small.err;
    ASSERT_EQ(big.exit_code, 0) << big.err;
    std::string lines = test::read_file(dir + "/big.jsonl");
    EXPECT_EQ(std::count(lines.begin(), lines.end(), '\n'), 20000);
    // 2.45 kB a request when all were held (49 MB more for the big one); now none are.
    EXPECT_LT(big.peak_rss_bytes - small.peak_rss_bytes, test::peak_rss_bound(8 * kMiB))
        << small.peak_rss_bytes << " " << big.peak_rss_bytes;
    // The same requests, in the same order, as the file gets them.
    std::string first = test::read_file(dir + "/small.jsonl");
    EXPECT_EQ(lines.substr(0, first.size()), first);
}

}  // namespace
}  // namespace kvscope
