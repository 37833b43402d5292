// Recorder throughput and file cost: a realistic event mix (block traffic, tokens, metrics,
// phases) for many steps, emitted as fast as possible; reports events/s sustained through
// close(), bytes per event, and the same stream kept only in memory for comparison.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>

#include "sessions/recorder.h"

using namespace kvscope;

namespace {
std::vector<Event> step_events(int64_t step, std::mt19937& rng, int per_step) {
    std::vector<Event> out;
    static const char* const metrics[] = {"blocks_used", "blocks_free", "blocks_cached", "internal_fragmentation",
                                          "external_fragmentation", "fragmentation", "utilization", "prefix_hit_rate"};
    Event b;
    b.kind = EventKind::kStepBegin;
    b.a = 32;
    b.c = 32;
    out.push_back(b);
    for (int i = 0; i < per_step - 12; ++i) {
        Event e;
        int r = static_cast<int>(rng() % 10);
        if (r < 4) {
            e.kind = EventKind::kToken;
            e.request = static_cast<int32_t>(rng() % 64);
            e.a = static_cast<int32_t>(step % 500);
            e.b = static_cast<int32_t>(rng() % 2048);
            e.text = " the";
        } else if (r < 7) {
            e.kind = EventKind::kBlockAlloc;
            e.request = static_cast<int32_t>(rng() % 64);
            e.block = static_cast<int32_t>(rng() % 4096);
            e.a = static_cast<int32_t>(rng() % 32);
        } else {
            e.kind = EventKind::kBlockFree;
            e.request = static_cast<int32_t>(rng() % 64);
            e.block = static_cast<int32_t>(rng() % 4096);
            e.a = static_cast<int32_t>(rng() % 32);
        }
        out.push_back(e);
    }
    for (const char* m : metrics) {
        Event e;
        e.kind = EventKind::kMetric;
        e.text = m;
        e.value = static_cast<double>(rng() % 1000) / 1000.0;
        out.push_back(e);
    }
    Event p;
    p.kind = EventKind::kPhase;
    p.wide = 1234567;
    out.push_back(p);
    Event end;
    end.kind = EventKind::kStepEnd;
    end.a = 32;
    end.value = 0.004;
    out.push_back(end);
    for (auto& e : out) e.step = step;
    return out;
}
}  // namespace

int main(int argc, char** argv) {
    int64_t steps = argc > 1 ? std::atoll(argv[1]) : 20000;
    int per_step = argc > 2 ? std::atoi(argv[2]) : 100;
    std::string path = (std::filesystem::temp_directory_path() / "kvscope-bench-recorder.kvs").string();
    RunInfo info;
    info.num_blocks = 4096;
    info.block_size = 16;
    // Pre-build the stream so only recording is timed.
    std::mt19937 rng(1);
    std::vector<std::vector<Event>> stream;
    for (int64_t s = 0; s < steps; ++s) stream.push_back(step_events(s, rng, per_step));
    size_t total = 0;
    for (const auto& v : stream) total += v.size();

    using clock = std::chrono::steady_clock;
    auto t0 = clock::now();
    std::vector<Event> memory;
    memory.reserve(total);
    for (const auto& v : stream)
        for (const Event& e : v) memory.push_back(e);
    double mem_s = std::chrono::duration<double>(clock::now() - t0).count();

    auto rec = Recorder::create(path, info);
    if (!rec) {
        std::fprintf(stderr, "%s\n", rec.error().message.c_str());
        return 1;
    }
    t0 = clock::now();
    double emit_s = 0;
    for (auto& v : stream)
        for (Event& e : v) (*rec)->emit(std::move(e));
    emit_s = std::chrono::duration<double>(clock::now() - t0).count();
    Status s = (*rec)->close();
    double total_s = std::chrono::duration<double>(clock::now() - t0).count();
    if (!s) {
        std::fprintf(stderr, "%s\n", s.error().message.c_str());
        return 1;
    }
    auto bytes = std::filesystem::file_size(path);
    std::printf("events                      %zu (%lld steps x %d)\n", total, static_cast<long long>(steps), per_step);
    std::printf("%-28s %14s %14s\n", "", "events/s", "engine-side");
    std::printf("%-28s %14.0f %11.1f ns\n", "copy into a vector (floor)", static_cast<double>(total) / mem_s, mem_s * 1e9 / static_cast<double>(total));
    std::printf("%-28s %14.0f %11.1f ns\n", "Recorder, through close()", static_cast<double>(total) / total_s, emit_s * 1e9 / static_cast<double>(total));
    std::printf("file                        %.1f MiB, %.1f bytes/event\n", static_cast<double>(bytes) / (1 << 20),
                static_cast<double>(bytes) / static_cast<double>(total));
    std::filesystem::remove(path);
    return 0;
}
