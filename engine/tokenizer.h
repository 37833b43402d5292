#pragma once
// Tokenizers read from GGUF metadata (tokenizer.ggml.*):
//  - "llama": SentencePiece-style. Text gets a leading space (unless add_space_prefix is false),
//    spaces become U+2581, then adjacent symbols are merged greedily by the highest score of
//    the merged piece; what is left unknown falls back to <0xXX> byte tokens. Matches llama.cpp.
//  - "gpt2": byte-level BPE. A pre-tokenizer regex splits the text, bytes map to printable
//    unicode, then merges apply in rank order (tokenizer.ggml.merges).

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "probes/result.h"

namespace kvscope {

class GgufFile;

enum class TokenizerKind { kSentencePiece, kGpt2Bpe };

// Token types as GGUF numbers them (tokenizer.ggml.token_type).
enum class TokenType : int32_t {
    kNormal = 1,
    kUnknown = 2,
    kControl = 3,
    kUserDefined = 4,
    kUnused = 5,
    kByte = 6
};

// Everything a tokenizer is built from; what tokenizer.ggml.* holds.
struct TokenizerVocab {
    TokenizerKind kind = TokenizerKind::kSentencePiece;
    std::vector<std::string> tokens;
    std::vector<float> scores;          // SentencePiece: merge priority (higher first)
    std::vector<int32_t> token_types;   // TokenType values; empty: all normal
    std::vector<std::string> merges;    // BPE: "left right", highest priority first
    int32_t bos = 1, eos = 2, unk = 0;  // -1 when absent
    bool add_bos = true;
    bool add_space_prefix = true;
};

class Tokenizer {
  public:
    virtual ~Tokenizer() = default;
    static Result<std::unique_ptr<Tokenizer>> from_gguf(const GgufFile& file);
    static Result<std::unique_ptr<Tokenizer>> from_vocab(TokenizerVocab vocab);

    virtual TokenizerKind kind() const = 0;
    // add_bos: prepend BOS when the model wants one (tokenizer.ggml.add_bos_token).
    virtual std::vector<int32_t> encode(std::string_view text, bool add_bos) const = 0;
    // The text piece of one token, as it appears in output (U+2581 turned back into a space,
    // byte tokens into their byte). Control tokens give "".
    virtual std::string decode_token(int32_t id) const = 0;
    std::string decode(const std::vector<int32_t>& ids) const;

    virtual int32_t bos() const = 0;
    virtual int32_t eos() const = 0;  // -1 when none
    virtual bool wants_bos() const = 0;
    virtual int32_t vocab_size() const = 0;
};

}  // namespace kvscope
