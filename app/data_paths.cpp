#include "app/data_paths.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

namespace fs = std::filesystem;

namespace kvscope::app {

namespace {
constexpr const char* kBundledModel = "models/kvscope-demo.gguf";
// The name sessions give the bundled model (its place in the repository).
constexpr const char* kBundledModelName = "assets/models/kvscope-demo.gguf";

}  // namespace

std::string executable_dir() {
    std::error_code ec;
    fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    return (ec ? fs::current_path() : exe.parent_path()).string();
}

std::vector<std::string> data_dirs() {
    fs::path exe(executable_dir());
    std::vector<std::string> dirs = {(exe.parent_path() / "share" / "kvscope").string()};
    if (const char* env = std::getenv("KVSCOPE_DATA_DIR"); env && *env) dirs.push_back(env);
    for (const fs::path& tree : {exe.parent_path(), fs::path(KVSCOPE_SOURCE_DIR)}) {
        std::string dir = (tree / "assets").lexically_normal().string();
        if (std::find(dirs.begin(), dirs.end(), dir) == dirs.end()) dirs.push_back(dir);
    }
    return dirs;
}

Result<std::string> find_data_file(const std::string& relative) {
    std::string looked;
    for (const std::string& dir : data_dirs()) {
        fs::path p = fs::path(dir) / relative;
        std::error_code ec;
        if (fs::is_regular_file(p, ec)) return p.string();
        looked += (looked.empty() ? "" : ", ") + dir;
    }
    return Error{relative + " is not where kvscope looks for its data (" + looked +
                 "): set KVSCOPE_DATA_DIR to the folder holding it"};
}

Result<std::string> model_path_or_bundled(const std::string& given) {
    if (!given.empty()) return given;
    if (const char* env = std::getenv("KVSCOPE_MODEL"); env && *env) return std::string(env);
    auto found = find_data_file(kBundledModel);
    if (!found) return Error{"the bundled model " + found.error().message + ", or pass --model"};
    return found;
}

std::string model_path_for_recording(const std::string& path) {
    auto bundled = find_data_file(kBundledModel);
    std::error_code ec;
    if (bundled && fs::equivalent(path, bundled.value(), ec) && !ec) return kBundledModelName;
    return path;
}

}  // namespace kvscope::app
