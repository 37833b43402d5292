#include "app/text_file.h"

#include "base/input_file.h"

namespace kvscope::app {

Result<std::string> read_text_file(const std::string& path) {
    return read_input_file(path, "text file", kMaxTextFileBytes);
}

}  // namespace kvscope::app
