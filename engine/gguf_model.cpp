#include "engine/gguf_model.h"

#include <sstream>

namespace kvscope {

namespace {
constexpr uint64_t kMaxDim = 1 << 20, kMaxLayers = 1024, kMaxVocab = 10'000'000,
                   kMaxContext = 1 << 24;

std::string shape_str(const std::vector<uint64_t>& d) {
    std::ostringstream s;
    s << "[";
    for (size_t i = 0; i < d.size(); ++i)
        s << (i ? ", " : "") << d[i];
    s << "]";
    return s.str();
}

struct WeightLoader {
    std::shared_ptr<const GgufFile> file;
    ModelWeights& w;

    // A [rows][cols] matrix: GGUF dims are {cols, rows}.
    Result<const float*> tensor(const std::string& name, std::vector<uint64_t> want_dims) {
        const GgufTensorInfo* t = file->find_tensor(name);
        if (!t) return Error{file->path() + ": tensor '" + name + "' is missing"};
        if (t->dims != want_dims)
            return Error{file->path() + ": tensor '" + name + "' has shape " + shape_str(t->dims) +
                         " but the config needs " + shape_str(want_dims)};
        auto traits = ggml_type_traits(static_cast<uint32_t>(t->type));
        if (!traits || !traits->can_dequantize)
            return Error{
                file->path() + ": tensor '" + name + "' has type " +
                std::string(traits ? traits->name : "unknown") +
                ", which kvscope cannot load yet (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1)"};
        const uint8_t* src = file->data(*t);
        uint64_t n = t->num_elements();
        if (t->type == GgmlType::F32 && reinterpret_cast<uintptr_t>(src) % alignof(float) == 0)
            return reinterpret_cast<const float*>(src);
        std::shared_ptr<float[]> buf(new (std::nothrow) float[n]);
        if (!buf) return Error{file->path() + ": out of memory converting tensor '" + name + "'"};
        dequantize_to_f32(t->type, src, buf.get(), n);
        w.owners.push_back(buf);
        return static_cast<const float*>(buf.get());
    }
    Status matrix(Matrix& m, const std::string& name, int rows, int cols) {
        auto p = tensor(name, {static_cast<uint64_t>(cols), static_cast<uint64_t>(rows)});
        if (!p) return p.error();
        m = Matrix{p.value(), rows, cols};
        return {};
    }
    Status vector(Vector& v, const std::string& name, int n) {
        auto p = tensor(name, {static_cast<uint64_t>(n)});
        if (!p) return p.error();
        v = Vector{p.value(), n};
        return {};
    }
};
}  // namespace

Result<LoadedModel> model_from_gguf(std::shared_ptr<const GgufFile> file) {
    const GgufFile& f = *file;
    const std::string& path = f.path();
    auto arch = f.get_string("general.architecture");
    if (!arch) return arch.error();
    const std::string a = arch.value();
    if (a != "llama" && a != "mistral" && a != "qwen2")
        return Error{path + ": architecture '" + a + "' is not supported (llama, mistral, qwen2)"};
    auto u = [&](const std::string& key, uint64_t fallback, bool required,
                 uint64_t max) -> Result<uint64_t> {
        if (!f.find(key)) {
            if (required) return Error{path + ": metadata key '" + key + "' is missing"};
            return fallback;
        }
        auto v = f.get_uint(key);
        if (!v) return v.error();
        if (v.value() == 0 || v.value() > max)
            return Error{path + ": metadata '" + key + "' = " + std::to_string(v.value()) +
                         " is out of range (1.." + std::to_string(max) + ")"};
        return v;
    };
    ModelConfig c;
    c.architecture = a;
    if (auto n = f.get_string("general.name")) c.name = n.value();
    auto dim = u(a + ".embedding_length", 0, true, kMaxDim);
    if (!dim) return dim.error();
    auto hidden = u(a + ".feed_forward_length", 0, true, 16 * kMaxDim);
    if (!hidden) return hidden.error();
    auto layers = u(a + ".block_count", 0, true, kMaxLayers);
    if (!layers) return layers.error();
    auto heads = u(a + ".attention.head_count", 0, true, 4096);
    if (!heads) return heads.error();
    auto kv_heads = u(a + ".attention.head_count_kv", heads.value(), false, 4096);
    if (!kv_heads) return kv_heads.error();
    auto ctx = u(a + ".context_length", 0, true, kMaxContext);
    if (!ctx) return ctx.error();
    c.dim = static_cast<int>(dim.value());
    c.hidden_dim = static_cast<int>(hidden.value());
    c.n_layers = static_cast<int>(layers.value());
    c.n_heads = static_cast<int>(heads.value());
    c.n_kv_heads = static_cast<int>(kv_heads.value());
    c.context_length = static_cast<int>(ctx.value());
    auto head_dim = u(a + ".attention.key_length", c.dim / c.n_heads, false, 4096);
    if (!head_dim) return head_dim.error();
    c.head_dim = static_cast<int>(head_dim.value());
    if (c.n_heads % c.n_kv_heads != 0)
        return Error{path + ": " + std::to_string(c.n_kv_heads) + " KV heads do not divide " +
                     std::to_string(c.n_heads) + " query heads"};
    if (c.head_dim % 2 != 0 || c.head_dim == 0)
        return Error{path + ": head size " + std::to_string(c.head_dim) + " must be even"};
    if (f.find(a + ".attention.layer_norm_rms_epsilon")) {
        auto eps = f.get_float(a + ".attention.layer_norm_rms_epsilon");
        if (!eps) return eps.error();
        if (!(eps.value() > 0 && eps.value() < 1))
            return Error{path + ": rms epsilon is out of range"};
        c.rms_eps = static_cast<float>(eps.value());
    }
    if (f.find(a + ".rope.freq_base")) {
        auto theta = f.get_float(a + ".rope.freq_base");
        if (!theta) return theta.error();
        if (!(theta.value() > 1 && theta.value() < 1e12))
            return Error{path + ": rope.freq_base is out of range"};
        c.rope_theta = static_cast<float>(theta.value());
    }
    c.rope_style = a == "qwen2" ? RopeStyle::kHalfSplit : RopeStyle::kAdjacentPairs;
    c.has_qkv_bias = a == "qwen2";
    const GgufTensorInfo* emb = f.find_tensor("token_embd.weight");
    if (!emb) return Error{path + ": tensor 'token_embd.weight' is missing"};
    if (emb->dims.size() != 2 || emb->dims[1] == 0 || emb->dims[1] > kMaxVocab)
        return Error{path + ": tensor 'token_embd.weight' has shape " + shape_str(emb->dims) +
                     ", expected [dim, vocab]"};
    c.vocab_size = static_cast<int>(emb->dims[1]);
    if (auto bos = f.get_uint("tokenizer.ggml.bos_token_id"))
        c.bos_token = static_cast<int>(bos.value());
    if (auto eos = f.get_uint("tokenizer.ggml.eos_token_id"))
        c.eos_token = static_cast<int>(eos.value());
    if (c.bos_token >= c.vocab_size || c.eos_token >= c.vocab_size)
        return Error{path + ": BOS/EOS token ids are outside the vocabulary"};

    LoadedModel m;
    m.config = c;
    m.format = "gguf v" + std::to_string(f.version());
    m.path = path;
    ModelWeights& w = m.weights;
    w.owners.push_back(file);
    WeightLoader ld{file, w};
    if (Status s = ld.matrix(w.token_embedding, "token_embd.weight", c.vocab_size, c.dim); !s)
        return s.error();
    w.layers.resize(static_cast<size_t>(c.n_layers));
    for (int i = 0; i < c.n_layers; ++i) {
        LayerWeights& l = w.layers[static_cast<size_t>(i)];
        std::string p = "blk." + std::to_string(i) + ".";
        for (Status s : {ld.vector(l.attn_norm, p + "attn_norm.weight", c.dim),
                         ld.matrix(l.wq, p + "attn_q.weight", c.q_dim(), c.dim),
                         ld.matrix(l.wk, p + "attn_k.weight", c.kv_dim(), c.dim),
                         ld.matrix(l.wv, p + "attn_v.weight", c.kv_dim(), c.dim),
                         ld.matrix(l.wo, p + "attn_output.weight", c.dim, c.q_dim()),
                         ld.vector(l.ffn_norm, p + "ffn_norm.weight", c.dim),
                         ld.matrix(l.w_gate, p + "ffn_gate.weight", c.hidden_dim, c.dim),
                         ld.matrix(l.w_up, p + "ffn_up.weight", c.hidden_dim, c.dim),
                         ld.matrix(l.w_down, p + "ffn_down.weight", c.dim, c.hidden_dim)})
            if (!s) return s.error();
        if (c.has_qkv_bias)
            for (Status s : {ld.vector(l.bq, p + "attn_q.bias", c.q_dim()),
                             ld.vector(l.bk, p + "attn_k.bias", c.kv_dim()),
                             ld.vector(l.bv, p + "attn_v.bias", c.kv_dim())})
                if (!s) return s.error();
    }
    if (Status s = ld.vector(w.output_norm, "output_norm.weight", c.dim); !s) return s.error();
    if (f.find_tensor("output.weight")) {
        if (Status s = ld.matrix(w.output, "output.weight", c.vocab_size, c.dim); !s)
            return s.error();
    } else {
        w.output = w.token_embedding;  // tied embeddings
    }
    if (f.find("tokenizer.ggml.model")) {
        auto tok = Tokenizer::from_gguf(f);
        if (!tok) return tok.error();
        if (tok.value()->vocab_size() != c.vocab_size)
            return Error{path + ": the tokenizer has " + std::to_string(tok.value()->vocab_size()) +
                         " tokens but the embedding has " + std::to_string(c.vocab_size)};
        m.tokenizer = std::move(tok).value();
    }
    return m;
}

}  // namespace kvscope
