#include "engine/kv_mixing.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "engine/kv_cache.h"
#include "engine/kv_eviction.h"
#include "engine/kv_quant.h"

namespace kvscope {

double normalized_attention(const LaneStats& lane, int32_t slot, int32_t computed) {
    const auto s = static_cast<size_t>(slot);
    const double acc = s < lane.accumulated.size() ? lane.accumulated[s] : 0.0;
    const int32_t queries = computed - lane.position[s];
    return queries > 0 ? acc / queries : 0.0;
}

void choose_low_precision(const LaneStats& lane, const std::vector<int32_t>* held_blocks,
                          int32_t block_size, int32_t computed, double percent,
                          std::vector<PrecisionChoice>& out) {
    EvictionParams p;
    p.held_blocks = held_blocks;
    p.block_size = block_size;
    const std::vector<int32_t> slots = valid_slots(lane, p);  // oldest first
    const auto high =
        static_cast<size_t>(std::ceil(percent / 100.0 * static_cast<double>(slots.size()) - 1e-9));
    if (high >= slots.size()) return;
    std::vector<double> score(slots.size());
    for (size_t i = 0; i < slots.size(); ++i)
        score[i] = normalized_attention(lane, slots[i], computed);
    // Lowest first; among equal scores the older first, so that the newer stays high.
    std::vector<size_t> order(slots.size());
    for (size_t i = 0; i < order.size(); ++i)
        order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return score[a] < score[b]; });
    const size_t leaving = slots.size() - high;
    for (size_t k = 0; k < leaving; ++k) {
        const int32_t slot = slots[order[k]];
        const auto s = static_cast<size_t>(slot);
        if (s < lane.low.size() && lane.low[s] != 0) continue;  // already low
        out.push_back({slot, lane.position[s], score[order[k]]});
    }
}

namespace {
double norm(const float* a, size_t n) {
    double sum = 0;
    for (size_t i = 0; i < n; ++i)
        sum += static_cast<double>(a[i]) * a[i];
    return std::sqrt(sum);
}
}  // namespace

double angular_distance(const float* a, const float* b, size_t n) {
    const double na = norm(a, n), nb = norm(b, n);
    if (na == 0 || nb == 0) return 0;
    double dot = 0;
    for (size_t i = 0; i < n; ++i)
        dot += static_cast<double>(a[i]) * b[i];
    return std::acos(std::clamp(dot / (na * nb), -1.0, 1.0)) / std::numbers::pi;
}

void slerp_direction(const float* a, const float* b, size_t n, double t, float* out) {
    const double na = norm(a, n), nb = norm(b, n);
    double dot = 0;
    for (size_t i = 0; i < n; ++i)
        dot += (a[i] / na) * (b[i] / nb);
    const double omega = std::acos(std::clamp(dot, -1.0, 1.0));
    const double sin_omega = std::sin(omega);
    // Nearly the same direction: SLERP tends to the straight interpolation.
    const double wa = sin_omega < 1e-6 ? 1 - t : std::sin((1 - t) * omega) / sin_omega;
    const double wb = sin_omega < 1e-6 ? t : std::sin(t * omega) / sin_omega;
    std::vector<double> d(n);
    for (size_t i = 0; i < n; ++i)
        d[i] = wa * a[i] / na + wb * b[i] / nb;
    double nd = 0;
    for (double x : d)
        nd += x * x;
    nd = std::sqrt(nd);
    for (size_t i = 0; i < n; ++i)
        out[i] = static_cast<float>(nd > 0 ? d[i] / nd : 0.0);
}

MergeOutcome merge_token_head(float* k0, float* v0, float* k1, float* v1, size_t n, double t,
                              double max_distance) {
    MergeOutcome o;
    o.distance = std::max(angular_distance(k0, k1, n), angular_distance(v0, v1, n));
    // A zero vector has no direction to share.
    if (o.distance > max_distance || norm(k0, n) == 0 || norm(k1, n) == 0 || norm(v0, n) == 0 ||
        norm(v1, n) == 0)
        return o;
    std::vector<float> dir(n);
    for (auto [x0, x1] : {std::pair{k0, k1}, std::pair{v0, v1}}) {
        slerp_direction(x0, x1, n, t, dir.data());
        for (float* x : {x0, x1}) {
            const float magnitude = half_to_float(float_to_half(static_cast<float>(norm(x, n))));
            for (size_t i = 0; i < n; ++i)
                x[i] = magnitude * dir[i];
        }
    }
    o.merged = true;
    return o;
}

int64_t lanes_bytes_saved(const SequenceLanes& lanes, const KvCacheStorage& kv) {
    int64_t saved = 0;
    for (int32_t layer = 0; layer < lanes.n_layers; ++layer) {
        const int64_t low = kv.low_tier_saving(layer);
        const bool lower_of_pair = lanes.merge_from >= 0 && layer >= lanes.merge_from &&
                                   (layer - lanes.merge_from) % 2 == 0 &&
                                   layer + 1 < lanes.n_layers;
        const int64_t merged = lower_of_pair ? merge_saving(kv.bytes_per_lane_token(layer)) : 0;
        if (low == 0 && merged == 0) continue;
        for (int32_t h = 0; h < lanes.n_kv_heads; ++h) {
            const LaneStats& lane = lanes.lane(layer, h);
            for (size_t s = 0; s < lane.position.size(); ++s) {
                if (lane.position[s] < 0) continue;
                if (s < lane.low.size() && lane.low[s] != 0) saved += low;
                if (s < lane.merged.size() && lane.merged[s] != 0) saved += merged;
            }
        }
    }
    return saved;
}

}  // namespace kvscope
