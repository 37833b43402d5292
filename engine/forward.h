#pragma once
// The engine's seam between scheduling and arithmetic: a backend runs a forward pass over a
// flattened batch (as in vLLM: the tokens of every scheduled sequence are concatenated, and only
// attention looks at which sequence a row belongs to, reading K/V through that sequence's block
// table) and owns the memory its KV cache lives in. The CPU backend (cpu_forward.h) is the
// reference; the CUDA backend (engine_cuda/) implements the same interface on a GPU. The
// scheduler, generate() and the evaluators see only this.

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "base/result.h"
#include "engine/block_manager.h"
#include "engine/kv_block_store.h"
#include "engine/kv_quant.h"
#include "engine/model_config.h"
#include "engine/model_weights.h"
#include "engine/op_trace.h"

namespace kvscope {

class ThreadPool;

// A run of consecutive tokens of one sequence: a whole prompt (prefill), a piece of it
// (chunked prefill) or one token (decode). The block table must already cover
// start_pos + num_tokens tokens.
struct SequenceLanes;

struct SequenceChunk {
    const BlockTable* table = nullptr;
    int32_t start_pos = 0;
    int32_t num_tokens = 0;
    bool want_logits = true;  // logits of the chunk's last token
    bool all_logits = false;  // logits of every token of the chunk, in order (scoring text)
    // Token eviction (kv_eviction.h): the sequence's lanes, whose `slots` is where this chunk's
    // tokens are stored (slot != position once tokens have been evicted); attention skips the
    // lanes' holes and gathers the statistics they ask for. Null: slot = position, as always.
    SequenceLanes* lanes = nullptr;
};

struct ForwardBatch {
    std::vector<int32_t> tokens;  // all chunks' tokens, in chunk order
    std::vector<SequenceChunk> chunks;
};

// A probability in [0, 1] as the u8 the session stores (255 = 1.0), rounded to nearest.
inline uint8_t quantize_probability(float p) {
    p = p < 0.0f ? 0.0f : p > 1.0f ? 1.0f : p;
    return static_cast<uint8_t>(p * 255.0f + 0.5f);
}

// Which attention probabilities to keep while computing: every (layer, query head) pair for
// which `wanted(layer, head)` holds. Rows are collected per forward pass in `rows`.
struct AttentionCapture {
    std::vector<uint8_t> wanted;  // [layer * n_heads + head] != 0
    struct Row {
        int32_t chunk, query_pos, layer, head;
        std::vector<uint8_t> probs;  // over key positions 0..query_pos, 255 = 1.0
    };
    std::vector<Row> rows;
    bool any() const {
        for (uint8_t w : wanted)
            if (w) return true;
        return false;
    }
};

// Where a forward pass spent its time, summed over layers (host clock): the attention block
// (norm, QKV, RoPE, cache write, attention, output projection) and the MLP block.
struct ForwardPhaseTimes {
    int64_t attention_ns = 0, mlp_ns = 0;
    // Key slots attention scored, summed over rows, KV heads and layers: the work that grows
    // with what the cache holds (under eviction, the budget), not with the time taken.
    int64_t attention_key_slots = 0;
    // The largest position RoPE rotated a query or key to: a row's position, or with cache
    // positions (kv_eviction.h) its place among the tokens its lane keeps. -1: no rows.
    int32_t rope_position_max = -1;
};

class Forward {
  public:
    virtual ~Forward() = default;
    // "cpu" or "cuda": what recordings store as the run's backend.
    virtual const char* backend_name() const = 0;
    // Writes the K/V of every token into the cache and returns the logits of each chunk
    // with want_logits (every token's with all_logits), in chunk order:
    // [num_logit_rows][vocab]. Fails, in words a user can act on, when the activations stop
    // being finite or the backend cannot do what the batch asks.
    [[nodiscard]] virtual Status run(const ForwardBatch& batch, std::vector<float>& logits) = 0;
    // Null (the default) captures nothing and costs nothing.
    virtual void set_capture(AttentionCapture* capture) = 0;
    // Null (the default) traces nothing; otherwise run() appends a span per op (op_trace.h).
    virtual void set_trace(OpTrace* trace) = 0;
    virtual const ForwardPhaseTimes& last_phase_times() const = 0;
    // Whether the backend may record repeated step shapes once and replay them (the CUDA
    // backend's graphs; on by default); the others ignore it. For comparing the two.
    virtual void set_step_graphs(bool /*on*/) {}
    // Steps run so far by replaying a recording (0 for backends without them).
    virtual int64_t replayed_steps() const { return 0; }
    // Where the KV cache's blocks are: what copy-on-write, swapping and compaction act on.
    virtual KvBlockStore& kv_blocks() = 0;
};

// What a backend other than the CPU one is built from (Engine::create fills it in).
struct ForwardSetup {
    const ModelConfig& config;
    const ModelWeights& weights;
    int32_t block_size = 16;
    int32_t num_blocks = 0;
    KvDtype kv_dtype = KvDtype::kF32;
    ThreadPool& pool;  // for work at load time (converting weights)
};
// Makes a backend; the error says why it cannot run here (no device, out of its memory, a
// setting it does not support).
using ForwardFactory = std::function<Result<std::unique_ptr<Forward>>(const ForwardSetup&)>;

}  // namespace kvscope
