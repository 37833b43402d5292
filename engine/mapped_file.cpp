#include "engine/mapped_file.h"

#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include <atomic>
#include <cerrno>
#include <mutex>
#include <new>

#include "base/input_file.h"

namespace kvscope {

namespace {
// The mappings a SIGBUS may hit, for the handler, which may take no lock: fixed slots claimed
// with a compare-and-swap. More mappings than slots at once go unwatched (a process holds one or
// two: the model, perhaps a tokenizer's file).
struct WatchedMapping {
    std::atomic<bool> claimed{false};
    std::atomic<uintptr_t> begin{0}, end{0};
    std::atomic<bool> changed{false};
    const MappedFile* file = nullptr;  // for check_unchanged(), under g_files
};
constexpr int kWatchSlots = 64;
WatchedMapping g_watched[kWatchSlots];
std::mutex g_files;  // guards `file` against the MappedFile going away while it is named
struct sigaction g_previous_sigbus;

void on_sigbus(int signal, siginfo_t* info, void* context) {
    const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
    for (WatchedMapping& w : g_watched) {
        const uintptr_t begin = w.begin.load(std::memory_order_acquire);
        const uintptr_t end = w.end.load(std::memory_order_acquire);
        if (begin == 0 || addr < begin || addr >= end) continue;
        // The file shrank: zero pages in place of the whole mapping (mmap is a plain system call
        // on Linux, safe here), so the faulting read and every later one complete. The address
        // range stays ours; the destructor unmaps it as before.
        void* p = mmap(reinterpret_cast<void*>(begin), end - begin, PROT_READ,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        if (p == MAP_FAILED) break;
        w.changed.store(true, std::memory_order_release);
        return;
    }
    // Not a watched mapping: whatever would have happened without this handler.
    if (g_previous_sigbus.sa_flags & SA_SIGINFO) {
        if (g_previous_sigbus.sa_sigaction)
            return g_previous_sigbus.sa_sigaction(signal, info, context);
    } else if (g_previous_sigbus.sa_handler != SIG_DFL && g_previous_sigbus.sa_handler != SIG_IGN) {
        return g_previous_sigbus.sa_handler(signal);
    }
    // Back to the default action; returning re-runs the faulting read, which now ends the process
    // with SIGBUS as it always would have.
    ::signal(SIGBUS, SIG_DFL);
}

void install_sigbus_handler() {
    static std::once_flag once;
    std::call_once(once, [] {
        struct sigaction sa {};
        sa.sa_sigaction = on_sigbus;
        sa.sa_flags = SA_SIGINFO;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGBUS, &sa, &g_previous_sigbus);
    });
}

int watch(const MappedFile* file, const uint8_t* data, size_t size) {
    install_sigbus_handler();
    for (int i = 0; i < kWatchSlots; ++i) {
        WatchedMapping& w = g_watched[i];
        bool expected = false;
        if (!w.claimed.compare_exchange_strong(expected, true)) continue;
        {
            std::lock_guard lock(g_files);
            w.file = file;
        }
        w.changed.store(false);
        w.end.store(reinterpret_cast<uintptr_t>(data) + size, std::memory_order_release);
        w.begin.store(reinterpret_cast<uintptr_t>(data), std::memory_order_release);
        return i;
    }
    return -1;
}

void unwatch(int slot) {
    if (slot < 0) return;
    WatchedMapping& w = g_watched[slot];
    w.begin.store(0, std::memory_order_release);
    w.end.store(0, std::memory_order_release);
    {
        std::lock_guard lock(g_files);
        w.file = nullptr;
    }
    w.changed.store(false);
    w.claimed.store(false, std::memory_order_release);
}
}  // namespace

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
    m->watch_slot_ = watch(m.get(), m->data_, size);
    return m;
}

MappedFile::~MappedFile() {
    unwatch(watch_slot_);
    if (data_) munmap(const_cast<uint8_t*>(data_), size_);
}

Status MappedFile::check_unchanged() {
    for (WatchedMapping& w : g_watched) {
        if (!w.changed.load(std::memory_order_acquire)) continue;
        std::lock_guard lock(g_files);
        if (!w.file) continue;
        return Error{w.file->path() +
                     ": the model file changed while in use (another program shrank or rewrote "
                     "it); the run stopped"};
    }
    return {};
}

}  // namespace kvscope
