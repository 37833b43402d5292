#pragma once
// UTF-8 and Unicode helpers for the tokenizers, written to agree with llama.cpp's src/unicode.cpp
// (Feb 2025) byte for byte, including where llama.cpp is lenient:
//  - sequence_length() looks only at the lead byte (continuation bytes count 1, 0xF8..0xFF
//    count 4), which is how the SentencePiece tokenizer splits text into symbols;
//  - decode() takes overlong forms and surrogates as they come and turns every byte that does not
//    start a complete sequence into U+FFFD, one per byte, as the BPE pre-tokenizer sees text.
//    Sequences above U+10FFFF (llama.cpp throws on them) are invalid here too.
// Character classes (\p{L}, \p{N}, \p{P}, \s) come from the same Unicode tables llama.cpp uses.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kvscope::unicode {

constexpr uint32_t kReplacementChar = 0xFFFD;

// Bytes in the UTF-8 sequence that starts with `lead`, judged by the lead byte alone.
inline size_t sequence_length(unsigned char lead) {
    static constexpr unsigned char kByHighNibble[16] = {1, 1, 1, 1, 1, 1, 1, 1,
                                                        1, 1, 1, 1, 2, 2, 3, 4};
    return kByHighNibble[lead >> 4];
}

// One code point from s[pos...]; sets `len` to the bytes consumed (1 for an invalid byte, which
// decodes as U+FFFD). pos must be < s.size().
uint32_t decode_one(std::string_view s, size_t pos, size_t& len);
std::vector<uint32_t> decode(std::string_view s);
// Appends the UTF-8 form of cp (cp <= 0x10FFFF; larger values append U+FFFD).
void append_utf8(std::string& out, uint32_t cp);

// The categories the pre-tokenizers ask about. Every code point has exactly one category (llama.cpp
// gives unassigned ones "undefined", which is kOther here); whitespace is a separate property.
enum class Category : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kPunctuation = 3 };
Category category(uint32_t cp);
// llama.cpp's \s: ASCII 9..13 and space, U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028, U+2029,
// U+202F, U+205F, U+3000.
bool is_whitespace(uint32_t cp);

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes map to themselves, the other 68 bytes to
// U+0100 and up, in byte order. Byte-level BPE vocabularies are spelled in these code points.
uint32_t byte_to_codepoint(uint8_t b);
// The inverse: the byte a code point stands for, or -1 when it is not one of the 256.
int codepoint_to_byte(uint32_t cp);

}  // namespace kvscope::unicode
