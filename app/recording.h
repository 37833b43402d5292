#pragma once
// Starts recording an engine's events to a session file (`--record FILE.kvs`).

#include <memory>
#include <string>

#include "engine/engine.h"
#include "sessions/recorder.h"

namespace kvscope::app {

RunInfo run_info_for(Engine& engine, const std::string& allocator, const std::string& options_json);

// Creates the recorder and attaches it as the engine's probe. `force` replaces a file already
// at `path` (the check against the command's inputs is the caller's: check_output()).
Result<std::unique_ptr<Recorder>> start_recording(const std::string& path, Engine& engine,
                                                  const std::string& allocator,
                                                  const std::string& options_json, bool force);

// Flushes and closes; prints where the session went (stderr). Returns 0, or 1 with a message.
int finish_recording(std::unique_ptr<Recorder>& recorder, Engine& engine);

}  // namespace kvscope::app
