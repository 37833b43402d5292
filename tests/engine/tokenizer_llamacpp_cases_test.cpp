// llama.cpp's own tokenizer test cases, run through kvscope's tokenizers. llama.cpp keeps them in
// its models/ folder: vocabulary-only GGUFs (ggml-vocab-NAME.gguf) with NAME.gguf.inp (texts
// separated by "\n__ggml_vocab_test__\n") and NAME.gguf.out (the expected ids, one line per
// text), checked there by tests/test-tokenizer-0.cpp. They are llama.cpp's files and are never
// copied here: point $KVSCOPE_LLAMACPP_VOCABS at that folder, or the test skips.
//
// Every vocabulary kvscope loads without a warning must give llama.cpp's ids for every case. A
// vocabulary kvscope does not claim to handle (a tokenizer.ggml.model other than llama or gpt2,
// an unimplemented pre-tokenizer) is listed as skipped with the reason; one it claims but fails
// to load is a failure.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>

#include "base/terminal_text.h"
#include "engine/gguf_file.h"
#include "engine/model_loader.h"
#include "engine/tokenizer_bpe.h"

namespace kvscope {
namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;

constexpr const char* kVocabsVariable = "KVSCOPE_LLAMACPP_VOCABS";
constexpr size_t kMismatchesShown = 10;

std::string read_bytes(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// text -> expected ids, read as test-tokenizer-0.cpp reads them: a std::map, so a text listed
// twice counts once (the last line wins), and each .out line is stripped of surrounding spaces.
Result<std::map<std::string, Ids>> read_cases(const fs::path& inp, const fs::path& out) {
    if (!fs::exists(out)) return Error{out.string() + " is missing"};
    const std::string raw = read_bytes(inp);
    const std::string sep = "\n__ggml_vocab_test__\n";
    std::vector<std::string> texts;
    for (size_t pos = 0; pos < raw.size();) {
        size_t next = raw.find(sep, pos);
        if (next == std::string::npos) {
            texts.push_back(raw.substr(pos));
            break;
        }
        texts.push_back(raw.substr(pos, next - pos));
        pos = next + sep.size();
    }
    std::vector<Ids> expected;
    std::istringstream lines(read_bytes(out));
    for (std::string line; std::getline(lines, line);) {
        Ids ids;
        std::istringstream words(line);
        for (std::string w; words >> w;) {
            char* end = nullptr;
            long id = std::strtol(w.c_str(), &end, 10);
            if (*end != '\0') return Error{out.string() + ": '" + terminal_safe(w) + "' is no id"};
            ids.push_back(static_cast<int32_t>(id));
        }
        expected.push_back(std::move(ids));
    }
    if (texts.size() != expected.size())
        return Error{inp.string() + " has " + std::to_string(texts.size()) + " texts, " +
                     out.string() + " " + std::to_string(expected.size()) + " lines"};
    if (texts.empty()) return Error{inp.string() + " has no cases"};
    std::map<std::string, Ids> cases;
    for (size_t i = 0; i < texts.size(); ++i)
        cases[texts[i]] = expected[i];
    return cases;
}

// Whether kvscope says it tokenizes this vocabulary as llama.cpp does: a model it reads and, for
// BPE, a pre-tokenizer it implements. Unreadable metadata claims nothing.
bool claims_support(const fs::path& gguf) {
    auto f = GgufFile::open(gguf.string());
    if (!f) return false;
    auto model = f->get_string("tokenizer.ggml.model");
    if (!model) return false;
    if (model.value() == "llama") return true;
    if (model.value() != "gpt2") return false;
    std::string pre;
    if (f->find("tokenizer.ggml.pre")) {
        auto p = f->get_string("tokenizer.ggml.pre");
        if (!p) return false;
        pre = p.value();
    }
    return bpe_pre_config(pre).supported;
}

std::string ids_text(const Ids& ids) {
    std::string s = "[";
    for (size_t i = 0; i < ids.size(); ++i) {
        if (i) s += ' ';
        s += std::to_string(ids[i]);
    }
    return s + "]";
}

TEST(TokenizerLlamaCppCases, EveryCaseOfEverySupportedVocabulary) {
    const char* env = std::getenv(kVocabsVariable);
    if (!env || !*env)
        GTEST_SKIP() << "set " << kVocabsVariable
                     << " to a folder of llama.cpp's ggml-vocab-*.gguf with their .inp and .out "
                        "files (llama.cpp's models/ folder; tests/README.md)";
    const fs::path dir = env;
    std::vector<fs::path> inputs;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
        const std::string name = entry.path().filename().string();
        if (name.rfind("ggml-vocab-", 0) == 0 && name.ends_with(".gguf.inp"))
            inputs.push_back(entry.path());
    }
    if (ec) GTEST_SKIP() << kVocabsVariable << "=" << dir.string() << ": " << ec.message();
    if (inputs.empty())
        GTEST_SKIP() << kVocabsVariable << "=" << dir.string()
                     << " holds no ggml-vocab-*.gguf.inp files";
    std::sort(inputs.begin(), inputs.end());

    std::ostringstream summary, skipped, mismatches;
    size_t vocabularies = 0, cases = 0, passed = 0, mismatch_count = 0;
    for (const fs::path& inp : inputs) {
        const fs::path gguf = fs::path(inp).replace_extension();  // drops ".inp"
        const fs::path out = fs::path(gguf).concat(".out");
        const std::string name = terminal_safe(gguf.filename().string());
        // Copies of llama.cpp's models/ folder often leave out the larger vocabularies and keep
        // their small case files: nothing to run, not a failure.
        if (!fs::exists(gguf)) {
            skipped << "  " << name << ": not present (only its .inp/.out are)\n";
            continue;
        }
        auto loaded = load_tokenizer(gguf.string());
        if (!loaded) {
            if (claims_support(gguf))
                ADD_FAILURE() << name << ": kvscope supports this vocabulary but refused it: "
                              << terminal_safe(loaded.error().message);
            else
                skipped << "  " << name << ": " << terminal_safe(loaded.error().message) << "\n";
            continue;
        }
        const Tokenizer& tok = *loaded.value();
        if (!tok.warnings().empty()) {
            const std::string why = terminal_safe(tok.warnings().front());
            if (claims_support(gguf))
                ADD_FAILURE() << name << ": kvscope supports this vocabulary but warns: " << why;
            else
                skipped << "  " << name << ": " << why << "\n";
            continue;
        }
        auto read = read_cases(inp, out);
        if (!read) {
            ADD_FAILURE() << name << ": " << terminal_safe(read.error().message);
            continue;
        }
        size_t ok = 0;
        for (const auto& [text, want] : read.value()) {
            // As test-tokenizer-0.cpp: add_special = false, parse_special = false.
            const Ids got = tok.encode(text, false);
            if (got == want) {
                ++ok;
            } else if (mismatch_count++ < kMismatchesShown) {
                mismatches << "  " << name << ": \"" << terminal_safe(text) << "\"\n"
                           << "    llama.cpp: " << ids_text(want) << "\n"
                           << "    kvscope:   " << ids_text(got) << "\n";
            }
        }
        ++vocabularies;
        cases += read.value().size();
        passed += ok;
        summary << "  " << name << ": " << ok << "/" << read.value().size() << "\n";
    }

    std::cout << "llama.cpp tokenizer cases in " << dir.string() << ":\n"
              << summary.str() << "  total: " << passed << "/" << cases << " in " << vocabularies
              << " vocabularies\n";
    if (!skipped.str().empty()) std::cout << "skipped:\n" << skipped.str();
    EXPECT_EQ(mismatch_count, 0u) << mismatch_count << " of " << cases
                                  << " cases differ from llama.cpp (first "
                                  << std::min(mismatch_count, kMismatchesShown) << "):\n"
                                  << mismatches.str();
    if (vocabularies == 0 && !HasFailure())
        GTEST_SKIP() << "no vocabulary in " << dir.string() << " that kvscope supports:\n"
                     << skipped.str();
}

}  // namespace
}  // namespace kvscope
