// `kvscope export FILE.kvs --format perfetto|csv --out PATH`.
#include <cstdio>
#include <memory>

#include "app/commands.h"
#include "base/output_file.h"
#include "base/terminal_text.h"
#include "sessions/export.h"
#include "sessions/session_reader.h"

namespace kvscope::app {

namespace {
struct ExportOptions {
    std::string path, format, out;
    bool force = false;
};
}  // namespace

Command register_export(CLI::App& cli) {
    auto o = std::make_shared<ExportOptions>();
    CLI::App* sub =
        cli.add_subcommand("export", "Export a session as a Perfetto/Chrome trace or CSV");
    sub->add_option("file", o->path, "Session file (.kvs)")->required();
    sub->add_option("--format", o->format, "perfetto | csv")
        ->required()
        ->check(CLI::IsMember({"perfetto", "csv"}));
    sub->add_option("--out", o->out, "Output file")->required();
    add_force_flag(*sub, o->force);
    return {sub, [o] {
                if (check_output(o->out, o->force, {o->path})) return 1;
                // Step by step (SessionReader::for_each_step), never the whole run at once: an
                // export of any length holds one step.
                auto reader = SessionReader::open(o->path, /*step_summaries=*/false);
                if (!reader) return fail(reader.error().message);
                auto out = OutputFile::create(o->out, {.force = o->force, .inputs = {o->path}});
                if (!out) return fail(out.error().message);
                Status s = o->format == "perfetto" ? export_perfetto(**reader, (*out)->stream())
                                                   : export_csv(**reader, (*out)->stream());
                if (!s) return fail(s.error().message);
                if (Status c = (*out)->commit(); !c) return fail(c.error().message);
                std::fprintf(stderr, "kvscope: wrote %s\n", terminal_safe(o->out).c_str());
                return 0;
            }};
}

}  // namespace kvscope::app
