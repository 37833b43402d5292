// Keyframes: the binary form round-trips a busy state, refuses every truncation and survives
// random corruption without crashing; keyframes of older files (CBOR) still load.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>

#include "base/varint.h"
#include "sessions/event_codec.h"
#include "sessions/legacy_keyframe.h"
#include "sessions/timeline_state.h"
#include "test_support.h"

namespace kvscope {
namespace {

TimelineState busy_state() {
    RunInfo info;
    info.num_blocks = 64;
    info.block_size = 4;
    TimelineState s(info);
    std::mt19937 rng(7);
    auto emit = [&](Event e) {
        e.step = s.step < 0 ? 0 : s.step + static_cast<int64_t>(rng() % 2);
        e.seq_no = s.last_seq_no + 1;
        s.apply(e);
    };
    for (int32_t r = 0; r < 6; ++r) {
        emit({.kind = EventKind::kRequestArrive,
              .request = r,
              .a = 5,
              .b = 9,
              .text = "req" + std::to_string(r)});
        emit({.kind = EventKind::kRequestAdmit, .request = r});
        for (int32_t l = 0; l < 3; ++l)
            emit({.kind = EventKind::kBlockAlloc, .request = r, .block = r * 8 + l, .a = l});
        for (int32_t p = 0; p < 11; ++p)
            emit({.kind = EventKind::kToken,
                  .request = r,
                  .a = p,
                  .b = static_cast<int32_t>(rng() % 2048),
                  .c = p < 5,
                  .text = p % 3 ? " the" : "\xe2\x80\x94 LORD"});
    }
    emit({.kind = EventKind::kBlockShare, .request = 3, .block = 0, .a = 0});
    emit({.kind = EventKind::kBlockHashed,
          .block = 0,
          .wide = static_cast<int64_t>(0xfedcba9876543210ull)});
    emit({.kind = EventKind::kBlockFree, .request = 5, .block = 41, .a = 1});
    emit(
        {.kind = EventKind::kPreempt, .request = 4, .a = static_cast<int32_t>(PreemptMode::kSwap)});
    emit({.kind = EventKind::kRequestFinish, .request = 2});
    emit({.kind = EventKind::kMetric, .value = 0.125, .text = "fragmentation"});
    emit({.kind = EventKind::kMetric, .value = 17, .text = "blocks_used"});
    return s;
}

TEST(Keyframe, BinaryFormRoundTrips) {
    TimelineState s = busy_state();
    auto bytes = s.serialize();
    std::string error;
    auto back = TimelineState::deserialize(bytes, s.info, error);
    ASSERT_TRUE(back) << error;
    EXPECT_TRUE(*back == s);
    EXPECT_EQ(back->last_seq_no, s.last_seq_no);
    EXPECT_EQ(back->blocks[0].hash, s.blocks[0].hash);
    EXPECT_EQ(back->requests.at(4).phase, RequestPhase::kSwapped);
    EXPECT_EQ(back->requests.at(1).token_text[3], s.requests.at(1).token_text[3]);
}

TEST(Keyframe, EveryTruncationIsRefused) {
    TimelineState s = busy_state();
    auto bytes = s.serialize();
    for (size_t n = 0; n < bytes.size(); ++n) {
        std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<long>(n));
        std::string error;
        EXPECT_FALSE(TimelineState::deserialize(cut, s.info, error))
            << "accepted " << n << " bytes";
        EXPECT_FALSE(error.empty());
    }
}

TEST(Keyframe, CorruptionNeverCrashes) {
    TimelineState s = busy_state();
    auto bytes = s.serialize();
    std::mt19937 rng(3);
    int refused = 0;
    for (int i = 0; i < 3000; ++i) {
        auto bad = bytes;
        for (int k = 0, n = 1 + static_cast<int>(rng() % 4); k < n; ++k)
            bad[5 + rng() % (bad.size() - 5)] = static_cast<uint8_t>(rng());
        std::string error;
        refused += !TimelineState::deserialize(bad, s.info, error);
    }
    EXPECT_GT(refused, 0);  // most flips still parse (a changed token id); some must not
    std::string error;
    std::vector<uint8_t> newer = bytes;
    newer[4] = 9;
    EXPECT_FALSE(TimelineState::deserialize(newer, s.info, error));
    EXPECT_NE(error.find("version"), std::string::npos) << error;
}

TEST(Keyframe, OlderCborKeyframesStillLoad) {
    using json = nlohmann::json;
    json j = {
        {"v", 1},
        {"step", 12},
        {"seq", 99},
        {"nb", 2},
        {"blocks", json::array({json::array({1, {0}, nullptr, 3, 0}), nullptr})},
        {"requests", json::array({json::array(
                         {0, "r1", 1, 2, 8, {0}, {1, 5, 9}, {"<s>", " In", " the"}, 0, 0, -1})})},
        {"metrics", {{"blocks_used", 1.0}}}};
    std::string error;
    RunInfo info;
    info.num_blocks = 2;
    auto s = TimelineState::deserialize(json::to_cbor(j), info, error);
    ASSERT_TRUE(s) << error;
    EXPECT_EQ(s->step, 12);
    EXPECT_EQ(s->blocks[0].refcount, 1);
    EXPECT_EQ(s->requests.at(0).token_text[2], " the");
    EXPECT_EQ(s->metrics.at("blocks_used"), 1.0);
}

// Inputs that once crashed fuzz_events, kept in fuzz/regressions/events/, go through what the
// fuzzer does with them: decoded as a step's events (a time delta that overflowed a signed add,
// found by UBSan) and read as a keyframe (refused).
TEST(Keyframe, FuzzRegressionsAreRefused) {
    auto dir = test::source_file("fuzz/regressions/events");
    ASSERT_TRUE(dir) << "fuzz/regressions/events is missing";
    int n = 0;
    std::vector<std::string> strings(4096);
    for (const auto& f : std::filesystem::directory_iterator(*dir)) {
        std::string bytes = test::read_file(f.path().string());
        std::vector<uint8_t> data(bytes.begin(), bytes.end());
        std::vector<Event> events;
        std::string error;
        RunInfo info;
        info.num_blocks = 32;
        TimelineState state(info);
        if (decode_events(data.data(), data.size(), 0, 1, strings, events, error))
            for (const Event& e : events)
                state.apply(e);
        EXPECT_FALSE(TimelineState::deserialize(data, info, error)) << f.path();
        EXPECT_FALSE(error.empty());
        ++n;
    }
    EXPECT_GT(n, 2);
}

// 200 000 nested one-element CBOR arrays: the CBOR reader recursed once per level and
// overflowed the stack (check, inspect, replay and the window all died with SIGSEGV).
TEST(Keyframe, DeeplyNestedCborIsRefusedWithoutOverflowingTheStack) {
    std::vector<uint8_t> nested(200000, 0x81);
    nested.push_back(0x00);
    std::string error;
    RunInfo info;
    info.num_blocks = 64;
    EXPECT_FALSE(TimelineState::deserialize(nested, info, error));
    EXPECT_NE(error.find("nested deeper"), std::string::npos) << error;
    // The same inside a map, as a keyframe's fields would be.
    std::vector<uint8_t> in_map(3 + nested.size());
    in_map[0] = 0xa1;  // a map of one pair, key "v"
    in_map[1] = 0x61;
    in_map[2] = 'v';
    std::copy(nested.begin(), nested.end(), in_map.begin() + 3);
    EXPECT_FALSE(TimelineState::deserialize(in_map, info, error));
    EXPECT_NE(error.find("nested deeper"), std::string::npos) << error;
}

// The structural check older (CBOR) keyframes go through before nlohmann reads them.
TEST(Keyframe, CborIsCheckedIterativelyBeforeItIsParsed) {
    std::string error;
    nlohmann::json j = {{"v", 1}, {"a", {1, 2, {3, nullptr, "x"}}}, {"f", 0.5}, {"b", true}};
    EXPECT_TRUE(cbor_is_plain(nlohmann::json::to_cbor(j), 8, error)) << error;
    // An indefinite array, an indefinite text string of two chunks.
    EXPECT_TRUE(cbor_is_plain({0x9f, 0x01, 0x7f, 0x61, 'a', 0x61, 'b', 0xff, 0xff}, 8, error))
        << error;
    struct Bad {
        std::vector<uint8_t> bytes;
        const char* expect;
    };
    for (const Bad& b : {
             // Indefinite byte strings nested as chunks: what overflowed nlohmann's stack.
             Bad{{0x5f, 0x5f, 0x5f, 0x41, 0x00, 0xff, 0xff, 0xff}, "not a string"},
             Bad{{0xc1, 0x00}, "tags"},
             Bad{{0x83, 0x01, 0x02}, "more items than bytes"},
             Bad{{0x82, 0x19, 0x01}, "truncated"},
             Bad{{0xbb, 0, 0, 0, 1, 0, 0, 0, 0, 0x01}, "more items than bytes"},
             Bad{{0x01, 0x02}, "bytes after"},
             Bad{{0xff}, "a break outside"},
             Bad{{0x5c}, "reserved"},
             Bad{{0x1f}, "indefinite length on a number"},
             Bad{{0x82, 0x82, 0x82, 0x82, 0x82, 0x82, 0x82, 0x82, 0x82, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                  0},
                 "nested deeper"},
         }) {
        error.clear();
        EXPECT_FALSE(cbor_is_plain(b.bytes, 8, error)) << b.expect;
        EXPECT_NE(error.find(b.expect), std::string::npos) << error;
    }
}

// A 15-byte keyframe claiming 2^26 blocks made check and inspect allocate 4.2 GB before
// refusing it; the claim is now held against the session's own pool size first.
TEST(Keyframe, APoolSizeOtherThanTheSessionsIsRefusedBeforeAllocating) {
    RunInfo info;
    info.num_blocks = 64;
    std::vector<uint8_t> bytes = TimelineState(info).serialize();
    bytes.resize(5);               // magic and version
    varint::put_signed(bytes, 7);  // step
    varint::put(bytes, 9);         // last seq
    varint::put(bytes, uint64_t{1} << 26);
    bytes.resize(15, 0);
    ASSERT_EQ(bytes.size(), 15u);
    std::string error;
    EXPECT_FALSE(TimelineState::deserialize(bytes, info, error));
    EXPECT_NE(error.find("describes"), std::string::npos) << error;
    // The older CBOR form says it in "nb".
    nlohmann::json j = {{"v", 1}, {"step", 1}, {"seq", 1}, {"nb", 1 << 26}, {"blocks", nullptr}};
    EXPECT_FALSE(TimelineState::deserialize(nlohmann::json::to_cbor(j), info, error));
    EXPECT_NE(error.find("describes 67108864 blocks"), std::string::npos) << error;
}

}  // namespace
}  // namespace kvscope
