#include "engine/perplexity.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace kvscope {

double token_nll(const float* row, size_t vocab, int32_t target) {
    float mx = *std::max_element(row, row + vocab);
    double sum = 0;
    for (size_t v = 0; v < vocab; ++v)
        sum += std::exp(static_cast<double>(row[v] - mx));
    return std::log(sum) + mx - row[target];
}

Result<PerplexityResult> perplexity(Engine& engine, const std::vector<int32_t>& tokens,
                                    int32_t n_ctx, int32_t max_chunks,
                                    const std::function<void(int32_t, int32_t)>& on_chunk) {
    const ModelConfig& c = engine.config();
    if (n_ctx < 2 || n_ctx > c.context_length)
        return Error{"context " + std::to_string(n_ctx) + " must be in 2.." +
                     std::to_string(c.context_length) + " (the model's context)"};
    auto n_chunks = static_cast<int32_t>(tokens.size() / static_cast<size_t>(n_ctx));
    if (n_chunks == 0)
        return Error{"the text has " + std::to_string(tokens.size()) +
                     " tokens, fewer than one chunk of " + std::to_string(n_ctx)};
    if (max_chunks > 0) n_chunks = std::min(n_chunks, max_chunks);
    PerplexityResult out;
    double total = 0;
    std::vector<float> logits;
    const auto V = static_cast<size_t>(c.vocab_size);
    for (int32_t k = 0; k < n_chunks; ++k) {
        std::vector<int32_t> chunk(tokens.begin() + static_cast<long>(k) * n_ctx,
                                   tokens.begin() + static_cast<long>(k + 1) * n_ctx);
        chunk[0] = c.bos_token;
        BlockTable table;
        if (Status s = engine.blocks().grow(table, n_ctx); !s)
            return Error{"the KV cache cannot hold a chunk of " + std::to_string(n_ctx) +
                         " tokens: " + s.error().message};
        ForwardBatch batch{chunk, {SequenceChunk{&table, 0, n_ctx, false, true}}};
        Status ran = engine.forward().run(batch, logits);
        engine.blocks().free(table);
        if (!ran) return ran.error();
        for (int32_t i = n_ctx / 2; i < n_ctx - 1; ++i) {
            total += token_nll(&logits[static_cast<size_t>(i) * V], V,
                               chunk[static_cast<size_t>(i) + 1]);
            ++out.scored_tokens;
        }
        out.chunk_perplexity.push_back(std::exp(total / static_cast<double>(out.scored_tokens)));
        if (on_chunk) on_chunk(k + 1, n_chunks);
    }
    out.chunks = n_chunks;
    out.mean_nll = total / static_cast<double>(out.scored_tokens);
    out.perplexity = std::exp(out.mean_nll);
    return out;
}

}  // namespace kvscope
