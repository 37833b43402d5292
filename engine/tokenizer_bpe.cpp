// See tokenizer_bpe.h. The pre-tokenizers work like llama.cpp's unicode_regex_split: a list of
// piece lengths (in code points) that each stage splits further; stages never look across a
// piece boundary, which counts as the end of the text.
#include "engine/tokenizer_bpe.h"

#include <algorithm>
#include <array>
#include <queue>

#include "engine/tokenizer_impl.h"
#include "engine/unicode_utf8.h"

namespace kvscope {

namespace {
using unicode::Category;

// Per code point: the classes the patterns test, computed once per fragment.
enum : uint8_t { kLetter = 1, kNumber = 2, kPunct = 4, kSpace = 8 };
struct CodePoints {
    std::vector<uint32_t> cps;
    std::vector<uint8_t> cls;
    explicit CodePoints(std::string_view text) : cps(unicode::decode(text)) {
        cls.reserve(cps.size());
        for (uint32_t cp : cps) {
            Category cat = unicode::category(cp);
            cls.push_back(static_cast<uint8_t>((cat == Category::kLetter ? kLetter : 0) |
                                               (cat == Category::kNumber ? kNumber : 0) |
                                               (cat == Category::kPunctuation ? kPunct : 0) |
                                               (unicode::is_whitespace(cp) ? kSpace : 0)));
        }
    }
};

// One piece [begin, end) of the code points, with the character tests the patterns use.
// Positions at or past `end` answer false / kNone: that is where the pattern's text ends.
struct Span {
    const CodePoints& text;
    size_t begin, end;
    static constexpr uint32_t kNone = 0xffffffff;

    bool in(size_t p) const { return p < end; }
    uint32_t cp(size_t p) const { return in(p) ? text.cps[p] : kNone; }
    bool is(size_t p, uint8_t cls) const { return in(p) && (text.cls[p] & cls) != 0; }
    bool letter(size_t p) const { return is(p, kLetter); }
    bool number(size_t p) const { return is(p, kNumber); }
    bool space(size_t p) const { return is(p, kSpace); }
    // [^\s\p{L}\p{N}]
    bool other(size_t p) const {
        return in(p) && (text.cls[p] & (kLetter | kNumber | kSpace)) == 0;
    }
};

// Collects piece lengths; each cut ends the current piece at `pos` (empty pieces are skipped).
struct Cutter {
    std::vector<size_t>& out;
    size_t last;
    void cut(size_t pos) {
        if (pos > last) out.push_back(pos - last);
        last = pos;
    }
};

bool is_cr_or_lf(uint32_t c) {
    return c == '\r' || c == '\n';
}
uint32_t ascii_lower(uint32_t c) {
    return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

// 's 't 'm 'd (2 code points) or 're 've 'll (3) at pos; 0 when none. llama3 ignores case; only
// ASCII capitals lowercase to these letters, in llama.cpp's tables too.
size_t contraction(const Span& s, size_t pos, bool any_case) {
    if (s.cp(pos) != '\'' || !s.in(pos + 1)) return 0;
    auto low = [&](size_t p) { return any_case ? ascii_lower(s.cp(p)) : s.cp(p); };
    uint32_t a = low(pos + 1);
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (!s.in(pos + 2)) return 0;
    uint32_t b = low(pos + 2);
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

// \s+(?!\S)|\s+ at pos, given n >= 1 whitespace characters there: a run followed by more text
// leaves its last character to start the next word.
size_t whitespace_end(const Span& s, size_t pos, size_t n) {
    return n > 1 && s.in(pos + n) ? pos + n - 1 : pos + n;
}

// 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
void split_gpt2(const Span& s, std::vector<size_t>& out) {
    Cutter c{out, s.begin};
    for (size_t pos = s.begin; pos < s.end;) {
        if (size_t n = contraction(s, pos, false)) {
            pos += n;
            c.cut(pos);
            continue;
        }
        const size_t q = s.cp(pos) == ' ' ? pos + 1 : pos;  // the optional leading space
        if (s.letter(q) || s.number(q) || s.other(q)) {
            bool (Span::*same)(size_t) const = s.letter(q)   ? &Span::letter
                                               : s.number(q) ? &Span::number
                                                             : &Span::other;
            pos = q;
            while ((s.*same)(pos))
                ++pos;
            c.cut(pos);
            continue;
        }
        size_t n = 0;
        while (s.space(pos + n))
            ++n;
        pos = n > 0 ? whitespace_end(s, pos, n) : pos + 1;
        c.cut(pos);
    }
}

// (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}|
//  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
void split_llama3(const Span& s, size_t max_digits, std::vector<size_t>& out) {
    Cutter c{out, s.begin};
    for (size_t pos = s.begin; pos < s.end;) {
        const uint32_t cp = s.cp(pos);
        if (size_t n = contraction(s, pos, true)) {
            pos += n;
            c.cut(pos);
            continue;
        }
        if (!is_cr_or_lf(cp) && !s.number(pos) && (s.letter(pos) || s.letter(pos + 1))) {
            ++pos;  // a letter, or the one non-letter allowed before the letters
            while (s.letter(pos))
                ++pos;
            c.cut(pos);
            continue;
        }
        if (s.number(pos)) {
            size_t group = pos;
            while (s.number(pos)) {
                if (++pos - group >= max_digits) {
                    c.cut(pos);
                    group = pos;
                }
            }
            c.cut(pos);
            continue;
        }
        // ' ?' then punctuation-like characters. As in llama.cpp, a space that ends the piece
        // also lands here and becomes a word of its own.
        const size_t q = cp == ' ' ? pos + 1 : pos;
        if (!s.space(q) && !s.letter(q) && !s.number(q)) {
            pos = q;
            while (s.other(pos))
                ++pos;
            while (is_cr_or_lf(s.cp(pos)))
                ++pos;
            c.cut(pos);
            continue;
        }
        size_t n = 0, after_last_newline = 0;
        while (s.space(pos + n)) {
            if (is_cr_or_lf(s.cp(pos + n))) after_last_newline = pos + n + 1;
            ++n;
        }
        if (after_last_newline > 0)
            pos = after_last_newline;  // \s*[\r\n]+
        else
            pos = n > 0 ? whitespace_end(s, pos, n) : pos + 1;
        c.cut(pos);
    }
}

// A std::regex-style split by a one-character class: every match of `cls+` (runs) or of `cls`
// (single characters) is a piece, and so is each stretch between matches.
template <class Pred>
void split_class(const Span& s, Pred member, bool runs, std::vector<size_t>& out) {
    Cutter c{out, s.begin};
    for (size_t pos = s.begin; pos < s.end;) {
        if (!member(s, pos)) {
            ++pos;
            continue;
        }
        c.cut(pos);
        ++pos;
        while (runs && pos < s.end && member(s, pos))
            ++pos;
        c.cut(pos);
    }
    c.cut(s.end);
}

// [0-9][0-9][0-9], matched left to right without overlap.
void split_digit_triples(const Span& s, std::vector<size_t>& out) {
    auto digit = [&](size_t p) { return s.cp(p) >= '0' && s.cp(p) <= '9'; };
    Cutter c{out, s.begin};
    for (size_t pos = s.begin; pos < s.end;) {
        if (digit(pos) && digit(pos + 1) && digit(pos + 2)) {
            c.cut(pos);
            pos += 3;
            c.cut(pos);
        } else {
            ++pos;
        }
    }
    c.cut(s.end);
}

// llama.cpp runs these classes as std::regex over a copy of the text where each code point
// >= 128 is replaced by a byte standing for its category (whitespace first), so beyond the
// category only the ASCII characters listed in the pattern are members.
bool punct_or(const Span& s, size_t p, std::string_view extra) {
    if (s.space(p)) return false;
    uint32_t cp = s.cp(p);
    return s.is(p, kPunct) || (cp < 128 && extra.find(static_cast<char>(cp)) != extra.npos);
}
bool number_not_space(const Span& s, size_t p) {
    return s.number(p) && !s.space(p);
}

// Piece lengths (code points) of the whole text for one pre-tokenizer.
std::vector<size_t> split_pieces(const CodePoints& text, BpePreTokenizer split) {
    std::vector<size_t> pieces{text.cps.size()};
    auto stage = [&](auto&& fn) {
        std::vector<size_t> next;
        next.reserve(pieces.size());
        size_t begin = 0;
        for (size_t len : pieces) {
            fn(Span{text, begin, begin + len}, next);
            begin += len;
        }
        pieces = std::move(next);
    };
    auto gpt2 = [](const Span& s, std::vector<size_t>& out) { split_gpt2(s, out); };
    auto punct_run = [](std::string_view extra) {
        return [extra](const Span& s, std::vector<size_t>& out) {
            split_class(
                s, [extra](const Span& t, size_t p) { return punct_or(t, p, extra); }, true, out);
        };
    };
    auto numbers = [](bool runs) {
        return [runs](const Span& s, std::vector<size_t>& out) {
            split_class(s, number_not_space, runs, out);
        };
    };
    auto triples = [](const Span& s, std::vector<size_t>& out) { split_digit_triples(s, out); };
    switch (split) {
        case BpePreTokenizer::kGpt2:
            stage(gpt2);
            break;
        case BpePreTokenizer::kLlama3:
        case BpePreTokenizer::kQwen2: {
            size_t max_digits = split == BpePreTokenizer::kLlama3 ? 3 : 1;
            stage([max_digits](const Span& s, std::vector<size_t>& out) {
                split_llama3(s, max_digits, out);
            });
            break;
        }
        case BpePreTokenizer::kDefault:
            stage(punct_run("$+<=>^~|"));
            stage(gpt2);
            stage(numbers(true));
            stage(triples);
            break;
        case BpePreTokenizer::kFalcon:
            stage(punct_run("$+<=>^~|`"));
            stage(gpt2);
            stage(triples);
            break;
        case BpePreTokenizer::kStarcoder:
            stage(numbers(false));
            stage(gpt2);
            break;
    }
    return pieces;
}

class BpeTokenizer final : public detail::VocabTokenizer {
  public:
    explicit BpeTokenizer(TokenizerVocab v) : VocabTokenizer(std::move(v)) {
        config_ = bpe_pre_config(v_.pre);
        if (!config_.supported)
            warnings_.push_back("pre-tokenizer '" + v_.pre +
                                "' is not implemented: using gpt-2's, so token ids may differ "
                                "from llama.cpp's");
        // llama.cpp splits a merge at its first space after the first character; a rule whose
        // halves contain a space can never apply (symbols never hold a raw space), so keeping
        // the whole line as the key, first occurrence winning, is equivalent.
        for (size_t r = 0; r < v_.merges.size(); ++r) {
            const std::string& m = v_.merges[r];
            if (m.find(' ', 1) == std::string::npos) continue;
            ranks_.emplace(m, static_cast<int32_t>(r));
        }
        for (int b = 0; b < 256; ++b) {
            std::string s;
            unicode::append_utf8(s, unicode::byte_to_codepoint(static_cast<uint8_t>(b)));
            byte_image_[static_cast<size_t>(b)] = std::move(s);
        }
    }

    TokenizerKind kind() const override { return TokenizerKind::kGpt2Bpe; }
    // llama.cpp's BPE never prefixes a space when encoding (add_space_prefix only makes its
    // detokenizer drop one), so there is none to strip.
    bool adds_space_prefix() const override { return false; }

    std::vector<int32_t> encode(std::string_view text, bool add_bos) const override {
        std::vector<int32_t> out;
        if (add_bos && v_.bos >= 0) out.push_back(v_.bos);
        if (text.empty()) return out;
        for (const Fragment& f : split_user_defined(text)) {
            if (f.token >= 0)
                out.push_back(f.token);
            else
                encode_fragment(text.substr(f.begin, f.size), out);
        }
        return out;
    }

    std::string decode_token(int32_t id) const override {
        switch (token_type(id)) {
            case TokenType::kUserDefined:
                return token_text(id);
            case TokenType::kNormal: {
                const std::string& t = token_text(id);
                std::string out;
                out.reserve(t.size());
                for (size_t pos = 0, len = 0; pos < t.size(); pos += len) {
                    uint32_t cp = unicode::decode_one(t, pos, len);
                    int b = unicode::codepoint_to_byte(cp);
                    if (b >= 0)
                        out += static_cast<char>(b);
                    else
                        unicode::append_utf8(out, cp);
                }
                return out;
            }
            default:  // llama.cpp gives byte tokens no text in a BPE vocabulary either
                return "";
        }
    }

  private:
    struct Symbol {
        ptrdiff_t prev, next;
        size_t begin, size;
    };
    struct Bigram {
        int32_t rank;
        ptrdiff_t left, right;
        size_t left_size, right_size;  // when queued; any change means it is stale
    };
    struct LowerPriority {
        bool operator()(const Bigram& a, const Bigram& b) const {
            return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
        }
    };

    void encode_fragment(std::string_view text, std::vector<int32_t>& out) const {
        const CodePoints cps(text);
        const std::vector<size_t> pieces = split_pieces(cps, config_.split);
        std::string word, utf8, key;
        std::vector<Symbol> sym;
        size_t begin = 0;
        for (size_t len : pieces) {
            utf8.clear();
            for (size_t k = begin; k < begin + len; ++k)
                unicode::append_utf8(utf8, cps.cps[k]);
            begin += len;
            word.clear();
            for (char ch : utf8)
                word += byte_image_[static_cast<unsigned char>(ch)];
            sym.clear();
            if (config_.ignore_merges && find(word) >= 0) {
                sym.push_back({-1, -1, 0, word.size()});
            } else {
                for (size_t i = 0; i < word.size();) {
                    size_t n =
                        std::min(unicode::sequence_length(static_cast<unsigned char>(word[i])),
                                 word.size() - i);
                    auto idx = static_cast<ptrdiff_t>(sym.size());
                    sym.push_back({idx - 1, i + n == word.size() ? -1 : idx + 1, i, n});
                    i += n;
                }
            }
            merge(word, sym, key);
            for (const Symbol& s : sym) {
                if (s.size == 0) continue;
                std::string_view piece = std::string_view(word).substr(s.begin, s.size);
                int32_t id = find(piece);
                if (id >= 0) {
                    out.push_back(id);
                    continue;
                }
                for (size_t k = 0; k < piece.size(); ++k) {
                    int32_t byte_id = find(piece.substr(k, 1));
                    if (byte_id >= 0) out.push_back(byte_id);
                }
            }
        }
    }

    // Merges adjacent symbols of one word, lowest rank first. Merged-away symbols keep size 0
    // and stay in place, so the vector stays in text order.
    void merge(std::string_view word, std::vector<Symbol>& sym, std::string& key) const {
        std::priority_queue<Bigram, std::vector<Bigram>, LowerPriority> queue;
        auto try_add = [&](ptrdiff_t left, ptrdiff_t right) {
            if (left < 0 || right < 0) return;
            const Symbol& l = sym[static_cast<size_t>(left)];
            const Symbol& r = sym[static_cast<size_t>(right)];
            key.assign(word.substr(l.begin, l.size));
            key += ' ';
            key.append(word.substr(r.begin, r.size));
            auto it = ranks_.find(std::string_view(key));
            if (it == ranks_.end()) return;
            queue.push({it->second, left, right, l.size, r.size});
        };
        for (size_t i = 1; i < sym.size(); ++i)
            try_add(static_cast<ptrdiff_t>(i) - 1, static_cast<ptrdiff_t>(i));
        while (!queue.empty()) {
            Bigram b = queue.top();
            queue.pop();
            Symbol& l = sym[static_cast<size_t>(b.left)];
            Symbol& r = sym[static_cast<size_t>(b.right)];
            // Sizes unchanged means the same text: symbols never move, and the left one can only
            // grow by swallowing the right one.
            if (l.size == 0 || r.size == 0 || l.size != b.left_size || r.size != b.right_size)
                continue;
            l.size += r.size;
            r.size = 0;
            l.next = r.next;
            if (r.next >= 0) sym[static_cast<size_t>(r.next)].prev = b.left;
            try_add(l.prev, b.left);
            try_add(b.left, l.next);
        }
    }

    BpePreConfig config_;
    detail::StringMap<int32_t> ranks_;         // "left right" -> rank
    std::array<std::string, 256> byte_image_;  // UTF-8 of each byte's printable code point
};
}  // namespace

BpePreConfig bpe_pre_config(std::string_view pre) {
    auto any_of = [&](std::initializer_list<std::string_view> names) {
        return std::find(names.begin(), names.end(), pre) != names.end();
    };
    BpePreConfig c;
    if (pre.empty() || pre == "default") {
        c.split = BpePreTokenizer::kDefault;
    } else if (any_of({"llama3", "llama-v3", "llama-bpe", "falcon3"})) {
        c.split = BpePreTokenizer::kLlama3;
        c.ignore_merges = true;
        c.add_bos = true;
    } else if (any_of({"dbrx", "smaug-bpe", "chatglm-bpe"})) {
        c.split = BpePreTokenizer::kLlama3;
        c.has_bos = pre != "chatglm-bpe";
    } else if (any_of({"qwen2", "deepseek-r1-qwen", "megrez", "stablelm2"})) {
        c.split = BpePreTokenizer::kQwen2;
    } else if (pre == "falcon") {
        c.split = BpePreTokenizer::kFalcon;
    } else if (any_of({"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone",
                       "minerva-7b"})) {
        c.split = BpePreTokenizer::kStarcoder;
    } else if (any_of({"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v1-en",
                       "jina-v2-es", "jina-v2-de", "jina-v2-code", "roberta-bpe", "mpt", "olmo",
                       "jais"})) {
        c.split = BpePreTokenizer::kGpt2;
    } else {
        c.supported = false;
    }
    return c;
}

std::vector<std::string> bpe_split_words(std::string_view text, BpePreTokenizer split) {
    const CodePoints cps(text);
    std::vector<std::string> words;
    size_t begin = 0;
    for (size_t len : split_pieces(cps, split)) {
        std::string w;
        for (size_t k = begin; k < begin + len; ++k)
            unicode::append_utf8(w, cps.cps[k]);
        words.push_back(std::move(w));
        begin += len;
    }
    return words;
}

std::unique_ptr<Tokenizer> make_bpe_tokenizer(TokenizerVocab vocab) {
    return std::make_unique<BpeTokenizer>(std::move(vocab));
}

}  // namespace kvscope
