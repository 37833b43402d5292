#pragma once
// Tokenizers read from GGUF metadata (tokenizer.ggml.*), reproducing llama.cpp's
// (src/llama-vocab.cpp, Feb 2025) token ids for the same text, as llama_tokenize(add_special,
// parse_special = false) does:
//  - "llama": SentencePiece-style. Text gets a leading space (unless add_space_prefix is false),
//    spaces become U+2581, then adjacent symbols are merged greedily by the highest score of
//    the merged piece (ties: leftmost); what is left outside the vocabulary falls back to <0xXX>
//    byte tokens.
//  - "gpt2": byte-level BPE. A pre-tokenizer (chosen by tokenizer.ggml.pre) splits the text into
//    words, bytes map to printable code points, then merges apply in rank order
//    (tokenizer.ggml.merges, first = highest priority).
// Control and unknown tokens written in the text are plain text; user-defined tokens (type 4) are
// matched in the text first, as llama.cpp always does. Details and the few known differences from
// llama.cpp are listed in tokenizer_spm.h and tokenizer_bpe.h.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace kvscope {

class GgufFile;

enum class TokenizerKind { kSentencePiece, kGpt2Bpe };

// Token types as GGUF numbers them (tokenizer.ggml.token_type). Numbers outside 0..6 count as
// kUndefined, as in llama.cpp.
enum class TokenType : int32_t {
    kUndefined = 0,
    kNormal = 1,
    kUnknown = 2,
    kControl = 3,
    kUserDefined = 4,
    kUnused = 5,
    kByte = 6
};

// Everything a tokenizer is built from; what tokenizer.ggml.* holds. from_gguf() fills the
// defaults llama.cpp uses for absent keys; from_vocab() takes the fields as they are.
struct TokenizerVocab {
    TokenizerKind kind = TokenizerKind::kSentencePiece;
    std::vector<std::string> tokens;    // token text; an empty one reads "[EMPTY_<id>]"
    std::vector<float> scores;          // SentencePiece: merge priority (higher first); empty: 0
    std::vector<int32_t> token_types;   // TokenType values; empty: all normal
    std::vector<std::string> merges;    // BPE: "left right", highest priority first
    int32_t bos = 1, eos = 2, unk = 0;  // -1 when absent
    bool add_bos = true;
    bool add_space_prefix = true;  // SentencePiece: prefix the text with a space
    // BPE pre-tokenizer (tokenizer.ggml.pre), e.g. "gpt-2" or "llama-bpe"; "" is llama.cpp's
    // "default". Names kvscope does not implement fall back to "gpt-2" with a warning.
    std::string pre;
};

class Tokenizer {
  public:
    virtual ~Tokenizer() = default;
    // Errors name the file and the key (a missing or mistyped key, array lengths that disagree,
    // an id outside the vocabulary, an unknown tokenizer.ggml.model).
    static Result<std::unique_ptr<Tokenizer>> from_gguf(const GgufFile& file);
    // Checks the vocabulary (not empty, array lengths agree, ids in range, no duplicate token
    // text, no NaN score, at most 2^24 tokens and merges, tokens at most 64 KiB) and builds the
    // tokenizer of vocab.kind. Errors name the tokenizer.ggml.* key concerned.
    static Result<std::unique_ptr<Tokenizer>> from_vocab(TokenizerVocab vocab);

    virtual TokenizerKind kind() const = 0;
    // add_bos: prepend BOS (when there is one); pass wants_bos() for what the model asks
    // (tokenizer.ggml.add_bos_token). Any bytes are accepted, invalid UTF-8 included.
    virtual std::vector<int32_t> encode(std::string_view text, bool add_bos) const = 0;
    // The text piece of one token, as llama_token_to_piece(special = false) gives it:
    // SentencePiece turns U+2581 back into spaces and <0xXX> byte tokens into their byte; BPE maps
    // the byte-level code points back to bytes. Control, unknown, unused and out-of-range ids
    // give "". Pieces may be partial UTF-8 sequences; concatenating them gives the text.
    virtual std::string decode_token(int32_t id) const = 0;
    // The pieces concatenated. The SentencePiece space prefix stays: decode(encode("hi")) is " hi".
    std::string decode(const std::vector<int32_t>& ids) const;
    // strip_space_prefix: also skip a leading BOS and drop the one space the space prefix put in
    // front of the first piece, so that decode(encode(x, b), true) == x. (llama_detokenize differs
    // only when BOS is first: it then keeps the space.)
    std::string decode(const std::vector<int32_t>& ids, bool strip_space_prefix) const;

    virtual int32_t bos() const = 0;  // -1 when none
    virtual int32_t eos() const = 0;  // -1 when none
    virtual int32_t unk() const = 0;  // -1 when none
    virtual bool wants_bos() const = 0;
    virtual bool adds_space_prefix() const = 0;
    virtual int32_t vocab_size() const = 0;
    // Raw token text as stored in the vocabulary ("" for an out-of-range id).
    virtual const std::string& token_text(int32_t id) const = 0;
    virtual TokenType token_type(int32_t id) const = 0;
    // Things that work but not as the file asked, e.g. an unsupported pre-tokenizer replaced by
    // GPT-2's. Empty for a vocabulary kvscope handles exactly like llama.cpp.
    virtual const std::vector<std::string>& warnings() const = 0;

    // The most bytes of text one token can stand for (its vocabulary text is never shorter).
    size_t longest_token_bytes() const;
    // Checks, before encoding, that `text` could fit in `max_tokens` tokens at all: a text of
    // more than max_tokens x longest_token_bytes() bytes cannot. Encoding a 50 MB prompt only to
    // find it longer than the context took 8 s and 2 GB. `what` names the text in the message.
    Status check_fits(std::string_view text, int32_t max_tokens, const std::string& what) const;

  private:
    mutable size_t longest_token_bytes_ = 0;
};

}  // namespace kvscope
