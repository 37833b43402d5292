#pragma once
// What the SentencePiece and BPE tokenizers share: the vocabulary with llama.cpp's lookup rules
// and the user-defined token split that runs before either algorithm.

#include <cstddef>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "engine/tokenizer.h"

namespace kvscope::detail {

// Heterogeneous lookup: tokenizers probe with string_views into the text, never allocating.
struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const noexcept {
        return std::hash<std::string_view>{}(s);
    }
};
template <class V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

// A vocabulary already checked by Tokenizer::from_vocab (ids in range, no duplicate text).
class VocabTokenizer : public Tokenizer {
  public:
    int32_t bos() const override { return v_.bos; }
    int32_t eos() const override { return v_.eos; }
    int32_t unk() const override { return v_.unk; }
    bool wants_bos() const override { return v_.add_bos && v_.bos >= 0; }
    int32_t vocab_size() const override { return static_cast<int32_t>(v_.tokens.size()); }
    const std::string& token_text(int32_t id) const override;
    TokenType token_type(int32_t id) const override;
    const std::vector<std::string>& warnings() const override { return warnings_; }

  protected:
    explicit VocabTokenizer(TokenizerVocab v);

    // Id of the token spelled exactly `text`, or -1.
    int32_t find(std::string_view text) const {
        auto it = ids_.find(text);
        return it == ids_.end() ? -1 : it->second;
    }

    // A piece of the text to encode: plain text (token < 0), or a user-defined token found in it.
    struct Fragment {
        size_t begin = 0, size = 0;
        int32_t token = -1;
    };
    // llama.cpp's tokenizer_st_partition with parse_special = false: user-defined tokens, longest
    // first, are cut out of the text wherever they occur (leftmost, non-overlapping).
    std::vector<Fragment> split_user_defined(std::string_view text) const;

    TokenizerVocab v_;
    StringMap<int32_t> ids_;
    std::vector<int32_t> user_defined_;  // ids, longest text first
    std::vector<std::string> warnings_;
};

}  // namespace kvscope::detail
