#include "attach/kv_event_decoder.h"

#include <msgpack.hpp>

#include <string_view>

namespace kvscope::attach {

namespace {

// A pass over the bytes that builds nothing: every container's claimed size is checked against
// the bytes the whole payload has (each element takes at least one byte, so claims adding up to
// more are a lie), and the nesting depth is bounded. Only then does msgpack build objects, so
// what it allocates is bounded by the payload's size.
struct ClaimCheck : msgpack::null_visitor {
    size_t bytes = 0, claimed = 0;
    int depth = 0;
    const char* problem = nullptr;
    bool claim(uint64_t n) {
        claimed += n;
        if (claimed > bytes) {
            problem = "a container claims more elements than the payload has bytes";
            return false;
        }
        if (++depth > kMaxNesting) {
            problem = "nesting is deeper than 16 levels";
            return false;
        }
        return true;
    }
    bool start_array(uint32_t n) { return claim(n); }
    bool end_array() { return --depth, true; }
    bool start_map(uint32_t n) { return claim(uint64_t{n} * 2); }
    bool end_map() { return --depth, true; }
};

using Obj = msgpack::object;

bool is_str(const Obj& o) {
    return o.type == msgpack::type::STR;
}
std::string_view str(const Obj& o) {
    return {o.via.str.ptr, o.via.str.size};
}
bool is_int(const Obj& o) {
    return o.type == msgpack::type::POSITIVE_INTEGER || o.type == msgpack::type::NEGATIVE_INTEGER;
}
int64_t as_i64(const Obj& o) {
    return o.type == msgpack::type::POSITIVE_INTEGER ? static_cast<int64_t>(o.via.u64) : o.via.i64;
}

// Per event: true when the field had the shape the format gives it.
struct EventReader {
    KvEvent& ev;
    KvEventBatch& batch;

    bool hash(const Obj& o, uint64_t& h) {
        if (o.type == msgpack::type::POSITIVE_INTEGER) {
            h = o.via.u64;
            return true;
        }
        if (o.type == msgpack::type::NEGATIVE_INTEGER) {  // a signed 64-bit hash
            h = static_cast<uint64_t>(o.via.i64);
            return true;
        }
        if (o.type == msgpack::type::BIN || o.type == msgpack::type::STR) {
            const char* p = o.type == msgpack::type::BIN ? o.via.bin.ptr : o.via.str.ptr;
            uint32_t n = o.type == msgpack::type::BIN ? o.via.bin.size : o.via.str.size;
            if (n == 0) return false;
            h = 0;
            for (uint32_t i = 0; i < 8; ++i)
                h = (h << 8) | (i < n ? static_cast<uint8_t>(p[i]) : 0);
            batch.digest_hashes = true;
            return true;
        }
        return false;
    }
    bool hashes(const Obj& o) {
        if (o.type != msgpack::type::ARRAY) return false;
        ev.block_hashes.resize(o.via.array.size);
        for (uint32_t i = 0; i < o.via.array.size; ++i)
            if (!hash(o.via.array.ptr[i], ev.block_hashes[i])) return false;
        return true;
    }
    bool parent(const Obj& o) {
        if (o.type == msgpack::type::NIL) return true;
        ev.has_parent = hash(o, ev.parent_hash);
        return ev.has_parent;
    }
    bool tokens(const Obj& o) {
        if (o.type != msgpack::type::ARRAY) return false;
        ev.token_ids.resize(o.via.array.size);
        for (uint32_t i = 0; i < o.via.array.size; ++i) {
            const Obj& t = o.via.array.ptr[i];
            if (!is_int(t) || as_i64(t) < INT32_MIN || as_i64(t) > INT32_MAX) return false;
            ev.token_ids[i] = static_cast<int32_t>(as_i64(t));
        }
        return true;
    }
    bool small_int(const Obj& o, int32_t& v) {
        if (!is_int(o) || as_i64(o) < INT32_MIN || as_i64(o) > INT32_MAX) return false;
        v = static_cast<int32_t>(as_i64(o));
        return true;
    }
    bool lora(const Obj& o) {
        if (o.type == msgpack::type::NIL) return true;
        if (!is_int(o)) return false;
        ev.lora_id = as_i64(o);
        return true;
    }
    bool medium(const Obj& o) {
        if (o.type == msgpack::type::NIL) return true;
        if (!is_str(o)) return false;
        ev.medium = kv_medium_from_name(str(o));
        return true;
    }
    // Fields kvscope reads nothing from (lora_name, extra_keys, kv_cache_spec_*, locality,
    // ownership): any shape is accepted.
    static bool ignored(const Obj&) { return true; }

    // The fields of each event type in their positional order.
    bool stored_field(size_t i, const Obj& o) {
        switch (i) {
            case 0:
                return hashes(o);
            case 1:
                return parent(o);
            case 2:
                return tokens(o);
            case 3:
                return small_int(o, ev.block_size);
            case 4:
                return lora(o);
            case 5:
                return medium(o);
            case 6:
            case 7:
                return ignored(o);  // lora_name, extra_keys
            case 8:
                return o.type == msgpack::type::NIL || small_int(o, ev.group_idx);
            case 9:
            case 10:
            case 11:
            case 12:
                return ignored(o);
            default:
                ++batch.unknown_fields;
                return true;
        }
    }
    bool removed_field(size_t i, const Obj& o) {
        switch (i) {
            case 0:
                return hashes(o);
            case 1:
                return medium(o);
            case 2:
                return o.type == msgpack::type::NIL || small_int(o, ev.group_idx);
            case 3:
            case 4:
                return ignored(o);  // locality, ownership
            default:
                ++batch.unknown_fields;
                return true;
        }
    }
    bool field(size_t i, const Obj& o) {
        switch (ev.type) {
            case KvEventType::kBlockStored:
                return stored_field(i, o);
            case KvEventType::kBlockRemoved:
                return removed_field(i, o);
            case KvEventType::kAllBlocksCleared:
                ++batch.unknown_fields;
                return true;
        }
        return false;
    }
};

constexpr std::string_view kStoredNames[] = {"block_hashes",
                                             "parent_block_hash",
                                             "token_ids",
                                             "block_size",
                                             "lora_id",
                                             "medium",
                                             "lora_name",
                                             "extra_keys",
                                             "group_idx",
                                             "kv_cache_spec_kind",
                                             "kv_cache_spec_sliding_window",
                                             "locality",
                                             "ownership"};
constexpr std::string_view kRemovedNames[] = {"block_hashes", "medium", "group_idx", "locality",
                                              "ownership"};

// The position a named field has in the array form, or -1.
int field_index(KvEventType type, std::string_view name) {
    if (type == KvEventType::kBlockStored) {
        for (size_t i = 0; i < std::size(kStoredNames); ++i)
            if (kStoredNames[i] == name) return static_cast<int>(i);
        // SGLang's name for the medium in some releases.
        if (name == "storage_medium") return 5;
    } else if (type == KvEventType::kBlockRemoved) {
        for (size_t i = 0; i < std::size(kRemovedNames); ++i)
            if (kRemovedNames[i] == name) return static_cast<int>(i);
        if (name == "storage_medium") return 1;
    }
    return -1;
}

bool event_type(std::string_view tag, KvEventType& type) {
    if (tag == "BlockStored")
        type = KvEventType::kBlockStored;
    else if (tag == "BlockRemoved")
        type = KvEventType::kBlockRemoved;
    else if (tag == "AllBlocksCleared")
        type = KvEventType::kAllBlocksCleared;
    else
        return false;
    return true;
}

// Events of batches decoded before on this thread, kept so that their vectors' memory serves
// the next batch's: a follower decoding a million events a second otherwise allocates and frees
// two vectors for each. Bounded, so one huge batch does not hold its memory for good.
thread_local std::vector<KvEvent> spare_events;
constexpr size_t kMaxSpareEvents = 4096;

KvEvent& next_event(KvEventBatch& batch) {
    KvEvent& ev = batch.events.emplace_back();  // every field its default...
    if (!spare_events.empty()) {                // ...but the vectors' memory from before
        ev.block_hashes = std::move(spare_events.back().block_hashes);
        ev.token_ids = std::move(spare_events.back().token_ids);
        ev.block_hashes.clear();
        ev.token_ids.clear();
        spare_events.pop_back();
    }
    return ev;
}

// One event into batch.events, or counted as unknown / malformed.
void read_event(const Obj& o, KvEventBatch& batch) {
    KvEvent& ev = next_event(batch);
    EventReader r{ev, batch};
    bool ok = true;
    if (o.type == msgpack::type::ARRAY && o.via.array.size >= 1 && is_str(o.via.array.ptr[0])) {
        if (!event_type(str(o.via.array.ptr[0]), ev.type)) {
            ++batch.unknown_events;
            batch.events.pop_back();
            return;
        }
        for (uint32_t i = 1; i < o.via.array.size && ok; ++i)
            ok = r.field(i - 1, o.via.array.ptr[i]);
    } else if (o.type == msgpack::type::MAP) {
        const msgpack::object_kv* type = nullptr;
        for (uint32_t i = 0; i < o.via.map.size; ++i)
            if (is_str(o.via.map.ptr[i].key) && str(o.via.map.ptr[i].key) == "type")
                type = &o.via.map.ptr[i];
        if (!type || !is_str(type->val)) {
            ok = false;
        } else if (!event_type(str(type->val), ev.type)) {
            ++batch.unknown_events;
            batch.events.pop_back();
            return;
        } else {
            for (uint32_t i = 0; i < o.via.map.size && ok; ++i) {
                const msgpack::object_kv& kv = o.via.map.ptr[i];
                if (&kv == type) continue;
                int at = is_str(kv.key) ? field_index(ev.type, str(kv.key)) : -1;
                if (at < 0)
                    ++batch.unknown_fields;
                else
                    ok = r.field(static_cast<size_t>(at), kv.val);
            }
        }
    } else {
        ok = false;
    }
    if (!ok) {
        ++batch.malformed_events;
        batch.events.pop_back();
    }
}

}  // namespace

std::string_view kv_event_type_name(KvEventType type) {
    switch (type) {
        case KvEventType::kBlockStored:
            return "BlockStored";
        case KvEventType::kBlockRemoved:
            return "BlockRemoved";
        case KvEventType::kAllBlocksCleared:
            return "AllBlocksCleared";
    }
    return "unknown";
}

Status decode_kv_event_batch(const uint8_t* data, size_t size, KvEventBatch& out) {
    out.ts = 0;
    out.rank = -1;
    for (KvEvent& ev : out.events)
        if (spare_events.size() < kMaxSpareEvents) spare_events.push_back(std::move(ev));
    out.events.clear();
    out.unknown_events = out.unknown_fields = out.malformed_events = 0;
    out.digest_hashes = false;
    if (size == 0) return Error{"empty payload"};
    const char* p = reinterpret_cast<const char*>(data);
    ClaimCheck check;
    check.bytes = size;
    size_t off = 0;
    auto parsed = msgpack::detail::parse_imp(p, size, off, check);
    if (check.problem) return Error{check.problem};
    if (parsed == msgpack::PARSE_CONTINUE) return Error{"truncated msgpack"};
    if (parsed != msgpack::PARSE_SUCCESS && parsed != msgpack::PARSE_EXTRA_BYTES)
        return Error{"not msgpack"};
    if (off != size) return Error{std::to_string(size - off) + " bytes follow the event batch"};

    msgpack::object_handle handle;
    try {
        // Strings and digests are read in place: the payload outlives the objects.
        handle = msgpack::unpack(p, size,
                                 [](msgpack::type::object_type, size_t, void*) { return true; });
    } catch (const std::exception& e) {
        return Error{std::string("not msgpack: ") + e.what()};
    }
    const Obj& root = handle.get();
    const Obj *ts = nullptr, *events = nullptr, *rank = nullptr;
    if (root.type == msgpack::type::ARRAY && root.via.array.size >= 2) {
        ts = &root.via.array.ptr[0];
        events = &root.via.array.ptr[1];
        if (root.via.array.size >= 3) rank = &root.via.array.ptr[2];
        out.unknown_fields +=
            static_cast<int32_t>(root.via.array.size > 3 ? root.via.array.size - 3 : 0);
    } else if (root.type == msgpack::type::MAP) {
        for (uint32_t i = 0; i < root.via.map.size; ++i) {
            const msgpack::object_kv& kv = root.via.map.ptr[i];
            std::string_view k = is_str(kv.key) ? str(kv.key) : std::string_view();
            if (k == "ts")
                ts = &kv.val;
            else if (k == "events")
                events = &kv.val;
            else if (k == "data_parallel_rank" || k == "attn_dp_rank")
                rank = &kv.val;
            else
                ++out.unknown_fields;
        }
    }
    if (!ts || !events)
        return Error{"not an event batch: expected [ts, events, rank] or a map with ts and events"};
    if (ts->type == msgpack::type::FLOAT64 || ts->type == msgpack::type::FLOAT32)
        out.ts = ts->via.f64;
    else if (is_int(*ts))
        out.ts = static_cast<double>(as_i64(*ts));
    else
        return Error{"the event batch's timestamp is not a number"};
    if (events->type != msgpack::type::ARRAY)
        return Error{"the event batch's events are not a list"};
    if (rank && rank->type != msgpack::type::NIL) {
        if (!is_int(*rank) || as_i64(*rank) < 0 || as_i64(*rank) > INT32_MAX)
            return Error{"the event batch's rank is not a small non-negative integer"};
        out.rank = static_cast<int32_t>(as_i64(*rank));
    }
    out.events.reserve(events->via.array.size);
    for (uint32_t i = 0; i < events->via.array.size; ++i)
        read_event(events->via.array.ptr[i], out);
    return {};
}

}  // namespace kvscope::attach
