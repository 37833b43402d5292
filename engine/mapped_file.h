#pragma once
// A read-only memory mapping of a whole regular file. Model weights are views into it, so it is
// shared (std::shared_ptr) by everything that hands out such views.
//
// Another program may shrink the file while it is mapped (Linux allows it: an editor saving over
// it, a download restarted, `truncate`). Reading a page past the new end then raises SIGBUS,
// which used to kill kvscope mid-run. Every mapping is watched: a SIGBUS inside one maps zero
// pages over the whole mapping, so the read that faulted, and any other thread's, completes,
// and marks it changed. What was computed from those zeros is thrown away: the forward pass
// asks check_unchanged() before it hands back any logits, and the run stops with the reason.

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

    // An error naming the first mapped file of this process that shrank under its mapping (its
    // bytes read as zeros since), or ok. Cheap: a few dozen atomic reads.
    static Status check_unchanged();

  private:
    MappedFile() = default;
    const uint8_t* data_ = nullptr;
    size_t size_ = 0;
    std::string path_;
    int watch_slot_ = -1;  // where the SIGBUS handler finds this mapping; -1: not watched
};

}  // namespace kvscope
