#pragma once
// Where the bundled demo model is, so every command can default to it.

#include <string>

namespace kvscope::app {

// assets/models/kvscope-demo.gguf, looked up next to the executable's tree, then in the
// source tree it was built from. Returns the first that exists, else the build-tree path
// (so the "not found" message names a real place).
std::string default_model_path();

}  // namespace kvscope::app
