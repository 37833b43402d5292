#include "engine/engine.h"

#include <sstream>
#include <thread>

#include "base/machine_memory.h"

namespace kvscope {

namespace {
constexpr int32_t kMaxBlockSize = 4096;
constexpr int32_t kMaxThreads = 1024;

int32_t resolve_threads(int32_t requested) {
    if (requested > 0) return requested;
    unsigned hw = std::thread::hardware_concurrency();
    return hw == 0 ? 1 : static_cast<int32_t>(hw);
}

EngineOptions resolve(const ModelConfig& config, EngineOptions o) {
    o.threads = resolve_threads(o.threads);
    if (o.num_blocks == 0)
        o.num_blocks = BlockManager::blocks_for(config.context_length, o.block_size);
    return o;
}
}  // namespace

Status validate_engine_options(const ModelConfig& config, const EngineOptions& o) {
    std::ostringstream msg;
    if (o.block_size <= 0 || o.block_size > kMaxBlockSize)
        msg << "block size must be between 1 and " << kMaxBlockSize << ", got " << o.block_size;
    else if (o.num_blocks < 0)
        msg << "number of blocks must be positive, got " << o.num_blocks;
    else if (o.threads < 0 || o.threads > kMaxThreads)
        msg << "threads must be between 1 and " << kMaxThreads << " (0 = all cores), got "
            << o.threads;
    else if (!o.kv_dtype_layers.empty() &&
             o.kv_dtype_layers.size() != static_cast<size_t>(config.n_layers))
        msg << "a KV dtype per layer needs " << config.n_layers << " dtypes, got "
            << o.kv_dtype_layers.size();
    else if (!o.kv_dtype_layers.empty() && o.backend)
        msg << "--kv-dtype-layers: this backend stores every layer in one dtype; give "
               "--kv-dtype alone, or --backend cpu";
    else if (o.kv_low && o.backend)
        msg << "--kv-dtype mixed: this backend stores every token in one dtype; give one dtype, "
               "or --backend cpu";
    std::string s = msg.str();
    if (!s.empty()) return Error{s};
    // A pool asked for by size must fit the machine: it may all be filled. The default one, the
    // model's whole context, is committed only as tokens arrive (kv_cache.h), and generate()
    // checks what one generation needs.
    if (o.num_blocks > 0) {
        const uint64_t bytes =
            KvCacheStorage(config, o.block_size, 0, o.kv_dtype, o.kv_dtype_layers, o.kv_low)
                .bytes_per_block() *
            static_cast<uint64_t>(o.num_blocks);
        return check_fits_in_memory(bytes,
                                    "a KV cache of " + std::to_string(o.num_blocks) +
                                        " blocks of " + std::to_string(o.block_size) + " tokens",
                                    "fewer --num-blocks, or a smaller --kv-dtype");
    }
    return {};
}

Result<std::unique_ptr<Engine>> Engine::create(std::shared_ptr<const LoadedModel> model,
                                               const EngineOptions& options) {
    if (Status s = validate_engine_options(model->config, options); !s) return s.error();
    try {
        Status started;
        std::unique_ptr<Engine> engine(new Engine(std::move(model), options, started));
        if (!started) return started.error();
        return engine;
    } catch (const std::bad_alloc&) {
        return Error{"out of memory while allocating the KV cache; try fewer blocks"};
    }
}

Engine::Engine(std::shared_ptr<const LoadedModel> model, const EngineOptions& options,
               Status& started)
    : model_(std::move(model)),
      options_(resolve(model_->config, options)),
      pool_(options_.threads),
      // Another backend keeps the blocks in its own memory: this one only knows their sizes.
      kv_(model_->config, options_.block_size, options_.backend ? 0 : options_.num_blocks,
          options_.kv_dtype, options_.kv_dtype_layers, options_.kv_low),
      forward_(make_backend(started)),
      blocks_(options_.num_blocks, options_.block_size, forward_ ? &forward_->kv_blocks() : nullptr,
              &reporter_) {}

std::unique_ptr<Forward> Engine::make_backend(Status& started) {
    if (!options_.backend) {
        auto cpu = std::make_unique<CpuForward>(model_->config, model_->weights, kv_, pool_);
        cpu->set_matmul_mode(options_.matmul);
        return cpu;
    }
    auto made = options_.backend(ForwardSetup{model_->config, model_->weights, options_.block_size,
                                              options_.num_blocks, options_.kv_dtype, pool_});
    if (!made) {
        started = made.error();
        return nullptr;
    }
    return std::move(made).value();
}

}  // namespace kvscope
