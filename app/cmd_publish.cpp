// `kvscope publish`: sends a recorded kvscope serving run's prefix-cache blocks as vLLM or
// SGLang KV events over real ZeroMQ sockets, one publisher per rank (rank r on port + r), at a
// chosen rate, in a chosen wire format, optionally dropping batches from the live socket (they
// stay replayable). For demos of `kvscope attach` without a GPU cluster, and for its tests.
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <thread>

#include "app/commands.h"
#include "app/data_paths.h"
#include "app/number_flag.h"
#include "app/stop_signal.h"
#include "attach/endpoint.h"
#include "attach/kv_event_encoder.h"
#include "attach/kv_publisher.h"
#include "attach/kv_trace.h"
#include "base/terminal_text.h"

namespace kvscope::app {

namespace {
std::string format_names(std::string_view separator = ", ") {
    std::string names;
    for (attach::WireFormat f : attach::kWireFormats)
        names += (names.empty() ? "" : std::string(separator)) +
                 std::string(attach::wire_format_name(f));
    return names;
}

struct PublishOptions {
    std::string session;
    std::string endpoint;
    std::string replay;
    std::string topic;
    double rate = 10000;  // events per second per rank; 0: as fast as the sockets take them
    int32_t ranks = 1;
    std::string format = "vllm";
    std::string hash = "int";
    double gaps = 0;
    int32_t batch = 16;
    double duration = 0;
    int64_t events = 0;
    int32_t wait_ms = 500;
    bool old_replies = false;
    bool same_hashes = false;
    uint64_t seed = 1;
};

int publish(const PublishOptions& o) {
    attach::WireFormat format;
    if (!attach::parse_wire_format(o.format, format))
        return usage_error("--format must be " + format_names() + ", not " +
                           terminal_safe(o.format));
    const auto hashes =
        o.hash == "bytes" ? attach::HashEncoding::kBytes : attach::HashEncoding::kInt;
    if (hashes == attach::HashEncoding::kBytes && !attach::wire_format_takes_digests(format))
        return usage_error("--hash bytes: " + o.format +
                           " sends integer hashes only (digests are vLLM's since 0.10.2: "
                           "--format vllm or vllm-array)");
    std::string session = o.session;
    if (session.empty()) {
        auto found = find_data_file("sessions/sample-chat.kvs");
        if (!found) return fail(found.error().message);
        session = *found;
    }
    auto trace = attach::kv_trace_from_session(session);
    if (!trace) return fail(trace.error().message);
    // What the publishers of today send with every block: vLLM its cache group (one group of
    // full attention, as a model without sliding-window layers has), SGLang's speculative
    // decoding its tokens as pairs.
    for (attach::KvEvent& ev : trace->events) {
        ev.group_idx = 0;
        if (ev.type == attach::KvEventType::kBlockStored) ev.group_kind = "full_attention";
    }
    if (format == attach::WireFormat::kSglangEagle) trace->events = attach::eagle_pages(*trace);

    zmq::context_t ctx;
    std::vector<std::unique_ptr<attach::KvPublisher>> pubs;
    for (int32_t r = 0; r < o.ranks; ++r) {
        attach::PublisherOptions po;
        auto ep = attach::endpoint_for_rank(o.endpoint, r);
        if (!ep) return usage_error("--endpoint: " + ep.error().message);
        po.endpoint = *ep;
        if (!o.replay.empty()) {
            auto rp = attach::endpoint_for_rank(o.replay, r);
            if (!rp) return usage_error("--replay: " + rp.error().message);
            po.replay_endpoint = *rp;
        }
        po.topic = o.topic;
        po.replies_without_topic = o.old_replies || !attach::wire_format_replies_with_topic(format);
        auto p = attach::KvPublisher::create(ctx, po);
        if (!p) return fail(p.error().message);
        pubs.push_back(std::move(p).value());
    }
    const std::atomic<bool>& stop = stop_on_interrupt();
    std::fprintf(stderr,
                 "kvscope publish: %zu blocks from %s, %d rank%s on %s, %s, %s hashes, %.0f "
                 "events/s per rank%s\n",
                 trace->events.size(), terminal_safe(session).c_str(), o.ranks,
                 o.ranks == 1 ? "" : "s", terminal_safe(o.endpoint).c_str(), o.format.c_str(),
                 o.hash.c_str(), o.rate, o.rate > 0 ? "" : " (unpaced)");
    // Answers replay requests while waiting `ms`.
    auto serve_for = [&](int ms) {
        for (int waited = 0; waited < ms && !stop.load(); waited += 10) {
            for (auto& p : pubs)
                p->serve_replay();
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
    };
    // Subscribers connect after a bind; what is sent before they have is theirs to replay.
    serve_for(o.wait_ms);

    using Clock = std::chrono::steady_clock;
    const auto start = Clock::now();
    std::mt19937_64 rng(o.seed);
    std::uniform_real_distribution<double> coin(0, 1);
    std::vector<int64_t> loop(pubs.size(), 0);
    std::vector<size_t> at(pubs.size(), 0);
    int64_t sent = 0, withheld = 0, batches = 0;
    // The trace is encoded once; a batch is its events' bytes copied with the hashes salted
    // for the rank and loop, which keeps a publisher of 8 ranks at a million events a second
    // to a fraction of a core (encoding every batch took most of one).
    const attach::PreEncodedEvents encoded(trace->events, format, hashes);
    std::vector<size_t> indices(static_cast<size_t>(o.batch));
    std::vector<uint64_t> salts(static_cast<size_t>(o.batch));
    std::vector<uint8_t> payload;
    bool done = false;
    while (!done && !stop.load()) {
        for (size_t r = 0; r < pubs.size() && !done; ++r) {
            const double ts =
                std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch())
                    .count();
            const int32_t salt_rank = o.same_hashes ? 0 : static_cast<int32_t>(r);
            for (size_t k = 0; k < indices.size(); ++k) {
                indices[k] = at[r];
                salts[k] = attach::trace_salt(salt_rank, loop[r]);
                if (++at[r] == trace->events.size()) {
                    at[r] = 0;
                    ++loop[r];
                }
            }
            encoded.encode_batch(ts, static_cast<int32_t>(r), indices.data(), salts.data(),
                                 indices.size(), payload);
            const bool withhold = o.gaps > 0 && coin(rng) < o.gaps;
            if (Status s = pubs[r]->publish(payload, withhold); !s) return fail(s.error().message);
            withheld += withhold ? o.batch : 0;
            sent += o.batch;
            ++batches;
            if (o.events > 0 && sent >= o.events * o.ranks) done = true;
        }
        for (auto& p : pubs)
            p->serve_replay();
        const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
        if (o.duration > 0 && elapsed >= o.duration) break;
        if (o.rate > 0) {  // paced: wait until the events sent so far are due
            const double due = static_cast<double>(sent) / (o.rate * static_cast<double>(o.ranks));
            if (due > elapsed)
                std::this_thread::sleep_for(std::chrono::duration<double>(due - elapsed));
        }
    }
    // The rate is of the sending, not of the wait for late replay requests after it.
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    // Late replay requests (a subscriber filling the last gaps) are still answered a moment.
    serve_for(o.wait_ms);
    std::printf("events sent         %lld in %lld batches (%lld withheld from the live socket)\n",
                static_cast<long long>(sent), static_cast<long long>(batches),
                static_cast<long long>(withheld));
    std::printf("seconds sending     %.2f\n", seconds);
    std::printf("events/s            %.0f\n",
                seconds > 0 ? static_cast<double>(sent) / seconds : 0.0);
    return 0;
}
}  // namespace

Command register_publish(CLI::App& cli) {
    auto o = std::make_shared<PublishOptions>();
    CLI::App* sub = cli.add_subcommand(
        "publish", "Send a recorded run's KV-cache blocks as vLLM / SGLang KV events (ZeroMQ)");
    sub->add_option("--endpoint", o->endpoint,
                    "Where to publish, e.g. tcp://*:5557 (rank r on port + r)")
        ->required();
    sub->add_option("--replay", o->replay, "Answer replay requests here, e.g. tcp://*:5558");
    sub->add_option("--session", o->session,
                    "A kvscope session (.kvs) whose prefix-cache blocks are sent; default: the "
                    "bundled sample session");
    sub->add_option("--topic", o->topic, "Topic frame of every message (vLLM's default: empty)");
    sub->add_option("--rate", o->rate, "Events per second per rank (0: as fast as possible)")
        ->check(finite_number(0, 1e9));
    sub->add_option("--ranks", o->ranks, "Publishers (data-parallel ranks), one port each")
        ->check(CLI::Range(1, 256));
    sub->add_option("--format", o->format,
                    "The publisher's wire format, byte for byte: vllm (vLLM >= 0.26), vllm-v0.9, "
                    "vllm-array (vLLM 0.10.2 to 0.25), sglang, sglang-eagle (SGLang with "
                    "speculative decoding: token pairs)")
        ->check([](const std::string& v) {
            attach::WireFormat f;
            return attach::parse_wire_format(v, f) ? std::string()
                                                   : "must be " + format_names() + ", not " + v;
        })
        ->type_name(format_names("|"));
    sub->add_option("--hash", o->hash,
                    "Block hashes as int (vLLM's default) or bytes (SHA-256; vllm and vllm-array)")
        ->check(CLI::IsMember({"int", "bytes"}));
    sub->add_option("--gaps", o->gaps,
                    "Fraction of batches withheld from the live socket (still replayable)")
        ->check(finite_number(0, 1));
    sub->add_option("--batch", o->batch, "Events per batch")->check(CLI::Range(1, 100000));
    sub->add_option("--duration", o->duration, "Stop after this many seconds (default: Ctrl-C)")
        ->check(finite_number(0, 1e7));
    sub->add_option("--events", o->events, "Stop after this many events per rank (whole batches)")
        ->check(CLI::Range(int64_t{0}, int64_t{1} << 50));
    sub->add_option("--wait-ms", o->wait_ms,
                    "Wait this long for subscribers before sending (and for replay requests after)")
        ->check(CLI::Range(0, 600000));
    sub->add_flag("--old-replay-replies", o->old_replies,
                  "Replay replies without the topic frame (vLLM before 0.26, SGLang)");
    sub->add_flag("--same-hashes", o->same_hashes,
                  "Every rank sends the same blocks' hashes, as ranks serving one system prompt "
                  "hold the same prefixes (default: each rank its own)");
    sub->add_option("--seed", o->seed, "Seed for --gaps");
    return {sub, [o] { return publish(*o); }};
}

}  // namespace kvscope::app
