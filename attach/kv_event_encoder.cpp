#include "attach/kv_event_encoder.h"

#include <msgpack.hpp>

#include <cstring>

namespace kvscope::attach {

namespace {

// msgpack's packer writes into anything with write(const char*, size_t).
struct ByteSink {
    std::vector<uint8_t>& out;
    void write(const char* p, size_t n) { out.insert(out.end(), p, p + n); }
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
    uint8_t digest[32];
    uint64_t x = h;
    for (int i = 0; i < 32; ++i) {
        if (i % 8 == 0 && i > 0) x = x * 0x9E3779B97F4A7C15ull + 1;  // the rest: filler
        digest[i] = static_cast<uint8_t>(x >> (56 - 8 * (i % 8)));
    }
    pk.pack_bin(32);
    pk.pack_bin_body(reinterpret_cast<const char*>(digest), 32);
}

void pack_str(Packer& pk, std::string_view s) {
    pk.pack_str(static_cast<uint32_t>(s.size()));
    pk.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

void pack_hashes(Packer& pk, const uint64_t* h, size_t n, HashEncoding enc) {
    pk.pack_array(static_cast<uint32_t>(n));
    for (size_t i = 0; i < n; ++i)
        pack_hash(pk, h[i], enc);
}

// One event's fields, in order; `n_fields` leaves off the trailing defaults.
struct StoredView {
    const uint64_t* hashes;
    size_t n_hashes;
    bool has_parent;
    uint64_t parent;
    const int32_t* tokens;
    size_t n_tokens;
    const KvEvent& ev;
};

void pack_medium(Packer& pk, KvMedium m) {
    pack_str(pk, kv_medium_name(m));
}

void pack_stored_array(Packer& pk, const StoredView& v, HashEncoding enc, bool sglang) {
    // Fields after medium (lora_name ... ownership) are left out as defaults; SGLang's writer
    // always names the medium.
    const bool medium = v.ev.medium != KvMedium::kGpu || sglang;
    const bool lora = v.ev.lora_id >= 0 || medium;
    size_t n = 1 + 4 + (lora ? 1 : 0) + (medium ? 1 : 0);
    pk.pack_array(static_cast<uint32_t>(n));
    pack_str(pk, "BlockStored");
    pack_hashes(pk, v.hashes, v.n_hashes, enc);
    if (v.has_parent)
        pack_hash(pk, v.parent, enc);
    else
        pk.pack_nil();
    pk.pack_array(static_cast<uint32_t>(v.n_tokens));
    for (size_t i = 0; i < v.n_tokens; ++i)
        pk.pack_int32(v.tokens[i]);
    pk.pack_int32(v.ev.block_size);
    if (lora) {
        if (v.ev.lora_id >= 0)
            pk.pack_int64(v.ev.lora_id);
        else
            pk.pack_nil();
    }
    if (medium) pack_medium(pk, v.ev.medium);
}

void pack_stored_map(Packer& pk, const StoredView& v, HashEncoding enc) {
    const bool medium = v.ev.medium != KvMedium::kGpu;
    const bool lora = v.ev.lora_id >= 0;
    const bool group = v.ev.group_idx != 0;
    pk.pack_map(static_cast<uint32_t>(1 + 1 + (v.has_parent ? 1 : 0) + 2 + lora + medium + group));
    pack_str(pk, "type");
    pack_str(pk, "BlockStored");
    pack_str(pk, "block_hashes");
    pack_hashes(pk, v.hashes, v.n_hashes, enc);
    if (v.has_parent) {
        pack_str(pk, "parent_block_hash");
        pack_hash(pk, v.parent, enc);
    }
    pack_str(pk, "token_ids");
    pk.pack_array(static_cast<uint32_t>(v.n_tokens));
    for (size_t i = 0; i < v.n_tokens; ++i)
        pk.pack_int32(v.tokens[i]);
    pack_str(pk, "block_size");
    pk.pack_int32(v.ev.block_size);
    if (lora) {
        pack_str(pk, "lora_id");
        pk.pack_int64(v.ev.lora_id);
    }
    if (medium) {
        pack_str(pk, "medium");
        pack_medium(pk, v.ev.medium);
    }
    if (group) {
        pack_str(pk, "group_idx");
        pk.pack_int32(v.ev.group_idx);
    }
}

void pack_removed(Packer& pk, const KvEvent& ev, const uint64_t* h, size_t n, WireFormat format,
                  HashEncoding enc) {
    const bool medium = ev.medium != KvMedium::kGpu || format == WireFormat::kSglang;
    if (format == WireFormat::kVllmMap) {
        pk.pack_map(2 + (medium ? 1 : 0));
        pack_str(pk, "type");
        pack_str(pk, "BlockRemoved");
        pack_str(pk, "block_hashes");
        pack_hashes(pk, h, n, enc);
        if (medium) {
            pack_str(pk, "medium");
            pack_medium(pk, ev.medium);
        }
        return;
    }
    pk.pack_array(2 + (medium ? 1 : 0));
    pack_str(pk, "BlockRemoved");
    pack_hashes(pk, h, n, enc);
    if (medium) pack_medium(pk, ev.medium);
}

void pack_cleared(Packer& pk, WireFormat format) {
    if (format == WireFormat::kVllmMap) {
        pk.pack_map(1);
        pack_str(pk, "type");
    } else {
        pk.pack_array(1);
    }
    pack_str(pk, "AllBlocksCleared");
}

size_t wire_events(const KvEvent& ev, WireFormat format) {
    if (format != WireFormat::kSglang || ev.type == KvEventType::kAllBlocksCleared) return 1;
    return ev.block_hashes.size();
}

// One event as the format writes it (SGLang: one per page).
void pack_event(Packer& pk, const KvEvent& ev, WireFormat format, HashEncoding hashes) {
    if (ev.type == KvEventType::kAllBlocksCleared) {
        pack_cleared(pk, format);
        return;
    }
    if (ev.type == KvEventType::kBlockRemoved) {
        if (format == WireFormat::kSglang) {
            for (uint64_t h : ev.block_hashes)
                pack_removed(pk, ev, &h, 1, format, hashes);
        } else {
            pack_removed(pk, ev, ev.block_hashes.data(), ev.block_hashes.size(), format, hashes);
        }
        return;
    }
    if (format == WireFormat::kSglang) {  // one event per page, each naming its parent
        const size_t per = ev.block_size > 0 ? static_cast<size_t>(ev.block_size) : 0;
        for (size_t i = 0; i < ev.block_hashes.size(); ++i) {
            size_t begin = std::min(i * per, ev.token_ids.size());
            size_t end = std::min(begin + per, ev.token_ids.size());
            StoredView v{&ev.block_hashes[i],
                         1,
                         i > 0 || ev.has_parent,
                         i > 0 ? ev.block_hashes[i - 1] : ev.parent_hash,
                         ev.token_ids.data() + begin,
                         end - begin,
                         ev};
            pack_stored_array(pk, v, hashes, true);
        }
        return;
    }
    StoredView v{ev.block_hashes.data(),
                 ev.block_hashes.size(),
                 ev.has_parent,
                 ev.parent_hash,
                 ev.token_ids.data(),
                 ev.token_ids.size(),
                 ev};
    if (format == WireFormat::kVllmMap)
        pack_stored_map(pk, v, hashes);
    else
        pack_stored_array(pk, v, hashes, false);
}

void pack_batch_head(Packer& pk, double ts, int32_t rank, size_t wire_events) {
    pk.pack_array(rank >= 0 ? 3 : 2);
    pk.pack_double(ts);
    pk.pack_array(static_cast<uint32_t>(wire_events));
}

}  // namespace

std::string_view wire_format_name(WireFormat f) {
    switch (f) {
        case WireFormat::kVllmArray:
            return "vllm-array";
        case WireFormat::kVllmMap:
            return "vllm-map";
        case WireFormat::kSglang:
            return "sglang";
    }
    return "unknown";
}

bool parse_wire_format(std::string_view name, WireFormat& out) {
    for (WireFormat f : {WireFormat::kVllmArray, WireFormat::kVllmMap, WireFormat::kSglang})
        if (wire_format_name(f) == name) {
            out = f;
            return true;
        }
    return false;
}

void encode_kv_event_batch(const KvEventBatch& batch, WireFormat format, HashEncoding hashes,
                           std::vector<uint8_t>& out) {
    out.clear();
    ByteSink sink{out};
    Packer pk(sink);
    size_t n = 0;
    for (const KvEvent& ev : batch.events)
        n += wire_events(ev, format);
    pack_batch_head(pk, batch.ts, batch.rank, n);
    for (const KvEvent& ev : batch.events)
        pack_event(pk, ev, format, hashes);
    if (batch.rank >= 0) pk.pack_int32(batch.rank);
}

}  // namespace kvscope::attach

namespace kvscope::attach {

PreEncodedEvents::PreEncodedEvents(const std::vector<KvEvent>& events, WireFormat format,
                                   HashEncoding hashes)
    : hashes_(hashes) {
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
    pack_batch_head(pk, ts, rank, wire);
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
    if (rank >= 0) pk.pack_int32(rank);
}

}  // namespace kvscope::attach
