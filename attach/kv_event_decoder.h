#pragma once
// Decodes one KV-event payload (msgpack EventBatch, vLLM's or SGLang's, any variant in
// kv_events.h) into a KvEventBatch. Hostile input is refused before anything is allocated for
// it: containers claiming more elements than there are bytes left, nesting deeper than
// kMaxNesting, truncation and trailing bytes are each a one-line error.

#include <cstddef>
#include <cstdint>

#include "attach/kv_events.h"
#include "base/result.h"

namespace kvscope::attach {

inline constexpr int kMaxNesting = 16;

// `out` is cleared first (its buffers reused, so a subscriber decoding batch after batch does
// not allocate). On an error `out` holds nothing worth reading.
Status decode_kv_event_batch(const uint8_t* data, size_t size, KvEventBatch& out);

}  // namespace kvscope::attach
