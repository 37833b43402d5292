#include "probes/event.h"

#include <algorithm>
#include <array>
#include <chrono>

#include "base/varint.h"
#include "probes/probe.h"

namespace kvscope {

namespace {
constexpr std::array<std::string_view, kNumEventKinds> kKindNames = {
    "invalid",         "step_begin",     "step_end",    "phase",         "request_arrive",
    "request_finish",  "request_reject", "block_alloc", "block_free",    "block_share",
    "cow_copy",        "prefix_hit",     "prefix_miss", "block_evict",   "token_evict",
    "preempt",         "swap_out",       "swap_in",     "attention_row", "token",
    "kernel",          "hbm_sample",     "metric",      "block_hashed",  "request_admit",
    "token_move",      "kv_stored",      "kv_removed",  "kv_cleared",    "kv_gap",
    "token_precision", "layer_merge",
};
constexpr std::array<std::string_view, kNumKvMedia> kMediumNames = {
    "GPU", "CPU", "STORAGE", "CPU_PINNED", "DISK", "EXTERNAL", "OTHER"};
}  // namespace

bool operator==(const StoredBlock& a, const StoredBlock& b) {
    return a.has_parent == b.has_parent && a.parent == b.parent && a.tokens == b.tokens &&
           a.token_pairs == b.token_pairs && a.group == b.group && a.group_kind == b.group_kind &&
           a.sliding_window == b.sliding_window && a.digest == b.digest;
}

std::string_view event_kind_name(EventKind kind) {
    auto i = static_cast<size_t>(kind);
    return i < kKindNames.size() ? kKindNames[i] : "invalid";
}

bool event_kind_from_name(std::string_view name, EventKind& out) {
    for (size_t i = 1; i < kKindNames.size(); ++i)
        if (kKindNames[i] == name) {
            out = static_cast<EventKind>(i);
            return true;
        }
    return false;
}

std::string_view kv_medium_name(KvMedium m) {
    auto i = static_cast<size_t>(m);
    return i < kMediumNames.size() ? kMediumNames[i] : "OTHER";
}

KvMedium kv_medium_from_name(std::string_view name) {
    if (name.empty()) return KvMedium::kGpu;
    for (size_t i = 0; i + 1 < kMediumNames.size(); ++i) {
        std::string_view k = kMediumNames[i];
        if (k.size() == name.size() &&
            std::equal(k.begin(), k.end(), name.begin(), [](char a, char b) {
                return a == (b >= 'a' && b <= 'z' ? static_cast<char>(b - 'a' + 'A') : b);
            }))
            return static_cast<KvMedium>(i);
    }
    return KvMedium::kOther;
}

std::string_view phase_name(Phase p) {
    switch (p) {
        case Phase::kSchedule:
            return "schedule";
        case Phase::kPrefill:
            return "prefill";
        case Phase::kDecode:
            return "decode";
        case Phase::kAttention:
            return "attention";
        case Phase::kMlp:
            return "mlp";
        case Phase::kSample:
            return "sample";
    }
    return "unknown";
}

int64_t host_now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

size_t encode_kernel_cost(const KernelCost& c, uint8_t* out) {
    size_t n = 0;
    for (int64_t v :
         {c.weight_bytes, c.kv_read_bytes, c.kv_written_bytes, c.activation_bytes, c.flops}) {
        auto u = static_cast<uint64_t>(std::max<int64_t>(v, 0));
        while (u >= 0x80) {
            out[n++] = static_cast<uint8_t>(u | 0x80);
            u >>= 7;
        }
        out[n++] = static_cast<uint8_t>(u);
    }
    return n;
}

bool decode_kernel_cost(const std::vector<uint8_t>& payload, KernelCost& out) {
    varint::Reader r{payload.data(), payload.data() + payload.size()};
    KernelCost k;
    int64_t* fields[] = {&k.weight_bytes, &k.kv_read_bytes, &k.kv_written_bytes,
                         &k.activation_bytes, &k.flops};
    for (int64_t* f : fields) {
        uint64_t v = 0;
        // 2^62 bytes is far past any machine: larger values are corrupt, not big.
        if (!r.get(v) || v > (uint64_t{1} << 62)) return false;
        *f = static_cast<int64_t>(v);
    }
    out = k;
    return true;
}

void ProbeFanout::emit(Event&& event) {
    for (int i = 0; i < count_; ++i) {
        Event copy = i + 1 == count_ ? std::move(event) : event;
        probes_[i]->emit(std::move(copy));
    }
}

void ProbeFanout::emit_all(std::vector<Event>& events) {
    for (int i = 0; i < count_; ++i) {
        if (i + 1 == count_) {
            probes_[i]->emit_all(events);
        } else {
            std::vector<Event> copy = events;
            probes_[i]->emit_all(copy);
        }
    }
}

bool ProbeFanout::failed() const {
    for (int i = 0; i < count_; ++i)
        if (probes_[i]->failed()) return true;
    return false;
}

bool gpu_op_name_ok(std::string_view op) {
    if (op.empty()) return false;
    for (char ch : op)
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '.' || ch == '-'))
            return false;
    return true;
}

GpuKernelText split_gpu_kernel_text(std::string_view text) {
    if (!text.empty() && text.front() == '|') return {{}, text.substr(1)};
    const size_t bar = text.find('|');
    if (bar != std::string_view::npos && gpu_op_name_ok(text.substr(0, bar)))
        return {text.substr(0, bar), text.substr(bar + 1)};
    return {{}, text};
}

std::string gpu_kernel_text(std::string_view op, std::string_view kernel) {
    std::string text;
    if (gpu_op_name_ok(op)) {
        text.reserve(op.size() + 1 + kernel.size());
        text.append(op).append(1, '|');
    } else if (!split_gpu_kernel_text(kernel).op.empty() ||
               (!kernel.empty() && kernel.front() == '|')) {
        // A kernel of no op whose name would read as "op|kernel" ("operator|", say).
        text.append(1, '|');
    }
    text.append(kernel);
    return text;
}

void encode_hbm_bytes(const HbmBytes& bytes, std::vector<uint8_t>& out) {
    out.clear();
    varint::put(out, static_cast<uint64_t>(std::max<int64_t>(bytes.read, 0)));
    varint::put(out, static_cast<uint64_t>(std::max<int64_t>(bytes.written, 0)));
}

bool decode_hbm_bytes(const std::vector<uint8_t>& payload, HbmBytes& out) {
    varint::Reader r{payload.data(), payload.data() + payload.size()};
    uint64_t read = 0, written = 0;
    // As for KernelCost: 2^62 bytes in one sample is corruption, not a fast GPU.
    if (!r.get(read) || !r.get(written) || read > (uint64_t{1} << 62) ||
        written > (uint64_t{1} << 62))
        return false;
    out.read = static_cast<int64_t>(read);
    out.written = static_cast<int64_t>(written);
    return true;
}

HbmBytes hbm_bytes_within(const std::vector<Event>& events, int64_t from_ns, int64_t to_ns) {
    double read = 0, written = 0;
    for (const Event& e : events) {
        HbmBytes b;
        if (e.kind != EventKind::kHbmSample || !decode_hbm_bytes(e.payload, b)) continue;
        double share = 1;
        if (to_ns > from_ns) {  // an hbm_sample's span is [t_ns, wide)
            const int64_t lo = std::max(from_ns, e.t_ns), hi = std::min(to_ns, e.wide);
            share = e.wide > e.t_ns ? static_cast<double>(std::max<int64_t>(hi - lo, 0)) /
                                          static_cast<double>(e.wide - e.t_ns)
                                    : (e.t_ns >= from_ns && e.t_ns < to_ns ? 1.0 : 0.0);
        }
        read += share * static_cast<double>(b.read);
        written += share * static_cast<double>(b.written);
    }
    return {static_cast<int64_t>(read), static_cast<int64_t>(written)};
}

void encode_stored_block(const StoredBlock& block, std::vector<uint8_t>& out) {
    encode_stored_block(block.has_parent, block.parent, block.tokens.data(), block.tokens.size(),
                        out, &block);
}

void encode_stored_block(bool has_parent, uint64_t parent, const int32_t* tokens, size_t n_tokens,
                         std::vector<uint8_t>& out, const StoredBlock* more) {
    out.clear();
    const bool pairs = more && more->token_pairs;
    const bool group = more && more->group >= 0;
    const size_t kind = group ? std::min(more->group_kind.size(), kMaxGroupKindBytes) : 0;
    const bool digest =
        more && more->digest.size() >= kMinDigestBytes && more->digest.size() <= kMaxDigestBytes;
    // The most it can take, at once: an attach encodes one per block stored, and growing the
    // vector a byte at a time cost more allocations than the rest of the store.
    out.reserve(1 + 8 + 10 + n_tokens * 5 + (group ? 20 + kind : 0) +
                (digest ? 1 + more->digest.size() : 0));
    out.push_back(static_cast<uint8_t>((has_parent ? 1 : 0) | (pairs ? 2 : 0) | (group ? 4 : 0) |
                                       (digest ? 8 : 0)));
    if (has_parent) varint::put_bytes(out, &parent, 8);
    varint::put(out, n_tokens);
    for (size_t i = 0; i < n_tokens; ++i)
        varint::put_signed(out, tokens[i]);
    if (group) {
        varint::put(out, static_cast<uint64_t>(more->group));
        varint::put(out, kind);
        varint::put_bytes(out, more->group_kind.data(), kind);
        varint::put(out, static_cast<uint64_t>(std::max(more->sliding_window, -1) + 1));
    }
    if (digest) {
        varint::put(out, more->digest.size());
        varint::put_bytes(out, more->digest.data(), more->digest.size());
    }
}

bool decode_stored_block(const std::vector<uint8_t>& payload, StoredBlock& out) {
    return decode_stored_block(payload.data(), payload.size(), out);
}

bool decode_stored_block(const uint8_t* data, size_t size, StoredBlock& out) {
    varint::Reader r{data, data + size};
    StoredBlock b;
    uint8_t flags = 0;
    if (!r.bytes(&flags, 1) || flags > 15) return false;
    b.has_parent = flags & 1;
    b.token_pairs = flags & 2;
    if (b.has_parent && !r.bytes(&b.parent, 8)) return false;
    size_t n = 0;
    if (!r.get_count(n) || n > kMaxStoredBlockTokens * (b.token_pairs ? 2 : 1)) return false;
    if (b.token_pairs && n % 2 != 0) return false;
    b.tokens.resize(n);
    for (int32_t& t : b.tokens)
        if (!r.get_i32(t)) return false;
    if (flags & 4) {
        uint64_t group = 0, window = 0;
        size_t kind = 0;
        if (!r.get(group) || group > INT32_MAX || !r.get_count(kind) || kind > kMaxGroupKindBytes)
            return false;
        b.group = static_cast<int32_t>(group);
        b.group_kind.resize(kind);
        if (!r.bytes(b.group_kind.data(), kind) || !r.get(window) ||
            window > uint64_t{INT32_MAX} + 1)
            return false;
        b.sliding_window = static_cast<int32_t>(static_cast<int64_t>(window) - 1);
    }
    if (flags & 8) {
        size_t len = 0;
        if (!r.get_count(len) || len < kMinDigestBytes || len > kMaxDigestBytes) return false;
        b.digest.resize(len);
        if (!r.bytes(b.digest.data(), len)) return false;
    }
    out = std::move(b);
    return true;
}

}  // namespace kvscope
