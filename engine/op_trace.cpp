#include "engine/op_trace.h"

#include <array>

namespace kvscope {

std::string_view op_name(OpKind kind) {
    static constexpr std::array<std::string_view, kNumOpKinds> kNames = {
        "schedule",    "embed",    "attn_norm", "qkv",         "rope",   "kv_write",
        "attention",   "attn_out", "ffn_norm",  "ffn_gate_up", "swiglu", "ffn_down",
        "output_norm", "lm_head",  "sample",    "evict",
    };
    auto i = static_cast<size_t>(kind);
    return i < kNames.size() ? kNames[i] : "op";
}

KernelCost matmul_cost(int64_t n, int64_t rows, int64_t cols, int64_t weight_bytes) {
    KernelCost c;
    c.weight_bytes = weight_bytes;
    c.activation_bytes = n * (rows + cols) * static_cast<int64_t>(sizeof(float));
    c.flops = 2 * n * rows * cols;
    return c;
}

KernelCost elementwise_cost(int64_t in, int64_t out, int64_t flops_per_elem) {
    KernelCost c;
    c.activation_bytes = (in + out) * static_cast<int64_t>(sizeof(float));
    c.flops = out * flops_per_elem;
    return c;
}

}  // namespace kvscope
