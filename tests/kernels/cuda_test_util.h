#pragma once
// What the kernel tests share: skipping without a device, device buffers, random inputs, and
// comparing within a tolerance.

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/dtype.h"

namespace kvscope::test {

// Whether a CUDA device can be used; otherwise `why` says what cudaGetDeviceCount said.
inline bool cuda_device_available(std::string* why) {
    static const std::string reason = [] {
        int count = 0;
        cudaError_t e = cudaGetDeviceCount(&count);
        if (e != cudaSuccess) {
            std::string r = std::string(cudaGetErrorString(e)) + " (" + cudaGetErrorName(e) +
                            " from cudaGetDeviceCount)";
            cudaGetLastError();
            return r;
        }
        return count > 0 ? std::string() : std::string("cudaGetDeviceCount found 0 devices");
    }();
    if (why) *why = reason;
    return reason.empty();
}

// First line of every kernel test: skips it, saying why, on a machine without a usable GPU.
#define KVSCOPE_REQUIRE_CUDA_DEVICE()                                \
    do {                                                             \
        std::string why_no_device;                                   \
        if (!::kvscope::test::cuda_device_available(&why_no_device)) \
            GTEST_SKIP() << "no CUDA device: " << why_no_device;     \
    } while (0)

#define KVSCOPE_CUDA_OK(expr)                                                                    \
    do {                                                                                         \
        cudaError_t cuda_status = (expr);                                                        \
        ASSERT_EQ(cuda_status, cudaSuccess) << #expr << ": " << cudaGetErrorString(cuda_status); \
    } while (0)

// Device memory for n elements of T, freed with the object.
template <class T>
class DeviceBuffer {
  public:
    DeviceBuffer() = default;
    explicit DeviceBuffer(size_t n) { resize(n); }
    explicit DeviceBuffer(const std::vector<T>& host) { upload(host); }
    ~DeviceBuffer() { reset(); }
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;

    void resize(size_t n) {
        reset();
        n_ = n;
        void* p = nullptr;
        if (n > 0 && cudaMalloc(&p, n * sizeof(T)) != cudaSuccess) {
            p = nullptr;
            ADD_FAILURE() << "cudaMalloc of " << n * sizeof(T) << " bytes failed";
        }
        p_ = static_cast<T*>(p);
    }
    void upload(const std::vector<T>& host) {
        if (host.size() != n_) resize(host.size());
        if (p_ && !host.empty()) {
            EXPECT_EQ(cudaMemcpy(p_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
                      cudaSuccess);
        }
    }
    std::vector<T> download() const {
        std::vector<T> host(n_);
        if (p_ && n_ > 0) {
            EXPECT_EQ(cudaMemcpy(host.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost),
                      cudaSuccess);
        }
        return host;
    }
    T* get() const { return p_; }
    size_t size() const { return n_; }

  private:
    void reset() {
        if (p_) cudaFree(p_);
        p_ = nullptr;
        n_ = 0;
    }
    T* p_ = nullptr;
    size_t n_ = 0;
};

inline std::vector<float> random_floats(std::mt19937& rng, size_t n, float lo = -1.0f,
                                        float hi = 1.0f) {
    std::uniform_real_distribution<float> dist(lo, hi);
    std::vector<float> v(n);
    for (float& x : v)
        x = dist(rng);
    return v;
}

// bfloat16 bits of x, round to nearest even (as __float2bfloat16_rn; inputs here are finite).
inline uint16_t float_to_bf16(float x) {
    uint32_t f;
    std::memcpy(&f, &x, 4);
    f += 0x7fffu + ((f >> 16) & 1u);
    return static_cast<uint16_t>(f >> 16);
}
inline float bf16_to_float(uint16_t b) {
    uint32_t f = static_cast<uint32_t>(b) << 16;
    float x;
    std::memcpy(&x, &f, 4);
    return x;
}

// |got - want| <= atol + rtol * |want| everywhere; reports the first few that are not.
inline ::testing::AssertionResult all_close(const std::vector<float>& got,
                                            const std::vector<double>& want, double atol,
                                            double rtol) {
    if (got.size() != want.size())
        return ::testing::AssertionFailure()
               << "sizes differ: " << got.size() << " vs " << want.size();
    int bad = 0;
    std::string detail;
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        const double err = std::fabs(static_cast<double>(got[i]) - want[i]);
        const double allowed = atol + rtol * std::fabs(want[i]);
        worst = std::max(worst, err);
        if (!(err <= allowed)) {  // NaN fails too
            if (++bad <= 5)
                detail += "\n  [" + std::to_string(i) + "] got " + std::to_string(got[i]) +
                          ", want " + std::to_string(want[i]);
        }
    }
    if (bad == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure()
           << bad << " of " << got.size() << " values off (worst error " << worst << ")" << detail;
}

}  // namespace kvscope::test
