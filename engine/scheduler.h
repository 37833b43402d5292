#pragma once
// The serving loop: continuous batching of many requests over one paged KV cache, as vLLM does
// it. Each step() schedules running sequences first (one decode token each, or the next chunk
// of their prefill), then resumes swapped ones, then admits waiting ones FCFS, all under a
// per-step token budget; runs one forward pass over the flattened batch; samples.
// When the pool runs out, the newest running sequence is preempted, by recompute (its blocks
// are freed and its tokens prefilled again later) or by swap (its blocks are copied to a host
// pool and back). Prefix caching shares full blocks across requests; parallel samples (n > 1)
// fork the prompt's blocks and copy on write. The contiguous allocator reserves
// prompt + max_tokens slots per sequence up front, first fit, as engines did before paging.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/kv_eviction.h"
#include "engine/op_trace.h"
#include "engine/request.h"
#include "probes/event.h"

namespace kvscope {

enum class Allocator { kPaged, kContiguous };

struct ServingOptions {
    int32_t max_batch_tokens = 512;
    int32_t max_running = 256;
    Allocator allocator = Allocator::kPaged;
    bool prefix_cache = true;
    PreemptMode preempt = PreemptMode::kRecompute;
    int32_t swap_blocks = 0;  // host pool for swapping, in blocks; 0 = as many as the device pool
    // Per (layer, query head): report attention rows of these as attention_row events.
    std::vector<uint8_t> capture_attention;
    // Token eviction (kv_eviction.h); null keeps every token. Sequences under a policy are
    // preempted by recompute only and take no part in prefix caching: an evicted token would
    // make a block's hash a lie.
    std::shared_ptr<const KvEvictor> evictor;
    // While a probe listens: a `kernel` event per op of each step (op_trace.h), with its time
    // and the bytes it moved. Off only to measure what the spans cost.
    bool trace_ops = true;
    // Off: nothing is kept between steps, as a naive implementation keeps nothing: every step
    // runs each running sequence's every token (prompt and generated) through the model again,
    // in blocks allocated for the step and freed when the next one starts. The lesson of a KV
    // cache, by its absence; one sequence at a time, no prefix cache, no chunking.
    bool kv_cache = true;
};

struct Sequence {
    int32_t index = 0;    // owner id in events
    int32_t request = 0;  // index into the request list
    int32_t sample = 0;   // 0 .. n-1
    std::string name;     // request id, with "#k" for sample k > 0
    SequenceState state = SequenceState::kWaiting;
    std::vector<int32_t> tokens;  // prompt, then generated tokens
    int32_t prompt_len = 0;
    int32_t max_tokens = 0;
    int32_t computed = 0;  // tokens whose K/V are in the cache
    BlockTable table;
    Sampler sampler{1, {}};
    std::vector<std::vector<uint8_t>> host_blocks;  // while swapped
    int32_t preemptions = 0;
    int64_t finished_step = -1;
    FinishReason finish = FinishReason::kLength;
    bool counted_prefix = false;         // first admission counted in the hit rate
    std::optional<SequenceLanes> lanes;  // under a token-eviction policy

    int32_t generated() const { return static_cast<int32_t>(tokens.size()) - prompt_len; }
    // Slots the table holds tokens in: the positions computed, unless eviction separated them.
    int32_t slots_used() const { return lanes ? lanes->slots : computed; }
};

struct StepMetrics {
    int32_t blocks_used = 0, blocks_free = 0, blocks_cached = 0;
    double internal_fragmentation = 0;  // reserved-but-unused slots / pool slots
    double external_fragmentation = 0;  // free slots outside the largest usable run / pool slots
    double fragmentation = 0;           // internal + external
    double utilization = 0;             // slots holding tokens / pool slots
    double prefix_hit_rate = 0;         // cumulative reused prompt tokens / prompt tokens
};

struct ServingSummary {
    int32_t requests = 0, rejected = 0;
    std::map<std::string, std::string> rejected_reasons;  // request id -> why
    int64_t tokens = 0;                                   // generated
    int64_t steps = 0;  // engine iterations run (idle gaps between arrivals are skipped)
    double seconds = 0;
    double tokens_per_second = 0;
    int32_t peak_blocks_used = 0;
    double mean_fragmentation = 0, peak_fragmentation = 0;
    double prefix_hit_rate = 0;
    int64_t prompt_tokens = 0, prefill_tokens_computed = 0;
    int32_t preemptions = 0, swaps_out = 0;
    int64_t cow_copies = 0;
    int64_t tokens_evicted = 0;  // token eviction: lane slots given up, over every layer and head
    int32_t max_running = 0;
    double schedule_seconds = 0, forward_seconds = 0;
    std::map<std::string, std::vector<int32_t>> outputs;
};

class Scheduler {
  public:
    // The engine must outlive the scheduler. Requests are served in the order given among
    // those that arrived at the same step.
    Scheduler(Engine& engine, const ServingOptions& options, std::vector<Request> requests);

    // Calls on_token(sequence, token) for each sampled token (tests, streaming output).
    void set_token_callback(std::function<void(const Sequence&, int32_t)> cb) {
        on_token_ = std::move(cb);
    }

    // Adds a request while serving; it arrives at the current step (live prompts).
    void add_request(Request r);

    bool done() const;
    // One engine iteration. Returns false when nothing was left to do, or when the probe
    // failed (a recording that can no longer be written: see stopped_by_probe()).
    bool step();
    bool stopped_by_probe() const { return stopped_by_probe_; }
    // Why the run stopped early (the forward pass failed: NaN weights), or ok.
    const Status& error() const { return error_; }
    ServingSummary run_to_completion();

    int64_t current_step() const { return step_; }
    // Requests that have not arrived yet, in arrival order (a live view shows the queue).
    std::vector<const Request*> not_arrived() const;
    const std::vector<Sequence>& sequences() const { return seqs_; }
    const StepMetrics& metrics() const { return metrics_; }
    ServingSummary summary() const;
    // Block pool invariants against every live table; empty when sound.
    std::string check_invariants() const;

  private:
    void admit_arrivals();
    bool schedule(ForwardBatch& batch, std::vector<int32_t>& chunk_seq);
    bool ensure_room(Sequence& s, int32_t new_tokens, bool& preempted_self);
    bool try_admit(Sequence& s, int32_t budget, int32_t& scheduled);
    bool try_swap_in(Sequence& s);
    void preempt(Sequence& s);
    void report_admit(const Sequence& s, int32_t cached_tokens);
    void report_swap(EventKind kind, const Sequence& s, int32_t blocks);
    void report_attention(const std::vector<int32_t>& chunk_seq);
    void fork_children(Sequence& parent, const float* logits);
    void append_token(Sequence& s, int32_t token);
    void finish(Sequence& s, FinishReason why);
    void compute_metrics();
    void emit_step_begin(const ForwardBatch& batch, int32_t prefill_tokens);
    int32_t reservation_tokens(const Sequence& s) const;
    void forget_cache(Sequence& s);

    Engine& engine_;
    ServingOptions options_;
    std::vector<Request> requests_;
    std::vector<Sequence> seqs_;
    std::vector<int32_t> running_;  // sequence indices, oldest admission first
    std::vector<int32_t> waiting_;  // FCFS; preempted sequences go to the front
    std::vector<int32_t> swapped_;
    std::map<int32_t, std::vector<int32_t>> children_;  // parent seq -> samples awaiting fork
    size_t next_arrival_ = 0;
    std::vector<size_t> arrival_order_;
    int64_t step_ = 0;
    int64_t steps_run_ = 0;
    bool stopped_by_probe_ = false;
    Status error_;
    int32_t host_blocks_used_ = 0;
    std::function<void(const Sequence&, int32_t)> on_token_;

    StepMetrics metrics_;
    ServingSummary totals_;
    double fragmentation_sum_ = 0;
    int64_t prefix_reused_ = 0, prefix_total_ = 0;
    std::vector<float> logits_;
    AttentionCapture capture_;
    OpTrace trace_;
    std::vector<Event> op_events_;  // reused: a step's spans as events
    void report_ops();
};

}  // namespace kvscope
