#pragma once
// KV-cache events as vLLM and SGLang publish them, decoded into one plain form whichever shape
// they came in (tagged arrays or tagged maps, integer or digest hashes, vLLM's or SGLang's
// batch). The wire format, as `attach/README.md` describes it with the versions it follows:
//
//   ZeroMQ PUB, three frames: topic, sequence number (8 bytes big endian, per publisher, from
//   0), msgpack payload. The payload is an EventBatch, a positional array
//   [ts, events, data_parallel_rank] (SGLang: attn_dp_rank; the rank may be absent, or nil).
//   Each event is ["BlockStored", field...] (positional, every field written) or
//   {"type": "BlockStored", field: value...} (fields left at their default omitted):
//     BlockStored   block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium,
//                   lora_name, extra_keys, group_idx, kv_cache_spec_kind,
//                   kv_cache_spec_sliding_window, locality, ownership (vLLM's arrays);
//                   vLLM's maps also event_version; SGLang: medium, then (arrays) a metadata
//                   map {cache_salt, session_id} or (maps) cache_salt, session_id
//     BlockRemoved  block_hashes, medium, group_idx, locality, ownership
//     AllBlocksCleared
//   A block hash is an integer (vLLM's default since VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES) or
//   a digest (bytes). kvscope keys a block by 64 bits of it, one rule for both: the integer as
//   it is (a negative one as its two's complement), a digest's LAST 8 bytes read big endian,
//   which is vLLM's own integer form (int.from_bytes(digest, "big") & (2**64 - 1)), so a block
//   has one key whichever form its deployment sends. A digest is also kept whole, for display.
//   SGLang's speculative (EAGLE) pages send token_ids as pairs [[token, next token], ...]:
//   kept as pairs (token_width 2).

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "probes/event.h"

namespace kvscope::attach {

enum class KvEventType : uint8_t { kBlockStored, kBlockRemoved, kAllBlocksCleared };

struct KvEvent {
    KvEventType type = KvEventType::kBlockStored;
    std::vector<uint64_t> block_hashes;
    bool has_parent = false;
    uint64_t parent_hash = 0;
    // Flattened: token_width ids per position (2: SGLang's EAGLE pairs).
    std::vector<int32_t> token_ids;
    int32_t token_width = 1;
    int32_t block_size = 0;
    KvMedium medium = KvMedium::kGpu;
    // The medium as named when it was none kvscope knows (medium is then kOther).
    std::string medium_name;
    // The medium field was sent (vLLM's arrays and maps always write it, nil when unset).
    bool has_medium = true;
    // vLLM's hybrid KV cache manager: the block's cache group and what kind of cache it is.
    // -1: none said. A block's identity is (medium, group, hash).
    int32_t group_idx = -1;
    std::string group_kind;       // kv_cache_spec_kind, e.g. full_attention, sliding_window
    int32_t sliding_window = -1;  // kv_cache_spec_sliding_window; -1: none
    std::string locality;         // vLLM's offload tiers: LOCAL, REMOTE; empty: unspecified
    // A lora_id, when one was sent (-1: none).
    int64_t lora_id = -1;
    // SGLang's request metadata (cache_salt, session_id); empty: none.
    std::string cache_salt, session_id;
    // The digests of block_hashes when they came as bytes: digest_size bytes each, in order
    // (empty when they came as integers).
    std::vector<uint8_t> digests;
    uint32_t digest_size = 0;
};

// A name the decoder met and did not know (a field, an event type, a medium), how often, in a
// batch or over a publisher's run.
struct NameCount {
    std::string name;
    int64_t count = 0;
};
// At most this many distinct names are kept per list (more are counted under "(others)"), and
// a name is cut to kMaxNameBytes: a hostile publisher cannot grow them without bound.
inline constexpr size_t kMaxNames = 32, kMaxNameBytes = 64;
void count_name(std::vector<NameCount>& names, std::string_view name, int64_t n = 1);

struct KvEventBatch {
    double ts = 0;
    // data_parallel_rank (vLLM) or attn_dp_rank (SGLang); -1 when the batch has none.
    int32_t rank = -1;
    std::vector<KvEvent> events;
    // Skipped and counted, the rest of the batch kept: events of a type kvscope does not know,
    // fields it does not know (a newer publisher), events whose known fields have the wrong
    // shape or a value outside their domain (a negative token id or block size, a digest
    // shorter than 8 bytes).
    int32_t unknown_events = 0;
    int32_t unknown_fields = 0;
    int32_t malformed_events = 0;
    // By name: unknown event types, unknown fields ("BlockStored.foo", or "BlockStored[13]"
    // past the known positions) and media kvscope does not know; malformed events by reason.
    std::vector<NameCount> unknown_event_names, unknown_field_names, unknown_media;
    std::vector<NameCount> malformed_reasons;
    // Some hash came as digest bytes, not an integer.
    bool digest_hashes = false;
};

std::string_view kv_event_type_name(KvEventType type);

}  // namespace kvscope::attach
