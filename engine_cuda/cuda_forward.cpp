#include "engine_cuda/cuda_forward.h"

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "engine/kv_eviction.h"
#include "engine/op_trace.h"
#include "engine_cuda/cublas_loader.h"
#include "engine_cuda/cuda_support.h"
#include "engine_cuda/device_kv_cache.h"
#include "engine_cuda/device_weights.h"
#include "kernels/attention_probs.h"
#include "kernels/elementwise.h"
#include "kernels/paged_attention.h"
#include "kernels/paged_kv.h"
#include "kernels/split_gemm.h"
#include "probes/gpu_probes.h"

namespace kvscope {

namespace gpu {
namespace {

using kernels::DType;
using kernels::JoinSegment;

constexpr unsigned long long kNothingBad = ~0ull;

cudaDataType_t cuda_type(DType t) {
    return t == DType::kF16 ? CUDA_R_16F : CUDA_R_16BF;
}

double gib(int64_t bytes) {
    return static_cast<double>(bytes) / (1ull << 30);
}

std::string fixed(double v, int digits) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", digits, v);
    return buf;
}

// The policy a lane's wants stand for, when the CUDA backend cannot serve them.
const char* unsupported_policy(const SequenceLanes& lanes) {
    if (lanes.want_accumulated) return "h2o";
    if (lanes.want_current) return "tova";
    if (lanes.want_observed) return "snapkv";
    if (lanes.want_key_norm) return "knorm";
    if (lanes.window_rows > 0) return "morphkv";
    return nullptr;
}

class CudaForward final : public Forward {
  public:
    CudaForward(const ModelConfig& config, const ModelWeights& weights)
        : config_(config), host_weights_(weights) {}
    ~CudaForward() override {
        drop_graphs();
        if (handle_) cublas_->destroy(handle_);
        if (stream_) cudaStreamDestroy(stream_);
    }
    CudaForward(const CudaForward&) = delete;
    CudaForward& operator=(const CudaForward&) = delete;

    Status init(const ForwardSetup& setup, const CudaForwardOptions& options);

    const char* backend_name() const override { return "cuda"; }
    Status run(const ForwardBatch& batch, std::vector<float>& logits) override;
    void set_capture(AttentionCapture* capture) override { capture_ = capture; }
    // No host op spans (the layers only enqueue work); with GPU probes, the device's own record
    // of each op goes into the trace's device events.
    void set_trace(OpTrace* trace) override { trace_ = trace; }
    // Zero: the layers run asynchronously, so host clocks around them would measure enqueueing.
    const ForwardPhaseTimes& last_phase_times() const override { return times_; }
    KvBlockStore& kv_blocks() override { return cache_; }
    void set_step_graphs(bool on) override { graphs_on_ = on; }
    int64_t replayed_steps() const override { return replayed_; }

  private:
    // [SECTION] Decode steps as CUDA graphs.
    // A decode step's ~20 launches a layer cost more host time than the GPU spends on them
    // (bench/RESULTS.md: 3 ms of a 10.8 ms step were gaps on an H200), so decode steps are
    // recorded once per shape and replayed: the step's inputs (embeddings, tables, lengths) go
    // to the same device buffers before each replay. What a recording bakes in is its key
    // (rows, sequences, table stride, logit rows, attention splits) and the scratch buffers'
    // addresses: the table stride is rounded up to a power of two (unused entries are holes, never
    // read below a sequence's length) and decode's attention splits are planned for that rounded
    // stride whether the step is replayed or launched (so both give the same bits), and one
    // recording serves a sequence for as long as its table fits; any scratch growth drops them
    // all. Not recorded: prefill, attention capture, per-lane eviction tables. If a recording
    // fails (an older cuBLAS that allocates while captured), the step runs as launches and graphs
    // stay off for this backend.
    //
    // Traced by the GPU probes, a replay's kernels all carry the replay's correlation (the op
    // "decode_graph"); a recording notes which op and layer each of its nodes came from (the
    // capture's node count at each op's start), and since a recording of one stream is one chain
    // that runs in order, the replay's kernels, copies and sets sorted by start are its nodes in
    // order and take their ops and layers back (attribute_replay). If their count differs (records
    // lost or still in flight) they stay "decode_graph".
    struct StepGraphKey {
        int rows, seqs, stride, out_rows, splits;
        bool operator==(const StepGraphKey&) const = default;
    };
    struct NodeOp {
        OpKind kind;
        int32_t layer;
    };
    struct StepGraph {
        StepGraphKey key;
        cudaGraphExec_t exec;
        std::vector<NodeOp> nodes;
    };
    static constexpr size_t kMaxGraphs = 16;
    Status launch_as_graph(const StepGraphKey& key, const std::function<Status()>& launch,
                           const std::function<void()>& enter_replay);
    std::vector<const void*> graph_addresses() const;
    void drop_graphs();
    // Nodes captured so far on the stream (0 when it is not capturing).
    size_t captured_nodes() const;
    void attribute_replay(std::vector<Event>& events, size_t from, int64_t pass) const;
    bool graphs_on_ = true;
    bool graphs_failed_ = false;
    int64_t replayed_ = 0;
    std::vector<StepGraph> graphs_;
    std::vector<const void*> graphed_addresses_;
    // While recording: (nodes captured before it, op, layer) for each op entered.
    std::vector<std::tuple<size_t, OpKind, int32_t>>* recording_ops_ = nullptr;
    const StepGraph* replayed_graph_ = nullptr;  // the graph this pass replayed, if any
    int32_t graph_op_ = -1;                      // probes_->op("decode_graph")

    // Host-side layout of one step's int32 metadata, uploaded as one copy.
    struct Meta {
        size_t pos = 0, seq = 0, slot = 0, kv_len = 0, q_start = 0, tables = 0, out_rows = 0,
               slot_pos = 0, items = 0, count = 0;
    };

    Status check(cudaError_t e, const char* what) const {
        return e == cudaSuccess ? Status{} : cuda_status(e, what);
    }
    // out segments = in [rows][w.cols] times w^T, through split_halves, one GEMM and join_halves.
    Status project(const DeviceMatrix& w, const float* in, int rows,
                   std::initializer_list<JoinSegment> segments, const float* bias,
                   unsigned long long* first_bad);
    Status reserve_scratch(int n, int n_out, size_t capture_bytes);
    Status first_failure(const unsigned long long* flags,
                         const std::vector<int32_t>& row_pos) const;
    void collect_capture(const uint8_t* probs, const ForwardBatch& batch,
                         const std::vector<int32_t>& row_pos, const std::vector<int32_t>& row_slot,
                         const std::vector<int32_t>& row_chunk, int stride);

    const ModelConfig& config_;
    const ModelWeights& host_weights_;
    int device_ = 0;
    const Cublas* cublas_ = nullptr;
    cublasHandle_t handle_ = nullptr;
    cudaStream_t stream_ = nullptr;
    DeviceWeights weights_;
    DeviceKvCache cache_;
    DeviceMemory inv_freq_;
    AttentionCapture* capture_ = nullptr;
    OpTrace* trace_ = nullptr;
    GpuProbes* probes_ = nullptr;
    std::array<int32_t, kNumOpKinds> op_ids_{};  // probes_->op(op_name(kind))
    int64_t passes_ = 0;  // forward passes run: the scope "step" GPU records are matched by
    ForwardPhaseTimes times_;

    // Scratch, grown to the largest step so far.
    DeviceMemory x_, xb_, q_, k_, v_, att_, hb_, hb2_, half_, row_scale_, y_, logits_, meta_,
        flags_, workspace_, probs_;
    // cuBLAS's workspace, set once: a product recorded into a graph may not allocate its own.
    DeviceMemory cublas_workspace_;
    PinnedMemory host_in_, host_out_;
    // Capture items per layer: offsets into the items array ([item][2] = row, head).
    std::vector<int32_t> capture_items_;
    std::vector<size_t> capture_first_;  // [layer + 1]
};

Status CudaForward::init(const ForwardSetup& setup, const CudaForwardOptions& options) {
    const ModelConfig& c = config_;
    int count = 0;
    if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess || count == 0) {
        std::string why = e != cudaSuccess ? cudaGetErrorString(e) : "no device found";
        cudaGetLastError();
        return Error{"--backend cuda: no usable CUDA device (cudaGetDeviceCount: " + why + ")"};
    }
    if (options.device < 0 || options.device >= count)
        return Error{"--backend cuda: device " + std::to_string(options.device) +
                     " does not exist (" + std::to_string(count) + " found)"};
    device_ = options.device;
    if (Status s = check(cudaSetDevice(device_), "selecting the device"); !s) return s;
    probes_ = options.probes;
    if (probes_)
        for (int k = 0; k < kNumOpKinds; ++k)
            op_ids_[static_cast<size_t>(k)] = probes_->op(op_name(static_cast<OpKind>(k)));
    if (probes_) graph_op_ = probes_->op("decode_graph");

    // What the kernels take (kernels/paged_attention.h): 16-byte rows of K/V elements.
    const int multiple = setup.kv_dtype == KvDtype::kF32 ? 4 : 8;
    if (c.head_dim % multiple != 0 || c.head_dim > 256 || c.n_heads % c.n_kv_heads != 0)
        return Error{"--backend cuda: head size " + std::to_string(c.head_dim) +
                     " is not supported by the CUDA attention kernels (a multiple of " +
                     std::to_string(multiple) + " up to 256); use --backend cpu"};

    auto kv_bytes =
        DeviceKvCache::device_bytes(c, setup.block_size, setup.num_blocks, setup.kv_dtype);
    if (!kv_bytes) return kv_bytes.error();
    const int64_t weight_bytes = DeviceWeights::device_bytes(c, host_weights_);
    size_t free_bytes = 0, total_bytes = 0;
    if (Status s = check(cudaMemGetInfo(&free_bytes, &total_bytes), "reading free memory"); !s)
        return s;
    // Scratch for a step of a few hundred tokens and cuBLAS's own needs.
    constexpr int64_t kHeadroom = int64_t{1} << 30;
    const int64_t need = weight_bytes + kv_bytes.value() + kHeadroom;
    if (need > static_cast<int64_t>(free_bytes)) {
        cudaDeviceProp prop{};
        cudaGetDeviceProperties(&prop, device_);
        return Error{"--backend cuda: the weights (" + fixed(gib(weight_bytes), 1) +
                     " GiB in 16 bits) and the KV cache (" + std::to_string(setup.num_blocks) +
                     " blocks, " + fixed(gib(kv_bytes.value()), 1) + " GiB) need " +
                     fixed(gib(need), 1) + " GiB with scratch, and " + prop.name + " has " +
                     fixed(gib(static_cast<int64_t>(free_bytes)), 1) +
                     " GiB free: use fewer blocks (--num-blocks), --kv-dtype f16, or a smaller "
                     "model"};
    }

    auto cublas = load_cublas();
    if (!cublas) return Error{"--backend cuda: " + cublas.error().message};
    cublas_ = cublas.value();
    if (Status s =
            check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "creating a stream");
        !s)
        return s;
    if (Status s = cublas_status(*cublas_, cublas_->create(&handle_), "creating a handle"); !s) {
        handle_ = nullptr;
        return s;
    }
    if (Status s = cublas_status(*cublas_, cublas_->set_stream(handle_, stream_),
                                 "setting its "
                                 "stream");
        !s)
        return s;
    if (cublas_->set_workspace) {  // 32 MiB: what cuBLAS's documentation asks for on Hopper
        constexpr size_t kCublasWorkspace = size_t{32} << 20;
        if (Status s = cublas_workspace_.allocate(kCublasWorkspace, "cuBLAS's workspace"); !s)
            return s;
        if (Status s = cublas_status(
                *cublas_,
                cublas_->set_workspace(handle_, cublas_workspace_.get(), kCublasWorkspace),
                "setting its workspace");
            !s)
            return s;
    }

    // The weights' and the cache's uploads show in a trace too: as an op of their own, with the
    // first step, rather than as copies no op launched.
    GpuOpScope upload(probes_ ? probes_->correlation() : nullptr, 0,
                      probes_ ? probes_->op("upload") : -1);
    if (Status s = weights_.upload(c, host_weights_, options.weights, setup.pool); !s) return s;
    if (Status s = cache_.init(c, setup.block_size, setup.num_blocks, setup.kv_dtype, stream_); !s)
        return s;

    // The same floats as CpuForward's constructor, so both backends rotate by the same angles.
    std::vector<float> inv_freq(static_cast<size_t>(c.head_dim / 2));
    for (int i = 0; i < c.head_dim / 2; ++i)
        inv_freq[static_cast<size_t>(i)] =
            1.0f /
            std::pow(c.rope_theta, static_cast<float>(2 * i) / static_cast<float>(c.head_dim));
    if (Status s = inv_freq_.allocate(inv_freq.size() * sizeof(float), "RoPE frequencies"); !s)
        return s;
    if (Status s = check(cudaMemcpy(inv_freq_.get(), inv_freq.data(),
                                    inv_freq.size() * sizeof(float), cudaMemcpyHostToDevice),
                         "uploading RoPE frequencies");
        !s)
        return s;
    // The uploads went through the legacy default stream, which a non-blocking stream does not
    // wait for, and a pageable cudaMemcpy may return before its DMA is done.
    return check(cudaDeviceSynchronize(), "finishing the uploads");
}

Status CudaForward::project(const DeviceMatrix& w, const float* in, int rows,
                            std::initializer_list<JoinSegment> segments, const float* bias,
                            unsigned long long* first_bad) {
    if (rows == 0) return {};
    if (Status s = check(kernels::split_halves(half_.get(), w.type, row_scale_.as<float>(), in,
                                               rows, w.cols, stream_),
                         "splitting activations");
        !s)
        return s;
    const float one = 1.0f, zero = 0.0f;
    // Column-major view: the weights [out][in] row-major are an [in x out] matrix, transposed;
    // the halves [2 rows][in] are [in x 2 rows]; the product [out x 2 rows] is [2 rows][out].
    const cudaDataType_t t = cuda_type(w.type);
    if (Status s = cublas_status(
            *cublas_,
            cublas_->gemm_ex(handle_, CUBLAS_OP_T, CUBLAS_OP_N, w.rows, 2 * rows, w.cols, &one,
                             w.data, t, w.cols, half_.get(), t, w.cols, &zero, y_.get(), CUDA_R_32F,
                             w.rows, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            "matrix product");
        !s)
        return s;
    return check(
        kernels::join_halves(segments.begin(), static_cast<int>(segments.size()), y_.as<float>(),
                             row_scale_.as<float>(), bias, rows, first_bad, stream_),
        "joining products");
}

Status CudaForward::reserve_scratch(int n, int n_out, size_t capture_bytes) {
    const ModelConfig& c = config_;
    const auto N = static_cast<size_t>(n);
    const size_t widest_in = static_cast<size_t>(std::max({c.dim, c.q_dim(), c.hidden_dim}));
    const size_t widest_out =
        std::max<size_t>({static_cast<size_t>(c.q_dim() + 2 * c.kv_dim()),
                          static_cast<size_t>(c.dim), static_cast<size_t>(2 * c.hidden_dim)});
    const size_t y_floats = std::max(
        2 * N * widest_out, 2 * static_cast<size_t>(n_out) * static_cast<size_t>(c.vocab_size));
    const struct {
        DeviceMemory* m;
        size_t bytes;
    } wants[] = {
        {&x_, N * c.dim * 4},
        {&xb_, N * c.dim * 4},
        {&q_, N * c.q_dim() * 4},
        {&k_, N * c.kv_dim() * 4},
        {&v_, N * c.kv_dim() * 4},
        {&att_, N * c.q_dim() * 4},
        {&hb_, N * c.hidden_dim * 4},
        {&hb2_, N * c.hidden_dim * 4},
        {&half_, 2 * N * widest_in * 2},
        {&row_scale_, N * 4},
        {&y_, y_floats * 4},
        {&logits_, static_cast<size_t>(n_out) * c.vocab_size * 4},
        {&flags_, static_cast<size_t>(c.n_layers + 1) * sizeof(unsigned long long)},
        {&probs_, capture_bytes},
    };
    for (const auto& w : wants)
        if (Status s = w.m->reserve(w.bytes, "a forward pass's activations"); !s) return s;
    return {};
}

Status CudaForward::run(const ForwardBatch& batch, std::vector<float>& logits) {
    const ModelConfig& c = config_;
    if (!cache_.error()) return cache_.error();
    if (capture_) capture_->rows.clear();
    const bool capturing = capture_ && capture_->any();
    for (const SequenceChunk& ch : batch.chunks) {
        if (!ch.lanes) continue;
        if (ch.lanes->merge_from >= 0)
            return Error{
                "--merge-layers: the CUDA backend does not rewrite cached tokens yet; use "
                "--backend cpu"};
        if (const char* policy = unsupported_policy(*ch.lanes))
            return Error{std::string("--policy ") + policy +
                         ": the CUDA backend does not gather the attention statistics or key "
                         "norms this policy scores by yet; use --policy streaming --positions "
                         "absolute, or "
                         "--backend cpu"};
    }
    for (const SequenceChunk& ch : batch.chunks)
        if (ch.lanes && ch.lanes->cache_positions)
            return Error{
                "--positions cache: the CUDA backend rotates keys as it stores them, at "
                "their positions in the text; use --positions absolute, or --backend cpu"};
    const int n = static_cast<int>(batch.tokens.size());
    const int chunks = static_cast<int>(batch.chunks.size());
    logits.clear();
    if (n == 0) return {};
    if (Status s = check(cudaSetDevice(device_), "selecting the device"); !s) return s;
    // With probes and a trace, each launch below is attributed to the op entered last.
    const bool traced = trace_ && probes_;
    const int64_t pass = passes_++;
    GpuOpSequence ops(traced ? probes_->correlation() : nullptr, pass);
    auto enter = [&](OpKind kind, int layer) {
        if (recording_ops_) recording_ops_->emplace_back(captured_nodes(), kind, layer);
        ops.enter(op_ids_[static_cast<size_t>(kind)], layer);
    };
    replayed_graph_ = nullptr;

    // [SECTION] The step's rows and tables, as CpuForward::run lays them out.
    std::vector<int32_t> row_pos(static_cast<size_t>(n)), row_slot(row_pos.size()),
        row_chunk(row_pos.size()), kv_len(static_cast<size_t>(chunks)),
        q_start(static_cast<size_t>(chunks) + 1), out_rows;
    int stride = 1, max_kv = 1, max_q = 0;
    bool any_lanes = false, decode = true;
    {
        int row = 0;
        for (int ci = 0; ci < chunks; ++ci) {
            const SequenceChunk& ch = batch.chunks[static_cast<size_t>(ci)];
            const int32_t first_slot = ch.lanes ? ch.lanes->slots - ch.num_tokens : ch.start_pos;
            any_lanes |= ch.lanes != nullptr;
            decode &= ch.num_tokens == 1;
            q_start[static_cast<size_t>(ci)] = row;
            for (int32_t i = 0; i < ch.num_tokens; ++i, ++row) {
                row_pos[static_cast<size_t>(row)] = ch.start_pos + i;
                row_slot[static_cast<size_t>(row)] = first_slot + i;
                row_chunk[static_cast<size_t>(row)] = ci;
            }
            kv_len[static_cast<size_t>(ci)] = first_slot + ch.num_tokens;
            if ((ch.want_logits || ch.all_logits) && ch.num_tokens > 0)
                for (int r = ch.all_logits ? row - ch.num_tokens : row - 1; r < row; ++r)
                    out_rows.push_back(r);
            stride = std::max(stride, static_cast<int>(ch.table->blocks.size()));
            max_kv = std::max(max_kv, kv_len[static_cast<size_t>(ci)]);
            max_q = std::max(max_q, ch.num_tokens);
        }
        q_start[static_cast<size_t>(chunks)] = row;
    }
    const bool graphed = graphs_on_ && !graphs_failed_ && decode && !capturing && !any_lanes;
    // Decode plans its attention splits for the table stride rounded up to a power of two,
    // replayed or not (see [SECTION] Decode steps as CUDA graphs).
    int planned_stride = stride;
    while (planned_stride & (planned_stride - 1))
        planned_stride += planned_stride & -planned_stride;  // up to the next power of two
    if (graphed) stride = planned_stride;
    const int n_out = static_cast<int>(out_rows.size());
    const int n_kv = c.n_kv_heads;

    // Capture: every row with every wanted head, per layer.
    capture_items_.clear();
    capture_first_.assign(static_cast<size_t>(c.n_layers) + 1, 0);
    for (int l = 0; l < c.n_layers; ++l) {
        capture_first_[static_cast<size_t>(l)] = capture_items_.size() / 2;
        if (!capturing) continue;
        for (int h = 0; h < c.n_heads; ++h)
            if (capture_->wanted[static_cast<size_t>(l * c.n_heads + h)])
                for (int r = 0; r < n; ++r) {
                    capture_items_.push_back(r);
                    capture_items_.push_back(h);
                }
    }
    capture_first_[static_cast<size_t>(c.n_layers)] = capture_items_.size() / 2;
    const size_t num_items = capture_items_.size() / 2;

    Meta m;
    m.pos = 0;
    m.seq = m.pos + static_cast<size_t>(n);
    m.slot = m.seq + static_cast<size_t>(n);
    m.kv_len = m.slot + static_cast<size_t>(n);
    m.q_start = m.kv_len + static_cast<size_t>(chunks);
    m.tables = m.q_start + static_cast<size_t>(chunks) + 1;
    m.out_rows = m.tables + static_cast<size_t>(chunks) * static_cast<size_t>(stride);
    m.slot_pos = m.out_rows + static_cast<size_t>(n_out);
    const size_t slot_pos_layer = any_lanes ? static_cast<size_t>(chunks) * n_kv * max_kv : 0;
    m.items = m.slot_pos + slot_pos_layer * static_cast<size_t>(c.n_layers);
    m.count = m.items + capture_items_.size();

    const size_t x_bytes = static_cast<size_t>(n) * c.dim * sizeof(float);
    const size_t meta_bytes = m.count * sizeof(int32_t);
    if (Status s = host_in_.reserve(x_bytes + meta_bytes, "a forward pass's inputs"); !s) return s;
    float* x_host = host_in_.as<float>();
    auto* meta = reinterpret_cast<int32_t*>(host_in_.as<char>() + x_bytes);
    std::copy(row_pos.begin(), row_pos.end(), meta + m.pos);
    std::copy(row_chunk.begin(), row_chunk.end(), meta + m.seq);
    std::copy(row_slot.begin(), row_slot.end(), meta + m.slot);
    std::copy(kv_len.begin(), kv_len.end(), meta + m.kv_len);
    std::copy(q_start.begin(), q_start.end(), meta + m.q_start);
    std::copy(out_rows.begin(), out_rows.end(), meta + m.out_rows);
    std::copy(capture_items_.begin(), capture_items_.end(), meta + m.items);
    for (int ci = 0; ci < chunks; ++ci) {
        const std::vector<BlockId>& blocks = batch.chunks[static_cast<size_t>(ci)].table->blocks;
        int32_t* t = meta + m.tables + static_cast<size_t>(ci) * stride;
        std::fill(t, t + stride, -1);
        std::copy(blocks.begin(), blocks.end(), t);
    }
    if (any_lanes)
        for (int l = 0; l < c.n_layers; ++l)
            for (int ci = 0; ci < chunks; ++ci) {
                const SequenceChunk& ch = batch.chunks[static_cast<size_t>(ci)];
                for (int h = 0; h < n_kv; ++h) {
                    int32_t* sp = meta + m.slot_pos + slot_pos_layer * l +
                                  (static_cast<size_t>(ci) * n_kv + h) * max_kv;
                    const int len = kv_len[static_cast<size_t>(ci)];
                    for (int t = 0; t < max_kv; ++t)
                        sp[t] = t >= len   ? -1
                                : ch.lanes ? ch.lanes->lane(l, h).position[static_cast<size_t>(t)]
                                           : t;
                }
            }

    // Embeddings on the host, exactly as the CPU converts them.
    for (int r = 0; r < n; ++r) {
        float* xr = x_host + static_cast<size_t>(r) * c.dim;
        host_weights_.token_embedding.row_to_f32(batch.tokens[static_cast<size_t>(r)], xr);
        for (int i = 0; i < c.dim; ++i)
            if (!std::isfinite(xr[i]))
                return Error{"the model produced " +
                             std::string(std::isnan(xr[i]) ? "NaN" : "Inf") +
                             " in the token embedding (token position " +
                             std::to_string(row_pos[static_cast<size_t>(r)]) +
                             "): its weights hold NaN or Inf, or overflow float32"};
    }

    if (Status s = reserve_scratch(n, n_out, num_items * static_cast<size_t>(max_kv)); !s) return s;
    if (Status s = meta_.reserve(meta_bytes, "a forward pass's tables"); !s) return s;
    enter(OpKind::kEmbed, -1);
    if (Status s =
            check(cudaMemcpyAsync(x_.get(), x_host, x_bytes, cudaMemcpyHostToDevice, stream_),
                  "uploading embeddings");
        !s)
        return s;
    if (Status s =
            check(cudaMemcpyAsync(meta_.get(), meta, meta_bytes, cudaMemcpyHostToDevice, stream_),
                  "uploading block tables");
        !s)
        return s;
    auto* flags = flags_.as<unsigned long long>();
    if (Status s =
            check(cudaMemsetAsync(flags, 0xff, static_cast<size_t>(c.n_layers + 1) * sizeof(*flags),
                                  stream_),
                  "clearing flags");
        !s)
        return s;
    const int32_t* dev = meta_.as<int32_t>();

    // [SECTION] The layers.
    kernels::PagedAttentionParams attn;
    attn.q = q_.as<float>();
    attn.out = att_.as<float>();
    attn.tables = {dev + m.tables, stride};
    attn.q_start = decode ? nullptr : dev + m.q_start;
    attn.kv_len = dev + m.kv_len;
    attn.slot_pos_stride = max_kv;
    attn.num_seqs = chunks;
    attn.n_heads = c.n_heads;
    attn.max_q_len = std::max(max_q, 1);
    attn.max_kv_len = decode ? planned_stride * cache_.layer(0).block_size : max_kv;
    attn.cache = cache_.layer(0);
    attn.num_splits = decode ? kernels::paged_attention_splits(attn) : 1;
    if (const size_t ws = kernels::paged_attention_workspace_bytes(attn); ws > 0) {
        if (Status s = workspace_.reserve(ws, "split attention"); !s) return s;
        attn.workspace = workspace_.get();
        attn.workspace_bytes = workspace_.bytes();
    }
    const auto rope_layout = c.rope_style == RopeStyle::kAdjacentPairs
                                 ? kernels::RopeLayout::kAdjacentPairs
                                 : kernels::RopeLayout::kHalfSplit;
    float* x = x_.as<float>();
    float* xb = xb_.as<float>();
    auto launch = [&]() -> Status {
        for (int l = 0; l < c.n_layers; ++l) {
            const DeviceLayer& w = weights_.layers[static_cast<size_t>(l)];
            const kernels::PagedKvCache cache = cache_.layer(l);
            enter(OpKind::kAttnNorm, l);
            if (Status s = check(kernels::rmsnorm(xb, x, w.attn_norm, n, c.dim, c.rms_eps, stream_),
                                 "RMSNorm");
                !s)
                return s;
            enter(OpKind::kQkv, l);
            if (Status s = project(w.qkv, xb, n,
                                   {{q_.as<float>(), c.q_dim(), false},
                                    {k_.as<float>(), c.kv_dim(), false},
                                    {v_.as<float>(), c.kv_dim(), false}},
                                   w.qkv_bias, nullptr);
                !s)
                return s;
            enter(OpKind::kRope, l);
            if (Status s = check(kernels::rope(q_.as<float>(), k_.as<float>(), dev + m.pos,
                                               inv_freq_.as<float>(), n, c.n_heads, n_kv,
                                               c.head_dim, rope_layout, stream_),
                                 "RoPE");
                !s)
                return s;
            enter(OpKind::kKvWrite, l);
            if (Status s = check(
                    kernels::write_paged_kv(cache, attn.tables, k_.as<float>(), v_.as<float>(),
                                            dev + m.seq, dev + m.slot, n, stream_),
                    "writing K/V");
                !s)
                return s;
            enter(OpKind::kAttention, l);
            attn.cache = cache;
            attn.slot_pos = any_lanes ? dev + m.slot_pos + slot_pos_layer * l : nullptr;
            if (Status s = check(decode ? kernels::paged_attention_decode(attn, stream_)
                                        : kernels::paged_attention_prefill(attn, stream_),
                                 "paged attention");
                !s)
                return s;
            if (capturing) {
                const size_t first = capture_first_[static_cast<size_t>(l)];
                kernels::AttentionProbsParams p;
                p.items = dev + m.items + 2 * first;
                p.num_items = static_cast<int>(capture_first_[static_cast<size_t>(l) + 1] - first);
                p.q = q_.as<float>();
                p.n_heads = c.n_heads;
                p.cache = cache;
                p.tables = attn.tables;
                p.row_seq = dev + m.seq;
                p.row_slot = dev + m.slot;
                p.slot_pos = attn.slot_pos;
                p.slot_pos_stride = max_kv;
                p.out = probs_.as<uint8_t>() + first * static_cast<size_t>(max_kv);
                p.out_stride = max_kv;
                if (Status s =
                        check(kernels::attention_probabilities(p, stream_), "capturing attention");
                    !s)
                    return s;
            }
            enter(OpKind::kAttnOutput, l);
            if (Status s = project(w.wo, att_.as<float>(), n, {{x, c.dim, true}}, nullptr, nullptr);
                !s)
                return s;
            enter(OpKind::kFfnNorm, l);
            if (Status s = check(kernels::rmsnorm(xb, x, w.ffn_norm, n, c.dim, c.rms_eps, stream_),
                                 "RMSNorm");
                !s)
                return s;
            enter(OpKind::kFfnGateUp, l);
            if (Status s = project(w.gate_up, xb, n,
                                   {{hb_.as<float>(), c.hidden_dim, false},
                                    {hb2_.as<float>(), c.hidden_dim, false}},
                                   nullptr, nullptr);
                !s)
                return s;
            enter(OpKind::kSwiglu, l);
            if (Status s = check(kernels::swiglu(hb_.as<float>(), hb_.as<float>(), hb2_.as<float>(),
                                                 static_cast<int64_t>(n) * c.hidden_dim, stream_),
                                 "SwiGLU");
                !s)
                return s;
            enter(OpKind::kFfnDown, l);
            if (Status s =
                    project(w.down, hb_.as<float>(), n, {{x, c.dim, true}}, nullptr, flags + l);
                !s)
                return s;
        }

        // [SECTION] The classifier, for the rows whose logits are wanted.
        if (n_out > 0) {
            enter(OpKind::kOutputNorm, -1);
            if (Status s =
                    check(kernels::gather_rows(xb, x, dev + m.out_rows, n_out, c.dim, stream_),
                          "gathering rows");
                !s)
                return s;
            if (Status s = check(kernels::rmsnorm(xb, xb, weights_.output_norm, n_out, c.dim,
                                                  c.rms_eps, stream_),
                                 "RMSNorm");
                !s)
                return s;
            enter(OpKind::kLmHead, -1);
            if (Status s = project(weights_.output, xb, n_out,
                                   {{logits_.as<float>(), c.vocab_size, false}}, nullptr,
                                   flags + c.n_layers);
                !s)
                return s;
        }
        return {};
    };
    auto enter_replay = [&] { ops.enter(graph_op_, -1); };
    if (Status s = graphed ? launch_as_graph({n, chunks, stride, n_out, attn.num_splits}, launch,
                                             enter_replay)
                           : launch();
        !s)
        return s;
    // The copies back belong to the op that ran last, as when the step is launched op by op
    // (and not to the replay, whose own work is exactly its recording's nodes).
    if (replayed_graph_ && !replayed_graph_->nodes.empty())
        enter(replayed_graph_->nodes.back().kind, replayed_graph_->nodes.back().layer);

    // [SECTION] One copy back: logits, the finite flags, captured rows.
    const size_t logit_bytes = static_cast<size_t>(n_out) * c.vocab_size * sizeof(float);
    const size_t flag_at = (logit_bytes + 7) & ~size_t{7};  // aligned for the 64-bit flags
    const size_t flag_bytes = static_cast<size_t>(c.n_layers + 1) * sizeof(unsigned long long);
    const size_t probs_bytes = num_items * static_cast<size_t>(max_kv);
    if (Status s = host_out_.reserve(flag_at + flag_bytes + probs_bytes, "logits"); !s) return s;
    char* out = host_out_.as<char>();
    if (logit_bytes > 0)  // a step that wants no logits may come before any buffer for them
        if (Status s = check(
                cudaMemcpyAsync(out, logits_.get(), logit_bytes, cudaMemcpyDeviceToHost, stream_),
                "downloading logits");
            !s)
            return s;
    if (Status s = check(
            cudaMemcpyAsync(out + flag_at, flags, flag_bytes, cudaMemcpyDeviceToHost, stream_),
            "downloading logits");
        !s)
        return s;
    if (probs_bytes > 0)
        if (Status s = check(cudaMemcpyAsync(out + flag_at + flag_bytes, probs_.get(), probs_bytes,
                                             cudaMemcpyDeviceToHost, stream_),
                             "downloading attention");
            !s)
            return s;
    if (Status s = check(cudaStreamSynchronize(stream_), "running the forward pass"); !s) return s;
    if (traced) {
        const size_t from = trace_->device_events.size();
        probes_->collect(pass, trace_->device_events);
        attribute_replay(trace_->device_events, from, pass);
    }

    if (Status s =
            first_failure(reinterpret_cast<const unsigned long long*>(out + flag_at), row_pos);
        !s)
        return s;
    logits.assign(reinterpret_cast<const float*>(out),
                  reinterpret_cast<const float*>(out + logit_bytes));
    if (capturing)
        collect_capture(reinterpret_cast<const uint8_t*>(out + flag_at + flag_bytes), batch,
                        row_pos, row_slot, row_chunk, max_kv);
    return {};
}

std::vector<const void*> CudaForward::graph_addresses() const {
    std::vector<const void*> at;
    for (const DeviceMemory* m : {&x_, &xb_, &q_, &k_, &v_, &att_, &hb_, &hb2_, &half_, &row_scale_,
                                  &y_, &logits_, &meta_, &flags_, &workspace_, &probs_})
        at.push_back(m->get());
    for (int l = 0; l < config_.n_layers; ++l) {
        const kernels::PagedKvCache layer = cache_.layer(l);
        at.push_back(layer.k);
        at.push_back(layer.v);
    }
    return at;
}

void CudaForward::drop_graphs() {
    for (StepGraph& g : graphs_)
        cudaGraphExecDestroy(g.exec);
    graphs_.clear();
}

size_t CudaForward::captured_nodes() const {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    cudaGraph_t graph = nullptr;
    size_t count = 0;
    if (cudaStreamGetCaptureInfo(stream_, &status, nullptr, &graph) != cudaSuccess ||
        status != cudaStreamCaptureStatusActive || !graph ||
        cudaGraphGetNodes(graph, nullptr, &count) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return count;
}

Status CudaForward::launch_as_graph(const StepGraphKey& key, const std::function<Status()>& launch,
                                    const std::function<void()>& enter_replay) {
    if (std::vector<const void*> at = graph_addresses(); at != graphed_addresses_) {
        drop_graphs();
        graphed_addresses_ = std::move(at);
    }
    auto replay = [&](const StepGraph& g) {
        ++replayed_;
        replayed_graph_ = &g;
        enter_replay();
        return check(cudaGraphLaunch(g.exec, stream_), "replaying a decode step");
    };
    for (const StepGraph& g : graphs_)
        if (g.key == key) return replay(g);
    if (graphs_.size() >= kMaxGraphs) drop_graphs();
    if (cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        cudaGetLastError();
        graphs_failed_ = true;
        return launch();
    }
    std::vector<std::tuple<size_t, OpKind, int32_t>> entered;
    recording_ops_ = &entered;
    const Status recorded = launch();
    recording_ops_ = nullptr;
    size_t node_count = captured_nodes();
    cudaGraph_t graph = nullptr;
    cudaError_t e = cudaStreamEndCapture(stream_, &graph);
    cudaGraphExec_t exec = nullptr;
    if (recorded && e == cudaSuccess) e = cudaGraphInstantiate(&exec, graph, 0);
    if (graph) cudaGraphDestroy(graph);
    if (!recorded || e != cudaSuccess) {
        // Launched for real instead: a genuine error says itself there, with its op.
        cudaGetLastError();
        graphs_failed_ = true;
        return launch();
    }
    StepGraph g{key, exec, {}};
    g.nodes.reserve(node_count);
    for (size_t i = 0; i < entered.size(); ++i) {
        const auto [first, kind, layer] = entered[i];
        const size_t end = i + 1 < entered.size() ? std::get<0>(entered[i + 1]) : node_count;
        for (size_t n = first; n < end; ++n)
            g.nodes.push_back({kind, layer});
    }
    if (g.nodes.size() != node_count) g.nodes.clear();  // counts unknown: left to decode_graph
    graphs_.push_back(std::move(g));
    return replay(graphs_.back());
}

void CudaForward::attribute_replay(std::vector<Event>& events, size_t from, int64_t pass) const {
    if (!replayed_graph_ || replayed_graph_->nodes.empty() || graph_op_ < 0) return;
    std::vector<Event*> nodes;
    for (size_t i = from; i < events.size(); ++i) {
        Event& e = events[i];
        if (e.kind == EventKind::kKernel && e.step == pass &&
            split_gpu_kernel_text(e.text).op == "decode_graph")
            nodes.push_back(&e);
    }
    if (nodes.size() != replayed_graph_->nodes.size()) return;
    std::stable_sort(nodes.begin(), nodes.end(),
                     [](const Event* a, const Event* b) { return a->t_ns < b->t_ns; });
    for (size_t i = 0; i < nodes.size(); ++i) {
        const NodeOp& op = replayed_graph_->nodes[i];
        Event& e = *nodes[i];
        e.text = gpu_kernel_text(op_name(op.kind), split_gpu_kernel_text(e.text).kernel);
        e.a = op.layer;
    }
}

// Where the activations first stopped being finite, in the CPU backend's words: each layer's
// flag holds its first non-finite residual (the down projection's join), the last the logits'.
Status CudaForward::first_failure(const unsigned long long* flags,
                                  const std::vector<int32_t>& row_pos) const {
    const ModelConfig& c = config_;
    for (int l = 0; l <= c.n_layers; ++l) {
        const unsigned long long f = flags[l];
        if (f == kNothingBad) continue;
        const std::string what = (f & 1) ? "NaN" : "Inf";
        if (l == c.n_layers)
            return Error{"the model produced " + what +
                         " in its output layer (logits): its output weights or final norm hold "
                         "NaN or Inf, or overflow float32"};
        const size_t r = static_cast<size_t>((f >> 1) / static_cast<unsigned long long>(c.dim));
        return Error{"the model produced " + what + " in layer " + std::to_string(l) +
                     " (token position " + std::to_string(r < row_pos.size() ? row_pos[r] : 0) +
                     "): its weights hold NaN or Inf, or overflow float32"};
    }
    return {};
}

// Captured rows as CpuForward::attention makes them: over key positions 0..query position, slots
// mapped to the positions their lane holds.
void CudaForward::collect_capture(const uint8_t* probs, const ForwardBatch& batch,
                                  const std::vector<int32_t>& row_pos,
                                  const std::vector<int32_t>& row_slot,
                                  const std::vector<int32_t>& row_chunk, int stride) {
    const ModelConfig& c = config_;
    for (int l = 0; l < c.n_layers; ++l)
        for (size_t i = capture_first_[static_cast<size_t>(l)];
             i < capture_first_[static_cast<size_t>(l) + 1]; ++i) {
            const auto r = static_cast<size_t>(capture_items_[2 * i]);
            const int head = capture_items_[2 * i + 1];
            const int32_t ci = row_chunk[r];
            const SequenceChunk& ch = batch.chunks[static_cast<size_t>(ci)];
            const int pos = row_pos[r], len = row_slot[r] + 1;
            const LaneStats* lane = ch.lanes ? &ch.lanes->lane(l, head / c.group_size()) : nullptr;
            std::vector<uint8_t> q8(static_cast<size_t>(pos + 1), 0);
            const uint8_t* row = probs + i * static_cast<size_t>(stride);
            for (int t = 0; t < len; ++t) {
                const int at = lane ? lane->position[static_cast<size_t>(t)] : t;
                if (at >= 0 && at <= pos) q8[static_cast<size_t>(at)] = row[t];
            }
            capture_->rows.push_back({ci, pos, l, head, std::move(q8)});
        }
}

}  // namespace
}  // namespace gpu

Result<std::unique_ptr<Forward>> make_cuda_forward(const ForwardSetup& setup,
                                                   const CudaForwardOptions& options) {
    auto forward = std::make_unique<gpu::CudaForward>(setup.config, setup.weights);
    if (Status s = forward->init(setup, options); !s) return s.error();
    return std::unique_ptr<Forward>(std::move(forward));
}

int64_t cuda_weight_bytes(const ModelConfig& config, const ModelWeights& weights) {
    return gpu::DeviceWeights::device_bytes(config, weights);
}

ForwardFactory cuda_backend(CudaForwardOptions options) {
    return [options](const ForwardSetup& setup) { return make_cuda_forward(setup, options); };
}

}  // namespace kvscope
