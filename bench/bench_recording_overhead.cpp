// What recording costs decode, in one process: the same greedy generation run again and again,
// rotating between no probe, the Recorder, and the Recorder with attention capture of one layer,
// so machine noise falls on every mode alike. Prints decode tokens/s (median) per mode and the
// slowdown against no recording.
//   bench_recording_overhead [MODEL] [TOKENS] [ROUNDS] [THREADS]
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "app/data_paths.h"
#include "app/recording.h"
#include "engine/attention_spec.h"
#include "engine/generate.h"
#include "engine/model_loader.h"

using namespace kvscope;

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
        bool record;
        std::vector<uint8_t> capture;
        std::vector<double> tps;
    };
    std::vector<Mode> modes = {{"no recording", false, {}, {}},
                               {"recording", true, {}, {}},
                               {"recording + attention of layer 0", true, layer0.value(), {}}};
    for (int r = 0; r < rounds + 1; ++r) {
        for (Mode& m : modes) {
            auto engine = Engine::create(shared, eo);
            if (!engine) return 1;
            std::unique_ptr<Recorder> rec;
            if (m.record) {
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
    double base = median(modes[0].tps);
    std::printf("decode of %d tokens, %d rounds, %d threads, model %s\n", tokens, rounds, threads,
                path.c_str());
    std::printf("%-36s %12s %10s\n", "mode", "tokens/s", "slowdown");
    for (const Mode& m : modes) {
        double v = median(m.tps);
        std::printf("%-36s %12.1f %9.1f%%\n", m.name, v, 100.0 * (base - v) / base);
    }
    return 0;
}
