// `kvscope perplexity`: perplexity of a text file, computed as llama.cpp's llama-perplexity
// computes it (engine/perplexity.h), so the two engines can be compared on the same GGUF.
#include <chrono>
#include <cstdio>
#include <memory>

#include "app/backend_flag.h"
#include "app/commands.h"
#include "app/data_paths.h"
#include "app/matmul_flag.h"
#include "app/progress_line.h"
#include "app/text_file.h"
#include "engine/model_loader.h"
#include "engine/perplexity.h"

namespace kvscope::app {

namespace {
constexpr int32_t kLogEveryChunks = 10;

struct PerplexityOptions {
    std::string model;
    std::string file;
    int32_t ctx = 512;
    int32_t chunks = 0;
    int32_t threads = 0;
    MatmulMode matmul = MatmulMode::kExact;
    Backend backend = Backend::kCpu;
};

int run_perplexity(const PerplexityOptions& o) {
    auto text = read_text_file(o.file);
    if (!text) return fail(text.error().message);
    auto loaded = load_model(o.model);
    if (!loaded) return fail(loaded.error().message);
    auto model = std::make_shared<const LoadedModel>(std::move(loaded).value());
    if (!model->tokenizer) return fail(o.model + " has no tokenizer");
    std::vector<int32_t> tokens = model->tokenizer->encode(*text, true);
    if (tokens.empty() || tokens.front() != model->config.bos_token)
        tokens.insert(tokens.begin(), model->config.bos_token);
    EngineOptions eo;
    eo.threads = o.threads;
    eo.matmul = o.matmul;
    eo.block_size = 16;
    eo.num_blocks = (o.ctx + eo.block_size - 1) / eo.block_size;
    eo.backend = backend_factory(o.backend);
    auto engine = Engine::create(model, eo);
    if (!engine) return fail(engine.error().message);
    auto t0 = std::chrono::steady_clock::now();
    ProgressLine progress;
    auto r = perplexity(**engine, tokens, o.ctx, o.chunks, [&](int32_t done, int32_t total) {
        // On a terminal the status line; in a log a line every kLogEveryChunks chunks, so a
        // long run is never silent there either.
        const bool log_line =
            !progress.on_terminal() && done % kLogEveryChunks == 0 && done < total;
        if (!log_line && !progress.due() && done < total) return;
        double s = progress.elapsed_seconds();
        const std::string text = "chunk " + std::to_string(done) + " of " + std::to_string(total) +
                                 ", about " + format_duration(s / done * (total - done)) + " left";
        if (log_line)
            std::fprintf(stderr, "kvscope: %s\n", text.c_str());
        else
            progress.show(text);
    });
    progress.clear();
    if (!r) return fail(r.error().message);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "kvscope: %zu tokens, %d chunks of %d, %lld scored, %.2f s\n",
                 tokens.size(), r->chunks, o.ctx, static_cast<long long>(r->scored_tokens), s);
    for (size_t i = 0; i < r->chunk_perplexity.size(); ++i)
        std::printf("[%zu]%.4f,", i + 1, r->chunk_perplexity[i]);
    std::printf("\nFinal estimate: PPL = %.4f (mean NLL %.5f nats/token)\n", r->perplexity,
                r->mean_nll);
    return 0;
}
}  // namespace

Command register_perplexity(CLI::App& cli) {
    auto o = std::make_shared<PerplexityOptions>();
    CLI::App* sub = cli.add_subcommand(
        "perplexity", "Perplexity of a text file, computed as llama.cpp's llama-perplexity does");
    sub->add_option("--model", o->model, kModelOptionHelp);
    sub->add_option("--file", o->file, "Text file")->required();
    sub->add_option("--ctx", o->ctx, "Tokens per chunk")
        ->check(CLI::Range(2, 1 << 20))
        ->capture_default_str();
    sub->add_option("--chunks", o->chunks, "Score only the first N chunks (0 = all)")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
    sub->add_option("--threads", o->threads, "Worker threads (0 = all cores)")
        ->check(CLI::Range(0, 1024));
    add_matmul_flag(*sub, o->matmul);
    add_backend_flag(*sub, o->backend);
    return {sub, [o] {
                if (check_backend(o->backend)) return 1;
                return resolve_model(o->model) ? 1 : run_perplexity(*o);
            }};
}

}  // namespace kvscope::app
