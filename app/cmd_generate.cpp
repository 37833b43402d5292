// `kvscope generate`: one prompt through the paged-KV engine, tokens streamed to stdout.
#include <cstdio>
#include <memory>
#include <sstream>

#include "app/backend_flag.h"
#include "app/commands.h"
#include "app/context_size.h"
#include "app/data_paths.h"
#include "app/eviction_flags.h"
#include "app/matmul_flag.h"
#include "app/number_flag.h"
#include "app/prompt_tokens.h"
#include "app/recording.h"
#include "base/terminal_text.h"
#include "engine/attention_spec.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/model_loader.h"

namespace kvscope::app {

namespace {
struct GenerateOptions {
    std::string model;
    std::string prompt;
    std::string prompt_ids;
    int32_t max_tokens = 256;
    float temperature = 0.0f;
    float top_p = 1.0f;
    uint64_t seed = 1;
    bool print_ids = false;
    int32_t block_size = 16;
    int32_t ctx_size = 0;
    int32_t threads = 0;
    MatmulMode matmul = MatmulMode::kExact;
    Backend backend = Backend::kCpu;
    std::string record;
    bool force = false;
    std::string capture_attention;
    EvictionFlags eviction;
};

int run_generate(const GenerateOptions& o) {
    if (auto e = o.eviction.options(); !e) return usage_error(e.error().message);
    if (check_output(o.record, o.force, {o.model})) return 1;
    auto loaded = load_model_with_context(o.model, o.ctx_size);
    if (!loaded) return fail(loaded.error().message);
    std::shared_ptr<const LoadedModel> model = std::move(loaded).value();

    auto prompt = prompt_tokens(*model, o.prompt, o.prompt_ids);
    if (!prompt) return fail(prompt.error().message);

    EngineOptions eo;
    eo.block_size = o.block_size;
    eo.threads = o.threads;
    eo.matmul = o.matmul;
    eo.kv_dtype = *o.eviction.dtype();  // checked before the model was loaded
    auto layer_dtypes = o.eviction.layer_dtypes(model->config.n_layers);
    if (!layer_dtypes) return usage_error(layer_dtypes.error().message);
    eo.kv_dtype_layers = std::move(layer_dtypes).value();
    eo.kv_low = o.eviction.kv_low();
    if (Status s = validate_merge_layers(o.eviction.merge_layers, model->config.n_layers); !s)
        return usage_error(s.error().message);
    eo.backend = backend_factory(o.backend, !o.record.empty());
    auto engine = Engine::create(model, eo);
    if (!engine) return fail(engine.error().message);

    GenerateRequest req;
    req.prompt = prompt.value();
    req.max_tokens = o.max_tokens;
    req.sampling = {o.temperature, o.top_p, o.seed};
    auto capture = parse_attention_spec(o.capture_attention, model->config);
    if (!capture) return fail(capture.error().message);
    req.capture_attention = capture.value();
    auto evictor = o.eviction.evictor(model->config.n_layers);
    if (!evictor) return fail(evictor.error().message);
    req.evictor = std::move(evictor).value();
    req.kv_cache = !o.eviction.cache_off();

    std::unique_ptr<Recorder> recorder;
    if (!o.record.empty()) {
        auto rec =
            start_recording(o.record, **engine, "paged", o.eviction.to_json().dump(), o.force);
        if (!rec) return fail(rec.error().message);
        recorder = std::move(rec).value();
    }
    const Tokenizer* tok = model->tokenizer.get();
    if (!o.print_ids && !tok)
        std::fprintf(stderr, "note: %s has no tokenizer; printing token ids\n",
                     terminal_safe(o.model).c_str());
    bool first = true;
    TerminalTextStream text;  // a model's vocabulary is untrusted text too
    auto on_token = [&](int32_t id) {
        if (o.print_ids || !tok) {
            std::printf(first ? "%d" : " %d", id);
        } else {
            std::string piece = text.feed(tok->decode_token(id));
            std::fwrite(piece.data(), 1, piece.size(), stdout);
        }
        first = false;
        std::fflush(stdout);
    };
    auto stats = generate(**engine, req, on_token);
    std::string rest = text.finish();
    std::printf("%s\n", rest.c_str());
    std::fflush(stdout);  // the text and its newline before the stats on stderr
    if (!stats) return fail(stats.error().message);
    if (recorder && finish_recording(recorder, **engine) != 0) return 1;
    const GenerateStats& s = stats.value();
    double decode_tps = s.generated_tokens > 1 && s.decode_seconds > 0
                            ? (s.generated_tokens - 1) / s.decode_seconds
                            : 0.0;
    std::fprintf(stderr,
                 "kvscope: %s (%s), %d threads, block size %d\n"
                 "kvscope: prompt %d tokens, prefill %.2f ms; generated %d tokens%s, "
                 "decode %.1f tokens/s\n",
                 terminal_safe(o.model).c_str(), model->format.c_str(),
                 (*engine)->options().threads, o.block_size, s.prompt_tokens,
                 s.prefill_seconds * 1e3, s.generated_tokens,
                 s.stopped_by_eos ? " (stopped at end token)" : "", decode_tps);
    if (req.evictor && req.evictor->options().active())
        std::fprintf(stderr, "kvscope: %s evicted %lld tokens over every layer and KV head\n",
                     o.eviction.policy.c_str(), static_cast<long long>(s.tokens_evicted));
    return 0;
}
}  // namespace

Command register_generate(CLI::App& cli) {
    auto o = std::make_shared<GenerateOptions>();
    CLI::App* sub = cli.add_subcommand("generate", "Generate text from one prompt");
    sub->add_option("--model", o->model, kModelOptionHelp);
    sub->add_option("--prompt", o->prompt, "Prompt text (needs a model with a tokenizer)");
    sub->add_option("--prompt-ids", o->prompt_ids, "Prompt as token ids, space or comma separated");
    sub->add_option("--max-tokens", o->max_tokens, "Tokens to generate")
        ->check(CLI::Range(0, INT32_MAX))
        ->capture_default_str();
    sub->add_option("--temperature", o->temperature, "0 = greedy")
        ->check(finite_number(0, 100))
        ->capture_default_str();
    sub->add_option("--top-p", o->top_p, "Nucleus sampling threshold (1 = off)")
        ->check(finite_number(0, 1))
        ->capture_default_str();
    sub->add_option("--seed", o->seed, "Sampling seed")->capture_default_str();
    sub->add_flag("--print-ids", o->print_ids, "Print generated token ids on one line of stdout");
    sub->add_option("--block-size", o->block_size, "Tokens per KV cache block")
        ->check(CLI::Range(1, 4096))
        ->capture_default_str();
    add_ctx_size_flag(*sub, o->ctx_size);
    sub->add_option("--threads", o->threads, "Worker threads (0 = all cores)")
        ->check(CLI::Range(0, 1024))
        ->capture_default_str();
    add_matmul_flag(*sub, o->matmul);
    add_backend_flag(*sub, o->backend);
    sub->add_option("--record", o->record, "Record the run to a session file (.kvs)");
    add_force_flag(*sub, o->force);
    sub->add_option("--capture-attention", o->capture_attention,
                    "Record attention rows: all | none | LAYER:HEAD,... ('*' for any)");
    add_eviction_flags(*sub, o->eviction);
    sub->get_option("--prompt")->excludes("--prompt-ids");
    return {sub, [o] {
                if (check_backend(o->backend)) return 1;
                return resolve_model(o->model) ? 1 : run_generate(*o);
            }};
}

}  // namespace kvscope::app
