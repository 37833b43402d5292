// The session event codec and keyframes on arbitrary bytes, applied to a Timeline state.
// Seeds (fuzz/corpus/events) are real step blobs and keyframes of the sample session (a pool of
// 32 blocks) and an older CBOR keyframe; the string table is wide enough for their text ids.
#include <cstdint>
#include <string>
#include <vector>

#include "sessions/event_codec.h"
#include "sessions/timeline_state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::vector<std::string> strings = [] {
        std::vector<std::string> s(1);
        for (int i = 1; i < 4096; ++i)
            s.push_back("s" + std::to_string(i));
        return s;
    }();
    std::vector<kvscope::Event> events;
    std::string error;
    kvscope::RunInfo info;
    info.num_blocks = 32;
    info.n_layers = 6;
    info.n_heads = 8;
    kvscope::TimelineState state(info);
    if (kvscope::decode_events(data, size, 0, 1, strings, events, error))
        for (const auto& e : events)
            state.apply(e);
    std::vector<uint8_t> bytes(data, data + size);
    auto kf = kvscope::TimelineState::deserialize(bytes, info, error);
    if (kf) (void)kf->serialize();
    return 0;
}
