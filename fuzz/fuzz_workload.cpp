// Workload JSONL parser on arbitrary text.
#include <cstdint>
#include <string_view>

#include "engine/workload.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::string_view text(reinterpret_cast<const char*>(data), size);
    (void)kvscope::parse_workload(text, "fuzz.jsonl", nullptr, 512, 512);
    return 0;
}
