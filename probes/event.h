#pragma once
// The event vocabulary (v1): what the engine, the scheduler and the GPU probes report, as plain
// data with no pointers into the engine. One struct for every kind keeps the recorder, the
// reader and the Timeline on one code path; the table says what each field means per kind.
//
// clang-format off
//  kind           request  block  a                 b                c             wide         value         text
//  step_begin     -        -      scheduled seqs    prefill tokens   decode tokens -            -             -
//  step_end       -        -      running           waiting          swapped       -            step seconds  -
//  phase          -        -      phase id (Phase)  -                -             duration ns  -             -
//  request_arrive req      -      prompt tokens     max tokens       n samples     -            -             request id
//  request_admit  req      -      tokens cached     resumed (0/1)    -             -            -             -
//  request_finish req      -      generated tokens  finish (Finish)  -             -            -             -
//  request_reject req      -      needed blocks     pool blocks      -             -            -             reason
//  block_alloc    owner    block  logical index     -                -             -            -             -
//  block_free     owner    block  logical index     refcount after   -             -            -             -
//  block_share    owner    block  logical index     refcount after   -             -            -             -
//  block_hashed   -        block  logical index     -                -             block hash   -             -
//  cow_copy       owner    dst    logical index     src block        -             -            -             -
//  prefix_hit     req      block  logical index     tokens reused    -             block hash   -             -
//  prefix_miss    req      -      logical index     -                -             block hash   -             -
//  block_evict    -        block  -                 -                -             block hash   -             reason
//  token_evict    req      block  layer (-1 all)    KV head (-1 all) position      slot         score         policy: reason
//  token_move     req      block  layer             KV head          position      from slot << 32 | to slot (compaction)
//  token_precision req     block  layer             KV head          position      slot         normalized attention  "HI->LO" (mixed precision)
//  layer_merge    req      -      lower layer       tokens merged    tokens retained bytes saved max distance  "minicache: layers L+L+1" (a token: one token of one KV head)
//  preempt        req      -      mode (Preempt)    blocks released  -             -            -             -
//  swap_out/in    req      -      blocks moved      -                -             bytes        -             -
//  attention_row  req      -      layer             head             query pos     -            -             - (payload: u8 probs)
//  token          req      -      position          token id         is prompt     -            -             text piece
//  kernel         -        -      layer (-1 none)   threads          lane          duration ns  copy bytes    op, or "op|kernel" (payload: KernelCost; t_ns = start)
//  hbm_sample     -        -      -                 -                -             end ns       bytes r+w     - (payload: HbmBytes; t_ns = start)
//  metric         -        -      -                 -                -             -            value         metric name
//  kv_stored      -        slot   publisher         medium (KvMedium) tokens        block hash   -             - (payload: StoredBlock)
//  kv_removed     -        slot   publisher         medium (KvMedium) refs after    block hash   -             -
//  kv_cleared     -        -      publisher         -                blocks freed  -            -             -
//  kv_gap         -        -      publisher         filled (0/1)     batches       first seq    -             what was lost
// clang-format on
//
// The kv_* kinds come from an attached deployment (vLLM, SGLang), not from kvscope's engine: a
// publisher's blocks are known by hash, so `kvscope attach` gives each (publisher, medium, hash)
// a slot in that publisher's range of the pool (RunInfo::publishers) and the block map, the
// Timeline and replay treat it like any other block. A hash stored twice holds two references.
//
// Every event carries run, step (engine iteration, 64-bit), seq_no (monotonic per run, from 1,
// assigned by the engine's Reporter; a sink fills it only when it is 0) and t_ns (host steady
// clock).
//
// A kernel event is either one of the host's ops (lane 0: the CPU backend's op spans) or work a
// GPU did, as CUPTI traced it (lane gpu_lane(stream)): a kernel, a memcpy or a memset. A GPU's
// event names the op that launched it and the kernel, "op|kernel" (gpu_kernel_text), or only
// the kernel when no op scope was open; `b` is the threads it launched (grid x block), `value`
// the bytes a copy or set moved, and its KernelCost is zero: what a GPU moved is measured by the
// hbm_sample events (DRAM bytes per sampling interval), not worked out from shapes.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope {

enum class EventKind : uint8_t {
    kStepBegin = 1,
    kStepEnd,
    kPhase,
    kRequestArrive,
    kRequestFinish,
    kRequestReject,
    kBlockAlloc,
    kBlockFree,
    kBlockShare,
    kCowCopy,
    kPrefixHit,
    kPrefixMiss,
    kBlockEvict,
    kTokenEvict,
    kPreempt,
    kSwapOut,
    kSwapIn,
    kAttentionRow,
    kToken,
    kKernel,
    kHbmSample,
    kMetric,
    kBlockHashed,
    kRequestAdmit,
    kTokenMove,
    kKvStored,
    kKvRemoved,
    kKvCleared,
    kKvGap,
    kTokenPrecision,
    kLayerMerge,
};
constexpr int kNumEventKinds = static_cast<int>(EventKind::kLayerMerge) + 1;

std::string_view event_kind_name(EventKind kind);
// Inverse of event_kind_name; returns false for an unknown name.
bool event_kind_from_name(std::string_view name, EventKind& out);

// Phases timed inside one engine step (phase event, field a).
enum class Phase : int32_t { kSchedule = 0, kPrefill, kDecode, kAttention, kMlp, kSample };
std::string_view phase_name(Phase p);

// Where an attached deployment keeps a block (vLLM: GPU, CPU, STORAGE; SGLang: GPU, CPU_PINNED,
// DISK, EXTERNAL). kOther stands for any name neither engine documents.
enum class KvMedium : int32_t { kGpu = 0, kCpu, kStorage, kCpuPinned, kDisk, kExternal, kOther };
constexpr int kNumKvMedia = static_cast<int>(KvMedium::kOther) + 1;
std::string_view kv_medium_name(KvMedium m);
// Case-insensitive; an empty name is the GPU (both engines omit the default), an unknown one
// kOther.
KvMedium kv_medium_from_name(std::string_view name);

enum class PreemptMode : int32_t { kRecompute = 0, kSwap = 1 };
enum class FinishReason : int32_t { kLength = 0, kEndToken = 1, kContextFull = 2 };

// What one op or kernel had to move and compute, from the shapes and dtypes of what it read and
// wrote (not measured): a kernel event's `cost`, stored in a session as its payload (the bytes
// it moved are the sum, not stored again).
//   weights      model weights read (a batched step reads each matrix once)
//   kv_read      K/V read by attention, each held slot once per sequence and layer
//   kv_written   K/V stored for the step's new tokens
//   activations  activations read and written
struct KernelCost {
    int64_t weight_bytes = 0, kv_read_bytes = 0, kv_written_bytes = 0, activation_bytes = 0;
    int64_t flops = 0;
    int64_t bytes() const {
        return weight_bytes + kv_read_bytes + kv_written_bytes + activation_bytes;
    }
    KernelCost& operator+=(const KernelCost& o) {
        weight_bytes += o.weight_bytes;
        kv_read_bytes += o.kv_read_bytes;
        kv_written_bytes += o.kv_written_bytes;
        activation_bytes += o.activation_bytes;
        flops += o.flops;
        return *this;
    }
};
// Stored layout: five varints in the order of the fields. Decoding refuses truncated or
// absurd input (returns false) and ignores bytes after the fifth field, so a later vocabulary
// may append.
constexpr size_t kKernelCostMaxBytes = 5 * 10;
// Writes at most kKernelCostMaxBytes to `out`; returns how many.
size_t encode_kernel_cost(const KernelCost& cost, uint8_t* out);
// Leaves `out` untouched when it returns false.
bool decode_kernel_cost(const std::vector<uint8_t>& payload, KernelCost& out);

// A kernel event's lane: 0 for the host, 1 + the CUDA stream's id (as CUPTI numbers streams) for
// a GPU's work, so that no stream shares the host's lane.
constexpr int32_t kHostLane = 0;
constexpr int32_t gpu_lane(uint32_t stream_id) {
    return stream_id >= 0x7ffffffeu ? 0x7fffffff : static_cast<int32_t>(stream_id) + 1;
}

// A GPU kernel event's text: "op|kernel", or the kernel alone when no op launched it. Op names
// are kvscope's own ([A-Za-z0-9_.-], see gpu_op_name_ok), so the first '|' after one splits the
// two whatever the kernel's name holds; a kernel of no op whose own name would split that way
// ("operator|...") is written after a leading '|'. Host ops' names have no '|' and read as a
// kernel of no op.
bool gpu_op_name_ok(std::string_view op);
std::string gpu_kernel_text(std::string_view op, std::string_view kernel);
struct GpuKernelText {
    std::string_view op;  // empty: no op scope was open when it was launched
    std::string_view kernel;
};
GpuKernelText split_gpu_kernel_text(std::string_view text);

// An hbm_sample event's payload: the DRAM bytes the GPU read and wrote over the sample (its
// value holds their sum). Stored layout: two varints. Decoding refuses truncated or absurd input
// and ignores bytes after the second, so a later vocabulary may append.
struct HbmBytes {
    int64_t read = 0, written = 0;
};
void encode_hbm_bytes(const HbmBytes& bytes, std::vector<uint8_t>& out);
// Leaves `out` untouched when it returns false.
bool decode_hbm_bytes(const std::vector<uint8_t>& payload, HbmBytes& out);

// A kv_stored event's payload: the block's parent in its prefix chain, the tokens it holds, and
// what else the deployment said of it. Stored layout: u8 flags (bit 0: has a parent, bit 1: the
// tokens are pairs, bit 2: a cache group follows, bit 3: a digest follows), [parent hash, 8
// bytes little endian], varint token count, zigzag varint token ids, [varint group, varint
// length + the group's kind (at most kMaxGroupKindBytes), varint sliding window + 1], [varint
// length + the digest (kMinDigestBytes..kMaxDigestBytes)]. At most kMaxStoredBlockTokens tokens.
//   token pairs  SGLang's speculative (EAGLE) pages key each position by (token, next token):
//                `tokens` holds them flattened, two ids a position, as the publisher sent them
//   group        vLLM's hybrid KV cache manager: the block's cache group (full attention,
//                sliding window...), which is part of its identity
//   digest       the hash as the publisher sent it when it came as bytes (the 64-bit key is its
//                last 8 bytes, as vLLM's integer form)
struct StoredBlock {
    bool has_parent = false;
    uint64_t parent = 0;
    std::vector<int32_t> tokens;
    bool token_pairs = false;
    int32_t group = -1;  // -1: none said
    std::string group_kind;
    int32_t sliding_window = -1;  // -1: none said
    std::vector<uint8_t> digest;
};
// Not defaulted: the CUDA sources that include this header are C++17.
bool operator==(const StoredBlock& a, const StoredBlock& b);
constexpr size_t kMaxStoredBlockTokens = 65536;
constexpr size_t kMaxGroupKindBytes = 64;
constexpr size_t kMinDigestBytes = 8, kMaxDigestBytes = 64;
void encode_stored_block(const StoredBlock& block, std::vector<uint8_t>& out);
// The same from its parts, for a caller that has the tokens in place (no StoredBlock to fill):
// `more` gives the rest (its tokens and parent are not read; null: none of it).
void encode_stored_block(bool has_parent, uint64_t parent, const int32_t* tokens, size_t n_tokens,
                         std::vector<uint8_t>& out, const StoredBlock* more = nullptr);
// Refuses (false, `out` untouched) truncated input, a bad flag and absurd counts.
bool decode_stored_block(const std::vector<uint8_t>& payload, StoredBlock& out);
bool decode_stored_block(const uint8_t* data, size_t size, StoredBlock& out);

struct Event {
    EventKind kind = EventKind::kMetric;
    int32_t run = 0;
    int64_t step = 0;
    uint64_t seq_no = 0;
    int64_t t_ns = 0;
    int32_t request = -1;
    int32_t block = -1;
    int32_t a = 0, b = 0, c = 0;
    int64_t wide = 0;
    double value = 0;
    // Defaulted so that `Event{.kind = ..., .request = ...}` may leave them out warning-free.
    std::string text = {};
    std::vector<uint8_t> payload = {};
    // kernel events: what the op moved, held in place so that reporting an op allocates
    // nothing (a session stores it as the payload; a payload left on a read kernel event is
    // one that did not decode).
    KernelCost cost = {};
};

// The DRAM bytes the hbm_sample events among `events` counted inside [from_ns, to_ns): a sample
// that straddles an edge counts the share of its span inside, as if its bytes were spread evenly
// over it. to_ns <= from_ns: every sample whole. Other events and undecodable payloads are skipped.
HbmBytes hbm_bytes_within(const std::vector<Event>& events, int64_t from_ns = 0, int64_t to_ns = 0);

int64_t host_now_ns();

}  // namespace kvscope
