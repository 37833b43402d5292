#pragma once
// Where a step's time and bytes go: one span per op of the forward pass (per layer: norms, the
// QKV projection, RoPE, the KV write, attention, the output projection, the MLP; then the final
// norm and the LM head) and of the host work around it (scheduling, sampling, eviction), each
// with its start and end on the host clock and what it had to move (KernelCost, computed from
// shapes and dtypes). The scheduler turns them into `kernel` events after the step, so a GPU
// backend's CUPTI kernels arrive the same way.
//
// Off by default: the forward pass holds a null OpTrace* and each op costs one branch.

#include <cstdint>
#include <string_view>
#include <vector>

#include "probes/event.h"

namespace kvscope {

enum class OpKind : uint8_t {
    kSchedule,
    kEmbed,
    kAttnNorm,
    kQkv,
    kRope,
    kKvWrite,
    kAttention,
    kAttnOutput,  // output projection and the residual add
    kFfnNorm,
    kFfnGateUp,
    kSwiglu,
    kFfnDown,  // down projection and the residual add
    kOutputNorm,
    kLmHead,
    kSample,
    kEvict,
};
constexpr int kNumOpKinds = static_cast<int>(OpKind::kEvict) + 1;
std::string_view op_name(OpKind kind);

struct OpSpan {
    OpKind kind;
    int32_t layer;  // -1: not one layer's
    int64_t start_ns, end_ns;
    KernelCost cost;
};

struct OpTrace {
    int32_t threads = 1;
    std::vector<OpSpan> spans;
    // A GPU backend's own record of the step: its kernels, copies and DRAM samples as `kernel`
    // and `hbm_sample` events (probes/gpu_probes.h), already attributed to their ops.
    std::vector<Event> device_events;
    void add(OpKind kind, int32_t layer, int64_t start_ns, const KernelCost& cost) {
        spans.push_back({kind, layer, start_ns, host_now_ns(), cost});
    }
    // Ops that run back to back share a clock read: each starts where the previous ended.
    // start_chain() opens the run; add_chained() closes an op there and moves on.
    int64_t chain_ns = 0;
    void start_chain() { chain_ns = host_now_ns(); }
    void add_chained(OpKind kind, int32_t layer, const KernelCost& cost) {
        const int64_t end = host_now_ns();
        spans.push_back({kind, layer, chain_ns, end, cost});
        chain_ns = end;
    }
};

// Costs of the ops, from their shapes (all counts in elements, sizes in bytes).
// A matmul of n rows through a [rows][cols] matrix of `weight_bytes`: the weights once, the
// input and output activations, 2 * n * rows * cols flops.
KernelCost matmul_cost(int64_t n, int64_t rows, int64_t cols, int64_t weight_bytes);
// An elementwise op reading `in` floats and writing `out` floats, `flops_per_elem` per output.
KernelCost elementwise_cost(int64_t in, int64_t out, int64_t flops_per_elem);

}  // namespace kvscope
