#include "engine/llama2c_loader.h"

#include <cstring>

#include "engine/mapped_file.h"

namespace kvscope {

namespace {
constexpr int64_t kMaxDim = 65536, kMaxLayers = 1024, kMaxVocab = 10'000'000, kMaxSeq = 10'000'000;
}

Result<LoadedModel> load_llama2c(const std::string& path) {
    auto mapped = MappedFile::open(path);
    if (!mapped) return mapped.error();
    std::shared_ptr<MappedFile> file = std::move(mapped).value();
    auto bytes = file->bytes();
    if (bytes.size() < 28)
        return Error{path + ": too short for a model file (" + std::to_string(bytes.size()) +
                     " bytes)"};
    int32_t h[7];
    std::memcpy(h, bytes.data(), sizeof h);
    ModelConfig c;
    c.architecture = "llama";
    c.dim = h[0];
    c.hidden_dim = h[1];
    c.n_layers = h[2];
    c.n_heads = h[3];
    c.n_kv_heads = h[4];
    bool shared = h[5] > 0;
    c.vocab_size = h[5] > 0 ? h[5] : -static_cast<int64_t>(h[5]) > kMaxVocab ? 0 : -h[5];
    c.context_length = h[6];
    auto bad = [&](const std::string& what) {
        return Error{path + ": not a valid llama2.c checkpoint (" + what + ")"};
    };
    if (c.dim <= 0 || c.dim > kMaxDim) return bad("dim " + std::to_string(h[0]));
    if (c.hidden_dim <= 0 || c.hidden_dim > 16 * kMaxDim)
        return bad("hidden_dim " + std::to_string(h[1]));
    if (c.n_layers <= 0 || c.n_layers > kMaxLayers) return bad("n_layers " + std::to_string(h[2]));
    if (c.n_heads <= 0 || c.dim % c.n_heads != 0)
        return bad("n_heads " + std::to_string(h[3]) + " does not divide dim " +
                   std::to_string(h[0]));
    if (c.n_kv_heads <= 0 || c.n_heads % c.n_kv_heads != 0)
        return bad("n_kv_heads " + std::to_string(h[4]) + " does not divide n_heads");
    if (c.vocab_size <= 0 || c.vocab_size > kMaxVocab)
        return bad("vocab_size " + std::to_string(h[5]));
    if (c.context_length <= 0 || c.context_length > kMaxSeq)
        return bad("seq_len " + std::to_string(h[6]));
    c.head_dim = c.dim / c.n_heads;
    if (c.head_dim % 2 != 0) return bad("odd head size " + std::to_string(c.head_dim));
    c.rope_style = RopeStyle::kAdjacentPairs;
    c.bos_token = 1;
    c.eos_token = 1;  // run.c stops when it samples BOS again

    const int64_t dim = c.dim, hid = c.hidden_dim, L = c.n_layers, kv = c.kv_dim(),
                  V = c.vocab_size, hd = c.head_dim;
    int64_t floats = V * dim + L * dim + L * dim * dim + 2 * L * kv * dim + L * dim * dim +
                     L * dim + 2 * L * hid * dim + L * dim * hid + dim +
                     c.context_length * hd;  // + two half-width RoPE tables
    if (!shared) floats += V * dim;
    int64_t expect = 28 + floats * 4;
    if (static_cast<int64_t>(bytes.size()) != expect)
        return Error{path + ": size " + std::to_string(bytes.size()) +
                     " bytes does not match its header, which needs " + std::to_string(expect) +
                     " (truncated, or not a llama2.c checkpoint)"};

    LoadedModel m;
    m.config = c;
    m.format = "llama2.c";
    m.path = path;
    const float* p = reinterpret_cast<const float*>(bytes.data() + 28);
    auto take = [&](int64_t n) {
        const float* at = p;
        p += n;
        return at;
    };
    ModelWeights& w = m.weights;
    w.owners.push_back(file);
    w.token_embedding = Matrix{take(V * dim), c.vocab_size, c.dim};
    w.layers.resize(static_cast<size_t>(L));
    for (auto& l : w.layers)
        l.attn_norm = Vector{take(dim), c.dim};
    for (auto& l : w.layers)
        l.wq = Matrix{take(dim * dim), c.dim, c.dim};
    for (auto& l : w.layers)
        l.wk = Matrix{take(kv * dim), c.kv_dim(), c.dim};
    for (auto& l : w.layers)
        l.wv = Matrix{take(kv * dim), c.kv_dim(), c.dim};
    for (auto& l : w.layers)
        l.wo = Matrix{take(dim * dim), c.dim, c.dim};
    for (auto& l : w.layers)
        l.ffn_norm = Vector{take(dim), c.dim};
    for (auto& l : w.layers)
        l.w_gate = Matrix{take(hid * dim), c.hidden_dim, c.dim};
    for (auto& l : w.layers)
        l.w_down = Matrix{take(dim * hid), c.dim, c.hidden_dim};
    for (auto& l : w.layers)
        l.w_up = Matrix{take(hid * dim), c.hidden_dim, c.dim};
    w.output_norm = Vector{take(dim), c.dim};
    take(c.context_length * hd);  // legacy freq_cis_real and freq_cis_imag
    w.output = shared ? w.token_embedding : Matrix{take(V * dim), c.vocab_size, c.dim};
    return m;
}

}  // namespace kvscope
