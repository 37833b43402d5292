#pragma once
// A deliberately plain forward pass with a contiguous KV cache ([layer][pos][kv_dim]), one
// token at a time, written after llama2.c's run.c. Tests hold the paged engine against it.

#include <vector>

#include "engine/model_loader.h"

namespace kvscope::test {

class ReferenceForward {
  public:
    explicit ReferenceForward(const LoadedModel& model);
    // Logits after feeding `token` at position `pos` (positions must come in order 0, 1, ...).
    const std::vector<float>& step(int token, int pos);

  private:
    const LoadedModel& model_;
    std::vector<float> key_cache_, value_cache_, x_, xb_, xb2_, q_, k_, v_, att_, hb_, hb2_,
        logits_;
};

}  // namespace kvscope::test
