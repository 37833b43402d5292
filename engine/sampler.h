#pragma once
// Token sampling: greedy at temperature 0, otherwise temperature + optional top-p (nucleus),
// driven by a seeded xorshift64* generator so a seed gives the same tokens on every machine.
// The arithmetic follows llama2.c's run.c, so seeded runs can be compared with it.

#include <cstdint>
#include <vector>

namespace kvscope {

struct SamplingParams {
    float temperature = 0.0f;
    float top_p = 1.0f;  // 1 (or <= 0) disables nucleus sampling
    uint64_t seed = 1;
};

class Sampler {
  public:
    Sampler(int vocab_size, SamplingParams params);
    // Picks the next token from `logits` (modified in place).
    int32_t sample(float* logits);

  private:
    float next_f32();

    int vocab_size_;
    SamplingParams params_;
    uint64_t state_;
    std::vector<std::pair<float, int32_t>> candidates_;
};

int32_t argmax(const float* x, int n);

}  // namespace kvscope
