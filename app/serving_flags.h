#pragma once
// The engine and scheduler flags shared by `run` and the GUI's live runs.

#include <CLI/CLI.hpp>
#include <cstdint>
#include <string>

#include "app/eviction_flags.h"
#include "engine/engine.h"
#include "engine/scheduler.h"

namespace kvscope::app {

struct ServingFlags {
    int32_t num_blocks = 256;
    int32_t block_size = 16;
    int32_t max_batch_tokens = 512;
    int32_t max_running = 256;
    std::string allocator = "paged";
    std::string prefix_cache = "on";
    std::string preempt = "recompute";
    int32_t swap_blocks = 0;
    int32_t threads = 0;
    MatmulMode matmul = MatmulMode::kExact;
    int32_t ctx_size = 0;  // context_size.h
    std::string capture_attention = "none";
    EvictionFlags eviction;

    EngineOptions engine_options() const;
    // Needs the model to resolve --capture-attention.
    Result<ServingOptions> serving_options(const ModelConfig& config) const;
    std::string to_json() const;  // recorded with sessions
};

void add_serving_flags(CLI::App& sub, ServingFlags& flags);

}  // namespace kvscope::app
