#pragma once
// One publisher's sequence numbers: what a newly received batch means given what came before.
// A publisher numbers its batches from 0; one that restarts (the process came back) starts at
// 0 again, and everything it held is gone.

#include <cstdint>
#include <optional>

namespace kvscope::attach {

enum class SeqVerdict : uint8_t {
    kFirst,    // the first batch heard from this publisher (joined late if seq > 0)
    kNext,     // the one expected
    kGap,      // later than expected: [missing_from, seq) never arrived
    kStale,    // already seen (a replayed or duplicated batch): skip it
    kRestart,  // seq 0 after later ones: the publisher restarted
};

struct SeqResult {
    SeqVerdict verdict = SeqVerdict::kNext;
    uint64_t missing_from = 0, missing = 0;
};

class SequenceTracker {
  public:
    SeqResult see(uint64_t seq);
    // The sequence number the next batch should carry (0 before the first).
    uint64_t expected() const { return last_ ? *last_ + 1 : 0; }
    bool started() const { return last_.has_value(); }
    // After a gap was filled (or given up on) out of band: `seq` is the last one accounted for.
    void set_last(uint64_t seq) { last_ = seq; }

  private:
    std::optional<uint64_t> last_;
};

}  // namespace kvscope::attach
