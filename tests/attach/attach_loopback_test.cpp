// kvscope attach against real ZeroMQ publishers on loopback: gaps filled from the replay
// socket or counted, restarts, malformed frames, late joiners, and the recording it makes.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>
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
    auto b0 = batches_of(trace, 4, WireFormat::kVllm, 0);
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
        EXPECT_GT(stats[i].gaps, 0u);
        EXPECT_EQ(stats[i].gaps_filled, stats[i].gaps);
        EXPECT_EQ(stats[i].batches_lost, 0u);
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
    EXPECT_EQ(st.batches_lost, withheld);
    EXPECT_EQ(static_cast<uint64_t>(st.batches) + st.batches_lost, batches.size());
    EXPECT_EQ(st.gaps, withheld);  // none adjacent
    EXPECT_EQ(st.gaps_filled, 0u);
    EXPECT_GT(st.events_lost, 0u);
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
    auto batches = batches_of(trace, 3, WireFormat::kVllm);
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
    EXPECT_EQ(st.batches_lost, withheld);
    EXPECT_EQ(static_cast<uint64_t>(st.batches) + st.batches_lost, batches.size());
    EXPECT_EQ(st.gaps_filled, 0u);
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
    EXPECT_EQ(st.batches_lost, 0u);
    EXPECT_EQ(st.blocks_cached, static_cast<int64_t>(held_after(trace, resent * 5).size()));
}

TEST(AttachLoopback, MalformedFramesAreCountedAndTheRestKept) {
    KvTrace trace = sample_trace();
    zmq::context_t ctx;
    auto p = publisher(ctx, false);
    auto batches = batches_of(trace, 8, WireFormat::kVllm);
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
    EXPECT_EQ(st.batches_lost, 0u);
}

// Batches still queued when attach ends are counted as after the end, and so are those their
// sequence numbers show were dropped among them: every batch published after the last one
// taken in is accounted for.
TEST(AttachLoopback, WhatIsPublishedAfterTheEndIsCountedDroppedOnesIncluded) {
    KvTrace trace = sample_trace();
    zmq::context_t ctx;
    auto p = publisher(ctx, false);
    auto batches = batches_of(trace, 4, WireFormat::kVllm);
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
    EXPECT_EQ(st.batches_after_end, 10u);
    EXPECT_FALSE(st.after_end_cut_short);
    EXPECT_EQ(st.batches_lost, 0u);
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
    EXPECT_EQ(st.batches_lost, 31u);
    EXPECT_EQ(st.batches, 29);  // 31..49, then 50..59 live
    EXPECT_EQ(st.gaps, 1u);
    EXPECT_EQ(st.gaps_filled, 0u);
}

}  // namespace
}  // namespace kvscope::attach

namespace kvscope::attach {
namespace {

// The events of one batch, encoded.
std::vector<uint8_t> batch_bytes(std::vector<KvEvent> events, WireFormat f,
                                 HashEncoding h = HashEncoding::kInt) {
    KvEventBatch b;
    b.ts = 1.0;
    b.rank = 0;
    b.events = std::move(events);
    std::vector<uint8_t> out;
    encode_kv_event_batch(b, f, h, out);
    return out;
}

KvEvent store_event(std::vector<uint64_t> hashes, int32_t group = -1,
                    std::string kind = std::string()) {
    KvEvent e;
    e.type = KvEventType::kBlockStored;
    e.block_hashes = std::move(hashes);
    e.block_size = 2;
    for (size_t i = 0; i < e.block_hashes.size() * 2; ++i)
        e.token_ids.push_back(static_cast<int32_t>(100 + i));
    e.group_idx = group;
    e.group_kind = std::move(kind);
    return e;
}

KvEvent remove_event(std::vector<uint64_t> hashes, int32_t group = -1) {
    KvEvent e;
    e.type = KvEventType::kBlockRemoved;
    e.block_hashes = std::move(hashes);
    e.group_idx = group;
    return e;
}

// Pumps `a` until `done` holds (at most 5 s).
template <typename F>
void pump_until(Attacher& a, F done) {
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (!done() && std::chrono::steady_clock::now() < deadline)
        ASSERT_TRUE(a.pump(std::chrono::milliseconds(5)).ok());
}

void end_attach(Attacher& a) {
    a.end();
    while (!a.ended())
        ASSERT_TRUE(a.pump(std::chrono::milliseconds(5)).ok());
}

// SGLang with speculative decoding (EAGLE) keys its pages by (token, next token): every page
// is recorded, its tokens the pairs it was sent with, none counted malformed.
TEST(AttachLoopback, EaglePairPagesAreRecordedWithEveryBlock) {
    KvTrace trace = sample_trace();
    const std::vector<KvEvent> pages = eagle_pages(trace);
    zmq::context_t ctx;
    auto p = publisher(ctx, false);
    Session s;
    s.attacher = attacher_for({p.get()}, false);
    std::string dir = test::temp_dir();
    auto rec = Recorder::create(dir + "/eagle.kvs", s.attacher->run_info());
    ASSERT_TRUE(rec.ok());
    s.probe = rec->get();
    s.start();
    wait_connected();
    int64_t stores = 0;
    for (size_t i = 0; i < pages.size(); i += 6) {
        std::vector<KvEvent> b(pages.begin() + static_cast<long>(i),
                               pages.begin() + static_cast<long>(std::min(i + 6, pages.size())));
        for (const KvEvent& e : b)
            stores += e.type == KvEventType::kBlockStored;
        ASSERT_TRUE(p->publish(batch_bytes(b, WireFormat::kSglangEagle)).ok());
    }
    std::this_thread::sleep_for(300ms);
    s.finish({p.get()});
    ASSERT_TRUE((*rec)->close().ok());
    auto st = s.attacher->stats()[0];
    EXPECT_EQ(st.malformed_events, 0);
    EXPECT_EQ(st.blocks_stored, stores);
    EXPECT_EQ(st.removed_unknown, 0);
    EXPECT_EQ(st.blocks_cached, 0);  // the trace ends by removing what it held
    auto reader = SessionReader::open(dir + "/eagle.kvs");
    ASSERT_TRUE(reader.ok());
    auto events = (*reader)->events(0, (*reader)->last_step(), {EventKind::kKvStored});
    ASSERT_TRUE(events.ok());
    ASSERT_EQ(static_cast<int64_t>(events->size()), stores);
    size_t k = 0;
    for (const KvEvent& page : pages) {
        if (page.type != KvEventType::kBlockStored) continue;
        StoredBlock b;
        ASSERT_TRUE(decode_stored_block((*events)[k++].payload, b));
        EXPECT_TRUE(b.token_pairs);
        EXPECT_EQ(b.tokens, page.token_ids);
    }
}

// A publisher that restarted and whose seq 0 went out before attach reconnected: its seq 1 is
// the first of a new connection and below the last seen, so it starts a new epoch at once;
// the old blocks go, the new ones are kept, seq 0 is counted lost.
TEST(AttachLoopback, ARestartWhoseFirstBatchWasMissedIsSeenWithinOneBatch) {
    KvTrace trace = sample_trace();
    auto first_ctx = std::make_unique<zmq::context_t>();
    auto first = publisher(*first_ctx, false);
    const std::string endpoint = first->endpoint();
    auto batches = batches_of(trace, 5, WireFormat::kVllm);
    ASSERT_GT(batches.size(), 30u);
    AttachOptions o;
    o.endpoints = {endpoint};
    o.blocks_per_publisher = 4096;
    o.tick_ms = 20;
    auto a = attacher_for(o);
    a->start(nullptr, nullptr, 0);
    wait_connected();
    for (size_t i = 0; i < 20; ++i)
        ASSERT_TRUE(first->publish(batches[i]).ok());
    pump_until(*a, [&] { return a->stats()[0].batches == 20; });
    first.reset();
    first_ctx.reset();
    zmq::context_t ctx;
    PublisherOptions again;
    again.endpoint = endpoint;
    auto second = KvPublisher::create(ctx, again);
    ASSERT_TRUE(second.ok()) << second.error().message;
    // Its seq 0 goes out while nobody listens (attach has not reconnected yet).
    ASSERT_TRUE((*second)->publish(batches[0], /*withhold=*/true).ok());
    const auto reconnected = std::chrono::steady_clock::now() + 1500ms;
    while (std::chrono::steady_clock::now() < reconnected)  // attach reconnects meanwhile
        ASSERT_TRUE(a->pump(std::chrono::milliseconds(5)).ok());
    ASSERT_TRUE((*second)->publish(batches[1]).ok());
    pump_until(*a, [&] { return a->stats()[0].batches == 21; });
    EXPECT_EQ(a->stats()[0].restarts, 1) << "not seen at its first batch";
    for (size_t i = 2; i < 10; ++i)
        ASSERT_TRUE((*second)->publish(batches[i]).ok());
    pump_until(*a, [&] { return a->stats()[0].batches == 29; });
    end_attach(*a);
    auto st = a->stats()[0];
    EXPECT_EQ(st.restarts, 1);
    EXPECT_EQ(st.stale, 0);
    EXPECT_EQ(st.batches, 29);
    EXPECT_EQ(st.batches_lost, 1u);  // the new epoch's seq 0
    // What batches 1..9 leave held (batch 0's stores were never seen).
    std::set<uint64_t> held;
    for (size_t i = 5; i < 50; ++i)
        for (uint64_t h : trace.events[i].block_hashes) {
            if (trace.events[i].type == KvEventType::kBlockStored)
                held.insert(h);
            else
                held.erase(h);
        }
    EXPECT_EQ(st.blocks_cached, static_cast<int64_t>(held.size()));
    bool said = false;
    for (const PublisherNote& n : st.notes)
        said |= n.text.find("restarted") != std::string::npos;
    EXPECT_TRUE(said);
}

// A sequence that jumps to 2^63: one gap, 2^63 - 3 batches lost, no wrap into a negative.
TEST(AttachLoopback, AJumpTo2Pow63IsAGapWithANonNegativeLoss) {
    KvTrace trace = sample_trace();
    zmq::context_t ctx;
    auto p = publisher(ctx, false);
    auto batches = batches_of(trace, 4, WireFormat::kVllm);
    auto a = attacher_for({p.get()}, false);
    a->start(nullptr, nullptr, 0);
    wait_connected();
    for (size_t i = 0; i < 3; ++i)
        ASSERT_TRUE(p->publish(batches[i]).ok());
    p->set_next_seq(uint64_t{1} << 63);
    ASSERT_TRUE(p->publish(batches[3]).ok());
    p->set_next_seq(~uint64_t{0} - 1);  // and to 2^64 - 2
    ASSERT_TRUE(p->publish(batches[4]).ok());
    pump_until(*a, [&] { return a->stats()[0].batches == 5; });
    end_attach(*a);
    auto st = a->stats()[0];
    EXPECT_EQ(st.gaps, 2u);
    EXPECT_EQ(st.batches_lost, ~uint64_t{0} - 1 - 4);  // all but the 5 taken, none wrapped
    EXPECT_GT(st.events_lost, st.batches_lost);
    EXPECT_EQ(st.restarts, 0);
}

// One block as digest bytes (vLLM's default) and as vLLM's int form of the same digest (its
// last 8 bytes): one key, so the removal by int finds the store by bytes.
TEST(AttachLoopback, ABytesHashAndTheSameBlockAsVllmsIntHashGetOneKey) {
    zmq::context_t ctx;
    auto p = publisher(ctx, false);
    auto a = attacher_for({p.get()}, false);
    std::string dir = test::temp_dir();
    auto rec = Recorder::create(dir + "/keys.kvs", a->run_info());
    ASSERT_TRUE(rec.ok());
    a->start(rec->get(), nullptr, 0);
    wait_connected();
    const uint64_t key = 0x1122334455667788ull;
    ASSERT_TRUE(
        p->publish(batch_bytes({store_event({key})}, WireFormat::kVllm, HashEncoding::kBytes))
            .ok());
    ASSERT_TRUE(p->publish(batch_bytes({remove_event({key})}, WireFormat::kVllm)).ok());
    pump_until(*a, [&] { return a->stats()[0].batches == 2; });
    end_attach(*a);
    ASSERT_TRUE((*rec)->close().ok());
    auto st = a->stats()[0];
    EXPECT_EQ(st.blocks_stored, 1);
    EXPECT_EQ(st.blocks_removed, 1);
    EXPECT_EQ(st.removed_unknown, 0);
    EXPECT_EQ(st.blocks_cached, 0);
    // The recording names the block by the int form and keeps the digest whole for display.
    auto reader = SessionReader::open(dir + "/keys.kvs");
    ASSERT_TRUE(reader.ok());
    auto events = (*reader)->events(0, (*reader)->last_step(), {EventKind::kKvStored});
    ASSERT_TRUE(events.ok());
    ASSERT_EQ(events->size(), 1u);
    EXPECT_EQ(static_cast<uint64_t>((*events)[0].wide), key);
    StoredBlock b;
    ASSERT_TRUE(decode_stored_block((*events)[0].payload, b));
    ASSERT_EQ(b.digest.size(), 32u);
    uint64_t tail = 0;
    for (size_t i = 24; i < 32; ++i)
        tail = tail << 8 | b.digest[i];
    EXPECT_EQ(tail, key);
}

// Peak resident memory of a process, from /proc (VmHWM), in bytes.
int64_t peak_rss(int pid) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/status");
    for (std::string line; std::getline(in, line);)
        if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;
    return -1;
}

// A valid batch of 32 MiB (tiny events) is refused by `kvscope attach` at its default
// --max-message-bytes, counted and said, with the attach process staying under 200 MB; the
// batch after it is taken in.
TEST(AttachLoopback, A32MiBFrameIsRefusedAndAttachStaysUnder200MB) {
    zmq::context_t ctx;
    auto p = publisher(ctx, false);
    std::string dir = test::temp_dir();
    const int pid = test::start_command({test::kvscope_binary(), "attach", p->endpoint(),
                                         "--duration", "5", "--summary-json", dir + "/s.json"});
    std::this_thread::sleep_for(1500ms);  // the process starts and connects
    // 32 MiB of AllBlocksCleared events (tiny: 18 bytes each), as vLLM 0.25's arrays; written
    // here directly, the encoder would hold two million KvEvents for it.
    const uint32_t n = (uint32_t{32} << 20) / 18 + 1;
    std::vector<uint8_t> big = {0x93, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0xdd};
    for (int i = 3; i >= 0; --i)
        big.push_back(static_cast<uint8_t>(n >> (8 * i)));
    const std::string cleared =
        "\x91\xb0"
        "AllBlocksCleared";
    for (uint32_t i = 0; i < n; ++i)
        big.insert(big.end(), cleared.begin(), cleared.end());
    big.push_back(0xc0);
    ASSERT_GE(big.size(), size_t{32} << 20);
    ASSERT_TRUE(p->publish(big).ok());
    big = {};
    ASSERT_TRUE(p->publish(batch_bytes({store_event({7})}, WireFormat::kVllmArray)).ok());
    std::this_thread::sleep_for(1500ms);
    const int64_t rss = peak_rss(pid);
    ASSERT_EQ(test::wait_command(pid), 0);
    EXPECT_GT(rss, 0);
    EXPECT_LT(rss, test::peak_rss_bound(int64_t{200} << 20)) << "attach's peak RSS";
    std::printf("attach's peak RSS around a 32 MiB batch: %.1f MiB\n",
                static_cast<double>(rss) / (1 << 20));
    auto j = nlohmann::json::parse(test::read_file(dir + "/s.json"))["ranks"][0];
    SCOPED_TRACE(j.dump());
    EXPECT_EQ(j["oversized_batches"].get<int64_t>(), 1);
    EXPECT_EQ(j["batches"].get<int64_t>(), 1);
    EXPECT_EQ(j["blocks_cached"].get<int64_t>(), 1);
    EXPECT_NE(j["notes"].dump().find("max-message-bytes"), std::string::npos) << j.dump();
}

// 1 000 AllBlocksCleared in one 18 KB batch, at the most blocks per rank attach takes
// (4 194 304): handled in time with the blocks held, not the pool's share.
TEST(AttachLoopback, AThousandClearsAt4MBlocksPerRankTakeUnderASecond) {
    zmq::context_t ctx;
    auto p = publisher(ctx, false);
    AttachOptions o = attach_options_for({p.get()}, false);
    o.blocks_per_publisher = 4194304;
    auto a = attacher_for(o);
    a->start(nullptr, nullptr, 0);
    wait_connected();
    ASSERT_TRUE(p->publish(batch_bytes({store_event({1, 2, 3, 4})}, WireFormat::kVllm)).ok());
    pump_until(*a, [&] { return a->stats()[0].batches == 1; });
    std::vector<KvEvent> clears(1000);
    for (KvEvent& e : clears)
        e.type = KvEventType::kAllBlocksCleared;
    const auto clears_batch = batch_bytes(std::move(clears), WireFormat::kVllmArray);
    EXPECT_LT(clears_batch.size(), 20000u);
    const auto t0 = std::chrono::steady_clock::now();
    ASSERT_TRUE(p->publish(clears_batch).ok());
    pump_until(*a, [&] { return a->stats()[0].batches == 2; });
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(seconds, 1.0);
    std::printf("1000 AllBlocksCleared at 4194304 blocks per rank: %.3f s\n", seconds);
    end_attach(*a);
    EXPECT_EQ(a->stats()[0].blocks_cached, 0);
}

// vLLM's hybrid cache stores one hash in its full-attention and its sliding-window groups:
// two blocks, removed apart, counted per group.
TEST(AttachLoopback, TwoGroupsOfOneHashAreKeptApart) {
    zmq::context_t ctx;
    auto p = publisher(ctx, false);
    auto a = attacher_for({p.get()}, false);
    a->start(nullptr, nullptr, 0);
    wait_connected();
    ASSERT_TRUE(p->publish(batch_bytes({store_event({9}, 0, "full_attention"),
                                        store_event({9}, 1, "sliding_window")},
                                       WireFormat::kVllm))
                    .ok());
    pump_until(*a, [&] { return a->stats()[0].batches == 1; });
    EXPECT_EQ(a->stats()[0].blocks_cached, 2);
    ASSERT_TRUE(p->publish(batch_bytes({remove_event({9}, 1)}, WireFormat::kVllm)).ok());
    pump_until(*a, [&] { return a->stats()[0].batches == 2; });
    end_attach(*a);
    auto st = a->stats()[0];
    EXPECT_EQ(st.blocks_cached, 1);
    EXPECT_EQ(st.removed_unknown, 0);
    ASSERT_EQ(st.groups.size(), 2u);
    EXPECT_EQ(st.groups[0].group, 0);
    EXPECT_EQ(st.groups[0].kind, "full_attention");
    EXPECT_EQ(st.groups[0].held, 1);
    EXPECT_EQ(st.groups[1].group, 1);
    EXPECT_EQ(st.groups[1].kind, "sliding_window");
    EXPECT_EQ(st.groups[1].held, 0);
    EXPECT_EQ(st.groups[1].blocks_removed, 1);
}

}  // namespace
}  // namespace kvscope::attach
