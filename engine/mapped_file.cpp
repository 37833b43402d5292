#include "engine/mapped_file.h"

#include <sys/mman.h>
#include <sys/stat.h>

#include <cerrno>
#include <new>

#include "base/input_file.h"

namespace kvscope {

Result<std::unique_ptr<MappedFile>> MappedFile::open(const std::string& path) {
    auto fd = open_input_file(path, "model file");
    if (!fd) return fd.error();
    struct stat st {};
    if (fstat(fd->get(), &st) != 0) return Error{path + ": cannot stat: " + errno_text(errno)};
    if (st.st_size <= 0) return Error{path + ": the file is empty"};
    const auto size = static_cast<size_t>(st.st_size);
    void* p = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd->get(), 0);
    if (p == MAP_FAILED) return Error{path + ": cannot map: " + errno_text(errno)};
    std::unique_ptr<MappedFile> m(new (std::nothrow) MappedFile());
    if (!m) {
        munmap(p, size);
        return Error{path + ": out of memory"};
    }
    m->data_ = static_cast<const uint8_t*>(p);
    m->size_ = size;
    m->path_ = path;
    return m;
}

MappedFile::~MappedFile() {
    if (data_) munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace kvscope
