#pragma once
// How many bytes a model's KV cache takes: per token, per sequence of `ctx` tokens and for a
// batch of them, per kind of layer where layers differ (global / sliding window, MLA latent),
// counted as kvscope's paged cache stores it (whole blocks, the dtype's scales and minima from
// kv_quant.h), and the same shape with every query head its own KV head (MHA), the model's own
// grouping, and one KV head (MQA).

#include <cstdint>
#include <string>
#include <vector>

#include "base/result.h"
#include "engine/kv_quant.h"
#include "engine/kv_shapes.h"

namespace kvscope {

// A dtype to count in: the cache's own, or bf16, which kvscope does not store but which takes
// f16's bytes (two per element, no scales).
struct KvSizeDtype {
    std::string name;
    KvDtype stored = KvDtype::kF16;  // whose bytes it takes
};
// "f32", "f16", "bf16", "int8", "int4", "int2"; the message lists them.
Result<KvSizeDtype> parse_kv_size_dtype(const std::string& name);

// Layers that cache alike.
struct KvLayerGroup {
    std::string what;  // "all layers", "global", "local (window 1024)", "MLA latent"
    int32_t layers = 0;
    int32_t kv_heads = 0, key_dim = 0, value_dim = 0;  // per head; value_dim 0: no V (MLA)
    int64_t tokens = 0;                                // held per sequence
    int64_t bytes_per_token = 0;                       // over its layers, one full block's share
    int64_t bytes_per_sequence = 0;                    // over its layers, whole blocks
};

struct KvSizeVariant {
    std::string what;  // "MHA (32 KV heads)", ...
    int64_t bytes_per_token = 0, bytes_per_sequence = 0;
};

struct KvSize {
    std::string shape;
    KvSizeDtype dtype;
    int64_t ctx = 0, batch = 0;
    int32_t block_size = 16;
    std::vector<KvLayerGroup> groups;
    int64_t bytes_per_token = 0;  // all layers, while every layer still holds every token
    int64_t bytes_per_sequence = 0, bytes_per_batch = 0;
    std::string formula;  // the per-token count written out
    std::vector<KvSizeVariant> variants;
    std::string note;
};

// Limits that keep every product within int64 and a value a person means.
constexpr int64_t kMaxKvSizeCtx = int64_t{1} << 24;  // 16 M tokens
constexpr int64_t kMaxKvSizeBatch = 1 << 20;

// Refuses (one line) a ctx or batch outside 1..max, and int4 / int2 for MLA (its latent has no
// layout of those in kvscope).
Result<KvSize> kv_size(const KvShape& shape, int64_t ctx, int64_t batch, const KvSizeDtype& dtype,
                       int32_t block_size = 16);

}  // namespace kvscope
