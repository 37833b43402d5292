#pragma once
// Element types of the tensors the kernels read and write (the KV cache's in particular).
// Activations are f32 everywhere, as in the CPU backend; K/V are stored in one of these.

#include <cstddef>

namespace kvscope::kernels {

enum class DType : int {
    kF32,   // float
    kF16,   // IEEE half (__half), round to nearest even on store: engine/kv_quant.h's float_to_half
    kBF16,  // bfloat16 (__nv_bfloat16), round to nearest even on store
};

inline constexpr size_t dtype_bytes(DType t) {
    return t == DType::kF32 ? 4 : 2;
}
inline constexpr const char* dtype_name(DType t) {
    return t == DType::kF32 ? "f32" : t == DType::kF16 ? "f16" : "bf16";
}

}  // namespace kvscope::kernels
