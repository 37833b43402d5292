#include "engine/gguf_model.h"

#include <cstdio>
#include <cstring>
#include <exception>
#include <new>
#include <sstream>

#include "base/terminal_text.h"

namespace kvscope {

namespace {
// Far above any released Llama-family model, low enough that products stay in int range.
constexpr uint64_t kMaxDim = 65536, kMaxHidden = 16 * kMaxDim, kMaxLayers = 1024, kMaxHeads = 4096,
                   kMaxHeadDim = 4096, kMaxVocab = 10'000'000, kMaxContext = 1 << 24;

std::string number_str(double x) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", x);
    return buf;
}

std::string shape_str(const std::vector<uint64_t>& d) {
    std::ostringstream s;
    s << "[";
    for (size_t i = 0; i < d.size(); ++i)
        s << (i ? ", " : "") << d[i];
    s << "]";
    return s.str();
}

// Views of tensors, checked against the shapes the config implies.
struct WeightLoader {
    std::shared_ptr<const GgufFile> file;
    ModelWeights& w;

    // The tensor's bytes, checked against the shape the config needs and a type kvscope can
    // multiply.
    Result<const GgufTensorInfo*> find(const std::string& name,
                                       const std::vector<uint64_t>& want_dims) {
        const std::string& path = file->path();
        const GgufTensorInfo* t = file->find_tensor(name);
        if (!t) return Error{path + ": tensor '" + name + "' is missing"};
        if (t->dims != want_dims)
            return Error{path + ": tensor '" + name + "' has shape " + shape_str(t->dims) +
                         " but the config needs " + shape_str(want_dims)};
        auto traits = ggml_type_traits(static_cast<uint32_t>(t->type));
        if (!traits || !traits->can_dequantize)
            return Error{path + ": tensor '" + name + "' has type " +
                         std::string(traits ? traits->name : "unknown") +
                         ", which kvscope cannot load yet (supported: F32, F16, BF16, Q8_0, "
                         "Q4_0, Q4_1, Q4_K, Q6_K)"};
        return t;
    }
    // fp32 values: aligned F32 in place; other types (or F32 that a small general.alignment
    // left misaligned for float loads) as an owned fp32 copy.
    Result<const float*> fp32(const GgufTensorInfo& t) {
        const uint8_t* src = file->data(t);
        const uint64_t n = t.num_elements();
        if (t.type == GgmlType::F32 && reinterpret_cast<uintptr_t>(src) % alignof(float) == 0)
            return reinterpret_cast<const float*>(src);
        std::shared_ptr<float[]> buf(new (std::nothrow) float[n]);
        if (!buf)
            return Error{file->path() + ": out of memory converting tensor '" + t.name + "' (" +
                         std::to_string(n) + " values) to fp32"};
        dequantize_to_f32(t.type, src, buf.get(), n);
        w.owners.push_back(buf);
        return static_cast<const float*>(buf.get());
    }
    // A [rows][cols] matrix: GGUF lists dimensions fastest first, so its dims are {cols, rows}.
    // It stays in the file's type, in the mapping (the matmul converts in registers); only
    // F32 that is misaligned for float loads is copied.
    Status matrix(Matrix& m, const std::string& name, int rows, int cols) {
        auto t = find(name, {static_cast<uint64_t>(cols), static_cast<uint64_t>(rows)});
        if (!t) return t.error();
        if (t.value()->type == GgmlType::F32) {
            auto p = fp32(*t.value());
            if (!p) return p.error();
            m = Matrix{p.value(), rows, cols};
        } else {
            m = Matrix{file->data(*t.value()), t.value()->type, rows, cols};
        }
        return {};
    }
    Status vector(Vector& v, const std::string& name, int n) {
        auto t = find(name, {static_cast<uint64_t>(n)});
        if (!t) return t.error();
        auto p = fp32(*t.value());
        if (!p) return p.error();
        v = Vector{p.value(), n};
        return {};
    }
};

Result<LoadedModel> build_model(const std::shared_ptr<const GgufFile>& file) {
    const GgufFile& f = *file;
    const std::string& path = f.path();
    auto arch = f.get_string("general.architecture");
    if (!arch) return arch.error();
    const std::string a = arch.value();
    if (a != "llama" && a != "mistral" && a != "qwen2")
        return Error{path + ": architecture " + quote_for_message(a) +
                     " is not supported (kvscope loads llama, mistral, qwen2)"};

    // An integer key in [1, max]; `fallback` when absent and not required.
    auto positive = [&](const std::string& key, bool required, uint64_t fallback,
                        uint64_t max) -> Result<uint64_t> {
        if (!f.find(key)) {
            if (required) return Error{path + ": metadata key '" + key + "' is missing"};
            return fallback;
        }
        auto v = f.get_uint(key);
        if (!v) return v.error();
        if (v.value() == 0 || v.value() > max)
            return Error{path + ": metadata key '" + key + "' = " + std::to_string(v.value()) +
                         " is out of range (1 to " + std::to_string(max) + ")"};
        return v;
    };
    auto number = [&](const std::string& key, double fallback, double lo,
                      double hi) -> Result<double> {
        if (!f.find(key)) return fallback;
        auto v = f.get_float(key);
        if (!v) return v.error();
        if (!(v.value() > lo && v.value() < hi))  // also refuses NaN
            return Error{path + ": metadata key '" + key + "' = " + number_str(v.value()) +
                         " is out of range (" + number_str(lo) + " to " + number_str(hi) +
                         ", exclusive)"};
        return v;
    };

    ModelConfig c;
    c.architecture = a;
    if (auto n = f.get_string("general.name")) c.name = n.value();
    auto dim = positive(a + ".embedding_length", true, 0, kMaxDim);
    if (!dim) return dim.error();
    auto hidden = positive(a + ".feed_forward_length", true, 0, kMaxHidden);
    if (!hidden) return hidden.error();
    auto layers = positive(a + ".block_count", true, 0, kMaxLayers);
    if (!layers) return layers.error();
    auto heads = positive(a + ".attention.head_count", true, 0, kMaxHeads);
    if (!heads) return heads.error();
    auto kv_heads = positive(a + ".attention.head_count_kv", false, heads.value(), kMaxHeads);
    if (!kv_heads) return kv_heads.error();
    auto ctx = positive(a + ".context_length", true, 0, kMaxContext);
    if (!ctx) return ctx.error();
    c.dim = static_cast<int>(dim.value());
    c.hidden_dim = static_cast<int>(hidden.value());
    c.n_layers = static_cast<int>(layers.value());
    c.n_heads = static_cast<int>(heads.value());
    c.n_kv_heads = static_cast<int>(kv_heads.value());
    c.context_length = static_cast<int>(ctx.value());
    if (c.n_kv_heads > c.n_heads || c.n_heads % c.n_kv_heads != 0)
        return Error{path + ": " + std::to_string(c.n_kv_heads) + " KV heads do not divide " +
                     std::to_string(c.n_heads) + " query heads"};

    const std::string key_length = a + ".attention.key_length";
    if (!f.find(key_length) && c.dim % c.n_heads != 0)
        return Error{path + ": embedding_length " + std::to_string(c.dim) +
                     " is not a multiple of head_count " + std::to_string(c.n_heads) +
                     ", and the file has no " + key_length};
    auto head_dim =
        positive(key_length, false, static_cast<uint64_t>(c.dim / c.n_heads), kMaxHeadDim);
    if (!head_dim) return head_dim.error();
    c.head_dim = static_cast<int>(head_dim.value());
    if (c.head_dim % 2 != 0)
        return Error{path + ": head size " + std::to_string(c.head_dim) +
                     " is odd; RoPE needs it even"};
    // kvscope keeps one head size for queries, keys and values, and rotates the whole head.
    for (const std::string& key : {a + ".attention.value_length", a + ".rope.dimension_count"}) {
        if (!f.find(key)) continue;
        auto v = f.get_uint(key);
        if (!v) return v.error();
        if (v.value() != static_cast<uint64_t>(c.head_dim))
            return Error{path + ": metadata key '" + key + "' = " + std::to_string(v.value()) +
                         " differs from the head size " + std::to_string(c.head_dim) +
                         ", which kvscope does not support"};
    }

    auto eps = number(a + ".attention.layer_norm_rms_epsilon", 1e-5, 0, 1);
    if (!eps) return eps.error();
    c.rms_eps = static_cast<float>(eps.value());
    auto theta = number(a + ".rope.freq_base", 10000, 1, 1e12);
    if (!theta) return theta.error();
    c.rope_theta = static_cast<float>(theta.value());
    c.rope_style = a == "qwen2" ? RopeStyle::kHalfSplit : RopeStyle::kAdjacentPairs;
    c.has_qkv_bias = a == "qwen2";

    const GgufTensorInfo* emb = f.find_tensor("token_embd.weight");
    if (!emb) return Error{path + ": tensor 'token_embd.weight' is missing"};
    if (emb->dims.size() != 2 || emb->dims[1] > kMaxVocab)
        return Error{path + ": tensor 'token_embd.weight' has shape " + shape_str(emb->dims) +
                     ", expected [" + std::to_string(c.dim) + ", vocabulary of at most " +
                     std::to_string(kMaxVocab) + "]"};
    c.vocab_size = static_cast<int>(emb->dims[1]);
    if (f.find(a + ".vocab_size")) {
        auto v = f.get_uint(a + ".vocab_size");
        if (!v) return v.error();
        if (v.value() != static_cast<uint64_t>(c.vocab_size))
            return Error{path + ": metadata key '" + a +
                         ".vocab_size' = " + std::to_string(v.value()) +
                         " but token_embd.weight has " + std::to_string(c.vocab_size) + " rows"};
    }

    LoadedModel m;
    m.format = "gguf v" + std::to_string(f.version());
    m.path = path;
    if (f.find("tokenizer.ggml.model")) {
        auto tok = Tokenizer::from_gguf(f);
        if (!tok) {
            const std::string& msg = tok.error().message;
            return Error{msg.rfind(path + ":", 0) == 0 ? msg : path + ": " + msg};
        }
        if (tok.value()->vocab_size() != c.vocab_size)
            return Error{path + ": the tokenizer has " + std::to_string(tok.value()->vocab_size()) +
                         " tokens but token_embd.weight has " + std::to_string(c.vocab_size) +
                         " rows"};
        m.tokenizer = std::move(tok).value();
    }
    // Special tokens: the file's keys, else the tokenizer's defaults, else BOS 1 (what llama
    // tokenizers use, and what an empty prompt starts from) and no EOS.
    c.bos_token = m.tokenizer && m.tokenizer->bos() >= 0 ? m.tokenizer->bos() : 1;
    c.eos_token = m.tokenizer ? m.tokenizer->eos() : -1;
    if (c.bos_token >= c.vocab_size) c.bos_token = 0;  // a default that does not fit
    for (auto [key, id] :
         {std::pair<const char*, int*>{"tokenizer.ggml.bos_token_id", &c.bos_token},
          {"tokenizer.ggml.eos_token_id", &c.eos_token}}) {
        if (!f.find(key)) continue;
        auto v = f.get_uint(key);
        if (!v) return v.error();
        if (v.value() >= static_cast<uint64_t>(c.vocab_size))
            return Error{path + ": metadata key '" + key + "' = " + std::to_string(v.value()) +
                         " is outside the vocabulary of " + std::to_string(c.vocab_size)};
        *id = static_cast<int>(v.value());
    }
    m.config = c;

    ModelWeights& w = m.weights;
    w.owners.push_back(file);
    WeightLoader ld{file, w};
    if (Status s = ld.matrix(w.token_embedding, "token_embd.weight", c.vocab_size, c.dim); !s)
        return s.error();
    w.layers.resize(static_cast<size_t>(c.n_layers));
    for (int i = 0; i < c.n_layers; ++i) {
        LayerWeights& l = w.layers[static_cast<size_t>(i)];
        const std::string p = "blk." + std::to_string(i) + ".";
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
    return m;
}
}  // namespace

Result<LoadedModel> model_from_gguf(std::shared_ptr<const GgufFile> file) {
    if (!file) return Error{"model_from_gguf: no file"};
    try {
        return build_model(file);
    } catch (const std::bad_alloc&) {
        return Error{file->path() + ": out of memory while loading the model"};
    } catch (const std::exception& e) {
        return Error{file->path() + ": cannot load the model: " + e.what()};
    }
}

}  // namespace kvscope
