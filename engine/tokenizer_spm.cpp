// See tokenizer_spm.h.
#include "engine/tokenizer_spm.h"

#include <algorithm>
#include <array>
#include <cstdio>

#include "engine/tokenizer_impl.h"
#include "engine/unicode_utf8.h"

namespace kvscope {

namespace {
constexpr std::string_view kSpaceMark = "\xe2\x96\x81";  // U+2581, SentencePiece's space

class SpmTokenizer final : public detail::VocabTokenizer {
  public:
    explicit SpmTokenizer(TokenizerVocab v) : VocabTokenizer(std::move(v)) {
        int missing = 0;
        for (int b = 0; b < 256; ++b) {
            char name[8];
            std::snprintf(name, sizeof name, "<0x%02X>", b);  // llama.cpp spells them uppercase
            int32_t id = find(name);
            if (id < 0) id = find(std::string(1, static_cast<char>(b)));
            if (id < 0) ++missing;
            byte_token_[static_cast<size_t>(b)] = id >= 0 ? id : v_.unk;
        }
        words_merge_apart_ = std::none_of(v_.tokens.begin(), v_.tokens.end(),
                                          [](const std::string& t) { return joins_words(t); });
        // llama.cpp would throw when it meets such a byte; kvscope substitutes unk.
        if (missing > 0)
            warnings_.push_back(std::to_string(missing) +
                                " bytes have no token (<0xXX> or the byte itself): text with "
                                "them gets " +
                                (v_.unk >= 0 ? "the unknown token" : "nothing") + " instead");
    }

    TokenizerKind kind() const override { return TokenizerKind::kSentencePiece; }
    bool adds_space_prefix() const override { return v_.add_space_prefix; }

    std::vector<int32_t> encode(std::string_view text, bool add_bos) const override {
        std::vector<int32_t> out;
        if (add_bos && v_.bos >= 0) out.push_back(v_.bos);
        if (text.empty()) return out;
        bool after_special = true;  // the first fragment counts as following a special token
        std::string escaped;
        MergeScratch scratch;
        for (const Fragment& f : split_user_defined(text)) {
            if (f.token >= 0) {
                out.push_back(f.token);
                after_special = true;
                continue;
            }
            const std::string_view fragment = text.substr(f.begin, f.size);
            const bool prefix = v_.add_space_prefix && after_special;
            auto encode_words = [&](size_t begin, size_t end) {
                escaped.clear();
                if (prefix && begin == 0) escaped = kSpaceMark;
                for (char c : fragment.substr(begin, end - begin)) {
                    if (c == ' ')
                        escaped += kSpaceMark;
                    else
                        escaped += c;
                }
                encode_fragment(escaped, out, scratch);
            };
            // Word by word when no merge can cross a word's start (words_merge_apart_): the
            // same tokens, but merging a 50 MB text as one piece held 2.7 GB of symbols and
            // bigrams and took 113 s in one huge heap. A word starts at a space whose mark
            // begins a symbol (a stray UTF-8 lead byte before it may have swallowed part of
            // it) and does not continue a run of marks (spaces, or a U+2581 in the text).
            size_t begin = 0;
            if (words_merge_apart_) {
                size_t at = prefix ? kSpaceMark.size() : 0;  // the char's offset, escaped
                size_t next_symbol = at;                     // where the next symbol starts
                for (size_t i = 0; i < fragment.size(); ++i) {
                    const bool space = fragment[i] == ' ';
                    if (space && i > 0 && at == next_symbol && fragment[i - 1] != ' ' &&
                        (i < kSpaceMark.size() ||
                         fragment.substr(i - kSpaceMark.size(), kSpaceMark.size()) != kSpaceMark)) {
                        encode_words(begin, i);
                        begin = i;
                    }
                    const size_t width = space ? kSpaceMark.size() : 1;
                    while (next_symbol < at + width) {
                        const char lead = space ? kSpaceMark[next_symbol - at] : fragment[i];
                        next_symbol += unicode::sequence_length(static_cast<unsigned char>(lead));
                    }
                    at += width;
                }
            }
            encode_words(begin, fragment.size());
            after_special = false;
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
                for (size_t i = 0; i < t.size();) {
                    if (std::string_view(t).substr(i, kSpaceMark.size()) == kSpaceMark) {
                        out += ' ';
                        i += kSpaceMark.size();
                    } else {
                        out += t[i++];
                    }
                }
                return out;
            }
            case TokenType::kByte: {
                // llama.cpp reads the two hex digits of "<0xXX>"; a byte token spelled otherwise
                // gives nothing here (llama.cpp would read garbage or throw).
                const std::string& t = token_text(id);
                unsigned value = 0;
                if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>' &&
                    std::sscanf(t.c_str() + 3, "%2x", &value) == 1)
                    return std::string(1, static_cast<char>(value));
                return "";
            }
            default:  // control, unknown, unused, undefined: nothing, as with special = false
                return "";
        }
    }

  private:
    // Symbols form a doubly linked list over the characters of the fragment; merging grows the
    // left symbol and empties the right one.
    struct Symbol {
        ptrdiff_t prev, next;
        size_t begin, size;
    };
    struct Bigram {
        float score;
        ptrdiff_t left, right;
        size_t size;  // bytes of the merged piece when queued; a change means it is stale
    };
    struct LowerPriority {
        bool operator()(const Bigram& a, const Bigram& b) const {
            return a.score < b.score || (a.score == b.score && a.left > b.left);
        }
    };

    // Reused from one piece of text to the next.
    struct MergeScratch {
        std::vector<Symbol> sym;
        std::vector<Bigram> queue;  // a heap ordered by LowerPriority
    };

    // Whether `token` could be merged across the start of a word: it holds a space mark, past
    // its start, that does not continue a run of space marks. Tokens such as "▁the" and "▁▁▁"
    // cannot; with none that can, a text splits before each run of spaces into pieces that
    // merge alone exactly as they would together (no bigram across the split is a token).
    static bool joins_words(std::string_view token) {
        for (size_t at = token.find(kSpaceMark, 1); at != std::string_view::npos;
             at = token.find(kSpaceMark, at + 1))
            if (at < kSpaceMark.size() ||
                token.substr(at - kSpaceMark.size(), kSpaceMark.size()) != kSpaceMark)
                return true;
        return false;
    }

    void encode_fragment(std::string_view text, std::vector<int32_t>& out,
                         MergeScratch& scratch) const {
        std::vector<Symbol>& sym = scratch.sym;
        sym.clear();
        for (size_t i = 0; i < text.size();) {
            size_t len = std::min(unicode::sequence_length(static_cast<unsigned char>(text[i])),
                                  text.size() - i);
            auto idx = static_cast<ptrdiff_t>(sym.size());
            sym.push_back({idx - 1, i + len == text.size() ? -1 : idx + 1, i, len});
            i += len;
        }
        // A heap by hand (what std::priority_queue does, on storage kept between pieces).
        std::vector<Bigram>& queue = scratch.queue;
        queue.clear();
        auto try_add = [&](ptrdiff_t left, ptrdiff_t right) {
            if (left < 0 || right < 0) return;
            const Symbol& l = sym[static_cast<size_t>(left)];
            size_t size = l.size + sym[static_cast<size_t>(right)].size;
            int32_t id = find(text.substr(l.begin, size));
            if (id < 0) return;
            queue.push_back({v_.scores[static_cast<size_t>(id)], left, right, size});
            std::push_heap(queue.begin(), queue.end(), LowerPriority{});
        };
        for (size_t i = 1; i < sym.size(); ++i)
            try_add(static_cast<ptrdiff_t>(i) - 1, static_cast<ptrdiff_t>(i));
        while (!queue.empty()) {
            std::pop_heap(queue.begin(), queue.end(), LowerPriority{});
            Bigram b = queue.back();
            queue.pop_back();
            Symbol& l = sym[static_cast<size_t>(b.left)];
            Symbol& r = sym[static_cast<size_t>(b.right)];
            if (l.size == 0 || r.size == 0 || l.size + r.size != b.size) continue;
            l.size += r.size;
            r.size = 0;
            l.next = r.next;
            if (r.next >= 0) sym[static_cast<size_t>(r.next)].prev = b.left;
            try_add(l.prev, b.left);
            try_add(b.left, l.next);
        }
        // llama.cpp's resegment() would split a non-token symbol along its merge history, but
        // every merge makes a token, so a non-token symbol is always a single character: its
        // bytes are all there is to emit.
        if (sym.empty()) return;
        for (ptrdiff_t i = 0; i >= 0; i = sym[static_cast<size_t>(i)].next) {
            const Symbol& s = sym[static_cast<size_t>(i)];
            std::string_view piece = text.substr(s.begin, s.size);
            int32_t id = find(piece);
            if (id >= 0) {
                out.push_back(id);
                continue;
            }
            for (char c : piece) {
                int32_t byte_id = byte_token_[static_cast<unsigned char>(c)];
                if (byte_id >= 0) out.push_back(byte_id);
            }
        }
    }

    // Token for each byte: <0xXX>, else the one-byte token, else unk (-1 when none).
    std::array<int32_t, 256> byte_token_{};
    bool words_merge_apart_ = false;  // no token joins_words(): texts merge word by word
};
}  // namespace

std::unique_ptr<Tokenizer> make_spm_tokenizer(TokenizerVocab vocab) {
    return std::make_unique<SpmTokenizer>(std::move(vocab));
}

}  // namespace kvscope
