#pragma once
// What the machine's GPUs are, for `--backend cuda` and `kvscope bench gpu`. Plain C++ (no CUDA
// header), so the command line can use it without compiling against CUDA; defined only in builds
// with CUDA (KVSCOPE_HAVE_CUDA).

#include <cstdint>
#include <string>
#include <vector>

namespace kvscope::kernels {

struct DeviceInfo {
    int index = 0;
    std::string name;                // "NVIDIA H100 80GB HBM3"
    int cc_major = 0, cc_minor = 0;  // compute capability
    int sm_count = 0;
    int64_t total_bytes = 0, free_bytes = 0;  // device memory
    int memory_clock_khz = 0, bus_width_bits = 0;
    // DRAM bandwidth the clock and bus allow (two transfers per clock), GB/s; 0 if unknown.
    double peak_gbps() const { return 2.0 * memory_clock_khz * 1e3 * (bus_width_bits / 8.0) / 1e9; }
};

struct DeviceQuery {
    std::vector<DeviceInfo> devices;  // empty when none can be used
    // Why there are none: cudaGetDeviceCount's error string ("no CUDA-capable device is
    // detected", "CUDA driver version is insufficient for CUDA runtime version", ...), or empty.
    std::string error;
};

// Lists the devices without creating a context on them beyond what cudaMemGetInfo needs.
DeviceQuery query_devices();

struct CopyBandwidth {
    int64_t bytes = 0;   // size of one copy
    int passes = 0;      // best of this many
    double seconds = 0;  // the best pass
    // Bytes read plus bytes written per second, as STREAM and `kvscope bench memory` count a
    // copy (twice the buffer per pass), GB/s.
    double gbps = 0;
    std::string error;  // non-empty: not measured, and why
};

// Device-to-device cudaMemcpy of `bytes` on `device`, timed with CUDA events, best of `passes`
// (after one warm-up copy).
CopyBandwidth measure_copy_bandwidth(int device, int64_t bytes, int passes);

}  // namespace kvscope::kernels
