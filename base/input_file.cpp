#include "base/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cctype>
#include <cerrno>
#include <cstring>

namespace kvscope {

std::string errno_text(int err) {
    std::string s = std::strerror(err);
    if (!s.empty()) s[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(s[0])));
    return s;
}

const char* file_kind_name(unsigned mode) {
    if (S_ISREG(mode)) return "a regular file";
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
    return "not a regular file";
}

Result<UniqueFd> open_input_file(const std::string& path, const std::string& what) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
    if (!fd.valid()) {
        int err = errno;
        if (err == ENOENT) return Error{path + ": cannot open: no such file"};
        return Error{path + ": cannot open: " + errno_text(err)};
    }
    struct stat st {};
    if (fstat(fd.get(), &st) != 0) return Error{path + ": cannot stat: " + errno_text(errno)};
    if (!S_ISREG(st.st_mode))
        return Error{path + ": is " + file_kind_name(st.st_mode) + ", not a " + what};
    int flags = fcntl(fd.get(), F_GETFL);
    if (flags < 0 || fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0)
        return Error{path + ": cannot open: " + errno_text(errno)};
    return fd;
}

Result<std::string> read_input_file(const std::string& path, const std::string& what,
                                    size_t max_bytes) {
    auto fd = open_input_file(path, what);
    if (!fd) return fd.error();
    struct stat st {};
    if (fstat(fd->get(), &st) != 0) return Error{path + ": cannot stat: " + errno_text(errno)};
    auto size = static_cast<size_t>(st.st_size);
    if (size > max_bytes)
        return Error{path + ": " + std::to_string(size >> 20) + " MiB is larger than a " + what +
                     " may be (" + std::to_string(max_bytes >> 20) + " MiB)"};
    std::string out(size, '\0');
    size_t done = 0;
    while (done < size) {
        ssize_t n = ::read(fd->get(), out.data() + done, size - done);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return Error{path + ": read error: " + errno_text(errno)};
        if (n == 0) break;  // shrank while reading
        done += static_cast<size_t>(n);
    }
    out.resize(done);
    return out;
}

}  // namespace kvscope
