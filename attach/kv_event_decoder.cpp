#include "attach/kv_event_decoder.h"

#include "attach/attached_cache.h"

#include <msgpack.hpp>

#include <algorithm>
#include <span>
#include <string_view>

namespace kvscope::attach {

void count_name(std::vector<NameCount>& names, std::string_view name, int64_t n) {
    std::string clean(name.substr(0, kMaxNameBytes));
    // Printable ASCII only: the names go to a terminal and into JSON as they are.
    for (char& c : clean)
        if (c < 0x20 || c > 0x7e) c = '?';
    for (NameCount& x : names)
        if (x.name == clean) {
            x.count += n;
            return;
        }
    if (names.size() >= kMaxNames) {
        clean = "(others)";
        for (NameCount& x : names)
            if (x.name == clean) {
                x.count += n;
                return;
            }
    }
    names.push_back({std::move(clean), n});
}

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
bool is_nil(const Obj& o) {
    return o.type == msgpack::type::NIL;
}

// The fields kvscope knows, whatever the position or name they come under.
enum class Field : uint8_t {
    kHashes,
    kParent,
    kTokens,
    kBlockSize,
    kLoraId,
    kMedium,
    kLoraNameOrMetadata,  // vLLM's lora_name, or SGLang's metadata map in the same place
    kExtraKeys,
    kGroup,
    kGroupKind,
    kSlidingWindow,
    kLocality,
    kOwnership,
    kEventVersion,
    kCacheSalt,
    kSessionId,
};

// The positional order of vLLM's tagged arrays (SGLang's are a prefix of it).
constexpr Field kStoredOrder[] = {Field::kHashes,
                                  Field::kParent,
                                  Field::kTokens,
                                  Field::kBlockSize,
                                  Field::kLoraId,
                                  Field::kMedium,
                                  Field::kLoraNameOrMetadata,
                                  Field::kExtraKeys,
                                  Field::kGroup,
                                  Field::kGroupKind,
                                  Field::kSlidingWindow,
                                  Field::kLocality,
                                  Field::kOwnership};
constexpr Field kRemovedOrder[] = {Field::kHashes, Field::kMedium, Field::kGroup, Field::kLocality,
                                   Field::kOwnership};

struct NamedField {
    std::string_view name;
    Field field;
};
constexpr NamedField kStoredNames[] = {{"block_hashes", Field::kHashes},
                                       {"parent_block_hash", Field::kParent},
                                       {"token_ids", Field::kTokens},
                                       {"block_size", Field::kBlockSize},
                                       {"lora_id", Field::kLoraId},
                                       {"medium", Field::kMedium},
                                       {"storage_medium", Field::kMedium},  // some SGLang
                                       {"lora_name", Field::kLoraNameOrMetadata},
                                       {"metadata", Field::kLoraNameOrMetadata},
                                       {"extra_keys", Field::kExtraKeys},
                                       {"group_idx", Field::kGroup},
                                       {"kv_cache_spec_kind", Field::kGroupKind},
                                       {"kv_cache_spec_sliding_window", Field::kSlidingWindow},
                                       {"locality", Field::kLocality},
                                       {"ownership", Field::kOwnership},
                                       {"event_version", Field::kEventVersion},
                                       {"cache_salt", Field::kCacheSalt},
                                       {"session_id", Field::kSessionId}};
constexpr NamedField kRemovedNames[] = {
    {"block_hashes", Field::kHashes},   {"medium", Field::kMedium},
    {"storage_medium", Field::kMedium}, {"group_idx", Field::kGroup},
    {"locality", Field::kLocality},     {"ownership", Field::kOwnership}};

// One event's fields: each read into `ev`, or a reason (a constant string) why not.
struct EventReader {
    KvEvent& ev;
    KvEventBatch& batch;
    const char* problem = nullptr;

    bool fail(const char* why) {
        problem = why;
        return false;
    }
    bool hash(const Obj& o, uint64_t& h) {
        if (o.type == msgpack::type::POSITIVE_INTEGER) {
            h = o.via.u64;
            return true;
        }
        if (o.type == msgpack::type::NEGATIVE_INTEGER) {  // a signed 64-bit hash
            h = static_cast<uint64_t>(o.via.i64);
            return true;
        }
        if (o.type != msgpack::type::BIN && o.type != msgpack::type::STR)
            return fail("a block hash is neither an integer nor bytes");
        const char* p = o.type == msgpack::type::BIN ? o.via.bin.ptr : o.via.str.ptr;
        const uint32_t n = o.type == msgpack::type::BIN ? o.via.bin.size : o.via.str.size;
        if (n < kMinDigestBytes) return fail("a digest hash is shorter than 8 bytes");
        if (n > kMaxDigestBytes) return fail("a digest hash is longer than 64 bytes");
        // vLLM's integer form of a digest: its last 8 bytes, big endian.
        h = 0;
        for (uint32_t i = n - 8; i < n; ++i)
            h = (h << 8) | static_cast<uint8_t>(p[i]);
        batch.digest_hashes = true;
        return true;
    }
    bool hashes(const Obj& o) {
        if (o.type != msgpack::type::ARRAY) return fail("block_hashes is not a list");
        ev.block_hashes.resize(o.via.array.size);
        ev.digests.clear();
        ev.digest_size = 0;
        for (uint32_t i = 0; i < o.via.array.size; ++i) {
            const Obj& h = o.via.array.ptr[i];
            if (!hash(h, ev.block_hashes[i])) return false;
            const bool digest = h.type == msgpack::type::BIN || h.type == msgpack::type::STR;
            const uint32_t n = !digest                        ? 0
                               : h.type == msgpack::type::BIN ? h.via.bin.size
                                                              : h.via.str.size;
            if (i == 0) ev.digest_size = n;
            if (n != ev.digest_size) return fail("block_hashes mixes digests of other lengths");
            if (digest) {
                const char* p = h.type == msgpack::type::BIN ? h.via.bin.ptr : h.via.str.ptr;
                ev.digests.insert(ev.digests.end(), p, p + n);
            }
        }
        return true;
    }
    bool parent(const Obj& o) {
        if (is_nil(o)) return true;
        ev.has_parent = hash(o, ev.parent_hash);
        return ev.has_parent;
    }
    bool token(const Obj& t, int32_t& out) {
        if (!is_int(t)) return fail("a token id is not an integer");
        if (as_i64(t) < 0) return fail("a token id is negative");
        if (as_i64(t) > INT32_MAX) return fail("a token id is past 2^31");
        out = static_cast<int32_t>(as_i64(t));
        return true;
    }
    bool tokens(const Obj& o) {
        if (o.type != msgpack::type::ARRAY) return fail("token_ids is not a list");
        const uint32_t n = o.via.array.size;
        // SGLang's EAGLE pages: every position a pair [token, next token].
        ev.token_width = n > 0 && o.via.array.ptr[0].type == msgpack::type::ARRAY ? 2 : 1;
        ev.token_ids.resize(static_cast<size_t>(n) * ev.token_width);
        for (uint32_t i = 0; i < n; ++i) {
            const Obj& t = o.via.array.ptr[i];
            if (ev.token_width == 1) {
                if (t.type == msgpack::type::ARRAY) return fail("token_ids mixes ids and pairs");
                if (!token(t, ev.token_ids[i])) return false;
                continue;
            }
            if (t.type != msgpack::type::ARRAY) return fail("token_ids mixes pairs and ids");
            if (t.via.array.size != 2) return fail("a token pair is not two ids");
            if (!token(t.via.array.ptr[0], ev.token_ids[2 * i]) ||
                !token(t.via.array.ptr[1], ev.token_ids[2 * i + 1]))
                return false;
        }
        return true;
    }
    // An integer in 0..INT32_MAX, or nil when `nil_ok` (then `v` is left as it was).
    bool count(const Obj& o, int32_t& v, bool nil_ok, const char* not_int, const char* negative) {
        if (nil_ok && is_nil(o)) return true;
        if (!is_int(o) || as_i64(o) > INT32_MAX) return fail(not_int);
        if (as_i64(o) < 0) return fail(negative);
        v = static_cast<int32_t>(as_i64(o));
        return true;
    }
    bool text(const Obj& o, std::string& out, const char* why) {
        if (is_nil(o)) return true;
        if (!is_str(o)) return fail(why);
        out.assign(str(o).substr(0, kMaxNameBytes));
        return true;
    }
    bool medium(const Obj& o) {
        ev.has_medium = true;
        if (is_nil(o)) return true;
        if (!is_str(o)) return fail("medium is not a string");
        ev.medium = kv_medium_from_name(str(o));
        if (ev.medium == KvMedium::kOther) {
            ev.medium_name.assign(str(o).substr(0, kMaxNameBytes));
            count_name(batch.unknown_media, str(o));
        }
        return true;
    }
    // SGLang's metadata map: cache_salt and session_id; other keys are counted as unknown.
    bool metadata(const Obj& o) {
        for (uint32_t i = 0; i < o.via.map.size; ++i) {
            const msgpack::object_kv& kv = o.via.map.ptr[i];
            std::string_view k = is_str(kv.key) ? str(kv.key) : std::string_view("?");
            if (k == "cache_salt") {
                if (!text(kv.val, ev.cache_salt, "metadata.cache_salt is not a string"))
                    return false;
            } else if (k == "session_id") {
                if (!text(kv.val, ev.session_id, "metadata.session_id is not a string"))
                    return false;
            } else {
                ++batch.unknown_fields;
                count_name(batch.unknown_field_names, "BlockStored.metadata." + std::string(k));
            }
        }
        return true;
    }
    bool field(Field f, const Obj& o) {
        switch (f) {
            case Field::kHashes:
                return hashes(o);
            case Field::kParent:
                return parent(o);
            case Field::kTokens:
                return tokens(o);
            case Field::kBlockSize:
                return count(o, ev.block_size, false, "block_size is not an integer",
                             "block_size is negative");
            case Field::kLoraId:
                if (is_nil(o)) return true;
                if (!is_int(o)) return fail("lora_id is not an integer");
                ev.lora_id = as_i64(o);
                return true;
            case Field::kMedium:
                return medium(o);
            case Field::kLoraNameOrMetadata:
                if (o.type == msgpack::type::MAP) return metadata(o);
                return is_nil(o) || is_str(o) ? true : fail("lora_name is not a string");
            case Field::kExtraKeys:  // any shape: vLLM's typed keys change from release to release
            case Field::kOwnership:
                return true;
            case Field::kGroup:
                if (!count(o, ev.group_idx, true, "group_idx is not an integer",
                           "group_idx is negative"))
                    return false;
                return ev.group_idx < kMaxCacheGroups ? true : fail("group_idx is past 1023");
            case Field::kGroupKind:
                return text(o, ev.group_kind, "kv_cache_spec_kind is not a string");
            case Field::kSlidingWindow:
                return count(o, ev.sliding_window, true,
                             "kv_cache_spec_sliding_window is not an integer",
                             "kv_cache_spec_sliding_window is negative");
            case Field::kLocality:
                return text(o, ev.locality, "locality is not a string");
            case Field::kEventVersion:
                return is_int(o) || is_nil(o) ? true : fail("event_version is not an integer");
            case Field::kCacheSalt:
                return text(o, ev.cache_salt, "cache_salt is not a string");
            case Field::kSessionId:
                return text(o, ev.session_id, "session_id is not a string");
        }
        return true;
    }
    bool positional(size_t i, const Obj& o) {
        std::span<const Field> order;
        if (ev.type == KvEventType::kBlockStored) order = kStoredOrder;
        if (ev.type == KvEventType::kBlockRemoved) order = kRemovedOrder;
        if (i < order.size()) return field(order[i], o);
        ++batch.unknown_fields;
        count_name(batch.unknown_field_names,
                   std::string(kv_event_type_name(ev.type)) + "[" + std::to_string(i) + "]");
        return true;
    }
    bool named(std::string_view name, const Obj& o) {
        std::span<const NamedField> names;
        if (ev.type == KvEventType::kBlockStored) names = kStoredNames;
        if (ev.type == KvEventType::kBlockRemoved) names = kRemovedNames;
        for (const NamedField& n : names)
            if (n.name == name) return field(n.field, o);
        ++batch.unknown_fields;
        count_name(batch.unknown_field_names,
                   std::string(kv_event_type_name(ev.type)) + "." + std::string(name));
        return true;
    }
};

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

// Every field to its default, the vectors' memory kept for the next event.
void reset(KvEvent& ev) {
    ev.type = KvEventType::kBlockStored;
    ev.block_hashes.clear();
    ev.has_parent = false;
    ev.parent_hash = 0;
    ev.token_ids.clear();
    ev.token_width = 1;
    ev.block_size = 0;
    ev.medium = KvMedium::kGpu;
    ev.medium_name.clear();
    ev.has_medium = false;
    ev.group_idx = -1;
    ev.group_kind.clear();
    ev.sliding_window = -1;
    ev.locality.clear();
    ev.lora_id = -1;
    ev.cache_salt.clear();
    ev.session_id.clear();
    ev.digests.clear();
    ev.digest_size = 0;
}

void malformed(KvEventBatch& batch, std::string_view type, const char* why) {
    ++batch.malformed_events;
    count_name(batch.malformed_reasons, std::string(type) + ": " + why);
}

// One event into `ev`; false when it is not one to hand on (unknown or malformed: counted).
bool read_event(const Obj& o, KvEvent& ev, KvEventBatch& batch) {
    reset(ev);
    EventReader r{ev, batch};
    std::string_view tag;
    if (o.type == msgpack::type::ARRAY && o.via.array.size >= 1 && is_str(o.via.array.ptr[0])) {
        tag = str(o.via.array.ptr[0]);
        if (!event_type(tag, ev.type)) {
            ++batch.unknown_events;
            count_name(batch.unknown_event_names, tag);
            return false;
        }
        for (uint32_t i = 1; i < o.via.array.size; ++i)
            if (!r.positional(i - 1, o.via.array.ptr[i])) break;
    } else if (o.type == msgpack::type::MAP) {
        const msgpack::object_kv* type = nullptr;
        for (uint32_t i = 0; i < o.via.map.size; ++i)
            if (is_str(o.via.map.ptr[i].key) && str(o.via.map.ptr[i].key) == "type")
                type = &o.via.map.ptr[i];
        if (!type || !is_str(type->val)) {
            malformed(batch, "event", "a map without a string \"type\"");
            return false;
        }
        tag = str(type->val);
        if (!event_type(tag, ev.type)) {
            ++batch.unknown_events;
            count_name(batch.unknown_event_names, tag);
            return false;
        }
        for (uint32_t i = 0; i < o.via.map.size && !r.problem; ++i) {
            const msgpack::object_kv& kv = o.via.map.ptr[i];
            if (&kv == type) continue;
            if (!is_str(kv.key)) {
                r.fail("a field name is not a string");
                break;
            }
            r.named(str(kv.key), kv.val);
        }
    } else {
        malformed(batch, "event", "neither a tagged array nor a tagged map");
        return false;
    }
    if (r.problem) {
        malformed(batch, kv_event_type_name(ev.type), r.problem);
        return false;
    }
    return true;
}

// A msgpack array (or map) header at data[off]: its element count, `off` moved past it.
bool container(const uint8_t* data, size_t size, size_t& off, bool map, uint32_t& n) {
    if (off >= size) return false;
    const uint8_t b = data[off];
    const uint8_t fix = map ? 0x80 : 0x90, x16 = map ? 0xde : 0xdc, x32 = map ? 0xdf : 0xdd;
    if ((b & 0xf0) == fix) {
        n = b & 0x0f;
        off += 1;
        return true;
    }
    const size_t len = b == x16 ? 2 : b == x32 ? 4 : 0;
    if (len == 0 || off + 1 + len > size) return false;
    n = 0;
    for (size_t i = 0; i < len; ++i)
        n = (n << 8) | data[off + 1 + i];
    off += 1 + len;
    return true;
}

// Past the object at data[off] (checked whole by ClaimCheck already).
void skip(const uint8_t* data, size_t size, size_t& off) {
    msgpack::null_visitor v;
    msgpack::detail::parse_imp(reinterpret_cast<const char*>(data), size, off, v);
}

// Strings and digests are read in place: the payload outlives the objects.
bool in_place(msgpack::type::object_type, size_t, void*) {
    return true;
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

Status decode_kv_event_batch(const uint8_t* data, size_t size, KvEventBatch& out,
                             const std::function<void(const KvEvent&)>& on_event) {
    out.ts = 0;
    out.rank = -1;
    out.events.clear();
    out.unknown_events = out.unknown_fields = out.malformed_events = 0;
    out.unknown_event_names.clear();
    out.unknown_field_names.clear();
    out.unknown_media.clear();
    out.malformed_reasons.clear();
    out.digest_hashes = false;
    if (size == 0) return Error{"empty payload"};
    const char* p = reinterpret_cast<const char*>(data);
    ClaimCheck check;
    check.bytes = size;
    size_t end = 0;
    auto parsed = msgpack::detail::parse_imp(p, size, end, check);
    if (check.problem) return Error{check.problem};
    if (parsed == msgpack::PARSE_CONTINUE) return Error{"truncated msgpack"};
    if (parsed != msgpack::PARSE_SUCCESS && parsed != msgpack::PARSE_EXTRA_BYTES)
        return Error{"not msgpack"};
    if (end != size) return Error{std::to_string(size - end) + " bytes follow the event batch"};

    // The batch's frame first, without its events: where ts, events and rank are.
    size_t off = 0, ts_at = 0, events_at = 0, rank_at = 0;
    bool has_ts = false, has_events = false, has_rank = false;
    msgpack::zone zone;
    uint32_t n = 0;
    if (container(data, size, off, false, n) && n >= 2) {
        ts_at = off;
        skip(data, size, off);
        events_at = off;
        skip(data, size, off);
        has_ts = has_events = true;
        if (n >= 3) {
            rank_at = off;
            has_rank = true;
        }
        out.unknown_fields += static_cast<int32_t>(n > 3 ? n - 3 : 0);
        if (n > 3) count_name(out.unknown_field_names, "EventBatch[3]", n - 3);
    } else if (off = 0; container(data, size, off, true, n)) {
        for (uint32_t i = 0; i < n; ++i) {
            const Obj key = msgpack::unpack(zone, p, size, off, in_place, nullptr);
            const std::string_view k = is_str(key) ? str(key) : std::string_view("?");
            if (k == "ts") {
                ts_at = off;
                has_ts = true;
            } else if (k == "events") {
                events_at = off;
                has_events = true;
            } else if (k == "data_parallel_rank" || k == "attn_dp_rank") {
                rank_at = off;
                has_rank = true;
            } else {
                ++out.unknown_fields;
                count_name(out.unknown_field_names, "EventBatch." + std::string(k));
            }
            skip(data, size, off);
        }
    }
    if (!has_ts || !has_events)
        return Error{"not an event batch: expected [ts, events, rank] or a map with ts and events"};
    try {
        off = ts_at;
        const Obj ts = msgpack::unpack(zone, p, size, off, in_place, nullptr);
        if (ts.type == msgpack::type::FLOAT64 || ts.type == msgpack::type::FLOAT32)
            out.ts = ts.via.f64;
        else if (is_int(ts))
            out.ts = static_cast<double>(as_i64(ts));
        else
            return Error{"the event batch's timestamp is not a number"};
        if (has_rank) {
            off = rank_at;
            const Obj rank = msgpack::unpack(zone, p, size, off, in_place, nullptr);
            if (!is_nil(rank)) {
                if (!is_int(rank) || as_i64(rank) < 0 || as_i64(rank) > INT32_MAX)
                    return Error{"the event batch's rank is not a small non-negative integer"};
                out.rank = static_cast<int32_t>(as_i64(rank));
            }
        }
        off = events_at;
        uint32_t events = 0;
        if (!container(data, size, off, false, events))
            return Error{"the event batch's events are not a list"};
        // One event at a time: its objects live in `zone` until the next one's.
        KvEvent scratch;
        for (uint32_t i = 0; i < events; ++i) {
            zone.clear();
            const Obj o = msgpack::unpack(zone, p, size, off, in_place, nullptr);
            KvEvent& ev = on_event ? scratch : out.events.emplace_back();
            if (!read_event(o, ev, out)) {
                if (!on_event) out.events.pop_back();
                continue;
            }
            if (on_event) on_event(ev);
        }
    } catch (const std::exception& e) {
        out.events.clear();
        return Error{std::string("not msgpack: ") + e.what()};
    }
    return {};
}

}  // namespace kvscope::attach
