// `kvscope check FILE.kvs [--repair]`: verifies a session file; exit 0 when sound, 1 with the
// problems. --repair first folds a crashed recording's write-ahead log into the file.
#include <cstdio>
#include <memory>

#include "app/commands.h"
#include "base/terminal_text.h"
#include "sessions/session_check.h"
#include "sessions/session_repair.h"

namespace kvscope::app {

namespace {
struct CheckOptions {
    std::string path;
    bool repair = false;
};

int run_check(const CheckOptions& o) {
    std::string name = terminal_safe(o.path);
    if (o.repair) {
        auto rep = repair_session(o.path);
        if (!rep) return fail(rep.error().message);
        if (rep->had_wal && rep->wal_had_frames)
            std::printf("%s: folded its write-ahead log (%.1f KiB) into the file\n", name.c_str(),
                        static_cast<double>(rep->wal_bytes) / 1024.0);
        else if (rep->had_wal)
            std::printf(
                "%s: its write-ahead log (%.1f KiB) held no frame it could use (restarted "
                "and cut off, or damaged): nothing to fold in; removed\n",
                name.c_str(), static_cast<double>(rep->wal_bytes) / 1024.0);
        else
            std::printf("%s: no write-ahead log to fold in\n", name.c_str());
    }
    CheckReport r = check_session(o.path);
    if (!r.opened) return fail(r.problems.empty() ? o.path + ": cannot open" : r.problems.front());
    if (r.problems.empty()) {
        std::printf("%s: ok (%lld steps, %lld events, %lld keyframes)\n", name.c_str(),
                    static_cast<long long>(r.steps), static_cast<long long>(r.events),
                    static_cast<long long>(r.keyframes));
        return 0;
    }
    std::fprintf(stderr, "%s: %zu problem%s:\n", name.c_str(), r.problems.size(),
                 r.problems.size() == 1 ? "" : "s");
    for (const auto& p : r.problems)
        std::fprintf(stderr, "  - %s\n", terminal_safe(p).c_str());
    return 1;
}
}  // namespace

Command register_check(CLI::App& cli) {
    auto o = std::make_shared<CheckOptions>();
    CLI::App* sub = cli.add_subcommand("check", "Verify a session file");
    sub->add_option("file", o->path, "Session file (.kvs)")->required();
    sub->add_flag("--repair", o->repair,
                  "First fold a crashed or stopped recording's write-ahead log (FILE-wal) into "
                  "the file, so the file alone is the whole session");
    return {sub, [o] { return run_check(*o); }};
}

}  // namespace kvscope::app
