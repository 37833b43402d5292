#include "attach/kv_publisher.h"

#include "attach/endpoint.h"
#include "attach/wire_frames.h"

namespace kvscope::attach {

KvPublisher::KvPublisher(zmq::context_t& ctx, const PublisherOptions& options)
    : options_(options), pub_(ctx, zmq::socket_type::pub) {}

Result<std::unique_ptr<KvPublisher>> KvPublisher::create(zmq::context_t& ctx,
                                                         const PublisherOptions& options) {
    for (const std::string& endpoint : {options.endpoint, options.replay_endpoint})
        if (Status s = check_endpoint(endpoint); !s) return s.error();
    std::unique_ptr<KvPublisher> p(new KvPublisher(ctx, options));
    try {
        p->pub_.set(zmq::sockopt::sndhwm, options.send_queue);
        p->pub_.set(zmq::sockopt::linger, 1000);
        p->pub_.bind(options.endpoint);
        if (!options.replay_endpoint.empty()) {
            p->replay_ = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::router);
            p->replay_->set(zmq::sockopt::linger, 1000);
            p->replay_->set(zmq::sockopt::sndhwm, 0);
            p->replay_->bind(options.replay_endpoint);
        }
    } catch (const zmq::error_t& e) {
        return Error{"cannot publish on " + options.endpoint +
                     (options.replay_endpoint.empty() ? "" : " / " + options.replay_endpoint) +
                     ": " + e.what()};
    }
    return p;
}

Status KvPublisher::publish(const std::vector<uint8_t>& payload, bool withhold) {
    const uint64_t seq = next_seq_++;
    if (replay_) {
        // The oldest batch's memory holds the newest once the buffer is full: no allocation
        // per batch.
        std::vector<uint8_t> kept;
        if (buffer_.size() >= options_.replay_buffer && !buffer_.empty()) {
            kept = std::move(buffer_.front().second);
            buffer_.pop_front();
        }
        kept.assign(payload.begin(), payload.end());
        buffer_.emplace_back(seq, std::move(kept));
        while (buffer_.size() > options_.replay_buffer)
            buffer_.pop_front();
    }
    if (withhold) return {};
    uint8_t seq_bytes[8];
    put_seq(seq, seq_bytes);
    try {
        pub_.send(zmq::buffer(options_.topic), zmq::send_flags::sndmore);
        pub_.send(zmq::buffer(seq_bytes, 8), zmq::send_flags::sndmore);
        pub_.send(zmq::buffer(payload), zmq::send_flags::none);
    } catch (const zmq::error_t& e) {
        return Error{std::string("publish: ") + e.what()};
    }
    return {};
}

Status KvPublisher::publish_raw(const std::vector<std::vector<uint8_t>>& frames) {
    try {
        for (size_t i = 0; i < frames.size(); ++i)
            pub_.send(zmq::buffer(frames[i]),
                      i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
    } catch (const zmq::error_t& e) {
        return Error{std::string("publish: ") + e.what()};
    }
    return {};
}

std::string KvPublisher::endpoint() const {
    return pub_.get(zmq::sockopt::last_endpoint);
}

std::string KvPublisher::replay_endpoint() const {
    return replay_ ? replay_->get(zmq::sockopt::last_endpoint) : std::string();
}

int KvPublisher::serve_replay() {
    if (!replay_) return 0;
    int answered = 0;
    for (;;) {
        std::vector<zmq::message_t> request;
        zmq::message_t part;
        try {
            if (!replay_->recv(part, zmq::recv_flags::dontwait)) break;
            request.push_back(std::move(part));
            while (request.back().more()) {
                zmq::message_t next;
                if (!replay_->recv(next, zmq::recv_flags::none)) break;
                request.push_back(std::move(next));
            }
        } catch (const zmq::error_t&) {
            break;
        }
        // [client id, b"", start seq]; anything else is ignored, as vLLM ignores it.
        if (request.size() != 3 || request[1].size() != 0 || request[2].size() != 8) continue;
        const uint64_t start = get_seq(static_cast<const uint8_t*>(request[2].data()));
        auto send = [&](const std::vector<std::vector<uint8_t>>& frames) {
            replay_->send(zmq::buffer(request[0].data(), request[0].size()),
                          zmq::send_flags::sndmore);
            for (size_t i = 0; i < frames.size(); ++i)
                replay_->send(zmq::buffer(frames[i]), i + 1 < frames.size()
                                                          ? zmq::send_flags::sndmore
                                                          : zmq::send_flags::none);
        };
        const bool topic = !options_.replies_without_topic;
        try {
            for (const auto& [seq, payload] : buffer_)
                if (seq >= start) send(replay_reply_frames(topic, options_.topic, seq, payload));
            send(replay_end_frames(topic));
        } catch (const zmq::error_t&) {
        }
        ++answered;
    }
    return answered;
}

}  // namespace kvscope::attach
