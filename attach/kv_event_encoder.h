#pragma once
// Writes a KvEventBatch the way each engine does (the inverse of kv_event_decoder.h): what
// `kvscope publish` sends and the tests' vectors are checked against.
//   kVllmArray  events as tagged positional arrays, trailing defaults omitted (vLLM before
//               mid-2026)
//   kVllmMap    events as tagged maps {"type": ..., field: value}, defaults omitted (vLLM since)
//   kSglang     tagged arrays, one BlockStored / BlockRemoved per page (block), the batch's
//               rank as attn_dp_rank
// Digest hashes are 32 bytes whose first 8 are the 64-bit hash, big endian.

#include <cstdint>
#include <string_view>
#include <vector>

#include "attach/kv_events.h"

namespace kvscope::attach {

enum class WireFormat : uint8_t { kVllmArray, kVllmMap, kSglang };
enum class HashEncoding : uint8_t { kInt, kBytes };

std::string_view wire_format_name(WireFormat f);
bool parse_wire_format(std::string_view name, WireFormat& out);

void encode_kv_event_batch(const KvEventBatch& batch, WireFormat format, HashEncoding hashes,
                           std::vector<uint8_t>& out);

}  // namespace kvscope::attach
