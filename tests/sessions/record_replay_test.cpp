// Record -> replay: the Timeline rebuilt from the session file equals the live engine's state at
// every step; the live TimelineState (fed by the same events) equals the engine's own tables.
#include <gtest/gtest.h>

#include <random>

#include "engine/scheduler.h"
#include "random_model.h"
#include "sessions/recorder.h"
#include "sessions/session_reader.h"
#include "test_support.h"

namespace kvscope {
namespace {

class StateProbe : public Probe {
  public:
    explicit StateProbe(const RunInfo& info) : state(info) {}
    void emit(Event&& e) override { state.apply(e); }
    TimelineState state;
};

std::vector<Request> workload(uint64_t seed, int vocab) {
    std::mt19937_64 rng(seed);
    std::vector<int32_t> shared(20);
    for (auto& t : shared)
        t = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
    std::vector<Request> out;
    for (int i = 0; i < 30; ++i) {
        Request r;
        r.id = "req";
        r.id += std::to_string(i);
        r.arrival_step = static_cast<int64_t>(rng() % 20);
        if (rng() % 2) r.prompt = shared;
        for (int k = 0, n = 1 + static_cast<int>(rng() % 25); k < n; ++k)
            r.prompt.push_back(static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab)));
        r.max_tokens = 1 + static_cast<int32_t>(rng() % 20);
        r.n = rng() % 6 == 0 ? 2 : 1;
        out.push_back(r);
    }
    return out;
}

// The live engine's state, in the Timeline's terms, compared field by field.
std::string compare_with_engine(const TimelineState& t, const Scheduler& s, Engine& e) {
    const BlockPool& pool = e.blocks().pool();
    for (BlockId b = 0; b < pool.num_blocks(); ++b)
        if (t.blocks[static_cast<size_t>(b)].refcount != pool.refcount(b))
            return "block " + std::to_string(b) + " refcount differs";
    for (const Sequence& q : s.sequences()) {
        auto it = t.requests.find(q.index);
        if (it == t.requests.end()) return "request " + q.name + " missing";
        const RequestState& r = it->second;
        if (r.token_ids != q.tokens) return "tokens of " + q.name + " differ";
        std::vector<int32_t> table(q.table.blocks.begin(), q.table.blocks.end());
        if (r.block_table != table) return "block table of " + q.name + " differs";
        const char* phase = request_phase_name(r.phase);
        if (std::string(phase) != sequence_state_name(q.state))
            return "state of " + q.name + ": " + phase + " vs " + sequence_state_name(q.state);
    }
    if (t.metrics.at("fragmentation") != s.metrics().fragmentation) return "fragmentation differs";
    if (t.metrics.at("blocks_used") != s.metrics().blocks_used) return "blocks used differs";
    return "";
}

TEST(RecordReplay, TimelineFromFileEqualsLiveEngineAtEveryStep) {
    for (uint64_t seed : {1u, 2u, 3u}) {
        auto model = test::make_random_model(test::small_test_config(), seed);
        EngineOptions eo;
        eo.block_size = 4;
        eo.num_blocks = 40;
        auto engine = Engine::create(model, eo);
        ASSERT_TRUE(engine.ok());
        Engine& e = **engine;
        RunInfo info;
        info.num_blocks = eo.num_blocks;
        info.block_size = eo.block_size;
        std::string path = test::temp_dir() + "/run.kvs";
        RecorderOptions ro;
        ro.keyframe_events = 150;  // many keyframes, so seeks mix keyframes and replay
        auto rec = Recorder::create(path, info, ro);
        ASSERT_TRUE(rec.ok()) << rec.error().message;
        StateProbe live(info);
        ProbeFanout fan;
        fan.add(rec->get());
        fan.add(&live);
        e.reporter().probe = &fan;
        ServingOptions so;
        so.max_batch_tokens = 48;
        so.preempt = seed == 2 ? PreemptMode::kSwap : PreemptMode::kRecompute;
        Scheduler s(e, so, workload(seed, test::small_test_config().vocab_size));
        std::vector<TimelineState> snapshots;
        while (s.step()) {
            ASSERT_EQ(compare_with_engine(live.state, s, e), "")
                << "seed " << seed << " step " << s.current_step() - 1;
            if (live.state.step == s.current_step() - 1) snapshots.push_back(live.state);
        }
        ASSERT_GT(s.summary().preemptions, 0) << "the workload should exercise preemption";
        ASSERT_TRUE((*rec)->close().ok());

        auto reader = SessionReader::open(path);
        ASSERT_TRUE(reader.ok()) << reader.error().message;
        ASSERT_GT((*reader)->keyframes().size(), 2u);
        // Forward, backward and random seeks all land on the live state.
        std::vector<size_t> order(snapshots.size());
        for (size_t i = 0; i < order.size(); ++i)
            order[i] = i;
        std::vector<size_t> reversed(order.rbegin(), order.rend());
        std::vector<size_t> shuffled = order;
        std::shuffle(shuffled.begin(), shuffled.end(), std::mt19937(seed));
        for (const auto* seq : {&order, &reversed, &shuffled})
            for (size_t i : *seq) {
                const TimelineState& want = snapshots[i];
                auto got = (*reader)->state_at(want.step);
                ASSERT_TRUE(got.ok()) << got.error().message;
                ASSERT_TRUE(**got == want)
                    << "seed " << seed << ": state differs at step " << want.step;
            }
    }
}

}  // namespace
}  // namespace kvscope
