// The real binary, as a user meets it: output format, exit statuses, one-line errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "app/commands.h"
#include "engine/gguf_file.h"
#include "engine/model_loader.h"
#include "gguf_builder.h"
#include "sessions/session_reader.h"
#include "test_support.h"

namespace kvscope {
namespace {

using test::run_command;

test::CommandResult kvscope(std::vector<std::string> args, int timeout = 120) {
    return test::run_kvscope(std::move(args), timeout);
}

void expect_clean_failure(const test::CommandResult& r, const std::string& expect,
                          const std::string& what) {
    EXPECT_FALSE(r.signaled) << what << " crashed: " << r.err;
    EXPECT_TRUE(r.exit_code == 1 || r.exit_code == 2) << what << ": exit " << r.exit_code << "\n"
                                                      << r.err;
    EXPECT_NE(r.err.find(expect), std::string::npos) << what << ": " << r.err;
}

TEST(Cli, HelpOnEverySubcommandAndUnknownFlagsFail) {
    for (const char* sub :
         {"generate", "run", "workload", "inspect", "check", "export", "tokenize", "perplexity"}) {
        auto r = kvscope({sub, "--help"});
        EXPECT_EQ(r.exit_code, 0) << sub;
        EXPECT_NE(r.out.find("--"), std::string::npos) << sub;
    }
    auto r = kvscope({"generate", "--no-such-flag"});
    EXPECT_EQ(r.exit_code, 2);
    EXPECT_NE(r.err.find("no-such-flag"), std::string::npos);
    EXPECT_EQ(kvscope({"frobnicate"}).exit_code, 2);
}

TEST(Cli, GeneratePrintIdsWritesOneLineOfIds) {
    auto model = test::stories260k();
    if (!model) GTEST_SKIP() << test::stories260k_missing();
    auto r = kvscope(
        {"generate", "--model", *model, "--print-ids", "--max-tokens", "20", "--threads", "1"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    ASSERT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 1) << r.out;
    std::istringstream in(r.out);
    int n = 0;
    for (int x; in >> x; ++n)
        EXPECT_TRUE(x >= 0 && x < 512);
    EXPECT_EQ(n, 20);
    EXPECT_NE(r.err.find("tokens/s"), std::string::npos);  // stats go to stderr
}

TEST(Cli, BadInputGivesOneLineErrorAndStatus1Or2) {
    std::string model = test::bundled_model();  // 512-token context, 2048-token vocabulary
    std::string dir = test::temp_dir();
    std::string long_prompt;
    for (int i = 0; i < 600; ++i)
        long_prompt += "5 ";
    expect_clean_failure(kvscope({"generate", "--model", model, "--prompt-ids", long_prompt}),
                         "context holds 512", "prompt longer than the context");
    expect_clean_failure(kvscope({"generate", "--model", model, "--max-tokens", "-5"}),
                         "max-tokens", "negative max tokens");
    expect_clean_failure(kvscope({"generate", "--model", model, "--block-size", "0"}), "block-size",
                         "block size 0");
    expect_clean_failure(kvscope({"generate", "--model", model, "--prompt-ids", "1 2 99999"}),
                         "99999", "token id outside the vocabulary");
    expect_clean_failure(kvscope({"generate", "--model", dir + "/missing.gguf"}), "cannot open",
                         "missing model");
    expect_clean_failure(kvscope({"generate", "--model",
                                  test::write_file(dir + "/junk.bin", std::string(100, 'x'))}),
                         "not a GGUF file", "junk model");
    std::string bytes = test::read_file(model);
    expect_clean_failure(kvscope({"generate", "--model",
                                  test::write_file(dir + "/cut.gguf", bytes.substr(0, 200000))}),
                         "truncated or corrupt", "truncated model");
    expect_clean_failure(kvscope({"generate", "--model", dir}), "", "a directory as model");
}

// A llama2.c checkpoint has no tokenizer, and its header states its own size.
TEST(Cli, BadInputOnALlama2cCheckpoint) {
    std::string dir = test::temp_dir();
    auto stories = test::stories260k();
    if (!stories) GTEST_SKIP() << test::stories260k_missing();
    expect_clean_failure(kvscope({"generate", "--model", *stories, "--prompt", "Once upon a time"}),
                         "no tokenizer", "text prompt without tokenizer");
    std::string bin = test::read_file(*stories);
    expect_clean_failure(
        kvscope({"generate", "--model", test::write_file(dir + "/cut.bin", bin.substr(0, 5000))}),
        "does not match its header", "truncated llama2.c model");
}

TEST(Cli, RunServesAWorkloadAndWritesTheSummary) {
    std::optional<std::string> model = test::bundled_model();
    std::string dir = test::temp_dir();
    auto w = kvscope({"workload", "--model", *model, "--kind", "shared-prefix", "--requests", "12",
                      "--seed", "3", "--out", dir + "/w.jsonl"});
    ASSERT_EQ(w.exit_code, 0) << w.err;
    auto r = kvscope({"run", "--model", *model, "--workload", dir + "/w.jsonl", "--num-blocks",
                      "64", "--summary-json", dir + "/s.json", "--record", dir + "/s.kvs"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto j = nlohmann::json::parse(test::read_file(dir + "/s.json"));
    for (const char* key :
         {"requests", "tokens", "steps", "peak_blocks_used", "mean_fragmentation",
          "peak_fragmentation", "prefix_hit_rate", "preemptions", "max_running", "outputs"})
        EXPECT_TRUE(j.contains(key)) << key;
    EXPECT_EQ(j["requests"], 12);
    EXPECT_EQ(j["outputs"].size(), 12u);
    EXPECT_GT(j["prefix_hit_rate"].get<double>(), 0.3);

    auto check = kvscope({"check", dir + "/s.kvs"});
    EXPECT_EQ(check.exit_code, 0) << check.err;
    auto inspect = kvscope({"inspect", dir + "/s.kvs", "--json", "--step", "3"});
    ASSERT_EQ(inspect.exit_code, 0) << inspect.err;
    auto ij = nlohmann::json::parse(inspect.out);
    EXPECT_EQ(ij["step"], 3);
    for (const char* key : {"step", "steps_total", "pool", "requests", "metrics"})
        EXPECT_TRUE(ij.contains(key)) << key;
    for (const char* key : {"total", "used", "free", "cached"})
        EXPECT_TRUE(ij["pool"].contains(key)) << key;
    EXPECT_EQ(ij["pool"]["total"], 64);
}

TEST(Cli, MalformedWorkloadsAreReportedWithLineNumbers) {
    std::optional<std::string> model = test::bundled_model();
    std::string dir = test::temp_dir();
    test::write_file(dir + "/bad.jsonl",
                     "{\"prompt_ids\":[1,2]}\n{\"prompt_ids\":[1], \"colour\": 3}\n");
    expect_clean_failure(kvscope({"run", "--model", *model, "--workload", dir + "/bad.jsonl"}),
                         "bad.jsonl:2: unknown field 'colour'", "unknown field");
    test::write_file(dir + "/big.jsonl",
                     "{\"id\":\"small\",\"prompt_ids\":[1,2],\"max_tokens\":4}\n"
                     "{\"id\":\"huge\",\"prompt_ids\":[1,2],\"max_tokens\":400}\n");
    auto r = kvscope({"run", "--model", *model, "--workload", dir + "/big.jsonl", "--num-blocks",
                      "4", "--summary-json", dir + "/s.json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto j = nlohmann::json::parse(test::read_file(dir + "/s.json"));
    // The rejection says why, on stderr and in the summary.
    EXPECT_EQ(j["requests_rejected"], 1);
    ASSERT_TRUE(j["rejected"].contains("huge")) << j.dump();
    EXPECT_NE(j["rejected"]["huge"].get<std::string>().find("the whole pool holds 4"),
              std::string::npos);
    EXPECT_NE(r.err.find("request huge rejected: it needs"), std::string::npos) << r.err;
    EXPECT_TRUE(j["outputs"].contains("small"));
    expect_clean_failure(
        kvscope({"run", "--model", *model, "--workload", dir + "/big.jsonl", "--num-blocks", "0"}),
        "num-blocks", "a pool of no blocks");
}

// Lines in the register of the bundled model's corpus (KJV), and the same words shuffled.
const char* const kKjv =
    "In the beginning God created the heaven and the earth.\n"
    "And the earth was without form, and void; and darkness was upon the face of the deep.\n"
    "And the Spirit of God moved upon the face of the waters.\n"
    "And God said, Let there be light: and there was light.\n"
    "And God saw the light, that it was good: and God divided the light from the darkness.\n"
    "And God called the light Day, and the darkness he called Night.\n"
    "And the evening and the morning were the first day.\n";

TEST(Cli, TokenizePrintsIdsPerTextOrPerLine) {
    std::string dir = test::temp_dir();
    std::string file = test::write_file(dir + "/kjv.txt", kKjv);
    auto one = kvscope({"tokenize", "--text", "In the beginning"});
    ASSERT_EQ(one.exit_code, 0) << one.err;
    std::istringstream in(one.out);
    std::vector<int> ids;
    for (int x; in >> x;)
        ids.push_back(x);
    ASSERT_GE(ids.size(), 3u);
    EXPECT_EQ(ids[0], 1);  // BOS
    auto no_bos = kvscope({"tokenize", "--text", "In the beginning", "--no-bos"});
    EXPECT_EQ(no_bos.out, one.out.substr(2));
    auto lines = kvscope({"tokenize", "--file", file, "--lines"});
    ASSERT_EQ(lines.exit_code, 0) << lines.err;
    EXPECT_EQ(std::count(lines.out.begin(), lines.out.end(), '\n'), 7);
    EXPECT_EQ(lines.out.substr(0, one.out.size() - 1), one.out.substr(0, one.out.size() - 1));
    expect_clean_failure(kvscope({"tokenize"}), "exactly one", "no text");
    expect_clean_failure(kvscope({"tokenize", "--text", "a", "--file", file}), "exactly one",
                         "text and file");
    expect_clean_failure(kvscope({"tokenize", "--file", dir + "/missing.txt"}), "no such file",
                         "missing file");
    expect_clean_failure(kvscope({"tokenize", "--file", dir}), "is a directory", "a directory");
}

// llama.cpp ships vocabulary-only GGUFs (tokenizer metadata, no tensors) for its tokenizer
// tests: tokenize needs nothing more. One made from the bundled model's own vocabulary gives the
// same ids as the whole model; files without a vocabulary say so.
TEST(Cli, TokenizeTakesAVocabularyOnlyGguf) {
    auto full = GgufFile::open(test::bundled_model());
    ASSERT_TRUE(full.ok()) << full.error().message;
    test::GgufBuilder b;
    int keys = 0;
    for (const auto& [key, v] : full->metadata()) {
        if (key.rfind("tokenizer.ggml.", 0) != 0 && key != "general.architecture") continue;
        ++keys;
        if (v.type == GgufValueType::STRING) {
            b.kv_string(key, v.str);
        } else if (v.type == GgufValueType::BOOL) {
            b.kv_bool(key, v.b);
        } else if (v.type == GgufValueType::ARRAY && v.array_type == GgufValueType::STRING) {
            b.kv_strings(key, v.strings);
        } else if (v.type == GgufValueType::ARRAY && v.array_type == GgufValueType::FLOAT32) {
            b.kv_f32s(key, std::vector<float>(v.numbers.begin(), v.numbers.end()));
        } else if (v.type == GgufValueType::ARRAY) {
            b.kv_i32s(key, std::vector<int32_t>(v.numbers.begin(), v.numbers.end()));
        } else {
            b.kv_u32(key, static_cast<uint32_t>(v.u ? v.u : static_cast<uint64_t>(v.i)));
        }
    }
    ASSERT_GE(keys, 4);
    const std::string dir = test::temp_dir();
    const std::string vocab = test::write_file(dir + "/vocab-only.gguf", b.build());
    ASSERT_FALSE(load_model(vocab).ok()) << "a file without tensors is no model";
    auto whole = kvscope({"tokenize", "--text", kKjv});
    auto only = kvscope({"tokenize", "--model", vocab, "--text", kKjv});
    ASSERT_EQ(only.exit_code, 0) << only.err;
    EXPECT_EQ(only.out, whole.out);
    EXPECT_GT(std::count(only.out.begin(), only.out.end(), ' '), 50);

    test::GgufBuilder no_vocab;
    no_vocab.kv_string("general.architecture", "llama");
    const std::string bare = test::write_file(dir + "/bare.gguf", no_vocab.build());
    expect_clean_failure(kvscope({"tokenize", "--model", bare, "--text", "a"}), "has no tokenizer",
                         "a GGUF without a vocabulary");
    expect_clean_failure(kvscope({"tokenize", "--model", "synthetic:qwen2.5-0.5b", "--text", "a"}),
                         "has no tokenizer", "a synthetic model");
    const std::string junk = test::write_file(dir + "/junk.bin", std::string(64, '\x7f'));
    expect_clean_failure(kvscope({"tokenize", "--model", junk, "--text", "a"}), "not a GGUF file",
                         "neither format");
}

TEST(Cli, PerplexityTellsTheCorpusFromShuffledWords) {
    std::string dir = test::temp_dir();
    std::string text, shuffled;
    for (int i = 0; i < 6; ++i)
        text += kKjv;
    std::vector<std::string> words;
    std::istringstream in(text);
    for (std::string w; in >> w;)
        words.push_back(w);
    std::mt19937 rng(1);
    std::shuffle(words.begin(), words.end(), rng);
    for (const auto& w : words)
        shuffled += w + " ";
    std::string a = test::write_file(dir + "/kjv.txt", text);
    std::string b = test::write_file(dir + "/shuffled.txt", shuffled);
    auto ppl = [&](const std::string& f) {
        auto r = kvscope({"perplexity", "--file", f, "--ctx", "128"});
        EXPECT_EQ(r.exit_code, 0) << r.err;
        auto at = r.out.find("Final estimate: PPL = ");
        EXPECT_NE(at, std::string::npos) << r.out;
        return at == std::string::npos ? 0.0 : std::stod(r.out.substr(at + 22));
    };
    double in_corpus = ppl(a), out_of_order = ppl(b);
    EXPECT_GT(in_corpus, 1.0);
    EXPECT_LT(in_corpus, 60.0);  // held-out text scores about 27 (see assets/README.md)
    EXPECT_GT(out_of_order, 3 * in_corpus) << in_corpus;
    expect_clean_failure(kvscope({"perplexity", "--file", a, "--ctx", "4096"}), "context",
                         "ctx beyond the model");
    std::string tiny = test::write_file(dir + "/tiny.txt", "In the beginning");
    expect_clean_failure(kvscope({"perplexity", "--file", tiny}), "fewer than one chunk",
                         "text shorter than a chunk");
    expect_clean_failure(kvscope({"perplexity", "--file", dir + "/none.txt"}), "no such file",
                         "missing file");
}

}  // namespace
}  // namespace kvscope

namespace kvscope {
namespace {

// A long command shows one updating progress line on a terminal, and nothing of the kind in a
// log or a pipe; text output ends with its newline.
TEST(Cli, LongCommandsShowProgressOnATerminalOnly) {
    std::string dir = test::temp_dir();
    std::string w = dir + "/w.jsonl";
    ASSERT_EQ(kvscope({"workload", "--requests", "12", "--out", w}).exit_code, 0);
    auto piped = kvscope({"run", "--workload", w});
    ASSERT_EQ(piped.exit_code, 0) << piped.err;
    EXPECT_EQ(piped.err.find('\r'), std::string::npos) << piped.err;
    EXPECT_EQ(piped.err.find('\x1b'), std::string::npos) << piped.err;
    auto generated = kvscope({"generate", "--max-tokens", "5"});
    ASSERT_EQ(generated.exit_code, 0);
    ASSERT_FALSE(generated.out.empty());
    EXPECT_EQ(generated.out.back(), '\n');
    if (access("/usr/bin/script", X_OK) != 0) GTEST_SKIP() << "no script(1) here to make a tty";
    // script(1) runs the command on a pseudo-terminal and copies what it shows.
    auto tty = test::run_command(
        {"/usr/bin/script", "-qefc", test::kvscope_binary() + " run --workload " + w, "/dev/null"});
    ASSERT_EQ(tty.exit_code, 0) << tty.out;
    EXPECT_NE(tty.out.find("\rstep "), std::string::npos) << tty.out.substr(0, 400);
    EXPECT_NE(tty.out.find("requests done"), std::string::npos);
    EXPECT_NE(tty.out.find("requests            12"), std::string::npos);  // the summary follows
}

// The README's table of commands is the command line's own: when a flag changes, this fails
// until the table is regenerated (`kvscope commands-table`).
TEST(Cli, ReadmeCommandsTableMatchesTheCommandLine) {
    auto readme = test::source_file("README.md");
    ASSERT_TRUE(readme);
    std::string text = test::read_file(*readme);
    const std::string begin = "<!-- commands:", end = "<!-- end of commands -->";
    size_t b = text.find(begin), e = text.find(end);
    ASSERT_TRUE(b != std::string::npos && e != std::string::npos) << "README lost its markers";
    b = text.find("-->", b) + 4;  // past the opening comment and its newline
    auto generated = kvscope({"commands-table"});
    ASSERT_EQ(generated.exit_code, 0);
    EXPECT_EQ(text.substr(b, e - b), generated.out)
        << "README's Commands table is out of date: paste the output of `kvscope commands-table`";
    // Every subcommand of --help is in it.
    auto help = kvscope({"--help"});
    for (const char* sub : {"generate", "run", "workload", "inspect", "check", "export", "tokenize",
                            "perplexity", "gui", "replay", "compare"}) {
        EXPECT_NE(help.out.find(std::string("  ") + sub), std::string::npos) << sub;
        EXPECT_NE(generated.out.find(std::string("`kvscope ") + sub), std::string::npos) << sub;
    }
}

TEST(Cli, VersionSaysWhatWasBuilt) {
    auto r = kvscope({"--version"});
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_EQ(r.out.rfind("kvscope 0.", 0), 0u) << r.out;
    EXPECT_NE(r.out.find("backends: cpu"), std::string::npos) << r.out;
}

// `cmake --install` puts the binary, the bundled model and the sample session in the usual
// layout, and the installed kvscope finds them relative to itself from any directory.
TEST(Cli, AnInstalledCopyFindsItsDataFromAnywhere) {
    std::string prefix = test::temp_dir() + "/prefix";
    std::string build = std::filesystem::path(test::kvscope_binary()).parent_path().string();
    auto install =
        test::run_command({"/usr/bin/env", "cmake", "--install", build, "--prefix", prefix});
    ASSERT_EQ(install.exit_code, 0) << install.out << install.err;
    for (const char* f : {"bin/kvscope", "share/kvscope/models/kvscope-demo.gguf",
                          "share/kvscope/sessions/sample-chat.kvs", "share/doc/kvscope/README.md",
                          "share/doc/kvscope/docs/ARCHITECTURE.md"})
        EXPECT_TRUE(std::filesystem::exists(prefix + "/" + f)) << f;
    auto r = test::run_command({"/bin/sh", "-c",
                                "cd / && exec \"$0\" generate --prompt 'In the beginning' "
                                "--max-tokens 4",
                                prefix + "/bin/kvscope"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.err.find(prefix + "/share/kvscope/models/kvscope-demo.gguf"), std::string::npos)
        << r.err;
    auto check = test::run_command(
        {prefix + "/bin/kvscope", "check", prefix + "/share/kvscope/sessions/sample-chat.kvs"});
    EXPECT_EQ(check.exit_code, 0) << check.err;
}

}  // namespace
}  // namespace kvscope

namespace kvscope {
namespace {

// A text for eval to score: the bundled model's own sampled continuation, twice (so that a
// budget has repeats to keep); empty if generating it failed.
std::string sampled_text_file() {
    auto text = kvscope({"generate", "--prompt", "And God said,", "--max-tokens", "300",
                         "--temperature", "0.8", "--seed", "3"});
    EXPECT_EQ(text.exit_code, 0) << text.err;
    if (text.exit_code != 0) return "";
    return test::write_file(test::temp_dir() + "/text.txt", text.out + text.out);
}

// `kvscope eval`: a row per setting, the full cache first, and a setting that keeps everything
// scores exactly what the full cache does.
TEST(Cli, EvalComparesSettingsWithTheFullCache) {
    const std::string file = sampled_text_file();
    ASSERT_FALSE(file.empty());
    auto r = kvscope({"eval", "--text", file, "--ctx", "96", "--agree-tokens", "12", "--chunks",
                      "3", "--policy", "none,streaming,h2o,morphkv", "--kv-budget", "25%,100%",
                      "--compact", "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto rows = nlohmann::json::parse(r.out);
    ASSERT_EQ(rows.size(), 7u);
    EXPECT_EQ(rows[0]["policy"], "none");
    EXPECT_EQ(rows[0]["kv_budget"], "full");
    EXPECT_EQ(rows[0]["agreement"], 1.0);
    for (const char* key : {"policy", "kv_budget", "kv_dtype", "perplexity", "agreement",
                            "kv_bytes_peak", "tokens_evicted"})
        EXPECT_TRUE(rows[1].contains(key)) << key;
    const double full_bytes = rows[0]["kv_bytes_peak"].get<double>();
    for (const auto& row : rows) {
        if (row["kv_budget"] == "100%") {
            EXPECT_EQ(row["perplexity"], rows[0]["perplexity"]) << row.dump();
            EXPECT_EQ(row["agreement"], 1.0) << row.dump();
            EXPECT_EQ(row["tokens_evicted"], 0) << row.dump();
        }
        if (row["kv_budget"] == "25%") {
            EXPECT_GT(row["tokens_evicted"].get<int64_t>(), 0) << row.dump();
            // A quarter of the tokens, and a block per lane of slack at most.
            EXPECT_LE(row["kv_bytes_peak"].get<double>(), full_bytes * 0.25 + full_bytes / 6)
                << row.dump();
        }
    }
    // Bad settings are usage errors, found before any work.
    for (const std::vector<std::string>& bad : {std::vector<std::string>{"--policy", "lru"},
                                                {"--policy", "h2o", "--kv-budget", "0"},
                                                {"--policy", "h2o", "--kv-budget", "150%"},
                                                {"--policy", "streaming", "--kv-budget", "3"},
                                                {"--kv-dtype", "fp8"}}) {
        std::vector<std::string> args = {"eval", "--text", file};
        args.insert(args.end(), bad.begin(), bad.end());
        auto b = kvscope(args);
        EXPECT_EQ(b.exit_code, 2) << bad[1] << ": " << b.err;
        EXPECT_EQ(std::count(b.err.begin(), b.err.end(), '\n'), 1) << b.err;
    }
}

// --positions: cache (StreamingLLM's places in the cache) applies to streaming only; with any
// other policy, or none, it is a usage error in one line on every command taking it.
TEST(Cli, PositionsCacheIsRefusedWhereItDoesNotApply) {
    const std::string dir = test::temp_dir();
    const std::string w = test::write_file(dir + "/w.jsonl", "{\"prompt_ids\":[1,2,3]}\n");
    const std::string text = test::write_file(dir + "/t.txt", "unused");
    std::vector<std::vector<std::string>> refused = {
        {"generate", "--max-tokens", "4", "--positions", "cache"},
        {"run", "--workload", w, "--positions", "cache", "--policy", "h2o", "--kv-budget", "8"},
        {"eval", "--text", text, "--positions", "cache"},
        {"eval", "--text", text, "--positions", "cache,absolute", "--policy", "streaming,tova",
         "--kv-budget", "16"},
        {"eval", "--text", text, "--stream", "--positions", "cache", "--policy", "knorm",
         "--kv-budget", "16"}};
    for (const char* policy : {"h2o", "snapkv", "tova", "knorm"})
        refused.push_back({"generate", "--max-tokens", "4", "--policy", policy, "--kv-budget", "16",
                           "--positions", "cache"});
    for (const auto& args : refused) {
        auto r = kvscope(args);
        EXPECT_EQ(r.exit_code, 2) << args[0] << " " << args[args.size() - 1] << ": " << r.err;
        EXPECT_NE(r.err.find("--positions cache needs --policy streaming"), std::string::npos)
            << r.err;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    }
    auto unknown = kvscope({"generate", "--max-tokens", "4", "--policy", "streaming", "--kv-budget",
                            "16", "--positions", "relative"});
    EXPECT_EQ(unknown.exit_code, 2);
    EXPECT_NE(unknown.err.find("--positions"), std::string::npos) << unknown.err;
    // Where it applies, both modes run; absolute is accepted with every policy.
    for (const char* mode : {"cache", "absolute"}) {
        auto ok = kvscope({"generate", "--prompt-ids", "1 2 3", "--max-tokens", "40", "--print-ids",
                           "--policy", "streaming", "--kv-budget", "16", "--positions", mode,
                           "--threads", "1"});
        EXPECT_EQ(ok.exit_code, 0) << mode << ": " << ok.err;
    }
    auto h2o = kvscope({"generate", "--max-tokens", "4", "--policy", "h2o", "--kv-budget", "16",
                        "--positions", "absolute"});
    EXPECT_EQ(h2o.exit_code, 0) << h2o.err;
}

// `eval --stream`: the text fed token by token past the model's context, perplexity per window
// for each setting (a row per window, a column per setting) and for the whole text.
TEST(Cli, EvalStreamReportsPerplexityPerWindow) {
    const std::string file = sampled_text_file();
    ASSERT_FALSE(file.empty());
    const std::string dir = test::temp_dir();
    const std::vector<std::string> stream = {"eval",
                                             "--text",
                                             file,
                                             "--stream",
                                             "--max-tokens",
                                             "200",
                                             "--window-tokens",
                                             "50",
                                             "--policy",
                                             "streaming",
                                             "--kv-budget",
                                             "32",
                                             "--positions",
                                             "cache,absolute",
                                             "--threads",
                                             "1"};
    auto table = kvscope(stream);
    ASSERT_EQ(table.exit_code, 0) << table.err;
    for (const char* line :
         {"tokens ", "none full f32", "streaming 32 f32 cache", "streaming 32 f32 absolute",
          "\n1-50 ", "\n51-100 ", "\n101-150 ", "\n151-200 ", "\nall ", "\nrope_position_max "})
        EXPECT_NE(table.out.find(line), std::string::npos) << line << " in\n" << table.out;
    EXPECT_EQ(table.out.find("\n201-"), std::string::npos) << table.out;

    std::vector<std::string> json = stream;
    json.push_back("--json");
    auto r = kvscope(json);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto rows = nlohmann::json::parse(r.out);
    ASSERT_EQ(rows.size(), 3u);
    EXPECT_EQ(rows[0]["policy"], "none");
    EXPECT_EQ(rows[1]["positions"], "cache");
    EXPECT_EQ(rows[2]["positions"], "absolute");
    for (const auto& row : rows) {
        EXPECT_EQ(row["scored_tokens"], 200) << row.dump();
        ASSERT_EQ(row["windows"].size(), 4u) << row.dump();
        EXPECT_EQ(row["windows"][3]["last"], 200);
        EXPECT_GT(row["perplexity"].get<double>(), 1.0);
    }
    EXPECT_LE(rows[1]["rope_position_max"].get<int>(), 32);
    EXPECT_EQ(rows[2]["rope_position_max"], 199);
    EXPECT_GT(rows[1]["tokens_evicted"].get<int64_t>(), 0);

    // Bad inputs: one line each; a file that cannot be scored is an error (1), a bad value or
    // a flag without --stream a usage error (2).
    const std::string empty = test::write_file(dir + "/empty.txt", "");
    struct Case {
        std::vector<std::string> args;
        int exit_code;
    };
    for (const Case& c :
         {Case{{"--text", dir + "/missing.txt", "--stream"}, 1},
          Case{{"--text", empty, "--stream"}, 1},
          Case{{"--text", file, "--stream", "--max-tokens", "0"}, 2},
          Case{{"--text", file, "--stream", "--max-tokens", "-5"}, 2},
          Case{{"--text", file, "--stream", "--window-tokens", "0"}, 2},
          Case{{"--text", file, "--max-tokens", "100"}, 2},
          Case{{"--text", file, "--window-tokens", "100"}, 2},
          Case{{"--text", file, "--stream", "--chunks", "2"}, 2},
          Case{{"--text", file, "--stream", "--policy", "snapkv", "--kv-budget", "16"}, 2},
          Case{{"--text", file, "--stream", "--ctx", "100000"}, 1}}) {
        std::vector<std::string> args = {"eval"};
        args.insert(args.end(), c.args.begin(), c.args.end());
        auto b = kvscope(args);
        EXPECT_EQ(b.exit_code, c.exit_code) << c.args.back() << ": " << b.err;
        EXPECT_EQ(std::count(b.err.begin(), b.err.end(), '\n'), 1) << b.err;
    }
}

// The eviction flags of generate and run: bad values are usage errors naming the flag.
TEST(Cli, EvictionFlagsRefuseWhatCannotWork) {
    struct Case {
        std::vector<std::string> args;
        const char* expect;
    };
    for (const Case& c :
         {Case{{"--policy", "h2o"}, "needs --kv-budget"},
          Case{{"--policy", "h2o", "--kv-budget", "0"}, "at least 1"},
          Case{{"--policy", "h2o", "--kv-budget", "150%"}, "percentage"},
          Case{{"--policy", "streaming", "--kv-budget", "4"}, "at least 5"},
          Case{{"--kv-budget", "10"}, "needs a --policy"},
          Case{{"--compact"}, "--compact needs a --policy"}, Case{{"--policy", "lru"}, "--policy"},
          Case{{"--kv-dtype", "fp8"}, "--kv-dtype"}, Case{{"--ctx-size", "-1"}, "--ctx-size"}}) {
        std::vector<std::string> args = {"generate", "--max-tokens", "4"};
        args.insert(args.end(), c.args.begin(), c.args.end());
        auto r = kvscope(args);
        EXPECT_EQ(r.exit_code, 2) << c.expect << ": " << r.err;
        EXPECT_NE(r.err.find(c.expect), std::string::npos) << r.err;
    }
    std::string dir = test::temp_dir();
    std::string w =
        test::write_file(dir + "/w.jsonl", "{\"prompt_ids\":[1,2,3],\"max_tokens\":4}\n");
    auto contiguous = kvscope({"run", "--workload", w, "--policy", "h2o", "--kv-budget", "8",
                               "--allocator", "contiguous"});
    EXPECT_EQ(contiguous.exit_code, 2);
    EXPECT_NE(contiguous.err.find("paged allocator"), std::string::npos) << contiguous.err;
}

// --ctx-size: a policy that holds the cache to a budget generates past the trained context (512
// tokens for the bundled model), with a note saying the model is out of its range there; without
// it generation stops where the context is full.
TEST(Cli, CtxSizeLetsAPolicyGeneratePastTheTrainedContext) {
    auto count_ids = [](const std::string& out) {
        std::istringstream in(out);
        int n = 0;
        for (std::string id; in >> id;)
            ++n;
        return n;
    };
    auto bounded = kvscope({"generate", "--prompt-ids", "1 2 3", "--max-tokens", "600",
                            "--print-ids", "--ctx-size", "700", "--policy", "streaming",
                            "--kv-budget", "64", "--threads", "1"});
    ASSERT_EQ(bounded.exit_code, 0) << bounded.err;
    EXPECT_EQ(count_ids(bounded.out), 600);
    EXPECT_NE(bounded.err.find("past the 512 tokens the model was trained on"), std::string::npos)
        << bounded.err;
    auto trained = kvscope({"generate", "--prompt-ids", "1 2 3", "--max-tokens", "600",
                            "--print-ids", "--threads", "1"});
    ASSERT_EQ(trained.exit_code, 0) << trained.err;
    EXPECT_EQ(count_ids(trained.out), 512 - 3);
    EXPECT_EQ(trained.err.find("note:"), std::string::npos) << trained.err;
}

// Every option CLI11 reads as a floating-point number, found from the command line itself so
// that a flag added later is held to it too: NaN, infinities, numbers past a double or past the
// flag's range and text that is not one number are refused naming the flag, before anything
// runs (CLI::Range let NaN through: every comparison with it is false).
TEST(Cli, EveryFloatingPointFlagTakesOnlyAFiniteNumberInItsRange) {
    struct Flag {
        std::vector<std::string> path;  // subcommands
        std::string flag;
    };
    std::vector<Flag> flags;
    app::CommandLine line;  // the options' owner while they are looked at
    for (const auto& at : line.every_option())
        if (at.option->get_type_name().rfind("FLOAT", 0) == 0)
            flags.push_back({at.subcommands, at.flag()});
    // generate's --temperature and --top-p, attach's --duration, publish's --rate, --gaps and
    // --duration at least (and --font-scale of every window command where the window is built).
    EXPECT_GE(flags.size(), 6u);
    for (const Flag& f : flags)
        for (const std::string value : {"nan", "-nan", "inf", "-inf", "1e999", "1e308", "-1e308",
                                        "", "x", "1.5.2", "0x10", " 1"}) {
            app::CommandLine line;
            std::vector<std::string> args = {"kvscope"};
            args.insert(args.end(), f.path.begin(), f.path.end());
            args.insert(args.end(), {f.flag, value});
            std::vector<char*> argv;
            for (std::string& a : args)
                argv.push_back(a.data());
            const std::string what =
                (f.path.empty() ? "kvscope" : f.path.back()) + " " + f.flag + " '" + value + "'";
            try {
                line.cli.parse(static_cast<int>(argv.size()), argv.data());
                ADD_FAILURE() << what << " was accepted";
            } catch (const CLI::ValidationError& e) {
                EXPECT_NE(std::string(e.what()).find(f.flag + ": must be a finite number from "),
                          std::string::npos)
                    << what << ": " << e.what();
            } catch (const CLI::ParseError& e) {
                ADD_FAILURE() << what << ": " << e.what();
            }
        }
}

// A list with an empty item (",,,") named no setting and eval ran the full cache alone.
TEST(Cli, EvalRefusesAListWithAnEmptyItem) {
    const std::string text = test::write_file(test::temp_dir() + "/t.txt", "unused");
    for (const std::vector<std::string>& bad :
         {std::vector<std::string>{"--policy", "h2o", "--kv-budget", ",,,"},
          {"--policy", "h2o", "--kv-budget", "25%,"},
          {"--policy", "h2o", "--kv-budget", ""},
          {"--policy", "h2o,,streaming", "--kv-budget", "25%"},
          {"--policy", "h2o", "--kv-budget", "25%", "--kv-dtype", ","}}) {
        std::vector<std::string> args = {"eval", "--text", text};
        args.insert(args.end(), bad.begin(), bad.end());
        auto r = kvscope(args);
        EXPECT_EQ(r.exit_code, 2) << bad[3] << ": " << r.err;
        EXPECT_NE(r.err.find("has an empty item"), std::string::npos) << r.err;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    }
}

// h2o, snapkv and morphkv keep a recent --window and choose the rest of the budget by score: a
// window as large as the budget left nothing to choose, quietly a sliding window.
TEST(Cli, AWindowThatFillsTheBudgetIsRefused) {
    const std::string dir = test::temp_dir();
    const std::string w = test::write_file(dir + "/w.jsonl", "{\"prompt_ids\":[1,2,3]}\n");
    const std::string text = test::write_file(dir + "/t.txt", "unused");
    for (const std::vector<std::string>& args :
         {std::vector<std::string>{"generate", "--max-tokens", "4", "--policy", "h2o",
                                   "--kv-budget", "8", "--window", "1048576"},
          {"generate", "--max-tokens", "4", "--policy", "snapkv", "--kv-budget", "8", "--window",
           "8"},
          {"run", "--workload", w, "--policy", "h2o", "--kv-budget", "16", "--window", "16"},
          {"eval", "--text", text, "--policy", "none,h2o", "--kv-budget", "64,8", "--window", "32"},
          {"generate", "--max-tokens", "4", "--policy", "morphkv", "--kv-budget", "32", "--window",
           "32"},
          {"eval", "--text", text, "--policy", "morphkv", "--kv-budget", "64,16", "--window",
           "40"}}) {
        auto r = kvscope(args);
        EXPECT_EQ(r.exit_code, 2) << args[0] << ": " << r.err;
        EXPECT_NE(r.err.find("leaves no room in --kv-budget"), std::string::npos) << r.err;
        EXPECT_NE(r.err.find("give a --window below"), std::string::npos) << r.err;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    }
    // Below the budget it runs, choosing by score.
    auto ok = kvscope({"generate", "--max-tokens", "12", "--prompt-ids", "1 2 3", "--policy", "h2o",
                       "--kv-budget", "8", "--window", "7", "--threads", "1"});
    EXPECT_EQ(ok.exit_code, 0) << ok.err;
    // morphkv ranks the older tokens by its window's queries: no window, nothing to rank by.
    for (const char* cmd : {"generate", "eval"}) {
        std::vector<std::string> args = {cmd,  "--policy", "morphkv", "--kv-budget",
                                         "16", "--window", "0"};
        if (args[0] == "eval") args.insert(args.end(), {"--text", text});
        auto r = kvscope(args);
        EXPECT_EQ(r.exit_code, 2) << cmd << ": " << r.err;
        EXPECT_NE(r.err.find("--window 0 leaves morphkv no recent queries"), std::string::npos)
            << r.err;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    }
    auto morph = kvscope({"generate", "--max-tokens", "12", "--prompt-ids", "1 2 3", "--policy",
                          "morphkv", "--kv-budget", "8", "--window", "4", "--window-aggregate",
                          "sum", "--threads", "1"});
    EXPECT_EQ(morph.exit_code, 0) << morph.err;
}

// A budget frees memory without asking: every policy's holes are closed after each step unless
// --no-compact, so at 25% of 512-token chunks a sequence holds a quarter of the full cache's
// K/V bytes (scattered holes kept 0.76 to 1.00 of them). snapkv is the exception it always was:
// it compresses the prompt once and its sequence grows again while decoding (64 prompt tokens
// kept and 256 decoded of 512). --no-compact keeps the holes, and --compact, the default now,
// is still accepted.
TEST(Cli, ABudgetFreesMemoryByDefault) {
    const std::string dir = test::temp_dir();
    auto text = kvscope({"generate", "--prompt", "And God said,", "--max-tokens", "300",
                         "--temperature", "0.8", "--seed", "3"});
    ASSERT_EQ(text.exit_code, 0) << text.err;
    const std::string file = test::write_file(dir + "/text.txt", text.out + text.out);
    // One thread: two on a shared machine made each row ten times slower.
    const std::vector<std::string> base = {
        "eval", "--text",    file, "--ctx",       "512", "--agree-tokens", "1", "--chunks",
        "1",    "--threads", "1",  "--kv-budget", "25%", "--json"};
    auto eval = [&](std::vector<std::string> extra) {
        std::vector<std::string> args = base;
        args.insert(args.end(), extra.begin(), extra.end());
        auto r = kvscope(args, 300);
        EXPECT_EQ(r.exit_code, 0) << r.err;
        std::map<std::string, double> ratio;  // policy: kv_bytes_peak over the full cache's
        if (r.exit_code != 0) return ratio;
        auto rows = nlohmann::json::parse(r.out);
        const double full = rows[0]["kv_bytes_peak"].get<double>();
        for (const auto& row : rows)
            ratio[row["policy"].get<std::string>()] = row["kv_bytes_peak"].get<double>() / full;
        return ratio;
    };
    auto compacted = eval({"--policy", "none,streaming,h2o,snapkv,tova,knorm,morphkv"});
    ASSERT_EQ(compacted.size(), 7u);
    for (const auto& [policy, r] : compacted) {
        if (policy == "none") continue;
        EXPECT_LE(r, policy == "snapkv" ? (64.0 + 256.0) / 512.0 : 0.30) << policy;
    }
    auto holes = eval({"--policy", "h2o,knorm,morphkv", "--no-compact"});
    for (const char* policy : {"h2o", "knorm", "morphkv"}) {
        EXPECT_GT(holes[policy], 0.5) << policy << ": holes keep their blocks";
        EXPECT_GT(holes[policy], compacted[policy] + 0.2) << policy;
    }
    EXPECT_EQ(eval({"--policy", "h2o", "--compact"})["h2o"], compacted["h2o"]);
    // Both at once is a contradiction; either alone needs a policy to act on.
    for (const std::vector<std::string>& bad :
         {std::vector<std::string>{"--policy", "h2o", "--kv-budget", "8", "--compact",
                                   "--no-compact"},
          {"--no-compact"},
          {"--policy", "h2o", "--kv-budget", "8", "--kv-dtype", "int4", "--compact"}}) {
        std::vector<std::string> args = {"generate", "--max-tokens", "4"};
        args.insert(args.end(), bad.begin(), bad.end());
        auto r = kvscope(args);
        EXPECT_EQ(r.exit_code, 2) << bad.back() << ": " << r.err;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    }
    // int4 cannot move its keys: by default it keeps its holes instead of refusing to run.
    auto int4 = kvscope({"generate", "--max-tokens", "8", "--prompt-ids", "1 2 3", "--policy",
                         "h2o", "--kv-budget", "4", "--kv-dtype", "int4", "--threads", "1"});
    EXPECT_EQ(int4.exit_code, 0) << int4.err;
}

// --kv-dtype-layers: a dtype per layer range, checked against the model's layers and recorded
// with the session; every layer given f32 is the f32 run whatever --kv-dtype says.
TEST(Cli, KvDtypeLayersIsCheckedAppliedAndRecorded) {
    const std::vector<std::string> gen = {"generate",     "--prompt", "And God said,",
                                          "--max-tokens", "24",       "--print-ids",
                                          "--threads",    "1"};
    auto with = [&](std::vector<std::string> extra) {
        std::vector<std::string> args = gen;
        args.insert(args.end(), extra.begin(), extra.end());
        return kvscope(args);
    };
    auto f32 = with({});
    ASSERT_EQ(f32.exit_code, 0) << f32.err;
    auto all_f32 = with({"--kv-dtype", "int2", "--kv-dtype-layers", "0-5:f32"});
    ASSERT_EQ(all_f32.exit_code, 0) << all_f32.err;
    EXPECT_EQ(all_f32.out, f32.out);
    // The same schedule split in two ranges, given out of order.
    auto split = with({"--kv-dtype", "int2", "--kv-dtype-layers", "3-5:f32,0-2:f32"});
    EXPECT_EQ(split.out, f32.out) << split.err;
    // And it is the schedule that keeps those ids: int2 everywhere changes them.
    auto int2 = with({"--kv-dtype", "int2"});
    ASSERT_EQ(int2.exit_code, 0) << int2.err;
    EXPECT_NE(int2.out, f32.out);

    const std::string dir = test::temp_dir();
    // The run's options are JSON inside the session's JSON: quotes escaped.
    auto recorded = with({"--kv-dtype-layers", "0-1:int8,2-5:int2", "--record", dir + "/g.kvs"});
    ASSERT_EQ(recorded.exit_code, 0) << recorded.err;
    EXPECT_NE(test::read_file(dir + "/g.kvs").find(R"(kv_dtype_layers\":\"0-1:int8,2-5:int2\")"),
              std::string::npos);

    // Bad schedules: one line, status 2, on every command that takes the flag (the bundled
    // model has 6 layers, so 7-9 is past them).
    const std::string w =
        test::write_file(dir + "/w.jsonl", "{\"prompt_ids\":[1,2,3],\"max_tokens\":4}\n");
    const std::string text = test::write_file(dir + "/t.txt", "In the beginning God created.\n");
    for (const char* bad : {"0-1:int3", "7-9:int2", "2-1:int8", "0-2:int8,2-3:int2", "garbage"})
        for (std::vector<std::string> args :
             {std::vector<std::string>{"generate", "--max-tokens", "4"},
              {"run", "--workload", w},
              {"eval", "--text", text, "--ctx", "8"}}) {
            args.insert(args.end(), {"--kv-dtype-layers", bad});
            auto r = kvscope(args);
            EXPECT_EQ(r.exit_code, 2) << args[0] << " " << bad << ": " << r.err;
            EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
            EXPECT_NE(r.err.find("--kv-dtype-layers"), std::string::npos) << r.err;
        }
    // int2 cannot move its keys either: --compact is refused beside it, as beside int4.
    auto compact =
        with({"--policy", "h2o", "--kv-budget", "8", "--kv-dtype-layers", "2:int2", "--compact"});
    EXPECT_EQ(compact.exit_code, 2) << compact.err;
    EXPECT_NE(compact.err.find("int2"), std::string::npos) << compact.err;
}

// eval: the schedule is one more row per policy and budget, with its own bytes.
TEST(Cli, EvalRunsAKvDtypeScheduleAsOneMoreSetting) {
    const std::string file = sampled_text_file();
    ASSERT_FALSE(file.empty());
    auto r = kvscope({"eval", "--text", file, "--ctx", "64", "--agree-tokens", "4", "--chunks", "1",
                      "--threads", "1", "--kv-dtype", "f32,int2", "--kv-dtype-layers", "0-5:f32",
                      "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto rows = nlohmann::json::parse(r.out);
    ASSERT_EQ(rows.size(), 3u);  // f32, int2, the schedule over f32
    EXPECT_EQ(rows[2]["kv_dtype_layers"], "0-5:f32");
    EXPECT_EQ(rows[2]["perplexity"], rows[0]["perplexity"]);
    EXPECT_EQ(rows[2]["kv_bytes_peak"], rows[0]["kv_bytes_peak"]);
    EXPECT_LT(rows[1]["kv_bytes_peak"].get<double>(),
              rows[0]["kv_bytes_peak"].get<double>() * 0.25);
}

// --kv-dtype mixed:HI/LO:P% (ZipCache) and --merge-layers FROM (MiniCache): exact where they
// must be (all of the tokens in HI is HI; a first merged layer with no layer after it is no
// merging), recorded with the session and its events, and bad values refused in one line with
// status 2 on every command that takes them.
TEST(Cli, MixedPrecisionAndLayerMergingAreCheckedAppliedAndRecorded) {
    const std::vector<std::string> gen = {"generate",     "--prompt", "And God said,",
                                          "--max-tokens", "40",       "--print-ids",
                                          "--threads",    "1"};
    auto with = [&](std::vector<std::string> extra) {
        std::vector<std::string> args = gen;
        args.insert(args.end(), extra.begin(), extra.end());
        return kvscope(args);
    };
    auto int8 = with({"--kv-dtype", "int8"});
    ASSERT_EQ(int8.exit_code, 0) << int8.err;
    auto all_high = with({"--kv-dtype", "mixed:int8/int2:100%"});
    ASSERT_EQ(all_high.exit_code, 0) << all_high.err;
    EXPECT_EQ(all_high.out, int8.out);
    auto f32 = with({});
    auto last_layer = with({"--merge-layers", "5"});  // the bundled model has 6 layers
    ASSERT_EQ(last_layer.exit_code, 0) << last_layer.err;
    EXPECT_EQ(last_layer.out, f32.out);
    auto merged_all = with({"--merge-layers", "0", "--merge-distance", "1"});
    ASSERT_EQ(merged_all.exit_code, 0) << merged_all.err;
    EXPECT_NE(merged_all.out, f32.out);

    // Recorded: the setting with the run's options, each change of precision and each merge as
    // events of their own kinds.
    const std::string dir = test::temp_dir();
    auto mixed = with({"--kv-dtype", "mixed:int8/int2:20%", "--record", dir + "/m.kvs"});
    ASSERT_EQ(mixed.exit_code, 0) << mixed.err;
    EXPECT_NE(test::read_file(dir + "/m.kvs").find(R"(kv_dtype\":\"mixed:int8/int2:20%\")"),
              std::string::npos);
    auto merge = with({"--merge-layers", "2", "--merge-distance", "1", "--record", dir + "/g.kvs"});
    ASSERT_EQ(merge.exit_code, 0) << merge.err;
    EXPECT_NE(test::read_file(dir + "/g.kvs").find(R"(merge_layers\":2)"), std::string::npos);
    for (const auto& [session, kind] :
         {std::pair{"m", EventKind::kTokenPrecision}, {"g", EventKind::kLayerMerge}}) {
        auto check = kvscope({"check", dir + "/" + session + ".kvs"});
        EXPECT_EQ(check.exit_code, 0) << check.out << check.err;
        auto reader = SessionReader::open(dir + "/" + session + ".kvs");
        ASSERT_TRUE(reader.ok()) << reader.error().message;
        auto events = (*reader)->events(0, (*reader)->last_step(), {kind});
        ASSERT_TRUE(events.ok()) << events.error().message;
        ASSERT_FALSE(events->empty()) << event_kind_name(kind);
        const Event& e = events->front();
        if (kind == EventKind::kTokenPrecision) {
            EXPECT_EQ(e.text, "int8->int2");  // from, to, with the score that decided it
            EXPECT_GT(e.value, 0.0);
        } else {
            EXPECT_EQ(e.a, 2);  // the pair (2, 3), then (4, 5)
            EXPECT_GT(e.b, 0);  // tokens merged, bytes saved
            EXPECT_EQ(e.wide, int64_t{e.b} * 248);
        }
    }

    // Bad values: one line, status 2, on every command that takes them (gui refuses them
    // before its window opens).
    const std::string w =
        test::write_file(dir + "/w.jsonl", "{\"prompt_ids\":[1,2,3],\"max_tokens\":4}\n");
    const std::string text = test::write_file(dir + "/t.txt", "In the beginning God created.\n");
    const std::vector<std::pair<std::vector<std::string>, const char*>> bad = {
        {{"--kv-dtype", "mixed:int8/int8:0%"}, "--kv-dtype"},
        {{"--kv-dtype", "mixed:int8/int8:20%"}, "more bits"},
        {{"--kv-dtype", "mixed:int2/int8:20%"}, "more bits"},
        {{"--kv-dtype", "mixed:int8/int2:0%"}, "percentage"},
        {{"--kv-dtype", "mixed:int8/int2:101%"}, "percentage"},
        {{"--kv-dtype", "mixed:int3/int2:20%"}, "int3"},
        {{"--kv-dtype", "int3"}, "int3"},
        {{"--kv-dtype", "mixed:int8/int2:20%", "--kv-dtype-layers", "0:f32"}, "--kv-dtype-layers"},
        {{"--merge-layers", "99"}, "it has 6"},
        {{"--merge-layers", "6"}, "it has 6"},
        {{"--merge-layers", "1", "--kv-dtype", "int4"}, "--merge-layers"},
        {{"--merge-layers", "1", "--kv-dtype", "mixed:int8/int2:20%"}, "--merge-layers"},
    };
    for (const auto& [flags, expect] : bad)
        for (std::vector<std::string> args :
             {std::vector<std::string>{"generate", "--max-tokens", "4"},
              {"run", "--workload", w},
              {"eval", "--text", text, "--ctx", "8"},
              {"gui", "--workload", w}}) {
            std::vector<std::string> these = flags;
            if (args[0] == "eval" && these[0] == "--kv-dtype-layers") continue;
            args.insert(args.end(), these.begin(), these.end());
            auto r = kvscope(args);
            EXPECT_EQ(r.exit_code, 2) << args[0] << " " << these[1] << ": " << r.err;
            EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
            EXPECT_NE(r.err.find(expect), std::string::npos) << args[0] << ": " << r.err;
        }
    // Merging with a token-eviction policy is refused too.
    auto policy = with({"--merge-layers", "0", "--policy", "h2o", "--kv-budget", "8"});
    EXPECT_EQ(policy.exit_code, 2) << policy.err;
    EXPECT_NE(policy.err.find("--merge-layers"), std::string::npos) << policy.err;
}

// eval: a mixed dtype is a row like any dtype, each --merge-layers FROM one more row, named in
// the --json rows; all of the tokens high is the HI row, and a merged row holds fewer bytes.
TEST(Cli, EvalRunsMixedPrecisionAndMergedLayersAsSettings) {
    const std::string file = sampled_text_file();
    ASSERT_FALSE(file.empty());
    auto r = kvscope({"eval", "--text", file, "--ctx", "64", "--agree-tokens", "4", "--chunks", "1",
                      "--threads", "1", "--kv-dtype",
                      "f32,int8,mixed:int8/int2:100%,mixed:int8/int2:25%", "--merge-layers", "0,5",
                      "--merge-distance", "1", "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto rows = nlohmann::json::parse(r.out);
    ASSERT_EQ(rows.size(), 6u);  // f32, int8, two mixed, two merged (over f32)
    EXPECT_EQ(rows[2]["kv_dtype"], "mixed:int8/int2:100%");
    EXPECT_EQ(rows[2]["perplexity"], rows[1]["perplexity"]);
    EXPECT_EQ(rows[2]["agreement"], rows[1]["agreement"]);
    // The tier byte of each token and KV head: 6 layers x 2 KV heads per token.
    EXPECT_GT(rows[2]["kv_bytes_peak"].get<int64_t>(), rows[1]["kv_bytes_peak"].get<int64_t>());
    EXPECT_LT(rows[3]["kv_bytes_peak"].get<int64_t>(), rows[1]["kv_bytes_peak"].get<int64_t>());
    EXPECT_EQ(rows[4]["merge_layers"], 0);
    EXPECT_EQ(rows[4]["kv_dtype"], "f32");
    EXPECT_EQ(rows[0]["merge_layers"], -1);
    // Every token merged in three pairs: a pair holds 256 + 8 bytes of a token and KV head
    // instead of 512, 248 saved, 3 x 2 x 248 = 1488 a token. Blocks are counted whole: the peak
    // is when the 64-token chunk takes its fourth block of 16, at its 49th token: 4 blocks of
    // 6 x 2 x 16 x 256 bytes less 49 x 1488.
    const double full = rows[0]["kv_bytes_peak"].get<double>();
    EXPECT_EQ(full, 4 * 49152);
    EXPECT_EQ(rows[4]["kv_bytes_peak"].get<int64_t>(), 4 * 49152 - 49 * 1488);
    EXPECT_EQ(rows[5]["merge_layers"], 5);
    EXPECT_EQ(rows[5]["perplexity"], rows[0]["perplexity"]);
    EXPECT_EQ(rows[5]["kv_bytes_peak"], rows[0]["kv_bytes_peak"]);
}

}  // namespace
}  // namespace kvscope
