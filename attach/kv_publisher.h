#pragma once
// A KV-event publisher as vLLM runs one: a PUB socket sending [topic, seq, payload] and, when
// asked for, a ROUTER replay socket answering [b"", start seq] with every buffered batch from
// there on and an end marker. `kvscope publish` and the tests use it to send real ZeroMQ
// traffic; a batch may be withheld from the live socket (a simulated drop) and still be
// replayable, as a slow subscriber's lost batch is in vLLM.

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "base/result.h"

namespace kvscope::attach {

struct PublisherOptions {
    std::string endpoint;         // bound, e.g. tcp://*:5557 or tcp://127.0.0.1:5557
    std::string replay_endpoint;  // bound when not empty
    std::string topic;
    size_t replay_buffer = 10000;  // batches kept for replay (vLLM's buffer_steps)
    // Replay replies without the topic frame, as vLLM before 0.26 and SGLang send them.
    bool replies_without_topic = false;
    int send_queue = 100000;  // ZeroMQ's high-water mark: past it a PUB socket drops
};

class KvPublisher {
  public:
    static Result<std::unique_ptr<KvPublisher>> create(zmq::context_t& ctx,
                                                       const PublisherOptions& options);
    // Sends `payload` with the next sequence number; `withhold` skips the live socket (a
    // dropped batch) but keeps it for replay.
    Status publish(const std::vector<uint8_t>& payload, bool withhold = false);
    // Sends a frame that is not an event batch (tests: a malformed message), no sequence used.
    Status publish_raw(const std::vector<std::vector<uint8_t>>& frames);
    // Answers the replay requests waiting, without blocking. Returns how many it answered.
    int serve_replay();
    uint64_t next_seq() const { return next_seq_; }
    // Numbers the next batch `seq` (tests: a publisher whose sequence jumps).
    void set_next_seq(uint64_t seq) { next_seq_ = seq; }
    // Where the sockets are bound (the port filled in when the endpoint asked for any, "*").
    std::string endpoint() const;
    std::string replay_endpoint() const;

  private:
    KvPublisher(zmq::context_t& ctx, const PublisherOptions& options);
    PublisherOptions options_;
    zmq::socket_t pub_;
    std::unique_ptr<zmq::socket_t> replay_;
    uint64_t next_seq_ = 0;
    std::deque<std::pair<uint64_t, std::vector<uint8_t>>> buffer_;
};

}  // namespace kvscope::attach
