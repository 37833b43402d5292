#include "attach/sequence_tracker.h"

namespace kvscope::attach {

SeqResult SequenceTracker::see(uint64_t seq, bool new_connection) {
    SeqResult r;
    if (!last_) {
        r.verdict = SeqVerdict::kFirst;
        last_ = seq;
        return r;
    }
    const uint64_t want = *last_ + 1;
    if (seq == want) {
        r.verdict = SeqVerdict::kNext;
    } else if (seq > want) {
        r.verdict = SeqVerdict::kGap;
        r.missing_from = want;
        r.missing = seq - want;
    } else if (seq == 0 || new_connection || want - seq > window_) {
        r.verdict = SeqVerdict::kRestart;
        r.previous = *last_;
        r.missing = seq;  // [0, seq) of the new epoch
    } else {
        r.verdict = SeqVerdict::kStale;
        return r;  // last_ stays
    }
    last_ = seq;
    return r;
}

}  // namespace kvscope::attach
