// The decoder against test vectors written from the wire format with a second msgpack
// implementation (tests/data/kv_events/make_vectors.py), the encoder against the decoder in
// every variant, and the frame parsers.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "attach/kv_event_decoder.h"
#include "attach/kv_event_encoder.h"
#include "attach/wire_frames.h"
#include "test_support.h"

namespace kvscope::attach {
namespace {

std::string vector_dir() {
    auto dir = test::source_file("tests/data/kv_events/expected.json");
    EXPECT_TRUE(dir.has_value());
    return dir ? dir->substr(0, dir->size() - std::string("expected.json").size()) : "";
}

nlohmann::json expected() {
    return nlohmann::json::parse(test::read_file(vector_dir() + "expected.json"));
}

std::vector<uint8_t> bytes(const std::string& s) {
    return {s.begin(), s.end()};
}

nlohmann::json to_json(const KvEventBatch& b) {
    nlohmann::json events = nlohmann::json::array();
    for (const KvEvent& e : b.events) {
        nlohmann::json j = {{"type", kv_event_type_name(e.type)}};
        if (e.type == KvEventType::kAllBlocksCleared) {
            events.push_back(j);
            continue;
        }
        j["hashes"] = e.block_hashes;
        j["medium"] = kv_medium_name(e.medium);
        j["group"] = e.group_idx;
        if (e.type == KvEventType::kBlockStored) {
            j["parent"] = e.has_parent ? nlohmann::json(e.parent_hash) : nlohmann::json(nullptr);
            j["tokens"] = e.token_ids;
            j["block_size"] = e.block_size;
            j["lora_id"] = e.lora_id;
            j["token_width"] = e.token_width;
        }
        events.push_back(j);
    }
    return {{"ts", b.ts},
            {"rank", b.rank},
            {"events", events},
            {"unknown_events", b.unknown_events},
            {"unknown_fields", b.unknown_fields},
            {"malformed_events", b.malformed_events}};
}

TEST(KvEventDecoder, EveryVectorDecodesAsWritten) {
    auto exp = expected();
    ASSERT_GE(exp.size(), 20u);
    int good = 0, bad = 0;
    KvEventBatch batch;
    for (const auto& [name, want] : exp.items()) {
        SCOPED_TRACE(name);
        auto payload = bytes(test::read_file(vector_dir() + name + ".msgpack"));
        Status s = decode_kv_event_batch(payload.data(), payload.size(), batch);
        if (want.contains("error")) {
            ++bad;
            ASSERT_FALSE(s.ok());
            EXPECT_EQ(s.error().message.find('\n'), std::string::npos);
            EXPECT_FALSE(s.error().message.empty());
            continue;
        }
        ++good;
        ASSERT_TRUE(s.ok()) << s.error().message;
        EXPECT_EQ(to_json(batch), want);
    }
    EXPECT_GE(good, 10);
    EXPECT_GE(bad, 10);
}

TEST(KvEventDecoder, DigestHashesAreFlagged) {
    auto payload = bytes(test::read_file(vector_dir() + "vllm_array_bytes.msgpack"));
    KvEventBatch batch;
    ASSERT_TRUE(decode_kv_event_batch(payload.data(), payload.size(), batch).ok());
    EXPECT_TRUE(batch.digest_hashes);
    payload = bytes(test::read_file(vector_dir() + "vllm_array_int.msgpack"));
    ASSERT_TRUE(decode_kv_event_batch(payload.data(), payload.size(), batch).ok());
    EXPECT_FALSE(batch.digest_hashes);
}

// What is read beyond the blocks: a malformed event's reason, vLLM's cache group, kind,
// window and locality, SGLang's metadata and token pairs; a digest keyed by its last 8 bytes.
TEST(KvEventDecoder, ReasonsGroupsMetadataAndPairsAreKept) {
    KvEventBatch batch;
    auto decode = [&](const std::string& name) {
        auto payload = bytes(test::read_file(vector_dir() + name + ".msgpack"));
        Status s = decode_kv_event_batch(payload.data(), payload.size(), batch);
        ASSERT_TRUE(s.ok()) << s.error().message;
    };
    decode("out_of_domain");
    std::vector<std::string> reasons;
    for (const NameCount& n : batch.malformed_reasons)
        reasons.push_back(n.name);
    EXPECT_EQ(
        reasons,
        (std::vector<std::string>{
            "BlockStored: a token id is negative", "BlockStored: block_size is negative",
            "BlockStored: a digest hash is shorter than 8 bytes",
            "BlockRemoved: group_idx is negative", "BlockStored: token_ids mixes pairs and ids"}));
    decode("vllm_main_map");
    ASSERT_EQ(batch.events.size(), 2u);
    const KvEvent& st = batch.events[0];
    EXPECT_EQ(st.group_idx, 1);
    EXPECT_EQ(st.group_kind, "sliding_window");
    EXPECT_EQ(st.sliding_window, 128);
    EXPECT_EQ(st.locality, "LOCAL");
    EXPECT_EQ(batch.unknown_fields, 0);
    decode("sglang_eagle_pages");
    ASSERT_EQ(batch.events.size(), 2u);
    EXPECT_EQ(batch.events[0].token_width, 2);
    EXPECT_EQ(batch.events[0].token_ids.size(), 32u);
    EXPECT_EQ(batch.events[0].cache_salt, "s");
    EXPECT_EQ(batch.events[0].session_id, "x");
    EXPECT_EQ(batch.events[1].medium, KvMedium::kCpuPinned);
    decode("vllm_array_bytes");
    const KvEvent& d = batch.events.at(0);
    ASSERT_EQ(d.digest_size, 32u);
    ASSERT_EQ(d.digests.size(), 64u);
    uint64_t tail = 0;  // vLLM's int form: int.from_bytes(digest, "big") & (2**64 - 1)
    for (size_t i = 24; i < 32; ++i)
        tail = tail << 8 | d.digests[i];
    EXPECT_EQ(d.block_hashes[0], tail);
}

TEST(KvEventDecoder, EveryPrefixOfAVectorIsRefusedNotMisread) {
    auto payload = bytes(test::read_file(vector_dir() + "vllm_map_int.msgpack"));
    KvEventBatch batch;
    for (size_t n = 0; n < payload.size(); ++n)
        EXPECT_FALSE(decode_kv_event_batch(payload.data(), n, batch).ok()) << n;
}

// What the encoder writes in each variant decodes to what was given (SGLang's pages split
// a multi-block store into one event per block, which is the same blocks).
TEST(KvEventEncoder, EveryVariantRoundTrips) {
    KvEventBatch in;
    in.ts = 12.25;
    in.rank = 2;
    KvEvent s;
    s.type = KvEventType::kBlockStored;
    s.block_hashes = {11, 12};
    s.has_parent = true;
    s.parent_hash = 10;
    s.block_size = 4;
    s.token_ids = {1, 2, 3, 4, 5, 6, 7, 8};
    s.medium = KvMedium::kCpu;
    in.events.push_back(s);
    KvEvent r;
    r.type = KvEventType::kBlockRemoved;
    r.block_hashes = {11};
    r.medium = KvMedium::kCpu;
    in.events.push_back(r);
    KvEvent c;
    c.type = KvEventType::kAllBlocksCleared;
    in.events.push_back(c);
    for (WireFormat f : kWireFormats)
        for (HashEncoding h : {HashEncoding::kInt, HashEncoding::kBytes}) {
            if (h == HashEncoding::kBytes && !wire_format_takes_digests(f)) continue;
            SCOPED_TRACE(std::string(wire_format_name(f)) +
                         (h == HashEncoding::kInt ? " int" : " bytes"));
            std::vector<uint8_t> wire;
            encode_kv_event_batch(in, f, h, wire);
            KvEventBatch out;
            Status st = decode_kv_event_batch(wire.data(), wire.size(), out);
            ASSERT_TRUE(st.ok()) << st.error().message;
            const bool v09 = f == WireFormat::kVllmV09;  // no rank, no medium yet
            EXPECT_EQ(out.rank, v09 ? -1 : 2);
            EXPECT_EQ(out.ts, 12.25);
            EXPECT_EQ(out.digest_hashes, h == HashEncoding::kBytes);
            EXPECT_EQ(out.unknown_fields + out.unknown_events + out.malformed_events, 0);
            std::vector<uint64_t> stored, parents;
            std::vector<int32_t> tokens;
            for (const KvEvent& e : out.events)
                if (e.type == KvEventType::kBlockStored) {
                    EXPECT_EQ(e.medium, v09 ? KvMedium::kGpu : KvMedium::kCpu);
                    stored.insert(stored.end(), e.block_hashes.begin(), e.block_hashes.end());
                    parents.push_back(e.parent_hash);
                    tokens.insert(tokens.end(), e.token_ids.begin(), e.token_ids.end());
                }
            EXPECT_EQ(stored, (std::vector<uint64_t>{11, 12}));
            EXPECT_EQ(parents.front(), 10u);
            EXPECT_EQ(tokens, s.token_ids);
            EXPECT_EQ(out.events.back().type, KvEventType::kAllBlocksCleared);
        }
}

Frame frame(const std::string& s) {
    return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}
std::string seq_bytes(uint64_t v) {
    uint8_t b[8];
    put_seq(v, b);
    return {reinterpret_cast<char*>(b), 8};
}

// What publish sends: batches assembled from events encoded once, hashes salted per event,
// byte for byte the encoder's output for the salted events (whatever sizes the salted hashes
// pack to), in every format and hash encoding.
TEST(KvEventEncoder, PreEncodedBatchesAreTheEncodersBytes) {
    std::vector<KvEvent> events;
    KvEvent s;
    s.type = KvEventType::kBlockStored;
    s.block_hashes = {11, 12, 0xffffffffffull};
    s.has_parent = true;
    s.parent_hash = 10;
    s.block_size = 2;
    s.token_ids = {1, 2, 3, 4, 5};
    s.medium = KvMedium::kCpu;
    s.lora_id = 3;
    s.group_idx = 1;
    events.push_back(s);
    s.has_parent = false;
    s.medium = KvMedium::kGpu;
    s.lora_id = -1;
    s.group_idx = 0;
    s.block_hashes = {0};
    events.push_back(s);
    KvEvent r;
    r.type = KvEventType::kBlockRemoved;
    r.block_hashes = {11, 12};
    events.push_back(r);
    r.medium = KvMedium::kDisk;
    events.push_back(r);
    KvEvent c;
    c.type = KvEventType::kAllBlocksCleared;
    events.push_back(c);
    std::mt19937_64 rng(7);
    for (WireFormat f : kWireFormats)
        for (HashEncoding h : {HashEncoding::kInt, HashEncoding::kBytes}) {
            if (h == HashEncoding::kBytes && !wire_format_takes_digests(f)) continue;
            SCOPED_TRACE(std::string(wire_format_name(f)) +
                         (h == HashEncoding::kInt ? " int" : " bytes"));
            const PreEncodedEvents pre(events, f, h);
            ASSERT_EQ(pre.size(), events.size());
            for (int round = 0; round < 50; ++round) {
                const size_t n = 1 + rng() % 12;
                std::vector<size_t> indices(n);
                std::vector<uint64_t> salts(n);
                KvEventBatch salted;
                salted.ts = static_cast<double>(round) * 0.5;
                salted.rank = round % 3 == 0 ? -1 : round;
                for (size_t k = 0; k < n; ++k) {
                    indices[k] = rng() % events.size();
                    // Small salts too: a salted hash may pack to another size than before.
                    salts[k] = round % 2 ? rng() : rng() % 300;
                    KvEvent e = events[indices[k]];
                    for (uint64_t& x : e.block_hashes)
                        x ^= salts[k];
                    e.parent_hash ^= salts[k];
                    salted.events.push_back(e);
                }
                std::vector<uint8_t> want, got;
                encode_kv_event_batch(salted, f, h, want);
                pre.encode_batch(salted.ts, salted.rank, indices.data(), salts.data(), n, got);
                ASSERT_EQ(got, want) << "round " << round;
            }
        }
}

TEST(WireFrames, PublishedAndBothReplayReplyShapes) {
    std::string topic = "kv@pod@model", seq = seq_bytes(0x0102030405060708ull), payload = "xyz",
                empty;
    std::vector<Frame> pub = {frame(topic), frame(seq), frame(payload)};
    auto p = parse_published(pub);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->topic, topic);
    EXPECT_EQ(p->seq, 0x0102030405060708ull);
    EXPECT_EQ(p->payload.size, 3u);

    std::vector<Frame> newer = {frame(empty), frame(topic), frame(seq), frame(payload)};
    auto n = parse_replay_reply(newer);
    ASSERT_TRUE(n.ok());
    EXPECT_EQ(n->topic, topic);
    EXPECT_FALSE(n->end);
    std::vector<Frame> older = {frame(empty), frame(seq), frame(payload)};
    auto o = parse_replay_reply(older);
    ASSERT_TRUE(o.ok());
    EXPECT_EQ(o->seq, 0x0102030405060708ull);
    std::string end_seq = seq_bytes(kReplayEndSeq);
    std::vector<Frame> end = {frame(empty), frame(end_seq), frame(empty)};
    auto e = parse_replay_reply(end);
    ASSERT_TRUE(e.ok());
    EXPECT_TRUE(e->end);
}

TEST(WireFrames, MalformedFramesAreRefusedInOneLine) {
    std::string seven = "1234567", ok_seq = seq_bytes(1), x = "x", empty;
    std::vector<std::vector<Frame>> published = {{},
                                                 {frame(x)},
                                                 {frame(x), frame(ok_seq)},
                                                 {frame(x), frame(seven), frame(x)},
                                                 {frame(x), frame(ok_seq), frame(x), frame(x)}};
    for (const auto& f : published) {
        auto r = parse_published(f);
        ASSERT_FALSE(r.ok());
        EXPECT_EQ(r.error().message.find('\n'), std::string::npos);
    }
    std::string end_seq = seq_bytes(kReplayEndSeq);
    std::vector<std::vector<Frame>> replies = {
        {frame(x), frame(ok_seq), frame(x)},       // no empty delimiter
        {frame(empty), frame(seven), frame(x)},    // short sequence
        {frame(empty), frame(end_seq), frame(x)},  // end marker with a payload
        {frame(empty), frame(x)}};
    for (const auto& f : replies)
        EXPECT_FALSE(parse_replay_reply(f).ok());
}

}  // namespace
}  // namespace kvscope::attach
