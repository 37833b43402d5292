#include "attach/kv_event_encoder.h"

#include <msgpack.hpp>

#include <algorithm>
#include <cstring>

namespace kvscope::attach {

namespace {

// msgpack's packer writes into anything with write(const char*, size_t).
struct ByteSink {
    std::vector<uint8_t>& out;
    // Grown then copied into: GCC 12 misreads vector::insert of a 1-byte range inlined from
    // msgpack's packer as an overflow (-Wstringop-overflow in optimized builds).
    void write(const char* p, size_t n) {
        const size_t at = out.size();
        out.resize(at + n);
        std::memcpy(out.data() + at, p, n);
    }
};

// Where a hash goes in pre-encoded bytes (PreEncodedEvents), left out of them.
struct HashHole {
    size_t at;
    uint64_t hash;
};

struct Packer : msgpack::packer<ByteSink> {
    explicit Packer(ByteSink& s) : msgpack::packer<ByteSink>(s), sink(s) {}
    ByteSink& sink;
    // When set, hashes are not written but noted here (PreEncodedEvents' templates).
    std::vector<HashHole>* holes = nullptr;
};

void pack_hash(Packer& pk, uint64_t h, HashEncoding enc) {
    if (pk.holes) {
        pk.holes->push_back({pk.sink.out.size(), h});
        return;
    }
    if (enc == HashEncoding::kInt) {
        pk.pack_uint64(h);
        return;
    }
    // 24 bytes of filler, then the hash: vLLM's integer form of a digest is its last 8 bytes.
    uint8_t digest[32];
    uint64_t x = h;
    for (int i = 0; i < 24; ++i) {
        if (i % 8 == 0) x = x * 0x9E3779B97F4A7C15ull + 1;
        digest[i] = static_cast<uint8_t>(x >> (56 - 8 * (i % 8)));
    }
    for (int i = 0; i < 8; ++i)
        digest[24 + i] = static_cast<uint8_t>(h >> (56 - 8 * i));
    pk.pack_bin(32);
    pk.pack_bin_body(reinterpret_cast<const char*>(digest), 32);
}

void pack_str(Packer& pk, std::string_view s) {
    pk.pack_str(static_cast<uint32_t>(s.size()));
    pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

// A Python float as msgspec writes it, always float64 (msgpack-cxx's pack_double writes an
// integral value as an integer).
void pack_float64(Packer& pk, double d) {
    uint64_t bits;
    std::memcpy(&bits, &d, 8);
    char buf[9];
    buf[0] = static_cast<char>(0xcb);
    for (int i = 0; i < 8; ++i)
        buf[1 + i] = static_cast<char>(bits >> (56 - 8 * i));
    pk.sink.write(buf, 9);
}

void pack_hashes(Packer& pk, const uint64_t* h, size_t n, HashEncoding enc) {
    pk.pack_array(static_cast<uint32_t>(n));
    for (size_t i = 0; i < n; ++i)
        pack_hash(pk, h[i], enc);
}

// An optional int / string: the value, or nil.
void pack_opt(Packer& pk, int64_t v, bool set) {
    if (set)
        pk.pack_int64(v);
    else
        pk.pack_nil();
}
void pack_opt(Packer& pk, std::string_view s) {
    if (s.empty())
        pk.pack_nil();
    else
        pack_str(pk, s);
}

std::string_view medium_of(const KvEvent& ev) {
    if (!ev.has_medium) return {};
    return ev.medium == KvMedium::kOther && !ev.medium_name.empty() ? ev.medium_name
                                                                    : kv_medium_name(ev.medium);
}

bool is_map(WireFormat f) {
    return f == WireFormat::kVllm || f == WireFormat::kSglang || f == WireFormat::kSglangEagle;
}
bool is_sglang(WireFormat f) {
    return f == WireFormat::kSglang || f == WireFormat::kSglangEagle;
}

// What a format always writes of an event, the tag included: an array's length, or a map's
// entries for the fields without a default (a caller adds those set beyond their default).
uint32_t fixed_fields(WireFormat f, KvEventType type) {
    const bool stored = type == KvEventType::kBlockStored;
    switch (f) {
        case WireFormat::kVllmV09:
            return stored ? 6 : 2;
        case WireFormat::kVllmArray:
            return stored ? 12 : 4;
        case WireFormat::kVllm:
            return stored ? 8 : 3;
        case WireFormat::kSglang:
        case WireFormat::kSglangEagle:
            return stored ? 6 : 2;
    }
    return 1;
}

// The fields of one event in their declaration order; a map writes each under its name, an
// array writes them all in place.
struct Fields {
    Packer& pk;
    bool map;
    void key(std::string_view k) {
        if (map) pack_str(pk, k);
    }
    // A field with a default, written only when set (maps).
    void set_int(std::string_view k, int64_t v, bool set) {
        if (!set) return;
        key(k);
        pk.pack_int64(v);
    }
    void set_str(std::string_view k, std::string_view v) {
        if (v.empty()) return;
        key(k);
        pack_str(pk, v);
    }
    void head(std::string_view tag, uint32_t n) {
        if (map) {
            pk.pack_map(n);
            pack_str(pk, "type");
        } else {
            pk.pack_array(n);
        }
        pack_str(pk, tag);
    }
};

// One BlockStored's fields (a page of it for SGLang).
struct StoredView {
    const uint64_t* hashes;
    size_t n_hashes;
    bool has_parent;
    uint64_t parent;
    const int32_t* tokens;
    size_t n_positions;  // token_ids' length; token_width ids each
    const KvEvent& ev;
};

void pack_tokens(Packer& pk, const StoredView& v) {
    pk.pack_array(static_cast<uint32_t>(v.n_positions));
    for (size_t i = 0; i < v.n_positions; ++i) {
        if (v.ev.token_width == 2) {
            pk.pack_array(2);
            pk.pack_int32(v.tokens[2 * i]);
            pk.pack_int32(v.tokens[2 * i + 1]);
        } else {
            pk.pack_int32(v.tokens[i]);
        }
    }
}

void pack_stored(Packer& pk, const StoredView& v, WireFormat f, HashEncoding enc) {
    const KvEvent& ev = v.ev;
    Fields out{pk, is_map(f)};
    const bool group = ev.group_idx >= 0, window = ev.sliding_window >= 0;
    const std::string_view medium = medium_of(ev);
    uint32_t n = fixed_fields(f, KvEventType::kBlockStored);
    if (f == WireFormat::kVllm) n += group + !ev.group_kind.empty() + window + !ev.locality.empty();
    if (is_sglang(f)) n += !medium.empty() + !ev.cache_salt.empty() + !ev.session_id.empty();
    out.head("BlockStored", n);
    out.key("block_hashes");
    pack_hashes(pk, v.hashes, v.n_hashes, enc);
    out.key("parent_block_hash");
    if (v.has_parent)
        pack_hash(pk, v.parent, enc);
    else
        pk.pack_nil();
    out.key("token_ids");
    pack_tokens(pk, v);
    out.key("block_size");
    pk.pack_int32(ev.block_size);
    out.key("lora_id");
    pack_opt(pk, ev.lora_id, ev.lora_id >= 0);
    if (f == WireFormat::kVllmV09) return;
    if (is_sglang(f)) {  // medium, cache_salt, session_id: defaults None, omitted
        out.set_str("medium", medium);
        out.set_str("cache_salt", ev.cache_salt);
        out.set_str("session_id", ev.session_id);
        return;
    }
    out.key("medium");  // vLLM: no default, always written
    pack_opt(pk, medium);
    out.key("lora_name");
    pk.pack_nil();
    if (f == WireFormat::kVllmArray) {
        pk.pack_nil();  // extra_keys
        pack_opt(pk, ev.group_idx, group);
        pack_opt(pk, ev.group_kind);
        pack_opt(pk, ev.sliding_window, window);
        return;
    }
    // vLLM's maps: event_version (1) and extra_keys (None) at their defaults, left out.
    out.set_int("group_idx", ev.group_idx, group);
    out.set_str("kv_cache_spec_kind", ev.group_kind);
    out.set_int("kv_cache_spec_sliding_window", ev.sliding_window, window);
    out.set_str("locality", ev.locality);
}

void pack_removed(Packer& pk, const KvEvent& ev, const uint64_t* h, size_t n, WireFormat f,
                  HashEncoding enc) {
    Fields out{pk, is_map(f)};
    const std::string_view medium = medium_of(ev);
    const bool group = ev.group_idx >= 0;
    uint32_t fields = fixed_fields(f, KvEventType::kBlockRemoved);
    if (f == WireFormat::kVllm) fields += group + !ev.locality.empty();
    if (is_sglang(f)) fields += !medium.empty();
    out.head("BlockRemoved", fields);
    out.key("block_hashes");
    pack_hashes(pk, h, n, enc);
    if (f == WireFormat::kVllmV09) return;
    if (is_sglang(f)) {
        out.set_str("medium", medium);
        return;
    }
    out.key("medium");
    pack_opt(pk, medium);
    if (f == WireFormat::kVllmArray) {
        pack_opt(pk, ev.group_idx, group);
        return;
    }
    out.set_int("group_idx", ev.group_idx, group);
    out.set_str("locality", ev.locality);
}

size_t wire_events(const KvEvent& ev, WireFormat format) {
    if (!is_sglang(format) || ev.type == KvEventType::kAllBlocksCleared) return 1;
    return ev.block_hashes.size();
}

// One event as the format writes it (SGLang: one per page).
void pack_event(Packer& pk, const KvEvent& ev, WireFormat format, HashEncoding hashes) {
    if (ev.type == KvEventType::kAllBlocksCleared) {
        Fields{pk, is_map(format)}.head("AllBlocksCleared", 1);
        return;
    }
    if (ev.type == KvEventType::kBlockRemoved) {
        if (is_sglang(format)) {
            for (uint64_t h : ev.block_hashes)
                pack_removed(pk, ev, &h, 1, format, hashes);
        } else {
            pack_removed(pk, ev, ev.block_hashes.data(), ev.block_hashes.size(), format, hashes);
        }
        return;
    }
    const size_t width = static_cast<size_t>(std::max(ev.token_width, 1));
    const size_t positions = ev.token_ids.size() / width;
    if (is_sglang(format)) {  // one event per page, each naming its parent
        const size_t per = ev.block_size > 0 ? static_cast<size_t>(ev.block_size) : 0;
        for (size_t i = 0; i < ev.block_hashes.size(); ++i) {
            const size_t begin = std::min(i * per, positions);
            const size_t end = std::min(begin + per, positions);
            StoredView v{&ev.block_hashes[i],
                         1,
                         i > 0 || ev.has_parent,
                         i > 0 ? ev.block_hashes[i - 1] : ev.parent_hash,
                         ev.token_ids.data() + begin * width,
                         end - begin,
                         ev};
            pack_stored(pk, v, format, hashes);
        }
        return;
    }
    StoredView v{ev.block_hashes.data(),
                 ev.block_hashes.size(),
                 ev.has_parent,
                 ev.parent_hash,
                 ev.token_ids.data(),
                 positions,
                 ev};
    pack_stored(pk, v, format, hashes);
}

void pack_batch_head(Packer& pk, WireFormat format, double ts, size_t wire_events) {
    // vLLM 0.9's EventBatch has no rank; later ones always write it (array_like), nil or not.
    pk.pack_array(format == WireFormat::kVllmV09 ? 2 : 3);
    pack_float64(pk, ts);
    pk.pack_array(static_cast<uint32_t>(wire_events));
}

void pack_batch_tail(Packer& pk, WireFormat format, int32_t rank) {
    if (format == WireFormat::kVllmV09) return;
    if (rank >= 0)
        pk.pack_int32(rank);
    else
        pk.pack_nil();
}

}  // namespace

std::string_view wire_format_name(WireFormat f) {
    switch (f) {
        case WireFormat::kVllm:
            return "vllm";
        case WireFormat::kVllmV09:
            return "vllm-v0.9";
        case WireFormat::kVllmArray:
            return "vllm-array";
        case WireFormat::kSglang:
            return "sglang";
        case WireFormat::kSglangEagle:
            return "sglang-eagle";
    }
    return "unknown";
}

bool parse_wire_format(std::string_view name, WireFormat& out) {
    for (WireFormat f : kWireFormats)
        if (wire_format_name(f) == name) {
            out = f;
            return true;
        }
    return false;
}

bool wire_format_takes_digests(WireFormat f) {
    return f == WireFormat::kVllm || f == WireFormat::kVllmArray;
}

bool wire_format_replies_with_topic(WireFormat f) {
    return f == WireFormat::kVllm;
}

void encode_kv_event_batch(const KvEventBatch& batch, WireFormat format, HashEncoding hashes,
                           std::vector<uint8_t>& out) {
    out.clear();
    ByteSink sink{out};
    Packer pk(sink);
    size_t n = 0;
    for (const KvEvent& ev : batch.events)
        n += wire_events(ev, format);
    pack_batch_head(pk, format, batch.ts, n);
    for (const KvEvent& ev : batch.events)
        pack_event(pk, ev, format, hashes);
    pack_batch_tail(pk, format, batch.rank);
}

PreEncodedEvents::PreEncodedEvents(const std::vector<KvEvent>& events, WireFormat format,
                                   HashEncoding hashes)
    : format_(format), hashes_(hashes) {
    ByteSink sink{bytes_};
    Packer pk(sink);
    std::vector<HashHole> holes;
    pk.holes = &holes;
    for (const KvEvent& ev : events) {
        Encoded& e = events_.emplace_back();
        e.begin = bytes_.size();
        e.first_hole = holes_.size();
        e.wire_events = wire_events(ev, format);
        holes.clear();
        pack_event(pk, ev, format, hashes);
        for (const HashHole& h : holes)
            holes_.push_back({h.at, h.hash});
        e.end = bytes_.size();
        e.holes = holes_.size() - e.first_hole;
    }
}

void PreEncodedEvents::encode_batch(double ts, int32_t rank, const size_t* indices,
                                    const uint64_t* salts, size_t n,
                                    std::vector<uint8_t>& out) const {
    out.clear();
    ByteSink sink{out};
    Packer pk(sink);
    size_t wire = 0;
    for (size_t k = 0; k < n; ++k)
        wire += events_[indices[k]].wire_events;
    pack_batch_head(pk, format_, ts, wire);
    for (size_t k = 0; k < n; ++k) {
        const Encoded& e = events_[indices[k]];
        size_t from = e.begin;
        for (size_t h = e.first_hole; h < e.first_hole + e.holes; ++h) {
            out.insert(out.end(), bytes_.begin() + static_cast<std::ptrdiff_t>(from),
                       bytes_.begin() + static_cast<std::ptrdiff_t>(holes_[h].at));
            pack_hash(pk, holes_[h].hash ^ salts[k], hashes_);
            from = holes_[h].at;
        }
        out.insert(out.end(), bytes_.begin() + static_cast<std::ptrdiff_t>(from),
                   bytes_.begin() + static_cast<std::ptrdiff_t>(e.end));
    }
    pack_batch_tail(pk, format_, rank);
}

}  // namespace kvscope::attach
