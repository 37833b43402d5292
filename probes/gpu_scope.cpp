#include "probes/gpu_scope.h"

#include "probes/event.h"

namespace kvscope {

uint64_t pack_gpu_scope(const GpuScopeKey& key) {
    const uint64_t step =
        key.step >= 0 && key.step <= kMaxGpuScopeStep ? static_cast<uint64_t>(key.step) + 1 : 0;
    const uint64_t op = key.op >= 0 && key.op < kMaxGpuOps ? static_cast<uint64_t>(key.op) + 1 : 0;
    const uint64_t layer =
        key.layer >= 0 && key.layer <= kMaxGpuScopeLayer ? static_cast<uint64_t>(key.layer) + 1 : 0;
    return step << 24 | op << 12 | layer;
}

GpuScopeKey unpack_gpu_scope(uint64_t id) {
    return {static_cast<int64_t>(id >> 24) - 1, static_cast<int32_t>((id >> 12) & 0xfff) - 1,
            static_cast<int32_t>(id & 0xfff) - 1};
}

int32_t GpuOpNames::id(std::string_view name) {
    if (!gpu_op_name_ok(name)) return -1;
    std::lock_guard lock(mutex_);
    for (size_t i = 0; i < names_.size(); ++i)
        if (names_[i] == name) return static_cast<int32_t>(i);
    if (names_.size() >= static_cast<size_t>(kMaxGpuOps)) return -1;
    names_.emplace_back(name);
    return static_cast<int32_t>(names_.size() - 1);
}

std::string GpuOpNames::name(int32_t id) const {
    std::lock_guard lock(mutex_);
    return id >= 0 && static_cast<size_t>(id) < names_.size() ? names_[static_cast<size_t>(id)]
                                                              : std::string();
}

size_t GpuOpNames::size() const {
    std::lock_guard lock(mutex_);
    return names_.size();
}

}  // namespace kvscope
