#pragma once
// Token eviction in the paged cache: what a sequence's cache holds lane by lane (a lane is one
// layer's one KV head), and the KvEvictor that keeps each lane within its budget with an
// EvictionPolicy (eviction_policy.h) and reports every decision.
//
// The design. Blocks stay what they are without eviction: block table entry i of a sequence
// holds slots [i * block_size, (i + 1) * block_size) of every layer and KV head, and a token
// appended to the sequence takes the next slot in every lane. Eviction is per lane: it turns
// one lane's slot into a hole (SequenceLanes), which attention skips, while the other lanes keep
// that token. A full block whose slots are holes in every lane goes back to the pool and leaves
// a hole in the block table (entry -1, a block_free event). With `compact`, after each step
// every lane moves its last tokens into its earliest holes (token_move events), so each lane's
// tokens are dense at the start of the table and the blocks past the longest lane go back:
// a lane then holds ceil(kept / block_size) blocks. Moves only go to lower slots, and new
// tokens always take slots past every kept one, so a key a query may see is always at a lower
// slot (causality stays a comparison of slots); policies order by position. The statistics the
// policies score by (accumulated and newest attention, the observation window's attention, key
// norms, the recent window's attention row by row) are gathered by the forward pass into the same
// lanes, in row order, so that what is evicted never depends on threads or batching.

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "engine/block_manager.h"
#include "engine/eviction_policy.h"
#include "engine/kv_mixing.h"
#include "engine/kv_quant.h"
#include "engine/reporter.h"

namespace kvscope {

// Where RoPE puts the tokens a policy keeps. kAbsolute: at the position each token had in the
// text, as without eviction. kCache: at its place among the tokens the lane keeps (sinks at
// 0..sinks-1, then the window in order), as StreamingLLM does, so RoPE never sees a position
// past the budget however long the text; only streaming keeps a cache whose places can stand in
// for positions. kPolicyDefault: kCache for streaming, kAbsolute for the others.
enum class PositionMode { kPolicyDefault, kAbsolute, kCache };

struct EvictionOptions {
    std::string policy = "none";
    int32_t budget_tokens = 0;  // per lane; 0: budget_percent decides
    double budget_percent = 0;  // of the sequence so far, when budget_tokens is 0
    int32_t sinks = 4;          // streaming
    int32_t window = -1;        // h2o / snapkv / morphkv recent window; -1: the policy's default
    int32_t observation = 32;   // snapkv observation window
    WindowAggregate window_aggregate = WindowAggregate::kMax;  // morphkv
    LayerBudget layer_budget = LayerBudget::kUniform;
    // Close holes after each step (token_move events). Off here, so that the engine does only
    // what it is told; the commands turn it on unless --no-compact (or int4 / int2, whose keys
    // cannot move), because holes scattered over blocks keep most of the blocks allocated.
    bool compact = false;
    PositionMode positions = PositionMode::kPolicyDefault;
    // --kv-dtype mixed:HI/LO:P% (kv_mixing.h): which kept tokens go to the low tier. The
    // storage's tier is EngineOptions::kv_low.
    std::optional<KvMixed> mixed;
    // --merge-layers FROM (kv_mixing.h): -1 merges nothing; --merge-distance, the angular
    // distance past which a token stays unmerged.
    int32_t merge_from = -1;
    double merge_max_distance = kMergeMaxDistance;

    // A token-eviction policy is on.
    bool active() const { return policy != "none"; }
    // Anything the KvEvictor does after each step: a policy, mixed precision or merging.
    bool stores_less() const { return active() || mixed || merge_from >= 0; }
    bool cache_positions() const {
        return policy == "streaming" && positions != PositionMode::kAbsolute;
    }
};

// Reads "--kv-budget" as N tokens or P% (0 < P <= 100); the message names the value.
Status parse_kv_budget(const std::string& text, EvictionOptions& out);
// "cache" or "absolute" (--positions); the message names the value.
Result<PositionMode> parse_position_mode(const std::string& text);
const char* position_mode_name(const EvictionOptions& options);  // "cache" or "absolute"
// The options against each other and the model: a budget below sinks + 1, no budget, an
// unknown policy, --positions cache with a policy other than streaming. Messages name the flag.
Status validate_eviction_options(const EvictionOptions& options);
// --merge-layers FROM against the model: a layer of it (FROM = n_layers - 1 forms no pair and
// merges nothing); -1 is none.
Status validate_merge_layers(int32_t from, int32_t n_layers);

struct SequenceLanes {
    int32_t n_layers = 0, n_kv_heads = 0, block_size = 0;
    std::vector<LaneStats> lanes;  // [layer * n_kv_heads + kv_head]
    int32_t slots = 0;             // slots used in every lane (the block table's num_tokens)
    // Logical blocks of the table not given back, ascending. Attention, the statistics and the
    // policies visit these blocks' slots only, so that without compaction a step costs what the
    // budget keeps rather than the position: visiting every slot, holes included, made 20k
    // tokens of streaming at a budget of 64 take 38 s, and 100k never finish.
    std::vector<int32_t> held_blocks;
    // What the forward pass should gather (set from the policy).
    bool want_accumulated = false, want_current = false, want_observed = false,
         want_key_norm = false;
    int32_t observe_from = 0;  // positions at or past this feed `observed` (snapkv)
    // RoPE at places in the lane rather than positions (PositionMode::kCache): keys are stored
    // unrotated and rotated by the forward pass at their rank among the lane's kept tokens.
    bool cache_positions = false;
    int32_t window_rows = 0;  // morphkv: the recent queries each lane keeps a row for (R)
    bool compressed_after_prefill = false;
    // Mixed precision: lanes keep `low`; the next decision once `computed` reaches this.
    bool want_low = false;
    int32_t next_precision_at = 0;
    // Merging: lanes keep `merged`; the first layer of the first pair (-1: none), and the
    // slots below `merged_through` have been merged or retained.
    int32_t merge_from = -1;
    int32_t merged_through = 0;

    SequenceLanes(int32_t layers, int32_t kv_heads, int32_t block_size);
    LaneStats& lane(int32_t layer, int32_t kv_head) {
        return lanes[static_cast<size_t>(layer * n_kv_heads + kv_head)];
    }
    const LaneStats& lane(int32_t layer, int32_t kv_head) const {
        return lanes[static_cast<size_t>(layer * n_kv_heads + kv_head)];
    }
    // Slots [slots, slots + count) for positions [first_position, ...), in every lane.
    void append(int32_t first_position, int32_t count);
    // Calls visit(first_slot, count) for the slots below `end` of each held block, in order.
    template <class Visit>
    void for_each_held_span(int32_t end, Visit&& visit) const {
        for (int32_t b : held_blocks) {
            const int32_t first = b * block_size;
            if (first >= end) break;
            visit(first, std::min(block_size, end - first));
        }
    }
    // True when `slot` is a hole in every lane.
    bool hole_everywhere(int32_t slot) const;
    int32_t valid_tokens() const;  // summed over lanes
    // Held blocks with at least one kept token, summed over lanes: what a cache allocating one
    // block per lane would hold.
    int64_t lane_blocks_held() const;
};

class KvBlockStore;

class KvEvictor {
  public:
    static Result<std::unique_ptr<KvEvictor>> create(const EvictionOptions& options,
                                                     int32_t n_layers);

    const EvictionOptions& options() const { return options_; }
    // Lanes for a new sequence, with the statistics this policy needs switched on.
    std::unique_ptr<SequenceLanes> new_lanes(int32_t n_layers, int32_t n_kv_heads,
                                             int32_t block_size, int32_t prompt_len) const;
    // After a forward pass: brings every lane within its budget (snapkv: once, when the prompt
    // is prefilled), reports each eviction, and gives back full blocks that are holes in every
    // lane; then, with mixed precision, sends tokens to the low tier (token_precision events),
    // and with merging merges the step's new tokens across layer pairs (a layer_merge event per
    // pair). `computed` is the sequence's positions so far. Returns the tokens evicted.
    int64_t after_step(SequenceLanes& lanes, BlockTable& table, int32_t computed,
                       int32_t prompt_len, int32_t owner, BlockManager& blocks,
                       KvBlockStore& storage, const Reporter& reporter) const;
    // The per-lane budget of `layer` for a sequence of `computed` positions (with a policy).
    int32_t budget(int32_t layer, int32_t computed) const;
    // With cache positions: how many of `wanted` tokens a chunk may append so that no lane's
    // places (the RoPE positions) pass its budget before the policy evicts after the step;
    // at least 1. A long prompt is then prefilled a budget's worth first and a token a step
    // after, as StreamingLLM feeds text. Without cache positions: `wanted`.
    int32_t chunk_within_budget(const SequenceLanes* lanes, int32_t computed, int32_t wanted) const;

  private:
    KvEvictor() = default;
    int64_t evict(SequenceLanes& lanes, BlockTable& table, int32_t computed, int32_t prompt_len,
                  int32_t owner, BlockManager& blocks, KvBlockStore& storage,
                  const Reporter& reporter) const;
    // Tokens in blocks shared with another sequence (parallel samples) are left as they are.
    void lower_precision(SequenceLanes& lanes, const BlockTable& table, int32_t computed,
                         int32_t owner, const BlockManager& blocks, KvBlockStore& storage,
                         const Reporter& reporter) const;
    void merge_layers(SequenceLanes& lanes, const BlockTable& table, int32_t owner,
                      const BlockManager& blocks, KvBlockStore& storage,
                      const Reporter& reporter) const;
    void compact(SequenceLanes& lanes, BlockTable& table, int32_t owner, BlockManager& blocks,
                 KvBlockStore& storage, const Reporter& reporter) const;
    EvictionOptions options_;
    std::unique_ptr<EvictionPolicy> policy_;
    int32_t n_layers_ = 0;
};

}  // namespace kvscope
