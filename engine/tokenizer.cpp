// Tokenizer construction (from GGUF metadata or plain data), checks, and what the SentencePiece
// and BPE tokenizers share (tokenizer_impl.h).
#include "engine/tokenizer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "base/terminal_text.h"
#include "engine/gguf_file.h"
#include "engine/tokenizer_bpe.h"
#include "engine/tokenizer_impl.h"
#include "engine/tokenizer_spm.h"

namespace kvscope {

namespace {
// Far beyond any real vocabulary (the largest are ~256k tokens) and the GGUF reader's array
// limit; the point is a one-line error instead of a huge allocation.
constexpr size_t kMaxVocab = size_t{1} << 24;
constexpr size_t kMaxMerges = size_t{1} << 24;
constexpr size_t kMaxTokenBytes = 65536;

// Token texts llama.cpp turns into control tokens whatever the file says (end-of-generation and
// fill-in-the-middle markers, found by text in llama_vocab::impl::load). llama.cpp does this for
// the end-of-generation ones always and for the others when their id key is absent, taking the
// first it meets; kvscope takes them all.
// clang-format off
constexpr std::string_view kForcedControl[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>",
    "<|eom_id|>",
    "<|fim_prefix|>", "<fim-prefix>", "<PRE>", "<|fim_suffix|>", "<fim-suffix>", "<SUF>",
    "<|fim_middle|>", "<fim-middle>", "<MID>", "<|fim_pad|>", "<fim-pad>", "<PAD>",
    "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<|file_sep|>",
    // DeepSeek's, spelled with U+FF5C (fullwidth bar) and U+2581
    "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
    "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>",
    "<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>",
    "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>",
};
// clang-format on

std::string count_message(const char* key, size_t got, size_t tokens) {
    return std::string(key) + " has " + std::to_string(got) + " entries for " +
           std::to_string(tokens) + " tokens";
}
}  // namespace

// [SECTION] Shared vocabulary

namespace detail {

VocabTokenizer::VocabTokenizer(TokenizerVocab v) : v_(std::move(v)) {
    ids_.reserve(v_.tokens.size());
    for (size_t i = 0; i < v_.tokens.size(); ++i)
        ids_.emplace(v_.tokens[i], static_cast<int32_t>(i));
    for (std::string_view name : kForcedControl) {
        int32_t id = find(name);
        if (id >= 0)
            v_.token_types[static_cast<size_t>(id)] = static_cast<int32_t>(TokenType::kControl);
    }
    for (size_t i = 0; i < v_.tokens.size(); ++i)
        if (token_type(static_cast<int32_t>(i)) == TokenType::kUserDefined)
            user_defined_.push_back(static_cast<int32_t>(i));
    // llama.cpp sorts by length only (std::sort); equal lengths keep id order here.
    std::stable_sort(user_defined_.begin(), user_defined_.end(), [&](int32_t a, int32_t b) {
        return v_.tokens[static_cast<size_t>(a)].size() > v_.tokens[static_cast<size_t>(b)].size();
    });
}

const std::string& VocabTokenizer::token_text(int32_t id) const {
    static const std::string kNone;
    return id >= 0 && id < vocab_size() ? v_.tokens[static_cast<size_t>(id)] : kNone;
}

TokenType VocabTokenizer::token_type(int32_t id) const {
    if (id < 0 || id >= vocab_size()) return TokenType::kUndefined;
    int32_t t = v_.token_types[static_cast<size_t>(id)];
    return t >= 0 && t <= static_cast<int32_t>(TokenType::kByte) ? static_cast<TokenType>(t)
                                                                 : TokenType::kUndefined;
}

std::vector<VocabTokenizer::Fragment> VocabTokenizer::split_user_defined(
    std::string_view text) const {
    std::vector<Fragment> frags{{0, text.size(), -1}};
    std::vector<Fragment> next;
    for (int32_t id : user_defined_) {
        std::string_view special = v_.tokens[static_cast<size_t>(id)];
        next.clear();
        for (const Fragment& f : frags) {
            if (f.token >= 0) {
                next.push_back(f);
                continue;
            }
            size_t pos = f.begin;
            const size_t end = f.begin + f.size;
            for (;;) {
                size_t hit = text.substr(0, end).find(special, pos);
                if (hit == std::string_view::npos) break;
                if (hit > pos) next.push_back({pos, hit - pos, -1});
                next.push_back({hit, special.size(), id});
                pos = hit + special.size();
            }
            if (pos < end) next.push_back({pos, end - pos, -1});
        }
        frags.swap(next);
    }
    return frags;
}

}  // namespace detail

// [SECTION] Decoding

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
    std::string out;
    for (int32_t id : ids)
        out += decode_token(id);
    return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool strip_space_prefix) const {
    if (!strip_space_prefix) return decode(ids);
    size_t first = !ids.empty() && bos() >= 0 && ids[0] == bos() ? 1 : 0;
    std::string out;
    for (size_t i = first; i < ids.size(); ++i) {
        std::string piece = decode_token(ids[i]);
        // Only the first piece can carry the prefix (llama_detokenize's lstrip of one space).
        if (i == first && adds_space_prefix() && !piece.empty() && piece[0] == ' ')
            piece.erase(0, 1);
        out += piece;
    }
    return out;
}

// [SECTION] Construction

size_t Tokenizer::longest_token_bytes() const {
    if (longest_token_bytes_ == 0) {
        size_t longest = 1;
        for (int32_t id = 0; id < vocab_size(); ++id)
            longest = std::max(longest, token_text(id).size());
        longest_token_bytes_ = longest;
    }
    return longest_token_bytes_;
}

Status Tokenizer::check_fits(std::string_view text, int32_t max_tokens,
                             const std::string& what) const {
    // +1: the SentencePiece space prefix adds a byte of its own.
    const size_t limit = static_cast<size_t>(std::max(max_tokens, 0)) * longest_token_bytes() + 1;
    if (text.size() <= limit) return {};
    return Error{what + " is " + std::to_string(text.size()) +
                 " bytes, more than the model's context of " + std::to_string(max_tokens) +
                 " tokens can hold (at most " + std::to_string(limit) + " bytes)"};
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_vocab(TokenizerVocab v) {
    if (v.kind != TokenizerKind::kSentencePiece && v.kind != TokenizerKind::kGpt2Bpe)
        return Error{"unknown tokenizer kind " + std::to_string(static_cast<int>(v.kind))};
    const size_t n = v.tokens.size();
    if (n == 0) return Error{"tokenizer.ggml.tokens is empty"};
    if (n > kMaxVocab)
        return Error{"tokenizer.ggml.tokens has " + std::to_string(n) + " tokens, more than " +
                     std::to_string(kMaxVocab)};
    if (!v.scores.empty() && v.scores.size() != n)
        return Error{count_message("tokenizer.ggml.scores", v.scores.size(), n)};
    if (!v.token_types.empty() && v.token_types.size() != n)
        return Error{count_message("tokenizer.ggml.token_type", v.token_types.size(), n)};
    if (v.merges.size() > kMaxMerges)
        return Error{"tokenizer.ggml.merges has " + std::to_string(v.merges.size()) +
                     " entries, more than " + std::to_string(kMaxMerges)};
    for (size_t i = 0; i < v.scores.size(); ++i)
        if (std::isnan(v.scores[i]))
            return Error{"tokenizer.ggml.scores[" + std::to_string(i) + "] is not a number"};
    for (auto [key, id] : {std::pair<const char*, int32_t>{"tokenizer.ggml.bos_token_id", v.bos},
                           {"tokenizer.ggml.eos_token_id", v.eos},
                           {"tokenizer.ggml.unknown_token_id", v.unk}})
        if (id < -1 || id >= static_cast<int64_t>(n))
            return Error{std::string(key) + " " + std::to_string(id) + " is outside the " +
                         std::to_string(n) + " tokens"};
    // llama.cpp renames empty tokens (they could never match text) and aborts on duplicate
    // texts; refusing them here keeps every text -> id lookup unambiguous. An empty token is
    // only a placeholder where its type says so (control, unknown, unused, undefined): a normal,
    // byte or user-defined token without text is a broken vocabulary.
    detail::StringMap<size_t> seen;
    seen.reserve(n);
    for (size_t i = 0; i < n; ++i) {
        std::string& t = v.tokens[i];
        if (t.size() > kMaxTokenBytes)
            return Error{"tokenizer.ggml.tokens[" + std::to_string(i) + "] is " +
                         std::to_string(t.size()) + " bytes long, more than " +
                         std::to_string(kMaxTokenBytes)};
        if (t.empty()) {
            auto type =
                v.token_types.empty() ? static_cast<int32_t>(TokenType::kNormal) : v.token_types[i];
            if (type == static_cast<int32_t>(TokenType::kNormal) ||
                type == static_cast<int32_t>(TokenType::kByte) ||
                type == static_cast<int32_t>(TokenType::kUserDefined))
                return Error{"tokenizer.ggml.tokens[" + std::to_string(i) +
                             "] is empty: a token of this type must have text"};
            t = "[EMPTY_" + std::to_string(i) + "]";
        }
        auto [it, fresh] = seen.emplace(t, i);
        if (!fresh)
            return Error{"tokenizer.ggml.tokens has " + quote_for_message(t) + " twice (ids " +
                         std::to_string(it->second) + " and " + std::to_string(i) + ")"};
    }
    // Every BPE merge is "left right": two tokens of the vocabulary, one space between.
    for (size_t r = 0; r < v.merges.size(); ++r) {
        const std::string& m = v.merges[r];
        auto where = [&] {
            return "tokenizer.ggml.merges[" + std::to_string(r) + "] " + quote_for_message(m);
        };
        if (m.empty()) return Error{"tokenizer.ggml.merges[" + std::to_string(r) + "] is empty"};
        size_t space = m.find(' ', 1);
        if (space == std::string::npos || space + 1 >= m.size())
            return Error{where() + " is not two tokens separated by a space"};
        for (std::string_view part :
             {std::string_view(m).substr(0, space), std::string_view(m).substr(space + 1)})
            if (!seen.count(std::string(part)))
                return Error{where() + " names " + quote_for_message(std::string(part)) +
                             ", which is not a token of the vocabulary"};
    }
    if (v.scores.empty()) v.scores.assign(n, 0.0f);
    if (v.token_types.empty()) v.token_types.assign(n, static_cast<int32_t>(TokenType::kNormal));
    if (v.kind == TokenizerKind::kGpt2Bpe) return make_bpe_tokenizer(std::move(v));
    return make_spm_tokenizer(std::move(v));
}

Result<std::unique_ptr<Tokenizer>> Tokenizer::from_gguf(const GgufFile& f) {
    auto fail = [&](const std::string& what) { return Error{f.path() + ": " + what}; };
    auto model = f.get_string("tokenizer.ggml.model");
    if (!model) return model.error();
    TokenizerVocab v;
    if (model.value() == "llama")
        v.kind = TokenizerKind::kSentencePiece;
    else if (model.value() == "gpt2")
        v.kind = TokenizerKind::kGpt2Bpe;
    else
        return fail("tokenizer.ggml.model " + quote_for_message(model.value()) +
                    " is not supported (kvscope reads 'llama' and 'gpt2')");
    const bool spm = v.kind == TokenizerKind::kSentencePiece;

    auto tokens = f.get_string_array("tokenizer.ggml.tokens");
    if (!tokens) return tokens.error();
    v.tokens = *tokens.value();
    const size_t n = v.tokens.size();
    if (f.find("tokenizer.ggml.scores")) {
        auto s = f.get_number_array("tokenizer.ggml.scores");
        if (!s) return s.error();
        v.scores.reserve(s.value()->size());
        for (double x : *s.value()) {
            // Out of float range saturates to infinity rather than being undefined behaviour.
            constexpr double kMax = std::numeric_limits<float>::max();
            v.scores.push_back(x > kMax    ? std::numeric_limits<float>::infinity()
                               : x < -kMax ? -std::numeric_limits<float>::infinity()
                                           : static_cast<float>(x));
        }
    }
    if (f.find("tokenizer.ggml.token_type")) {
        auto t = f.get_number_array("tokenizer.ggml.token_type");
        if (!t) return t.error();
        v.token_types.reserve(t.value()->size());
        for (size_t i = 0; i < t.value()->size(); ++i) {
            double x = (*t.value())[i];
            if (!(x >= std::numeric_limits<int32_t>::min() &&
                  x <= std::numeric_limits<int32_t>::max() && x == std::floor(x)))
                return fail("tokenizer.ggml.token_type[" + std::to_string(i) +
                            "] is not a 32-bit integer");
            v.token_types.push_back(static_cast<int32_t>(x));
        }
    }

    if (!spm) {
        // llama.cpp refuses a gpt2 vocabulary without merges (an empty list is allowed).
        auto m = f.get_string_array("tokenizer.ggml.merges");
        if (!m) return m.error();
        v.merges = *m.value();
        if (f.find("tokenizer.ggml.pre")) {
            auto pre = f.get_string("tokenizer.ggml.pre");
            if (!pre) return pre.error();
            v.pre = pre.value();
        }
    }
    const BpePreConfig pre = bpe_pre_config(v.pre);

    // Special ids: llama.cpp's defaults when the key is absent (SentencePiece 1 / 2 / 0, GPT-2
    // BPE 11 / 11 / none), dropped if the vocabulary is too small for them. A key that is present
    // must name a token.
    auto read_id = [&](const char* key, int32_t fallback) -> Result<int32_t> {
        if (!f.find(key)) return fallback >= 0 && static_cast<size_t>(fallback) < n ? fallback : -1;
        auto x = f.get_uint(key);
        if (!x) return x.error();
        if (x.value() >= n)
            return fail(std::string(key) + " " + std::to_string(x.value()) + " is outside the " +
                        std::to_string(n) + " tokens");
        return static_cast<int32_t>(x.value());
    };
    for (auto [key, out, fallback] :
         {std::tuple<const char*, int32_t*, int32_t>{"tokenizer.ggml.bos_token_id", &v.bos,
                                                     spm           ? 1
                                                     : pre.has_bos ? 11
                                                                   : -1},
          {"tokenizer.ggml.eos_token_id", &v.eos, spm ? 2 : 11},
          {"tokenizer.ggml.unknown_token_id", &v.unk, spm ? 0 : -1}}) {
        auto x = read_id(key, fallback);
        if (!x) return x.error();
        *out = x.value();
    }

    auto read_bool = [&](const char* key, bool fallback) -> Result<bool> {
        if (!f.find(key)) return fallback;
        return f.get_bool(key);
    };
    auto add_bos = read_bool("tokenizer.ggml.add_bos_token", spm || pre.add_bos);
    if (!add_bos) return add_bos.error();
    v.add_bos = add_bos.value();
    auto add_space = read_bool("tokenizer.ggml.add_space_prefix", spm);
    if (!add_space) return add_space.error();
    v.add_space_prefix = add_space.value();

    auto t = from_vocab(std::move(v));
    if (!t) return fail(t.error().message);
    return t;
}

}  // namespace kvscope
