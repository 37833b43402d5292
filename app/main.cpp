// kvscope entry point: all work happens in the subcommands (app/commands.h).
#include <csignal>

#include "app/commands.h"

int main(int argc, char** argv) {
    // A file-size limit (ulimit -f) would kill the process mid-write; ignored, the write fails
    // with EFBIG and the command says so, as it does for a full disk.
    std::signal(SIGXFSZ, SIG_IGN);
    return kvscope::app::run_cli(argc, argv);
}
