#include "attach/wire_frames.h"

#include <string>

namespace kvscope::attach {

void put_seq(uint64_t seq, uint8_t out[8]) {
    for (int i = 7; i >= 0; --i, seq >>= 8)
        out[i] = static_cast<uint8_t>(seq);
}

uint64_t get_seq(const uint8_t in[8]) {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i)
        v = (v << 8) | in[i];
    return v;
}

std::vector<std::vector<uint8_t>> replay_reply_frames(bool with_topic, std::string_view topic,
                                                      uint64_t seq,
                                                      const std::vector<uint8_t>& payload) {
    std::vector<std::vector<uint8_t>> frames;
    frames.emplace_back();
    if (with_topic) frames.emplace_back(topic.begin(), topic.end());
    frames.emplace_back(8);
    put_seq(seq, frames.back().data());
    frames.push_back(payload);
    return frames;
}

std::vector<std::vector<uint8_t>> replay_end_frames(bool with_topic) {
    // vLLM >= 0.26 sends an empty topic frame with its end marker, not the topic.
    return replay_reply_frames(with_topic, {}, kReplayEndSeq, {});
}

namespace {
Result<uint64_t> seq_frame(const Frame& f) {
    if (f.size != 8) return Error{"sequence frame has " + std::to_string(f.size) + " bytes, not 8"};
    return get_seq(f.data);
}
std::string_view text(const Frame& f) {
    return {reinterpret_cast<const char*>(f.data), f.size};
}
}  // namespace

Result<PublishedBatch> parse_published(std::span<const Frame> frames) {
    if (frames.size() != 3)
        return Error{"message has " + std::to_string(frames.size()) +
                     " frames, not 3 (topic, sequence, payload)"};
    auto seq = seq_frame(frames[1]);
    if (!seq) return seq.error();
    return PublishedBatch{text(frames[0]), *seq, frames[2]};
}

Result<ReplayReply> parse_replay_reply(std::span<const Frame> frames) {
    if ((frames.size() != 3 && frames.size() != 4) || frames[0].size != 0)
        return Error{"replay reply has " + std::to_string(frames.size()) +
                     " frames; expected an empty frame, then [topic,] sequence, payload"};
    ReplayReply r;
    size_t at = 1;
    if (frames.size() == 4) r.topic = text(frames[at++]);
    auto seq = seq_frame(frames[at]);
    if (!seq) return seq.error();
    r.seq = *seq;
    r.payload = frames[at + 1];
    r.end = r.seq == kReplayEndSeq;
    if (r.end && r.payload.size != 0) return Error{"replay end marker carries a payload"};
    return r;
}

}  // namespace kvscope::attach
