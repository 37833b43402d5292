// What recording costs decode, in one process: the same greedy generation run again and again,
// rotating between no probe, the Recorder without op spans, the Recorder (op spans on, as every
// recording has them), and the Recorder with attention capture of one layer, so machine noise
// falls on every mode alike. Prints decode tokens/s (median) per mode, the slowdown against no
// recording, and what the op spans add to a recording.
//   bench_recording_overhead [MODEL] [TOKENS] [ROUNDS] [THREADS]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "app/data_paths.h"
#include "app/recording.h"
#include "engine/attention_spec.h"
#include "engine/generate.h"
#include "engine/model_loader.h"

using namespace kvscope;

namespace {
// Takes every event and keeps none: what reporting costs the engine thread alone, without a
// writer thread encoding and storing them.
struct DroppingProbe : Probe {
    uint64_t events = 0;
    void emit(Event&&) override { ++events; }
    void emit_all(std::vector<Event>& all) override { events += all.size(); }
};
}  // namespace

int main(int argc, char** argv) {
    auto bundled = app::model_path_or_bundled("");
    std::string path = argc > 1 ? argv[1] : bundled ? bundled.value() : "";
    int tokens = argc > 2 ? std::atoi(argv[2]) : 440;
    int rounds = argc > 3 ? std::atoi(argv[3]) : 15;
    int threads = argc > 4 ? std::atoi(argv[4]) : 0;
    auto model = load_model(path);
    if (!model) {
        std::fprintf(stderr, "%s\n", model.error().message.c_str());
        return 1;
    }
    auto shared = std::make_shared<LoadedModel>(std::move(model).value());
    EngineOptions eo;
    eo.threads = threads;
    std::string file =
        (std::filesystem::temp_directory_path() / "kvscope-bench-overhead.kvs").string();
    auto layer0 = parse_attention_spec("0:*", shared->config);
    if (!layer0) return 1;

    struct Mode {
        const char* name;
        int record;  // 0 no probe, 1 the Recorder, 2 a probe that drops every event
        std::vector<uint8_t> capture;
        bool ops;
        std::vector<double> tps;
    };
    std::vector<Mode> modes = {{"no recording", 0, {}, false, {}},
                               {"recording, no op spans", 1, {}, false, {}},
                               {"recording (op spans)", 1, {}, true, {}},
                               {"recording + attention of layer 0", 1, layer0.value(), true, {}},
                               {"op spans to a dropping probe", 2, {}, true, {}}};
    // MODES=0,4 (indices into the table above) runs only those, to look closer at two of them.
    if (const char* only = std::getenv("MODES")) {
        std::vector<Mode> picked;
        for (const char* p = only; *p;) {
            char* end = nullptr;
            long i = std::strtol(p, &end, 10);
            if (end == p || i < 0 || i >= static_cast<long>(modes.size())) {
                std::fprintf(stderr, "MODES: indices 0..%zu, comma separated\n", modes.size() - 1);
                return 2;
            }
            picked.push_back(modes[static_cast<size_t>(i)]);
            p = *end == ',' ? end + 1 : end;
        }
        modes = picked;
    }
    for (int r = 0; r < rounds + 1; ++r) {
        // Each round starts at the next mode, so every mode follows every other equally often:
        // closing a recording leaves the kernel writing the file back, which slows whatever
        // runs next.
        for (size_t k = 0; k < modes.size(); ++k) {
            Mode& m = modes[(k + static_cast<size_t>(r)) % modes.size()];
            auto engine = Engine::create(shared, eo);
            if (!engine) return 1;
            std::unique_ptr<Recorder> rec;
            DroppingProbe dropping;
            if (m.record == 2) (*engine)->reporter().probe = &dropping;
            if (m.record == 1) {
                auto started = app::start_recording(file, **engine, "paged", "{}", /*force=*/true);
                if (!started) {
                    std::fprintf(stderr, "%s\n", started.error().message.c_str());
                    return 1;
                }
                rec = std::move(started).value();
            }
            GenerateRequest req;
            req.prompt = {1};
            req.max_tokens = tokens;
            req.capture_attention = m.capture;
            req.trace_ops = m.ops;
            auto stats = generate(**engine, req, [](int32_t) {});
            if (!stats) return 1;
            if (rec && rec->close().ok() == false) return 1;
            (*engine)->reporter().probe = nullptr;
            if (r > 0)  // the first round warms caches and the allocator
                m.tps.push_back((stats->generated_tokens - 1) / stats->decode_seconds);
        }
    }
    std::filesystem::remove(file);
    auto median = [](std::vector<double> v) {
        std::sort(v.begin(), v.end());
        return v[v.size() / 2];
    };
    // Slowdowns are medians of each round's ratio: the modes of one round ran back to back, so
    // the machine's drift between rounds cancels.
    auto slowdown = [&](const Mode& m, const Mode& base) {
        std::vector<double> r;
        for (size_t i = 0; i < m.tps.size(); ++i)
            r.push_back(1.0 - m.tps[i] / base.tps[i]);
        return 100.0 * median(r);
    };
    std::printf("decode of %d tokens, %d rounds, %d threads, model %s\n", tokens, rounds, threads,
                path.c_str());
    std::printf("%-36s %12s %10s\n", "mode", "tokens/s", "slowdown");
    for (const Mode& m : modes)
        std::printf("%-36s %12.1f %9.1f%%\n", m.name, median(m.tps), slowdown(m, modes[0]));
    if (modes.size() == 5)
        std::printf("op spans cost a recording %.1f%% of decode tokens/s\n",
                    slowdown(modes[2], modes[1]));
    return 0;
}
