#pragma once
// One publisher's sequence numbers: what a newly received batch means given what came before.
// A publisher numbers its batches from 0; one that restarts (the process came back) numbers
// them from 0 again, and everything it held is gone. Its first batches may go out before the
// subscriber has reconnected, so a restart is not told by seeing 0 alone: a number that goes
// back by more than the replay window, or the first batch of a new connection below the last
// one seen, starts a new epoch too. All arithmetic is unsigned 64-bit and never wraps: the
// attacher refuses a live batch numbered 2^64 - 1 (the replay end marker), so the next number
// expected always exists.

#include <cstdint>
#include <optional>

namespace kvscope::attach {

// vLLM's and SGLang's default replay buffer (buffer_steps): a batch further back than this
// cannot be one the publisher would still replay.
inline constexpr uint64_t kDefaultReplayWindow = 10000;

enum class SeqVerdict : uint8_t {
    kFirst,    // the first batch heard from this publisher (joined late if seq > 0)
    kNext,     // the one expected
    kGap,      // later than expected: [missing_from, seq) never arrived
    kStale,    // already seen (a replayed or duplicated batch): skip it
    kRestart,  // a new epoch: the publisher restarted; [0, seq) of it never arrived
};

struct SeqResult {
    SeqVerdict verdict = SeqVerdict::kNext;
    uint64_t missing_from = 0, missing = 0;
    uint64_t previous = 0;  // kRestart: the last number of the epoch before
};

class SequenceTracker {
  public:
    explicit SequenceTracker(uint64_t replay_window = kDefaultReplayWindow)
        : window_(replay_window) {}
    // `new_connection`: the first batch since the socket (re)connected to the publisher.
    SeqResult see(uint64_t seq, bool new_connection = false);
    // The sequence number the next batch should carry (0 before the first).
    uint64_t expected() const { return last_ ? *last_ + 1 : 0; }
    bool started() const { return last_.has_value(); }
    // After a gap was filled (or given up on) out of band: `seq` is the last one accounted for.
    void set_last(uint64_t seq) { last_ = seq; }

  private:
    uint64_t window_;
    std::optional<uint64_t> last_;
};

}  // namespace kvscope::attach
