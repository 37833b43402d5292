// bench_kernels: the CUDA kernels' speed on this machine's GPU, against its own limits: paged
// decode attention in GB/s of K/V read (memory-bound: compared with the device-to-device copy
// bandwidth measured in the same run), prefill attention in TFLOP/s, and the per-token kernels
// in GB/s. Shapes are real models' (Llama 3 8B, Qwen2.5 0.5B), block size 16, block tables
// shuffled over the pool as a long-running server's are. `--json` prints one array of rows
// that bench/attention_vs_sdpa.py reads to time PyTorch on the same shapes.
//
//   bench_kernels [--quick] [--json]
//
// CUDA builds only; needs a GPU (says so and exits 1 without one).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/device_info.h"
#include "kernels/elementwise.h"
#include "kernels/paged_attention.h"
#include "kernels/paged_kv.h"

namespace {

using kvscope::kernels::DType;

#define CHECK(expr)                                                                         \
    do {                                                                                    \
        cudaError_t e_ = (expr);                                                            \
        if (e_ != cudaSuccess) {                                                            \
            std::fprintf(stderr, "bench_kernels: %s: %s\n", #expr, cudaGetErrorString(e_)); \
            std::exit(1);                                                                   \
        }                                                                                   \
    } while (0)

void* device_alloc(size_t bytes) {
    void* p = nullptr;
    CHECK(cudaMalloc(&p, bytes > 0 ? bytes : 1));
    return p;
}

// Random values in [-1, 1) of `dtype` on the device (generated on the host: setup, not timed).
// A splitmix64 stream seeded from `rng`: the largest caches (32 x 16k slots, 2 GiB of K and V)
// take seconds this way where std::uniform_real_distribution took most of a minute.
void* device_random(size_t n, DType dtype, std::mt19937& rng) {
    uint64_t state = (static_cast<uint64_t>(rng()) << 32) | rng();
    auto next = [&state] {
        uint64_t z = (state += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    };
    const size_t elem = kvscope::kernels::dtype_bytes(dtype);
    std::vector<uint8_t> host(n * elem);
    for (size_t i = 0; i < n; ++i) {
        // 24 random bits to [-1, 1).
        const float x = static_cast<float>(next() >> 40) * (2.0f / 16777216.0f) - 1.0f;
        uint32_t bits;
        std::memcpy(&bits, &x, 4);
        if (dtype == DType::kF32) {
            std::memcpy(&host[i * 4], &x, 4);
        } else {
            // f16 or bf16 from the top bits: any finite pattern will do for timing, but keep
            // f16 in range: bf16 bits of x reinterpreted as f16 stay small and finite.
            const uint16_t h = static_cast<uint16_t>(bits >> 16);
            const uint16_t v = dtype == DType::kBF16 ? h : static_cast<uint16_t>(h & 0xbfff);
            std::memcpy(&host[i * 2], &v, 2);
        }
    }
    void* d = device_alloc(host.size());
    CHECK(cudaMemcpy(d, host.data(), host.size(), cudaMemcpyHostToDevice));
    return d;
}

// Milliseconds per call of `fn`: 3 warm-up calls, then the median of 5 runs of `iters` calls.
double time_ms(const std::function<void()>& fn, int iters) {
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    for (int i = 0; i < 3; ++i)
        fn();
    CHECK(cudaDeviceSynchronize());
    std::vector<double> runs;
    for (int r = 0; r < 5; ++r) {
        CHECK(cudaEventRecord(a));
        for (int i = 0; i < iters; ++i)
            fn();
        CHECK(cudaEventRecord(b));
        CHECK(cudaEventSynchronize(b));
        float ms = 0;
        CHECK(cudaEventElapsedTime(&ms, a, b));
        runs.push_back(ms / iters);
    }
    CHECK(cudaGetLastError());
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    std::sort(runs.begin(), runs.end());
    return runs[runs.size() / 2];
}

struct Model {
    const char* name;
    int n_heads, n_kv_heads, head_dim;
};
constexpr Model kLlama3_8b{"llama-3-8b", 32, 8, 128};
constexpr Model kQwen05b{"qwen2.5-0.5b", 14, 2, 64};

struct Row {
    std::string kind, model, dtype;
    int batch = 0, q_len = 0, kv_len = 0, splits = 0;
    double ms = 0, gbps = 0, tflops = 0;
};

// One attention shape: `batch` sequences of kv_len slots, the last q_len of them queries.
// kernel: which decode kernel, to compare them (paged_attention.h).
Row bench_attention(
    const Model& m, DType dtype, int batch, int q_len, int kv_len, std::mt19937& rng,
    kvscope::kernels::DecodeKernel kernel = kvscope::kernels::DecodeKernel::kDefault) {
    const int bs = 16, blocks_per_seq = (kv_len + bs - 1) / bs;
    const int num_blocks = batch * blocks_per_seq;
    const size_t kv_elems = static_cast<size_t>(num_blocks) * bs * m.n_kv_heads * m.head_dim;
    void* k = device_random(kv_elems, dtype, rng);
    void* v = device_random(kv_elems, dtype, rng);
    std::vector<int32_t> table(static_cast<size_t>(num_blocks));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    std::vector<int32_t> lens(static_cast<size_t>(batch), kv_len), starts;
    for (int s = 0; s <= batch; ++s)
        starts.push_back(s * q_len);
    const size_t rows = static_cast<size_t>(batch) * q_len;
    auto upload = [](const std::vector<int32_t>& h) {
        void* d = device_alloc(h.size() * 4);
        CHECK(cudaMemcpy(d, h.data(), h.size() * 4, cudaMemcpyHostToDevice));
        return static_cast<int32_t*>(d);
    };
    int32_t* dtable = upload(table);
    int32_t* dlen = upload(lens);
    int32_t* dstart = upload(starts);
    auto* q = static_cast<float*>(device_random(rows * m.n_heads * m.head_dim, DType::kF32, rng));
    auto* out = static_cast<float*>(device_alloc(rows * m.n_heads * m.head_dim * 4));

    kvscope::kernels::PagedAttentionParams p;
    p.q = q;
    p.out = out;
    p.cache = {k, v, dtype, num_blocks, bs, m.n_kv_heads, m.head_dim};
    p.tables = {dtable, blocks_per_seq};
    p.q_start = q_len > 1 ? dstart : nullptr;
    p.kv_len = dlen;
    p.num_seqs = batch;
    p.n_heads = m.n_heads;
    p.max_q_len = q_len;
    p.max_kv_len = kv_len;
    p.decode_kernel = kernel;
    const size_t ws_bytes = kvscope::kernels::paged_attention_workspace_bytes(p);
    void* ws = ws_bytes ? device_alloc(ws_bytes) : nullptr;
    p.workspace = ws;
    p.workspace_bytes = ws_bytes;
    const char* decode_names[] = {"decode", "decode-tiled"};
    Row r{q_len > 1 ? "prefill" : decode_names[static_cast<int>(kernel)],
          m.name,
          kvscope::kernels::dtype_name(dtype),
          batch,
          q_len,
          kv_len,
          kvscope::kernels::paged_attention_splits(p)};
    auto call = [&] {
        CHECK(q_len > 1 ? kvscope::kernels::paged_attention_prefill(p)
                        : kvscope::kernels::paged_attention_decode(p));
    };
    const double kv_bytes = 2.0 * static_cast<double>(batch) * kv_len * m.n_kv_heads * m.head_dim *
                            kvscope::kernels::dtype_bytes(dtype);
    const int iters = kv_bytes > 1e9 ? 5 : kv_bytes > 1e8 ? 20 : 100;
    r.ms = time_ms(call, q_len > 1 ? std::max(1, iters / 10) : iters);
    const double io = kv_bytes + 2.0 * rows * m.n_heads * m.head_dim * 4;
    r.gbps = io / (r.ms * 1e-3) / 1e9;
    // QK and PV, two flops a multiply-add: query j of q_len sees kv_len - q_len + j + 1 slots.
    double pairs = 0;
    for (int j = 0; j < q_len; ++j)
        pairs += kv_len - q_len + j + 1;
    r.tflops = 4.0 * batch * pairs * m.n_heads * m.head_dim / (r.ms * 1e-3) / 1e12;
    for (void* d : {k, v, static_cast<void*>(dtable), static_cast<void*>(dlen),
                    static_cast<void*>(dstart), static_cast<void*>(q), static_cast<void*>(out), ws})
        if (d) cudaFree(d);
    return r;
}

Row bench_elementwise(const char* kind, int tokens, std::mt19937& rng) {
    const Model& m = kLlama3_8b;
    const int dim = m.n_heads * m.head_dim, hidden = 14336;
    Row r{kind, m.name, "f32", tokens};
    double bytes = 0;
    std::function<void()> call;
    std::vector<void*> owned;
    auto rnd = [&](size_t n) {
        owned.push_back(device_random(n, DType::kF32, rng));
        return static_cast<float*>(owned.back());
    };
    if (std::strcmp(kind, "rmsnorm") == 0) {
        float *x = rnd(static_cast<size_t>(tokens) * dim), *w = rnd(dim);
        call = [=] { CHECK(kvscope::kernels::rmsnorm(x, x, w, tokens, dim, 1e-5f)); };
        bytes = 2.0 * tokens * dim * 4;
    } else if (std::strcmp(kind, "swiglu") == 0) {
        float *g = rnd(static_cast<size_t>(tokens) * hidden),
              *u = rnd(static_cast<size_t>(tokens) * hidden);
        call = [=] {
            CHECK(kvscope::kernels::swiglu(g, g, u, static_cast<int64_t>(tokens) * hidden));
        };
        bytes = 3.0 * tokens * hidden * 4;
    } else if (std::strcmp(kind, "rope") == 0) {
        float *q = rnd(static_cast<size_t>(tokens) * dim),
              *k = rnd(static_cast<size_t>(tokens) * m.n_kv_heads * m.head_dim),
              *f = rnd(m.head_dim / 2);
        std::vector<int32_t> pos(static_cast<size_t>(tokens));
        std::iota(pos.begin(), pos.end(), 0);
        void* dp = device_alloc(pos.size() * 4);
        CHECK(cudaMemcpy(dp, pos.data(), pos.size() * 4, cudaMemcpyHostToDevice));
        owned.push_back(dp);
        auto* dpos = static_cast<int32_t*>(dp);
        call = [=] {
            CHECK(kvscope::kernels::rope(q, k, dpos, f, tokens, m.n_heads, m.n_kv_heads, m.head_dim,
                                         kvscope::kernels::RopeLayout::kHalfSplit));
        };
        bytes = 2.0 * tokens * (m.n_heads + m.n_kv_heads) * m.head_dim * 4;
    } else {  // write_kv: f16 cache, tokens scattered over the pool
        const int kv_dim = m.n_kv_heads * m.head_dim, bs = 16, blocks = (tokens + bs - 1) / bs;
        float *k = rnd(static_cast<size_t>(tokens) * kv_dim),
              *v = rnd(static_cast<size_t>(tokens) * kv_dim);
        void* kc = device_alloc(static_cast<size_t>(blocks) * bs * kv_dim * 2);
        void* vc = device_alloc(static_cast<size_t>(blocks) * bs * kv_dim * 2);
        std::vector<int32_t> table(static_cast<size_t>(blocks)),
            seq(static_cast<size_t>(tokens), 0), slot(static_cast<size_t>(tokens));
        std::iota(table.begin(), table.end(), 0);
        std::shuffle(table.begin(), table.end(), rng);
        std::iota(slot.begin(), slot.end(), 0);
        std::vector<void*> ints;
        for (auto* h : {&table, &seq, &slot}) {
            void* d = device_alloc(h->size() * 4);
            CHECK(cudaMemcpy(d, h->data(), h->size() * 4, cudaMemcpyHostToDevice));
            ints.push_back(d);
            owned.push_back(d);
        }
        owned.push_back(kc);
        owned.push_back(vc);
        kvscope::kernels::PagedKvCache cache{kc, vc,           DType::kF16, blocks,
                                             bs, m.n_kv_heads, m.head_dim};
        kvscope::kernels::BlockTables t{static_cast<int32_t*>(ints[0]), blocks};
        auto* dseq = static_cast<int32_t*>(ints[1]);
        auto* dslot = static_cast<int32_t*>(ints[2]);
        call = [=] {
            CHECK(kvscope::kernels::write_paged_kv(cache, t, k, v, dseq, dslot, tokens));
        };
        bytes = 2.0 * tokens * kv_dim * (4 + 2);
        r.dtype = "f16";
    }
    r.ms = time_ms(call, 50);
    r.gbps = bytes / (r.ms * 1e-3) / 1e9;
    for (void* d : owned)
        cudaFree(d);
    return r;
}

}  // namespace

int main(int argc, char** argv) {
    bool quick = false, core = false, json = false;
    int only_batch = 0, only_context = 0;  // --decode B,C: that decode shape alone (to profile)
    for (int i = 1; i < argc; ++i) {
        if (std::strcmp(argv[i], "--quick") == 0) {
            quick = true;
        } else if (std::strcmp(argv[i], "--core") == 0) {
            core = true;
        } else if (std::strcmp(argv[i], "--json") == 0) {
            json = true;
        } else if (std::strcmp(argv[i], "--decode") == 0 && i + 1 < argc &&
                   std::sscanf(argv[i + 1], "%d,%d", &only_batch, &only_context) == 2 &&
                   only_batch > 0 && only_batch <= 256 && only_context > 0 &&
                   only_context <= (1 << 20)) {
            ++i;
        } else {
            std::fprintf(stderr,
                         "usage: bench_kernels [--core | --quick | --decode BATCH,CONTEXT] "
                         "[--json]\n");
            return 2;
        }
    }
    kvscope::kernels::DeviceQuery q = kvscope::kernels::query_devices();
    if (q.devices.empty()) {
        std::fprintf(stderr, "bench_kernels: no usable CUDA device (cudaGetDeviceCount: %s)\n",
                     q.error.c_str());
        return 1;
    }
    const kvscope::kernels::DeviceInfo& d = q.devices.front();
    CHECK(cudaSetDevice(d.index));
    const kvscope::kernels::CopyBandwidth copy =
        kvscope::kernels::measure_copy_bandwidth(d.index, int64_t{1} << 30, 5);
    std::mt19937 rng(1);
    std::vector<Row> rows;

    if (only_batch > 0) {
        rows.push_back(bench_attention(kLlama3_8b, DType::kBF16, only_batch, 1, only_context, rng));
    } else if (core) {
        for (int ctx : {1024, 4096, 16384})
            for (int batch : {1, 8, 32}) {
                rows.push_back(bench_attention(kLlama3_8b, DType::kBF16, batch, 1, ctx, rng));
                // The tiled kernel on the same shape, side by side.
                if (batch == 8 || ctx == 1024)
                    rows.push_back(bench_attention(kLlama3_8b, DType::kBF16, batch, 1, ctx, rng,
                                                   kvscope::kernels::DecodeKernel::kTiled));
            }
        rows.push_back(bench_attention(kLlama3_8b, DType::kF16, 8, 1, 16384, rng));
        rows.push_back(bench_attention(kQwen05b, DType::kBF16, 32, 1, 2048, rng));
        rows.push_back(bench_attention(kLlama3_8b, DType::kBF16, 1, 2048, 2048, rng));
        rows.push_back(bench_attention(kLlama3_8b, DType::kBF16, 1, 512, 4608, rng));
    } else {
        // Decode: batch x context, memory-bound.
        for (DType dt : {DType::kBF16, DType::kF16, DType::kF32})
            for (int batch : {1, 8, 32, 128})
                for (int ctx : {512, 2048, 8192, 32768}) {
                    if (static_cast<int64_t>(batch) * ctx > (int64_t{1} << 20)) continue;  // 8 GiB
                    if (dt != DType::kBF16 && (batch != 8 || ctx != 8192)) continue;
                    if (quick && (ctx == 32768 || batch == 128)) continue;
                    rows.push_back(bench_attention(kLlama3_8b, dt, batch, 1, ctx, rng));
                }
        for (int batch : {1, 32})
            for (int ctx : {2048, 32768})
                if (!quick || ctx != 32768)
                    rows.push_back(bench_attention(kQwen05b, DType::kBF16, batch, 1, ctx, rng));
        // Prefill: whole prompts, compute-bound.
        for (int n : {512, 2048, 8192})
            if (!quick || n != 8192)
                rows.push_back(bench_attention(kLlama3_8b, DType::kBF16, 1, n, n, rng));
        rows.push_back(bench_attention(kLlama3_8b, DType::kBF16, 4, 1024, 1024, rng));
        // A chunk of 512 after a 4096-token cached prefix.
        rows.push_back(bench_attention(kLlama3_8b, DType::kBF16, 1, 512, 4608, rng));
    }
    if (only_batch == 0)
        for (const char* kind : {"rmsnorm", "rope", "swiglu", "write_kv"})
            rows.push_back(bench_elementwise(kind, 4096, rng));

    if (json) {
        std::printf("[\n");
        for (size_t i = 0; i < rows.size(); ++i) {
            const Row& r = rows[i];
            std::printf(
                "  {\"kind\": \"%s\", \"model\": \"%s\", \"dtype\": \"%s\", \"batch\": %d, "
                "\"q_len\": %d, \"kv_len\": %d, \"splits\": %d, \"ms\": %.5f, \"gbps\": %.1f, "
                "\"tflops\": %.2f, \"device\": \"%s\", \"copy_gbps\": %.1f}%s\n",
                r.kind.c_str(), r.model.c_str(), r.dtype.c_str(), r.batch, r.q_len, r.kv_len,
                r.splits, r.ms, r.gbps, r.tflops, d.name.c_str(), copy.gbps,
                i + 1 < rows.size() ? "," : "");
        }
        std::printf("]\n");
        return 0;
    }
    std::printf("%s, %d SMs, copy %.0f GB/s (read + written, cudaMemcpy of 1 GiB)\n",
                d.name.c_str(), d.sm_count, copy.gbps);
    std::printf("%-8s %-13s %-5s %6s %6s %7s %6s %10s %9s %8s %7s\n", "kind", "model", "dtype",
                "batch", "q_len", "kv_len", "splits", "ms", "GB/s", "of copy", "TFLOP/s");
    for (const Row& r : rows)
        std::printf("%-8s %-13s %-5s %6d %6d %7d %6d %10.4f %9.1f %7.0f%% %7.2f\n", r.kind.c_str(),
                    r.model.c_str(), r.dtype.c_str(), r.batch, r.q_len, r.kv_len, r.splits, r.ms,
                    r.gbps, copy.gbps > 0 ? 100.0 * r.gbps / copy.gbps : 0.0, r.tflops);
    std::printf(
        "GB/s: bytes the kernel must move (K/V read, activations in and out) per second; "
        "attention's TFLOP/s count QK and PV (causal) at two flops a multiply-add\n");
    return 0;
}
