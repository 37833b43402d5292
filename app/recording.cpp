#include "app/recording.h"

#include <cstdio>
#include <filesystem>

#include "app/backend_flag.h"
#include "app/commands.h"
#include "app/data_paths.h"
#include "app/machine_bandwidth.h"
#include "app/progress_line.h"
#include "base/terminal_text.h"

namespace kvscope::app {

RunInfo run_info_for(Engine& engine, const std::string& allocator,
                     const std::string& options_json) {
    const ModelConfig& c = engine.config();
    RunInfo info;
    info.num_blocks = engine.options().num_blocks;
    info.block_size = engine.options().block_size;
    info.allocator = allocator;
    info.model = model_path_for_recording(engine.model().path);
    info.backend = engine.forward().backend_name();
    info.n_layers = c.n_layers;
    info.n_heads = c.n_heads;
    info.n_kv_heads = c.n_kv_heads;
    info.head_dim = c.head_dim;
    info.vocab_size = c.vocab_size;
    info.options_json = options_json;
    info.weight_bytes = engine.model().weights.bytes();
    info.threads = engine.threads().num_threads();
    info.bandwidth = machine_bandwidth();
    info.kv_bytes_per_block = static_cast<int64_t>(engine.kv().bytes_per_block());
    return info;
}

Result<std::unique_ptr<Recorder>> start_recording(const std::string& path, Engine& engine,
                                                  const std::string& allocator,
                                                  const std::string& options_json, bool force) {
    RecorderOptions options;
    options.replace_existing = force;
    auto rec = Recorder::create(path, run_info_for(engine, allocator, options_json), options);
    if (!rec) return rec.error();
    engine.reporter().probe = rec->get();
    return rec;
}

int finish_recording(std::unique_ptr<Recorder>& recorder, Engine& engine) {
    finish_gpu_probes(engine.reporter());
    engine.reporter().probe = nullptr;
    // Closing indexes the attention rows and folds the log into the file: seconds for a big
    // recording, which a terminal should not sit through in silence.
    ProgressLine progress;
    progress.show("finishing " + terminal_safe(recorder->path()) + " (" +
                  std::to_string(recorder->events_written()) + " events)...");
    Status s = recorder->close();
    progress.clear();
    if (!s) return fail("recording failed: " + s.error().message);
    std::error_code ec;
    auto bytes = std::filesystem::file_size(recorder->path(), ec);
    std::fprintf(stderr, "kvscope: recorded %llu events to %s (%.1f KiB, %.1f bytes/event)\n",
                 static_cast<unsigned long long>(recorder->events_written()),
                 terminal_safe(recorder->path()).c_str(), static_cast<double>(bytes) / 1024.0,
                 recorder->events_written()
                     ? static_cast<double>(bytes) / static_cast<double>(recorder->events_written())
                     : 0.0);
    return 0;
}

}  // namespace kvscope::app
