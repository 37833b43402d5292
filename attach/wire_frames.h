#pragma once
// The ZeroMQ frames around a KV-event payload, as plain bytes (no ZeroMQ types, so the parsers
// are tested and fuzzed without sockets).
//   published:     [topic, seq, payload]                          (PUB -> SUB)
//   replay reply:  [b"", topic, seq, payload]  vLLM >= 0.26       (ROUTER -> DEALER)
//                  [b"", seq, payload]         older vLLM, SGLang
//                  the last reply has seq = -1 (all bits set) and an empty payload, and an
//                  empty topic frame where the replies have one: [b"", b"", END, b""]
//   replay request: [b"", start seq]                              (DEALER -> ROUTER)
// seq is 8 bytes, big endian, counting batches per publisher from 0.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace kvscope::attach {

struct Frame {
    const uint8_t* data = nullptr;
    size_t size = 0;
};

inline constexpr uint64_t kReplayEndSeq = ~uint64_t{0};

struct PublishedBatch {
    std::string_view topic;
    uint64_t seq = 0;
    Frame payload;
};
Result<PublishedBatch> parse_published(std::span<const Frame> frames);

struct ReplayReply {
    bool end = false;  // the replay is over: nothing more will come for this request
    std::string_view topic;
    uint64_t seq = 0;
    Frame payload;
};
Result<ReplayReply> parse_replay_reply(std::span<const Frame> frames);

// The frames of one replay reply as the publisher sends them (the ROUTER's identity frame
// left out), with the topic frame or without; and of the end marker.
std::vector<std::vector<uint8_t>> replay_reply_frames(bool with_topic, std::string_view topic,
                                                      uint64_t seq,
                                                      const std::vector<uint8_t>& payload);
std::vector<std::vector<uint8_t>> replay_end_frames(bool with_topic);

void put_seq(uint64_t seq, uint8_t out[8]);
uint64_t get_seq(const uint8_t in[8]);

}  // namespace kvscope::attach
