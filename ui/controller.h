#pragma once
// What the front end may ask of a live run. `app` implements it with the engine, and with an
// attached deployment (whose session's run info names its publishers: it moves on wall time,
// so the window takes it in every frame and offers no play, step, restart or prompt); the UI
// only sees this interface and the session being recorded, never engine or attach headers.

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.h"

namespace kvscope {

class SessionReader;

struct LiveSettings {
    int block_size = 16;
    int num_blocks = 256;
    int max_batch_tokens = 512;
    std::string allocator = "paged";  // paged | contiguous
    bool prefix_cache = true;
    std::string preempt = "recompute";  // recompute | swap
    std::string capture_attention = "all";
    // Storing less: token eviction and the KV dtype (as the run command's flags take them).
    std::string policy = "none";
    std::string kv_budget;  // "N" tokens or "P%"
    int sinks = 4;
    int window = -1;                       // h2o / snapkv / morphkv; -1: the policy's default
    std::string window_aggregate = "max";  // morphkv: max | sum
    std::string layer_budget = "uniform";
    bool compact =
        true;  // close the policy's holes after each step (int4 and int2 cannot: they keep them)
    std::string positions;  // cache | absolute; empty: the policy's default
    std::string kv_dtype = "f32";
    std::string
        kv_dtype_layers;    // --kv-dtype-layers: not in the Controls panel, kept across restarts
    int merge_layers = -1;  // --merge-layers: not in the Controls panel, kept across restarts
    double merge_distance = 0.25;  // --merge-distance (kv_mixing.h's kMergeMaxDistance)
    bool kv_cache = true;          // --kv-cache off: one sequence, recomputed whole at every step
    bool record = false;           // keep the session file after the run
    std::string record_path = "kvscope-live.kvs";
    // Replace a file at record_path (--force). Without it, and for every run after a restart,
    // the recording goes to the first free name beside it (name-2.kvs, ...): never over a file.
    bool record_force = false;
};

// A request of the workload that has not arrived yet (plain data for the Requests panel).
struct PendingRequest {
    std::string id;
    int64_t arrival_step = 0;
    int prompt_tokens = 0, max_tokens = 0;
    std::string prompt_text;  // empty when the model has no tokenizer
};

class Controller {
  public:
    virtual ~Controller() = default;
    // Runs up to n engine iterations; returns how many ran (0 when the workload is done). An
    // attached deployment takes in what arrived instead and returns the steps that ended.
    virtual int step(int n) = 0;
    virtual bool finished() const = 0;
    // Starts over with new settings (same model and workload).
    virtual Status restart(const LiveSettings& settings) = 0;
    // Adds a request now; it arrives at the current step.
    virtual Status add_prompt(const std::string& text, int max_tokens) = 0;
    virtual const LiveSettings& settings() const = 0;
    // The session the run is being recorded to; refreshed after every step.
    virtual SessionReader& session() = 0;
    virtual std::string describe() const = 0;  // model, backend, workload in one line
    // Where the run is being recorded ("" when it is not kept).
    virtual std::string recording_path() const = 0;
    // Why the run stopped early ("" when it did not): a recording that could not be written.
    virtual std::string problem() const = 0;
    // The workload's requests that have not arrived yet, in arrival order.
    virtual std::vector<PendingRequest> pending() const = 0;
    // One line on how a source that runs on its own is doing ("" when there is nothing to
    // add): an attached deployment's events, gaps and losses so far.
    virtual std::string progress() const { return {}; }
    // Lines on what the source sent that could not be taken in as sent, one per kind (an
    // attached publisher's malformed events, unknown fields, restarts...), with counts.
    virtual std::vector<std::string> notes() const { return {}; }
};

}  // namespace kvscope
