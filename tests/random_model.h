#pragma once
// A Llama-style model with seeded random weights, for tests that need no file: the
// paged-vs-contiguous check and engine tests that must run where no fixture exists.

#include <cstdint>
#include <memory>

#include "engine/model_loader.h"

namespace kvscope::test {

std::shared_ptr<LoadedModel> make_random_model(const ModelConfig& config, uint64_t seed);
// The same shapes with every matrix random in `type` (kept in that type, as a file's would be).
std::shared_ptr<LoadedModel> with_weight_type(const LoadedModel& model, GgmlType type,
                                              uint64_t seed);

// A small GQA config: dim 64, 4 heads over 2 KV heads, 2 layers, vocab 97, context 256.
ModelConfig small_test_config();

}  // namespace kvscope::test
