#pragma once
// The state of a run at one step, rebuilt from events alone: the block pool, every request's
// block table and tokens, the latest metrics. The live view and replay both build it with
// apply(), event by event, so they cannot disagree. Keyframes are this struct serialized.

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/shared_text.h"
#include "probes/event.h"
#include "probes/memory_bandwidth.h"

namespace kvscope {

// The largest block pool a session may describe. The Timeline holds a BlockState per block
// (about 64 bytes), so this bounds what a reader allocates for any file: 256 MiB at most.
inline constexpr int32_t kMaxSessionBlocks = 1 << 22;
// The most publishers one attached session follows (vLLM's data-parallel ranks, one port each).
inline constexpr size_t kMaxPublishers = 1024;

struct RunInfo {
    int32_t num_blocks = 0;
    int32_t block_size = 16;
    std::string allocator = "paged";  // or "contiguous"
    std::string model;
    std::string backend = "cpu";
    int32_t n_layers = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0, vocab_size = 0;
    int64_t weight_bytes = 0;        // model weights as the backend holds them
    int64_t kv_bytes_per_block = 0;  // K and V of one block over all layers
    std::string options_json;        // everything else the run was configured with
    // Read from options_json by the session reader, for the panels that show them.
    std::string eviction_policy = "none";
    int32_t eviction_sinks = 0;
    std::string kv_dtype = "f32";
    bool kv_cache = true;  // false: recorded with --kv-cache off (every step recomputes the text)
    // The recording machine: threads the engine ran on, and its measured memory bandwidth (a
    // replay elsewhere still judges the steps against the machine that ran them).
    int32_t threads = 0;
    MemoryBandwidth bandwidth;
    // An attached deployment (`kvscope attach`): one name per publisher (its endpoint), each
    // holding an equal range of the pool, publisher p the blocks [p * n, (p + 1) * n). Empty for
    // kvscope's own engine.
    std::vector<std::string> publishers;
    int32_t blocks_per_publisher() const {
        return publishers.empty() ? 0 : num_blocks / static_cast<int32_t>(publishers.size());
    }
    // The publisher whose range holds `block`, or -1.
    int32_t publisher_of(int32_t block) const {
        int32_t n = blocks_per_publisher();
        if (n <= 0 || block < 0) return -1;
        int32_t p = block / n;
        return p < static_cast<int32_t>(publishers.size()) ? p : -1;
    }
    double bandwidth_limit_gbps() const { return bandwidth.limit_gbps(threads); }
};

struct BlockState {
    int32_t refcount = 0;
    std::vector<int32_t> owners;   // request indices, one entry per table holding it
    std::optional<uint64_t> hash;  // full block registered in the prefix cache
    int64_t alloc_step = -1;
    int32_t alloc_owner = -1;
    // Token eviction: slots of one layer's KV head (lane slots) in this block whose token was
    // evicted, out of block_size x layers x KV heads; compaction moves fill them again.
    int32_t lane_holes = 0;
    bool free() const { return refcount == 0; }
    bool cached() const { return refcount == 0 && hash.has_value(); }
};

// What an attached deployment said about a block it stored (kv_stored), beside its BlockState
// (refcount = references, hash = its hash truncated to 64 bits): the kv_stored payload (parent,
// tokens, token pairs, cache group, digest) and the medium.
struct AttachedBlock : StoredBlock {
    KvMedium medium = KvMedium::kGpu;
    bool operator==(const AttachedBlock&) const = default;
};

enum class RequestPhase : uint8_t { kWaiting, kRunning, kSwapped, kFinished, kRejected };
const char* request_phase_name(RequestPhase p);

// Texts (the name, the token pieces) are shared with the session's string table and with every
// other state and event naming them: a run whose tokens all name one long string holds it once.
struct RequestState {
    int32_t index = -1;
    SharedText name;
    RequestPhase phase = RequestPhase::kWaiting;
    int32_t prompt_len = 0;
    int32_t max_tokens = 0;
    std::vector<int32_t> block_table;  // logical -> physical; -1 for a hole
    std::vector<int32_t> token_ids;    // prompt, then generated
    std::vector<SharedText> token_text;
    int32_t preemptions = 0;
    int64_t arrival_step = 0;
    int64_t finish_step = -1;
    int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }
};

struct TimelineState {
    RunInfo info;
    int64_t step = -1;  // last step whose events were applied
    uint64_t last_seq_no = 0;
    std::vector<BlockState> blocks;
    // Parallel to `blocks` in an attached session (info.publishers not empty), else empty.
    std::vector<AttachedBlock> attached;
    std::map<int32_t, RequestState> requests;
    std::map<std::string, double> metrics;

    explicit TimelineState(const RunInfo& run_info = {});
    void apply(const Event& e);
    // The same with the event's text given as a shared copy (what a session reader decodes:
    // e.text is then empty and not read).
    void apply(const Event& e, const SharedText& text);

    int32_t blocks_used() const;
    int32_t blocks_cached() const;

    // Compact binary form for keyframes (varints, interned texts; see timeline_state.cpp).
    std::vector<uint8_t> serialize() const;
    // A keyframe of the session described by `info`: one claiming another pool size is refused
    // before anything is allocated for it. Keyframes of older files (CBOR) still load.
    static std::optional<TimelineState> deserialize(const std::vector<uint8_t>& bytes,
                                                    const RunInfo& info, std::string& error);

    bool operator==(const TimelineState& other) const;
};

}  // namespace kvscope
