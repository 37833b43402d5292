#include "app/backend_flag.h"

#include "app/commands.h"
#ifdef KVSCOPE_HAVE_CUDA
#include "engine_cuda/cuda_forward.h"
#include "kernels/device_info.h"
#endif

namespace kvscope::app {

void add_backend_flag(CLI::App& sub, Backend& backend) {
    sub.add_option_function<std::string>(
           "--backend",
           [&backend](const std::string& v) {
               backend = v == "cuda" ? Backend::kCuda : Backend::kCpu;
           },
           "cpu (the reference, runs anywhere) | cuda (needs a build with CUDA and a GPU)")
        ->check(CLI::IsMember({"cpu", "cuda"}))
        ->default_str("cpu");
}

bool build_has_cuda() {
#ifdef KVSCOPE_HAVE_CUDA
    return true;
#else
    return false;
#endif
}

int check_backend(Backend backend) {
    if (backend == Backend::kCpu) return 0;
#ifndef KVSCOPE_HAVE_CUDA
    return fail(std::string("--backend cuda: ") + kNoCudaBuild);
#else
    kernels::DeviceQuery q = kernels::query_devices();
    if (q.devices.empty())
        return fail("--backend cuda: no usable CUDA device (cudaGetDeviceCount: " + q.error + ")");
    return 0;
#endif
}

ForwardFactory backend_factory(Backend backend) {
#ifdef KVSCOPE_HAVE_CUDA
    if (backend == Backend::kCuda) return cuda_backend();
#else
    (void)backend;
#endif
    return {};
}

}  // namespace kvscope::app
