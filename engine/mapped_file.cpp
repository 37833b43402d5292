#include "engine/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kvscope {

Result<std::unique_ptr<MappedFile>> MappedFile::open(const std::string& path) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return Error{path + ": cannot open: " + std::strerror(errno)};
    struct stat st {};
    if (fstat(fd, &st) != 0) {
        int e = errno;
        ::close(fd);
        return Error{path + ": cannot stat: " + std::strerror(e)};
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        return Error{path + ": not a regular file"};
    }
    if (st.st_size == 0) {
        ::close(fd);
        return Error{path + ": the file is empty"};
    }
    void* p = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    ::close(fd);
    if (p == MAP_FAILED) return Error{path + ": cannot map: " + std::strerror(e)};
    std::unique_ptr<MappedFile> m(new MappedFile());
    m->data_ = static_cast<const uint8_t*>(p);
    m->size_ = static_cast<size_t>(st.st_size);
    m->path_ = path;
    return m;
}

MappedFile::~MappedFile() {
    if (data_) munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace kvscope
