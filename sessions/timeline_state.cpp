#include "sessions/timeline_state.h"

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "base/varint.h"
#include "sessions/legacy_keyframe.h"

namespace kvscope {

const char* request_phase_name(RequestPhase p) {
    switch (p) {
        case RequestPhase::kWaiting:
            return "waiting";
        case RequestPhase::kRunning:
            return "running";
        case RequestPhase::kSwapped:
            return "swapped";
        case RequestPhase::kFinished:
            return "finished";
        case RequestPhase::kRejected:
            return "rejected";
    }
    return "unknown";
}

TimelineState::TimelineState(const RunInfo& run_info)
    : info(run_info),
      blocks(static_cast<size_t>(std::max(run_info.num_blocks, 0))),
      attached(run_info.publishers.empty() ? 0 : blocks.size()) {}

namespace {
bool valid_block(const TimelineState& s, int32_t b) {
    return b >= 0 && static_cast<size_t>(b) < s.blocks.size();
}
// Tables and token lists grow one entry at a time: the engine fills them in order. An event
// that would skip ahead (only a damaged or hostile file has one) is ignored rather than grow a
// list to whatever size it claims; `check` reports it.
void set_entry(RequestState& r, int32_t logical, int32_t block) {
    if (logical < 0 || static_cast<size_t>(logical) > r.block_table.size()) return;
    if (static_cast<size_t>(logical) == r.block_table.size()) r.block_table.push_back(-1);
    r.block_table[static_cast<size_t>(logical)] = block;
}
}  // namespace

void TimelineState::apply(const Event& e) {
    apply(e, SharedText(e.text));
}

void TimelineState::apply(const Event& e, const SharedText& text) {
    step = std::max(step, e.step);
    last_seq_no = std::max(last_seq_no, e.seq_no);
    auto req = [&]() -> RequestState& {
        RequestState& r = requests[e.request];
        r.index = e.request;
        return r;
    };
    switch (e.kind) {
        case EventKind::kRequestArrive: {
            RequestState& r = req();
            r.name = text;
            r.prompt_len = e.a;
            r.max_tokens = e.b;
            r.phase = RequestPhase::kWaiting;
            r.arrival_step = e.step;
            break;
        }
        case EventKind::kRequestReject:
            req().phase = RequestPhase::kRejected;
            break;
        case EventKind::kRequestFinish: {
            RequestState& r = req();
            r.phase = RequestPhase::kFinished;
            r.finish_step = e.step;
            break;
        }
        case EventKind::kToken: {
            RequestState& r = req();
            if (e.a < 0 || static_cast<size_t>(e.a) > r.token_ids.size()) break;  // see set_entry
            auto pos = static_cast<size_t>(e.a);
            if (pos == r.token_ids.size()) {
                r.token_ids.push_back(-1);
                r.token_text.emplace_back();
            }
            r.token_ids[pos] = e.b;
            r.token_text[pos] = text;
            break;
        }
        case EventKind::kBlockAlloc:
        case EventKind::kBlockShare: {
            if (!valid_block(*this, e.block)) break;
            BlockState& b = blocks[static_cast<size_t>(e.block)];
            if (e.kind == EventKind::kBlockAlloc) {
                b = BlockState{};
                b.refcount = 1;
                b.alloc_step = e.step;
                b.alloc_owner = e.request;
            } else {
                ++b.refcount;
            }
            b.owners.push_back(e.request);
            if (e.request >= 0) {
                RequestState& r = req();
                set_entry(r, e.a, e.block);
            }
            break;
        }
        case EventKind::kBlockFree: {
            if (!valid_block(*this, e.block)) break;
            BlockState& b = blocks[static_cast<size_t>(e.block)];
            b.refcount = std::max(0, b.refcount - 1);
            auto it = std::find(b.owners.begin(), b.owners.end(), e.request);
            if (it != b.owners.end()) b.owners.erase(it);
            if (e.request >= 0) {
                RequestState& r = req();
                if (e.a >= 0 && static_cast<size_t>(e.a) < r.block_table.size() &&
                    r.block_table[static_cast<size_t>(e.a)] == e.block)
                    r.block_table[static_cast<size_t>(e.a)] = -1;
                while (!r.block_table.empty() && r.block_table.back() == -1)
                    r.block_table.pop_back();
            }
            break;
        }
        case EventKind::kTokenEvict:
            if (valid_block(*this, e.block)) ++blocks[static_cast<size_t>(e.block)].lane_holes;
            break;
        case EventKind::kTokenMove: {
            // A kept token moves down into a hole: its old slot becomes the hole.
            if (valid_block(*this, e.block)) --blocks[static_cast<size_t>(e.block)].lane_holes;
            auto it = requests.find(e.request);
            const auto from = static_cast<size_t>(static_cast<uint64_t>(e.wide) >> 32);
            const auto bs = static_cast<size_t>(std::max(info.block_size, 1));
            if (it != requests.end() && from / bs < it->second.block_table.size()) {
                int32_t b = it->second.block_table[from / bs];
                if (valid_block(*this, b)) ++blocks[static_cast<size_t>(b)].lane_holes;
            }
            break;
        }
        case EventKind::kBlockHashed:
            if (valid_block(*this, e.block))
                blocks[static_cast<size_t>(e.block)].hash = static_cast<uint64_t>(e.wide);
            break;
        case EventKind::kBlockEvict:
            if (valid_block(*this, e.block)) blocks[static_cast<size_t>(e.block)].hash.reset();
            break;
        case EventKind::kPreempt: {
            RequestState& r = req();
            ++r.preemptions;
            r.phase = e.a == static_cast<int32_t>(PreemptMode::kSwap) ? RequestPhase::kSwapped
                                                                      : RequestPhase::kWaiting;
            break;
        }
        case EventKind::kSwapIn:
        case EventKind::kRequestAdmit:
            req().phase = RequestPhase::kRunning;
            break;
        case EventKind::kMetric:
            metrics[text.str()] = e.value;
            break;
        case EventKind::kKvStored: {
            if (!valid_block(*this, e.block) || attached.empty()) break;
            BlockState& b = blocks[static_cast<size_t>(e.block)];
            if (b.refcount > 0) {  // stored again (offloading repeats hashes): one more reference
                ++b.refcount;
                break;
            }
            b = BlockState{};
            b.refcount = 1;
            b.hash = static_cast<uint64_t>(e.wide);
            b.alloc_step = e.step;
            AttachedBlock& a = attached[static_cast<size_t>(e.block)];
            a = AttachedBlock{};
            a.medium = static_cast<KvMedium>(std::clamp(e.b, 0, kNumKvMedia - 1));
            decode_stored_block(e.payload, a);  // leaves it as it was when the payload is bad
            break;
        }
        case EventKind::kKvRemoved: {
            if (!valid_block(*this, e.block) || attached.empty()) break;
            BlockState& b = blocks[static_cast<size_t>(e.block)];
            b.refcount = std::max(0, e.c);  // the references left, as the attacher counted them
            if (b.refcount == 0) {
                b.hash.reset();
                attached[static_cast<size_t>(e.block)] = AttachedBlock{};
            }
            break;
        }
        default:
            break;
    }
}

int32_t TimelineState::blocks_used() const {
    return static_cast<int32_t>(
        std::count_if(blocks.begin(), blocks.end(), [](const BlockState& b) { return !b.free(); }));
}

int32_t TimelineState::blocks_cached() const {
    return static_cast<int32_t>(std::count_if(blocks.begin(), blocks.end(),
                                              [](const BlockState& b) { return b.cached(); }));
}

namespace {
// Keyframe layout (all integers varints, signed ones zigzag; see varint.h):
//   "KVKF" u8 version(2)
//   step, last_seq, num_blocks
//   string table: count, then (length, bytes) each; token texts and names refer to it by index
//   blocks that are not pristine: count, then per block: index delta, refcount, owner count,
//     owners, u8 has_hash, [u64 hash LE], alloc_step, alloc_owner
//   requests: count, then index, name id, u8 phase, prompt_len, max_tokens, table length,
//     entries, token count, ids, text ids, preemptions, arrival_step, finish_step
//   metrics: count, then name id, f64 LE
// Interning the texts keeps a keyframe of a long run small: a token costs about three bytes.
constexpr char kKeyframeMagic[4] = {'K', 'V', 'K', 'F'};
//   attached blocks held (version 5): count, then per block: index delta, u8 medium, the
//     block's kv_stored payload (varint length, bytes: probes/event.h StoredBlock)
// 3 added each block's lane_holes, 4 the attached blocks (u8 has_parent, [u64 parent LE],
// token count, tokens, where 5 has the payload); versions 2 to 4 still load.
constexpr uint8_t kKeyframeVersion = 5;

struct StringTable {
    std::unordered_map<std::string, uint32_t> ids;
    std::vector<const std::string*> order;
    uint32_t id(const std::string& s) {
        auto [it, added] = ids.emplace(s, static_cast<uint32_t>(order.size()));
        if (added) order.push_back(&it->first);
        return it->second;
    }
};

}  // namespace

std::vector<uint8_t> TimelineState::serialize() const {
    using namespace varint;
    StringTable strings;
    std::vector<uint8_t> body;
    body.reserve(4096);
    size_t pristine = 0;
    for (const BlockState& b : blocks)
        pristine += b.refcount == 0 && !b.hash && b.alloc_step < 0;
    put(body, blocks.size() - pristine);
    int64_t prev = -1;
    for (size_t i = 0; i < blocks.size(); ++i) {
        const BlockState& b = blocks[i];
        if (b.refcount == 0 && !b.hash && b.alloc_step < 0) continue;
        put(body, static_cast<uint64_t>(static_cast<int64_t>(i) - prev));
        prev = static_cast<int64_t>(i);
        put_signed(body, b.refcount);
        put(body, b.owners.size());
        for (int32_t o : b.owners)
            put_signed(body, o);
        body.push_back(b.hash ? 1 : 0);
        if (b.hash) put_bytes(body, &*b.hash, 8);
        put_signed(body, b.alloc_step);
        put_signed(body, b.alloc_owner);
        put_signed(body, b.lane_holes);
    }
    put(body, requests.size());
    for (const auto& [i, r] : requests) {
        put_signed(body, r.index);
        put(body, strings.id(r.name));
        body.push_back(static_cast<uint8_t>(r.phase));
        put_signed(body, r.prompt_len);
        put_signed(body, r.max_tokens);
        put(body, r.block_table.size());
        for (int32_t b : r.block_table)
            put_signed(body, b);
        put(body, r.token_ids.size());
        for (int32_t t : r.token_ids)
            put_signed(body, t);
        static const std::string no_text;
        for (size_t t = 0; t < r.token_ids.size(); ++t)
            put(body, strings.id(t < r.token_text.size() ? r.token_text[t].str() : no_text));
        put_signed(body, r.preemptions);
        put_signed(body, r.arrival_step);
        put_signed(body, r.finish_step);
    }
    put(body, metrics.size());
    for (const auto& [name, v] : metrics) {
        put(body, strings.id(name));
        put_bytes(body, &v, 8);
    }
    size_t held = 0;
    for (size_t i = 0; i < attached.size(); ++i)
        held += blocks[i].refcount > 0;
    put(body, held);
    prev = -1;
    std::vector<uint8_t> payload;
    for (size_t i = 0; i < attached.size(); ++i) {
        if (blocks[i].refcount == 0) continue;
        const AttachedBlock& a = attached[i];
        put(body, static_cast<uint64_t>(static_cast<int64_t>(i) - prev));
        prev = static_cast<int64_t>(i);
        body.push_back(static_cast<uint8_t>(a.medium));
        encode_stored_block(a, payload);
        put(body, payload.size());
        put_bytes(body, payload.data(), payload.size());
    }
    std::vector<uint8_t> out(std::begin(kKeyframeMagic), std::end(kKeyframeMagic));
    out.push_back(kKeyframeVersion);
    put_signed(out, step);
    put(out, last_seq_no);
    put(out, blocks.size());
    put(out, strings.order.size());
    for (const std::string* t : strings.order) {
        put(out, t->size());
        put_bytes(out, t->data(), t->size());
    }
    out.insert(out.end(), body.begin(), body.end());
    return out;
}

std::optional<TimelineState> TimelineState::deserialize(const std::vector<uint8_t>& bytes,
                                                        const RunInfo& info, std::string& error) {
    if (bytes.size() < 5 || std::memcmp(bytes.data(), kKeyframeMagic, 4) != 0)
        return deserialize_cbor_keyframe(bytes, info, error);
    const uint8_t version = bytes[4];
    if (version < 2 || version > kKeyframeVersion) {
        error = "keyframe has an unknown version " + std::to_string(bytes[4]);
        return std::nullopt;
    }
    varint::Reader in{bytes.data() + 5, bytes.data() + bytes.size()};
    auto fail = [&](const char* what) {
        error = std::string("keyframe is malformed: ") + what;
        return std::nullopt;
    };
    int64_t step = 0;
    uint64_t seq = 0, num_blocks = 0;
    in.get_signed(step);
    in.get(seq);
    in.get(num_blocks);
    if (!in.ok) return fail("truncated header");
    if (num_blocks != static_cast<uint64_t>(std::max(info.num_blocks, 0))) {
        error = "keyframe describes " + std::to_string(num_blocks) + " blocks, the session " +
                std::to_string(info.num_blocks);
        return std::nullopt;
    }
    TimelineState s(info);
    s.step = step;
    s.last_seq_no = seq;
    size_t n_strings = 0;
    in.get_count(n_strings);
    // Shared: a text named by many tokens is held once, as in the session (SharedText).
    std::vector<SharedText> strings(n_strings);
    for (SharedText& t : strings) {
        size_t len = 0;
        if (!in.get_count(len)) break;
        t = std::string(reinterpret_cast<const char*>(in.p), len);
        in.p += len;
    }
    auto text = [&](auto& dst) {
        uint64_t id = 0;
        if (!in.get(id) || id >= strings.size()) return in.ok = false;
        dst = strings[id];
        return true;
    };
    size_t n_blocks = 0;
    in.get_count(n_blocks);
    if (n_blocks > s.blocks.size()) return fail("more blocks than the pool holds");
    int64_t index = -1;
    for (size_t k = 0; k < n_blocks && in.ok; ++k) {
        uint64_t delta = 0;
        in.get(delta);
        if (delta == 0 || delta > s.blocks.size()) return fail("block index out of range");
        index += static_cast<int64_t>(delta);
        if (index >= static_cast<int64_t>(s.blocks.size())) return fail("block index out of range");
        BlockState& b = s.blocks[static_cast<size_t>(index)];
        size_t n_owners = 0;
        in.get_i32(b.refcount);
        in.get_count(n_owners);
        b.owners.resize(n_owners);
        for (int32_t& o : b.owners)
            in.get_i32(o);
        uint8_t has_hash = 0;
        in.bytes(&has_hash, 1);
        if (has_hash > 1) return fail("bad hash flag");
        if (has_hash) {
            uint64_t h = 0;
            in.bytes(&h, 8);
            b.hash = h;
        }
        in.get_signed(b.alloc_step);
        in.get_i32(b.alloc_owner);
        if (version >= 3) in.get_i32(b.lane_holes);
    }
    size_t n_requests = 0;
    in.get_count(n_requests);
    for (size_t k = 0; k < n_requests && in.ok; ++k) {
        RequestState q;
        uint8_t phase = 0;
        in.get_i32(q.index);
        text(q.name);
        in.bytes(&phase, 1);
        if (phase > static_cast<uint8_t>(RequestPhase::kRejected))
            return fail("unknown request state");
        q.phase = static_cast<RequestPhase>(phase);
        in.get_i32(q.prompt_len);
        in.get_i32(q.max_tokens);
        size_t n = 0;
        in.get_count(n);
        q.block_table.resize(n);
        for (int32_t& b : q.block_table)
            in.get_i32(b);
        in.get_count(n);
        q.token_ids.resize(n);
        q.token_text.resize(n);
        for (int32_t& t : q.token_ids)
            in.get_i32(t);
        for (SharedText& t : q.token_text)
            text(t);
        in.get_i32(q.preemptions);
        in.get_signed(q.arrival_step);
        in.get_signed(q.finish_step);
        if (!in.ok) break;
        int32_t at = q.index;
        s.requests[at] = std::move(q);
    }
    size_t n_metrics = 0;
    in.get_count(n_metrics);
    for (size_t k = 0; k < n_metrics && in.ok; ++k) {
        SharedText name;
        double v = 0;
        text(name);
        in.bytes(&v, 8);
        s.metrics[name.str()] = v;
    }
    if (version >= 4) {
        size_t n_attached = 0;
        in.get_count(n_attached);
        if (n_attached > s.attached.size()) return fail("more attached blocks than the pool holds");
        index = -1;
        for (size_t k = 0; k < n_attached && in.ok; ++k) {
            uint64_t delta = 0;
            in.get(delta);
            if (delta == 0 || delta > s.attached.size()) return fail("block index out of range");
            index += static_cast<int64_t>(delta);
            if (index >= static_cast<int64_t>(s.attached.size()))
                return fail("block index out of range");
            AttachedBlock& a = s.attached[static_cast<size_t>(index)];
            uint8_t medium = 0;
            in.bytes(&medium, 1);
            if (medium >= kNumKvMedia) return fail("bad attached block");
            a.medium = static_cast<KvMedium>(medium);
            if (version >= 5) {
                size_t n = 0;
                if (!in.get_count(n) || !decode_stored_block(in.p, n, a))
                    return fail("bad attached block");
                in.p += n;
                continue;
            }
            uint8_t has_parent = 0;
            in.bytes(&has_parent, 1);
            if (has_parent > 1) return fail("bad attached block");
            a.has_parent = has_parent == 1;
            if (a.has_parent) in.bytes(&a.parent, 8);
            size_t n = 0;
            in.get_count(n);
            a.tokens.resize(n);
            for (int32_t& t : a.tokens)
                in.get_i32(t);
        }
    }
    if (!in.ok) return fail("truncated or out-of-range field");
    if (in.p != in.end) return fail("trailing bytes");
    return s;
}

bool TimelineState::operator==(const TimelineState& o) const {
    auto same_blocks = [&] {
        if (blocks.size() != o.blocks.size()) return false;
        for (size_t i = 0; i < blocks.size(); ++i) {
            const BlockState &a = blocks[i], &b = o.blocks[i];
            auto oa = a.owners, ob = b.owners;
            std::sort(oa.begin(), oa.end());
            std::sort(ob.begin(), ob.end());
            if (a.refcount != b.refcount || oa != ob || a.hash != b.hash ||
                a.alloc_step != b.alloc_step || a.lane_holes != b.lane_holes)
                return false;
        }
        return true;
    };
    auto same_requests = [&] {
        if (requests.size() != o.requests.size()) return false;
        for (const auto& [i, a] : requests) {
            auto it = o.requests.find(i);
            if (it == o.requests.end()) return false;
            const RequestState& b = it->second;
            if (a.name != b.name || a.phase != b.phase || a.block_table != b.block_table ||
                a.token_ids != b.token_ids || a.token_text != b.token_text ||
                a.preemptions != b.preemptions || a.prompt_len != b.prompt_len ||
                a.max_tokens != b.max_tokens)
                return false;
        }
        return true;
    };
    return step == o.step && same_blocks() && same_requests() && metrics == o.metrics &&
           attached == o.attached;
}

}  // namespace kvscope
