// `kvscope export FILE.kvs --format perfetto|csv --out PATH`.
#include <cstdio>
#include <memory>

#include "app/commands.h"
#include "sessions/export.h"
#include "sessions/session_reader.h"

namespace kvscope::app {

namespace {
struct ExportOptions {
    std::string path, format, out;
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
    return {sub, [o] {
                auto reader = SessionReader::open(o->path);
                if (!reader) return fail(reader.error().message);
                Status s = o->format == "perfetto" ? export_perfetto(**reader, o->out)
                                                   : export_csv(**reader, o->out);
                if (!s) return fail(s.error().message);
                std::fprintf(stderr, "kvscope: wrote %s\n", o->out.c_str());
                return 0;
            }};
}

}  // namespace kvscope::app
