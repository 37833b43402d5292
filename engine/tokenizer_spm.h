#pragma once
// SentencePiece-style tokenizer ("llama" in GGUF), matching llama.cpp's llm_tokenizer_spm:
//  1. user-defined tokens are cut out of the text (see tokenizer_impl.h); each remaining text
//     fragment that starts the prompt or follows such a token gets a leading space when
//     add_space_prefix is set, then every ' ' becomes U+2581;
//  2. the fragment splits into UTF-8 characters, judged by lead byte alone (an invalid byte is a
//     character of its own);
//  3. adjacent symbols whose concatenation is a token are merged, highest token score first, the
//     leftmost pair on ties, until no adjacent pair forms a token. O(n log n);
//  4. each symbol that is not a token (only single characters can be: merges only make tokens)
//     becomes its bytes as <0xXX> tokens, else as one-byte tokens.
// Known differences from llama.cpp, all where llama.cpp would fail: a byte with neither a <0xXX>
// nor a one-byte token becomes unk (llama.cpp throws std::out_of_range), or is dropped when the
// vocabulary has no unk either.

#include <memory>

#include "engine/tokenizer.h"

namespace kvscope {

// vocab must have passed Tokenizer::from_vocab's checks.
std::unique_ptr<Tokenizer> make_spm_tokenizer(TokenizerVocab vocab);

}  // namespace kvscope
