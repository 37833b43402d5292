#include "engine/generate.h"

#include <chrono>
#include <sstream>

#include "base/machine_memory.h"
#include "engine/scheduler.h"

namespace kvscope {

Result<GenerateStats> generate(Engine& engine, const GenerateRequest& request,
                               const std::function<void(int32_t)>& on_token) {
    const ModelConfig& c = engine.config();
    if (request.prompt.empty()) return Error{"the prompt has no tokens"};
    if (request.max_tokens < 0) return Error{"max tokens must not be negative"};
    const auto prompt_len = static_cast<int32_t>(request.prompt.size());
    if (prompt_len > c.context_length) {
        std::ostringstream msg;
        msg << "the prompt has " << prompt_len << " tokens but the model's context holds "
            << c.context_length;
        return Error{msg.str()};
    }
    for (int32_t t : request.prompt)
        if (t < 0 || t >= c.vocab_size) {
            std::ostringstream msg;
            msg << "token id " << t << " is outside the vocabulary (0.." << c.vocab_size - 1 << ")";
            return Error{msg.str()};
        }
    if (!request.kv_cache && request.evictor)
        return Error{"without a KV cache there are no tokens to evict"};
    int32_t need = BlockManager::blocks_for(
        std::min(prompt_len + std::max(request.max_tokens, 1), c.context_length),
        engine.options().block_size);
    if (need > engine.options().num_blocks) {
        std::ostringstream msg;
        msg << "the KV cache has " << engine.options().num_blocks
            << " blocks but this generation needs " << need;
        return Error{msg.str()};
    }
    // The pool is committed as it fills (kv_cache.h): what this generation fills must fit.
    if (!engine.options().backend)
        if (Status fits =
                check_fits_in_memory(static_cast<uint64_t>(need) * engine.kv().bytes_per_block(),
                                     "the K/V of " + std::to_string(prompt_len) + " + " +
                                         std::to_string(request.max_tokens) + " tokens",
                                     "fewer --max-tokens, or a smaller --kv-dtype");
            !fits)
            return fits.error();

    Request r;
    r.id = "generate";
    r.prompt = request.prompt;
    r.max_tokens = request.max_tokens;
    r.sampling = request.sampling;
    ServingOptions options;
    options.max_batch_tokens = std::max(prompt_len, 1);  // the prompt in one pass
    options.capture_attention = request.capture_attention;
    options.trace_ops = request.trace_ops;
    options.evictor = request.evictor;
    options.kv_cache = request.kv_cache;
    Scheduler scheduler(engine, options, {r});

    using clock = std::chrono::steady_clock;
    auto start = clock::now();
    clock::time_point first, last;
    GenerateStats stats;
    stats.prompt_tokens = prompt_len;
    scheduler.set_token_callback([&](const Sequence&, int32_t token) {
        last = clock::now();
        if (stats.generated_tokens++ == 0) first = last;
        on_token(token);
    });
    scheduler.run_to_completion();
    if (!scheduler.error().ok()) return scheduler.error().error();
    const Sequence& s = scheduler.sequences().front();
    stats.stopped_by_eos = s.finish == FinishReason::kEndToken;
    stats.tokens_evicted = scheduler.summary().tokens_evicted;
    if (stats.generated_tokens > 0) {
        stats.prefill_seconds = std::chrono::duration<double>(first - start).count();
        stats.decode_seconds = std::chrono::duration<double>(last - first).count();
    }
    return stats;
}

}  // namespace kvscope
