#pragma once
// Where kvscope's own data is: the bundled demo model and the sample session. kvscope finds
// them relative to its executable, so an installed or moved copy works from any directory:
//   1. <exe>/../share/kvscope/       installed (cmake --install, the .deb)
//   2. $KVSCOPE_DATA_DIR/            anywhere the user puts them
//   3. <exe>/../assets/, then the source tree it was built from   a build tree
// (data files keep the same relative names in each: models/kvscope-demo.gguf,
// sessions/sample-chat.kvs).

#include <string>
#include <vector>

#include "base/result.h"

namespace kvscope::app {

// The folders searched, in order (those that do not exist included, for messages).
std::vector<std::string> data_dirs();
// The folder of the running executable (the current folder if /proc cannot say).
std::string executable_dir();
// The first existing `relative` under data_dirs(), or an error naming every place looked in.
Result<std::string> find_data_file(const std::string& relative);

// The model a command uses: `given` when the user named one, else the bundled demo model
// ($KVSCOPE_MODEL overrides where it is).
Result<std::string> model_path_or_bundled(const std::string& given);
inline constexpr const char* kModelOptionHelp =
    "Model file (GGUF or llama2.c .bin) or synthetic:NAME (a real shape, random weights); "
    "default: the bundled demo model";

// How a session names the model it was recorded with: the bundled model as its path inside the
// repository ("assets/models/kvscope-demo.gguf"), so shared recordings carry no machine's
// directories; any other model as the user gave it.
std::string model_path_for_recording(const std::string& path);

}  // namespace kvscope::app
