#include "sessions/legacy_keyframe.h"

#include <nlohmann/json.hpp>

namespace kvscope {

namespace {
using json = nlohmann::json;

// The head of a data item at `p`: major type, additional info, and the argument (a length or a
// value) when additional info says it follows. False when cut short or reserved (28..30).
bool read_head(const uint8_t*& p, const uint8_t* end, int& major, int& info, uint64_t& arg) {
    if (p >= end) return false;
    major = *p >> 5;
    info = *p & 0x1f;
    ++p;
    if (info < 24) {
        arg = static_cast<uint64_t>(info);
        return true;
    }
    if (info == 31) return true;  // indefinite length, or a break (0xff)
    if (info > 27) return false;
    size_t n = size_t{1} << (info - 24);
    if (static_cast<size_t>(end - p) < n) return false;
    arg = 0;
    for (size_t k = 0; k < n; ++k)
        arg = (arg << 8) | p[k];
    p += n;
    return true;
}
}  // namespace

bool cbor_is_plain(const std::vector<uint8_t>& bytes, int max_depth, std::string& error) {
    // The containers open around the next item: how many items each still expects (a map's
    // keys and values both count), or -1 for an indefinite one, which ends at a break.
    std::vector<int64_t> open;
    const uint8_t* p = bytes.data();
    const uint8_t* end = p + bytes.size();
    auto fail = [&](const char* what) {
        error = std::string("keyframe is not valid CBOR: ") + what;
        return false;
    };
    auto left = [&] { return static_cast<uint64_t>(end - p); };
    bool done = false;
    // One more item is complete: it counts against its container, which may complete in turn.
    auto complete = [&] {
        while (!open.empty()) {
            if (open.back() == -1 || --open.back() > 0) return;
            open.pop_back();
        }
        done = true;
    };
    while (!done) {
        int major = 0, info = 0;
        uint64_t arg = 0;
        if (!read_head(p, end, major, info, arg)) return fail("truncated or reserved header");
        if (info == 31 && (major == 0 || major == 1 || major == 6))
            return fail("an indefinite length on a number or a tag");
        if (major == 7 && info == 31) {  // a break closes the innermost indefinite container
            if (open.empty() || open.back() != -1)
                return fail("a break outside an indefinite item");
            open.pop_back();
            complete();
        } else if (major == 4 || major == 5) {
            if (static_cast<int>(open.size()) >= max_depth)
                return fail("nested deeper than a keyframe ever is");
            if (info == 31) {
                open.push_back(-1);
                continue;
            }
            // Every item takes at least a byte: a count beyond the bytes left is a lie.
            if (arg > left() || (major == 5 && arg * 2 > left()))
                return fail("more items than bytes");
            uint64_t items = major == 5 ? arg * 2 : arg;
            if (items == 0) {
                complete();
            } else {
                open.push_back(static_cast<int64_t>(items));
            }
        } else if (major == 2 || major == 3) {
            if (info == 31) {
                // Chunks of an indefinite string: definite strings of the same type, then a
                // break (RFC 8949 allows nothing else; nlohmann recursed into anything).
                for (;;) {
                    int m = 0, i = 0;
                    uint64_t len = 0;
                    if (!read_head(p, end, m, i, len)) return fail("truncated string chunk");
                    if (m == 7 && i == 31) break;
                    if (m != major || i == 31) return fail("a string chunk that is not a string");
                    if (len > left()) return fail("a string past the end");
                    p += len;
                }
            } else {
                if (arg > left()) return fail("a string past the end");
                p += arg;
            }
            complete();
        } else if (major == 6) {
            return fail("tags are not used in keyframes");
        } else if (major == 7 && info >= 28) {
            return fail("a reserved simple value");
        } else {
            complete();  // integers, simple values, floats: read_head consumed them
        }
    }
    if (p != end) return fail("bytes after the keyframe");
    return true;
}

std::optional<TimelineState> deserialize_cbor_keyframe(const std::vector<uint8_t>& bytes,
                                                       const RunInfo& run_info,
                                                       std::string& error) {
    constexpr int kMaxDepth = 8;  // a keyframe nests 4 deep
    if (!cbor_is_plain(bytes, kMaxDepth, error)) return std::nullopt;
    json j;
    try {
        // nlohmann throws for some malformed input (absurd container sizes) even when told not to.
        j = json::from_cbor(bytes, true, false);
    } catch (const std::exception&) {
        j = json(json::value_t::discarded);
    }
    if (j.is_discarded() || !j.is_object()) {
        error = "keyframe is not valid CBOR";
        return std::nullopt;
    }
    try {
        if (j.at("v").get<int>() != 1) {
            error = "keyframe has an unknown version";
            return std::nullopt;
        }
        const json& nb = j.at("nb");
        if (!nb.is_number_integer() || nb.get<int64_t>() != run_info.num_blocks) {
            error = "keyframe describes " + nb.dump() + " blocks, the session " +
                    std::to_string(run_info.num_blocks);
            return std::nullopt;
        }
        TimelineState s(run_info);
        s.step = j.at("step").get<int64_t>();
        s.last_seq_no = j.at("seq").get<uint64_t>();
        const json& bl = j.at("blocks");
        if (!bl.is_array() || bl.size() != s.blocks.size()) {
            error = "keyframe block list does not match the pool size";
            return std::nullopt;
        }
        for (size_t i = 0; i < bl.size(); ++i) {
            if (bl[i].is_null()) continue;
            BlockState& b = s.blocks[i];
            b.refcount = bl[i].at(0).get<int32_t>();
            b.owners = bl[i].at(1).get<std::vector<int32_t>>();
            if (!bl[i].at(2).is_null()) b.hash = bl[i].at(2).get<uint64_t>();
            b.alloc_step = bl[i].at(3).get<int64_t>();
            b.alloc_owner = bl[i].at(4).get<int32_t>();
        }
        for (const json& r : j.at("requests")) {
            RequestState q;
            q.index = r.at(0).get<int32_t>();
            q.name = r.at(1).get<std::string>();
            int phase = r.at(2).get<int>();
            if (phase < 0 || phase > static_cast<int>(RequestPhase::kRejected)) {
                error = "keyframe has an unknown request state";
                return std::nullopt;
            }
            q.phase = static_cast<RequestPhase>(phase);
            q.prompt_len = r.at(3).get<int32_t>();
            q.max_tokens = r.at(4).get<int32_t>();
            q.block_table = r.at(5).get<std::vector<int32_t>>();
            q.token_ids = r.at(6).get<std::vector<int32_t>>();
            for (std::string& text : r.at(7).get<std::vector<std::string>>())
                q.token_text.emplace_back(std::move(text));
            if (q.token_text.size() != q.token_ids.size()) {
                error = "keyframe request has " + std::to_string(q.token_ids.size()) +
                        " tokens and " + std::to_string(q.token_text.size()) + " texts";
                return std::nullopt;
            }
            q.preemptions = r.at(8).get<int32_t>();
            q.arrival_step = r.at(9).get<int64_t>();
            q.finish_step = r.at(10).get<int64_t>();
            s.requests[q.index] = std::move(q);
        }
        s.metrics = j.at("metrics").get<std::map<std::string, double>>();
        return s;
    } catch (const std::exception& ex) {
        error = std::string("keyframe is malformed: ") + ex.what();
        return std::nullopt;
    }
}

}  // namespace kvscope
