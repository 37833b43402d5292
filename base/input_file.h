#pragma once
// Opening a file the user named as an input. open(2) on a FIFO blocks until a writer appears
// and read(2) on a device may never end, so every input is opened non-blocking and refused by
// name unless it is a regular file, before a byte is read.

#include <cstddef>
#include <string>

#include "base/result.h"
#include "base/unique_fd.h"

namespace kvscope {

// `what` names the file's role in messages ("model file", "workload", "session file"):
// "w.jsonl: is a FIFO, not a workload". The descriptor is blocking again when returned.
Result<UniqueFd> open_input_file(const std::string& path, const std::string& what);

// Reads the whole file; refuses one larger than `max_bytes` before reading it.
Result<std::string> read_input_file(const std::string& path, const std::string& what,
                                    size_t max_bytes);

// "a directory", "a FIFO", "a socket", "a device", "a regular file", ... for st_mode.
const char* file_kind_name(unsigned mode);

// strerror(err) with its first letter in lower case, to follow "path: ".
std::string errno_text(int err);

}  // namespace kvscope
