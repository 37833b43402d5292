#include "sessions/event_codec.h"

#include <cstring>

#include "base/varint.h"

namespace kvscope {

namespace {
using varint::put_signed;
}  // namespace

void EventEncoder::clear() {
    out_.clear();
    count_ = 0;
    prev_seq_ = 0;
    prev_t_ = 0;
}

void EventEncoder::add(const Event& e) {
    uint16_t mask = 0;
    uint64_t seq_delta = e.seq_no - prev_seq_;
    // Deltas wrap (two's complement), in the encoder and the decoder alike, so any timestamp
    // round-trips and no input can overflow a signed add.
    auto t_delta =
        static_cast<int64_t>(static_cast<uint64_t>(e.t_ns) - static_cast<uint64_t>(prev_t_));
    if (seq_delta != 0) mask |= 1u << 0;
    if (t_delta != 0) mask |= 1u << 1;
    if (e.request != -1) mask |= 1u << 2;
    if (e.block != -1) mask |= 1u << 3;
    if (e.a != 0) mask |= 1u << 4;
    if (e.b != 0) mask |= 1u << 5;
    if (e.c != 0) mask |= 1u << 6;
    if (e.wide != 0) mask |= 1u << 7;
    if (e.value != 0) mask |= 1u << 8;
    if (!e.text.empty()) mask |= 1u << 9;
    // A kernel event's cost travels as its payload.
    uint8_t cost_bytes[kKernelCostMaxBytes];
    const size_t cost_size = e.kind == EventKind::kKernel && e.payload.empty()
                                 ? encode_kernel_cost(e.cost, cost_bytes)
                                 : 0;
    if (!e.payload.empty() || cost_size > 0) mask |= 1u << 10;
    out_.push_back(static_cast<uint8_t>(e.kind));
    out_.push_back(static_cast<uint8_t>(mask & 0xff));
    out_.push_back(static_cast<uint8_t>(mask >> 8));
    if (mask & (1u << 0)) varint::put(out_, seq_delta);
    if (mask & (1u << 1)) put_signed(out_, t_delta);
    if (mask & (1u << 2)) put_signed(out_, e.request);
    if (mask & (1u << 3)) put_signed(out_, e.block);
    if (mask & (1u << 4)) put_signed(out_, e.a);
    if (mask & (1u << 5)) put_signed(out_, e.b);
    if (mask & (1u << 6)) put_signed(out_, e.c);
    if (mask & (1u << 7)) put_signed(out_, e.wide);
    if (mask & (1u << 8)) {
        uint8_t buf[8];
        std::memcpy(buf, &e.value, 8);
        out_.insert(out_.end(), buf, buf + 8);
    }
    if (mask & (1u << 9)) varint::put(out_, intern_(e.text));
    if (mask & (1u << 10)) {
        if (cost_size > 0) {
            varint::put(out_, cost_size);
            out_.insert(out_.end(), cost_bytes, cost_bytes + cost_size);
        } else {
            varint::put(out_, e.payload.size());
            out_.insert(out_.end(), e.payload.begin(), e.payload.end());
        }
    }
    prev_seq_ = e.seq_no;
    prev_t_ = e.t_ns;
    ++count_;
}

bool decode_events(const uint8_t* data, size_t size, int32_t run, int64_t step,
                   const std::vector<std::string>& strings, std::vector<Event>& out,
                   std::string& error) {
    std::vector<SharedText> shared(strings.begin(), strings.end());
    return decode_events(
        data, size, run, step, shared,
        [&out](const Event& e, const SharedText& text) {
            out.push_back(e);
            out.back().text = text.str();
            return true;
        },
        error);
}

bool decode_events(const uint8_t* data, size_t size, int32_t run, int64_t step,
                   const std::vector<SharedText>& strings, const EventVisitor& visit,
                   std::string& error) {
    varint::Reader c{data, data + size};
    uint64_t seq = 0;
    int64_t t = 0;
    while (c.p < c.end) {
        Event e;
        SharedText text;
        e.run = run;
        e.step = step;
        uint8_t kind = *c.p++;
        if (kind == 0 || kind >= kNumEventKinds) {
            error = "unknown event kind " + std::to_string(kind);
            return false;
        }
        e.kind = static_cast<EventKind>(kind);
        uint8_t m[2];
        if (!c.bytes(m, 2)) break;
        uint16_t mask = static_cast<uint16_t>(m[0] | (m[1] << 8));
        if (mask >> 11) {
            error = "event has unknown fields";
            return false;
        }
        uint64_t u = 0;
        int64_t s = 0;
        if (mask & (1u << 0)) {
            if (!c.get(u)) break;
            seq += u;
        }
        if (mask & (1u << 1)) {
            if (!c.get_signed(s)) break;
            t = static_cast<int64_t>(static_cast<uint64_t>(t) + static_cast<uint64_t>(s));
        }
        e.seq_no = seq;
        e.t_ns = t;
        if ((mask & (1u << 2)) && !c.get_i32(e.request)) break;
        if ((mask & (1u << 3)) && !c.get_i32(e.block)) break;
        if ((mask & (1u << 4)) && !c.get_i32(e.a)) break;
        if ((mask & (1u << 5)) && !c.get_i32(e.b)) break;
        if ((mask & (1u << 6)) && !c.get_i32(e.c)) break;
        if ((mask & (1u << 7)) && !c.get_signed(e.wide)) break;
        if ((mask & (1u << 8)) && !c.bytes(&e.value, 8)) break;
        if (mask & (1u << 9)) {
            if (!c.get(u)) break;
            if (u == 0 || u >= strings.size()) {
                error =
                    "event names string " + std::to_string(u) + ", which the session does not have";
                return false;
            }
            text = strings[u];
        }
        if (mask & (1u << 10)) {
            if (!c.get(u)) break;
            if (u > static_cast<uint64_t>(c.end - c.p)) {
                c.ok = false;
                break;
            }
            e.payload.assign(c.p, c.p + u);
            c.p += u;
            // Kept as the payload only when it does not decode: the op's bytes are then unknown.
            if (e.kind == EventKind::kKernel && decode_kernel_cost(e.payload, e.cost))
                e.payload.clear();
        }
        if (!visit(e, text)) return true;
    }
    if (!c.ok) {
        error = "event data is truncated";
        return false;
    }
    return true;
}

}  // namespace kvscope
