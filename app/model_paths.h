#pragma once
// Where the bundled demo model is, so every command can default to it.

#include <string>

namespace kvscope::app {

// assets/models/kvscope-demo.gguf, looked up next to the executable's tree, then in the
// source tree it was built from. Returns the first that exists, else the build-tree path
// (so the "not found" message names a real place).
std::string default_model_path();

// How a session names the model it was recorded with: the bundled model as its path inside the
// repository ("assets/models/kvscope-demo.gguf"), so shared recordings carry no machine's
// directories; any other model as the user gave it.
std::string model_path_for_recording(const std::string& path);

}  // namespace kvscope::app
