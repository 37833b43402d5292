#include "app/text_file.h"

#include <filesystem>
#include <fstream>
#include <sstream>

namespace kvscope::app {

Result<std::string> read_text_file(const std::string& path) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) return Error{path + ": no such file"};
    auto size = std::filesystem::file_size(path, ec);
    if (ec) return Error{path + ": cannot read its size: " + ec.message()};
    if (size > kMaxTextFileBytes)
        return Error{path + ": " + std::to_string(size >> 20) +
                     " MiB is more text than kvscope reads (1 GiB)"};
    std::ifstream f(path, std::ios::binary);
    if (!f) return Error{path + ": cannot open"};
    std::ostringstream s;
    s << f.rdbuf();
    if (f.bad()) return Error{path + ": read error"};
    return s.str();
}

}  // namespace kvscope::app
