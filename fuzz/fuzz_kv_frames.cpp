// An attached publisher's messages on arbitrary bytes: split into frames (the first bytes say
// how), parsed as a published message and as a replay reply, the payload decoded as an event
// batch (collected, and one event at a time) and applied to a publisher's cache and a
// Timeline. Seeds (fuzz/corpus/kv_frames) are the checked-in test vectors (tests/data/kv_events)
// behind a three-frame header.
#include <cstdint>
#include <vector>

#include "attach/attached_cache.h"
#include "attach/kv_event_decoder.h"
#include "attach/wire_frames.h"
#include "sessions/timeline_state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    using namespace kvscope;
    using namespace kvscope::attach;
    if (size < 1) return 0;
    // Byte 0: frame count (1..4); then one length byte per frame but the last, which takes
    // the rest.
    const size_t n = 1 + data[0] % 4;
    size_t at = 1;
    std::vector<Frame> frames;
    for (size_t f = 0; f + 1 < n && at < size; ++f) {
        size_t len = std::min<size_t>(data[at++], size - std::min(size, at));
        frames.push_back({data + at, len});
        at += len;
    }
    frames.push_back({data + std::min(at, size), size - std::min(at, size)});

    KvEventBatch batch;
    RunInfo info;
    info.num_blocks = 64;
    info.publishers = {"fuzz"};
    TimelineState state(info);
    AttachedCache cache(0, 0, 64);
    std::vector<Event> events;
    // Both ways the decoder hands events on: collected (tests, tools) and one at a time into
    // the cache (the attacher), each event's payload then read back by the Timeline.
    auto apply = [&](const Frame& payload) {
        if (decode_kv_event_batch(payload.data, payload.size, batch).ok())
            cache.apply(batch, events);
        (void)decode_kv_event_batch(payload.data, payload.size, batch,
                                    [&](const KvEvent& ev) { cache.apply(ev, events); });
        for (const Event& e : events)
            state.apply(e);
        events.clear();
    };
    if (auto p = parse_published(frames); p.ok()) apply(p->payload);
    if (auto r = parse_replay_reply(frames); r.ok() && !r->end) apply(r->payload);
    // The whole input as a payload too: the decoder is what most bytes reach.
    apply(Frame{data, size});
    (void)state.serialize();
    return 0;
}
