#include "engine/on_demand_array.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>

#include <new>

namespace kvscope {

OnDemandBytes::OnDemandBytes(size_t bytes) {
    if (bytes == 0) return;
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    data_ = p;
    bytes_ = bytes;
}

void OnDemandBytes::release(size_t offset, size_t count) {
    static const auto page = static_cast<size_t>(sysconf(_SC_PAGE_SIZE));
    const size_t first = (offset + page - 1) / page * page, end = (offset + count) / page * page;
    if (!data_ || first >= end) return;
    madvise(static_cast<uint8_t*>(data_) + first, end - first, MADV_DONTNEED);
}

OnDemandBytes::~OnDemandBytes() {
    if (data_) munmap(data_, bytes_);
}

}  // namespace kvscope
