#pragma once
// Follows one or many KV-event publishers (vLLM or SGLang ranks) and reports what their caches
// hold as kvscope events, step by step, into a Probe (a Recorder). One thread polls every
// SUB socket; per publisher it checks sequence numbers, fills a gap from the publisher's replay
// socket when there is one (live batches wait meanwhile, so events stay in order), and counts
// what could not be filled. A publisher that restarts (sequence_tracker.h: back to 0, back past
// the replay window, or below the last on a new connection) starts a new epoch, empty.
// What it could not take in as sent (a malformed frame or event, an unknown field, event type or
// medium, a stale batch, a restart, a batch past the size limit) is counted by kind and said
// once per kind and publisher, as it happens (note_sink), and in stats().
//
// Steps: an attached source has no engine steps, so a step is a tick of wall time (tick_ms);
// each ends with a metric per publisher and medium (blocks held) for the Timeline's tracks.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "attach/attached_cache.h"
#include "attach/flat_u64.h"
#include "attach/kv_events.h"
#include "attach/sequence_tracker.h"
#include "attach/wire_frames.h"
#include "base/result.h"
#include "probes/probe.h"
#include "sessions/timeline_state.h"

namespace kvscope::attach {

struct AttachOptions {
    std::vector<std::string> endpoints;
    // Empty, or one per endpoint (an empty string: that publisher has none).
    std::vector<std::string> replay_endpoints;
    std::string topic;  // a prefix, as ZeroMQ subscribes
    int32_t blocks_per_publisher = 65536;
    int32_t tick_ms = 100;
    int32_t replay_timeout_ms = 2000;
    // ZeroMQ's high-water mark on each SUB socket, in batches: what may wait while attach is
    // busy. Past it the publisher drops batches, which attach sees as gaps (filled from replay
    // or reported lost); it bounds attach's memory (vLLM's batches are a few KiB).
    int32_t receive_queue = 20000;
    // A batch (payload frame) larger than this is refused, counted and said (its batch lost).
    // ZeroMQ itself drops a connection whose frame passes 4 times this (at least 64 MiB): such
    // a frame never reaches attach and shows as a gap.
    size_t max_message_bytes = size_t{16} << 20;
    // How far back a sequence number may go and still be a stale batch, not a restart.
    uint64_t replay_window = kDefaultReplayWindow;
    // Live batches that wait while a gap is filled: past this many bytes, the newest are
    // dropped and counted lost (what a full ZeroMQ queue would do).
    size_t max_pending_bytes = size_t{256} << 20;
};

// Something a publisher sent that attach could not take in as sent, by kind ("unknown field
// BlockStored.foo", "malformed event: BlockStored: a token id is negative"), how often. At most
// kMaxNotes kinds per publisher (more are counted under "other notes").
struct PublisherNote {
    std::string text;
    uint64_t count = 0;
};
inline constexpr size_t kMaxNotes = 96;

// Counts that can grow with what a publisher claims (sequence numbers) are unsigned 64-bit and
// saturate: a jump to 2^63 is a gap of 2^63 - n batches, never a negative loss.
struct PublisherStats {
    std::string endpoint;
    int32_t rank = -1;  // as the batches name it (-1: they did not)
    int64_t events = 0, batches = 0;
    int64_t blocks_stored = 0, blocks_removed = 0, blocks_cached = 0;
    uint64_t gaps = 0, gaps_filled = 0;
    uint64_t batches_lost = 0;
    // Events in the batches lost: estimated from this publisher's mean batch size.
    uint64_t events_lost = 0;
    int64_t malformed_frames = 0, malformed_events = 0;
    int64_t unknown_events = 0, unknown_fields = 0;
    int64_t stale = 0, restarts = 0;
    // Batches refused for their size (AttachOptions::max_message_bytes).
    int64_t oversized = 0;
    int64_t removed_unknown = 0, overflow = 0;
    // Blocks stored and gone again within the run (AttachedCache's churn), and stores of a hash
    // this publisher had held before and dropped (CacheCounts::stored_again).
    int64_t churn = 0, stored_again = 0;
    // The most of its blocks (hashes, any medium) that another publisher held at the same time.
    int64_t shared_peak = 0;
    uint64_t joined_at_seq = 0;  // the first sequence number heard
    // Batches published after the last one attach took in, as far as it can tell when it ends:
    // those still queued (counted, not recorded) and those their sequence numbers show were
    // dropped between them. Not recorded.
    uint64_t batches_after_end = 0;
    // The count stopped before the queue was empty (the publisher went on sending, faster than
    // attach could count): more came after the end than batches_after_end says.
    bool after_end_cut_short = false;
    // By name: event types, fields and media it does not know; malformed events by reason.
    std::vector<NameCount> unknown_event_names, unknown_field_names, unknown_media;
    std::vector<NameCount> malformed_reasons;
    // vLLM's cache groups (full attention, sliding window...): their blocks, apart.
    std::vector<GroupCounts> groups;
    std::vector<PublisherNote> notes;  // in the order they first happened
};

class Attacher {
  public:
    static Result<std::unique_ptr<Attacher>> create(const AttachOptions& options);
    ~Attacher();

    // The session's run info: the publishers and their share of the pool.
    RunInfo run_info() const;
    // Runs until `stop` is set or `duration_s` (> 0) has passed, emitting into `probe` (may be
    // null). Stops early with the probe's error when it fails.
    // `on_step` (may be empty) is called on this thread after each step, for a progress line.
    Status run(Probe* probe, const std::atomic<bool>& stop, double duration_s,
               const std::function<void()>& on_step = {});

    // run() in pieces, for a caller that must not block (the window, between frames).
    // start() opens the first step; following ends when `stop` (may be null) is set, after
    // `duration_s` (> 0), when the probe fails, or at end(). Each pump() does a bounded share
    // of the work, waiting at most `wait` for traffic: take in batches and replay replies, end
    // the step when its tick is over; once following has ended, count what is still queued,
    // ask every replay socket for anything after the last batch, and end the last step.
    // Returns the steps it ended; an error ends the attach.
    void start(Probe* probe, const std::atomic<bool>* stop, double duration_s);
    Result<int> pump(std::chrono::milliseconds wait);
    void end() { end_requested_ = true; }
    bool following() const { return phase_ == Phase::kFollowing; }
    bool ended() const { return phase_ == Phase::kEnded; }

    std::vector<PublisherStats> stats() const;
    // Called on this thread with one line ("ENDPOINT: what happened") the first time each kind
    // of note happens for a publisher, at most kNoteLinesPerSecond a second (the rest only in
    // stats()); empty: none.
    void set_note_sink(std::function<void(const std::string&)> sink) {
        note_sink_ = std::move(sink);
    }
    static constexpr int kNoteLinesPerSecond = 10;
    // The most hashes held by two or more publishers at once.
    int64_t shared_hashes_peak() const { return shared_hashes_peak_; }
    // From the first batch taken in to the last (0 before two): the time the events took to
    // arrive and be handled, whatever the attach waited before and after.
    double active_seconds() const;
    int64_t steps() const { return step_; }

  private:
    struct Source;
    explicit Attacher(const AttachOptions& options);
    void on_live(Source& s, std::vector<zmq::message_t>& msg);
    void on_replay(Source& s, std::vector<zmq::message_t>& msg);
    // A payload past max_message_bytes: counted, said, its batch lost (true).
    bool refused_for_size(Source& s, const Frame& payload);
    void take(Source& s, const Frame& payload);
    // Stamps out_[first..] with the time now: when their batch came in, not when the recorder
    // is handed them (once per 4096 events or per tick), so a block's age is the time between
    // its store and its removal.
    void stamp_from(size_t first);
    // A gap [from, until): counted, then asked of the replay socket, or lost without one.
    void open_gap(Source& s, uint64_t from, uint64_t until);
    // `tail_check`: an open-ended look for batches after the last one (no gap unless some
    // turn up).
    void start_replay(Source& s, uint64_t from, uint64_t until, bool tail_check);
    void finish_replay(Source& s);
    void lose(Source& s, uint64_t batches);
    // Counts one occurrence of `text` for `s`; the first of its kind is said (note_sink).
    void note(Source& s, const std::string& text, uint64_t n = 1);
    // The decoder's per-name counts of a batch into the publisher's.
    void note_batch(Source& s);
    // Reads the connection events of `s`'s SUB socket (a reconnect marks the next batch).
    void read_monitor(Source& s);
    // Folds the hashes `s` began or stopped holding into who holds what across publishers.
    void note_held_changes(Source& s);
    void end_step();
    void flush();
    // One pump() of each phase after start().
    Status follow(std::chrono::milliseconds wait, int& steps_ended);
    void drain();
    Status ask_for_tail(std::chrono::milliseconds wait, int& steps_ended);

    enum class Phase {
        kNotStarted,
        kFollowing,
        kDraining,    // counting what was still queued when following ended
        kAskingTail,  // the replay sockets asked for anything after the last batch seen
        kEnded
    };
    using Clock = std::chrono::steady_clock;

    AttachOptions options_;
    zmq::context_t ctx_;
    std::vector<std::unique_ptr<Source>> sources_;
    std::vector<zmq::pollitem_t> poll_items_;
    Phase phase_ = Phase::kNotStarted;
    const std::atomic<bool>* stop_ = nullptr;
    bool end_requested_ = false;
    double duration_s_ = 0;
    Clock::time_point started_, tick_end_, drain_until_, tail_deadline_;
    Clock::time_point first_taken_, last_taken_;
    Probe* probe_ = nullptr;
    int64_t step_ = 0;
    std::vector<Event> out_;
    KvEventBatch batch_;
    // Per hash held by any publisher: how many hold it, and their indices XORed together (the
    // one holder left when a second lets go is then that XOR). Kept only with several
    // publishers.
    struct Holders {
        uint32_t publishers = 0, xor_of = 0;
    };
    FlatU64Map<Holders> holders_;
    int64_t shared_hashes_ = 0, shared_hashes_peak_ = 0;
    std::function<void(const std::string&)> note_sink_;
    Clock::time_point note_second_;
    int note_lines_ = 0;
};

}  // namespace kvscope::attach
