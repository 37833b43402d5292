#pragma once
// Writes a KvEventBatch byte for byte as each publisher's msgspec structs encode it (the inverse
// of kv_event_decoder.h): what `kvscope publish` sends. Each format follows one release's
// vllm/distributed/kv_events.py or python/sglang/srt/disaggregation/kv_events.py, as
// attach/README.md lists them. msgspec writes every field of an array_like struct (its
// omit_defaults only affects maps), and in a map writes every field that has no default (nil
// when unset) and those with one only when they differ from it.
//   kVllm         vLLM >= 0.26 (main): [ts, events, data_parallel_rank], each event a tagged
//                 map: type, block_hashes, parent_block_hash, token_ids, block_size, lora_id,
//                 medium, lora_name, then group_idx, kv_cache_spec_kind,
//                 kv_cache_spec_sliding_window, locality when set
//   kVllmV09      vLLM 0.9: [ts, events], events as tagged arrays of 6 (BlockStored: hashes,
//                 parent, token_ids, block_size, lora_id) and 2 (BlockRemoved)
//   kVllmArray    vLLM 0.10.2 to 0.25: [ts, events, data_parallel_rank], tagged arrays of 12
//                 (... lora_id, medium, lora_name, extra_keys, group_idx, kv_cache_spec_kind,
//                 kv_cache_spec_sliding_window) and 4 (BlockRemoved: hashes, medium, group_idx)
//   kSglang       SGLang since its tagged maps: [ts, events, attn_dp_rank], one BlockStored /
//                 BlockRemoved per page (block), maps of type, block_hashes,
//                 parent_block_hash, token_ids, block_size, lora_id, then medium, cache_salt,
//                 session_id when set
//   kSglangEagle  the same, token_ids as SGLang's speculative (EAGLE) pages send them: pairs
//                 (a KvEvent's token_width 2; see eagle_pages in kv_trace.h)
// Digest hashes (vLLM only) are 32 bytes whose last 8 are the 64-bit hash, big endian.

#include <cstdint>
#include <string_view>
#include <vector>

#include "attach/kv_events.h"

namespace kvscope::attach {

enum class WireFormat : uint8_t { kVllm, kVllmV09, kVllmArray, kSglang, kSglangEagle };
enum class HashEncoding : uint8_t { kInt, kBytes };
inline constexpr WireFormat kWireFormats[] = {WireFormat::kVllm, WireFormat::kVllmV09,
                                              WireFormat::kVllmArray, WireFormat::kSglang,
                                              WireFormat::kSglangEagle};

std::string_view wire_format_name(WireFormat f);
bool parse_wire_format(std::string_view name, WireFormat& out);
// Whether the format's publisher can send digest hashes (vLLM's ExternalBlockHash since 0.10.2;
// vLLM 0.9's and SGLang's are integers).
bool wire_format_takes_digests(WireFormat f);
// Whether its replay replies carry the topic frame (vLLM >= 0.26).
bool wire_format_replies_with_topic(WireFormat f);

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
    // The batch [ts, events[indices[k]] with every hash ^ salts[k] for k < n, rank] (rank nil
    // when it is negative; none in vLLM 0.9's) into `out`.
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
    WireFormat format_;
    HashEncoding hashes_;
    std::vector<uint8_t> bytes_;
    std::vector<Hole> holes_;
    std::vector<Encoded> events_;
};

}  // namespace kvscope::attach
