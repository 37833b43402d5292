#pragma once
// The engine: a loaded model, its paged KV cache and the CPU backend, behind one object. The
// Scheduler (scheduler.h) drives sequences through it; generate.h runs one prompt.

#include <cstdint>
#include <memory>
#include <vector>

#include "base/result.h"
#include "engine/block_manager.h"
#include "engine/cpu_forward.h"
#include "engine/kv_cache.h"
#include "engine/kv_quant.h"
#include "engine/model_loader.h"
#include "engine/reporter.h"
#include "engine/thread_pool.h"

namespace kvscope {

struct EngineOptions {
    int32_t block_size = 16;
    int32_t num_blocks = 0;            // 0: enough for one sequence of the model's full context
    int32_t threads = 0;               // 0: one per hardware thread
    KvDtype kv_dtype = KvDtype::kF32;  // how K and V are stored (kv_cache.h)
    MatmulMode matmul = MatmulMode::kExact;  // how projections multiply (cpu_matmul.h)
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
    // Where engine events go; probe is null (and reporting free) unless someone listens.
    Reporter& reporter() { return reporter_; }

  private:
    Engine(std::shared_ptr<const LoadedModel> model, const EngineOptions& options);

    std::shared_ptr<const LoadedModel> model_;
    EngineOptions options_;
    Reporter reporter_;
    ThreadPool pool_;
    KvCacheStorage kv_;
    BlockManager blocks_;
    CpuForward forward_;
};

// Validates user-facing engine options against a model; the message names the bad value.
Status validate_engine_options(const ModelConfig& config, const EngineOptions& options);

}  // namespace kvscope
