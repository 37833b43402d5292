#include "base/file_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>

#include <cerrno>

#include "base/input_file.h"

namespace kvscope {

Result<LockedFile> lock_file(const std::string& path, bool create) {
    LockedFile out;
    int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0 && errno == ENOENT && create) {
        fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        out.created = fd >= 0;
    }
    if (fd < 0) {
        int err = errno;
        return Error{"cannot write " + path + ": " +
                     (err == EROFS ? std::string("read-only file system") : errno_text(err))};
    }
    out.fd.reset(fd);
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        if (out.created) ::unlink(path.c_str());
        return Error{"cannot write " + path + ": it is " + file_kind_name(st.st_mode)};
    }
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
        // Never unlink here, even a file this call created: whoever holds the lock uses it.
        int err = errno;
        if (err == EWOULDBLOCK)
            return Error{path + " is being written by another kvscope right now"};
        return Error{"cannot lock " + path + ": " + errno_text(err)};
    }
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0) (void)fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    return out;
}

}  // namespace kvscope
