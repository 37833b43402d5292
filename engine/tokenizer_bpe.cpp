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
bool letter_not_space(const Span& s, size_t p) {
    return s.letter(p) && !s.space(p);
}
bool punct_not_space(const Span& s, size_t p) {
    return s.is(p, kPunct) && !s.space(p);
}

// \s?C+ for a class C that holds no whitespace, as std::regex finds it: a match starts at the
// first position where C starts, or one whitespace character before that, and runs while C lasts.
template <class Pred>
void split_space_then_run(const Span& s, Pred member, std::vector<size_t>& out) {
    Cutter c{out, s.begin};
    for (size_t pos = s.begin; pos < s.end;) {
        const size_t start = pos;
        if (s.space(pos) && member(s, pos + 1)) {
            ++pos;
        } else if (!member(s, pos)) {
            ++pos;
            continue;
        }
        while (member(s, pos))
            ++pos;
        c.cut(start);
        c.cut(pos);
    }
    c.cut(s.end);
}

// \s+$: the whitespace that ends the piece.
void split_trailing_space(const Span& s, std::vector<size_t>& out) {
    size_t first = s.end;
    while (first > s.begin && s.space(first - 1))
        --first;
    Cutter c{out, s.begin};
    c.cut(first);
    c.cut(s.end);
}

// Inclusive code point ranges, ascending, for the bracket expressions DeepSeek's patterns spell
// out literally.
struct CodeRange {
    uint32_t first, last;
};
template <size_t N>
bool in_ranges(const CodeRange (&ranges)[N], uint32_t cp) {
    auto it = std::upper_bound(std::begin(ranges), std::end(ranges), cp,
                               [](uint32_t c, const CodeRange& r) { return c < r.first; });
    return it != std::begin(ranges) && cp <= (it - 1)->last;
}

// deepseek-llm's [A-Za-z\u00b5\u00c0-\u00d6...\U0001e900-\U0001e943]: the cased letters (not CJK,
// Arabic, Hebrew, Devanagari...: later stages take those or leave them be). The ranges as
// llama.cpp's pattern writes them, merged where they touch; std::wregex compares code point
// values. Written as numbers: the pattern's literal characters do not survive Unicode
// normalization by editors (U+1F7D turns into U+03CE).
// clang-format off
constexpr CodeRange kDeepseekLetters[] = {
    {0x0041, 0x005a}, {0x0061, 0x007a}, {0x00b5, 0x00b5}, {0x00c0, 0x00d6}, {0x00d8, 0x00f6},
    {0x00f8, 0x01ba}, {0x01bc, 0x01bf}, {0x01c4, 0x0293}, {0x0295, 0x02af}, {0x0370, 0x0373},
    {0x0376, 0x0377}, {0x037b, 0x037d}, {0x037f, 0x037f}, {0x0386, 0x0386}, {0x0388, 0x038a},
    {0x038c, 0x038c}, {0x038e, 0x03a1}, {0x03a3, 0x03f5}, {0x03f7, 0x0481}, {0x048a, 0x052f},
    {0x0531, 0x0556}, {0x10a0, 0x10c5}, {0x13a0, 0x13f5}, {0x13f8, 0x13fd}, {0x1c90, 0x1cba},
    {0x1cbd, 0x1cbf}, {0x1d00, 0x1d2b}, {0x1d6b, 0x1d77}, {0x1d79, 0x1d9a}, {0x1e00, 0x1f15},
    {0x1f18, 0x1f1d}, {0x1f20, 0x1f45}, {0x1f48, 0x1f4d}, {0x1f50, 0x1f57}, {0x1f59, 0x1f59},
    {0x1f5b, 0x1f5b}, {0x1f5d, 0x1f5d}, {0x1f5f, 0x1f7d}, {0x1f80, 0x1fb4}, {0x1fb6, 0x1fbc},
    {0x1fbe, 0x1fbe}, {0x1fc2, 0x1fc4}, {0x1fc6, 0x1fcc}, {0x1fd0, 0x1fd3}, {0x1fd6, 0x1fdb},
    {0x1fe0, 0x1fec}, {0x1ff2, 0x1ff4}, {0x1ff6, 0x1ffc}, {0x2102, 0x2102}, {0x2107, 0x2107},
    {0x210a, 0x2113}, {0x2115, 0x2115}, {0x2119, 0x211d}, {0x2124, 0x2124}, {0x2126, 0x2126},
    {0x2128, 0x2128}, {0x212a, 0x212d}, {0x212f, 0x2134}, {0x2139, 0x2139}, {0x213c, 0x213f},
    {0x2145, 0x2149}, {0x214e, 0x214e}, {0x2183, 0x2184}, {0x2c00, 0x2c7b}, {0x2c7e, 0x2ce4},
    {0x2ceb, 0x2cee}, {0x2cf2, 0x2cf3}, {0xa640, 0xa66d}, {0xa680, 0xa69b}, {0xa722, 0xa76f},
    {0xa771, 0xa787}, {0xa78b, 0xa78e}, {0xab70, 0xabbf}, {0xfb00, 0xfb06}, {0xfb13, 0xfb17},
    {0xff21, 0xff3a}, {0xff41, 0xff5a}, {0x10400, 0x1044f}, {0x104b0, 0x104d3},
    {0x104d8, 0x104fb}, {0x10c80, 0x10cb2}, {0x10cc0, 0x10cf2}, {0x118a0, 0x118df},
    {0x1e900, 0x1e943},
};
// clang-format on
// deepseek-llm's [!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]. ':-~' spans the
// ASCII letters too, so this stage cuts ASCII letters away from the non-ASCII letters the stage
// before joined them with: "F\u00fchrer" becomes "F" "\u00fc" "hrer".
constexpr CodeRange kDeepseekPunct[] = {{0x0021, 0x002f}, {0x003a, 0x007e}, {0x2018, 0x201f},
                                        {0x3000, 0x3002}, {0xff01, 0xff0f}, {0xff1a, 0xff5e}};
// Both DeepSeek patterns' [\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]: U+0800..U+9FA5 (far more
// than CJK) and the Hangul syllables.
constexpr CodeRange kDeepseekCjk[] = {{0x0800, 0x9fa5}, {0xac00, 0xd7ff}};

// llama.cpp runs the patterns without \p{..} through std::wregex on the code points, with every
// non-ASCII whitespace character replaced by U+000B first: the whitespace inside these ranges
// (U+3000; U+1680, U+2000..U+200A, U+2028... below U+9FA5) is never a member.
template <size_t N>
auto listed(const CodeRange (&ranges)[N]) {
    return [&ranges](const Span& s, size_t p) {
        return s.in(p) && !s.space(p) && in_ranges(ranges, s.cp(p));
    };
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
    auto newlines = [](const Span& s, std::vector<size_t>& out) {
        split_class(
            s, [](const Span& t, size_t p) { return is_cr_or_lf(t.cp(p)); }, false, out);
    };
    auto space_then_run = [](auto member) {
        return [member](const Span& s, std::vector<size_t>& out) {
            split_space_then_run(s, member, out);
        };
    };
    auto runs_of = [](auto member) {
        return [member](const Span& s, std::vector<size_t>& out) {
            split_class(s, member, true, out);
        };
    };
    auto trailing_space = [](const Span& s, std::vector<size_t>& out) {
        split_trailing_space(s, out);
    };
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
        case BpePreTokenizer::kDeepseekLlm:
            stage(newlines);
            stage(space_then_run(listed(kDeepseekLetters)));
            stage(space_then_run(listed(kDeepseekPunct)));
            stage(trailing_space);
            stage(runs_of(listed(kDeepseekCjk)));
            stage(numbers(true));
            break;
        case BpePreTokenizer::kDeepseekCoder:
            stage(newlines);
            stage(space_then_run(letter_not_space));
            stage(space_then_run(punct_not_space));
            stage(runs_of(listed(kDeepseekCjk)));
            stage(numbers(false));
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
    } else if (pre == "deepseek-llm") {
        c.split = BpePreTokenizer::kDeepseekLlm;
    } else if (pre == "deepseek-coder") {
        c.split = BpePreTokenizer::kDeepseekCoder;
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
