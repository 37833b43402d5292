// kvscope attach and publish as a user runs them: a recorded, check-clean session and a summary
// from real sockets, and one-line refusals of bad input (exit 2 usage, 1 failure).
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <unordered_map>

#include "attach/kv_publisher.h"
#include "attach/kv_trace.h"
#include "sessions/session_reader.h"
#include "test_support.h"

namespace kvscope::test {
namespace {

// What the summary says of reuse, per publisher, worked out here the plain way.
struct Reuse {
    int64_t stored = 0, churn = 0, stored_again = 0, shared_peak = 0;
};

// Replays one rank's stream as `kvscope publish` builds it (the sample run's blocks from the
// start, over and over, hashes salted per loop, and per rank unless --same-hashes) through plain
// sets: the counts its own events imply, whatever attach made of them.
Reuse reuse_of_published_stream(int32_t rank, int64_t events, bool same_hashes) {
    auto path = source_file("assets/sessions/sample-chat.kvs");
    EXPECT_TRUE(path.has_value());
    auto trace = attach::kv_trace_from_session(*path);
    EXPECT_TRUE(trace.ok());
    Reuse r;
    std::map<std::pair<int, uint64_t>, int> refs;  // (medium, hash) -> references
    std::set<std::pair<int, uint64_t>> dropped;
    for (int64_t i = 0; i < events; ++i) {
        const auto& ev = trace->events[static_cast<size_t>(i) % trace->events.size()];
        const int64_t loop = i / static_cast<int64_t>(trace->events.size());
        for (uint64_t h : ev.block_hashes) {
            std::pair<int, uint64_t> key{static_cast<int>(ev.medium),
                                         attach::salt_trace_hash(h, same_hashes ? 0 : rank, loop)};
            if (ev.type == attach::KvEventType::kBlockStored) {
                ++r.stored;
                if (refs[key]++ == 0 && dropped.count(key)) ++r.stored_again;
            } else if (auto it = refs.find(key); it != refs.end() && it->second > 0) {
                if (--it->second == 0) {
                    ++r.churn;
                    dropped.insert(key);
                }
            }
        }
    }
    return r;
}

// The same counts read back from what attach recorded, in the order it took the events in:
// a slot stored while free is a block taken, a kv_removed leaving no reference one gone. Also
// the most hashes two or more publishers held at once (`shared_peak`), and per publisher the
// most of its hashes another held too.
std::vector<Reuse> reuse_in_recording(const std::string& path, int64_t& shared_peak) {
    auto reader = SessionReader::open(path);
    EXPECT_TRUE(reader.ok());
    const size_t n = (*reader)->info().publishers.size();
    auto events =
        (*reader)->events(0, (*reader)->last_step(), {EventKind::kKvStored, EventKind::kKvRemoved});
    EXPECT_TRUE(events.ok());
    std::vector<Reuse> out(n);
    std::unordered_map<int32_t, int32_t> slot_refs;
    std::vector<std::set<std::pair<int, uint64_t>>> dropped(n);
    std::vector<std::map<uint64_t, int>> media_holding(n);  // hash -> media holding it
    std::map<uint64_t, std::set<int32_t>> holders;          // hash -> publishers
    std::vector<int64_t> shared_now(n, 0);
    int64_t shared = 0;
    shared_peak = 0;
    for (const Event& e : *events) {
        const auto p = static_cast<size_t>(e.a);
        const auto hash = static_cast<uint64_t>(e.wide);
        const std::pair<int, uint64_t> key{e.b, hash};
        auto hold = [&](bool on) {
            auto& who = holders[hash];
            if (on)
                who.insert(e.a);
            else
                who.erase(e.a);
            // Recount this hash's share: cheap at this size, and nothing like the attacher's.
            for (size_t q = 0; q < n; ++q)
                shared_now[q] = 0;
            shared = 0;
            for (const auto& [h, pubs] : holders)
                if (pubs.size() > 1) {
                    ++shared;
                    for (int32_t q : pubs)
                        ++shared_now[static_cast<size_t>(q)];
                }
            shared_peak = std::max(shared_peak, shared);
            for (size_t q = 0; q < n; ++q)
                out[q].shared_peak = std::max(out[q].shared_peak, shared_now[q]);
        };
        if (e.kind == EventKind::kKvStored) {
            ++out[p].stored;
            if (slot_refs[e.block]++ > 0) continue;
            if (dropped[p].count(key)) ++out[p].stored_again;
            if (media_holding[p][hash]++ == 0) hold(true);
        } else if (e.c == 0) {
            slot_refs[e.block] = 0;
            ++out[p].churn;
            dropped[p].insert(key);
            if (--media_holding[p][hash] == 0) hold(false);
        } else {
            slot_refs[e.block] = e.c;
        }
    }
    return out;
}

void expect_one_line(const CommandResult& r, int code, const std::string& mentions) {
    EXPECT_EQ(r.exit_code, code) << r.err;
    EXPECT_NE(r.err.find(mentions), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST(AttachCli, RecordsWhatPublishSendsAndSummarizesIt) {
    std::string dir = temp_dir();
    // Ports from the pid keep parallel test runs apart.
    const int base = 20000 + (getpid() % 2000) * 4;
    auto ep = [&](int i) { return "tcp://127.0.0.1:" + std::to_string(base + i); };
    // publish waits 2 s for subscribers, sends for about 0.4 s, then answers replay requests for
    // 2 s more; attach ends at 3 s and asks for anything after the last batch it saw (a
    // withheld last batch is found that way).
    int pub =
        start_command({kvscope_binary(), "publish", "--endpoint", ep(0), "--replay", ep(2),
                       "--ranks",        "2",       "--events",   "800", "--batch",  "8",
                       "--rate",         "2000",    "--gaps",     "0.1", "--format", "vllm-array",
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
        EXPECT_EQ(r["blocks_shared_peak"].get<int64_t>(), 0);  // each rank its own hashes
    }
    EXPECT_EQ(j["hashes_shared_peak"].get<int64_t>(), 0);
    EXPECT_EQ(j["ranks"][1]["rank"].get<int>(), 1);
    auto check = run_command({kvscope_binary(), "check", dir + "/a.kvs"});
    EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
    auto inspect = run_command({kvscope_binary(), "inspect", dir + "/a.kvs"});
    EXPECT_NE(inspect.out.find("attached"), std::string::npos) << inspect.out;
}

// Churn, hashes stored again and hashes held by both ranks at once, from publish traffic whose
// ranks send the same hashes: the summary agrees with the publisher's own stream (per rank) and
// with the recording read back (across ranks, where the order attach took them in decides).
TEST(AttachCli, SummaryCountsChurnAndHashReuseAsTheTrafficImplies) {
    std::string dir = temp_dir();
    const int base = 24000 + (getpid() % 2000) * 4;
    auto ep = [&](int i) { return "tcp://127.0.0.1:" + std::to_string(base + i); };
    // Longer than one pass over the sample run, so the stream wraps (new hashes each loop).
    const int64_t events = 3000;
    int pub =
        start_command({kvscope_binary(), "publish", "--endpoint", ep(0), "--replay", ep(2),
                       "--ranks", "2", "--events", std::to_string(events), "--batch", "10",
                       "--rate", "4000", "--gaps", "0.05", "--same-hashes", "--wait-ms", "2000"});
    int attach = start_command({kvscope_binary(), "attach", ep(0), ep(1), "--replay", ep(2), ep(3),
                                "--duration", "4", "--record", dir + "/r.kvs", "--summary-json",
                                dir + "/r.json"});
    EXPECT_EQ(wait_command(pub), 0);
    ASSERT_EQ(wait_command(attach), 0);
    auto j = nlohmann::json::parse(read_file(dir + "/r.json"));
    ASSERT_EQ(j["ranks"].size(), 2u);
    int64_t shared_peak = -1;
    const auto recorded = reuse_in_recording(dir + "/r.kvs", shared_peak);
    ASSERT_EQ(recorded.size(), 2u);
    for (size_t i = 0; i < 2; ++i) {
        SCOPED_TRACE(i);
        const auto& r = j["ranks"][i];
        ASSERT_EQ(r["events"].get<int64_t>(), events);  // all of it, so the stream is known
        ASSERT_EQ(r["batches_lost"].get<int64_t>(), 0);
        const Reuse sent = reuse_of_published_stream(static_cast<int32_t>(i), events, true);
        EXPECT_GT(sent.churn, 0);
        EXPECT_GT(sent.stored_again, 0);  // the sample run evicted prefixes and computed them again
        EXPECT_EQ(r["blocks_stored"].get<int64_t>(), sent.stored);
        EXPECT_EQ(r["churn"].get<int64_t>(), sent.churn);
        EXPECT_EQ(r["blocks_stored_again"].get<int64_t>(), sent.stored_again);
        EXPECT_EQ(r["churn"].get<int64_t>(), recorded[i].churn);
        EXPECT_EQ(r["blocks_stored_again"].get<int64_t>(), recorded[i].stored_again);
        EXPECT_DOUBLE_EQ(r["churn_per_second"].get<double>(),
                         static_cast<double>(sent.churn) / j["seconds"].get<double>());
        EXPECT_EQ(r["blocks_shared_peak"].get<int64_t>(), recorded[i].shared_peak);
        EXPECT_GT(recorded[i].shared_peak, 0);
    }
    EXPECT_EQ(j["hashes_shared_peak"].get<int64_t>(), shared_peak);
}

// What a publisher sent that attach could not take in as sent: each kind said once on stderr
// as it happens however often it comes, then listed under the table with its count, and in
// the summary by name (the malformed column counts the dropped events too).
TEST(AttachCli, NotesAreSaidOnceEachAndListedInTheTableAndSummary) {
    std::string dir = temp_dir();
    zmq::context_t ctx;
    attach::PublisherOptions po;
    po.endpoint = "tcp://127.0.0.1:*";
    auto pub = attach::KvPublisher::create(ctx, po);
    ASSERT_TRUE(pub.ok()) << pub.error().message;
    auto attach = std::async(std::launch::async, [&] {
        return run_command({kvscope_binary(), "attach", (*pub)->endpoint(), "--duration", "3",
                            "--summary-json", dir + "/n.json"});
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    auto path = source_file("tests/data/kv_events/mixed_notes.msgpack");
    ASSERT_TRUE(path.has_value());
    const std::string bytes = read_file(*path);
    for (int i = 0; i < 3; ++i)
        ASSERT_TRUE((*pub)->publish({bytes.begin(), bytes.end()}).ok());
    const CommandResult r = attach.get();
    ASSERT_EQ(r.exit_code, 0) << r.err;
    for (const std::string note : {"unknown field BlockStored.new_field", "unknown medium FS",
                                   "malformed event (dropped): BlockStored: a token id is negative",
                                   "unknown event type BlockPinned"}) {
        const size_t first = r.err.find(note);
        EXPECT_NE(first, std::string::npos) << note << " not said: " << r.err;
        EXPECT_EQ(r.err.find(note, first + 1), std::string::npos) << note << " said twice";
        EXPECT_NE(r.out.find(note), std::string::npos) << note << " not listed: " << r.out;
    }
    EXPECT_NE(r.out.find("token id is negative (3)"), std::string::npos) << r.out;
    auto j = nlohmann::json::parse(read_file(dir + "/n.json"))["ranks"][0];
    EXPECT_EQ(j["unknown_field_names"]["BlockStored.new_field"], 3) << j.dump();
    EXPECT_EQ(j["unknown_media"]["FS"], 3) << j.dump();
    EXPECT_EQ(j["unknown_event_types"]["BlockPinned"], 3) << j.dump();
    EXPECT_EQ(j["malformed_reasons"]["BlockStored: a token id is negative"], 3) << j.dump();
    EXPECT_EQ(j["malformed_events"], 3);
    EXPECT_EQ(j["blocks_cached"], 1);
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
    // SGLang's hashes are integers: no digests to send.
    expect_one_line(run_command({kvscope_binary(), "publish", "--endpoint", "tcp://127.0.0.1:1",
                                 "--format", "sglang", "--hash", "bytes"}),
                    2, "integer hashes");
}

// ZeroMQ keeps a port in 16 bits: 70000 was taken as 4464 without a word. Every tcp:// port
// attach and publish are given is checked, and so is each rank's port + rank (which was
// reported as "needs an endpoint ending in a port number").
TEST(AttachCli, PortsPastSixteenBitsAreRefusedNotWrapped) {
    const std::string bin = kvscope_binary();
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"attach", "tcp://127.0.0.1:70000", "--duration", "1"},
          {"attach", "tcp://127.0.0.1:5", "--replay", "tcp://127.0.0.1:65536", "--duration", "1"},
          {"attach", "tcp://127.0.0.1:-1", "--duration", "1"},
          {"attach", "tcp://127.0.0.1:99999999999999999999", "--duration", "1"},
          {"publish", "--endpoint", "tcp://127.0.0.1:70000", "--duration", "0.1"},
          {"publish", "--endpoint", "tcp://*:*", "--replay", "tcp://*:70000", "--duration",
           "0.1"}}) {
        std::vector<std::string> argv = {bin};
        argv.insert(argv.end(), args.begin(), args.end());
        auto r = run_command(argv, 20);
        expect_one_line(r, 2, "the port must be 0..65535 (or * to bind any), not '");
    }
    auto ranks = run_command({bin, "publish", "--endpoint", "tcp://127.0.0.1:65534", "--ranks", "4",
                              "--duration", "0.1", "--wait-ms", "0"},
                             20);
    expect_one_line(ranks, 2, "--endpoint: rank 2 would be on port 65536");
    auto replay = run_command({bin, "publish", "--endpoint", "tcp://127.0.0.1:*", "--replay",
                               "tcp://127.0.0.1:65535", "--ranks", "2", "--duration", "0.1"},
                              20);
    expect_one_line(replay, 2, "--endpoint: rank r is on port + r");
}

// --duration nan compared false with every elapsed time: attach and publish never stopped.
TEST(AttachCli, NanDurationsAreRefusedInsteadOfNeverEnding) {
    const std::string bin = kvscope_binary();
    for (const char* value : {"nan", "inf", "-nan"}) {
        expect_one_line(
            run_command({bin, "attach", "tcp://127.0.0.1:1", "--duration", value}, 20), 2,
            std::string("--duration: must be a finite number from 0 to 10000000, not '") + value);
        expect_one_line(run_command({bin, "publish", "--endpoint", "tcp://127.0.0.1:*", "--wait-ms",
                                     "0", "--duration", value},
                                    20),
                        2,
                        std::string("--duration: must be a finite number from 0 to 10000000, "
                                    "not '") +
                            value);
    }
}

}  // namespace
}  // namespace kvscope::test
