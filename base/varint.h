#pragma once
// LEB128 varints, zigzag for signed values, and a bounds-checked reader: the byte-level pieces
// of the event blobs (event_codec.h) and keyframes (timeline_state.cpp). The reader never reads
// past `end`; a failed read leaves `ok` false and every later read fails too.

#include <cstdint>
#include <cstring>
#include <vector>

namespace kvscope::varint {

inline void put(std::vector<uint8_t>& out, uint64_t v) {
    while (v >= 0x80) {
        out.push_back(static_cast<uint8_t>(v | 0x80));
        v >>= 7;
    }
    out.push_back(static_cast<uint8_t>(v));
}
inline uint64_t zigzag(int64_t v) {
    return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63);
}
inline int64_t unzigzag(uint64_t v) {
    return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1);
}
inline void put_signed(std::vector<uint8_t>& out, int64_t v) {
    put(out, zigzag(v));
}
inline void put_bytes(std::vector<uint8_t>& out, const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    out.insert(out.end(), b, b + n);
}

struct Reader {
    const uint8_t* p;
    const uint8_t* end;
    bool ok = true;

    size_t left() const { return ok ? static_cast<size_t>(end - p) : 0; }
    bool get(uint64_t& v) {
        v = 0;
        if (!ok) return false;
        for (int shift = 0; shift < 64; shift += 7) {
            if (p >= end) return ok = false;
            uint8_t b = *p++;
            v |= static_cast<uint64_t>(b & 0x7f) << shift;
            if (!(b & 0x80)) return true;
        }
        return ok = false;
    }
    bool get_signed(int64_t& v) {
        uint64_t u;
        if (!get(u)) return false;
        v = unzigzag(u);
        return true;
    }
    bool get_i32(int32_t& v) {
        int64_t x;
        if (!get_signed(x) || x < INT32_MIN || x > INT32_MAX) return ok = false;
        v = static_cast<int32_t>(x);
        return true;
    }
    // A count of items that each take at least one byte: more than the bytes left is corrupt.
    bool get_count(size_t& n) {
        uint64_t u;
        if (!get(u) || u > left()) return ok = false;
        n = static_cast<size_t>(u);
        return true;
    }
    bool bytes(void* dst, size_t n) {
        if (!ok || static_cast<size_t>(end - p) < n) return ok = false;
        std::memcpy(dst, p, n);
        p += n;
        return true;
    }
};

}  // namespace kvscope::varint
