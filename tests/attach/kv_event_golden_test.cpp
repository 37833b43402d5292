// What `kvscope publish` sends, byte for byte, against bytes written here by hand from each
// publisher's own definitions (msgspec Structs: an array_like struct writes every field, a map
// writes each field that has no default, nil when unset, and those with one only when set;
// floats as float64, integers in their smallest msgpack form, the tag first):
//   vllm          vLLM >= 0.26 (main): vllm/distributed/kv_events.py, KVCacheEvent without
//                 array_like since vllm-project/vllm#42892, EventBatch array_like; replay
//                 replies with the topic frame since #45177, the end marker's topic frame empty
//   vllm-v0.9     vLLM v0.9.0 vllm/distributed/kv_events.py: everything array_like, no rank,
//                 BlockStored (block_hashes, parent_block_hash, token_ids, block_size, lora_id)
//   vllm-array    vLLM v0.25 vllm/distributed/kv_events.py: array_like events with medium,
//                 lora_name, extra_keys, group_idx, kv_cache_spec_kind,
//                 kv_cache_spec_sliding_window (#33304, #40984); BlockRemoved with group_idx
//   sglang        SGLang python/sglang/srt/disaggregation/kv_events.py since
//                 sgl-project/sglang#37482: EventBatch array_like (no omit_defaults, so the
//                 rank is always there), events tagged maps with omit_defaults; medium
//                 CPU_PINNED for host memory (StorageMedium)
//   sglang-eagle  the same with token_ids as pairs, as its EAGLE radix cache keys pages
// Both vLLM before 0.26 and SGLang reply to replay requests without the topic frame.
#include <gtest/gtest.h>

#include <algorithm>

#include <string>
#include <vector>

#include "attach/kv_event_decoder.h"
#include "attach/kv_event_encoder.h"
#include "attach/wire_frames.h"

namespace kvscope::attach {
namespace {

using Bytes = std::vector<uint8_t>;

// Hand-written msgpack: a fixstr (under 32 bytes) and bytes as they are.
Bytes s(const std::string& text) {
    EXPECT_LT(text.size(), 32u);
    // Sized first and copied into: GCC 12 misreads an insert after a 1-element vector as an
    // overflow (-Warray-bounds in optimized builds).
    Bytes b(text.size() + 1);
    b[0] = static_cast<uint8_t>(0xa0 | text.size());
    std::copy(text.begin(), text.end(), b.begin() + 1);
    return b;
}
Bytes cat(std::initializer_list<Bytes> parts) {
    Bytes out;
    for (const Bytes& p : parts)
        out.insert(out.end(), p.begin(), p.end());
    return out;
}
const Bytes kTs = {0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0};  // 1.5 as float64
const Bytes kHashes = {0x91, 0xcd, 0x01, 0x02};          // [0x0102]
const Bytes kTokens = {0x92, 0x07, 0xcd, 0x01, 0x2c};    // [7, 300]

// A store of one block (hash 0x0102, parent 1, tokens 7 300, block size 2) on the GPU in cache
// group 0 (full attention), its removal, and a clear; rank 1.
// A BlockStored map's first fields, the ones without a default in vLLM's and SGLang's: type,
// block_hashes, parent_block_hash, token_ids, block_size (a fixint), lora_id nil.
Bytes stored_map_fields(const Bytes& hashes, const Bytes& parent, const Bytes& tokens,
                        uint8_t block_size = 2) {
    return cat({s("type"),
                s("BlockStored"),
                s("block_hashes"),
                hashes,
                s("parent_block_hash"),
                parent,
                s("token_ids"),
                tokens,
                s("block_size"),
                {block_size},
                s("lora_id"),
                {0xc0}});
}

// A BlockRemoved map of kHashes on the GPU: type, block_hashes, medium.
Bytes removed_map_fields() {
    return cat({s("type"), s("BlockRemoved"), s("block_hashes"), kHashes, s("medium"), s("GPU")});
}

KvEventBatch sample(bool pairs) {
    KvEventBatch b;
    b.ts = 1.5;
    b.rank = 1;
    KvEvent st;
    st.type = KvEventType::kBlockStored;
    st.block_hashes = {0x0102};
    st.has_parent = true;
    st.parent_hash = 1;
    st.token_ids = pairs ? std::vector<int32_t>{7, 300, 300, 9} : std::vector<int32_t>{7, 300};
    st.token_width = pairs ? 2 : 1;
    st.block_size = 2;
    st.group_idx = 0;
    st.group_kind = "full_attention";
    b.events.push_back(st);
    KvEvent rm;
    rm.type = KvEventType::kBlockRemoved;
    rm.block_hashes = {0x0102};
    rm.group_idx = 0;
    b.events.push_back(rm);
    KvEvent cl;
    cl.type = KvEventType::kAllBlocksCleared;
    b.events.push_back(cl);
    return b;
}

Bytes expected(WireFormat f) {
    const Bytes cleared_array = cat({{0x91}, s("AllBlocksCleared")});
    const Bytes cleared_map = cat({{0x81}, s("type"), s("AllBlocksCleared")});
    switch (f) {
        case WireFormat::kVllm:
            return cat({{0x93},
                        kTs,
                        {0x93},
                        // BlockStored: 8 fields without defaults, group_idx and kind set.
                        {0x8a},
                        stored_map_fields(kHashes, {0x01}, kTokens),
                        s("medium"),
                        s("GPU"),
                        s("lora_name"),
                        {0xc0},
                        s("group_idx"),
                        {0x00},
                        s("kv_cache_spec_kind"),
                        s("full_attention"),
                        // BlockRemoved: block_hashes, medium (no defaults), group_idx set.
                        {0x84},
                        removed_map_fields(),
                        s("group_idx"),
                        {0x00},
                        cleared_map,
                        {0x01}});
        case WireFormat::kVllmV09:
            return cat({{0x92},
                        kTs,
                        {0x93},
                        {0x96},
                        s("BlockStored"),
                        kHashes,
                        {0x01},
                        kTokens,
                        {0x02, 0xc0},
                        {0x92},
                        s("BlockRemoved"),
                        kHashes,
                        cleared_array});
        case WireFormat::kVllmArray:
            return cat({{0x93},
                        kTs,
                        {0x93},
                        {0x9c},
                        s("BlockStored"),
                        kHashes,
                        {0x01},
                        kTokens,
                        {0x02, 0xc0},
                        s("GPU"),
                        {0xc0, 0xc0, 0x00},  // lora_name, extra_keys, group_idx
                        s("full_attention"),
                        {0xc0},  // kv_cache_spec_sliding_window
                        {0x94},
                        s("BlockRemoved"),
                        kHashes,
                        s("GPU"),
                        {0x00},
                        cleared_array,
                        {0x01}});
        case WireFormat::kSglang:
        case WireFormat::kSglangEagle:
            return cat({{0x93},
                        kTs,
                        {0x93},
                        // 6 fields without defaults, medium set.
                        {0x87},
                        stored_map_fields(kHashes, {0x01},
                                          f == WireFormat::kSglang
                                              ? kTokens
                                              : Bytes{0x92, 0x92, 0x07, 0xcd, 0x01, 0x2c, 0x92,
                                                      0xcd, 0x01, 0x2c, 0x09}),
                        s("medium"),
                        s("GPU"),
                        {0x83},
                        removed_map_fields(),
                        cleared_map,
                        {0x01}});
    }
    return {};
}

TEST(PublishGoldenBytes, EveryFormatIsByteForByteItsPublishers) {
    for (WireFormat f : kWireFormats) {
        SCOPED_TRACE(std::string(wire_format_name(f)));
        const KvEventBatch b = sample(f == WireFormat::kSglangEagle);
        Bytes wire;
        encode_kv_event_batch(b, f, HashEncoding::kInt, wire);
        EXPECT_EQ(wire, expected(f));
        // What publish sends: the events encoded once, batched with salt 0.
        const PreEncodedEvents pre(b.events, f, HashEncoding::kInt);
        const size_t indices[] = {0, 1, 2};
        const uint64_t salts[] = {0, 0, 0};
        Bytes batched;
        pre.encode_batch(1.5, 1, indices, salts, 3, batched);
        EXPECT_EQ(batched, expected(f));
        // And kvscope reads its own bytes back as they were meant.
        KvEventBatch back;
        ASSERT_TRUE(decode_kv_event_batch(wire.data(), wire.size(), back).ok());
        EXPECT_EQ(back.malformed_events + back.unknown_fields + back.unknown_events, 0);
        ASSERT_EQ(back.events.size(), 3u);
        EXPECT_EQ(back.events[0].token_ids, b.events[0].token_ids);
        EXPECT_EQ(back.events[0].token_width, b.events[0].token_width);
        EXPECT_EQ(back.rank, f == WireFormat::kVllmV09 ? -1 : 1);
    }
}

// SGLang's host tier is CPU_PINNED, and a store of two pages is two events, each naming the
// page before as its parent.
TEST(PublishGoldenBytes, SglangSendsOneEventPerPageAndItsOwnMediumNames) {
    KvEventBatch b;
    b.ts = 1.5;
    b.rank = -1;  // written as nil: the field has no omit_defaults in SGLang's EventBatch
    KvEvent st;
    st.type = KvEventType::kBlockStored;
    st.block_hashes = {5, 6};
    st.token_ids = {1, 2};
    st.block_size = 1;
    st.medium = KvMedium::kCpuPinned;
    b.events.push_back(st);
    Bytes wire;
    encode_kv_event_batch(b, WireFormat::kSglang, HashEncoding::kInt, wire);
    auto page = [&](uint8_t hash, Bytes parent, uint8_t token) {
        return cat({{0x87},
                    stored_map_fields({0x91, hash}, parent, {0x91, token}, 1),
                    s("medium"),
                    s("CPU_PINNED")});
    };
    EXPECT_EQ(wire, cat({{0x93}, kTs, {0x92}, page(5, {0xc0}, 1), page(6, {0x05}, 2), {0xc0}}));
}

// Digest hashes (vLLM's default without VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES): 32 bytes of
// bin 8 whose last 8 are the key, as vLLM's int form of the digest is.
TEST(PublishGoldenBytes, DigestHashesEndWithTheirKey) {
    KvEventBatch b;
    KvEvent rm;
    rm.type = KvEventType::kBlockRemoved;
    rm.block_hashes = {0x0102030405060708ull};
    b.events.push_back(rm);
    Bytes wire;
    encode_kv_event_batch(b, WireFormat::kVllmArray, HashEncoding::kBytes, wire);
    const Bytes head = cat({{0x93},
                            {0xcb, 0, 0, 0, 0, 0, 0, 0, 0},
                            {0x91, 0x94},
                            s("BlockRemoved"),
                            {0x91, 0xc4, 0x20}});
    ASSERT_EQ(wire.size(), head.size() + 32 + 4 + 1 + 1);  // then medium, group, rank
    EXPECT_EQ(Bytes(wire.begin(), wire.begin() + static_cast<long>(head.size())), head);
    const Bytes key(wire.begin() + static_cast<long>(head.size()) + 24,
                    wire.begin() + static_cast<long>(head.size()) + 32);
    EXPECT_EQ(key, (Bytes{1, 2, 3, 4, 5, 6, 7, 8}));
    KvEventBatch back;
    ASSERT_TRUE(decode_kv_event_batch(wire.data(), wire.size(), back).ok());
    EXPECT_EQ(back.events.at(0).block_hashes, rm.block_hashes);
}

// Replay replies and the end marker as each publisher sends them (after the ROUTER strips the
// identity): vLLM >= 0.26 [b"", topic, seq, payload] and [b"", b"", END, b""]; vLLM before it
// and SGLang [b"", seq, payload] and [b"", END, b""].
TEST(PublishGoldenBytes, ReplayRepliesAndEndMarkersAsEachVersionSendsThem) {
    const Bytes seq7 = {0, 0, 0, 0, 0, 0, 0, 7}, end(8, 0xff), payload = {0x90};
    const Bytes topic = {'k', 'v'};
    for (WireFormat f : kWireFormats) {
        SCOPED_TRACE(std::string(wire_format_name(f)));
        const bool with_topic = wire_format_replies_with_topic(f);
        EXPECT_EQ(with_topic, f == WireFormat::kVllm);
        auto reply = replay_reply_frames(with_topic, "kv", 7, payload);
        auto last = replay_end_frames(with_topic);
        if (with_topic) {
            EXPECT_EQ(reply, (std::vector<Bytes>{{}, topic, seq7, payload}));
            EXPECT_EQ(last, (std::vector<Bytes>{{}, {}, end, {}}));
        } else {
            EXPECT_EQ(reply, (std::vector<Bytes>{{}, seq7, payload}));
            EXPECT_EQ(last, (std::vector<Bytes>{{}, end, {}}));
        }
        // Each parses as a reply and an end.
        std::vector<Frame> frames;
        for (const Bytes& b : last)
            frames.push_back({b.data(), b.size()});
        auto parsed = parse_replay_reply(frames);
        ASSERT_TRUE(parsed.ok());
        EXPECT_TRUE(parsed->end);
    }
}

}  // namespace
}  // namespace kvscope::attach
