#include "attach/sequence_tracker.h"

namespace kvscope::attach {

SeqResult SequenceTracker::see(uint64_t seq) {
    SeqResult r;
    if (!last_) {
        r.verdict = SeqVerdict::kFirst;
        last_ = seq;
        return r;
    }
    const uint64_t want = *last_ + 1;
    if (seq == want) {
        r.verdict = SeqVerdict::kNext;
    } else if (seq == 0) {
        r.verdict = SeqVerdict::kRestart;
    } else if (seq < want) {
        r.verdict = SeqVerdict::kStale;
        return r;  // last_ stays
    } else {
        r.verdict = SeqVerdict::kGap;
        r.missing_from = want;
        r.missing = seq - want;
    }
    last_ = seq;
    return r;
}

}  // namespace kvscope::attach
