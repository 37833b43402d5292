// `kvscope check FILE.kvs`: verifies a session file; exit 0 when sound, 1 with the problems.
#include <cstdio>
#include <memory>

#include "app/commands.h"
#include "sessions/session_check.h"

namespace kvscope::app {

Command register_check(CLI::App& cli) {
    auto path = std::make_shared<std::string>();
    CLI::App* sub = cli.add_subcommand("check", "Verify a session file");
    sub->add_option("file", *path, "Session file (.kvs)")->required();
    return {sub, [path] {
                CheckReport r = check_session(*path);
                if (r.problems.empty()) {
                    std::printf("%s: ok (%lld steps, %lld events, %lld keyframes)\n", path->c_str(),
                                static_cast<long long>(r.steps), static_cast<long long>(r.events),
                                static_cast<long long>(r.keyframes));
                    return 0;
                }
                std::fprintf(stderr, "%s: %zu problem%s:\n", path->c_str(), r.problems.size(),
                             r.problems.size() == 1 ? "" : "s");
                for (const auto& p : r.problems)
                    std::fprintf(stderr, "  - %s\n", p.c_str());
                return 1;
            }};
}

}  // namespace kvscope::app
