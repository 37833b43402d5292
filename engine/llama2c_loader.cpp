#include "engine/llama2c_loader.h"

#include <cstring>
#include <exception>
#include <new>

#include "engine/mapped_file.h"

namespace kvscope {

namespace {
constexpr size_t kHeaderBytes = 7 * sizeof(int32_t);
// export.py's newer formats (version 1 and 2) start with this magic; run.c reads neither.
constexpr uint32_t kExportMagic = 0x616b3432;  // "ak42"

struct Header {
    int32_t dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len;
};

Header read_header(std::span<const uint8_t> bytes) {
    Header h;
    std::memcpy(&h, bytes.data(), kHeaderBytes);
    return h;
}

std::string range(const char* field, int64_t value, int64_t max) {
    return std::string(field) + " " + std::to_string(value) + " is outside 1.." +
           std::to_string(max);
}
}  // namespace

Status validate_llama2c_header(std::span<const uint8_t> bytes) {
    if (bytes.size() < kHeaderBytes)
        return Error{"only " + std::to_string(bytes.size()) + " bytes, shorter than the " +
                     std::to_string(kHeaderBytes) + "-byte header"};
    const Header h = read_header(bytes);
    if (static_cast<uint32_t>(h.dim) == kExportMagic)
        return Error{"llama2.c export version " + std::to_string(h.hidden_dim) +
                     " (magic \"ak42\") is not supported; export with --version 0, the format "
                     "run.c reads"};
    if (h.dim <= 0 || h.dim > kLlama2cMaxDim) return Error{range("dim", h.dim, kLlama2cMaxDim)};
    if (h.hidden_dim <= 0 || h.hidden_dim > kLlama2cMaxHidden)
        return Error{range("hidden_dim", h.hidden_dim, kLlama2cMaxHidden)};
    if (h.n_layers <= 0 || h.n_layers > kLlama2cMaxLayers)
        return Error{range("n_layers", h.n_layers, kLlama2cMaxLayers)};
    if (h.n_heads <= 0 || h.dim % h.n_heads != 0)
        return Error{"n_heads " + std::to_string(h.n_heads) + " does not divide dim " +
                     std::to_string(h.dim)};
    if (h.n_kv_heads <= 0 || h.n_kv_heads > h.n_heads || h.n_heads % h.n_kv_heads != 0)
        return Error{"n_kv_heads " + std::to_string(h.n_kv_heads) + " does not divide n_heads " +
                     std::to_string(h.n_heads)};
    // Negative: the classifier is not shared. INT32_MIN has no positive counterpart: widen first.
    const int64_t vocab = h.vocab_size < 0 ? -static_cast<int64_t>(h.vocab_size) : h.vocab_size;
    if (vocab == 0 || vocab > kLlama2cMaxVocab)
        return Error{range("vocab_size", h.vocab_size, kLlama2cMaxVocab)};
    if (h.seq_len <= 0 || h.seq_len > kLlama2cMaxSeqLen)
        return Error{range("seq_len", h.seq_len, kLlama2cMaxSeqLen)};
    if ((h.dim / h.n_heads) % 2 != 0)
        return Error{"head size " + std::to_string(h.dim / h.n_heads) +
                     " is odd; RoPE needs it even"};
    return {};
}

Result<LoadedModel> llama2c_from_bytes(std::span<const uint8_t> bytes,
                                       std::shared_ptr<const void> owner, const std::string& name) {
    try {
        if (Status s = validate_llama2c_header(bytes); !s)
            return Error{name + ": not a valid llama2.c checkpoint (" + s.error().message + ")"};
        const Header h = read_header(bytes);
        const bool shared_classifier = h.vocab_size > 0;
        ModelConfig c;
        c.architecture = "llama";
        c.dim = h.dim;
        c.hidden_dim = h.hidden_dim;
        c.n_layers = h.n_layers;
        c.n_heads = h.n_heads;
        c.n_kv_heads = h.n_kv_heads;
        c.head_dim = h.dim / h.n_heads;
        c.vocab_size = shared_classifier ? h.vocab_size : -h.vocab_size;
        c.context_length = h.seq_len;
        c.rms_eps = 1e-5f;
        c.rope_theta = 10000.0f;
        c.rope_style = RopeStyle::kAdjacentPairs;
        c.has_qkv_bias = false;
        c.bos_token = 1;
        c.eos_token = 1;  // run.c stops when it samples BOS again; see the header comment

        // In floats; the header limits keep the total below 2^48, so nothing overflows.
        const int64_t dim = c.dim, hid = c.hidden_dim, L = c.n_layers, kv = c.kv_dim(),
                      V = c.vocab_size;
        const int64_t rope_tables = int64_t{c.context_length} * c.head_dim;  // 2 x [seq][hs/2]
        int64_t floats = V * dim + L * dim + L * dim * dim + 2 * L * kv * dim + L * dim * dim +
                         L * dim + 3 * L * hid * dim + dim + rope_tables;
        if (!shared_classifier) floats += V * dim;
        const uint64_t expect = kHeaderBytes + static_cast<uint64_t>(floats) * sizeof(float);
        if (bytes.size() != expect)
            return Error{name + ": size " + std::to_string(bytes.size()) +
                         " bytes does not match its header, which needs " + std::to_string(expect) +
                         (bytes.size() < expect ? " (truncated?)"
                                                : " (extra bytes: another export version?)")};

        LoadedModel m;
        m.config = c;
        m.format = "llama2.c";
        m.path = name;
        ModelWeights& w = m.weights;
        w.owners.push_back(std::move(owner));
        const uint8_t* raw = bytes.data() + kHeaderBytes;
        const float* p = reinterpret_cast<const float*>(raw);
        if (reinterpret_cast<uintptr_t>(raw) % alignof(float) != 0) {
            // Mappings are page aligned; only an in-memory image can land here.
            std::shared_ptr<float[]> copy(new (std::nothrow) float[static_cast<size_t>(floats)]);
            if (!copy) return Error{name + ": out of memory copying the weights"};
            std::memcpy(copy.get(), raw, static_cast<size_t>(floats) * sizeof(float));
            p = copy.get();
            w.owners.push_back(copy);
        }
        auto take = [&](int64_t n) {
            const float* at = p;
            p += n;
            return at;
        };
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
            l.w_gate = Matrix{take(hid * dim), c.hidden_dim, c.dim};  // w1
        for (auto& l : w.layers)
            l.w_down = Matrix{take(dim * hid), c.dim, c.hidden_dim};  // w2
        for (auto& l : w.layers)
            l.w_up = Matrix{take(hid * dim), c.hidden_dim, c.dim};  // w3
        w.output_norm = Vector{take(dim), c.dim};
        take(rope_tables);  // legacy freq_cis_real and freq_cis_imag
        w.output =
            shared_classifier ? w.token_embedding : Matrix{take(V * dim), c.vocab_size, c.dim};
        return m;
    } catch (const std::bad_alloc&) {
        return Error{name + ": out of memory while loading the model"};
    } catch (const std::exception& e) {
        return Error{name + ": cannot load the model: " + e.what()};
    }
}

Result<LoadedModel> load_llama2c(const std::string& path) {
    auto mapped = MappedFile::open(path);
    if (!mapped) return mapped.error();
    std::shared_ptr<const MappedFile> file = std::move(mapped).value();
    return llama2c_from_bytes(file->bytes(), file, path);
}

}  // namespace kvscope
