// The session event codec and keyframes on arbitrary bytes, applied to a Timeline state.
#include <cstdint>
#include <string>
#include <vector>

#include "sessions/event_codec.h"
#include "sessions/timeline_state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::vector<std::string> strings = {"", "blocks_used", "lru", "piece"};
    std::vector<kvscope::Event> events;
    std::string error;
    kvscope::RunInfo info;
    info.num_blocks = 64;
    kvscope::TimelineState state(info);
    if (kvscope::decode_events(data, size, 0, 1, strings, events, error))
        for (const auto& e : events)
            state.apply(e);
    std::vector<uint8_t> bytes(data, data + size);
    auto kf = kvscope::TimelineState::deserialize(bytes, info, error);
    if (kf) (void)kf->serialize();
    return 0;
}
