#pragma once
// Exclusive advisory locks (flock) that say who may write a file: two recorders aimed at one
// path, or a repair of a file still being recorded, find the lock taken and stop.

#include <string>

#include "base/result.h"
#include "base/unique_fd.h"

namespace kvscope {

struct LockedFile {
    UniqueFd fd;           // the lock lives as long as this descriptor
    bool created = false;  // the file did not exist before
};

// Opens (creating it when `create`) and locks `path` without waiting. A lock held elsewhere
// gives an error that says so ("is being written by another kvscope (process holding it)").
Result<LockedFile> lock_file(const std::string& path, bool create);

}  // namespace kvscope
