#include "sessions/event_codec.h"

#include <cstring>

namespace kvscope {

namespace {
void put_varint(std::vector<uint8_t>& out, uint64_t v) {
    while (v >= 0x80) {
        out.push_back(static_cast<uint8_t>(v | 0x80));
        v >>= 7;
    }
    out.push_back(static_cast<uint8_t>(v));
}
uint64_t zigzag(int64_t v) {
    return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
}
int64_t unzigzag(uint64_t v) {
    return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1);
}

struct Cursor {
    const uint8_t* p;
    const uint8_t* end;
    bool ok = true;
    bool varint(uint64_t& v) {
        v = 0;
        for (int shift = 0; shift < 64; shift += 7) {
            if (p >= end) return ok = false;
            uint8_t b = *p++;
            v |= static_cast<uint64_t>(b & 0x7f) << shift;
            if (!(b & 0x80)) return true;
        }
        return ok = false;
    }
    bool svarint(int64_t& v) {
        uint64_t u;
        if (!varint(u)) return false;
        v = unzigzag(u);
        return true;
    }
    bool i32(int32_t& v) {
        int64_t x;
        if (!svarint(x) || x < INT32_MIN || x > INT32_MAX) return ok = false;
        v = static_cast<int32_t>(x);
        return true;
    }
    bool bytes(void* dst, size_t n) {
        if (static_cast<size_t>(end - p) < n) return ok = false;
        std::memcpy(dst, p, n);
        p += n;
        return true;
    }
};
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
    int64_t t_delta = e.t_ns - prev_t_;
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
    if (!e.payload.empty()) mask |= 1u << 10;
    out_.push_back(static_cast<uint8_t>(e.kind));
    out_.push_back(static_cast<uint8_t>(mask & 0xff));
    out_.push_back(static_cast<uint8_t>(mask >> 8));
    if (mask & (1u << 0)) put_varint(out_, seq_delta);
    if (mask & (1u << 1)) put_varint(out_, zigzag(t_delta));
    if (mask & (1u << 2)) put_varint(out_, zigzag(e.request));
    if (mask & (1u << 3)) put_varint(out_, zigzag(e.block));
    if (mask & (1u << 4)) put_varint(out_, zigzag(e.a));
    if (mask & (1u << 5)) put_varint(out_, zigzag(e.b));
    if (mask & (1u << 6)) put_varint(out_, zigzag(e.c));
    if (mask & (1u << 7)) put_varint(out_, zigzag(e.wide));
    if (mask & (1u << 8)) {
        uint8_t buf[8];
        std::memcpy(buf, &e.value, 8);
        out_.insert(out_.end(), buf, buf + 8);
    }
    if (mask & (1u << 9)) put_varint(out_, intern_(e.text));
    if (mask & (1u << 10)) {
        put_varint(out_, e.payload.size());
        out_.insert(out_.end(), e.payload.begin(), e.payload.end());
    }
    prev_seq_ = e.seq_no;
    prev_t_ = e.t_ns;
    ++count_;
}

bool decode_events(const uint8_t* data, size_t size, int32_t run, int64_t step,
                   const std::vector<std::string>& strings, std::vector<Event>& out,
                   std::string& error) {
    Cursor c{data, data + size};
    uint64_t seq = 0;
    int64_t t = 0;
    while (c.p < c.end) {
        Event e;
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
            if (!c.varint(u)) break;
            seq += u;
        }
        if (mask & (1u << 1)) {
            if (!c.svarint(s)) break;
            t += s;
        }
        e.seq_no = seq;
        e.t_ns = t;
        if ((mask & (1u << 2)) && !c.i32(e.request)) break;
        if ((mask & (1u << 3)) && !c.i32(e.block)) break;
        if ((mask & (1u << 4)) && !c.i32(e.a)) break;
        if ((mask & (1u << 5)) && !c.i32(e.b)) break;
        if ((mask & (1u << 6)) && !c.i32(e.c)) break;
        if ((mask & (1u << 7)) && !c.svarint(e.wide)) break;
        if ((mask & (1u << 8)) && !c.bytes(&e.value, 8)) break;
        if (mask & (1u << 9)) {
            if (!c.varint(u)) break;
            if (u == 0 || u >= strings.size()) {
                error =
                    "event names string " + std::to_string(u) + ", which the session does not have";
                return false;
            }
            e.text = strings[u];
        }
        if (mask & (1u << 10)) {
            if (!c.varint(u)) break;
            if (u > static_cast<uint64_t>(c.end - c.p)) {
                c.ok = false;
                break;
            }
            e.payload.assign(c.p, c.p + u);
            c.p += u;
        }
        out.push_back(std::move(e));
    }
    if (!c.ok) {
        error = "event data is truncated";
        return false;
    }
    return true;
}

}  // namespace kvscope
