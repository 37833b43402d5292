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

// Events encoded once, to be sent over and over in batches with their hashes changed (XORed
// with a salt per event, as `kvscope publish` makes every rank and loop of a trace distinct):
// the bytes between the hashes are copied and only the hashes packed again, so a batch costs
// a few copies instead of an encoding. What it writes is byte for byte what
// encode_kv_event_batch writes for the same events with the salted hashes.
class PreEncodedEvents {
  public:
    PreEncodedEvents(const std::vector<KvEvent>& events, WireFormat format, HashEncoding hashes);
    size_t size() const { return events_.size(); }
    // The batch [ts, events[indices[k]] with every hash ^ salts[k] for k < n, rank] (no rank
    // when it is negative) into `out`.
    void encode_batch(double ts, int32_t rank, const size_t* indices, const uint64_t* salts,
                      size_t n, std::vector<uint8_t>& out) const;

  private:
    struct Hole {
        size_t at;  // offset in bytes_ where the hash goes
        uint64_t hash;
    };
    struct Encoded {
        size_t begin = 0, end = 0;  // in bytes_, hashes left out
        size_t first_hole = 0, holes = 0;
        size_t wire_events = 0;  // events on the wire (SGLang: one per page)
    };
    HashEncoding hashes_;
    std::vector<uint8_t> bytes_;
    std::vector<Hole> holes_;
    std::vector<Encoded> events_;
};

}  // namespace kvscope::attach
