// `kvscope commands-table` (hidden): the README's table of commands, made from the command line's
// own definition, so the documentation cannot drift from the flags. Options in the "Window"
// group (shared by gui, replay, compare and bare kvscope) are listed once, in their own row.
#include <cstdio>
#include <string>

#include "app/commands.h"

namespace kvscope::app {

namespace {
constexpr const char* kWindowGroup = "Window";

// What follows an option in the table: FILE, N, X, a|b, or nothing for a flag.
std::string placeholder(const CLI::Option& opt) {
    if (opt.get_items_expected_max() == 0) return "";  // a flag
    static const char* const kFiles[] = {
        "--model", "--workload",   "--record", "--summary-json", "--out",
        "--file",  "--screenshot", "--script", "--frame-stats",  "--record-path"};
    for (const char* f : kFiles)
        if (opt.get_name() == f) return "FILE";
    std::string type = opt.get_type_name();
    if (auto brace = type.find('{'); brace != std::string::npos) {  // IsMember: {a,b}
        std::string choices = type.substr(brace + 1, type.find('}') - brace - 1);
        for (char& c : choices)
            if (c == ',') c = '|';
        return choices;
    }
    if (type.rfind("INT", 0) == 0 || type.rfind("UINT", 0) == 0) return "N";
    if (type.rfind("FLOAT", 0) == 0) return "X";
    return "TEXT";
}

std::string usage(const CLI::App& sub, bool skip_window_group) {
    std::string out;
    for (const CLI::App* a = &sub; a->get_parent(); a = a->get_parent())
        out = " " + a->get_name() + out;
    out = "kvscope" + out;
    for (const CLI::Option* opt : sub.get_options()) {
        if (opt->get_name() == "--help" || opt->get_name() == "--version") continue;
        if (skip_window_group && opt->get_group() == kWindowGroup) continue;
        std::string item;
        if (opt->get_positional()) {
            item = opt->get_name();
            for (char& c : item)
                c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
        } else {
            item = opt->get_name();
            if (std::string p = placeholder(*opt); !p.empty()) item += " " + p;
        }
        out += " " + (opt->get_required() ? item : "[" + item + "]");
    }
    bool has_window =
        !sub.get_options([](const CLI::Option* o) { return o->get_group() == kWindowGroup; })
             .empty();
    if (skip_window_group && has_window) out += " [window options]";
    return out;
}

// Inside a Markdown table cell a | must be escaped.
std::string cell(std::string text) {
    std::string out;
    for (char c : text) {
        if (c == '|') out += '\\';
        out += c;
    }
    return out;
}
}  // namespace

std::string commands_table(const CLI::App& cli) {
    std::string out = "| command | what it does |\n| --- | --- |\n";
    out += "| `" + cell(usage(cli, true)) + "` | the window on a live run of the bundled model |\n";
    const CLI::App* window_options_from = nullptr;
    for (const CLI::App* sub : cli.get_subcommands([](const CLI::App* s) {
             return !s->get_group().empty();  // hidden ones have no group
         })) {
        // A command of commands (bench memory, ...) lists each of them.
        auto children = sub->get_subcommands([](const CLI::App*) { return true; });
        if (children.empty())
            out += "| `" + cell(usage(*sub, true)) + "` | " + cell(sub->get_description()) + " |\n";
        for (const CLI::App* child : children)
            out += "| `" + cell(usage(*child, true)) + "` | " + cell(child->get_description()) +
                   " |\n";
        // The row lists every window option: from the command that takes the most of them
        // (attach --gui shares its own --force rather than taking the window's).
        auto window_options = [](const CLI::App* a) {
            return a
                ->get_options([](const CLI::Option* o) { return o->get_group() == kWindowGroup; })
                .size();
        };
        if (window_options(sub) > 0 &&
            (!window_options_from || window_options(sub) > window_options(window_options_from)))
            window_options_from = sub;
    }
    if (window_options_from) {
        std::string options;
        for (const CLI::Option* opt : window_options_from->get_options(
                 [](const CLI::Option* o) { return o->get_group() == kWindowGroup; })) {
            std::string p = placeholder(*opt);
            options += (options.empty() ? "" : " ") + std::string("`") + opt->get_name() +
                       (p.empty() ? "" : " " + p) + "`";
        }
        out += "| window options | " + cell(options) +
               ": headless screenshots, scripted input, frame timings (`--help` of each says "
               "what they do) |\n";
    }
    return out;
}

Command register_commands_table(CLI::App& cli) {
    CLI::App* sub = cli.add_subcommand("commands-table", "");
    sub->group("");  // hidden: it writes the README's table of commands
    return {sub, [&cli] {
                std::string table = commands_table(cli);
                std::fwrite(table.data(), 1, table.size(), stdout);
                return 0;
            }};
}

}  // namespace kvscope::app
