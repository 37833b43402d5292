#include "attach/attacher.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

#include "attach/endpoint.h"
#include "attach/kv_event_decoder.h"
#include "sessions/timeline_state.h"

namespace kvscope::attach {

namespace {
// Receives one whole multipart message without waiting; false when none is queued.
bool receive(zmq::socket_t& socket, std::vector<zmq::message_t>& msg) {
    msg.clear();
    zmq::message_t part;
    if (!socket.recv(part, zmq::recv_flags::dontwait)) return false;
    msg.push_back(std::move(part));
    while (msg.back().more()) {
        zmq::message_t next;
        if (!socket.recv(next, zmq::recv_flags::none)) break;
        msg.push_back(std::move(next));
    }
    return true;
}

std::vector<Frame> frames_of(const std::vector<zmq::message_t>& msg) {
    std::vector<Frame> f;
    f.reserve(msg.size());
    for (const auto& m : msg)
        f.push_back({static_cast<const uint8_t*>(m.data()), m.size()});
    return f;
}
}  // namespace

struct Attacher::Source {
    int32_t index = 0;
    zmq::socket_t sub;
    std::unique_ptr<zmq::socket_t> replay;
    // The SUB socket's connection events (ZMQ_EVENT_CONNECTED), to tell a reconnection.
    std::unique_ptr<zmq::socket_t> monitor;
    int64_t connections = 0;
    bool new_connection = false;  // the next live batch is the first since a reconnection
    SequenceTracker seq;
    AttachedCache cache;
    PublisherStats stats;
    // A gap being filled from the replay socket: [fill_next, fill_until) still wanted; live
    // batches that came meanwhile wait in `pending`, in order.
    bool replaying = false;
    uint64_t fill_next = 0, fill_until = 0;
    bool fill_lost = false;
    bool tail_check = false;  // the look for batches after the last one, when attach ends
    Clock::time_point replay_deadline;
    std::deque<std::vector<zmq::message_t>> pending;
    size_t pending_bytes = 0;
    std::vector<HeldChange> held_changes;
    int64_t shared = 0;  // its hashes another publisher holds too, now
    // Batches still queued once following ended: how many, and the highest sequence number.
    int64_t drained = 0;
    bool drained_any_seq = false;
    uint64_t drained_max_seq = 0;
    bool drained_all = false;  // its queue was found empty on the last look

    Source(zmq::context_t& ctx, int32_t i, int32_t first, int32_t capacity, uint64_t window)
        : index(i), sub(ctx, zmq::socket_type::sub), seq(window), cache(i, first, capacity) {}
};

Attacher::Attacher(const AttachOptions& options) : options_(options) {}
Attacher::~Attacher() = default;

Result<std::unique_ptr<Attacher>> Attacher::create(const AttachOptions& options) {
    if (options.endpoints.empty()) return Error{"attach needs at least one endpoint"};
    if (options.endpoints.size() > kMaxPublishers)
        return Error{"attach follows at most " + std::to_string(kMaxPublishers) + " publishers"};
    if (!options.replay_endpoints.empty() &&
        options.replay_endpoints.size() != options.endpoints.size())
        return Error{"give one replay endpoint per endpoint (" +
                     std::to_string(options.endpoints.size()) + "), not " +
                     std::to_string(options.replay_endpoints.size())};
    for (const auto* list : {&options.endpoints, &options.replay_endpoints})
        for (const std::string& endpoint : *list)
            if (Status s = check_endpoint(endpoint); !s) return s.error();
    const int64_t pool =
        int64_t{options.blocks_per_publisher} * static_cast<int64_t>(options.endpoints.size());
    if (options.blocks_per_publisher <= 0 || pool > kMaxSessionBlocks)
        return Error{"blocks per publisher times publishers must be 1.." +
                     std::to_string(kMaxSessionBlocks) + " (it is " + std::to_string(pool) + ")"};
    std::unique_ptr<Attacher> a(new Attacher(options));
    for (size_t i = 0; i < options.endpoints.size(); ++i) {
        auto s = std::make_unique<Source>(a->ctx_, static_cast<int32_t>(i),
                                          static_cast<int32_t>(i) * options.blocks_per_publisher,
                                          options.blocks_per_publisher, options.replay_window);
        s->stats.endpoint = options.endpoints[i];
        const std::string replay =
            options.replay_endpoints.empty() ? std::string() : options.replay_endpoints[i];
        // ZeroMQ's own ceiling on a frame, far past the limit attach says it refuses at: what
        // comes between the two is received, refused and counted.
        const auto ceiling = static_cast<int64_t>(std::min<size_t>(
            std::max<size_t>(options.max_message_bytes * 4, size_t{64} << 20), size_t{1} << 40));
        try {
            s->sub.set(zmq::sockopt::rcvhwm, options.receive_queue);
            s->sub.set(zmq::sockopt::maxmsgsize, ceiling);
            s->sub.set(zmq::sockopt::linger, 0);
            const std::string monitor = "inproc://kvscope-attach-monitor-" +
                                        std::to_string(reinterpret_cast<uintptr_t>(a.get())) + "-" +
                                        std::to_string(i);
            if (zmq_socket_monitor(s->sub.handle(), monitor.c_str(), ZMQ_EVENT_CONNECTED) != 0)
                throw zmq::error_t();
            s->monitor = std::make_unique<zmq::socket_t>(a->ctx_, zmq::socket_type::pair);
            s->monitor->set(zmq::sockopt::linger, 0);
            s->monitor->connect(monitor);
            s->sub.set(zmq::sockopt::subscribe, options.topic);
            s->sub.connect(options.endpoints[i]);
            if (!replay.empty()) {
                s->replay = std::make_unique<zmq::socket_t>(a->ctx_, zmq::socket_type::dealer);
                s->replay->set(zmq::sockopt::linger, 0);
                s->replay->set(zmq::sockopt::rcvhwm, 0);
                s->replay->set(zmq::sockopt::maxmsgsize, ceiling);
                s->replay->connect(replay);
            }
        } catch (const zmq::error_t& e) {
            return Error{"cannot attach to " + options.endpoints[i] +
                         (replay.empty() ? "" : " (replay " + replay + ")") + ": " + e.what()};
        }
        if (options.endpoints.size() > 1) s->cache.report_held_changes(&s->held_changes);
        a->sources_.push_back(std::move(s));
    }
    return a;
}

RunInfo Attacher::run_info() const {
    RunInfo info;
    info.num_blocks =
        options_.blocks_per_publisher * static_cast<int32_t>(options_.endpoints.size());
    // Nominal (vLLM's default): a store says its own block size, the pool's is not published.
    info.block_size = 16;
    info.allocator = "attached";
    info.backend = "attached";
    info.model = "attached deployment";
    info.publishers = options_.endpoints;
    return info;
}

namespace {
uint64_t saturating_add(uint64_t a, uint64_t b) {
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}
}  // namespace

void Attacher::lose(Source& s, uint64_t batches) {
    if (batches == 0) return;
    const bool first = s.stats.batches_lost == 0;
    s.stats.batches_lost = saturating_add(s.stats.batches_lost, batches);
    const double per = s.stats.batches > 0 ? static_cast<double>(s.stats.events) /
                                                 static_cast<double>(s.stats.batches)
                                           : 0.0;
    const double events = per * static_cast<double>(s.stats.batches_lost);
    s.stats.events_lost =
        events >= 1.8e19 ? UINT64_MAX : static_cast<uint64_t>(std::llround(events));
    if (first) note(s, "batches lost and not replayable: what it holds may be incomplete");
}

void Attacher::note(Source& s, const std::string& text, uint64_t n) {
    std::vector<PublisherNote>& notes = s.stats.notes;
    for (PublisherNote& x : notes)
        if (x.text == text) {
            x.count = saturating_add(x.count, n);
            return;
        }
    if (notes.size() >= kMaxNotes) {
        note(s, "other notes", n);
        return;
    }
    notes.push_back({text, n});
    if (!note_sink_) return;
    const auto now = Clock::now();
    if (now - note_second_ >= std::chrono::seconds(1)) {
        note_second_ = now;
        note_lines_ = 0;
    }
    if (note_lines_ == kNoteLinesPerSecond)
        note_sink_("notes come faster than " + std::to_string(kNoteLinesPerSecond) +
                   " a second: the rest are in the summary");
    if (note_lines_++ < kNoteLinesPerSecond) note_sink_(s.stats.endpoint + ": " + text);
}

void Attacher::note_batch(Source& s) {
    for (const NameCount& n : batch_.unknown_event_names) {
        count_name(s.stats.unknown_event_names, n.name, n.count);
        note(s, "unknown event type " + n.name + " (skipped)", static_cast<uint64_t>(n.count));
    }
    for (const NameCount& n : batch_.unknown_field_names) {
        count_name(s.stats.unknown_field_names, n.name, n.count);
        note(s, "unknown field " + n.name + " (skipped)", static_cast<uint64_t>(n.count));
    }
    for (const NameCount& n : batch_.unknown_media) {
        count_name(s.stats.unknown_media, n.name, n.count);
        note(s, "unknown medium " + n.name + " (shown as OTHER)", static_cast<uint64_t>(n.count));
    }
    for (const NameCount& n : batch_.malformed_reasons) {
        count_name(s.stats.malformed_reasons, n.name, n.count);
        note(s, "malformed event (dropped): " + n.name, static_cast<uint64_t>(n.count));
    }
}

void Attacher::read_monitor(Source& s) {
    std::vector<zmq::message_t> msg;
    while (receive(*s.monitor, msg)) {
        // [u16 event, u32 value] (little endian, as zmq_socket_monitor sends it), endpoint.
        if (msg.empty() || msg[0].size() < 2) continue;
        const auto* b = static_cast<const uint8_t*>(msg[0].data());
        if ((b[0] | b[1] << 8) != ZMQ_EVENT_CONNECTED) continue;
        if (++s.connections > 1) s.new_connection = true;
    }
}

void Attacher::take(Source& s, const Frame& payload) {
    const size_t first = out_.size();
    int64_t events = 0;
    Status decoded =
        decode_kv_event_batch(payload.data, payload.size, batch_, [&](const KvEvent& ev) {
            ++events;
            s.cache.apply(ev, out_);
        });
    if (!decoded) {
        ++s.stats.malformed_frames;
        note(s, "malformed frame (dropped): " + decoded.error().message);
        return;
    }
    ++s.stats.batches;
    s.stats.events += events;
    s.stats.unknown_events += batch_.unknown_events;
    s.stats.unknown_fields += batch_.unknown_fields;
    s.stats.malformed_events += batch_.malformed_events;
    note_batch(s);
    if (batch_.rank >= 0) s.stats.rank = batch_.rank;
    stamp_from(first);
    last_taken_ = Clock::now();
    if (first_taken_ == Clock::time_point{}) first_taken_ = last_taken_;
    note_held_changes(s);
}

double Attacher::active_seconds() const {
    return std::chrono::duration<double>(last_taken_ - first_taken_).count();
}

void Attacher::stamp_from(size_t first) {
    const int64_t now = host_now_ns();
    for (size_t i = first; i < out_.size(); ++i)
        out_[i].t_ns = now;
}

void Attacher::note_held_changes(Source& s) {
    auto now_shared = [this](Source& src, int64_t delta) {
        src.shared += delta;
        src.stats.shared_peak = std::max(src.stats.shared_peak, src.shared);
    };
    const auto self = static_cast<uint32_t>(s.index);
    for (const HeldChange& c : s.held_changes) {
        if (c.held) {
            bool added = false;
            Holders& h = holders_.get(c.hash, added);
            if (h.publishers == 1) {  // the one holder until now shares it from here on
                now_shared(*sources_[h.xor_of], 1);
                shared_hashes_peak_ = std::max(shared_hashes_peak_, ++shared_hashes_);
            }
            if (h.publishers >= 1) now_shared(s, 1);
            ++h.publishers;
            h.xor_of ^= self;
        } else if (Holders* h = holders_.find(c.hash)) {
            --h->publishers;
            h->xor_of ^= self;
            if (h->publishers >= 1) now_shared(s, -1);
            if (h->publishers == 1) {  // the one left holds it alone again
                now_shared(*sources_[h->xor_of], -1);
                --shared_hashes_;
            }
            if (h->publishers == 0) holders_.erase(c.hash);
        }
    }
    s.held_changes.clear();
}

void Attacher::open_gap(Source& s, uint64_t from, uint64_t until) {
    ++s.stats.gaps;
    if (s.replay)
        start_replay(s, from, until, false);
    else
        lose(s, until - from);
}

void Attacher::start_replay(Source& s, uint64_t from, uint64_t until, bool tail_check) {
    s.replaying = true;
    s.tail_check = tail_check;
    s.fill_next = from;
    s.fill_until = until;
    s.fill_lost = false;
    s.replay_deadline = Clock::now() + std::chrono::milliseconds(options_.replay_timeout_ms);
    uint8_t seq_bytes[8];
    put_seq(from, seq_bytes);
    // Never waits: with no peer (the replay socket down, the publisher gone) a DEALER's send
    // would block for good. A request that cannot be queued is given up on at the next turn
    // (not here: the batch that revealed the gap must first take its place in `pending`).
    bool queued = false;
    try {
        queued = s.replay->send(zmq::message_t(),
                                zmq::send_flags::sndmore | zmq::send_flags::dontwait) &&
                 s.replay->send(zmq::buffer(seq_bytes, 8), zmq::send_flags::dontwait);
    } catch (const zmq::error_t&) {
    }
    if (!queued) s.replay_deadline = Clock::now();
}

void Attacher::finish_replay(Source& s) {
    if (s.tail_check) {  // an open-ended look for batches after the last: none is no loss
        s.tail_check = false;
        s.replaying = false;
        if (s.fill_lost || s.fill_next > s.seq.expected()) ++s.stats.gaps;
        if (s.fill_next > s.seq.expected() && !s.fill_lost) ++s.stats.gaps_filled;
        if (s.fill_next > 0) s.seq.set_last(std::max(s.seq.expected(), s.fill_next) - 1);
        return;
    }
    if (s.fill_next < s.fill_until) {
        lose(s, s.fill_until - s.fill_next);
        s.fill_lost = true;
    }
    if (!s.fill_lost) ++s.stats.gaps_filled;
    s.replaying = false;
    s.seq.set_last(s.fill_until - 1);
    // The live batches that waited, in order; one may open another gap.
    while (!s.pending.empty() && !s.replaying) {
        auto msg = std::move(s.pending.front());
        s.pending.pop_front();
        for (const auto& m : msg)
            s.pending_bytes -= std::min(s.pending_bytes, m.size());
        on_live(s, msg);
    }
}

bool Attacher::refused_for_size(Source& s, const Frame& payload) {
    if (payload.size <= options_.max_message_bytes) return false;
    ++s.stats.oversized;
    lose(s, 1);
    note(s, "a batch past --max-message-bytes " + std::to_string(options_.max_message_bytes) +
                " (" + std::to_string(payload.size) + " bytes): refused, its events lost");
    return true;
}

void Attacher::on_live(Source& s, std::vector<zmq::message_t>& msg) {
    if (s.replaying) {
        size_t bytes = 0;
        for (const auto& m : msg)
            bytes += m.size();
        if (s.pending_bytes + bytes > options_.max_pending_bytes) {  // the newest dropped
            lose(s, 1);
            note(s, "live batches dropped while a gap was replayed (more than " +
                        std::to_string(options_.max_pending_bytes >> 20) + " MiB waiting)");
            return;
        }
        s.pending_bytes += bytes;
        s.pending.push_back(std::move(msg));
        return;
    }
    auto frames = frames_of(msg);
    auto published = parse_published(frames);
    if (published && published->seq == kReplayEndSeq)
        published = Error{"sequence number 2^64 - 1 is the replay end marker, not a batch's"};
    if (!published) {
        ++s.stats.malformed_frames;
        note(s, "malformed frame (dropped): " + published.error().message);
        return;
    }
    const uint64_t seq = published->seq;
    SeqResult r = s.seq.see(seq, std::exchange(s.new_connection, false));
    switch (r.verdict) {
        case SeqVerdict::kFirst:
            s.stats.joined_at_seq = seq;
            // A late joiner recovers what the replay buffer still has.
            if (seq > 0 && s.replay) open_gap(s, 0, seq);
            break;
        case SeqVerdict::kNext:
            break;
        case SeqVerdict::kStale:
            ++s.stats.stale;
            note(s, "stale batches (already seen: skipped)");
            return;
        case SeqVerdict::kRestart: {
            ++s.stats.restarts;
            note(s, "restarted (sequence " + std::to_string(r.previous) + " then " +
                        std::to_string(seq) + "): what it held before is gone");
            const size_t first = out_.size();
            s.cache.clear(out_, /*evicted=*/false);
            stamp_from(first);
            note_held_changes(s);
            // The new epoch's first batches went out before this one: replayed or lost.
            if (seq > 0) open_gap(s, 0, seq);
            break;
        }
        case SeqVerdict::kGap:
            open_gap(s, r.missing_from, seq);
            break;
    }
    if (s.replaying) {  // this batch waits until the gap before it is filled: first in line
        // (it may come from `pending` itself, ahead of the batches still there)
        s.pending_bytes += published->payload.size;
        s.pending.push_front(std::move(msg));
        return;
    }
    if (refused_for_size(s, published->payload)) return;
    take(s, published->payload);
}

void Attacher::on_replay(Source& s, std::vector<zmq::message_t>& msg) {
    if (!s.replaying) return;  // a late reply to a replay already given up on
    auto frames = frames_of(msg);
    auto reply = parse_replay_reply(frames);
    if (!reply) {
        ++s.stats.malformed_frames;
        return;
    }
    if (reply->end) {
        finish_replay(s);
        return;
    }
    if (reply->seq < s.fill_next || reply->seq >= s.fill_until) return;
    if (reply->seq > s.fill_next) {  // the buffer no longer had these
        lose(s, reply->seq - s.fill_next);
        s.fill_lost = true;
    }
    if (!refused_for_size(s, reply->payload)) take(s, reply->payload);
    s.fill_next = reply->seq + 1;
}

void Attacher::flush() {
    if (out_.empty()) return;
    for (Event& e : out_)
        e.step = step_;
    if (probe_) probe_->emit_all(out_);
    out_.clear();
}

void Attacher::end_step() {
    flush();
    for (const auto& s : sources_) {
        const auto& by_medium = s->cache.held_by_medium();
        for (int m = 0; m < kNumKvMedia; ++m) {
            if (by_medium[static_cast<size_t>(m)] == 0 && m != 0) continue;
            Event& e = out_.emplace_back();
            e.kind = EventKind::kMetric;
            e.text = "attach/" + std::to_string(s->index) + "/" +
                     std::string(kv_medium_name(static_cast<KvMedium>(m)));
            e.value = by_medium[static_cast<size_t>(m)];
        }
    }
    Event& end = out_.emplace_back();
    end.kind = EventKind::kStepEnd;
    end.value = options_.tick_ms / 1000.0;
    flush();
    ++step_;
}

Status Attacher::run(Probe* probe, const std::atomic<bool>& stop, double duration_s,
                     const std::function<void()>& on_step) {
    start(probe, &stop, duration_s);
    while (!ended()) {
        auto steps = pump(std::chrono::milliseconds(50));
        if (!steps) return steps.error();
        if (*steps > 0 && on_step && !ended()) on_step();
    }
    return {};
}

void Attacher::start(Probe* probe, const std::atomic<bool>* stop, double duration_s) {
    probe_ = probe;
    stop_ = stop;
    duration_s_ = duration_s;
    poll_items_.clear();
    for (const auto& s : sources_) {
        poll_items_.push_back({s->monitor->handle(), 0, ZMQ_POLLIN, 0});
        poll_items_.push_back({s->sub.handle(), 0, ZMQ_POLLIN, 0});
        if (s->replay) poll_items_.push_back({s->replay->handle(), 0, ZMQ_POLLIN, 0});
    }
    started_ = Clock::now();
    tick_end_ = started_ + std::chrono::milliseconds(std::max(options_.tick_ms, 1));
    Event begin;
    begin.kind = EventKind::kStepBegin;
    out_.push_back(begin);
    phase_ = Phase::kFollowing;
}

namespace {
// Waits up to `wait` for any socket to have something; an interrupted wait is no error (the
// caller's loop looks at its stop flag and polls again).
Status poll_sockets(std::vector<zmq::pollitem_t>& items, std::chrono::milliseconds wait) {
    try {
        zmq::poll(items.data(), items.size(), wait);
    } catch (const zmq::error_t& e) {
        if (e.num() != EINTR) return Error{std::string("attach: ") + e.what()};
    }
    return {};
}
}  // namespace

Result<int> Attacher::pump(std::chrono::milliseconds wait) {
    int steps_ended = 0;
    Status s;
    switch (phase_) {
        case Phase::kNotStarted:
        case Phase::kEnded:
            return 0;
        case Phase::kFollowing:
            s = follow(wait, steps_ended);
            break;
        case Phase::kDraining:
            drain();
            break;
        case Phase::kAskingTail:
            s = ask_for_tail(wait, steps_ended);
            break;
    }
    if (!s) {
        phase_ = Phase::kEnded;
        probe_ = nullptr;
        return s.error();
    }
    return steps_ended;
}

Status Attacher::follow(std::chrono::milliseconds wait, int& steps_ended) {
    const auto now = Clock::now();
    if (now >= tick_end_) {
        end_step();
        Event begin;
        begin.kind = EventKind::kStepBegin;
        out_.push_back(begin);
        ++steps_ended;
        tick_end_ += std::chrono::milliseconds(std::max(options_.tick_ms, 1));
        if (tick_end_ < now)  // fell behind: no burst of empty steps
            tick_end_ = now + std::chrono::milliseconds(std::max(options_.tick_ms, 1));
    }
    if (end_requested_ || (stop_ && stop_->load(std::memory_order_relaxed)) ||
        (duration_s_ > 0 && now - started_ >= std::chrono::duration<double>(duration_s_)) ||
        (probe_ && probe_->failed())) {
        phase_ = Phase::kDraining;
        drain_until_ = Clock::now() + std::chrono::milliseconds(500);
        return {};
    }
    const auto to_tick_end = std::chrono::duration_cast<std::chrono::milliseconds>(tick_end_ - now);
    if (Status s =
            poll_sockets(poll_items_, std::clamp(to_tick_end, std::chrono::milliseconds(0),
                                                 std::min(wait, std::chrono::milliseconds(50))));
        !s)
        return s;
    std::vector<zmq::message_t> msg;
    size_t item = 0;
    for (const auto& src : sources_) {
        // Connections first: a reconnection marks the batch that follows it.
        ++item;
        read_monitor(*src);
        // A bounded number per socket and turn, so one busy publisher cannot starve others.
        if (poll_items_[item++].revents & ZMQ_POLLIN)
            for (int k = 0; k < 256 && receive(src->sub, msg); ++k)
                on_live(*src, msg);
        if (src->replay) {
            if (poll_items_[item++].revents & ZMQ_POLLIN)
                while (receive(*src->replay, msg))
                    on_replay(*src, msg);
            if (src->replaying && Clock::now() >= src->replay_deadline) finish_replay(*src);
        }
    }
    if (out_.size() > 4096) flush();
    return {};
}

void Attacher::drain() {
    // Whatever is still queued came after the end: counted, so nothing goes unreported. A
    // bounded share per pump, and 500 ms in all, however fast the publishers still send.
    std::vector<zmq::message_t> msg;
    bool queued = false;
    for (const auto& s : sources_) {
        s->drained_all = false;
        for (int k = 0; k < 4096 && Clock::now() < drain_until_; ++k) {
            if (!receive(s->sub, msg)) {
                s->drained_all = true;
                break;
            }
            ++s->drained;
            if (auto published = parse_published(frames_of(msg))) {
                s->drained_max_seq = s->drained_any_seq
                                         ? std::max(s->drained_max_seq, published->seq)
                                         : published->seq;
                s->drained_any_seq = true;
            }
        }
        queued |= !s->drained_all;
    }
    if (queued && Clock::now() < drain_until_) return;
    for (const auto& s : sources_) {
        // Those the queue held, and those their sequence numbers skip (dropped by the way, as
        // a full queue drops them): all published after the last batch taken.
        uint64_t after = static_cast<uint64_t>(s->drained);
        if (s->drained_any_seq && s->seq.started() && s->drained_max_seq >= s->seq.expected() &&
            s->drained_max_seq != kReplayEndSeq)
            after = std::max(after, s->drained_max_seq - s->seq.expected() + 1);
        s->stats.batches_after_end = after;
        s->stats.after_end_cut_short = !s->drained_all;
    }
    // A batch lost at the very end leaves no later sequence number to reveal it: ask each
    // replay socket for anything after the last batch seen.
    tail_deadline_ = Clock::now() + std::chrono::milliseconds(options_.replay_timeout_ms);
    // (Not of a publisher whose queue still held batches: what follows them came after the end
    // too, and taking it in now would record batches counted as after it.)
    for (const auto& s : sources_)
        if (s->replay && s->seq.started() && !s->replaying && s->drained == 0)
            start_replay(*s, s->seq.expected(), UINT64_MAX, true);
    phase_ = Phase::kAskingTail;
}

Status Attacher::ask_for_tail(std::chrono::milliseconds wait, int& steps_ended) {
    std::vector<zmq::message_t> msg;
    bool waiting = false;
    for (const auto& s : sources_) {
        if (!s->replaying) continue;
        while (receive(*s->replay, msg))
            on_replay(*s, msg);
        if (s->replaying && Clock::now() >= tail_deadline_) finish_replay(*s);
        waiting |= s->replaying;
    }
    if (waiting) return poll_sockets(poll_items_, std::min(wait, std::chrono::milliseconds(10)));
    end_step();
    ++steps_ended;
    probe_ = nullptr;
    phase_ = Phase::kEnded;
    return {};
}

std::vector<PublisherStats> Attacher::stats() const {
    std::vector<PublisherStats> out;
    for (const auto& s : sources_) {
        PublisherStats st = s->stats;
        const CacheCounts& c = s->cache.counts();
        st.blocks_stored = c.blocks_stored;
        st.blocks_removed = c.blocks_removed;
        st.blocks_cached = s->cache.held();
        st.removed_unknown = c.removed_unknown;
        st.overflow = c.overflow;
        st.churn = c.churn;
        st.stored_again = c.stored_again;
        st.groups = s->cache.groups();
        out.push_back(std::move(st));
    }
    return out;
}

}  // namespace kvscope::attach
