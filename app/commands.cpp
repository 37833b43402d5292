#include "app/commands.h"
#include "base/terminal_text.h"

#include <cstdio>
#include <exception>
#include <functional>

#include "app/data_paths.h"
#include "base/output_file.h"
#include "base/version.h"

namespace kvscope::app {

void add_force_flag(CLI::App& sub, bool& force) {
    sub.add_flag("--force", force, "Replace output files that already exist");
}

int check_output(const std::string& path, bool force, const std::vector<std::string>& inputs) {
    if (path.empty()) return 0;
    Status s = check_output_path(path, {.force = force, .inputs = inputs});
    return s ? 0 : fail(s.error().message);
}

int resolve_model(std::string& model) {
    auto path = model_path_or_bundled(model);
    if (!path) return fail(path.error().message);
    model = path.value();
    return 0;
}

int fail(const std::string& message) {
    // Messages quote paths, request ids and token text from files: one line, nothing a
    // terminal would act on.
    std::fprintf(stderr, "kvscope: error: %s\n", terminal_safe(message).c_str());
    return 1;
}

int usage_error(const std::string& message) {
    std::fprintf(stderr, "kvscope: error: %s (see --help)\n", terminal_safe(message).c_str());
    return 2;
}

CommandLine::CommandLine() : cli("kvscope: see what an LLM does with its KV cache") {
    cli.require_subcommand(0, 1);
    cli.set_version_flag("--version", std::string("kvscope ") + kVersion +
                                          "\nbuild: " + kBuildType + ", " + kBuildCompiler +
                                          "\nbackends: " + kBuildBackends);
    // CLI11's own messages (a bad value, an unknown flag) in the form of usage_error(): one
    // line, the value it quotes made safe and cut (an argument may be 128 KiB of anything).
    cli.failure_message([](const CLI::App*, const CLI::Error& e) {
        constexpr size_t kMaxShown = 400;
        std::string what = e.what();
        if (what.size() > kMaxShown) what = what.substr(0, kMaxShown) + "...";
        return "kvscope: error: " + terminal_safe(what) + " (see --help)\n";
    });
    commands = {register_generate(cli), register_run(cli),      register_workload(cli),
                register_inspect(cli),  register_check(cli),    register_export(cli),
                register_kv_size(cli),  register_tokenize(cli), register_perplexity(cli),
                register_eval(cli),     register_attach(cli),   register_publish(cli)};
    for (Command& c : register_bench(cli))
        commands.push_back(std::move(c));
#ifdef KVSCOPE_HAVE_GUI
    GuiCommands gui = register_gui(cli);
    commands.insert(commands.end(), gui.commands.begin(), gui.commands.end());
    bare = gui.bare;
#endif
    commands.push_back(register_commands_table(cli));
}

std::vector<CommandLine::OptionAt> CommandLine::every_option() {
    std::vector<OptionAt> out;
    std::function<void(CLI::App*, const std::vector<std::string>&)> walk =
        [&](CLI::App* app, const std::vector<std::string>& path) {
            for (const CLI::Option* opt : app->get_options())
                if (!opt->get_lnames().empty()) out.push_back({path, opt});
            for (CLI::App* sub : app->get_subcommands([](CLI::App*) { return true; })) {
                std::vector<std::string> below = path;
                below.push_back(sub->get_name());
                walk(sub, below);
            }
        };
    walk(&cli, {});
    return out;
}

int run_cli(int argc, char** argv) {
    CommandLine line;
    CLI::App& cli = line.cli;
    try {
        cli.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
        int code = cli.exit(e);  // prints help or the error
        return code == 0 ? 0 : 2;
    }
    try {
        for (const Command& c : line.commands)
            if (c.app->parsed()) return c.run();
        if (line.bare) return line.bare();  // `kvscope` alone opens the window
        std::fprintf(stderr, "%s", cli.help().c_str());
        return 2;
    } catch (const std::bad_alloc&) {
        return fail("out of memory");
    } catch (const std::exception& e) {
        return fail(e.what());
    }
    return 2;
}

}  // namespace kvscope::app
