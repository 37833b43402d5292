// Values of command-line options, as a user may type them: NaN, infinities, huge and negative
// numbers, empty text, garbage. Two halves, nothing run and no process started:
// - one option of the real command line (every subcommand's, found from app::CommandLine, so a
//   flag added later is fuzzed too) parsed with the value by CLI11 and kvscope's checks; a
//   floating-point option that takes it must hold a finite number;
// - kvscope's own value parsers on the same text: parse_real, --kv-budget, endpoints and rank
//   ports, --prompt-ids, --capture-attention, each held to its range.
#include <fuzzer/FuzzedDataProvider.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "app/commands.h"
#include "app/prompt_tokens.h"
#include "attach/endpoint.h"
#include "base/real_number.h"
#include "engine/attention_spec.h"
#include "engine/kv_eviction.h"

namespace {

void check(bool ok) {
    if (!ok) std::abort();  // libFuzzer keeps the input
}

// One command line for every input: CLI11 clears what the last parse left before the next, and
// building it (some 150 options) costs more than a parse.
kvscope::app::CommandLine& command_line() {
    static kvscope::app::CommandLine line;
    return line;
}

struct Flag {
    std::vector<std::string> path;  // subcommands
    std::string name;               // --flag
    bool floating = false;
};

// Every option that takes a value, of every subcommand.
const std::vector<Flag>& every_flag() {
    static const std::vector<Flag> flags = [] {
        std::vector<Flag> out;
        for (const auto& at : command_line().every_option())
            if (at.option->get_type_size() != 0)
                out.push_back(
                    {at.subcommands, at.flag(), at.option->get_type_name().rfind("FLOAT", 0) == 0});
        return out;
    }();
    return flags;
}

void parse_with_cli11(const Flag& flag, const std::string& value, bool joined) {
    CLI::App& cli = command_line().cli;
    std::vector<std::string> args = {"kvscope"};
    args.insert(args.end(), flag.path.begin(), flag.path.end());
    if (joined) {
        args.push_back(flag.name + "=" + value);
    } else {
        args.push_back(flag.name);
        args.push_back(value);
    }
    std::vector<char*> argv;
    for (std::string& a : args)
        argv.push_back(a.data());
    try {
        cli.parse(static_cast<int>(argv.size()), argv.data());
    } catch (const CLI::ParseError&) {
        return;  // refused (or --help): what run_cli prints as one line and exits 2 with
    }
    if (!flag.floating) return;
    CLI::App* app = &cli;
    for (const std::string& name : flag.path)
        app = app->get_subcommand(name);
    const CLI::Option* opt = app->get_option_no_throw(flag.name);
    if (opt && opt->count() > 0) check(std::isfinite(opt->as<double>()));
}

void parse_directly(const std::string& value, int32_t rank) {
    if (auto v = kvscope::parse_real(value, {-1, 100}); v)
        check(std::isfinite(*v) && *v >= -1 && *v <= 100);

    kvscope::EvictionOptions budget;
    if (kvscope::parse_kv_budget(value, budget).ok())
        check(budget.budget_percent == 0
                  ? budget.budget_tokens >= 1 && budget.budget_tokens <= (1 << 24)
                  : budget.budget_tokens == 0 && budget.budget_percent > 0 &&
                        budget.budget_percent <= 100);

    (void)kvscope::attach::check_endpoint(value);
    if (auto ep = kvscope::attach::endpoint_for_rank("tcp://127.0.0.1:" + value, rank); ep) {
        const std::string port = ep->substr(ep->rfind(':') + 1);
        int64_t n = -1;
        auto [end, error] = std::from_chars(port.data(), port.data() + port.size(), n);
        check(port == "*" || (error == std::errc() && n >= 0 && n <= kvscope::attach::kMaxPort));
    }

    if (auto ids = kvscope::app::parse_token_ids(value, 512); ids)
        for (int32_t id : *ids)
            check(id >= 0 && id < 512);

    kvscope::ModelConfig config;
    config.n_layers = 4;
    config.n_heads = 8;
    config.n_kv_heads = 2;
    (void)kvscope::parse_attention_spec(value, config);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    FuzzedDataProvider in(data, size);
    const std::vector<Flag>& flags = every_flag();
    const Flag& flag = flags[in.ConsumeIntegralInRange<size_t>(0, flags.size() - 1)];
    const bool joined = in.ConsumeBool();
    const auto rank = in.ConsumeIntegralInRange<int32_t>(0, 300);
    const std::string value = in.ConsumeRemainingBytesAsString();
    parse_with_cli11(flag, value, joined);
    parse_directly(value, rank);
    return 0;
}
