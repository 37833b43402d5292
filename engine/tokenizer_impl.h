#pragma once
// The two tokenizer implementations behind Tokenizer::from_vocab (validated vocab in).

#include <memory>

#include "engine/tokenizer.h"

namespace kvscope {

std::unique_ptr<Tokenizer> make_spm_tokenizer(TokenizerVocab vocab);
std::unique_ptr<Tokenizer> make_bpe_tokenizer(TokenizerVocab vocab);

// Shared by both: UTF-8 length of the character starting with byte `c` (1 for invalid bytes).
inline size_t utf8_len(unsigned char c) {
    if (c < 0x80) return 1;
    if ((c & 0xe0) == 0xc0) return 2;
    if ((c & 0xf0) == 0xe0) return 3;
    if ((c & 0xf8) == 0xf0) return 4;
    return 1;
}

}  // namespace kvscope
