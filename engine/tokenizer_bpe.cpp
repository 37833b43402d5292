// GPT-2 style byte-level BPE ("gpt2" in GGUF): the GPT-2 pre-tokenizer splits the text into
// words, each byte maps to a printable code point, and merges apply by rank within each word.
// Unicode classes: ASCII exactly; every other code point counts as a letter except the
// Unicode spaces (a documented simplification: digits of other scripts are letters here).
#include <climits>
#include <map>
#include <unordered_map>

#include "engine/tokenizer_impl.h"

namespace kvscope {

namespace {
std::string codepoint_utf8(uint32_t cp) {
    std::string s;
    if (cp < 0x80) {
        s += static_cast<char>(cp);
    } else if (cp < 0x800) {
        s += static_cast<char>(0xc0 | (cp >> 6));
        s += static_cast<char>(0x80 | (cp & 0x3f));
    } else {
        s += static_cast<char>(0xe0 | (cp >> 12));
        s += static_cast<char>(0x80 | ((cp >> 6) & 0x3f));
        s += static_cast<char>(0x80 | (cp & 0x3f));
    }
    return s;
}

// Decodes one UTF-8 character at s[i]; invalid bytes decode as themselves (length 1).
uint32_t next_codepoint(std::string_view s, size_t i, size_t& len) {
    auto c = static_cast<unsigned char>(s[i]);
    len = std::min(utf8_len(c), s.size() - i);
    if (len == 1) return c;
    uint32_t cp = c & (len == 2 ? 0x1f : len == 3 ? 0x0f : 0x07);
    for (size_t k = 1; k < len; ++k) {
        auto d = static_cast<unsigned char>(s[i + k]);
        if ((d & 0xc0) != 0x80) {
            len = 1;
            return c;
        }
        cp = (cp << 6) | (d & 0x3f);
    }
    return cp;
}

enum class Cls { kLetter, kNumber, kSpace, kOther };
Cls classify(uint32_t cp) {
    if (cp < 0x80) {
        if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return Cls::kLetter;
        if (cp >= '0' && cp <= '9') return Cls::kNumber;
        if (cp == ' ' || (cp >= 9 && cp <= 13)) return Cls::kSpace;
        return Cls::kOther;
    }
    if (cp == 0x85 || cp == 0xa0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) ||
        cp == 0x2028 || cp == 0x2029 || cp == 0x202f || cp == 0x205f || cp == 0x3000)
        return Cls::kSpace;
    return Cls::kLetter;
}

// The GPT-2 pattern: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
std::vector<std::string_view> pretokenize(std::string_view s) {
    std::vector<std::string_view> words;
    std::vector<std::pair<uint32_t, size_t>> cps;  // code point, byte offset
    for (size_t i = 0, len = 0; i < s.size(); i += len)
        cps.emplace_back(next_codepoint(s, i, len), i);
    const size_t n = cps.size();
    auto off = [&](size_t k) { return k < n ? cps[k].second : s.size(); };
    auto cls = [&](size_t k) { return classify(cps[k].first); };
    size_t k = 0;
    while (k < n) {
        size_t start = k;
        if (cps[k].first == '\'' && k + 1 < n) {
            static const char* const kSuffixes[] = {"s", "t", "re", "ve", "m", "ll", "d"};
            bool matched = false;
            for (const char* suf : kSuffixes) {
                size_t m = std::char_traits<char>::length(suf);
                if (k + 1 + m <= n) {
                    bool ok = true;
                    for (size_t j = 0; j < m; ++j)
                        if (cps[k + 1 + j].first != static_cast<uint32_t>(suf[j])) ok = false;
                    if (ok) {
                        k += 1 + m;
                        matched = true;
                        break;
                    }
                }
            }
            if (matched) {
                words.push_back(s.substr(off(start), off(k) - off(start)));
                continue;
            }
        }
        size_t j = k;
        if (cps[j].first == ' ' && j + 1 < n && cls(j + 1) != Cls::kSpace) ++j;
        if (j < n && cls(j) != Cls::kSpace) {
            Cls c = cls(j);
            while (j < n && cls(j) == c)
                ++j;
            k = j;
        } else {
            // Whitespace run: leave the last space to prefix the next word (\s+(?!\S)).
            j = k;
            while (j < n && cls(j) == Cls::kSpace)
                ++j;
            if (j < n && j - k > 1) --j;
            k = j;
        }
        words.push_back(s.substr(off(start), off(k) - off(start)));
    }
    return words;
}

class BpeTokenizer : public Tokenizer {
  public:
    explicit BpeTokenizer(TokenizerVocab v) : v_(std::move(v)) {
        for (size_t i = 0; i < v_.tokens.size(); ++i)
            ids_.emplace(v_.tokens[i], static_cast<int32_t>(i));
        for (size_t r = 0; r < v_.merges.size(); ++r) {
            size_t sp = v_.merges[r].find(' ', 1);
            if (sp == std::string::npos) continue;
            ranks_.emplace(v_.merges[r], static_cast<int>(r));
        }
        // bytes_to_unicode: printable bytes map to themselves, the rest to 256 + k.
        int k = 0;
        for (int b = 0; b < 256; ++b) {
            bool printable =
                (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
            uint32_t cp = printable ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + k++);
            byte_to_unicode_[static_cast<size_t>(b)] = codepoint_utf8(cp);
            unicode_to_byte_[codepoint_utf8(cp)] = static_cast<uint8_t>(b);
        }
    }

    TokenizerKind kind() const override { return TokenizerKind::kGpt2Bpe; }
    int32_t bos() const override { return v_.bos; }
    int32_t eos() const override { return v_.eos; }
    bool wants_bos() const override { return v_.add_bos && v_.bos >= 0; }
    int32_t vocab_size() const override { return static_cast<int32_t>(v_.tokens.size()); }

    std::vector<int32_t> encode(std::string_view text, bool add_bos) const override {
        std::vector<int32_t> out;
        if (add_bos && v_.bos >= 0) out.push_back(v_.bos);
        for (std::string_view word : pretokenize(text)) {
            std::vector<std::string> parts;
            for (unsigned char c : word)
                parts.push_back(byte_to_unicode_[c]);
            // Repeatedly merge the adjacent pair of lowest rank.
            for (;;) {
                int best = INT_MAX;
                size_t at = 0;
                for (size_t i = 0; i + 1 < parts.size(); ++i) {
                    auto it = ranks_.find(parts[i] + " " + parts[i + 1]);
                    if (it != ranks_.end() && it->second < best) {
                        best = it->second;
                        at = i;
                    }
                }
                if (best == INT_MAX) break;
                parts[at] += parts[at + 1];
                parts.erase(parts.begin() + static_cast<long>(at) + 1);
            }
            for (const std::string& p : parts) {
                auto it = ids_.find(p);
                if (it != ids_.end())
                    out.push_back(it->second);
                else if (v_.unk >= 0)
                    out.push_back(v_.unk);
            }
        }
        return out;
    }

    std::string decode_token(int32_t id) const override {
        if (id < 0 || id >= vocab_size()) return "";
        if (static_cast<TokenType>(v_.token_types[static_cast<size_t>(id)]) == TokenType::kControl)
            return "";
        const std::string& t = v_.tokens[static_cast<size_t>(id)];
        std::string out;
        for (size_t i = 0, len = 0; i < t.size(); i += len) {
            next_codepoint(t, i, len);
            auto it = unicode_to_byte_.find(t.substr(i, len));
            if (it != unicode_to_byte_.end())
                out += static_cast<char>(it->second);
            else
                out += t.substr(i, len);
        }
        return out;
    }

  private:
    TokenizerVocab v_;
    std::unordered_map<std::string, int32_t> ids_;
    std::unordered_map<std::string, int> ranks_;
    std::string byte_to_unicode_[256];
    std::unordered_map<std::string, uint8_t> unicode_to_byte_;
};
}  // namespace

std::unique_ptr<Tokenizer> make_bpe_tokenizer(TokenizerVocab vocab) {
    return std::make_unique<BpeTokenizer>(std::move(vocab));
}

}  // namespace kvscope
