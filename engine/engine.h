#pragma once
// The engine: a loaded model, its paged KV cache and a backend (forward.h: the CPU one unless
// EngineOptions::backend names another), behind one object. The Scheduler (scheduler.h) drives
// sequences through it; generate.h runs one prompt.

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "base/result.h"
#include "engine/block_manager.h"
#include "engine/cpu_forward.h"
#include "engine/forward.h"
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
    // One dtype per layer (--kv-dtype-layers, kv_dtypes_per_layer()), or empty: kv_dtype for
    // every layer. The CPU backend only.
    std::vector<KvDtype> kv_dtype_layers;
    // --kv-dtype mixed:HI/LO:P%: the low tier LO (kv_dtype is HI); the KvEvictor decides which
    // tokens go down (kv_eviction.h). The CPU backend only.
    std::optional<KvDtype> kv_low;
    MatmulMode matmul = MatmulMode::kExact;  // how projections multiply (cpu_matmul.h)
    // Null: the CPU backend (cpu_forward.h). Otherwise it makes the backend that runs the model
    // and holds the cache's blocks (the CUDA one: engine_cuda/cuda_forward.h).
    ForwardFactory backend;
};

class Engine {
  public:
    static Result<std::unique_ptr<Engine>> create(std::shared_ptr<const LoadedModel> model,
                                                  const EngineOptions& options);

    const LoadedModel& model() const { return *model_; }
    const ModelConfig& config() const { return model_->config; }
    const EngineOptions& options() const { return options_; }
    BlockManager& blocks() { return blocks_; }
    // The CPU backend's cache. With another backend it holds no blocks, only the sizes
    // (bytes_per_block()); kv_blocks() is where the blocks are either way.
    KvCacheStorage& kv() { return kv_; }
    KvBlockStore& kv_blocks() { return forward_->kv_blocks(); }
    Forward& forward() { return *forward_; }
    ThreadPool& threads() { return pool_; }
    // Where engine events go; probe is null (and reporting free) unless someone listens.
    Reporter& reporter() { return reporter_; }

  private:
    // `started` says whether the backend could be made (the CPU one always can).
    Engine(std::shared_ptr<const LoadedModel> model, const EngineOptions& options, Status& started);
    // Called while constructing, once the members a backend refers to exist.
    std::unique_ptr<Forward> make_backend(Status& started);

    std::shared_ptr<const LoadedModel> model_;
    EngineOptions options_;
    Reporter reporter_;
    ThreadPool pool_;
    KvCacheStorage kv_;
    std::unique_ptr<Forward> forward_;
    BlockManager blocks_;
};

// Validates user-facing engine options against a model; the message names the bad value.
Status validate_engine_options(const ModelConfig& config, const EngineOptions& options);

}  // namespace kvscope
