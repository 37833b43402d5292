#pragma once
// `kvscope check --repair`: makes a session left by a crash or a failed write one self-contained
// file again. Its committed steps may still be in the write-ahead log beside it ("X-wal"); the
// repair folds them into the file, adds the index a finished recording has, and leaves WAL
// mode, so the file alone can be copied, mailed and opened read-only.

#include <string>

#include "base/result.h"

namespace kvscope {

struct RepairReport {
    bool had_wal = false;         // a write-ahead log was there (and is gone now)
    bool wal_had_frames = false;  // it held frames, folded in (else SQLite could use none)
    long long wal_bytes = 0;      // its size before
    bool added_index = false;     // the attention index was missing (cut off before close)
};

// Refuses a file another kvscope is still recording (it holds the lock).
Result<RepairReport> repair_session(const std::string& path);

}  // namespace kvscope
