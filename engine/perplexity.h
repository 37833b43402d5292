#pragma once
// Perplexity of a token stream, computed the way llama.cpp's llama-perplexity does, so the two
// can be compared on one file: the stream (BOS first) cut into chunks of n_ctx tokens, each
// chunk's first token replaced by BOS, each chunk evaluated from an empty cache, and only the
// predictions in the second half of each chunk scored.

#include <cstdint>
#include <functional>
#include <vector>

#include "base/result.h"
#include "engine/engine.h"

namespace kvscope {

struct PerplexityResult {
    int32_t chunks = 0;
    int64_t scored_tokens = 0;
    double mean_nll = 0;                   // nats per token
    double perplexity = 0;                 // exp(mean_nll)
    std::vector<double> chunk_perplexity;  // running estimate after each chunk, as llama prints
};

// -log p(target) under the softmax of one row of logits, in double precision.
double token_nll(const float* logits, size_t vocab, int32_t target);

// `tokens` must start with BOS. Errors when n_ctx is below 2 or beyond the model's context,
// the stream is shorter than one chunk, or the pool cannot hold a chunk. `max_chunks` > 0
// scores only the first that many chunks (llama-perplexity's --chunks). `on_chunk(done, total)`
// is called after each chunk (progress).
Result<PerplexityResult> perplexity(Engine& engine, const std::vector<int32_t>& tokens,
                                    int32_t n_ctx, int32_t max_chunks = 0,
                                    const std::function<void(int32_t, int32_t)>& on_chunk = {});

}  // namespace kvscope
