// `kvscope tokenize`: the token ids of a text, as the engine sees them (llama-tokenize's job), for
// checking a tokenizer against another implementation.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string_view>

#include "app/commands.h"
#include "app/data_paths.h"
#include "app/text_file.h"
#include "engine/model_loader.h"

namespace kvscope::app {

namespace {
struct TokenizeOptions {
    std::string model;
    std::string text;
    std::string file;
    bool lines = false;
    bool no_bos = false;
};

// Written in pieces of 64 KiB: a long text's ids as one string were as big again as the text.
void print_ids(const std::vector<int32_t>& ids) {
    std::string out;
    for (size_t i = 0; i < ids.size(); ++i) {
        if (i) out += ' ';
        out += std::to_string(ids[i]);
        if (out.size() >= (size_t{1} << 16)) {
            std::fwrite(out.data(), 1, out.size(), stdout);
            out.clear();
        }
    }
    out += '\n';
    std::fwrite(out.data(), 1, out.size(), stdout);
}

int run_tokenize(const TokenizeOptions& o) {
    if (o.text.empty() == o.file.empty())
        return usage_error("give exactly one of --text and --file");
    std::string text = o.text;
    if (!o.file.empty()) {
        auto read = read_text_file(o.file);
        if (!read) return fail(read.error().message);
        text = std::move(read).value();
    }
    // The vocabulary alone: a vocabulary-only GGUF tokenizes as well as a whole model.
    auto loaded = load_tokenizer(o.model);
    if (!loaded) return fail(loaded.error().message);
    const Tokenizer* tok = loaded->get();
    const bool bos = !o.no_bos && tok->wants_bos();
    if (!o.lines) {
        print_ids(tok->encode(text, bos));
        return 0;
    }
    // Lines as views of the text (as std::getline splits it: a last line without its newline
    // counts, an empty tail does not).
    const std::string_view all = text;
    for (size_t begin = 0; begin < all.size();) {
        const size_t end = std::min(all.find('\n', begin), all.size());
        print_ids(tok->encode(all.substr(begin, end - begin), bos));
        begin = end + 1;
    }
    return 0;
}
}  // namespace

Command register_tokenize(CLI::App& cli) {
    auto o = std::make_shared<TokenizeOptions>();
    CLI::App* sub = cli.add_subcommand("tokenize", "Print the token ids of a text");
    sub->add_option("--model", o->model, kModelOptionHelp);
    sub->add_option("--text", o->text, "The text");
    sub->add_option("--file", o->file, "A text file");
    sub->add_flag("--lines", o->lines, "One line of ids per line of text");
    sub->add_flag("--no-bos", o->no_bos, "Do not prepend the BOS token");
    return {sub, [o] { return resolve_model(o->model) ? 1 : run_tokenize(*o); }};
}

}  // namespace kvscope::app
