#pragma once
// KV-cache events as vLLM and SGLang publish them, decoded into one plain form whichever shape
// they came in (tagged arrays or tagged maps, integer or digest hashes, vLLM's or SGLang's
// batch). The wire format, as `attach/README.md` describes it:
//
//   ZeroMQ PUB, three frames: topic, sequence number (8 bytes big endian, per publisher, from
//   0), msgpack payload. The payload is an EventBatch, a positional array
//   [ts, events, data_parallel_rank] (SGLang: attn_dp_rank; the rank may be absent). Each event
//   is ["BlockStored", field...] (positional, trailing defaults omitted) or
//   {"type": "BlockStored", field: value...} (defaults omitted):
//     BlockStored   block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium,
//                   lora_name, extra_keys, group_idx, kv_cache_spec_kind,
//                   kv_cache_spec_sliding_window, locality, ownership
//     BlockRemoved  block_hashes, medium, group_idx, locality, ownership
//     AllBlocksCleared
//   A block hash is an integer (vLLM's default) or a digest (bytes, 32 for SHA-256); kvscope
//   keeps 64 bits of it: the integer as it is, a digest's first 8 bytes read big endian (so a
//   hash printed in hex starts as the digest does).

#include <cstdint>
#include <string>
#include <vector>

#include "probes/event.h"

namespace kvscope::attach {

enum class KvEventType : uint8_t { kBlockStored, kBlockRemoved, kAllBlocksCleared };

struct KvEvent {
    KvEventType type = KvEventType::kBlockStored;
    std::vector<uint64_t> block_hashes;
    bool has_parent = false;
    uint64_t parent_hash = 0;
    std::vector<int32_t> token_ids;
    int32_t block_size = 0;
    KvMedium medium = KvMedium::kGpu;
    int32_t group_idx = 0;
    // A lora_id, when one was sent (-1: none).
    int64_t lora_id = -1;
};

struct KvEventBatch {
    double ts = 0;
    // data_parallel_rank (vLLM) or attn_dp_rank (SGLang); -1 when the batch has none.
    int32_t rank = -1;
    std::vector<KvEvent> events;
    // Skipped and counted, the rest of the batch kept: events of a type kvscope does not know,
    // fields it does not know (a newer publisher), events whose known fields have the wrong
    // shape.
    int32_t unknown_events = 0;
    int32_t unknown_fields = 0;
    int32_t malformed_events = 0;
    // Some hash came as digest bytes, not an integer.
    bool digest_hashes = false;
};

std::string_view kv_event_type_name(KvEventType type);

}  // namespace kvscope::attach
