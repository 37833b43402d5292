#pragma once
// The engine: a loaded model, its paged KV cache and the CPU backend, behind one object.
// `generate` runs one sequence (prefill in one pass, then one token per step); the serving
// scheduler drives many sequences through the same pieces.

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/block_manager.h"
#include "engine/cpu_forward.h"
#include "engine/kv_cache.h"
#include "engine/model_loader.h"
#include "engine/result.h"
#include "engine/sampler.h"
#include "engine/thread_pool.h"

namespace kvscope {

struct EngineOptions {
    int32_t block_size = 16;
    int32_t num_blocks = 0;  // 0: enough for one sequence of the model's full context
    int32_t threads = 0;     // 0: one per hardware thread
};

struct GenerateRequest {
    std::vector<int32_t> prompt;  // must not be empty
    int32_t max_tokens = 256;
    SamplingParams sampling;
};

struct GenerateStats {
    int32_t prompt_tokens = 0;
    int32_t generated_tokens = 0;
    double prefill_seconds = 0;
    double decode_seconds = 0;  // for generated_tokens - 1 decode steps
    bool stopped_by_eos = false;
};

class Engine {
public:
    static Result<std::unique_ptr<Engine>> create(std::shared_ptr<const LoadedModel> model,
                                                  const EngineOptions& options);

    const LoadedModel& model() const { return *model_; }
    const ModelConfig& config() const { return model_->config; }
    const EngineOptions& options() const { return options_; }
    BlockManager& blocks() { return blocks_; }
    KvCacheStorage& kv() { return kv_; }
    CpuForward& forward() { return forward_; }
    ThreadPool& threads() { return pool_; }

    // Generates up to max_tokens tokens after the prompt; stops early at the model's end
    // token or at the end of its context. on_token is called as each token is sampled.
    Result<GenerateStats> generate(const GenerateRequest& request,
                                   const std::function<void(int32_t)>& on_token);

private:
    Engine(std::shared_ptr<const LoadedModel> model, const EngineOptions& options);

    std::shared_ptr<const LoadedModel> model_;
    EngineOptions options_;
    ThreadPool pool_;
    KvCacheStorage kv_;
    BlockManager blocks_;
    CpuForward forward_;
};

// Validates user-facing engine options against a model; the message names the bad value.
Status validate_engine_options(const ModelConfig& config, const EngineOptions& options);

}  // namespace kvscope
