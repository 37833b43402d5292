// `kvscope kv-size --shape NAME | --model FILE [--ctx N] [--batch N] [--kv-dtype D] [--json]`:
// the bytes of a model's KV cache, per token, per sequence and per batch, with the formula, and
// what MHA, GQA and MQA versions of the same shape would take. Nothing is run or allocated.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "app/commands.h"
#include "base/terminal_text.h"
#include "engine/engine.h"
#include "engine/kv_size.h"
#include "engine/model_loader.h"
#include "engine/synthetic_model.h"

namespace kvscope::app {

namespace {
struct KvSizeOptions {
    std::string shape, model, kv_dtype = "f16";
    int64_t ctx = 0, batch = 1;
    bool json = false;
};

// "1.00 GiB": KV caches are quoted in binary units.
std::string binary_size(int64_t bytes) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = static_cast<double>(bytes);
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        ++u;
    }
    char buf[32];
    std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.2f %s", v, units[u]);
    return buf;
}

// --shape, --model synthetic:NAME[:TYPE], or a model file's config (GGUF or llama2.c, read by
// the loader). Returns 0, 1 (the file failed to load) or 2 (no such shape).
int resolve_shape(KvSizeOptions& o, KvShape& out) {
    std::string name = o.shape;
    if (name.empty() && is_synthetic_model(o.model)) {
        name = o.model.substr(std::string(kSyntheticPrefix).size());
        name = name.substr(0, name.find(':'));  // the weight type does not change the cache
    }
    if (!name.empty()) {
        const KvShape* s = find_kv_shape(name);
        if (!s)
            return usage_error("no shape " + quote_for_message(name) +
                               " (known: " + kv_shape_names() + ")");
        out = *s;
        return 0;
    }
    if (int rc = resolve_model(o.model); rc != 0) return rc;
    auto m = load_model(o.model);
    if (!m) return fail(m.error().message);
    out.name = o.model;
    out.config = m->config;
    out.runnable = true;
    return 0;
}

nlohmann::json to_json(const KvSize& k, const KvShape& s) {
    nlohmann::json groups = nlohmann::json::array(), variants = nlohmann::json::array();
    for (const KvLayerGroup& g : k.groups)
        groups.push_back({{"layers", g.layers},
                          {"what", g.what},
                          {"kv_heads", g.kv_heads},
                          {"key_dim", g.key_dim},
                          {"value_dim", g.value_dim},
                          {"tokens_per_sequence", g.tokens},
                          {"bytes_per_token", g.bytes_per_token},
                          {"bytes_per_sequence", g.bytes_per_sequence}});
    for (const KvSizeVariant& v : k.variants)
        variants.push_back({{"what", v.what},
                            {"bytes_per_token", v.bytes_per_token},
                            {"bytes_per_sequence", v.bytes_per_sequence},
                            {"bytes_per_batch", v.bytes_per_sequence * k.batch}});
    return {{"shape", k.shape},
            {"n_layers", s.config.n_layers},
            {"n_heads", s.config.n_heads},
            {"n_kv_heads", s.config.n_kv_heads},
            {"head_dim", s.config.head_dim},
            {"kv_dtype", k.dtype.name},
            {"block_size", k.block_size},
            {"ctx", k.ctx},
            {"batch", k.batch},
            {"bytes_per_token", k.bytes_per_token},
            {"bytes_per_sequence", k.bytes_per_sequence},
            {"bytes_per_batch", k.bytes_per_batch},
            {"formula", k.formula},
            {"layer_groups", groups},
            {"variants", variants},
            {"note", k.note}};
}

int run_kv_size(KvSizeOptions& o) {
    if (!o.shape.empty() && !o.model.empty())
        return usage_error("give --shape or --model, not both");
    auto dtype = parse_kv_size_dtype(o.kv_dtype);
    if (!dtype) return usage_error(dtype.error().message);
    KvShape shape;
    if (int rc = resolve_shape(o, shape); rc != 0) return rc;
    const int64_t ctx = o.ctx > 0 ? o.ctx : shape.config.context_length;
    auto k = kv_size(shape, ctx, o.batch, *dtype, EngineOptions{}.block_size);
    if (!k) return usage_error(k.error().message);
    if (o.json) {
        std::printf("%s\n", json_terminal_safe(to_json(*k, shape).dump(2)).c_str());
        return 0;
    }
    const ModelConfig& c = shape.config;
    std::printf(
        "%s: %d layers, %d query heads, %d KV heads, head_dim %d; KV in %s, blocks of %d "
        "tokens\n",
        terminal_safe(k->shape).c_str(), c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim,
        k->dtype.name.c_str(), k->block_size);
    if (k->dtype.name == "bf16")
        std::printf("(bf16 takes f16's bytes; kvscope's own cache stores f16)\n");
    std::printf("per token:     %s (%s)\n", k->formula.c_str(),
                binary_size(k->bytes_per_token).c_str());
    std::printf("per sequence:  %lld bytes (%s) for %lld tokens, in whole blocks of %d\n",
                static_cast<long long>(k->bytes_per_sequence),
                binary_size(k->bytes_per_sequence).c_str(), static_cast<long long>(k->ctx),
                k->block_size);
    std::printf("batch of %lld: %lld bytes (%s)\n", static_cast<long long>(k->batch),
                static_cast<long long>(k->bytes_per_batch),
                binary_size(k->bytes_per_batch).c_str());
    if (k->groups.size() > 1) {
        std::printf("by layer kind:\n");
        for (const KvLayerGroup& g : k->groups)
            std::printf("  %-22s %3d layers, %lld tokens held: %lld bytes per sequence (%s)\n",
                        g.what.c_str(), g.layers, static_cast<long long>(g.tokens),
                        static_cast<long long>(g.bytes_per_sequence),
                        binary_size(g.bytes_per_sequence).c_str());
    }
    std::printf("the same layers, heads and head_dim with other KV heads:\n");
    std::printf("  %-58s %14s %16s\n", "", "bytes/token", "bytes/sequence");
    for (const KvSizeVariant& v : k->variants)
        std::printf("  %-58s %14lld %16lld (%s)\n", v.what.c_str(),
                    static_cast<long long>(v.bytes_per_token),
                    static_cast<long long>(v.bytes_per_sequence),
                    binary_size(v.bytes_per_sequence).c_str());
    if (!k->note.empty()) std::printf("note: %s\n", k->note.c_str());
    return 0;
}
}  // namespace

Command register_kv_size(CLI::App& cli) {
    auto o = std::make_shared<KvSizeOptions>();
    CLI::App* sub = cli.add_subcommand(
        "kv-size", "Bytes of a model's KV cache per token, sequence and batch; MHA, GQA and MQA");
    sub->add_option("--shape", o->shape, "A known shape (llama-2-7b, llama-3-8b, gemma-3-27b...)");
    sub->add_option(
        "--model", o->model,
        "A model file whose config to read (GGUF, llama2.c; default: the bundled model)");
    sub->add_option("--ctx", o->ctx, "Tokens per sequence (default: the model's context)")
        ->check(CLI::Range(int64_t{1}, kMaxKvSizeCtx));
    sub->add_option("--batch", o->batch, "Sequences")
        ->check(CLI::Range(int64_t{1}, kMaxKvSizeBatch))
        ->capture_default_str();
    sub->add_option("--kv-dtype", o->kv_dtype, "What K and V are stored in")
        ->check(CLI::IsMember({"f32", "f16", "bf16", "int8", "int4", "int2"}))
        ->capture_default_str();
    sub->add_flag("--json", o->json, "One JSON object");
    return {sub, [o] { return run_kv_size(*o); }};
}

}  // namespace kvscope::app
