#pragma once
// What storing less costs in quality: a text is cut into chunks of `ctx` tokens; the first half
// of each is prefilled as a prompt (after which the eviction policy compresses the cache to its
// budget, as SnapKV does), and the second half is scored token by token as decode while the
// policy keeps the cache within the budget. A second pass decodes greedily from each chunk's
// prompt, for the agreement of a setting's tokens with the full cache's. `kvscope eval` runs one
// of these per setting and puts them side by side.

#include <cstdint>
#include <functional>
#include <vector>

#include "base/result.h"
#include "engine/engine.h"
#include "engine/kv_eviction.h"

namespace kvscope {

struct EvalSettings {
    int32_t ctx = 512;          // tokens per chunk: half prompt, half scored
    int32_t agree_tokens = 64;  // greedy tokens decoded from each prompt
    int32_t max_chunks = 0;     // 0: every whole chunk of the text
};

struct EvalResult {
    int32_t chunks = 0;
    int64_t scored_tokens = 0;
    double mean_nll = 0, perplexity = 0;
    std::vector<std::vector<int32_t>> greedy;  // per chunk, the greedy tokens
    int64_t kv_bytes_peak = 0;                 // most K/V bytes one sequence held at once
    int64_t tokens_evicted = 0;                // in the scoring pass, over every layer and KV head
};

// Blocks the engine needs for one chunk's passes.
int32_t eval_blocks_needed(const EvalSettings& settings, int32_t block_size);

// `tokens` starts with BOS; each chunk's first token is replaced by BOS, as llama-perplexity
// does. `evictor` null keeps every token. `progress(done, total)` after each chunk.
Result<EvalResult> evaluate(Engine& engine, const std::vector<int32_t>& tokens,
                            const EvalSettings& settings, const KvEvictor* evictor,
                            const std::function<void(int32_t, int32_t)>& progress = {});

// Streaming evaluation (`kvscope eval --stream`): the text fed as decode, one token a step from
// BOS, with the policy holding the cache to its budget the whole way (StreamingLLM's
// evaluation), every next-token prediction scored, and the perplexity reported per window of
// the text so that a climb along it shows. The full cache (no evictor) cannot go past the
// model's context: it restarts every `full_cache_ctx` tokens, a chunk's first token replaced by
// BOS as llama-perplexity does (every token is still scored once). The text is all decode, so
// snapkv would compress after the first token and then keep everything (`eval` refuses it).
struct StreamSettings {
    int64_t max_tokens = 0;       // tokens of the text scored; 0: all of it
    int32_t window_tokens = 256;  // scored tokens per window
    int32_t full_cache_ctx = 0;   // the full cache's restarts; 0: the model's context
};

struct StreamWindow {
    int64_t first = 0, last = 0;  // the window's targets, as token indices of the text (BOS 0)
    int64_t scored = 0;
    double perplexity = 0;
};

struct StreamResult {
    int64_t scored_tokens = 0;
    double mean_nll = 0, perplexity = 0;
    std::vector<StreamWindow> windows;
    int32_t rope_position_max = -1;  // the largest position RoPE saw (ForwardPhaseTimes)
    int64_t kv_bytes_peak = 0, tokens_evicted = 0;
};

// Blocks the engine needs for a streaming evaluation of `text_tokens` tokens (every token's,
// at most: a policy with a percentage budget keeps a share of all of them).
int32_t stream_blocks_needed(int64_t text_tokens, int32_t block_size);

// `tokens` starts with BOS. Errors when there is no token after BOS, or a setting is out of
// range. `progress(done, total)` after each window, in scored tokens.
Result<StreamResult> evaluate_stream(Engine& engine, const std::vector<int32_t>& tokens,
                                     const StreamSettings& settings, const KvEvictor* evictor,
                                     const std::function<void(int64_t, int64_t)>& progress = {});

// Matching prefix of two token lists, as a fraction of `n`.
double agreement(const std::vector<int32_t>& a, const std::vector<int32_t>& b, int32_t n);

}  // namespace kvscope
