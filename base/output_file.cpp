#include "base/output_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <filesystem>
#include <mutex>

#include "base/input_file.h"
#include "base/unique_fd.h"

namespace kvscope {

namespace fs = std::filesystem;

namespace {
std::string parent_of(const std::string& path) {
    fs::path p = fs::path(path).parent_path();
    return p.empty() ? std::string(".") : p.string();
}

// The temporary files of the OutputFiles not committed yet, where a signal handler can read
// them: an atomic pointer is all it may touch. Each points into its OutputFile's own name,
// cleared before that name goes.
constexpr int kCleanupSlots = 64;
std::atomic<const char*> g_unfinished[kCleanupSlots];

extern "C" void remove_unfinished_outputs_and_end(int sig) {
    for (auto& slot : g_unfinished)
        if (const char* temp = slot.load()) ::unlink(temp);
    ::signal(sig, SIG_DFL);
    ::raise(sig);  // ends the process as the signal would have, once this handler returns
}

// Only signals that would end the process as they stand: a command that handles Ctrl-C itself
// (attach, publish) commits or removes its files on its own way out.
void install_cleanup_handlers() {
    static std::once_flag once;
    std::call_once(once, [] {
        for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT}) {
            struct sigaction old {};
            if (::sigaction(sig, nullptr, &old) != 0 || old.sa_handler != SIG_DFL) continue;
            struct sigaction on {};
            on.sa_handler = remove_unfinished_outputs_and_end;
            sigemptyset(&on.sa_mask);
            ::sigaction(sig, &on, nullptr);
        }
    });
}

// -1 when every slot is taken (64 files being written at once): that file is then removed by
// its destructor only.
int claim_cleanup_slot(const char* temp) {
    for (int i = 0; i < kCleanupSlots; ++i) {
        const char* none = nullptr;
        if (g_unfinished[i].compare_exchange_strong(none, temp)) return i;
    }
    return -1;
}

void release_cleanup_slot(int slot) {
    if (slot >= 0) g_unfinished[slot].store(nullptr);
}
}  // namespace

Status check_output_path(const std::string& path, const OutputRules& rules) {
    if (path.empty()) return Error{"the output path is empty"};
    struct stat entry {};
    if (::lstat(path.c_str(), &entry) == 0) {
        // A symbolic link is judged by what it names; one that names nothing is still a user's
        // entry in the folder, replaced only when asked.
        struct stat st = entry;
        bool dangling = S_ISLNK(entry.st_mode) && ::stat(path.c_str(), &st) != 0;
        if (dangling) {
            if (rules.force) return {};
            return Error{path +
                         " is a symbolic link to nothing; pass --force to replace it, or name "
                         "another file"};
        }
        if (S_ISDIR(st.st_mode))
            return Error{"cannot write " + path + ": it is a directory; name a file in it"};
        for (const std::string& in : rules.inputs) {
            std::error_code ec;
            if (!in.empty() && fs::equivalent(path, in, ec))
                return Error{"cannot write " + path + ": it is one of this command's inputs"};
        }
        if (!S_ISREG(st.st_mode))
            return Error{"cannot write " + path + ": it is " + file_kind_name(st.st_mode) +
                         ", and kvscope writes only regular files; name a file"};
        if (!rules.force)
            return Error{path +
                         " already exists; pass --force to replace it, or name another file"};
        return {};
    }
    int err = errno;
    if (err != ENOENT) return Error{"cannot write " + path + ": " + errno_text(err)};
    std::string dir = parent_of(path);
    struct stat dst {};
    if (::stat(dir.c_str(), &dst) != 0)
        return Error{"cannot write " + path + ": folder " + dir + " does not exist"};
    if (!S_ISDIR(dst.st_mode))
        return Error{"cannot write " + path + ": " + dir + " is not a folder"};
    if (::access(dir.c_str(), W_OK) != 0) {
        err = errno;
        return Error{"cannot write " + path + ": " +
                     (err == EROFS ? std::string("read-only file system")
                                   : "folder " + dir + ": " + errno_text(err))};
    }
    return {};
}

std::string first_free_path(const std::string& path) {
    auto taken = [](const std::string& p) {
        std::error_code ec;
        return fs::exists(p, ec) || fs::exists(p + ".part", ec);
    };
    if (!taken(path)) return path;
    fs::path p(path);
    std::string stem = (p.parent_path() / p.stem()).string(), ext = p.extension().string();
    for (int n = 2;; ++n) {
        std::string candidate = stem + "-" + std::to_string(n) + ext;
        if (!taken(candidate)) return candidate;
    }
}

std::string temporary_name_beside(const std::string& path) {
    static std::atomic<unsigned> counter{0};
    return path + ".tmp-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

void sync_parent_folder(const std::string& path) {
    UniqueFd dir(::open(parent_of(path).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (dir.valid()) (void)::fsync(dir.get());
}

bool OutputFile::FdBuffer::drain() {
    const char* p = pbase();
    while (p < pptr() && error == 0) {
        ssize_t n = ::write(fd, p, static_cast<size_t>(pptr() - p));
        if (n < 0 && errno == EINTR) continue;
        if (n < 0)
            error = errno;
        else
            p += n;
    }
    setp(buffer_, buffer_ + sizeof buffer_);
    return error == 0;
}

OutputFile::FdBuffer::int_type OutputFile::FdBuffer::overflow(int_type c) {
    if (!drain()) return traits_type::eof();
    if (!traits_type::eq_int_type(c, traits_type::eof())) {
        *pptr() = traits_type::to_char_type(c);
        pbump(1);
    }
    return traits_type::not_eof(c);
}

Result<std::unique_ptr<OutputFile>> OutputFile::create(const std::string& path,
                                                       const OutputRules& rules) {
    if (Status s = check_output_path(path, rules); !s) return s.error();
    std::unique_ptr<OutputFile> f(new OutputFile());
    f->path_ = path;
    f->temp_ = temporary_name_beside(path);
    install_cleanup_handlers();
    f->cleanup_slot_ = claim_cleanup_slot(f->temp_.c_str());
    // A new name (O_EXCL, never through a link), so nothing there can block the open.
    f->buffer_.fd = ::open(f->temp_.c_str(),
                           O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0666);
    if (f->buffer_.fd < 0) {
        int err = errno;
        f->temp_.clear();
        return Error{"cannot write " + path + ": " +
                     (err == EROFS ? std::string("read-only file system") : errno_text(err))};
    }
    return f;
}

OutputFile::~OutputFile() {
    if (buffer_.fd >= 0) ::close(buffer_.fd);
    if (!committed_ && !temp_.empty()) ::unlink(temp_.c_str());
    release_cleanup_slot(cleanup_slot_);
}

Status OutputFile::commit() {
    out_.flush();
    int err = buffer_.error;
    if (err == 0 && !out_) err = EIO;
    if (err == 0 && ::fsync(buffer_.fd) != 0) err = errno;
    if (::close(buffer_.fd) != 0 && err == 0) err = errno;
    buffer_.fd = -1;
    if (err == 0 && ::rename(temp_.c_str(), path_.c_str()) != 0) err = errno;
    if (err != 0)
        return Error{"cannot write " + path_ + ": " + errno_text(err) + " (the file is unchanged)"};
    committed_ = true;
    release_cleanup_slot(cleanup_slot_);
    cleanup_slot_ = -1;
    sync_parent_folder(path_);
    return {};
}

Status write_output_file(const std::string& path, std::string_view bytes,
                         const OutputRules& rules) {
    auto f = OutputFile::create(path, rules);
    if (!f) return f.error();
    (*f)->stream().write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return (*f)->commit();
}

}  // namespace kvscope
