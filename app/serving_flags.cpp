#include "app/serving_flags.h"

#include <nlohmann/json.hpp>

#include "app/context_size.h"
#include "app/matmul_flag.h"
#include "engine/attention_spec.h"

namespace kvscope::app {

EngineOptions ServingFlags::engine_options() const {
    EngineOptions e;
    e.num_blocks = num_blocks;
    e.block_size = block_size;
    e.threads = threads;
    e.matmul = matmul;
    if (auto d = eviction.dtype(); d) e.kv_dtype = *d;  // checked with the other flags first
    e.kv_low = eviction.kv_low();
    return e;
}

Result<ServingOptions> ServingFlags::serving_options(const ModelConfig& config) const {
    ServingOptions s;
    auto capture = parse_attention_spec(capture_attention, config);
    if (!capture) return capture.error();
    s.capture_attention = capture.value();
    s.max_batch_tokens = max_batch_tokens;
    s.max_running = max_running;
    s.allocator = allocator == "contiguous" ? Allocator::kContiguous : Allocator::kPaged;
    s.prefix_cache = prefix_cache == "on";
    s.preempt = preempt == "swap" ? PreemptMode::kSwap : PreemptMode::kRecompute;
    s.swap_blocks = swap_blocks;
    auto evictor = eviction.evictor(config.n_layers);
    if (!evictor) return evictor.error();
    s.evictor = std::move(evictor).value();
    if (s.evictor && s.allocator == Allocator::kContiguous)
        return Error{eviction.needs_paged_allocator()};
    return s;
}

std::string ServingFlags::to_json() const {
    nlohmann::json j = {{"num_blocks", num_blocks},
                        {"block_size", block_size},
                        {"max_batch_tokens", max_batch_tokens},
                        {"max_running", max_running},
                        {"allocator", allocator},
                        {"prefix_cache", prefix_cache},
                        {"preempt", preempt},
                        {"swap_blocks", swap_blocks},
                        {"ctx_size", ctx_size},
                        {"matmul", matmul_mode_name(matmul)}};
    j.update(eviction.to_json());
    return j.dump();
}

void add_serving_flags(CLI::App& sub, ServingFlags& f) {
    sub.add_option("--num-blocks", f.num_blocks, "KV cache blocks in the pool")
        ->check(CLI::Range(1, 1 << 24))
        ->capture_default_str();
    sub.add_option("--block-size", f.block_size, "Tokens per block")
        ->check(CLI::Range(1, 4096))
        ->capture_default_str();
    sub.add_option("--max-batch-tokens", f.max_batch_tokens, "Token budget per step")
        ->check(CLI::Range(1, 1 << 20))
        ->capture_default_str();
    sub.add_option("--max-running", f.max_running, "Most sequences running at once")
        ->check(CLI::Range(1, 1 << 16))
        ->capture_default_str();
    sub.add_option("--allocator", f.allocator, "paged | contiguous")
        ->check(CLI::IsMember({"paged", "contiguous"}))
        ->capture_default_str();
    sub.add_option("--prefix-cache", f.prefix_cache, "on | off")
        ->check(CLI::IsMember({"on", "off"}))
        ->capture_default_str();
    sub.add_option("--preempt", f.preempt, "recompute | swap")
        ->check(CLI::IsMember({"recompute", "swap"}))
        ->capture_default_str();
    sub.add_option("--swap-blocks", f.swap_blocks,
                   "Host swap pool in blocks (0 = as many as the device pool)")
        ->check(CLI::Range(0, 1 << 24))
        ->capture_default_str();
    sub.add_option("--capture-attention", f.capture_attention,
                   "Record attention rows: all | none | LAYER:HEAD,... ('*' for any)")
        ->capture_default_str();
    add_ctx_size_flag(sub, f.ctx_size);
    sub.add_option("--threads", f.threads, "Worker threads (0 = all cores)")
        ->check(CLI::Range(0, 1024))
        ->capture_default_str();
    add_matmul_flag(sub, f.matmul);
    add_eviction_flags(sub, f.eviction);
}

}  // namespace kvscope::app
