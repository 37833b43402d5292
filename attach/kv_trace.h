#pragma once
// KV events derived from a recorded kvscope serving run, as vLLM would have published them:
// every block the run's prefix cache registered is a BlockStored (its hash, its parent's hash,
// the tokens it holds), every block the cache dropped a BlockRemoved. The blocks, hashes and
// token ids are the run's own. What `kvscope publish` sends, and what its tests check the
// attached view against.

#include <cstdint>
#include <string>
#include <vector>

#include "attach/kv_events.h"
#include "base/result.h"

namespace kvscope::attach {

struct KvTrace {
    std::vector<KvEvent> events;  // one block per BlockStored / BlockRemoved, in run order
    // Per event: the token that follows a stored block in its request (-1: none, or not a
    // store), what SGLang's speculative pages pair its last token with.
    std::vector<int32_t> next_tokens;
    int32_t block_size = 0;
    int64_t steps = 0;
};

// The most token ids a trace holds over all its stored blocks (256 MiB of them).
inline constexpr size_t kMaxTraceTokens = size_t{1} << 26;

// Ends with a BlockRemoved for every block still cached when the run ended, so a trace sent
// over and over (with salted hashes, see salt_trace_hash) holds a bounded cache. The session is
// read one event at a time; a trace past kMaxTraceTokens is refused, saying so.
Result<KvTrace> kv_trace_from_session(const std::string& path);

// The trace's events as SGLang's speculative (EAGLE) radix cache keys its pages: each position
// the pair (token, next token), token_width 2. A block whose next token is not known (the
// request's last) has one pair less.
std::vector<KvEvent> eagle_pages(const KvTrace& trace);

// The hash a block of loop `loop` on rank `rank` is sent under: the run's own hash for rank 0
// on the first loop, a distinct one for every other (rank, loop), parents salted alike so the
// chains stay chains.
uint64_t salt_trace_hash(uint64_t hash, int32_t rank, int64_t loop);
// What salt_trace_hash XORs a hash with (0 for rank 0's first loop).
uint64_t trace_salt(int32_t rank, int64_t loop);

}  // namespace kvscope::attach
