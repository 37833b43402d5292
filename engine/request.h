#pragma once
// A serving request as a workload file states it, and the engine's view of its samples.

#include <cstdint>
#include <string>
#include <vector>

#include "engine/sampler.h"

namespace kvscope {

struct Request {
    std::string id;
    int64_t arrival_step = 0;
    std::vector<int32_t> prompt;
    int32_t max_tokens = 64;
    SamplingParams sampling;
    int32_t n = 1;  // parallel samples sharing the prompt's blocks
};

enum class SequenceState { kWaiting, kRunning, kSwapped, kFinished, kRejected };
const char* sequence_state_name(SequenceState s);

}  // namespace kvscope
