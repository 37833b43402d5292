#include "engine/kv_size.h"

#include <algorithm>

#include "base/terminal_text.h"

namespace kvscope {

namespace {
const char* element_size(const KvSizeDtype& d) {
    switch (d.stored) {
        case KvDtype::kF32:
            return "4 bytes";
        case KvDtype::kF16:
            return "2 bytes";
        case KvDtype::kInt8:
            return "1 byte";
        case KvDtype::kInt4:
            return "0.5 byte";
        case KvDtype::kInt2:
            return "0.25 byte";
    }
    return "";
}

// K (or V) of `dim` per head, one block of one layer, with its scales. Only for the dtypes whose
// K and V are laid out alike (all but int4 / int2): half of what the cache holds for K and V.
int64_t half_block_bytes(KvDtype d, int32_t block_size, int32_t heads, int32_t dim) {
    if (dim == 0) return 0;
    return static_cast<int64_t>(kv_layer_block_bytes(d, block_size, heads, dim)) / 2;
}

int64_t block_bytes(const KvLayerGroup& g, KvDtype d, int32_t block_size) {
    if (g.key_dim == g.value_dim)
        return static_cast<int64_t>(kv_layer_block_bytes(d, block_size, g.kv_heads, g.key_dim));
    return half_block_bytes(d, block_size, g.kv_heads, g.key_dim) +
           half_block_bytes(d, block_size, g.kv_heads, g.value_dim);
}

// Fills a group's byte counts: whole blocks for its tokens, and an int4 / int2 open block's f16
// keys when the last block is not full.
void count(KvLayerGroup& g, KvDtype d, int32_t bs) {
    const int64_t per_block = block_bytes(g, d, bs);
    const int64_t blocks = (g.tokens + bs - 1) / bs;
    const int64_t open =
        g.tokens % bs != 0
            ? static_cast<int64_t>(kv_open_block_key_bytes(d, bs, g.kv_heads, g.key_dim))
            : 0;
    g.bytes_per_token = g.layers * per_block / bs;
    g.bytes_per_sequence = g.layers * (blocks * per_block + open);
}

// The shape's layer groups with `kv_heads` KV heads (0: its own); `mla` false counts an MLA
// model as the heads its latent stands for.
std::vector<KvLayerGroup> groups_of(const KvShape& s, int64_t ctx, int32_t kv_heads, bool mla) {
    const ModelConfig& c = s.config;
    KvLayerGroup all{.what = "all layers",
                     .layers = c.n_layers,
                     .kv_heads = kv_heads > 0 ? kv_heads : c.n_kv_heads,
                     .key_dim = c.head_dim,
                     .value_dim = c.head_dim,
                     .tokens = ctx};
    if (s.mla_kv_lora_rank > 0) {
        if (mla)
            return {{.what = "MLA latent",
                     .layers = c.n_layers,
                     .kv_heads = 1,
                     .key_dim = s.mla_kv_lora_rank + s.mla_rope_dim,
                     .value_dim = 0,
                     .tokens = ctx}};
        all.key_dim = s.mla_key_dim;
        return {all};
    }
    if (s.sliding_window <= 0 || s.global_every <= 0) return {all};
    KvLayerGroup global = all, local = all;
    global.what = "global";
    global.layers = c.n_layers / s.global_every;
    local.what = "local (window " + std::to_string(s.sliding_window) + ")";
    local.layers = c.n_layers - global.layers;
    local.tokens = std::min<int64_t>(ctx, s.sliding_window);
    return {global, local};
}

struct Totals {
    int64_t per_token = 0, per_sequence = 0;
};
Totals sum(std::vector<KvLayerGroup>& groups, KvDtype d, int32_t bs) {
    Totals t;
    for (KvLayerGroup& g : groups) {
        count(g, d, bs);
        t.per_token += g.bytes_per_token;
        t.per_sequence += g.bytes_per_sequence;
    }
    return t;
}

std::string formula_of(const KvShape& s, const KvSizeDtype& d, const std::vector<KvLayerGroup>& g,
                       int64_t per_token, int32_t bs) {
    const ModelConfig& c = s.config;
    const std::string bytes = std::string(element_size(d)) + " (" + d.name + ")";
    std::string f;
    int64_t codes = 0;
    if (s.mla_kv_lora_rank > 0) {
        f = std::to_string(c.n_layers) + " layers x (" + std::to_string(s.mla_kv_lora_rank) +
            " latent + " + std::to_string(s.mla_rope_dim) + " RoPE key) x " + bytes;
        codes = c.n_layers *
                static_cast<int64_t>(kv_element_bytes(
                    d.stored, static_cast<size_t>(bs) * static_cast<size_t>(g[0].key_dim))) /
                bs;
    } else {
        f = "2 (K and V) x " + std::to_string(c.n_layers) + " layers x " +
            std::to_string(g[0].kv_heads) + " KV heads x " + std::to_string(c.head_dim) +
            " head_dim x " + bytes;
        codes = 2 * c.n_layers *
                static_cast<int64_t>(kv_element_bytes(
                    d.stored, static_cast<size_t>(bs) * static_cast<size_t>(g[0].kv_heads) *
                                  static_cast<size_t>(c.head_dim))) /
                bs;
    }
    if (per_token > codes)
        f += " + " + std::to_string(per_token - codes) + " bytes of f16 scales" +
             (kv_code_bits(d.stored) > 0 ? " and minima" : "");
    return f + " = " + std::to_string(per_token) + " bytes per token";
}
}  // namespace

Result<KvSizeDtype> parse_kv_size_dtype(const std::string& name) {
    if (name == "bf16") return KvSizeDtype{"bf16", KvDtype::kF16};
    auto d = parse_kv_dtype(name);
    if (!d)
        return Error{"unknown KV dtype " + quote_for_message(name) +
                     " (known: f32, f16, bf16, int8, int4, int2)"};
    return KvSizeDtype{name, d.value()};
}

Result<KvSize> kv_size(const KvShape& shape, int64_t ctx, int64_t batch, const KvSizeDtype& dtype,
                       int32_t block_size) {
    if (ctx < 1 || ctx > kMaxKvSizeCtx)
        return Error{"--ctx " + std::to_string(ctx) + " is out of range (1 to " +
                     std::to_string(kMaxKvSizeCtx) + " tokens)"};
    if (batch < 1 || batch > kMaxKvSizeBatch)
        return Error{"--batch " + std::to_string(batch) + " is out of range (1 to " +
                     std::to_string(kMaxKvSizeBatch) + " sequences)"};
    if (shape.mla_kv_lora_rank > 0 && kv_keys_grouped_per_block(dtype.stored))
        return Error{shape.name + ": an MLA latent has no " + dtype.name +
                     " layout in kvscope (use f32, f16, bf16 or int8)"};
    const ModelConfig& c = shape.config;
    KvSize out;
    out.shape = shape.name;
    out.dtype = dtype;
    out.ctx = ctx;
    out.batch = batch;
    out.block_size = block_size;
    out.note = shape.note;
    out.groups = groups_of(shape, ctx, 0, true);
    const Totals own = sum(out.groups, dtype.stored, block_size);
    out.bytes_per_token = own.per_token;
    out.bytes_per_sequence = own.per_sequence;
    out.bytes_per_batch = own.per_sequence * batch;
    out.formula = formula_of(shape, dtype, out.groups, own.per_token, block_size);

    // The same layers, heads and head size with other KV groupings. (int4 / int2 keys of an MLA
    // model's heads differ in size from its values: not counted, the MLA check above applies.)
    auto variant = [&](const std::string& what, int32_t kv_heads, bool mla) {
        std::vector<KvLayerGroup> g = groups_of(shape, ctx, kv_heads, mla);
        const Totals t = sum(g, dtype.stored, block_size);
        out.variants.push_back({what, t.per_token, t.per_sequence});
    };
    const std::string n_heads = std::to_string(c.n_heads);
    if (shape.mla_kv_lora_rank > 0) {
        variant("MLA latent (the model's own)", 0, true);
        variant("MHA (" + n_heads + " KV heads, keys of " + std::to_string(shape.mla_key_dim) + ")",
                c.n_heads, false);
        variant("MQA (1 KV head)", 1, false);
        return out;
    }
    const auto own_tag = [&](int32_t heads) {
        return heads == c.n_kv_heads ? ", the model's own)" : ")";
    };
    variant("MHA (" + n_heads + " KV heads" + own_tag(c.n_heads), c.n_heads, true);
    if (c.n_kv_heads != c.n_heads && c.n_kv_heads != 1)
        variant("GQA (" + std::to_string(c.n_kv_heads) + " KV heads, " +
                    std::to_string(c.group_size()) + " query heads each, the model's own)",
                c.n_kv_heads, true);
    variant(std::string("MQA (1 KV head") + own_tag(1), 1, true);
    return out;
}

}  // namespace kvscope
