// kvscope attach against real ZeroMQ publishers on loopback: gaps filled from the replay
// socket or counted, restarts, malformed frames, late joiners, and the recording it makes.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <set>
#include <thread>

#include "attach/attacher.h"
#include "attach/kv_event_encoder.h"
#include "attach/kv_publisher.h"
#include "attach/kv_trace.h"
#include "sessions/recorder.h"
#include "sessions/session_check.h"
#include "sessions/session_reader.h"
#include "test_support.h"

namespace kvscope::attach {
namespace {

using namespace std::chrono_literals;

KvTrace sample_trace() {
    auto path = test::source_file("assets/sessions/sample-chat.kvs");
    EXPECT_TRUE(path.has_value());
    auto trace = kv_trace_from_session(*path);
    EXPECT_TRUE(trace.ok()) << trace.error().message;
    return std::move(trace).value();
}

// The trace cut into batches of `per` events, encoded.
std::vector<std::vector<uint8_t>> batches_of(const KvTrace& trace, size_t per, WireFormat f,
                                             int32_t rank = 0) {
    std::vector<std::vector<uint8_t>> out;
    for (size_t i = 0; i < trace.events.size(); i += per) {
        KvEventBatch b;
        b.rank = rank;
        b.ts = static_cast<double>(i);
        for (size_t k = i; k < std::min(i + per, trace.events.size()); ++k)
            b.events.push_back(trace.events[k]);
        encode_kv_event_batch(b, f, HashEncoding::kInt, out.emplace_back());
    }
    return out;
}

// The hashes a trace's prefix leaves held: what the attached view must end with.
std::set<uint64_t> held_after(const KvTrace& trace, size_t events) {
    std::set<uint64_t> held;
    for (size_t i = 0; i < events; ++i)
        for (uint64_t h : trace.events[i].block_hashes) {
            if (trace.events[i].type == KvEventType::kBlockStored)
                held.insert(h);
            else
                held.erase(h);
        }
    return held;
}

// An Attacher on its own thread until stopped; the publisher side keeps answering replay
// requests until then (attach asks for the tail when it ends). An attach that does not end
// within 20 s of being stopped fails the test and ends the suite (joining it would hang).
struct Session {
    std::unique_ptr<Attacher> attacher;
    std::atomic<bool> stop{false}, ended{false};
    std::thread thread;
    Probe* probe = nullptr;
    void start() {
        thread = std::thread([this] {
            EXPECT_TRUE(attacher->run(probe, stop, 30).ok());
            ended = true;
        });
    }
    void finish(std::vector<KvPublisher*> pubs) {
        stop = true;
        const auto deadline = std::chrono::steady_clock::now() + 20s;
        while (!ended && std::chrono::steady_clock::now() < deadline)
            for (KvPublisher* p : pubs) {
                p->serve_replay();
                std::this_thread::sleep_for(1ms);
            }
        if (!ended) {
            ADD_FAILURE() << "attach did not end within 20 s of being stopped";
            std::_Exit(1);
        }
        thread.join();
    }
};

std::unique_ptr<KvPublisher> publisher(zmq::context_t& ctx, bool replay, bool old_replies = false,
                                       size_t buffer = 100000) {
    PublisherOptions o;
    o.endpoint = "tcp://127.0.0.1:*";
    if (replay) o.replay_endpoint = "tcp://127.0.0.1:*";
    o.replay_buffer = buffer;
    o.replies_without_topic = old_replies;
    auto p = KvPublisher::create(ctx, o);
    EXPECT_TRUE(p.ok()) << p.error().message;
    return std::move(p).value();
}

AttachOptions attach_options_for(const std::vector<KvPublisher*>& pubs, bool replay) {
    AttachOptions o;
    for (KvPublisher* p : pubs) {
        o.endpoints.push_back(p->endpoint());
        if (replay) o.replay_endpoints.push_back(p->replay_endpoint());
    }
    o.blocks_per_publisher = 4096;
    o.tick_ms = 20;
    return o;
}

std::unique_ptr<Attacher> attacher_for(const AttachOptions& o) {
    auto a = Attacher::create(o);
    EXPECT_TRUE(a.ok()) << a.error().message;
    return std::move(a).value();
}

std::unique_ptr<Attacher> attacher_for(const std::vector<KvPublisher*>& pubs, bool replay) {
    return attacher_for(attach_options_for(pubs, replay));
}

// Sends every batch (withholding every `withhold_every`-th from the live socket) with replay
// requests answered between sends.
void send_all(KvPublisher& p, const std::vector<std::vector<uint8_t>>& batches,
              int withhold_every = 0) {
    for (size_t i = 0; i < batches.size(); ++i) {
        bool withhold = withhold_every > 0 && i % static_cast<size_t>(withhold_every) == 3;
        ASSERT_TRUE(p.publish(batches[i], withhold).ok());
        p.serve_replay();
        if (i % 16 == 0) std::this_thread::sleep_for(1ms);
    }
}

// Sends every batch with no replay served, withholding the third of every six but never the
// last (a loss at the very end has nothing after it to show it); returns how many it withheld.
size_t send_withholding(KvPublisher& p, const std::vector<std::vector<uint8_t>>& batches) {
    size_t withheld = 0;
    for (size_t i = 0; i < batches.size(); ++i) {
        bool withhold = i % 6 == 2 && i + 1 < batches.size();
        withheld += withhold;
        EXPECT_TRUE(p.publish(batches[i], withhold).ok());
    }
    return withheld;
}

void wait_connected() {
    std::this_thread::sleep_for(300ms);  // ZeroMQ connects in the background
}

TEST(AttachLoopback, GapsAreFilledFromReplayAndTheCacheMatchesTheRun) {
    KvTrace trace = sample_trace();
    zmq::context_t ctx;
    auto p0 = publisher(ctx, true), p1 = publisher(ctx, true);
    auto b0 = batches_of(trace, 4, WireFormat::kVllmMap, 0);
    auto b1 = batches_of(trace, 7, WireFormat::kVllmArray, 1);
    Session s;
    s.attacher = attacher_for({p0.get(), p1.get()}, true);
    std::string dir = test::temp_dir();
    auto rec = Recorder::create(dir + "/attached.kvs", s.attacher->run_info());
    ASSERT_TRUE(rec.ok()) << rec.error().message;
    s.probe = rec->get();
    s.start();
    wait_connected();
    send_all(*p0, b0, 9);  // the 4th of every 9, the last batch included: filled at the end
    send_all(*p1, b1, 5);
    std::this_thread::sleep_for(200ms);
    s.finish({p0.get(), p1.get()});
    ASSERT_TRUE((*rec)->close().ok());

    auto stats = s.attacher->stats();
    ASSERT_EQ(stats.size(), 2u);
    const size_t expect_batches[2] = {b0.size(), b1.size()};
    for (size_t i = 0; i < 2; ++i) {
        SCOPED_TRACE(i);
        EXPECT_EQ(stats[i].batches, static_cast<int64_t>(expect_batches[i]));
        EXPECT_EQ(stats[i].events, static_cast<int64_t>(trace.events.size()));
        EXPECT_GT(stats[i].gaps, 0);
        EXPECT_EQ(stats[i].gaps_filled, stats[i].gaps);
        EXPECT_EQ(stats[i].batches_lost, 0);
        EXPECT_EQ(stats[i].rank, static_cast<int32_t>(i));
        EXPECT_EQ(stats[i].blocks_cached, 0);  // the trace ends by removing what it held
        EXPECT_EQ(stats[i].removed_unknown, 0);
    }
    auto report = check_session(dir + "/attached.kvs");
    EXPECT_TRUE(report.problems.empty()) << report.problems.front();

    // Halfway through, the recording holds what the run's cache held then, per publisher.
    auto reader = SessionReader::open(dir + "/attached.kvs");
    ASSERT_TRUE(reader.ok());
    auto events = (*reader)->events((*reader)->first_step(), (*reader)->last_step());
    ASSERT_TRUE(events.ok());
    size_t stored = 0;
    for (const Event& e : *events)
        stored += e.kind == EventKind::kKvStored && e.a == 0;
    EXPECT_EQ(stored, static_cast<size_t>(stats[0].blocks_stored));
}

TEST(AttachLoopback, WithoutReplayEveryWithheldBatchIsCountedLost) {
    KvTrace trace = sample_trace();
    zmq::context_t ctx;
    auto p = publisher(ctx, false);
    auto batches = batches_of(trace, 3, WireFormat::kSglang);
    Session s;
    s.attacher = attacher_for({p.get()}, false);
    s.start();
    wait_connected();
    const size_t withheld = send_withholding(*p, batches);
    std::this_thread::sleep_for(300ms);
    s.finish({p.get()});
    auto st = s.attacher->stats()[0];
    EXPECT_EQ(st.batches_lost, static_cast<int64_t>(withheld));
    EXPECT_EQ(st.batches + st.batches_lost, static_cast<int64_t>(batches.size()));
    EXPECT_EQ(st.gaps, static_cast<int64_t>(withheld));  // none adjacent
    EXPECT_EQ(st.gaps_filled, 0);
    EXPECT_GT(st.events_lost, 0);
}

// A replay socket that goes away (a deployment whose replay socket closed, or a publisher gone
// before the gaps were asked for): each gap is counted lost, in order, and attach ends when
// told (Session::finish fails the test otherwise). The batch that reveals a gap while earlier
// ones wait must keep its place: put behind them, it and all after it were taken as stale.
// (The blocking send this once hit, with `kvscope publish` exiting beside a live attach, does
// not happen here: the request is queued; attach now never blocks on it either way.)
TEST(AttachLoopback, AReplaySocketThatWentAwayLosesEachGapInOrder) {
    KvTrace trace = sample_trace();
    zmq::context_t ctx;
    auto p = publisher(ctx, false);
    auto batches = batches_of(trace, 3, WireFormat::kVllmMap);
    zmq::socket_t gone(ctx, zmq::socket_type::router);
    gone.set(zmq::sockopt::linger, 0);
    gone.bind("tcp://127.0.0.1:*");
    AttachOptions o = attach_options_for({p.get()}, false);
    o.replay_endpoints.push_back(gone.get(zmq::sockopt::last_endpoint));
    Session s;
    s.attacher = attacher_for(o);
    s.start();
    wait_connected();
    gone.close();
    std::this_thread::sleep_for(200ms);  // attach sees the connection drop
    const size_t withheld = send_withholding(*p, batches);
    std::this_thread::sleep_for(300ms);
    s.finish({p.get()});  // fails the test if attach is stuck in a send
    auto st = s.attacher->stats()[0];
    EXPECT_EQ(st.batches_lost, static_cast<int64_t>(withheld));
    EXPECT_EQ(st.batches + st.batches_lost, static_cast<int64_t>(batches.size()));
    EXPECT_EQ(st.gaps_filled, 0);
}

TEST(AttachLoopback, APublisherThatRestartsStartsEmpty) {
    KvTrace trace = sample_trace();
    zmq::context_t ctx;
    auto first_ctx = std::make_unique<zmq::context_t>();  // its own, as another process has
    auto first = publisher(*first_ctx, false);
    const std::string endpoint = first->endpoint();
    auto batches = batches_of(trace, 5, WireFormat::kVllmArray);
    const size_t half = batches.size() / 2;
    AttachOptions o;
    o.endpoints = {endpoint};
    o.blocks_per_publisher = 4096;
    o.tick_ms = 20;
    Session s;
    s.attacher = std::move(Attacher::create(o)).value();
    s.start();
    wait_connected();
    for (size_t i = 0; i < half; ++i)
        ASSERT_TRUE(first->publish(batches[i]).ok());
    std::this_thread::sleep_for(200ms);
    first.reset();      // the process went away...
    first_ctx.reset();  // (waits for its socket to close and the port to be free)
    PublisherOptions again;
    again.endpoint = endpoint;
    auto second = KvPublisher::create(ctx, again);  // ...and came back, counting from 0
    ASSERT_TRUE(second.ok()) << second.error().message;
    wait_connected();
    // Its first batches: a fresh cache holds what they store.
    const size_t resent = 4;
    for (size_t i = 0; i < resent; ++i)
        ASSERT_TRUE((*second)->publish(batches[i]).ok());
    std::this_thread::sleep_for(300ms);
    s.finish({second->get()});
    auto st = s.attacher->stats()[0];
    EXPECT_EQ(st.restarts, 1);
    EXPECT_EQ(st.batches_lost, 0);
    EXPECT_EQ(st.blocks_cached, static_cast<int64_t>(held_after(trace, resent * 5).size()));
}

TEST(AttachLoopback, MalformedFramesAreCountedAndTheRestKept) {
    KvTrace trace = sample_trace();
    zmq::context_t ctx;
    auto p = publisher(ctx, false);
    auto batches = batches_of(trace, 8, WireFormat::kVllmMap);
    Session s;
    s.attacher = attacher_for({p.get()}, false);
    s.start();
    wait_connected();
    ASSERT_TRUE(p->publish(batches[0]).ok());
    ASSERT_TRUE(p->publish_raw({{'t'}, {1, 2, 3}}).ok());          // two frames
    ASSERT_TRUE(p->publish_raw({{}, {0, 0, 0, 1}, {0x90}}).ok());  // 4-byte sequence
    ASSERT_TRUE(p->publish({0xdd, 0xff, 0xff, 0xff, 0xff}).ok());  // absurd array
    ASSERT_TRUE(p->publish({0x92, 0xc1}).ok());                    // not msgpack
    for (size_t i = 1; i < batches.size(); ++i)
        ASSERT_TRUE(p->publish(batches[i]).ok());
    std::this_thread::sleep_for(300ms);
    s.finish({p.get()});
    auto st = s.attacher->stats()[0];
    EXPECT_EQ(st.malformed_frames, 4);
    EXPECT_EQ(st.batches, static_cast<int64_t>(batches.size()));
    EXPECT_EQ(st.events, static_cast<int64_t>(trace.events.size()));
    EXPECT_EQ(st.batches_lost, 0);
}

// Batches still queued when attach ends are counted as after the end, and so are those their
// sequence numbers show were dropped among them: every batch published after the last one
// taken in is accounted for.
TEST(AttachLoopback, WhatIsPublishedAfterTheEndIsCountedDroppedOnesIncluded) {
    KvTrace trace = sample_trace();
    zmq::context_t ctx;
    auto p = publisher(ctx, false);
    auto batches = batches_of(trace, 4, WireFormat::kVllmMap);
    ASSERT_GT(batches.size(), 20u);
    auto attacher = attacher_for({p.get()}, false);
    attacher->start(nullptr, nullptr, 0);
    wait_connected();
    for (size_t i = 0; i < 10; ++i)
        ASSERT_TRUE(p->publish(batches[i]).ok());
    for (int turns = 0; turns < 2000 && attacher->stats()[0].batches < 10; ++turns)
        ASSERT_TRUE(attacher->pump(std::chrono::milliseconds(5)).ok());
    ASSERT_EQ(attacher->stats()[0].batches, 10);
    // While nobody reads: 10..19, 15 dropped on the way.
    for (size_t i = 10; i < 20; ++i)
        ASSERT_TRUE(p->publish(batches[i], /*withhold=*/i == 15).ok());
    std::this_thread::sleep_for(300ms);
    attacher->end();
    while (!attacher->ended())
        ASSERT_TRUE(attacher->pump(std::chrono::milliseconds(5)).ok());
    auto st = attacher->stats()[0];
    EXPECT_EQ(st.batches, 10);
    EXPECT_EQ(st.batches_after_end, 10);
    EXPECT_FALSE(st.after_end_cut_short);
    EXPECT_EQ(st.batches_lost, 0);
}

TEST(AttachLoopback, ALateJoinerRecoversWhatTheReplayBufferStillHolds) {
    KvTrace trace = sample_trace();
    zmq::context_t ctx;
    auto p = publisher(ctx, true, /*old_replies=*/true, /*buffer=*/20);
    auto batches = batches_of(trace, 2, WireFormat::kVllmArray);
    ASSERT_GT(batches.size(), 70u);
    for (size_t i = 0; i < 50; ++i)  // before anyone listens
        ASSERT_TRUE(p->publish(batches[i]).ok());
    Session s;
    s.attacher = attacher_for({p.get()}, true);
    s.start();
    wait_connected();
    ASSERT_TRUE(p->publish(batches[50]).ok());  // the first it hears: it asks for 0..49
    for (int i = 0; i < 500; ++i) {
        p->serve_replay();
        std::this_thread::sleep_for(1ms);
    }
    for (size_t i = 51; i < 60; ++i)
        ASSERT_TRUE(p->publish(batches[i]).ok());
    std::this_thread::sleep_for(300ms);
    s.finish({p.get()});
    auto st = s.attacher->stats()[0];
    // The buffer of 20 held 31..50 when asked: 31..49 are filled, 0..30 lost and said so.
    EXPECT_EQ(st.joined_at_seq, 50u);
    EXPECT_EQ(st.batches_lost, 31);
    EXPECT_EQ(st.batches, 29);  // 31..49, then 50..59 live
    EXPECT_EQ(st.gaps, 1);
    EXPECT_EQ(st.gaps_filled, 0);
}

}  // namespace
}  // namespace kvscope::attach
