// `kvscope bench cpu`: prompt processing and decode speed of a model on this machine's CPU, in
// llama-bench's terms (pp128, pp512: prompt tokens per second; tg128: tokens per second of 128
// decode steps, here after a 128-token prompt), with the process's peak memory, so the two
// engines can be put side by side on the same file (bench/vs_llamacpp.sh).
#include <sys/resource.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "app/backend_flag.h"
#include "app/commands.h"
#include "app/matmul_flag.h"
#include "base/terminal_text.h"
#include "engine/generate.h"
#include "engine/gguf_file.h"
#include "engine/model_loader.h"

namespace kvscope::app {

namespace {
struct BenchCpuOptions {
    std::string model;
    int threads = 0;
    MatmulMode matmul = MatmulMode::kExact;
    Backend backend = Backend::kCpu;
    int reps = 3;
    std::vector<std::string> tests = {"pp128", "pp512", "tg128"};
    bool json = false;
};

struct TestShape {
    int prompt = 0, decode = 0;  // tg: decode steps timed after `prompt` tokens
};

Result<TestShape> parse_test(const std::string& name) {
    auto count = [&](size_t from) -> int {
        if (name.size() <= from || name.size() > from + 6) return 0;
        int n = 0;
        for (size_t i = from; i < name.size(); ++i) {
            if (name[i] < '0' || name[i] > '9') return 0;
            n = n * 10 + (name[i] - '0');
        }
        return n;
    };
    if (name.rfind("pp", 0) == 0 && count(2) > 0) return TestShape{count(2), 0};
    if (name.rfind("tg", 0) == 0 && count(2) > 0) return TestShape{128, count(2)};
    return Error{"--tests: " + quote_for_message(name) +
                 " is not a test (ppN: a prompt of N tokens; tgN: N decode steps after 128 "
                 "prompt tokens)"};
}

int64_t peak_rss_bytes() {
    struct rusage ru {};
    getrusage(RUSAGE_SELF, &ru);
    return static_cast<int64_t>(ru.ru_maxrss) * 1024;  // Linux reports KiB
}

int run_bench_cpu(const BenchCpuOptions& o) {
    std::vector<std::pair<std::string, TestShape>> tests;
    for (const std::string& t : o.tests) {
        auto shape = parse_test(t);
        if (!shape) return usage_error(shape.error().message);
        tests.emplace_back(t, shape.value());
    }
    auto loaded = load_model(o.model);
    if (!loaded) return fail(loaded.error().message);
    LoadedModel m = std::move(loaded).value();
    m.config.eos_token = -1;  // as llama-bench: every test runs its full length
    int longest = 0;
    for (auto& [name, shape] : tests)
        longest = std::max(longest, shape.prompt + shape.decode);
    if (longest > m.config.context_length)
        return fail("the tests need " + std::to_string(longest) + " tokens of context but " +
                    terminal_safe(o.model) + " has " + std::to_string(m.config.context_length) +
                    "; pick shorter tests with --tests");
    auto model = std::make_shared<const LoadedModel>(std::move(m));
    EngineOptions eo;
    eo.threads = o.threads;
    eo.matmul = o.matmul;
    eo.num_blocks = (longest + eo.block_size - 1) / eo.block_size + 1;
    eo.backend = backend_factory(o.backend);
    auto engine = Engine::create(model, eo);
    if (!engine) return fail(engine.error().message);
    const int threads = (*engine)->threads().num_threads();

    std::mt19937 rng(42);
    std::uniform_int_distribution<int32_t> token(0, model->config.vocab_size - 1);
    // One run of a test: tokens per second of its timed part.
    auto once = [&](const TestShape& shape) -> Result<double> {
        GenerateRequest req;
        req.prompt.resize(static_cast<size_t>(shape.prompt));
        for (int32_t& t : req.prompt)
            t = token(rng);
        req.max_tokens = shape.decode + 1;  // the first token ends the prefill
        req.trace_ops = false;
        auto s = generate(**engine, req, [](int32_t) {});
        if (!s) return s.error();
        if (shape.decode == 0) return shape.prompt / s->prefill_seconds;
        return (s->generated_tokens - 1) / s->decode_seconds;
    };
    if (auto warm = once({16, 1}); !warm) return fail(warm.error().message);

    nlohmann::json results = nlohmann::json::array();
    if (!o.json && o.backend == Backend::kCuda)
        std::printf("%s (%s), backend cuda, %.2f GB of weights in the file\n",
                    terminal_safe(o.model).c_str(), model->format.c_str(),
                    static_cast<double>(model->weights.bytes()) / 1e9);
    else if (!o.json)
        std::printf("%s (%s), %d threads, matmul %s (%s kernels), %.2f GB of weights\n",
                    terminal_safe(o.model).c_str(), model->format.c_str(), threads,
                    matmul_mode_name(o.matmul), matmul_kernels_name(),
                    static_cast<double>(model->weights.bytes()) / 1e9);
    if (!o.json) std::printf("%-8s %14s %10s\n", "test", "tokens/s", "stddev");
    for (auto& [name, shape] : tests) {
        std::vector<double> rates;
        for (int r = 0; r < o.reps; ++r) {
            auto rate = once(shape);
            if (!rate) return fail(rate.error().message);
            rates.push_back(rate.value());
        }
        double mean = 0, var = 0;
        for (double x : rates)
            mean += x / static_cast<double>(rates.size());
        for (double x : rates)
            var += (x - mean) * (x - mean) / static_cast<double>(rates.size());
        if (o.json)
            results.push_back({{"test", name},
                               {"tokens_per_second", mean},
                               {"stddev", std::sqrt(var)},
                               {"samples", rates}});
        else
            std::printf("%-8s %14.2f %10.2f\n", name.c_str(), mean, std::sqrt(var));
        std::fflush(stdout);
    }
    const int64_t peak = peak_rss_bytes();
    if (o.json) {
        nlohmann::json j = {{"model", o.model},
                            {"format", model->format},
                            {"backend", (*engine)->forward().backend_name()},
                            {"threads", threads},
                            {"matmul", matmul_mode_name(o.matmul)},
                            {"kernels", matmul_kernels_name()},
                            {"weight_bytes", model->weights.bytes()},
                            {"peak_rss_bytes", peak},
                            {"results", results}};
        std::printf("%s\n", json_terminal_safe(j.dump(2)).c_str());
    } else {
        std::printf("peak memory (resident, file pages included) %.3f GiB\n",
                    static_cast<double>(peak) / (1 << 30));
    }
    return 0;
}
}  // namespace

Command register_bench_cpu(CLI::App& bench) {
    auto o = std::make_shared<BenchCpuOptions>();
    CLI::App* sub = bench.add_subcommand(
        "cpu",
        "Prompt and decode tokens/s and peak memory of a model on the CPU (llama-bench's tests)");
    sub->add_option("--model", o->model,
                    "Model (.gguf, llama2.c .bin or synthetic:NAME[:TYPE]; "
                    "default: the bundled model)");
    sub->add_option("--threads", o->threads, "Worker threads (0 = all cores)")
        ->check(CLI::Range(0, 1024))
        ->capture_default_str();
    add_matmul_flag(*sub, o->matmul);
    add_backend_flag(*sub, o->backend);
    sub->add_option("--reps", o->reps, "Runs of each test (mean and deviation printed)")
        ->check(CLI::Range(1, 1000))
        ->capture_default_str();
    sub->add_option("--tests", o->tests,
                    "Tests, comma separated: ppN (prompt of N tokens), tgN "
                    "(N decode steps after 128 prompt tokens)")
        ->delimiter(',')
        ->capture_default_str();
    sub->add_flag("--json", o->json, "One JSON object");
    return {sub, [o] {
                if (check_backend(o->backend)) return 1;
                return resolve_model(o->model) ? 1 : run_bench_cpu(*o);
            }};
}

}  // namespace kvscope::app
