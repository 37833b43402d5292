#pragma once
// A read-only memory mapping of a whole regular file. Model weights are views into it, so it is
// shared (std::shared_ptr) by everything that hands out such views.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "base/result.h"

namespace kvscope {

class MappedFile {
  public:
    // Errors name the path and the reason: missing, unreadable, a directory or other non-regular
    // file, empty (a zero-length mapping is not possible and no model is empty), mmap failure.
    static Result<std::unique_ptr<MappedFile>> open(const std::string& path);
    ~MappedFile();
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    std::span<const uint8_t> bytes() const { return {data_, size_}; }
    size_t size() const { return size_; }
    const std::string& path() const { return path_; }

  private:
    MappedFile() = default;
    const uint8_t* data_ = nullptr;
    size_t size_ = 0;
    std::string path_;
};

}  // namespace kvscope
