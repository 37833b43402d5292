#pragma once
// Keyframes of files recorded before the binary form: a CBOR map read through nlohmann::json.
// nlohmann's CBOR reader recurses once per nesting level, and once per chunk of an
// indefinite-length string, where no depth limit of its own can stop it (200 000 nested arrays,
// or 13 KB of nested indefinite byte strings, overflowed the stack). So the bytes are first
// walked iteratively and refused unless they are well-formed CBOR of bounded depth.

#include <optional>
#include <string>
#include <vector>

#include "sessions/timeline_state.h"

namespace kvscope {

// Well-formed CBOR (RFC 8949) of one data item nested at most `max_depth` deep, with no tags
// and no indefinite-length string chunks inside indefinite-length strings. Reads no byte past
// the end; an error names what was wrong.
bool cbor_is_plain(const std::vector<uint8_t>& bytes, int max_depth, std::string& error);

std::optional<TimelineState> deserialize_cbor_keyframe(const std::vector<uint8_t>& bytes,
                                                       const RunInfo& info, std::string& error);

}  // namespace kvscope
