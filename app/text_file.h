#pragma once
// Reads a whole text file given on the command line, refusing what is not one (missing,
// a directory, absurdly large) with a message that names the file.

#include <string>

#include "base/result.h"

namespace kvscope::app {

inline constexpr size_t kMaxTextFileBytes = size_t{1} << 30;

Result<std::string> read_text_file(const std::string& path);

}  // namespace kvscope::app
