#include "engine/synthetic_model.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <memory>
#include <new>
#include <thread>
#include <utility>
#include <vector>

#include "base/machine_memory.h"
#include "base/terminal_text.h"
#include "engine/gguf_file.h"
#include "engine/random_weights.h"

namespace kvscope {

namespace {
ModelConfig shape(const char* arch, int layers, int dim, int heads, int kv_heads, int head_dim,
                  int hidden, int vocab, int context, float rope_theta, float eps) {
    ModelConfig c;
    c.architecture = arch;
    c.n_layers = layers;
    c.dim = dim;
    c.n_heads = heads;
    c.n_kv_heads = kv_heads;
    c.head_dim = head_dim;
    c.hidden_dim = hidden;
    c.vocab_size = vocab;
    c.context_length = context;
    c.rope_theta = rope_theta;
    c.rms_eps = eps;
    c.eos_token = -1;  // noise has no end
    return c;
}

}  // namespace

int64_t SyntheticShape::parameters() const {
    const ModelConfig& c = config;
    const int64_t d = c.dim, q = c.q_dim(), kv = c.kv_dim(), h = c.hidden_dim;
    int64_t layer = 2 * d + d * q + 2 * d * kv + q * d + 3 * d * h;
    if (c.has_qkv_bias) layer += q + 2 * kv;
    return static_cast<int64_t>(c.vocab_size) * d * (tied_embeddings ? 1 : 2) + d +
           c.n_layers * layer;
}

const std::vector<SyntheticShape>& synthetic_shapes() {
    static const std::vector<SyntheticShape> shapes = [] {
        std::vector<SyntheticShape> v;
        // From each model's published config (config.json).
        v.push_back({"qwen2.5-0.5b",
                     shape("qwen2", 24, 896, 14, 2, 64, 4864, 151936, 32768, 1e6f, 1e-6f), true});
        v.back().config.rope_style = RopeStyle::kHalfSplit;
        v.back().config.has_qkv_bias = true;
        v.push_back({"llama-3.2-1b",
                     shape("llama", 16, 2048, 32, 8, 64, 8192, 128256, 131072, 5e5f, 1e-5f), true});
        v.push_back({"llama-3-8b",
                     shape("llama", 32, 4096, 32, 8, 128, 14336, 128256, 8192, 5e5f, 1e-5f),
                     false});
        v.push_back({"mistral-7b",
                     shape("llama", 32, 4096, 32, 8, 128, 14336, 32000, 32768, 1e6f, 1e-5f),
                     false});
        // Full multi-head attention (32 KV heads): four times Llama 3 8B's KV cache per token.
        v.push_back({"llama-2-7b",
                     shape("llama", 32, 4096, 32, 32, 128, 11008, 32000, 4096, 1e4f, 1e-5f),
                     false});
        v.push_back({"llama-3-70b",
                     shape("llama", 80, 8192, 64, 8, 128, 28672, 128256, 8192, 5e5f, 1e-5f),
                     false});
        v.push_back({"qwen2.5-7b",
                     shape("qwen2", 28, 3584, 28, 4, 128, 18944, 152064, 32768, 1e6f, 1e-6f),
                     false});
        v.back().config.rope_style = RopeStyle::kHalfSplit;
        v.back().config.has_qkv_bias = true;
        for (SyntheticShape& s : v)
            s.config.name = std::string(kSyntheticPrefix) + s.name;
        return v;
    }();
    return shapes;
}

bool is_synthetic_model(const std::string& path) {
    return path.rfind(kSyntheticPrefix, 0) == 0;
}

namespace {
// Fills each matrix (shape and type set, no data yet) with random weights of its type, uniform
// on [-a, a] with a = sqrt(3 / cols) (variance 1 / cols: activations keep their scale), matrix i
// from its own stream of `seed`, on up to 16 threads. False when memory ran out.
bool fill_random_matrices(const std::vector<Matrix*>& mats, uint64_t seed,
                          std::vector<std::shared_ptr<const void>>& owners) {
    std::vector<std::shared_ptr<uint8_t[]>> bufs(mats.size());
    std::atomic<size_t> next{0};
    std::atomic<bool> failed{false};
    auto work = [&] {
        for (size_t i; !failed && (i = next++) < mats.size();) {
            const Matrix& x = *mats[i];
            WeightRng rng{0x9E3779B97F4A7C15ULL ^ (seed * 0xBF58476D1CE4E5B9ULL) ^
                          ((i + 2) * 0x94D049BB133111EBULL)};
            for (int warm = 0; warm < 4; ++warm)  // nearby seeds: let the streams part first
                rng.next();
            bufs[i] = random_weights(x.type, x.rows, x.cols,
                                     std::sqrt(3.0f / static_cast<float>(x.cols)), rng);
            if (!bufs[i]) failed = true;
        }
    };
    const unsigned n = std::clamp(std::thread::hardware_concurrency(), 1u, 16u);
    std::vector<std::thread> threads;
    for (unsigned t = 1; t < n; ++t)
        threads.emplace_back(work);
    work();
    for (std::thread& t : threads)
        t.join();
    if (failed) return false;
    for (size_t i = 0; i < mats.size(); ++i) {
        mats[i]->data = bufs[i].get();
        owners.push_back(bufs[i]);
    }
    return true;
}

// What the weight types are called after the shape's name: "synthetic:llama-3-8b:q4_0".
constexpr std::pair<const char*, GgmlType> kWeightTypes[] = {
    {"f32", GgmlType::F32},   {"f16", GgmlType::F16},   {"bf16", GgmlType::BF16},
    {"q8_0", GgmlType::Q8_0}, {"q4_0", GgmlType::Q4_0}, {"q4_1", GgmlType::Q4_1},
    {"q4_k", GgmlType::Q4_K}, {"q6_k", GgmlType::Q6_K},
};

}  // namespace

int64_t SyntheticShape::weight_bytes(GgmlType type) const {
    const ModelConfig& c = config;
    const int64_t d = c.dim, q = c.q_dim(), kv = c.kv_dim(), h = c.hidden_dim;
    auto mat = [&](int64_t rows, int64_t cols) {
        auto b = ggml_row_bytes(type, static_cast<uint64_t>(cols));
        return b ? rows * static_cast<int64_t>(b.value()) : rows * cols * 4;
    };
    int64_t layer = 2 * d * 4 + mat(q, d) + 2 * mat(kv, d) + mat(d, q) + 2 * mat(h, d) + mat(d, h);
    if (c.has_qkv_bias) layer += (q + 2 * kv) * 4;
    return mat(c.vocab_size, d) * (tied_embeddings ? 1 : 2) + d * 4 + c.n_layers * layer;
}

Result<LoadedModel> make_synthetic_model(const std::string& spec, uint64_t seed,
                                         uint64_t memory_limit) try {
    std::string name = spec.substr(std::string(kSyntheticPrefix).size());
    GgmlType type = GgmlType::F32;
    if (size_t colon = name.find(':'); colon != std::string::npos) {
        const std::string type_name = name.substr(colon + 1);
        name.resize(colon);
        bool known_type = false;
        std::string types;
        for (auto [n, t] : kWeightTypes) {
            if (type_name == n) type = t, known_type = true;
            types += (types.empty() ? "" : ", ") + std::string(n);
        }
        if (!known_type)
            return Error{quote_for_message(spec) + ": no weight type " +
                         quote_for_message(type_name) + " (known: " + types + ")"};
    }
    const SyntheticShape* found = nullptr;
    std::string known;
    for (const SyntheticShape& s : synthetic_shapes()) {
        if (s.name == name) found = &s;
        known += (known.empty() ? "" : ", ") + s.name;
    }
    if (!found)
        return Error{quote_for_message(spec) + ": no such synthetic model (known: " + known +
                     "; a weight type may follow, as in synthetic:qwen2.5-0.5b:q8_0)"};
    const auto traits = ggml_type_traits(static_cast<uint32_t>(type));
    for (int cols : {found->config.dim, found->config.q_dim(), found->config.hidden_dim})
        if (cols % static_cast<int>(traits->block_elements) != 0)
            return Error{spec + ": rows of " + std::to_string(cols) + " values are not whole " +
                         std::string(traits->name) + " blocks of " +
                         std::to_string(traits->block_elements) + "; pick another weight type"};
    const int64_t bytes = found->weight_bytes(type);
    char size[120];
    std::snprintf(size, sizeof size, ": %.1f B parameters as %s weights",
                  static_cast<double>(found->parameters()) / 1e9,
                  std::string(traits->name).c_str());
    if (Status fits = check_fits_in_memory(
            static_cast<uint64_t>(bytes), spec + size,
            "try a smaller type, as in " + std::string(kSyntheticPrefix) + found->name + ":q4_0",
            memory_limit);
        !fits)
        return fits.error();
    LoadedModel m;
    m.config = found->config;
    m.format = "synthetic (random " + std::string(traits->name) + " weights, seed " +
               std::to_string(seed) + ")";
    m.path = spec;
    const ModelConfig& c = m.config;
    WeightRng rng{0x9E3779B97F4A7C15ULL ^ (seed * 0xBF58476D1CE4E5B9ULL) ^ 1};
    auto alloc = [&](size_t n, float scale, float offset) {
        auto buf = std::shared_ptr<float[]>(new float[n]);
        for (size_t i = 0; i < n; ++i)
            buf[i] = offset + scale * rng.uniform();
        m.weights.owners.push_back(buf);
        return buf.get();
    };
    // Matrices are filled after the shape is laid out, several at a time (an 8B shape is 16 GB
    // of bf16: a minute on one core), each from its own stream of the seed, so the values do
    // not depend on how many threads drew them.
    auto matrix = [&](int rows, int cols) { return Matrix{nullptr, type, rows, cols}; };
    auto vec = [&](int n, float scale, float offset) {
        return Vector{alloc(static_cast<size_t>(n), scale, offset), n};
    };
    ModelWeights& w = m.weights;
    w.token_embedding = matrix(c.vocab_size, c.dim);
    for (int l = 0; l < c.n_layers; ++l) {
        LayerWeights lw;
        lw.attn_norm = vec(c.dim, 0.0f, 1.0f);
        lw.wq = matrix(c.q_dim(), c.dim);
        lw.wk = matrix(c.kv_dim(), c.dim);
        lw.wv = matrix(c.kv_dim(), c.dim);
        lw.wo = matrix(c.dim, c.q_dim());
        if (c.has_qkv_bias) {
            lw.bq = vec(c.q_dim(), 0.02f, 0.0f);
            lw.bk = vec(c.kv_dim(), 0.02f, 0.0f);
            lw.bv = vec(c.kv_dim(), 0.02f, 0.0f);
        }
        lw.ffn_norm = vec(c.dim, 0.0f, 1.0f);
        lw.w_gate = matrix(c.hidden_dim, c.dim);
        lw.w_up = matrix(c.hidden_dim, c.dim);
        lw.w_down = matrix(c.dim, c.hidden_dim);
        w.layers.push_back(lw);
    }
    w.output_norm = vec(c.dim, 0.0f, 1.0f);
    w.output = found->tied_embeddings ? w.token_embedding : matrix(c.vocab_size, c.dim);
    std::vector<Matrix*> mats = {&w.token_embedding};
    for (LayerWeights& lw : w.layers)
        for (Matrix* x : {&lw.wq, &lw.wk, &lw.wv, &lw.wo, &lw.w_gate, &lw.w_up, &lw.w_down})
            mats.push_back(x);
    if (!found->tied_embeddings) mats.push_back(&w.output);
    if (!fill_random_matrices(mats, seed, m.weights.owners)) throw std::bad_alloc();
    if (found->tied_embeddings) w.output = w.token_embedding;
    return m;
} catch (const std::bad_alloc&) {
    return Error{spec + ": out of memory making its random weights"};
}

}  // namespace kvscope
