#include "engine/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

namespace kvscope {

namespace {
// Closes the descriptor on every path out of open(); the mapping does not need it.
struct FdCloser {
    int fd;
    ~FdCloser() {
        if (fd >= 0) ::close(fd);
    }
};
}  // namespace

Result<std::unique_ptr<MappedFile>> MappedFile::open(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Error{path + ": cannot open: " + std::strerror(errno)};
    FdCloser closer{fd};
    struct stat st {};
    if (fstat(fd, &st) != 0) return Error{path + ": cannot stat: " + std::strerror(errno)};
    if (S_ISDIR(st.st_mode)) return Error{path + ": is a directory, not a model file"};
    if (!S_ISREG(st.st_mode)) return Error{path + ": not a regular file"};
    if (st.st_size <= 0) return Error{path + ": the file is empty"};
    const auto size = static_cast<size_t>(st.st_size);
    void* p = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) return Error{path + ": cannot map: " + std::strerror(errno)};
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
