#pragma once
// One prompt through the engine: the serving scheduler with a single request, so `generate`
// and `run` share every line of the decode path.

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/engine.h"
#include "engine/kv_eviction.h"
#include "engine/sampler.h"

namespace kvscope {

struct GenerateRequest {
    std::vector<int32_t> prompt;  // must not be empty
    int32_t max_tokens = 256;
    SamplingParams sampling;
    std::vector<uint8_t> capture_attention;    // per (layer, head); see attention_spec.h
    std::shared_ptr<const KvEvictor> evictor;  // token eviction; null keeps every token
    bool trace_ops = true;                     // op spans while a probe listens (op_trace.h)
    bool kv_cache = true;  // off: every step recomputes the whole text (ServingOptions)
};

struct GenerateStats {
    int32_t prompt_tokens = 0;
    int32_t generated_tokens = 0;
    double prefill_seconds = 0;  // until the first token
    double decode_seconds = 0;   // from the first token to the last
    bool stopped_by_eos = false;
    int64_t tokens_evicted = 0;
};

// Generates up to max_tokens tokens after the prompt (prefill in one pass, then one token per
// step); stops early at the model's end token or at the end of its context.
Result<GenerateStats> generate(Engine& engine, const GenerateRequest& request,
                               const std::function<void(int32_t)>& on_token);

}  // namespace kvscope
