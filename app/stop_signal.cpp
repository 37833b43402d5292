#include "app/stop_signal.h"

#include <csignal>

namespace kvscope::app {

namespace {
std::atomic<bool> g_stop{false};
extern "C" void on_stop_signal(int sig) {
    g_stop.store(true);
    std::signal(sig, SIG_DFL);  // a second one ends the process
}
}  // namespace

const std::atomic<bool>& stop_on_interrupt() {
    static const bool installed = [] {
        std::signal(SIGINT, on_stop_signal);
        std::signal(SIGTERM, on_stop_signal);
        return true;
    }();
    (void)installed;
    return g_stop;
}

}  // namespace kvscope::app
