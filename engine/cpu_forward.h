#pragma once
// The CPU backend's forward pass over a flattened batch, as in vLLM: the tokens of every
// scheduled sequence are concatenated into one [num_tokens][dim] activation, all projections
// run as one GEMM over it, and only attention looks at which sequence a row belongs to,
// reading K/V through that sequence's block table.

#include <cstdint>
#include <mutex>
#include <vector>

#include "base/result.h"
#include "engine/block_manager.h"
#include "engine/cpu_matmul.h"
#include "engine/forward.h"
#include "engine/kv_cache.h"
#include "engine/model_config.h"
#include "engine/model_weights.h"
#include "engine/op_trace.h"

namespace kvscope {

class ThreadPool;

class CpuForward : public Forward {
  public:
    CpuForward(const ModelConfig& config, const ModelWeights& weights, KvCacheStorage& kv,
               ThreadPool& pool);

    // Writes the K/V of every token into the cache and returns the logits of each chunk
    // with want_logits, in chunk order: [num_logit_chunks][vocab]. Fails when an activation
    // stops being finite, naming the first layer where it did (NaN or Inf weights would
    // otherwise give token 0 forever without a word).
    [[nodiscard]] Status run(const ForwardBatch& batch, std::vector<float>& logits) override;
    // Null (the default) captures nothing and costs nothing.
    void set_capture(AttentionCapture* capture) override { capture_ = capture; }
    // Where the last run() spent its time, summed over layers (host clock; a few reads per
    // layer, so always on): the attention block (norm, QKV, RoPE, cache write, attention,
    // output projection) and the MLP block.
    using PhaseTimes = ForwardPhaseTimes;
    const PhaseTimes& last_phase_times() const override { return times_; }
    // Null (the default) traces nothing; otherwise run() appends a span per op (op_trace.h).
    void set_trace(OpTrace* trace) override { trace_ = trace; }
    // How projections multiply (cpu_matmul.h); exact by default. Fast mode keeps an interleaved
    // copy of Q4_0 weights (q4_0_interleaved.h), made here and dropped when leaving it.
    void set_matmul_mode(MatmulMode mode);
    const char* backend_name() const override { return "cpu"; }
    KvBlockStore& kv_blocks() override { return kv_; }

  private:
    // run() without its check that the weights' file is still whole.
    Status run_pass(const ForwardBatch& batch, std::vector<float>& logits);
    void attention(const ForwardBatch& batch, int layer);

    const ModelConfig& config_;
    const ModelWeights& file_weights_;
    ModelWeights weights_;  // the views multiplied: file_weights_, or with interleaved copies
    KvCacheStorage& kv_;
    ThreadPool& pool_;
    AttentionCapture* capture_ = nullptr;
    OpTrace* trace_ = nullptr;
    MatmulMode matmul_mode_ = MatmulMode::kExact;
    // Runs `body` as one op; with a trace, times it (from the previous op's end: the forward
    // pass's ops run back to back) and records `cost()` (only then computed).
    template <class Body, class Cost>
    void op(OpKind kind, int layer, Body&& body, Cost&& cost) {
        if (!trace_) {
            body();
            return;
        }
        body();
        trace_->add_chained(kind, layer, cost());
    }
    // K/V bytes attention reads in `layer` for the batch: every slot a chunk's lanes still hold
    // in blocks not given back, once per chunk (its rows share them).
    int64_t attention_kv_read_bytes(const ForwardBatch& batch, int layer) const;
    PhaseTimes times_;
    std::mutex capture_mutex_;
    std::vector<float> inv_freq_;
    // Activations, resized per batch.
    std::vector<float> x_, xb_, q_, k_, v_, att_, hb_, hb2_;
    std::vector<int32_t> row_pos_, row_chunk_, row_slot_;
    std::vector<int> row_keys_;        // key slots the row's attention visits (for_each_key_span)
    std::vector<float> rope_cos_sin_;  // [row][head_dim]: rope_angles of the row's position
    // Rows of sequences with cache positions (SequenceLanes::cache_positions): their queries
    // and keys are rotated in attention, at places in the lane, with `place_cos_sin_`
    // ([place][head_dim], rope_angles of places 0 .. the most keys a row visits).
    std::vector<uint8_t> row_at_places_;
    std::vector<float> place_cos_sin_;
    // Per (row, KV head) of sequences with lanes: attention summed over the group's query
    // heads, by slot, reduced into the lanes in row order after each layer.
    std::vector<std::vector<float>> row_stats_;
    void gather_lane_stats(const ForwardBatch& batch, int layer);
};

}  // namespace kvscope
