#include "base/machine_memory.h"

#include <unistd.h>

#include <cstdio>

namespace kvscope {

uint64_t physical_memory_bytes() {
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

uint64_t memory_to_spare() {
    return physical_memory_bytes() / 4 * 3;
}

std::string gigabytes_text(uint64_t bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f GB", static_cast<double>(bytes) / 1e9);
    return buf;
}

Status check_fits_in_memory(uint64_t bytes, const std::string& what, const std::string& advice,
                            uint64_t limit) {
    if (limit == 0) limit = memory_to_spare();
    if (limit == 0 || bytes <= limit) return {};
    std::string message = what + ": " + gigabytes_text(bytes) + ", more than the " +
                          gigabytes_text(limit) + " this machine can spare";
    if (!advice.empty()) message += " (" + advice + ")";
    return Error{message};
}

}  // namespace kvscope
