#include "attach/kv_trace.h"

#include "sessions/session_reader.h"

namespace kvscope::attach {

uint64_t trace_salt(int32_t rank, int64_t loop) {
    if (rank == 0 && loop == 0) return 0;
    // splitmix64 of (rank, loop): a different stream of hashes for each.
    uint64_t z = (static_cast<uint64_t>(rank) << 40) ^ static_cast<uint64_t>(loop);
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t salt_trace_hash(uint64_t hash, int32_t rank, int64_t loop) {
    return hash ^ trace_salt(rank, loop);
}

std::vector<KvEvent> eagle_pages(const KvTrace& trace) {
    std::vector<KvEvent> out = trace.events;
    for (size_t i = 0; i < out.size(); ++i) {
        KvEvent& ev = out[i];
        if (ev.type != KvEventType::kBlockStored || ev.token_width != 1) continue;
        const std::vector<int32_t> ids = std::move(ev.token_ids);
        const int32_t next = i < trace.next_tokens.size() ? trace.next_tokens[i] : -1;
        ev.token_ids.clear();
        for (size_t t = 0; t < ids.size(); ++t) {
            const int32_t second = t + 1 < ids.size() ? ids[t + 1] : next;
            if (second < 0) break;
            ev.token_ids.push_back(ids[t]);
            ev.token_ids.push_back(second);
        }
        ev.token_width = 2;
    }
    return out;
}

Result<KvTrace> kv_trace_from_session(const std::string& path) {
    auto reader = SessionReader::open(path, false);
    if (!reader) return reader.error();
    SessionReader& r = **reader;
    if (!r.info().publishers.empty())
        return Error{path +
                     " was recorded by attach, not by kvscope's engine: it has no "
                     "serving run to publish"};
    KvTrace trace;
    trace.block_size = r.info().block_size;
    trace.steps = r.last_step() + 1;
    TimelineState state(r.info());
    const auto bs = static_cast<size_t>(std::max(trace.block_size, 1));
    // Each stored block copies its tokens: a file can name one block's worth of tokens for
    // every few bytes of events, so the copies are counted and refused past a bound.
    size_t tokens_copied = 0;
    Status walked = r.for_each_event(
        r.first_step(), r.last_step(), {}, [&](const Event& e, const SharedText& text) -> Status {
            state.apply(e, text);
            if (e.kind == EventKind::kBlockHashed) {
                if (e.block < 0 || static_cast<size_t>(e.block) >= state.blocks.size()) return {};
                const BlockState& b = state.blocks[static_cast<size_t>(e.block)];
                auto owner = state.requests.find(b.alloc_owner);
                KvEvent ev;
                int32_t next_token = -1;
                ev.type = KvEventType::kBlockStored;
                ev.block_hashes.push_back(static_cast<uint64_t>(e.wide));
                ev.block_size = trace.block_size;
                if (owner != state.requests.end()) {
                    const RequestState& q = owner->second;
                    const auto logical = static_cast<size_t>(std::max(e.a, 0));
                    for (size_t t = logical * bs; t < (logical + 1) * bs && t < q.token_ids.size();
                         ++t)
                        ev.token_ids.push_back(q.token_ids[t]);
                    if ((logical + 1) * bs < q.token_ids.size())
                        next_token = q.token_ids[(logical + 1) * bs];
                    tokens_copied += ev.token_ids.size();
                    if (tokens_copied > kMaxTraceTokens)
                        return Error{path + ": its blocks come to more than " +
                                     std::to_string(kMaxTraceTokens >> 20) +
                                     "M tokens to publish (the same tokens stored over and over?), "
                                     "more than kvscope holds at once"};
                    if (logical > 0 && logical - 1 < q.block_table.size()) {
                        int32_t parent = q.block_table[logical - 1];
                        if (parent >= 0 && state.blocks[static_cast<size_t>(parent)].hash) {
                            ev.has_parent = true;
                            ev.parent_hash = *state.blocks[static_cast<size_t>(parent)].hash;
                        }
                    }
                }
                trace.events.push_back(std::move(ev));
                trace.next_tokens.push_back(next_token);
            } else if (e.kind == EventKind::kBlockEvict) {
                KvEvent ev;
                ev.type = KvEventType::kBlockRemoved;
                ev.block_hashes.push_back(static_cast<uint64_t>(e.wide));
                trace.events.push_back(std::move(ev));
                trace.next_tokens.push_back(-1);
            }
            return {};
        });
    if (!walked) return walked.error();
    for (const BlockState& b : state.blocks)
        if (b.hash) {
            KvEvent ev;
            ev.type = KvEventType::kBlockRemoved;
            ev.block_hashes.push_back(*b.hash);
            trace.events.push_back(std::move(ev));
            trace.next_tokens.push_back(-1);
        }
    if (trace.events.empty())
        return Error{path +
                     " has no prefix-cache blocks to publish (was it run with "
                     "--prefix-cache off?)"};
    return trace;
}

}  // namespace kvscope::attach
