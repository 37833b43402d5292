#pragma once
// Token-eviction policies, each a small scorer behind one interface (as NVIDIA's kvpress does
// it): given what one lane of a sequence's cache holds (a lane is one layer's one KV head) and
// the statistics the forward pass kept for it, a policy names the slots to drop to get down to
// the budget, each with the score that decided it and the rule. Policies never touch the cache;
// the engine applies what they choose and reports every choice as a token_evict event.
//
//   streaming  the first `sinks` tokens and the most recent ones (StreamingLLM)
//   h2o        heavy hitters by accumulated attention, plus a recent window (H2O)
//   snapkv     once, at the end of prefill: the prompt tokens the observation window (the last
//              prompt tokens) attends to most, pooled over neighbours, plus that window (SnapKV)
//   tova       the tokens the newest query attends to least go first (TOVA)
//   knorm      keys with the largest L2 norm go first; keeps the smallest (query-free baseline)
//   morphkv    a constant-size cache: the `window` most recent tokens, and the older tokens the
//              window's queries attend to most, ranked again every step, so an older token
//              kept for a while goes when the window's focus moves on (MorphKV, Ghadia et al.
//              2025). A token's score is the most attention any one of the window's queries gave
//              it (max, the default) or their sum: MorphKV's code runs max for long responses
//              (LongGenBench) and sum for long inputs (LongBench); decode under a budget is the
//              former. budget = window + the older tokens kept.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace kvscope {

// One lane of one sequence, slot by slot. Slots are in position order until compaction moves a
// token into an earlier hole, so policies order by `position`. Statistics are indexed like
// `position`; a policy reads only those it needs.
struct LaneStats {
    std::vector<int32_t> position;   // token position held in each slot; -1: a hole (evicted)
    std::vector<float> accumulated;  // attention summed over every query so far and over the
                                     // query heads that share this KV head (h2o)
    std::vector<float> current;      // attention of the newest query, averaged over heads (tova)
    std::vector<float> observed;  // attention of the observation window's queries, summed (snapkv)
    std::vector<float> key_norm;  // L2 norm of the key (knorm)
    // Not statistics but what a kept token is stored as, indexed and moved like them: 1 where the
    // token is in the low tier (--kv-dtype mixed), 1 where it is merged with the other layer
    // of its pair (--merge-layers); kv_mixing.h.
    std::vector<float> low, merged;
    // morphkv: the attention each slot received from each of the last R queries, summed over
    // the query heads that share this KV head. A ring: the query at position p fills row p % R,
    // and window_query[row] is that position (-1: no query yet). Rows, not running aggregates,
    // because a maximum cannot be taken back when its query leaves the window.
    std::vector<std::vector<float>> window_rows;
    std::vector<int32_t> window_query;

    int32_t valid() const;
    // Every statistic indexed like `position`, for what is done to a slot's statistics whatever
    // they are (cleared on eviction, moved and cut by compaction).
    template <class Visit>
    void for_each_slot_statistic(Visit&& visit) {
        for (std::vector<float>* v : {&accumulated, &current, &observed, &key_norm, &low, &merged})
            visit(*v);
        for (std::vector<float>& row : window_rows)
            visit(row);
    }
};

// How morphkv folds the window's queries into one score per older token.
enum class WindowAggregate { kMax, kSum };
// morphkv's recent window when --window is not given: the window of MorphKV's long-input runs
// and SnapKV's observation window, cut to half the budget so that a small budget still keeps
// tokens by attention.
constexpr int32_t kMorphKvDefaultWindow = 32;

struct EvictionParams {
    // The lane's blocks still held (SequenceLanes::held_blocks), of `block_size` slots: every
    // slot outside them is a hole, not worth visiting. Null: every slot is looked at.
    const std::vector<int32_t>* held_blocks = nullptr;
    int32_t block_size = 0;
    int32_t budget = 0;        // tokens this lane may keep
    int32_t sinks = 4;         // streaming: first tokens always kept
    int32_t window = -1;       // h2o / snapkv / morphkv: recent tokens always kept; -1: half
                               // the budget (h2o), the observation window (snapkv),
                               // min(kMorphKvDefaultWindow, half the budget) (morphkv)
    int32_t observation = 32;  // snapkv: the last prompt tokens whose attention scores the rest
    int32_t pool_kernel = 5;   // snapkv: 1-D pooling over neighbouring positions
    bool max_pool = true;      // snapkv: max pooling (else average)
    WindowAggregate window_aggregate = WindowAggregate::kMax;  // morphkv
};

// The lane's kept slots, oldest position first (compaction may have moved a newer token into an
// older slot, so slot order is not always position order); only the held blocks' slots are
// visited. Shared by the policies and the precision choice (kv_mixing.h).
std::vector<int32_t> valid_slots(const LaneStats& lane, const EvictionParams& params);

struct EvictionChoice {
    int32_t slot = 0;
    int32_t position = 0;
    double score = 0;  // what decided it (position, attention, pooled score, norm)
    const char* reason = "";
};

class EvictionPolicy {
  public:
    virtual ~EvictionPolicy() = default;
    virtual std::string_view name() const = 0;
    // snapkv compresses once, when the prompt has been prefilled; the others keep every step
    // within the budget.
    virtual bool once_after_prefill() const { return false; }
    // Appends the slots to evict so that at most params.budget valid ones stay, lowest score
    // first; nothing when the lane is within its budget.
    virtual void choose(const LaneStats& lane, const EvictionParams& params,
                        std::vector<EvictionChoice>& out) const = 0;
};

// "streaming", "h2o", "snapkv", "tova", "knorm", "morphkv"; an unknown name is an error naming the
// known.
Result<std::unique_ptr<EvictionPolicy>> make_eviction_policy(std::string_view name);
const std::vector<std::string>& eviction_policy_names();

// How a per-lane budget is spread over layers. Pyramid (PyramidKV) gives lower layers more and
// higher layers less, falling linearly from 1.5x to 0.5x of the uniform budget, with the same
// total; every layer keeps at least one token.
enum class LayerBudget { kUniform, kPyramid };
std::vector<int32_t> layer_budgets(int32_t per_layer, int32_t n_layers, LayerBudget kind);

}  // namespace kvscope
