#pragma once
// Generates realistic serving workloads for a model: shared system prompts (chat), few-shot
// prefixes (shared-prefix), heavy-tailed prompt and output lengths (long-tail) and bursts of
// arrivals (burst). Prompts are text in the style of the bundled model's corpus when the model
// has a tokenizer, token ids otherwise. Same kind, count and seed: same workload.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/result.h"
#include "engine/request.h"

namespace kvscope {

class Tokenizer;

enum class WorkloadKind { kChat, kSharedPrefix, kLongTail, kBurst };
Result<WorkloadKind> parse_workload_kind(const std::string& name);

struct GeneratedRequest {
    Request request;
    std::string prompt_text;  // empty when the prompt is ids only
};

// Hands each request to `take` as it is made, in order; `take` returning false stops early.
// Nothing is kept: a million requests held at once took 2.45 GB.
void generate_workload(WorkloadKind kind, int32_t count, uint64_t seed, const Tokenizer* tokenizer,
                       int32_t vocab_size, int32_t context_length,
                       const std::function<bool(const GeneratedRequest&)>& take);
// All `count` requests at once, for the small workloads that are used in place (the GUI's).
std::vector<GeneratedRequest> generate_workload(WorkloadKind kind, int32_t count, uint64_t seed,
                                                const Tokenizer* tokenizer, int32_t vocab_size,
                                                int32_t context_length);

}  // namespace kvscope
