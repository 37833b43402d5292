#include "engine/kv_eval.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <string>

#include "engine/kv_mixing.h"
#include "engine/perplexity.h"

namespace kvscope {

namespace {

// One sequence driven token by token through the engine, as the scheduler would, with the
// eviction policy applied after every forward pass.
class EvalSequence {
  public:
    EvalSequence(Engine& engine, const KvEvictor* evictor, int32_t prompt_len)
        : engine_(engine), evictor_(evictor), prompt_len_(prompt_len) {
        if (evictor_)
            lanes_ = *evictor_->new_lanes(engine.config().n_layers, engine.config().n_kv_heads,
                                          engine.blocks().block_size(), prompt_len);
    }
    ~EvalSequence() { engine_.blocks().free(table_); }

    // Feeds `tokens` at the next positions; `logits` gets the last one's.
    Status feed(const std::vector<int32_t>& tokens, std::vector<float>& logits) {
        const auto n = static_cast<int32_t>(tokens.size());
        int32_t slots = lanes_ ? lanes_->slots : computed_;
        if (Status s = engine_.blocks().grow(table_, slots + n); !s) return s;
        SequenceChunk chunk{&table_, computed_, n, true};
        if (lanes_) {
            lanes_->append(computed_, n);
            chunk.lanes = &*lanes_;
        }
        if (Status s = engine_.forward().run({tokens, {chunk}}, logits); !s) return s;
        computed_ += n;
        if (evictor_)
            evicted_ +=
                evictor_->after_step(*lanes_, table_, computed_, prompt_len_, -1, engine_.blocks(),
                                     engine_.kv_blocks(), engine_.reporter());
        peak_bytes_ = std::max(peak_bytes_, bytes_held());
        rope_position_max_ =
            std::max(rope_position_max_, engine_.forward().last_phase_times().rope_position_max);
        return {};
    }

    // What the cache holds for this sequence: whole blocks, or with lanes the blocks each lane
    // holds a token in (a cache allocating per lane would hold no more).
    int64_t bytes_held() const {
        // int4 and int2 keep a block's keys in f16 until the block fills: they count too.
        int64_t open = 0;
        for (BlockId b : table_.blocks)
            if (b >= 0) open += static_cast<int64_t>(engine_.kv().open_block_bytes(b));
        // Tokens in the low tier (mixed) and merged pairs hold less than their blocks' bytes.
        const int64_t saved = lanes_ ? lanes_bytes_saved(*lanes_, engine_.kv()) : 0;
        return open + blocks_bytes() - saved;
    }
    int64_t blocks_bytes() const {
        const auto per_block = static_cast<int64_t>(engine_.kv().bytes_per_block());
        if (lanes_) {
            const int64_t lanes = static_cast<int64_t>(lanes_->lanes.size());
            return lanes_->lane_blocks_held() * per_block / std::max<int64_t>(lanes, 1);
        }
        return per_block *
               static_cast<int64_t>(std::count_if(table_.blocks.begin(), table_.blocks.end(),
                                                  [](BlockId b) { return b >= 0; }));
    }
    int64_t peak_bytes() const { return peak_bytes_; }
    int64_t evicted() const { return evicted_; }
    int32_t rope_position_max() const { return rope_position_max_; }

  private:
    Engine& engine_;
    const KvEvictor* evictor_;
    int32_t prompt_len_;
    BlockTable table_;
    std::optional<SequenceLanes> lanes_;
    int32_t computed_ = 0;
    int64_t evicted_ = 0, peak_bytes_ = 0;
    int32_t rope_position_max_ = -1;
};

int32_t argmax(const std::vector<float>& logits) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

}  // namespace

int32_t eval_blocks_needed(const EvalSettings& s, int32_t block_size) {
    int32_t tokens = std::max(s.ctx, s.ctx / 2 + s.agree_tokens);
    return BlockManager::blocks_for(tokens, block_size);
}

int32_t stream_blocks_needed(int64_t text_tokens, int32_t block_size) {
    return BlockManager::blocks_for(static_cast<int32_t>(std::min<int64_t>(text_tokens, 1 << 30)),
                                    block_size);
}

Result<StreamResult> evaluate_stream(Engine& engine, const std::vector<int32_t>& tokens,
                                     const StreamSettings& s, const KvEvictor* evictor,
                                     const std::function<void(int64_t, int64_t)>& progress) {
    const ModelConfig& c = engine.config();
    const int32_t ctx = s.full_cache_ctx > 0 ? s.full_cache_ctx : c.context_length;
    if (ctx < 2 || ctx > c.context_length)
        return Error{"--ctx " + std::to_string(ctx) + " must be in 2.." +
                     std::to_string(c.context_length) +
                     " (the model's context): the full cache restarts there"};
    if (s.window_tokens < 1)
        return Error{"--window-tokens " + std::to_string(s.window_tokens) + " must be at least 1"};
    if (s.max_tokens < 0)
        return Error{"--max-tokens " + std::to_string(s.max_tokens) + " must be at least 1"};
    if (tokens.size() < 2)
        return Error{"the text has no tokens to score (it is empty once tokenized)"};
    // Token i of the text (BOS is 0) is the target of the prediction made after token i - 1.
    int64_t last = static_cast<int64_t>(tokens.size()) - 1;
    if (s.max_tokens > 0) last = std::min(last, s.max_tokens);
    const auto vocab = static_cast<size_t>(c.vocab_size);
    StreamResult out;
    double nll_all = 0, nll_window = 0;
    StreamWindow window;
    auto close_window = [&] {
        if (window.scored == 0) return;
        window.perplexity = std::exp(nll_window / static_cast<double>(window.scored));
        out.windows.push_back(window);
        window = {};
        nll_window = 0;
    };
    std::unique_ptr<EvalSequence> seq;
    std::vector<float> logits;
    for (int64_t i = 1; i <= last; ++i) {
        // The full cache restarts where its context is full; the policy's cache never does.
        const bool held = evictor && evictor->options().active();  // a policy holds a budget
        const bool restart = !seq || (!held && (i - 1) % ctx == 0);
        if (restart) {
            if (seq) {
                out.kv_bytes_peak = std::max(out.kv_bytes_peak, seq->peak_bytes());
                out.rope_position_max = std::max(out.rope_position_max, seq->rope_position_max());
            }
            seq.reset();  // gives its blocks back before the next takes them
            seq = std::make_unique<EvalSequence>(engine, evictor, 1);
        }
        // A restart's first token is BOS, as llama-perplexity's chunks begin; the token it
        // stands in for was the target of the previous chunk's last prediction, so every token
        // is scored once.
        const int32_t fed = restart ? c.bos_token : tokens[static_cast<size_t>(i - 1)];
        if (Status st = seq->feed({fed}, logits); !st) return st.error();
        const double nll = token_nll(logits.data(), vocab, tokens[static_cast<size_t>(i)]);
        nll_all += nll;
        nll_window += nll;
        ++out.scored_tokens;
        if (window.scored++ == 0) window.first = i;
        window.last = i;
        if (window.scored == s.window_tokens) {
            close_window();
            if (progress) progress(out.scored_tokens, last);
        }
    }
    close_window();
    out.kv_bytes_peak = std::max(out.kv_bytes_peak, seq->peak_bytes());
    out.rope_position_max = std::max(out.rope_position_max, seq->rope_position_max());
    out.tokens_evicted = seq->evicted();
    if (progress) progress(last, last);
    out.mean_nll = nll_all / static_cast<double>(out.scored_tokens);
    out.perplexity = std::exp(out.mean_nll);
    return out;
}

double agreement(const std::vector<int32_t>& a, const std::vector<int32_t>& b, int32_t n) {
    size_t same = 0;
    while (same < a.size() && same < b.size() && a[same] == b[same])
        ++same;
    return n > 0 ? static_cast<double>(same) / n : 0.0;
}

Result<EvalResult> evaluate(Engine& engine, const std::vector<int32_t>& tokens,
                            const EvalSettings& s, const KvEvictor* evictor,
                            const std::function<void(int32_t, int32_t)>& progress) {
    const ModelConfig& c = engine.config();
    if (s.ctx < 4 || s.ctx > c.context_length)
        return Error{"--ctx " + std::to_string(s.ctx) + " must be in 4.." +
                     std::to_string(c.context_length) + " (the model's context)"};
    if (s.agree_tokens < 1 || s.ctx / 2 + s.agree_tokens > c.context_length)
        return Error{"--agree-tokens " + std::to_string(s.agree_tokens) +
                     " must leave the prompt and its tokens within the model's context"};
    auto chunks = static_cast<int32_t>(tokens.size() / static_cast<size_t>(s.ctx));
    if (s.max_chunks > 0) chunks = std::min(chunks, s.max_chunks);
    if (chunks == 0)
        return Error{"the text has " + std::to_string(tokens.size()) +
                     " tokens, fewer than one chunk of " + std::to_string(s.ctx)};
    const int32_t half = s.ctx / 2;
    const auto vocab = static_cast<size_t>(c.vocab_size);
    EvalResult out;
    double nll = 0;
    std::vector<float> logits;
    for (int32_t k = 0; k < chunks; ++k) {
        std::vector<int32_t> chunk(tokens.begin() + static_cast<long>(k) * s.ctx,
                                   tokens.begin() + static_cast<long>(k + 1) * s.ctx);
        chunk[0] = c.bos_token;
        const std::vector<int32_t> prompt(chunk.begin(), chunk.begin() + half);
        {  // Scoring: the second half, teacher-forced, the policy holding the budget.
            EvalSequence seq(engine, evictor, half);
            if (Status st = seq.feed(prompt, logits); !st) return st.error();
            for (int32_t i = half; i < s.ctx; ++i) {
                nll += token_nll(logits.data(), vocab, chunk[static_cast<size_t>(i)]);
                ++out.scored_tokens;
                if (i + 1 == s.ctx) break;
                if (Status st = seq.feed({chunk[static_cast<size_t>(i)]}, logits); !st)
                    return st.error();
            }
            out.kv_bytes_peak = std::max(out.kv_bytes_peak, seq.peak_bytes());
            out.tokens_evicted += seq.evicted();
        }
        {  // Agreement: greedy tokens from the same prompt.
            EvalSequence seq(engine, evictor, half);
            if (Status st = seq.feed(prompt, logits); !st) return st.error();
            std::vector<int32_t> greedy;
            for (int32_t i = 0; i < s.agree_tokens; ++i) {
                greedy.push_back(argmax(logits));
                if (i + 1 == s.agree_tokens) break;
                if (Status st = seq.feed({greedy.back()}, logits); !st) return st.error();
            }
            out.greedy.push_back(std::move(greedy));
        }
        ++out.chunks;
        if (progress) progress(k + 1, chunks);
    }
    out.mean_nll = nll / static_cast<double>(out.scored_tokens);
    out.perplexity = std::exp(out.mean_nll);
    return out;
}

}  // namespace kvscope
