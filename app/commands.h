#pragma once
// The command line: one CLI11 app with a subcommand per job (one file each, cmd_*.cpp).
// Exit status everywhere: 0 success, 1 the job failed (bad model file, bad workload...),
// 2 a usage error (unknown flag, value out of range).

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace kvscope::app {

int run_cli(int argc, char** argv);

// A registered subcommand: run() is called when `app` was the one parsed.
struct Command {
    CLI::App* app = nullptr;
    std::function<int()> run;
};

// Each cmd_*.cpp registers its subcommand and returns the action bound to its options.
Command register_generate(CLI::App& cli);
Command register_workload(CLI::App& cli);
Command register_run(CLI::App& cli);
Command register_inspect(CLI::App& cli);
Command register_check(CLI::App& cli);
Command register_export(CLI::App& cli);
Command register_kv_size(CLI::App& cli);
Command register_tokenize(CLI::App& cli);
Command register_perplexity(CLI::App& cli);
Command register_eval(CLI::App& cli);
Command register_attach(CLI::App& cli);
Command register_publish(CLI::App& cli);
// `bench` and its subcommands (memory, cpu, gpu).
std::vector<Command> register_bench(CLI::App& cli);
Command register_bench_cpu(CLI::App& bench);
Command register_bench_gpu(CLI::App& bench);
// Hidden: prints the README's table of commands from `cli`'s own definition.
Command register_commands_table(CLI::App& cli);
std::string commands_table(const CLI::App& cli);

// The window commands (gui, replay, compare) and the action of `kvscope` with no subcommand.
struct GuiCommands {
    std::vector<Command> commands;
    std::function<int()> bare;
};
GuiCommands register_gui(CLI::App& cli);

// The whole command line, every subcommand registered: what run_cli() parses, and what the
// tests and fuzz/fuzz_cli_values.cpp parse without running anything.
struct CommandLine {
    CommandLine();
    CLI::App cli;
    std::vector<Command> commands;
    std::function<int()> bare;  // `kvscope` with no subcommand (the window), when built

    // Every option with a long name, of bare kvscope and of each subcommand below it, with the
    // subcommands that lead to it: what the tests and the fuzzer hold to their rules.
    struct OptionAt {
        std::vector<std::string> subcommands;  // none: bare kvscope's (the window's flags)
        const CLI::Option* option;
        std::string flag() const { return "--" + option->get_lnames().at(0); }
    };
    std::vector<OptionAt> every_option();
};

// `--force`: the command may replace files that exist at its output paths.
void add_force_flag(CLI::App& sub, bool& force);
// Refuses an output path before any work is done (it exists and no --force, it is one of the
// command's inputs, its folder is missing...). Returns 0, or 1 with the message printed.
int check_output(const std::string& path, bool force, const std::vector<std::string>& inputs);

// Fills an empty --model with the bundled model's path; returns 0, or 1 with the message printed
// when it is not where kvscope looks.
int resolve_model(std::string& model);

// Prints "kvscope: error: <message>" on stderr and returns 1.
int fail(const std::string& message);
// The same for a usage mistake CLI11 cannot see (a missing either/or option); returns 2.
int usage_error(const std::string& message);

}  // namespace kvscope::app
