#pragma once
// GPT-2 style byte-level BPE ("gpt2" in GGUF), matching llama.cpp's llm_tokenizer_bpe:
//  1. user-defined tokens are cut out of the text (see tokenizer_impl.h);
//  2. each fragment is decoded to code points (invalid bytes become U+FFFD, as in llama.cpp, so
//     invalid UTF-8 does not round-trip) and split into words by the pre-tokenizer that
//     tokenizer.ggml.pre names;
//  3. each word's UTF-8 bytes map to GPT-2's printable code points (bytes_to_unicode);
//  4. with the llama3 pre-tokenizer, a word that is itself a token is taken whole; otherwise its
//     characters merge pairwise, lowest merge rank first, the leftmost pair on ties;
//  5. a final piece that is not a token is emitted as the one-character tokens of its bytes that
//     exist, the rest dropped (llama.cpp's behaviour; BPE never uses unk).
// Pre-tokenizers, with the \p{L} / \p{N} / \p{P} / \s classes of llama.cpp's Unicode tables:
//   kGpt2      's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//              ("gpt-2", "phi-2", "roberta-bpe", "jina-*", "gigachat", "mpt", "olmo", "jais")
//   kLlama3    (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
//              ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
//              ("llama3", "llama-v3", "llama-bpe", "falcon3" with whole-word tokens; "dbrx",
//              "smaug-bpe", "chatglm-bpe" without)
//   kQwen2     kLlama3 with \p{N} instead of \p{N}{1,3} ("qwen2", "deepseek-r1-qwen", "megrez",
//              "stablelm2"; llama.cpp runs this one through std::regex, kvscope through the same
//              hand-written matcher as kLlama3)
//   kDefault   [\p{P}$+<=>^~|]+ then kGpt2 then \p{N}+ then [0-9]{3}, each splitting the pieces of
//              the one before ("" or "default")
//   kFalcon    [\p{P}$+<=>^~|`]+ then kGpt2 then [0-9]{3} ("falcon")
//   kStarcoder \p{N} then kGpt2 ("starcoder", "refact", "command-r", "smollm", "codeshell",
//              "exaone", "minerva-7b")
//   kDeepseekLlm   [\r\n], then \s?[A-Za-z\u00b5\u00c0-\u00d6...]+ (84 ranges of cased letters),
//                  then \s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+, then
//                  \s+$, then [\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+, then \p{N}+
//                  ("deepseek-llm")
//   kDeepseekCoder [\r\n], then \s?\p{L}+, then \s?\p{P}+, then the same [\u4e00-...]+, then
//                  \p{N} ("deepseek-coder")
//              Each stage splits the pieces of the one before. Neither lets a number take the
//              space in front of it: " \u00bd" (the fraction 1/2, category No, so \p{N}) is two
//              words, " " and "\u00bd", where GPT-2's " ?\p{N}+" makes one.
// Other names (llama.cpp also knows deepseek-v3, poro-chat, bloom, gpt3-finnish, viking, tekken,
// chameleon; it refuses unknown ones) use kGpt2 and say so in warnings().
// Decoding differs from llama.cpp only for a character that is not one of the 256 byte images:
// kvscope passes it through, llama.cpp writes "[UNK_BYTE_0x...]".

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tokenizer.h"

namespace kvscope {

enum class BpePreTokenizer {
    kGpt2,
    kLlama3,
    kQwen2,
    kDefault,
    kFalcon,
    kStarcoder,
    kDeepseekLlm,
    kDeepseekCoder
};

// What a tokenizer.ggml.pre name means, with llama.cpp's per-name defaults.
struct BpePreConfig {
    BpePreTokenizer split = BpePreTokenizer::kGpt2;
    bool ignore_merges = false;  // a word that is a token is taken whole (llama3)
    bool add_bos = false;        // default of tokenizer.ggml.add_bos_token
    bool has_bos = true;         // false: BOS defaults to none (chatglm-bpe)
    bool supported = true;       // false: unknown here, kGpt2 used instead
};
BpePreConfig bpe_pre_config(std::string_view pre);

// The words the pre-tokenizer makes of `text`, as UTF-8 (invalid bytes already U+FFFD), before
// the byte mapping. Exposed for tests.
std::vector<std::string> bpe_split_words(std::string_view text, BpePreTokenizer split);

// vocab must have passed Tokenizer::from_vocab's checks.
std::unique_ptr<Tokenizer> make_bpe_tokenizer(TokenizerVocab vocab);

}  // namespace kvscope
