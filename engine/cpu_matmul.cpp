// The matmul's entry point: picks the build of its kernels (cpu_matmul_kernels.inc) that this
// CPU runs best, once. A build for this machine (-march=native) has one; a build for any
// x86-64 (KVSCOPE_PORTABLE, the .deb) has three (x86-64, AVX2 + FMA + F16C, AVX-512 with VNNI),
// compiled from the same source under target pragmas, and asks the CPU which it may use.
#include "engine/cpu_matmul.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "engine/cpu_ops.h"
#include "engine/q4_0_interleaved.h"
#include "engine/thread_pool.h"

// GCC 12 reports its own AVX-512 intrinsics (which start from a deliberately undefined register)
// as (maybe-)uninitialized wherever they are inlined.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

// Variants need GCC's target pragmas (clang's differ); the ISA macros the kernels test are set
// below for each inclusion, since in C++ the pragmas leave __AVX2__ and the like untouched.
#if defined(KVSCOPE_MATMUL_VARIANTS) && defined(__x86_64__) && defined(__GNUC__) && \
    !defined(__clang__)
#define KVSCOPE_HAS_VARIANTS 1
#endif

namespace kvscope {

const char* matmul_mode_name(MatmulMode mode) {
    return mode == MatmulMode::kFast ? "fast" : "exact";
}

std::optional<MatmulMode> parse_matmul_mode(const std::string& name) {
    if (name == "exact") return MatmulMode::kExact;
    if (name == "fast") return MatmulMode::kFast;
    return std::nullopt;
}

// The instruction sets the kernels may use, per inclusion: first as the command line says.
#if defined(__AVX2__)
#define KVSCOPE_AVX2 1
#endif
#if defined(__FMA__)
#define KVSCOPE_FMA 1
#endif
#if defined(__F16C__)
#define KVSCOPE_F16C 1
#endif
#if defined(__AVXVNNI__)
#define KVSCOPE_AVXVNNI 1
#endif
#if defined(__AVX512F__)
#define KVSCOPE_AVX512F 1
#endif
#if defined(__AVX512DQ__)
#define KVSCOPE_AVX512DQ 1
#endif
#if defined(__AVX512BW__)
#define KVSCOPE_AVX512BW 1
#endif
#if defined(__AVX512VL__)
#define KVSCOPE_AVX512VL 1
#endif
#if defined(__AVX512VNNI__)
#define KVSCOPE_AVX512VNNI 1
#endif
namespace kernels_as_built {
#include "engine/cpu_matmul_kernels.inc"
}  // namespace kernels_as_built
#undef KVSCOPE_AVX2
#undef KVSCOPE_FMA
#undef KVSCOPE_F16C
#undef KVSCOPE_AVXVNNI
#undef KVSCOPE_AVX512F
#undef KVSCOPE_AVX512DQ
#undef KVSCOPE_AVX512BW
#undef KVSCOPE_AVX512VL
#undef KVSCOPE_AVX512VNNI

#if defined(KVSCOPE_HAS_VARIANTS)
// Instruction sets only (no arch=): GCC inlines cpu_ops.h's helpers, compiled for the build's
// target, only into functions of the same arch.
#pragma GCC push_options
#pragma GCC target("sse3,ssse3,sse4.1,sse4.2,popcnt,avx,avx2,fma,f16c,bmi,bmi2,lzcnt,movbe")
#define KVSCOPE_AVX2 1
#define KVSCOPE_FMA 1
#define KVSCOPE_F16C 1
namespace kernels_avx2 {
#include "engine/cpu_matmul_kernels.inc"
}  // namespace kernels_avx2
#pragma GCC pop_options

#pragma GCC push_options
#pragma GCC target( \
    "sse3,ssse3,sse4.1,sse4.2,popcnt,avx,avx2,fma,f16c,bmi,bmi2,lzcnt,movbe,avx512f,avx512dq,avx512bw,avx512vl,avx512cd,avx512vnni")
#define KVSCOPE_AVX512F 1
#define KVSCOPE_AVX512DQ 1
#define KVSCOPE_AVX512BW 1
#define KVSCOPE_AVX512VL 1
#define KVSCOPE_AVX512VNNI 1
namespace kernels_avx512 {
#include "engine/cpu_matmul_kernels.inc"
}  // namespace kernels_avx512
#pragma GCC pop_options
#endif

namespace {

struct Kernels {
    const char* name;
    void (*multiply)(ThreadPool&, const float*, int, const Matrix&, float*, MatmulMode);
    bool fast_fuses;
};

Kernels choose_kernels() {
#if defined(KVSCOPE_HAS_VARIANTS)
    __builtin_cpu_init();
    // libgcc's answers include the operating system's support (XSAVE state) for these registers.
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                      __builtin_cpu_supports("f16c") && __builtin_cpu_supports("bmi2");
    if (avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512vnni"))
        return {"avx512-vnni", kernels_avx512::multiply, kernels_avx512::kFastFuses};
    if (avx2) return {"avx2", kernels_avx2::multiply, kernels_avx2::kFastFuses};
    return {"x86-64", kernels_as_built::multiply, kernels_as_built::kFastFuses};
#else
    return {"as built", kernels_as_built::multiply, kernels_as_built::kFastFuses};
#endif
}

const Kernels& kernels() {
    static const Kernels chosen = choose_kernels();
    return chosen;
}

}  // namespace

const char* matmul_kernels_name() {
    return kernels().name;
}

bool matmul_fast_fuses() {
    return kernels().fast_fuses;
}

void matmul(ThreadPool& pool, const float* x, int n_rows, const Matrix& w, float* out,
            MatmulMode mode) {
    kernels().multiply(pool, x, n_rows, w, out, mode);
}

}  // namespace kvscope
