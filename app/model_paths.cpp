#include "app/model_paths.h"

#include <unistd.h>

#include <filesystem>

namespace fs = std::filesystem;

namespace kvscope::app {

namespace {
constexpr const char* kBundled = "assets/models/kvscope-demo.gguf";

fs::path executable_dir() {
    std::error_code ec;
    fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    return ec ? fs::current_path() : exe.parent_path();
}
}  // namespace

std::string default_model_path() {
    if (const char* env = std::getenv("KVSCOPE_MODEL")) return env;
    fs::path exe_dir = executable_dir();
    for (const fs::path& base : {exe_dir, exe_dir.parent_path(), fs::path(KVSCOPE_SOURCE_DIR)}) {
        fs::path p = base / kBundled;
        if (fs::exists(p)) return p.string();
    }
    return (fs::path(KVSCOPE_SOURCE_DIR) / kBundled).string();
}

std::string model_path_for_recording(const std::string& path) {
    std::error_code ec;
    if (fs::equivalent(path, default_model_path(), ec) && !ec) return kBundled;
    return path;
}

}  // namespace kvscope::app
