// Whole session files on arbitrary bytes: the reader opens them, seeks, reads attention rows and
// events, and `check` verifies them. Inputs are written to a temporary file (SQLite reads files);
// seed it with real recordings (assets/sessions/, fuzz/corpus/session).
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>

#include "sessions/session_check.h"
#include "sessions/session_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const std::string path =
        "/tmp/kvscope-fuzz-session-" + std::to_string(getpid()) + ".kvs";
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) return 0;
    std::fwrite(data, 1, size, f);
    std::fclose(f);
    if (auto reader = kvscope::SessionReader::open(path); reader.ok()) {
        kvscope::SessionReader& r = **reader;
        for (int64_t step : {r.last_step(), r.first_step(), (r.first_step() + r.last_step()) / 2})
            (void)r.state_at(step);
        (void)r.captured_heads();
        (void)r.attention(0, 0, 0, r.last_step());
        (void)r.events(r.first_step(), r.first_step() + 3);
    }
    (void)kvscope::check_session(path);
    return 0;
}
