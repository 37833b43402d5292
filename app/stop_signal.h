#pragma once
// Ctrl-C (SIGINT) and SIGTERM as a flag a long-running command polls, so it can end cleanly:
// close its recording, print its summary. A second Ctrl-C kills the process as usual.

#include <atomic>

namespace kvscope::app {

// Installs the handlers (once) and returns the flag they set.
const std::atomic<bool>& stop_on_interrupt();

}  // namespace kvscope::app
