#pragma once
// Storing a kept token in fewer bytes without evicting it, two ways, each a pure choice here
// (tested on hand-made inputs) that KvEvictor::after_step (kv_eviction.h) applies to the cache
// and reports:
//
// Precision by importance (ZipCache, He et al. 2024; --kv-dtype mixed:HI/LO:P%). A token's
// importance is its normalized attention: the attention probabilities it received (its column
// sum, over every query so far and the query heads that share its KV head) divided by the
// number of queries that could see it (those at or after its position). Accumulated attention
// alone favours old tokens, which more queries saw; the division takes that out. In each lane
// the ceil(P% of the kept tokens) with the highest normalized attention stay in HI; the others go
// to LO. Decided when a prefill ends and then every block of tokens (block_size, 16 by default),
// each move a token_precision event. A token that went to LO stays there: its HI bits are gone,
// and storing LO's values in HI again would cost HI's bytes for LO's precision. So a token in LO
// that ranks among the top P% later holds its place there, and at most P% are in HI.
//
// Cross-layer merging (MiniCache, Liu et al. 2024; --merge-layers FROM). From layer FROM on,
// pairs of adjacent layers (FROM, FROM+1), (FROM+2, FROM+3)... share one direction per token and
// KV head: each of K and V splits into a norm and a unit direction, the two layers' directions
// are interpolated by SLERP (t = 0.6, MiniCache's) and each layer keeps its own norm. A token
// whose two layers' directions are too far apart stays unmerged (the retention set): both its
// K and its V must lie within kMergeMaxDistance. A pair whose second layer is past the last
// layer is left as it is. Each step's new tokens are merged once their two layers are written;
// a merged token stores one direction and two f16 norms instead of two vectors, for K and for V.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "engine/eviction_policy.h"

namespace kvscope {

class KvCacheStorage;
struct SequenceLanes;

// --- precision by importance (ZipCache) ---

struct PrecisionChoice {
    int32_t slot = 0;
    int32_t position = 0;
    double score = 0;  // the normalized attention that decided it
};

// The slot's accumulated attention over the queries that could see it: positions
// [position, computed) of a sequence of `computed` tokens.
double normalized_attention(const LaneStats& lane, int32_t slot, int32_t computed);

// The lane's kept tokens still in high precision (lane.low[slot] == 0) that go to low: all
// kept tokens ranked by normalized attention, the ceil(percent% of them) highest stay high (ties:
// the newer stays); those leaving are appended lowest first. `held_blocks` and `block_size` as
// in EvictionParams (null: every slot).
void choose_low_precision(const LaneStats& lane, const std::vector<int32_t>* held_blocks,
                          int32_t block_size, int32_t computed, double percent,
                          std::vector<PrecisionChoice>& out);

// --- cross-layer merging (MiniCache) ---

// SLERP's interpolation between the lower layer's direction (t = 0) and the upper's (t = 1).
constexpr double kMergeT = 0.6;
// The normalized angular distance (arccos(cos) / pi, 0 for the same direction, 1 for opposite)
// above which a token stays unmerged: 0.25, directions more than 45 degrees apart.
constexpr double kMergeMaxDistance = 0.25;

// arccos of the cosine of a and b, over pi: in [0, 1]; 0 when either is zero.
double angular_distance(const float* a, const float* b, size_t n);
// The unit direction SLERP(a / |a|, b / |b|, t) in `out` (n floats).
void slerp_direction(const float* a, const float* b, size_t n, double t, float* out);

struct MergeOutcome {
    bool merged = false;
    double distance = 0;  // the larger of K's and V's angular distance
};
// One KV head's token in two adjacent layers (k0, v0 the lower; k1, v1 the upper; n floats
// each): when both K's and V's directions lie within `max_distance`, each vector becomes its own
// norm, rounded to f16 as it is stored, times the shared SLERP direction; else nothing changes.
MergeOutcome merge_token_head(float* k0, float* v0, float* k1, float* v1, size_t n, double t,
                              double max_distance);

// Bytes one merged token of one KV head saves in a pair whose layers store a token of a head in
// `lane_token_bytes` (K and V, scales included): two vectors become one direction and two f16
// norms, for K and for V.
inline int64_t merge_saving(int64_t lane_token_bytes) {
    return lane_token_bytes - 2 * 2 * static_cast<int64_t>(sizeof(uint16_t));
}

// What a sequence's kept tokens save below the bytes of the blocks they are in: each in the low
// tier (mixed) and each merged pair (counted once, in the pair's lower layer).
int64_t lanes_bytes_saved(const SequenceLanes& lanes, const KvCacheStorage& kv);

}  // namespace kvscope
