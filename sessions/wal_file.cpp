#include "sessions/wal_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <filesystem>
#include <vector>

#include "base/input_file.h"
#include "base/unique_fd.h"

namespace kvscope {

namespace {
constexpr uint32_t kWalMagic = 0x377f0682;  // | 1: checksums in big-endian words
constexpr uint32_t kWalVersion = 3007000;
constexpr size_t kWalHeaderBytes = 32, kFrameHeaderBytes = 24;

uint32_t big_endian(const uint8_t* p) {
    return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

// SQLite's WAL checksum over `n` bytes (a multiple of 8), continuing from s[0], s[1].
void wal_checksum(bool big_endian_words, const uint8_t* data, size_t n, uint32_t s[2]) {
    for (size_t i = 0; i + 8 <= n; i += 8) {
        uint32_t x0, x1;
        if (big_endian_words) {
            x0 = big_endian(data + i);
            x1 = big_endian(data + i + 4);
        } else {
            x0 = uint32_t{data[i]} | (uint32_t{data[i + 1]} << 8) | (uint32_t{data[i + 2]} << 16) |
                 (uint32_t{data[i + 3]} << 24);
            x1 = uint32_t{data[i + 4]} | (uint32_t{data[i + 5]} << 8) |
                 (uint32_t{data[i + 6]} << 16) | (uint32_t{data[i + 7]} << 24);
        }
        s[0] += x0 + s[1];
        s[1] += x1 + s[0];
    }
}

bool read_at(int fd, void* out, size_t n, off_t at) {
    auto* p = static_cast<uint8_t*>(out);
    while (n > 0) {
        ssize_t got = ::pread(fd, p, n, at);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return false;
        p += got;
        n -= static_cast<size_t>(got);
        at += got;
    }
    return true;
}

// The database's page size from its header (offset 16, big endian; 1 means 65536), 0 if
// unreadable.
uint32_t database_page_size(const std::string& path) {
    auto fd = open_input_file(path, "session file");
    uint8_t b[2] = {};
    if (!fd || !read_at(fd->get(), b, 2, 16)) return 0;
    uint32_t size = (uint32_t{b[0]} << 8) | b[1];
    return size == 1 ? 65536 : size;
}

std::string folder_of(const std::string& path) {
    std::string dir = std::filesystem::path(path).parent_path().string();
    return dir.empty() ? "." : dir;
}
}  // namespace

std::string wal_path(const std::string& path) {
    return path + "-wal";
}

Result<WalContents> check_wal_belongs(const std::string& path) {
    const std::string wal = wal_path(path);
    struct stat st {};
    if (::lstat(wal.c_str(), &st) != 0) return WalContents::kNone;
    auto fd = open_input_file(wal, "write-ahead log");
    if (!fd) return fd.error();
    const auto size = static_cast<size_t>(st.st_size);
    if (size == 0) return WalContents::kNone;  // SQLite starts it anew
    auto foreign = [&](const std::string& why) {
        return Error{wal + " is not " + path + "'s write-ahead log (" + why +
                     "): it was left as it is and nothing was folded in; move it away to repair " +
                     path + " without it"};
    };
    uint8_t header[kWalHeaderBytes];
    if (size < kWalHeaderBytes || !read_at(fd->get(), header, kWalHeaderBytes, 0))
        return foreign("it is too short to be a log");
    const uint32_t magic = big_endian(header);
    if ((magic & ~1u) != kWalMagic) return foreign("it is not an SQLite log");
    if (big_endian(header + 4) != kWalVersion) return foreign("its format version is unknown");
    const uint32_t page = big_endian(header + 8);
    const uint32_t db_page = database_page_size(path);
    if (page != db_page)
        return foreign("its pages are " + std::to_string(page) + " bytes, the database's " +
                       std::to_string(db_page));
    const bool big = magic & 1;
    uint32_t sum[2] = {0, 0};
    wal_checksum(big, header, 24, sum);
    if (sum[0] != big_endian(header + 24) || sum[1] != big_endian(header + 28))
        return WalContents::kUnused;
    if (size < kWalHeaderBytes + kFrameHeaderBytes + page) return WalContents::kUnused;
    std::vector<uint8_t> frame(kFrameHeaderBytes + page);
    if (!read_at(fd->get(), frame.data(), frame.size(), kWalHeaderBytes))
        return foreign("its first frame cannot be read");
    if (big_endian(frame.data() + 8) != big_endian(header + 16) ||
        big_endian(frame.data() + 12) != big_endian(header + 20))
        return WalContents::kUnused;
    wal_checksum(big, frame.data(), 8, sum);
    wal_checksum(big, frame.data() + kFrameHeaderBytes, page, sum);
    if (sum[0] != big_endian(frame.data() + 16) || sum[1] != big_endian(frame.data() + 20))
        return WalContents::kUnused;
    return WalContents::kFrames;
}

Status check_wal_folder_writable(const std::string& path, const std::string& verb) {
    uint8_t mode[2] = {};
    bool in_wal_mode = false;
    if (auto fd = open_input_file(path, "session file"); fd)
        in_wal_mode = read_at(fd->get(), mode, 2, 18) && (mode[0] == 2 || mode[1] == 2);
    struct stat st {};
    if (!in_wal_mode && ::lstat(wal_path(path).c_str(), &st) != 0) return {};
    const std::string dir = folder_of(path);
    if (::access(dir.c_str(), W_OK) == 0) return {};
    const int err = errno;
    return Error{path + ": cannot " + verb + " it in folder " + dir + " (" +
                 (err == EROFS ? std::string("a read-only file system") : errno_text(err)) +
                 "), which kvscope cannot write: a recording that did not finish is opened by "
                 "writing beside it (not corrupt); copy " +
                 path + " and " + wal_path(path) + " to a folder you can write and " + verb +
                 " the copy there"};
}

}  // namespace kvscope
