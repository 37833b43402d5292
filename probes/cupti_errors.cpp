#include "probes/cupti_errors.h"

#include <cupti.h>

namespace kvscope {

bool cupti_unsupported(int code) {
    switch (static_cast<CUptiResult>(code)) {
        case CUPTI_ERROR_NOT_SUPPORTED:
        case CUPTI_ERROR_LEGACY_PROFILER_NOT_SUPPORTED:
        case CUPTI_ERROR_VIRTUALIZED_DEVICE_NOT_SUPPORTED:
        case CUPTI_ERROR_CONFIDENTIAL_COMPUTING_NOT_SUPPORTED:
        case CUPTI_ERROR_CMP_DEVICE_NOT_SUPPORTED:
        case CUPTI_ERROR_MIG_DEVICE_NOT_SUPPORTED:
        case CUPTI_ERROR_SLI_DEVICE_NOT_SUPPORTED:
        case CUPTI_ERROR_WSL_DEVICE_NOT_SUPPORTED:
            return true;
        default:
            return false;
    }
}

std::string cupti_failure(std::string_view call, int code) {
    const auto result = static_cast<CUptiResult>(code);
    const char* name = nullptr;
    if (cuptiGetResultString(result, &name) != CUPTI_SUCCESS || !name) name = "unknown CUPTI error";
    std::string line = std::string(call) + ": " + name;
    const char* advice = nullptr;
    switch (result) {
        case CUPTI_ERROR_INSUFFICIENT_PRIVILEGES:
        case CUPTI_ERROR_VIRTUALIZED_DEVICE_INSUFFICIENT_PRIVILEGES:
            advice =
                "GPU performance counters are for admin users here: run as root, or load the "
                "nvidia module with NVreg_RestrictProfilingToAdminUsers=0; see "
                "https://developer.nvidia.com/ERR_NVGPUCTRPERM";
            break;
        case CUPTI_ERROR_NOT_COMPATIBLE:
        case CUPTI_ERROR_NOT_INITIALIZED:
        case CUPTI_ERROR_CUDA_COMPILER_NOT_COMPATIBLE:
            advice =
                "CUPTI cannot work with this CUDA driver: the driver may be older than the CUDA "
                "toolkit kvscope was built with";
            break;
        case CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED:
            advice =
                "another profiler (Nsight Systems or Compute, say) holds CUPTI in this process";
            break;
        default:
            if (cupti_unsupported(code)) advice = "this GPU or its setup does not support it";
            break;
    }
    if (advice) line += std::string(" (") + advice + ")";
    return line;
}

}  // namespace kvscope
