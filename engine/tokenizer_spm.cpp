// SentencePiece-style tokenizer ("llama" in GGUF), behaving as llama.cpp's: spaces become
// U+2581, a space is prefixed, then adjacent symbols merge greedily by the score of the merged
// piece (ties to the leftmost pair); symbols left outside the vocabulary are split back along
// their merge history and, failing that, fall back to <0xXX> byte tokens.
#include <array>
#include <cstdio>
#include <queue>
#include <unordered_map>

#include "engine/tokenizer_impl.h"

namespace kvscope {

namespace {
const std::string kSpace = "\xe2\x96\x81";  // U+2581

class SpmTokenizer : public Tokenizer {
  public:
    explicit SpmTokenizer(TokenizerVocab v) : v_(std::move(v)) {
        for (size_t i = 0; i < v_.tokens.size(); ++i)
            ids_.emplace(v_.tokens[i], static_cast<int32_t>(i));
        byte_ids_.fill(-1);
        for (int b = 0; b < 256; ++b) {
            char name[8];
            std::snprintf(name, sizeof name, "<0x%02X>", b);
            auto it = ids_.find(name);
            if (it != ids_.end()) byte_ids_[static_cast<size_t>(b)] = it->second;
        }
    }

    TokenizerKind kind() const override { return TokenizerKind::kSentencePiece; }
    int32_t bos() const override { return v_.bos; }
    int32_t eos() const override { return v_.eos; }
    bool wants_bos() const override { return v_.add_bos && v_.bos >= 0; }
    int32_t vocab_size() const override { return static_cast<int32_t>(v_.tokens.size()); }

    std::vector<int32_t> encode(std::string_view raw, bool add_bos) const override {
        std::vector<int32_t> out;
        if (add_bos && v_.bos >= 0) out.push_back(v_.bos);
        if (raw.empty()) return out;
        std::string text;
        if (v_.add_space_prefix) text = kSpace;
        for (char c : raw) {
            if (c == ' ')
                text += kSpace;
            else
                text += c;
        }
        // Symbols: one per UTF-8 character, as a doubly linked list.
        struct Symbol {
            int prev, next;
            size_t start, len;
        };
        std::vector<Symbol> sym;
        for (size_t i = 0; i < text.size();) {
            size_t len = std::min(utf8_len(static_cast<unsigned char>(text[i])), text.size() - i);
            int idx = static_cast<int>(sym.size());
            sym.push_back({idx - 1, idx + 1, i, len});
            i += len;
        }
        sym.back().next = -1;
        struct Bigram {
            int left, right;
            float score;
            size_t len;
        };
        auto cmp = [](const Bigram& a, const Bigram& b) {
            return a.score < b.score || (a.score == b.score && a.left > b.left);
        };
        std::priority_queue<Bigram, std::vector<Bigram>, decltype(cmp)> queue(cmp);
        auto try_add = [&](int l, int r) {
            if (l < 0 || r < 0) return;
            std::string piece =
                text.substr(sym[static_cast<size_t>(l)].start,
                            sym[static_cast<size_t>(l)].len + sym[static_cast<size_t>(r)].len);
            auto it = ids_.find(piece);
            if (it == ids_.end()) return;
            queue.push({l, r, v_.scores[static_cast<size_t>(it->second)], piece.size()});
        };
        for (size_t i = 1; i < sym.size(); ++i)
            try_add(static_cast<int>(i) - 1, static_cast<int>(i));
        while (!queue.empty()) {
            Bigram b = queue.top();
            queue.pop();
            Symbol& l = sym[static_cast<size_t>(b.left)];
            Symbol& r = sym[static_cast<size_t>(b.right)];
            if (l.len == 0 || r.len == 0 || l.len + r.len != b.len) continue;  // stale
            l.len += r.len;
            r.len = 0;
            l.next = r.next;
            if (r.next >= 0) sym[static_cast<size_t>(r.next)].prev = b.left;
            try_add(l.prev, b.left);
            try_add(b.left, l.next);
        }
        // Merges only ever form vocabulary pieces, so a symbol is either a token or a single
        // character outside the vocabulary, which falls back to its bytes.
        for (int i = 0; i >= 0 && static_cast<size_t>(i) < sym.size();
             i = sym[static_cast<size_t>(i)].next) {
            if (sym[static_cast<size_t>(i)].len == 0) continue;
            resegment(text, sym[static_cast<size_t>(i)].start, sym[static_cast<size_t>(i)].len,
                      out);
        }
        return out;
    }

    std::string decode_token(int32_t id) const override {
        if (id < 0 || id >= vocab_size()) return "";
        auto type = static_cast<TokenType>(v_.token_types[static_cast<size_t>(id)]);
        const std::string& t = v_.tokens[static_cast<size_t>(id)];
        if (type == TokenType::kControl) return "";
        if (type == TokenType::kByte && t.size() == 6 && t.compare(0, 3, "<0x") == 0) {
            unsigned v = 0;
            if (std::sscanf(t.c_str() + 3, "%2x", &v) == 1)
                return std::string(1, static_cast<char>(v));
        }
        std::string out;
        for (size_t i = 0; i < t.size();) {
            if (t.compare(i, 3, kSpace) == 0) {
                out += ' ';
                i += 3;
            } else {
                out += t[i++];
            }
        }
        return out;
    }

  private:
    void resegment(const std::string& text, size_t start, size_t len,
                   std::vector<int32_t>& out) const {
        auto it = ids_.find(text.substr(start, len));
        if (it != ids_.end()) {
            out.push_back(it->second);
            return;
        }
        for (size_t k = 0; k < len; ++k) {
            int32_t b = byte_ids_[static_cast<unsigned char>(text[start + k])];
            if (b >= 0)
                out.push_back(b);
            else if (v_.unk >= 0)
                out.push_back(v_.unk);
        }
    }

    TokenizerVocab v_;
    std::unordered_map<std::string, int32_t> ids_;
    std::array<int32_t, 256> byte_ids_;
};
}  // namespace

std::unique_ptr<Tokenizer> make_spm_tokenizer(TokenizerVocab vocab) {
    return std::make_unique<SpmTokenizer>(std::move(vocab));
}

}  // namespace kvscope
