// `kvscope export FILE.kvs --format perfetto|csv|sqlite --out PATH`.
#include <cstdio>
#include <memory>

#include "app/commands.h"
#include "base/output_file.h"
#include "base/terminal_text.h"
#include "sessions/export.h"
#include "sessions/session_reader.h"
#include "sessions/sql_export.h"

namespace kvscope::app {

namespace {
struct ExportOptions {
    std::string path, format, out;
    bool force = false;
};
}  // namespace

Command register_export(CLI::App& cli) {
    auto o = std::make_shared<ExportOptions>();
    CLI::App* sub = cli.add_subcommand(
        "export", "Export a session as a Perfetto/Chrome trace, CSV or SQLite tables");
    sub->add_option("file", o->path, "Session file (.kvs)")->required();
    sub->add_option("--format", o->format,
                    "perfetto | csv | sqlite (every event in a table per kind: docs/sql-export.md)")
        ->required()
        ->check(CLI::IsMember({"perfetto", "csv", "sqlite"}));
    sub->add_option("--out", o->out, "Output file")->required();
    add_force_flag(*sub, o->force);
    return {sub, [o] {
                if (check_output(o->out, o->force, {o->path})) return 1;
                // Step by step (SessionReader::for_each_step), never the whole run at once: an
                // export of any length holds one step.
                // The SQL export keeps every step's scalars as its steps table.
                const bool sqlite = o->format == "sqlite";
                auto reader = SessionReader::open(o->path, /*step_summaries=*/sqlite);
                if (!reader) return fail(reader.error().message);
                auto out = OutputFile::create(o->out, {.force = o->force, .inputs = {o->path}});
                if (!out) return fail(out.error().message);
                if (sqlite) {
                    // SQLite writes the temporary file itself; it is renamed into place the
                    // same way, and removed on any failure.
                    auto n = export_sqlite(**reader, (*out)->temporary_path(), o->out);
                    if (!n) return fail(n.error().message);
                    if (Status c = (*out)->commit(); !c) return fail(c.error().message);
                    std::fprintf(
                        stderr, "kvscope: wrote %s (%lld events, %lld steps, %lld requests)\n",
                        terminal_safe(o->out).c_str(), static_cast<long long>(n->events),
                        static_cast<long long>(n->steps), static_cast<long long>(n->requests));
                    return 0;
                }
                Status s = o->format == "perfetto" ? export_perfetto(**reader, (*out)->stream())
                                                   : export_csv(**reader, (*out)->stream());
                if (!s) return fail(s.error().message);
                if (Status c = (*out)->commit(); !c) return fail(c.error().message);
                std::fprintf(stderr, "kvscope: wrote %s\n", terminal_safe(o->out).c_str());
                return 0;
            }};
}

}  // namespace kvscope::app
