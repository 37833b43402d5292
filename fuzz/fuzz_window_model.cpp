// Whole session files on arbitrary bytes, through what the window builds from them before it
// draws (ui/ui_context.h, no display): open, seek the cursor across the run, each step's ops and
// DRAM samples, the eviction log, captured heads and their attention rows, an attached
// deployment's trees, series and history. A file check would flag must be refused or clamped
// here, never trusted into a crash. Seeds: the committed recordings (assets/sessions/).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "ui/ui_context.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::string path =
        "/tmp/kvscope-fuzz-window-" + std::to_string(getpid()) + ".kvs";
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) return 0;
    std::fwrite(data, 1, size, f);
    std::fclose(f);
    kvscope::ui::UiContext ctx;
    if (!ctx.open_session(path)) return 0;
    const int64_t last = ctx.last_step();
    for (int64_t step : {int64_t{0}, last / 2, last}) {
        ctx.set_cursor(step);
        (void)ctx.step_work();
        (void)ctx.step_summary();
        (void)ctx.run_status();
        if (ctx.attached()) {
            (void)ctx.attached_index();
            (void)ctx.attached_series();
            (void)ctx.attached_totals();
            (void)ctx.attached_history();
        }
    }
    (void)ctx.eviction_log();
    const auto heads = ctx.captured_heads();
    for (size_t i = 0; i < heads.size() && i < 4; ++i)
        (void)ctx.attention_rows(0, heads[i].first, heads[i].second);
    return 0;
}
