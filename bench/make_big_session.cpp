// Writes session files at sizes the bundled model cannot reach, through the real Recorder, for
// the window's responsiveness benchmark (bench/gui.sh). The events are synthetic but follow the
// engine's vocabulary and invariants, so every panel reads them as it reads a real run:
//   blocks  OUT  a pool of 100 000 blocks filled by 2 000 requests (shared prefixes, frees,
//                cached blocks), with their tokens
//   heatmap OUT  one request of 32 768 tokens with attention rows for layer 0, head 0 (every
//                8th query row: the whole triangle at u8 would be 512 MiB), shaped like a
//                trained model's (a sink on token 0, a local window, a few far looks)
#include <cmath>
#include <cstdio>
#include <random>
#include <string>

#include "sessions/recorder.h"

using namespace kvscope;

namespace {

struct Writer {
    Recorder& rec;
    int64_t step = 0;
    void emit(EventKind kind, int32_t request, int32_t block, int32_t a, int32_t b = 0,
              int32_t c = 0, const std::string& text = {}, double value = 0, int64_t wide = 0) {
        Event e;
        e.kind = kind;
        e.step = step;
        e.request = request;
        e.block = block;
        e.a = a;
        e.b = b;
        e.c = c;
        e.text = text;
        e.value = value;
        e.wide = wide;
        rec.emit(std::move(e));
    }
    void metrics(int32_t used, int32_t total) {
        emit(EventKind::kMetric, -1, -1, 0, 0, 0, "blocks_used", used);
        emit(EventKind::kMetric, -1, -1, 0, 0, 0, "blocks_free", total - used);
        emit(EventKind::kMetric, -1, -1, 0, 0, 0, "fragmentation", 0.02);
        emit(EventKind::kMetric, -1, -1, 0, 0, 0, "utilization", double(used) / total);
    }
    void end_step(int32_t running) {
        emit(EventKind::kStepEnd, -1, -1, running, 0, 0, {}, 0.004);
        ++step;
    }
};

const char* const kWords[] = {" the", " LORD", " and", " said", " unto",
                              " of",  " God",  ",",    " in",   " him"};

std::unique_ptr<Recorder> open(const std::string& path, int32_t blocks, int32_t block_size) {
    RunInfo info;
    info.num_blocks = blocks;
    info.block_size = block_size;
    info.model = "synthetic (bench/make_big_session)";
    info.n_layers = 1;
    info.n_heads = 1;
    info.n_kv_heads = 1;
    info.head_dim = 32;
    RecorderOptions o;
    o.keyframe_events = 400000;
    auto r = Recorder::create(path, info, o);
    if (!r) {
        std::fprintf(stderr, "make_big_session: %s\n", r.error().message.c_str());
        std::exit(1);
    }
    return std::move(r).value();
}

void write_blocks(const std::string& path) {
    const int32_t kBlocks = 100000, kRequests = 2000, kPerRequest = 50, kBs = 16;
    auto rec = open(path, kBlocks, kBs);
    Writer w{*rec};
    std::mt19937 rng(1);
    int32_t next_block = 0, used = 0;
    const int32_t kShared = 4;  // every request starts with one of 8 shared prefixes
    std::vector<std::vector<int32_t>> prefixes(8);
    for (int32_t r = 0; r < kRequests; ++r) {
        w.emit(EventKind::kStepBegin, -1, -1, 1, kPerRequest * kBs, 0);
        w.emit(EventKind::kRequestArrive, r, -1, kPerRequest * kBs, 0, 1,
               std::string("r").append(std::to_string(r + 1)));
        w.emit(EventKind::kRequestAdmit, r, -1, 0, 0);
        auto& prefix = prefixes[static_cast<size_t>(r % 8)];
        for (int32_t l = 0; l < kPerRequest; ++l) {
            if (l < kShared && prefix.size() == kShared) {
                w.emit(EventKind::kBlockShare, r, prefix[static_cast<size_t>(l)], l, 2);
                continue;
            }
            if (next_block >= kBlocks) break;
            int32_t b = next_block++;
            ++used;
            w.emit(EventKind::kBlockAlloc, r, b, l);
            if (l < kShared) prefix.push_back(b);
            if (l < kPerRequest - 1)
                w.emit(EventKind::kBlockHashed, -1, b, l, 0, 0, {}, 0, static_cast<int64_t>(rng()));
        }
        for (int32_t p = 0; p < kPerRequest * kBs; ++p)
            w.emit(EventKind::kToken, r, -1, p, static_cast<int32_t>(rng() % 2048), p < 64,
                   kWords[rng() % 10]);
        // Some requests finish: their unshared blocks go back (hashed ones stay cached).
        if (r % 5 == 4) {
            w.emit(EventKind::kRequestFinish, r, -1, kPerRequest * kBs - 64, 0);
        }
        w.metrics(used, kBlocks);
        w.end_step(r + 1);
    }
    if (auto s = rec->close(); !s) {
        std::fprintf(stderr, "make_big_session: %s\n", s.error().message.c_str());
        std::exit(1);
    }
}

void write_heatmap(const std::string& path) {
    const int32_t kTokens = 32768, kBs = 16, kEvery = 8;
    auto rec = open(path, kTokens / kBs, kBs);
    Writer w{*rec};
    std::mt19937 rng(2);
    w.emit(EventKind::kStepBegin, -1, -1, 1, kTokens, 0);
    w.emit(EventKind::kRequestArrive, 0, -1, kTokens, 1, 1, "long");
    w.emit(EventKind::kRequestAdmit, 0, -1, 0, 0);
    for (int32_t l = 0; l < kTokens / kBs; ++l)
        w.emit(EventKind::kBlockAlloc, 0, l, l);
    for (int32_t p = 0; p < kTokens; ++p)
        w.emit(EventKind::kToken, 0, -1, p, static_cast<int32_t>(rng() % 2048), 1,
               kWords[rng() % 10]);
    std::vector<float> probs;
    for (int32_t q = 0; q < kTokens; q += kEvery) {
        probs.assign(static_cast<size_t>(q) + 1, 0.0f);
        probs[0] = 0.35f;                                   // sink
        for (int32_t k = std::max(0, q - 31); k <= q; ++k)  // local window
            probs[static_cast<size_t>(k)] +=
                0.5f / 32.0f * (1.0f + static_cast<float>(k - q + 31) / 31.0f);
        for (int i = 0; i < 4; ++i)  // a few far looks
            probs[rng() % (static_cast<size_t>(q) + 1)] += 0.03f;
        Event e;
        e.kind = EventKind::kAttentionRow;
        e.step = w.step;
        e.request = 0;
        e.a = 0;
        e.b = 0;
        e.c = q;
        e.payload.resize(probs.size());
        for (size_t k = 0; k < probs.size(); ++k)
            e.payload[k] = static_cast<uint8_t>(std::min(1.0f, probs[k]) * 255.0f + 0.5f);
        rec->emit(std::move(e));
    }
    w.metrics(kTokens / kBs, kTokens / kBs);
    w.end_step(1);
    if (auto s = rec->close(); !s) {
        std::fprintf(stderr, "make_big_session: %s\n", s.error().message.c_str());
        std::exit(1);
    }
}

}  // namespace

int main(int argc, char** argv) {
    if (argc != 3) {
        std::fprintf(stderr, "usage: make_big_session blocks|heatmap OUT.kvs\n");
        return 2;
    }
    std::string kind = argv[1];
    if (kind == "blocks")
        write_blocks(argv[2]);
    else if (kind == "heatmap")
        write_heatmap(argv[2]);
    else {
        std::fprintf(stderr, "make_big_session: unknown kind '%s' (blocks, heatmap)\n", argv[1]);
        return 2;
    }
    return 0;
}
