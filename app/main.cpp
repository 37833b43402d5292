// kvscope entry point: all work happens in the subcommands (app/commands.h).
#include "app/commands.h"

int main(int argc, char** argv) {
    return kvscope::app::run_cli(argc, argv);
}
