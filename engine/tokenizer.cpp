#include "engine/tokenizer.h"

#include "engine/gguf_file.h"
#include "engine/tokenizer_impl.h"

namespace kvscope {

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
    std::string out;
    for (int32_t id : ids)
        out += decode_token(id);
    return out;
}

namespace {
constexpr size_t kMaxVocab = 10'000'000;
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_vocab(TokenizerVocab v) {
    const size_t n = v.tokens.size();
    if (n == 0) return Error{"the tokenizer has no tokens"};
    if (n > kMaxVocab)
        return Error{"the tokenizer has an absurd number of tokens (" + std::to_string(n) + ")"};
    if (!v.scores.empty() && v.scores.size() != n)
        return Error{"tokenizer.ggml.scores has " + std::to_string(v.scores.size()) +
                     " entries for " + std::to_string(n) + " tokens"};
    if (!v.token_types.empty() && v.token_types.size() != n)
        return Error{"tokenizer.ggml.token_type has " + std::to_string(v.token_types.size()) +
                     " entries for " + std::to_string(n) + " tokens"};
    for (auto [name, id] :
         {std::pair<const char*, int32_t>{"bos", v.bos}, {"eos", v.eos}, {"unknown", v.unk}})
        if (id < -1 || id >= static_cast<int32_t>(n))
            return Error{std::string("the tokenizer's ") + name + " token id " +
                         std::to_string(id) + " is outside its " + std::to_string(n) + " tokens"};
    if (v.scores.empty()) v.scores.assign(n, 0.0f);
    if (v.token_types.empty()) v.token_types.assign(n, static_cast<int32_t>(TokenType::kNormal));
    if (v.kind == TokenizerKind::kGpt2Bpe) {
        if (v.merges.empty()) return Error{"a gpt2 tokenizer needs tokenizer.ggml.merges"};
        return make_bpe_tokenizer(std::move(v));
    }
    return make_spm_tokenizer(std::move(v));
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const GgufFile& f) {
    auto model = f.get_string("tokenizer.ggml.model");
    if (!model) return model.error();
    TokenizerVocab v;
    if (model.value() == "llama")
        v.kind = TokenizerKind::kSentencePiece;
    else if (model.value() == "gpt2")
        v.kind = TokenizerKind::kGpt2Bpe;
    else
        return Error{f.path() + ": tokenizer '" + model.value() +
                     "' is not supported (llama, gpt2)"};
    auto tokens = f.get_string_array("tokenizer.ggml.tokens");
    if (!tokens) return tokens.error();
    v.tokens = *tokens.value();
    if (f.find("tokenizer.ggml.scores")) {
        auto s = f.get_number_array("tokenizer.ggml.scores");
        if (!s) return s.error();
        for (double x : *s.value())
            v.scores.push_back(static_cast<float>(x));
    }
    if (f.find("tokenizer.ggml.token_type")) {
        auto t = f.get_number_array("tokenizer.ggml.token_type");
        if (!t) return t.error();
        for (double x : *t.value())
            v.token_types.push_back(static_cast<int32_t>(x));
    }
    if (f.find("tokenizer.ggml.merges")) {
        auto m = f.get_string_array("tokenizer.ggml.merges");
        if (!m) return m.error();
        v.merges = *m.value();
    }
    auto id = [&](const char* key, int32_t fallback) -> Result<int32_t> {
        if (!f.find(key)) return fallback;
        auto x = f.get_uint(key);
        if (!x) return x.error();
        if (x.value() > kMaxVocab) return Error{f.path() + ": " + key + " is out of range"};
        return static_cast<int32_t>(x.value());
    };
    bool spm = v.kind == TokenizerKind::kSentencePiece;
    for (auto [key, out, fallback] : {std::tuple<const char*, int32_t*, int32_t>{
                                          "tokenizer.ggml.bos_token_id", &v.bos, spm ? 1 : -1},
                                      {"tokenizer.ggml.eos_token_id", &v.eos, spm ? 2 : -1},
                                      {"tokenizer.ggml.unknown_token_id", &v.unk, spm ? 0 : -1}}) {
        auto x = id(key, fallback);
        if (!x) return x.error();
        *out = x.value();
    }
    v.add_bos = spm;
    if (f.find("tokenizer.ggml.add_bos_token")) {
        auto b = f.get_bool("tokenizer.ggml.add_bos_token");
        if (!b) return b.error();
        v.add_bos = b.value();
    }
    v.add_space_prefix = spm;
    if (f.find("tokenizer.ggml.add_space_prefix")) {
        auto b = f.get_bool("tokenizer.ggml.add_space_prefix");
        if (!b) return b.error();
        v.add_space_prefix = b.value();
    }
    auto t = from_vocab(std::move(v));
    if (!t) return Error{f.path() + ": " + t.error().message};
    return t;
}

}  // namespace kvscope
