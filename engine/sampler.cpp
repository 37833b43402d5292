#include "engine/sampler.h"

#include <algorithm>
#include <cmath>

#include "engine/cpu_ops.h"

namespace kvscope {

int32_t argmax(const float* x, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; ++i)
        if (x[i] > x[best]) best = i;
    return best;
}

Sampler::Sampler(int vocab_size, SamplingParams params)
    : vocab_size_(vocab_size), params_(params), state_(params.seed) {}

float Sampler::next_f32() {
    state_ ^= state_ >> 12;
    state_ ^= state_ << 25;
    state_ ^= state_ >> 27;
    auto u32 = static_cast<uint32_t>((state_ * 0x2545F4914F6CDD1Dull) >> 32);
    return static_cast<float>(u32 >> 8) / 16777216.0f;
}

int32_t Sampler::sample(float* logits) {
    if (!(params_.temperature > 0.0f)) return argmax(logits, vocab_size_);
    // A temperature so small that the top logit over it is no longer a float (1e-45) is
    // greedy, as sampling is in the limit; divided through, softmax would see infinities and
    // make every probability NaN (a run of the last token in the vocabulary).
    const int32_t best = argmax(logits, vocab_size_);
    if (!std::isfinite(logits[best] / params_.temperature)) return best;
    for (int i = 0; i < vocab_size_; ++i)
        logits[i] /= params_.temperature;
    softmax(logits, vocab_size_);
    float coin = next_f32();
    // Written so that NaN (which the flags and workloads refuse) means no nucleus, never an
    // empty one.
    if (!(params_.top_p > 0.0f && params_.top_p < 1.0f)) {
        float cdf = 0.0f;
        for (int i = 0; i < vocab_size_; ++i) {
            cdf += logits[i];
            if (coin < cdf) return i;
        }
        return vocab_size_ - 1;
    }
    // Nucleus: drop tokens that cannot be in the nucleus before sorting.
    const float cutoff = (1.0f - params_.top_p) / static_cast<float>(vocab_size_ - 1);
    candidates_.clear();
    for (int i = 0; i < vocab_size_; ++i)
        if (logits[i] >= cutoff) candidates_.emplace_back(logits[i], i);
    // The top token is in every nucleus, also where rounding left it below the cutoff (a
    // top_p under 1 / vocabulary size over a nearly flat distribution).
    if (candidates_.empty()) return best;
    std::sort(candidates_.begin(), candidates_.end(), [](const auto& a, const auto& b) {
        return a.first > b.first || (a.first == b.first && a.second < b.second);
    });
    float cumulative = 0.0f;
    size_t last = candidates_.size() - 1;
    for (size_t i = 0; i < candidates_.size(); ++i) {
        cumulative += candidates_[i].first;
        if (cumulative > params_.top_p) {
            last = i;
            break;
        }
    }
    float r = coin * cumulative;
    float cdf = 0.0f;
    for (size_t i = 0; i <= last; ++i) {
        cdf += candidates_[i].first;
        if (r < cdf) return candidates_[i].second;
    }
    return candidates_[last].second;
}

}  // namespace kvscope
