#pragma once
// CUPTI's failures as one line a user can act on. Part of the GPU probe library
// (kvscope_probes_cupti). CUPTI-free, so that its tests include no CUPTI header: a code is a
// CUptiResult's value.

#include <string>
#include <string_view>

namespace kvscope {

// "<call>: <CUPTI's name for the code> (<what to do about it>)", the advice only for the codes
// where there is something to do: permissions, an unsupported GPU or setup, a driver CUPTI cannot
// work with, another profiler holding CUPTI.
std::string cupti_failure(std::string_view call, int code);

// Whether `code` says the GPU or the machine's setup cannot do it (as opposed to a failure that
// might go away).
bool cupti_unsupported(int code);

}  // namespace kvscope
