#pragma once
// What the CUDA engine backend calls around each op it launches, so that every kernel, memcpy and
// memset the GPU runs can be traced back to the engine step, op and layer that launched it.
// CUPTI-free: the backend includes this without CUPTI's headers, and with the probes off a scope
// costs one branch.
//
// The step, op and layer travel packed into CUPTI's 64-bit external correlation id. CUPTI pairs
// the id open at each launch (a CUDA graph's launch included) with that launch's correlation id,
// and the GPU's records carry the latter; nothing is looked up or stored per launch on the engine
// thread.
//
//   GpuOpScope scope(probes->correlation(), step, op_qkv, layer);  // push
//   launch...                                                       // pop at the end of scope

#include <cstdint>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope {

// What a launch was correlated to. -1 in a field: not known (no scope was open, or the scope did
// not say).
struct GpuScopeKey {
    int64_t step = -1;
    int32_t op = -1;  // a GpuOpNames id
    int32_t layer = -1;
    // Spelled out: nvcc compiles probes/gpu_clock.cu, which sees this header, as C++17.
    bool operator==(const GpuScopeKey& o) const {
        return step == o.step && op == o.op && layer == o.layer;
    }
};

// External id layout, high to low: step + 1 (40 bits), op + 1 (12 bits), layer + 1 (12 bits);
// a part out of range packs as 0, "not known", so an id never says something false.
constexpr int64_t kMaxGpuScopeStep = (int64_t{1} << 40) - 2;
constexpr int32_t kMaxGpuOps = (1 << 12) - 1;
constexpr int32_t kMaxGpuScopeLayer = (1 << 12) - 2;
uint64_t pack_gpu_scope(const GpuScopeKey& key);
GpuScopeKey unpack_gpu_scope(uint64_t external_id);

// The names of the ops a backend launches, each numbered once (at start-up, say) so that a scope
// carries a small number rather than a string. Thread-safe: names are looked up on the thread
// that converts CUPTI's records while the engine may still be adding some.
class GpuOpNames {
  public:
    // The op's id, the same for the same name; -1 when the name is not a valid op name
    // (gpu_op_name_ok: letters, digits, '_', '.', '-') or kMaxGpuOps names are taken.
    int32_t id(std::string_view name);
    // "" for an id that names nothing.
    std::string name(int32_t id) const;
    size_t size() const;

  private:
    mutable std::mutex mutex_;
    std::vector<std::string> names_;
};

// Where scopes go: the CUPTI activity tracer (probes/cupti_activity.h), or a test's recorder.
class GpuCorrelation {
  public:
    virtual ~GpuCorrelation() = default;
    // On the launching thread: the id stays open for that thread's launches until pop().
    virtual void push(uint64_t external_id) = 0;
    virtual void pop() = 0;
};

// Opens a scope for one op's launches and closes it when it goes out of scope. `correlation` null
// (probes off, or tracing unavailable): does nothing.
class GpuOpScope {
  public:
    GpuOpScope(GpuCorrelation* correlation, int64_t step, int32_t op, int32_t layer = -1)
        : correlation_(correlation) {
        if (correlation_) correlation_->push(pack_gpu_scope({step, op, layer}));
    }
    ~GpuOpScope() {
        if (correlation_) correlation_->pop();
    }
    GpuOpScope(const GpuOpScope&) = delete;
    GpuOpScope& operator=(const GpuOpScope&) = delete;

  private:
    GpuCorrelation* correlation_;
};

// A forward pass's ops one after another on one thread: enter() closes the op open (if any) and
// opens the next, so each launch is attributed to the op entered last; the last closes with the
// object. `correlation` null: does nothing.
class GpuOpSequence {
  public:
    GpuOpSequence(GpuCorrelation* correlation, int64_t step)
        : correlation_(correlation), step_(step) {}
    ~GpuOpSequence() {
        if (open_) correlation_->pop();
    }
    GpuOpSequence(const GpuOpSequence&) = delete;
    GpuOpSequence& operator=(const GpuOpSequence&) = delete;

    void enter(int32_t op, int32_t layer = -1) {
        if (!correlation_) return;
        if (open_) correlation_->pop();
        correlation_->push(pack_gpu_scope({step_, op, layer}));
        open_ = true;
    }

  private:
    GpuCorrelation* correlation_;
    int64_t step_;
    bool open_ = false;
};

}  // namespace kvscope
