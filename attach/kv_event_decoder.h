#pragma once
// Decodes one KV-event payload (msgpack EventBatch, vLLM's or SGLang's, any variant in
// kv_events.h) into a KvEventBatch. Hostile input is refused before anything is allocated for
// it: containers claiming more elements than there are bytes left, nesting deeper than
// kMaxNesting, truncation and trailing bytes are each a one-line error. Then the batch is read
// one event at a time, so what it holds at once is one event's worth, not the batch's.

#include <cstddef>
#include <cstdint>
#include <functional>

#include "attach/kv_events.h"
#include "base/result.h"

namespace kvscope::attach {

inline constexpr int kMaxNesting = 16;

// `out` is cleared first (its buffers reused, so a subscriber decoding batch after batch does
// not allocate). Each event decoded goes to `on_event` when given (the same KvEvent reused for
// the next: copy what you keep; out.events stays empty), else it is appended to out.events.
// On an error `out` holds nothing worth reading and no event was handed on: the batch's frame
// (ts, events, rank) is checked before its events are read.
Status decode_kv_event_batch(const uint8_t* data, size_t size, KvEventBatch& out,
                             const std::function<void(const KvEvent&)>& on_event = {});

}  // namespace kvscope::attach
