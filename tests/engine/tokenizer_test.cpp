// Tokenizers: SentencePiece merges by score with byte fallback, GPT-2 byte-level BPE and its
// pre-tokenizers, decoding, construction errors from plain data and from GGUF metadata, speed,
// and the bundled model's vocabulary when present. Expected ids follow llama.cpp's tokenizer
// (src/llama-vocab.cpp, Feb 2025); expected word splits were produced with Python's `regex`
// module running the original patterns.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <random>

#include "engine/gguf_file.h"
#include "engine/tokenizer.h"
#include "engine/tokenizer_bpe.h"
#include "gguf_builder.h"
#include "test_support.h"

namespace kvscope {
namespace {

using Ids = std::vector<int32_t>;
using Words = std::vector<std::string>;

const std::string S = "\xe2\x96\x81";  // U+2581, SentencePiece's space

// [SECTION] Helpers

// <unk> <s> </s>, then the 256 byte tokens (id 3 + byte), then `pieces` with their scores.
TokenizerVocab spm_vocab(const std::vector<std::pair<std::string, float>>& pieces) {
    TokenizerVocab v;
    v.tokens = {"<unk>", "<s>", "</s>"};
    v.token_types = {2, 3, 3};
    for (int b = 0; b < 256; ++b) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        v.tokens.push_back(name);
        v.token_types.push_back(6);
    }
    v.scores.assign(v.tokens.size(), 0.0f);
    for (const auto& [p, s] : pieces) {
        v.tokens.push_back(p);
        v.token_types.push_back(1);
        v.scores.push_back(s);
    }
    return v;
}
// Up to max_pieces - 1 pieces drawn from `pieces`, where "" stands for one random byte.
std::string random_text(std::mt19937& rng, int max_pieces, const std::vector<std::string>& pieces) {
    std::string s;
    for (int k = 0, n = static_cast<int>(rng() % static_cast<unsigned>(max_pieces)); k < n; ++k) {
        const std::string& piece = pieces[rng() % pieces.size()];
        s += piece.empty() ? std::string(1, static_cast<char>(rng() % 256)) : piece;
    }
    return s;
}

int32_t byte_id(unsigned char b) {
    return 3 + b;
}

int32_t id_of(const TokenizerVocab& v, const std::string& piece) {
    for (size_t i = 0; i < v.tokens.size(); ++i)
        if (v.tokens[i] == piece) return static_cast<int32_t>(i);
    ADD_FAILURE() << "no token " << piece;
    return -1;
}

std::unique_ptr<Tokenizer> make(const TokenizerVocab& v) {
    auto t = Tokenizer::from_vocab(v);
    EXPECT_TRUE(t.ok()) << t.error().message;
    return t.ok() ? std::move(t.value()) : nullptr;
}

// GPT-2 byte-level spelling of raw bytes (bytes_to_unicode).
std::string byte_level(std::string_view raw) {
    std::string out;
    for (unsigned char b : raw) {
        bool printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || b >= 0xae;
        uint32_t cp = b;
        if (!printable) {
            cp = 256;
            for (int k = 0; k < b; ++k) {
                bool p = (k >= 0x21 && k <= 0x7e) || (k >= 0xa1 && k <= 0xac) || k >= 0xae;
                if (!p) ++cp;
            }
        }
        if (cp < 0x80) {
            out += static_cast<char>(cp);
        } else {
            out += static_cast<char>(0xc0 | (cp >> 6));
            out += static_cast<char>(0x80 | (cp & 0x3f));
        }
    }
    return out;
}

// Byte-level BPE: ids 0..255 are the images of bytes 0..255, then the result of each merge
// (given over raw bytes, e.g. {" ", "w"}) in order.
TokenizerVocab bpe_vocab(const std::vector<std::pair<std::string, std::string>>& merges,
                         std::string pre = "gpt-2") {
    TokenizerVocab v;
    v.kind = TokenizerKind::kGpt2Bpe;
    for (int b = 0; b < 256; ++b)
        v.tokens.push_back(byte_level(std::string(1, static_cast<char>(b))));
    for (const auto& [l, r] : merges) {
        v.merges.push_back(byte_level(l) + " " + byte_level(r));
        std::string merged = byte_level(l + r);
        if (std::find(v.tokens.begin(), v.tokens.end(), merged) == v.tokens.end())
            v.tokens.push_back(merged);
    }
    v.bos = v.eos = v.unk = -1;
    v.add_bos = false;
    v.add_space_prefix = false;
    v.pre = std::move(pre);
    return v;
}

Ids raw_bytes(std::string_view s) {
    Ids out;
    for (unsigned char c : s)
        out.push_back(c);
    return out;
}

// [SECTION] SentencePiece

TEST(SpmTokenizer, MergesTheHighestScoringPairFirst) {
    auto v = spm_vocab({{S, -10}, {"a", -10}, {"b", -10}, {"c", -10}, {"ab", -2}, {"bc", -1}});
    auto t = make(v);
    ASSERT_TRUE(t);
    // "▁abc": "bc" (-1) beats "ab" (-2); "abc" is no token, so that is all.
    EXPECT_EQ(t->encode("abc", false), (Ids{id_of(v, S), id_of(v, "a"), id_of(v, "bc")}));
    v.scores[static_cast<size_t>(id_of(v, "ab"))] = -0.5f;
    auto t2 = make(v);
    EXPECT_EQ(t2->encode("abc", false), (Ids{id_of(v, S), id_of(v, "ab"), id_of(v, "c")}));
}

TEST(SpmTokenizer, MergedSymbolsKeepMerging) {
    // bc (-1), then ▁a (-3), then ▁a + bc = ▁abc (-4): one token.
    auto v = spm_vocab(
        {{S, -10}, {"a", -10}, {"b", -10}, {"c", -10}, {S + "a", -3}, {"bc", -1}, {S + "abc", -4}});
    auto t = make(v);
    EXPECT_EQ(t->encode("abc", true), (Ids{1, id_of(v, S + "abc")}));
}

TEST(SpmTokenizer, TiesGoToTheLeftmostPair) {
    auto v = spm_vocab({{S, -10}, {"a", -10}, {"aa", -1}, {S + S, -1}});
    auto t = make(v);
    EXPECT_EQ(t->encode("aaa", false), (Ids{id_of(v, S), id_of(v, "aa"), id_of(v, "a")}));
    // "▁▁▁▁" (prefix + three spaces): pairs (0,1) and (2,3) merge, never (1,2).
    EXPECT_EQ(t->encode("   ", false), (Ids{id_of(v, S + S), id_of(v, S + S)}));
}

TEST(SpmTokenizer, CharactersOutsideTheVocabularyFallBackToBytes) {
    auto v = spm_vocab({{S, -1}, {"a", -1}, {"b", -1}});
    auto t = make(v);
    const int32_t sp = id_of(v, S);
    EXPECT_EQ(t->encode("\xc3\xa9", false), (Ids{sp, byte_id(0xc3), byte_id(0xa9)}));  // é
    EXPECT_EQ(t->encode("\xf0\x9f\x98\x80", false),                                    // 😀
              (Ids{sp, byte_id(0xf0), byte_id(0x9f), byte_id(0x98), byte_id(0x80)}));
    EXPECT_EQ(t->encode("a\nb", false), (Ids{sp, id_of(v, "a"), byte_id('\n'), id_of(v, "b")}));
    EXPECT_EQ(t->encode("\t", false), (Ids{sp, byte_id('\t')}));
    EXPECT_EQ(t->decode(t->encode("\xc3\xa9\t\xf0\x9f\x98\x80", true), true),
              "\xc3\xa9\t\xf0\x9f\x98\x80");
}

TEST(SpmTokenizer, InvalidUtf8SplitsByLeadByteAndRoundTrips) {
    auto v = spm_vocab({{S, -1}, {"a", -1}, {"b", -1}});
    auto t = make(v);
    const int32_t sp = id_of(v, S);
    // 0xE2 announces three bytes, so "\xe2ab" is one character and not a token: all bytes
    // (llama.cpp does the same; "a" and "b" are not used).
    EXPECT_EQ(t->encode("\xe2"
                        "ab",
                        false),
              (Ids{sp, byte_id(0xe2), byte_id('a'), byte_id('b')}));
    // A stray continuation byte is a character of its own.
    EXPECT_EQ(t->encode("\x80"
                        "a",
                        false),
              (Ids{sp, byte_id(0x80), id_of(v, "a")}));
    for (std::string s : {std::string("\xff\xfe"), std::string("a\xf0\x9f"), std::string("\xc3"),
                          std::string("x\0y", 3), std::string("\xf8\x80\x80\x80\x80")})
        EXPECT_EQ(t->decode(t->encode(s, true), true), s);
}

TEST(SpmTokenizer, EmptyTextIsJustBos) {
    auto t = make(spm_vocab({{S, -1}}));
    EXPECT_EQ(t->encode("", true), Ids{1});
    EXPECT_TRUE(t->encode("", false).empty());
    EXPECT_EQ(t->decode({}), "");
}

TEST(SpmTokenizer, SpacesBecomeU2581AndRoundTrip) {
    auto v = spm_vocab({{S, -1}, {"a", -1}, {"b", -1}, {S + "a", -0.5f}, {"ab", -0.1f}});
    auto t = make(v);
    const int32_t sp = id_of(v, S);
    EXPECT_EQ(t->encode(" ", false), (Ids{sp, sp}));
    EXPECT_EQ(t->encode("a b", false), (Ids{id_of(v, S + "a"), sp, id_of(v, "b")}));
    for (std::string s : {"a", " a", "a ", "  a  b  ", "   ", "ab ab", "\n a \n"}) {
        EXPECT_EQ(t->decode(t->encode(s, false)), " " + s) << s;
        EXPECT_EQ(t->decode(t->encode(s, true), true), s) << s;
    }
}

TEST(SpmTokenizer, RoundTripsRandomBytes) {
    auto v = spm_vocab(
        {{S, -1}, {"a", -1}, {"b", -1}, {"ab", -0.1f}, {S + "a", -0.2f}, {"\xc3\xa9", -0.3f}});
    auto t = make(v);
    std::mt19937 rng(4);
    int checked = 0;
    for (int i = 0; i < 3000; ++i) {
        // Random bytes twice as likely as each other piece.
        std::string s = random_text(rng, 24, {"a", "b", " ", "\n", "\xc3\xa9", "", ""});
        // A lead byte just before a space swallows part of its U+2581 (next test).
        bool lead_before_space = false;
        for (size_t k = 0; k < s.size(); ++k)
            if (static_cast<unsigned char>(s[k]) >= 0xc0 && s.substr(k + 1, 3).find(' ') != s.npos)
                lead_before_space = true;
        if (lead_before_space) continue;
        ++checked;
        EXPECT_EQ(t->decode(t->encode(s, true), true), s);
        if (!s.empty()) {
            EXPECT_EQ(t->decode(t->encode(s, false)), " " + s);
        }
    }
    EXPECT_GT(checked, 1500);
}

TEST(SpmTokenizer, AnInvalidLeadByteBeforeASpaceKeepsTheU2581Bytes) {
    // Spaces become U+2581 before the text splits into characters, so 0xE6 (a three-byte lead)
    // takes E2 96 of it and both come out as bytes: decoding gives the mark back, not a space.
    // llama.cpp tokenizes this the same way.
    auto v = spm_vocab({{S, -1}, {"T", -1}});
    auto t = make(v);
    Ids ids = t->encode("\xe6 T", false);
    EXPECT_EQ(ids, (Ids{id_of(v, S), byte_id(0xe6), byte_id(0xe2), byte_id(0x96), byte_id(0x81),
                        id_of(v, "T")}));
    EXPECT_EQ(t->decode(ids, true), "\xe6" + S + "T");
}

// Texts are merged word by word (a 50 MB text as one piece took 2.7 GB and 113 s) when no token
// can join words; one such token switches that off. Both must give the same ids for any text:
// runs of spaces, a literal U+2581, stray lead bytes that swallow part of a space's mark.
TEST(SpmTokenizer, MergingWordByWordGivesTheIdsOfMergingTheWholeText) {
    auto v = spm_vocab({{S, -1},
                        {"a", -1},
                        {"b", -1},
                        {"ab", -0.1f},
                        {S + "a", -0.2f},
                        {S + S, -0.15f},
                        {S + S + "ab", -0.05f},
                        {"\xc3\xa9", -0.3f},
                        {"a\xc3\xa9", -0.25f}});
    auto word_by_word = make(v);
    v.tokens.push_back("zzzz" + S + "zzzz");  // joins words, but is never made from these texts
    v.token_types.push_back(1);
    v.scores.push_back(-9.0f);
    auto whole = make(v);
    std::mt19937 rng(29);
    for (int i = 0; i < 5000; ++i) {
        // Lead bytes (0xe0..0xff among the random ones) before spaces, runs of spaces.
        std::string s = random_text(rng, 40, {"a", "b", " ", " ", "\xc3\xa9", S, "\xe6", "", ""});
        for (bool bos : {true, false})
            ASSERT_EQ(word_by_word->encode(s, bos), whole->encode(s, bos)) << i << ": " << s;
    }
}

TEST(SpmTokenizer, WithoutSpacePrefix) {
    auto v = spm_vocab({{S, -1}, {"a", -1}, {"b", -1}, {"ab", -0.1f}});
    v.add_space_prefix = false;
    auto t = make(v);
    EXPECT_FALSE(t->adds_space_prefix());
    EXPECT_EQ(t->encode("ab", false), Ids{id_of(v, "ab")});
    EXPECT_EQ(t->decode(t->encode(" ab", true), true), " ab");
}

TEST(SpmTokenizer, WithoutByteTokensUnknownCharactersBecomeUnk) {
    TokenizerVocab v;
    v.tokens = {"<unk>", "<s>", "</s>", S, "a"};
    v.token_types = {2, 3, 3, 1, 1};
    auto t = make(v);
    EXPECT_FALSE(t->warnings().empty());
    EXPECT_EQ(t->encode("a\xc3\xa9", false), (Ids{3, 4, 0, 0}));  // one unk per byte, as bytes
    EXPECT_EQ(t->decode_token(0), "");
}

TEST(SpmTokenizer, ControlTokenTextIsPlainTextButUserDefinedTokensAreMatched) {
    auto v = spm_vocab({{S, -1}, {"a", -1}, {"b", -1}, {"<tag>", 0}});
    v.token_types.back() = 4;  // user-defined
    auto t = make(v);
    const int32_t sp = id_of(v, S), tag = id_of(v, "<tag>");
    Ids eos_text = t->encode("</s>", false);
    EXPECT_EQ(std::count(eos_text.begin(), eos_text.end(), 2), 0);
    EXPECT_EQ(t->decode(eos_text), " </s>");
    // As in llama.cpp, the text after a user-defined token gets the space prefix again.
    EXPECT_EQ(t->encode("a<tag>b", true), (Ids{1, sp, id_of(v, "a"), tag, sp, id_of(v, "b")}));
    EXPECT_EQ(t->encode("<tag>", false), Ids{tag});
    EXPECT_EQ(t->decode_token(tag), "<tag>");
}

TEST(SpmTokenizer, DecodesEachTokenType) {
    auto v = spm_vocab({{S + "hi" + S, -1}, {"<ud>", -1}, {"<unused>", -1}});
    v.token_types[v.token_types.size() - 2] = 4;
    v.token_types.back() = 5;
    auto t = make(v);
    EXPECT_EQ(t->decode_token(0), "");  // unknown
    EXPECT_EQ(t->decode_token(1), "");  // control
    EXPECT_EQ(t->decode_token(byte_id('A')), "A");
    EXPECT_EQ(t->decode_token(byte_id(0xff)), "\xff");
    EXPECT_EQ(t->decode_token(id_of(v, S + "hi" + S)), " hi ");
    EXPECT_EQ(t->decode_token(id_of(v, "<ud>")), "<ud>");
    EXPECT_EQ(t->decode_token(id_of(v, "<unused>")), "");
    EXPECT_EQ(t->decode_token(-1), "");
    EXPECT_EQ(t->decode_token(t->vocab_size()), "");
    EXPECT_EQ(t->token_text(-1), "");
    EXPECT_EQ(t->token_type(byte_id(0)), TokenType::kByte);
    // Without token types every token is normal, byte tokens included (llama.cpp prints them).
    auto plain = spm_vocab({});
    plain.token_types.clear();
    EXPECT_EQ(make(plain)->decode_token(byte_id('A')), "<0x41>");
}

// [SECTION] GPT-2 byte-level BPE

TEST(BpeTokenizer, MergesByRankNotByPosition) {
    auto v = bpe_vocab({{"b", "c"}, {"a", "b"}});
    auto t = make(v);
    EXPECT_EQ(t->encode("abc", false), (Ids{'a', 256}));  // "b c" has rank 0
    auto w = bpe_vocab({{"a", "b"}, {"b", "c"}});
    EXPECT_EQ(make(w)->encode("abc", false), (Ids{256, 'c'}));
}

TEST(BpeTokenizer, TiesGoToTheLeftmostPair) {
    auto t = make(bpe_vocab({{"a", "a"}}));
    EXPECT_EQ(t->encode("aaa", false), (Ids{256, 'a'}));
    EXPECT_EQ(t->encode("aaaa", false), (Ids{256, 256}));
}

TEST(BpeTokenizer, HelloWorld) {
    auto v = bpe_vocab({{"h", "e"},
                        {"l", "l"},
                        {"he", "ll"},
                        {"hell", "o"},
                        {" ", "w"},
                        {"o", "r"},
                        {" w", "or"},
                        {"l", "d"},
                        {" wor", "ld"}});
    v.tokens.push_back("<|endoftext|>");
    v.token_types.assign(v.tokens.size(), 1);
    auto t = make(v);
    Ids ids = t->encode("hello world!", false);
    EXPECT_EQ(ids, (Ids{id_of(v, "hello"), id_of(v, byte_level(" world")), '!'}));
    EXPECT_EQ(t->decode(ids), "hello world!");
    EXPECT_EQ(t->decode_token(' '), " ");
    EXPECT_EQ(t->decode_token('\n'), "\n");
    // Forced to a control token by its text, as llama.cpp does: prints nothing.
    EXPECT_EQ(t->token_type(id_of(v, "<|endoftext|>")), TokenType::kControl);
    EXPECT_EQ(t->decode_token(id_of(v, "<|endoftext|>")), "");
}

TEST(BpeTokenizer, RoundTripsAsciiAndNonAscii) {
    for (const char* pre : {"gpt-2", "llama-bpe", "", "qwen2", "falcon", "starcoder"}) {
        auto t = make(bpe_vocab({{" ", "t"}, {"h", "e"}, {" t", "he"}, {"\xc3", "\xa9"}}, pre));
        for (const std::string& s : std::vector<std::string>{
                 "", "Hello, world!\n\tTabs  and   spaces ", "the  theme's 12345 ok?!\r\n\r\n x",
                 "h\xc3\xa9llo w\xc3\xb6rld \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80 "
                 "\xd9\xa3\xd9\xa4",
                 "   ", std::string("nul\0byte", 8)}) {
            EXPECT_EQ(t->decode(t->encode(s, false)), s) << pre << ": " << s;
        }
        EXPECT_EQ(t->encode("the", false), (Ids{'t', 257}));
    }
}

TEST(BpeTokenizer, InvalidUtf8BecomesReplacementCharacters) {
    auto t = make(bpe_vocab({}));
    // llama.cpp decodes text to code points first; each bad byte becomes U+FFFD.
    EXPECT_EQ(t->decode(t->encode("a\xff"
                                  "b\xc3",
                                  false)),
              "a\xef\xbf\xbd"
              "b\xef\xbf\xbd");
}

TEST(BpeTokenizer, PiecesOutsideTheVocabularyKeepOnlyOneByteTokens) {
    TokenizerVocab v;
    v.kind = TokenizerKind::kGpt2Bpe;
    v.tokens = {"a", "b", "\xc4\xa0"};  // a, b, Ġ
    v.bos = v.eos = v.unk = -1;
    auto t = make(v);
    // " é" maps to "Ġ" "Ã" "©": only Ġ is a token; the rest is dropped, as in llama.cpp.
    EXPECT_EQ(t->encode("a \xc3\xa9", false), (Ids{0, 2}));
}

TEST(BpeTokenizer, Llama3TakesWordsThatAreTokensWhole) {
    auto v = bpe_vocab({{"a", "b"}}, "llama-bpe");
    v.tokens.push_back("abc");  // no merge produces it
    auto llama3 = make(v);
    EXPECT_EQ(llama3->encode("abc", false), Ids{257});
    v.pre = "gpt-2";
    EXPECT_EQ(make(v)->encode("abc", false), (Ids{256, 'c'}));
}

TEST(BpeTokenizer, UnknownPreTokenizerFallsBackToGpt2WithAWarning) {
    auto t = make(bpe_vocab({}, "tekken"));
    ASSERT_EQ(t->warnings().size(), 1u);
    EXPECT_NE(t->warnings()[0].find("tekken"), std::string::npos);
    EXPECT_EQ(t->encode("a1", false), raw_bytes("a1"));
    EXPECT_TRUE(make(bpe_vocab({}, "llama-bpe"))->warnings().empty());
    EXPECT_TRUE(make(bpe_vocab({}, ""))->warnings().empty());
}

TEST(BpePreTokenizer, Gpt2Pattern) {
    auto split = [](std::string_view s) { return bpe_split_words(s, BpePreTokenizer::kGpt2); };
    EXPECT_EQ(split("Hello world's  test 123 !!\n\n x"),
              (Words{"Hello", " world", "'s", " ", " test", " 123", " !!", "\n\n", " x"}));
    EXPECT_EQ(split("I'M here, don'T 12345 ok\r\n\r\n  x  "),
              (Words{"I", "'", "M", " here", ",", " don", "'", "T", " 12345", " ok", "\r\n\r\n ",
                     " x", "  "}));
    EXPECT_EQ(
        split("h\xc3\xa9llo w\xc3\xb6rld \xe4\xb8\xad\xe6\x96\x87 \xd9\xa3\xd9\xa4 x\xc2\xa0y"),
        (Words{"h\xc3\xa9llo", " w\xc3\xb6rld", " \xe4\xb8\xad\xe6\x96\x87", " \xd9\xa3\xd9\xa4",
               " x", "\xc2\xa0", "y"}));
    EXPECT_EQ(split("let's go!? ...yes"), (Words{"let", "'s", " go", "!?", " ...", "yes"}));
    EXPECT_EQ(split("   "), Words{"   "});
    EXPECT_EQ(split("a "), (Words{"a", " "}));
    EXPECT_TRUE(split("").empty());
}

TEST(BpePreTokenizer, Llama3Pattern) {
    auto split = [](std::string_view s) { return bpe_split_words(s, BpePreTokenizer::kLlama3); };
    EXPECT_EQ(split("Hello world's  test 123 !!\n\n x"),
              (Words{"Hello", " world", "'s", " ", " test", " ", "123", " !!\n\n", " x"}));
    EXPECT_EQ(split("I'M here, don'T 12345 ok\r\n\r\n  x  "),
              (Words{"I", "'M", " here", ",", " don", "'T", " ", "123", "45", " ok", "\r\n\r\n",
                     " ", " x", "  "}));
    EXPECT_EQ(split("h\xc3\xa9llo \xd9\xa3\xd9\xa4 x\xc2\xa0y"),
              (Words{"h\xc3\xa9llo", " ", "\xd9\xa3\xd9\xa4", " x", "\xc2\xa0y"}));
    EXPECT_EQ(bpe_split_words("12345", BpePreTokenizer::kQwen2), (Words{"1", "2", "3", "4", "5"}));
}

TEST(BpePreTokenizer, MultiStagePatterns) {
    // default: [\p{P}$+<=>^~|]+, then GPT-2, then \p{N}+, then [0-9]{3}.
    EXPECT_EQ(bpe_split_words("a+b=1234567 x!", BpePreTokenizer::kDefault),
              (Words{"a", "+", "b", "=", "123", "456", "7", " x", "!"}));
    EXPECT_EQ(bpe_split_words("a`b 12", BpePreTokenizer::kFalcon), (Words{"a", "`", "b", " 12"}));
    EXPECT_EQ(bpe_split_words("ab 12", BpePreTokenizer::kStarcoder), (Words{"ab", " ", "1", "2"}));
}

// DeepSeek's splits, as llama.cpp's unicode_regex_split makes them (llama.cpp c392e50). The
// fraction U+00BD is \p{N}, and neither pattern lets a number take the space before it.
TEST(BpePreTokenizer, DeepseekPatterns) {
    const std::string half = "\xc2\xbd";
    auto llm = [](std::string_view s) { return bpe_split_words(s, BpePreTokenizer::kDeepseekLlm); };
    auto coder = [](std::string_view s) {
        return bpe_split_words(s, BpePreTokenizer::kDeepseekCoder);
    };
    EXPECT_EQ(llm("ied 4 " + half + " months"), (Words{"ied", " ", "4", " ", half, " months"}));
    EXPECT_EQ(coder("ied 4 " + half + " months"), (Words{"ied", " ", "4", " ", half, " months"}));
    // \p{N}+ against \p{N}: deepseek-llm keeps digit runs, deepseek-coder splits every digit.
    EXPECT_EQ(llm("3" + half + " cups"), (Words{"3" + half, " cups"}));
    EXPECT_EQ(coder("3" + half + " cups"), (Words{"3", half, " cups"}));
    // deepseek-llm's letter list has u-umlaut, but its punctuation stage's ':-~' takes ASCII
    // letters, cutting them off again; deepseek-coder's \p{L} keeps the word whole.
    EXPECT_EQ(llm("F\xc3\xbchrer"), (Words{"F", "\xc3\xbc", "hrer"}));
    EXPECT_EQ(coder("F\xc3\xbchrer"), Words{"F\xc3\xbchrer"});
    // Newlines one by one; CJK and Hangul runs; trailing spaces kept together.
    const std::string cjk = "\xe4\xb8\xad\xe6\x96\x87", hangul = "\xed\x95\x9c\xea\xb5\xad";
    EXPECT_EQ(llm("x  \n\n 12345 " + cjk + " " + hangul + "!!"),
              (Words{"x", "  ", "\n", "\n", " ", "12345", " ", cjk, " ", hangul, "!!"}));
    EXPECT_EQ(coder("x  \n\n 123 " + cjk + "!!"),
              (Words{"x", "  ", "\n", "\n", " ", "1", "2", "3", " ", cjk, "!!"}));
    EXPECT_EQ(llm("Hello, world!  "), (Words{"Hello", ",", " world", "!", "  "}));
}

TEST(BpeTokenizer, DeepseekKeepsTheSpaceBeforeAFractionApart) {
    // " " + U+00BD: GPT-2's pre-tokenizer leaves one word that merges into one token; the
    // DeepSeek ones give llama.cpp's two words, a space and the fraction.
    auto v = bpe_vocab({{"\xc2", "\xbd"}, {" ", "\xc2\xbd"}, {"i", "e"}, {"ie", "d"}});
    const Ids apart{' ', id_of(v, byte_level("\xc2\xbd"))};
    for (const char* pre : {"deepseek-llm", "deepseek-coder"}) {
        v.pre = pre;
        auto t = make(v);
        EXPECT_TRUE(t->warnings().empty()) << pre;
        EXPECT_EQ(t->encode(" \xc2\xbd", false), apart) << pre;
        EXPECT_EQ(t->encode("ied 4 \xc2\xbd", false),
                  (Ids{id_of(v, "ied"), ' ', '4', ' ', apart[1]}))
            << pre;
    }
    v.pre = "gpt-2";
    EXPECT_EQ(make(v)->encode(" \xc2\xbd", false), Ids{id_of(v, byte_level(" \xc2\xbd"))});
}

// [SECTION] Construction errors

std::string error_of(const TokenizerVocab& v) {
    auto t = Tokenizer::from_vocab(v);
    return t.ok() ? "(no error)" : t.error().message;
}

TEST(Tokenizer, FromVocabRefusesInconsistentData) {
    const auto v = spm_vocab({{"a", 0}});
    EXPECT_NE(error_of(TokenizerVocab{}).find("tokenizer.ggml.tokens is empty"), std::string::npos);
    auto bad = v;
    bad.scores.pop_back();
    EXPECT_NE(error_of(bad).find("tokenizer.ggml.scores has 259 entries for 260 tokens"),
              std::string::npos);
    bad = v;
    bad.token_types.push_back(1);
    EXPECT_NE(error_of(bad).find("tokenizer.ggml.token_type"), std::string::npos);
    bad = v;
    bad.bos = 260;
    EXPECT_NE(error_of(bad).find("tokenizer.ggml.bos_token_id 260 is outside the 260 tokens"),
              std::string::npos);
    bad = v;
    bad.eos = -2;
    EXPECT_NE(error_of(bad).find("tokenizer.ggml.eos_token_id"), std::string::npos);
    bad = v;
    bad.unk = 1000;
    EXPECT_NE(error_of(bad).find("tokenizer.ggml.unknown_token_id"), std::string::npos);
    bad = v;
    bad.tokens.back() = "<s>";
    EXPECT_NE(error_of(bad).find("'<s>' twice (ids 1 and 259)"), std::string::npos);
    bad = v;
    bad.scores[5] = std::nanf("");
    EXPECT_NE(error_of(bad).find("tokenizer.ggml.scores[5] is not a number"), std::string::npos);
    bad = v;
    bad.tokens[7] = std::string(100000, 'x');
    EXPECT_NE(error_of(bad).find("tokenizer.ggml.tokens[7] is 100000 bytes long"),
              std::string::npos);
    bad = v;
    bad.kind = static_cast<TokenizerKind>(7);
    EXPECT_NE(error_of(bad).find("kind"), std::string::npos);
}

// Metadata that used to load without a word and then tokenized nonsense.
TEST(Tokenizer, FromVocabRefusesBrokenMergesAndEmptyTokens) {
    const auto b = bpe_vocab({{"a", "b"}});
    auto bad = b;
    bad.merges.push_back("qq zz");  // neither half is a token
    EXPECT_NE(error_of(bad).find("tokenizer.ggml.merges[1] 'qq zz' names 'qq', which is not a "
                                 "token"),
              std::string::npos)
        << error_of(bad);
    bad = b;
    bad.merges.push_back("ab");  // no space
    EXPECT_NE(error_of(bad).find("is not two tokens separated by a space"), std::string::npos);
    bad = b;
    bad.merges.push_back("a ");  // nothing after the space
    EXPECT_NE(error_of(bad).find("is not two tokens separated by a space"), std::string::npos);
    bad = b;
    bad.merges.push_back("");
    EXPECT_NE(error_of(bad).find("tokenizer.ggml.merges[1] is empty"), std::string::npos);
    // Thousands of empty normal tokens: the first is reported.
    bad = b;
    for (int i = 0; i < 5000; ++i)
        bad.tokens.push_back("");
    EXPECT_NE(error_of(bad).find("tokenizer.ggml.tokens[257] is empty"), std::string::npos)
        << error_of(bad);
    auto spm = spm_vocab({{"a", 0}});
    spm.tokens[5] = "";
    spm.token_types[5] = static_cast<int32_t>(TokenType::kNormal);
    EXPECT_NE(error_of(spm).find("tokenizer.ggml.tokens[5] is empty"), std::string::npos);
}

TEST(Tokenizer, FromVocabAcceptsOddButValidData) {
    auto v = spm_vocab({{"a", 0}});
    v.tokens[5] = "";  // a placeholder: renamed, as llama.cpp does
    v.token_types[5] = static_cast<int32_t>(TokenType::kUnused);
    v.token_types[6] = 42;  // unknown type numbers count as undefined
    v.bos = v.eos = v.unk = -1;
    auto t = make(v);
    EXPECT_EQ(t->token_text(5), "[EMPTY_5]");
    EXPECT_EQ(t->token_type(6), TokenType::kUndefined);
    EXPECT_FALSE(t->wants_bos());
    EXPECT_EQ(t->encode("a", true), (Ids{byte_id(0xe2), byte_id(0x96), byte_id(0x81), 259}));
    auto no_merges = bpe_vocab({});
    EXPECT_TRUE(make(no_merges));
}

// A GGUF image holding only tokenizer metadata.
struct GgufTokenizer {
    std::string bytes;
    Result<std::unique_ptr<Tokenizer>> load() {
        auto f = GgufFile::parse({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()},
                                 "tok.gguf");
        if (!f) return f.error();
        return Tokenizer::from_gguf(f.value());
    }
};

test::GgufBuilder spm_gguf(const TokenizerVocab& v) {
    test::GgufBuilder b;
    b.kv_string("general.architecture", "llama");
    b.kv_string("tokenizer.ggml.model", "llama");
    b.kv_strings("tokenizer.ggml.tokens", v.tokens);
    b.kv_f32s("tokenizer.ggml.scores", v.scores);
    b.kv_i32s("tokenizer.ggml.token_type", v.token_types);
    return b;
}

std::string gguf_error(const test::GgufBuilder& b) {
    auto t = GgufTokenizer{b.build()}.load();
    return t.ok() ? "(no error)" : t.error().message;
}

TEST(Tokenizer, FromGgufUsesLlamaCppDefaults) {
    const auto v = spm_vocab({{S, -1}, {"a", -1}});
    auto t = GgufTokenizer{spm_gguf(v).build()}.load();
    ASSERT_TRUE(t.ok()) << t.error().message;
    EXPECT_EQ((*t)->kind(), TokenizerKind::kSentencePiece);
    EXPECT_EQ((*t)->bos(), 1);
    EXPECT_EQ((*t)->eos(), 2);
    EXPECT_EQ((*t)->unk(), 0);
    EXPECT_TRUE((*t)->wants_bos());
    EXPECT_TRUE((*t)->adds_space_prefix());
    EXPECT_EQ((*t)->encode("a", true), (Ids{1, id_of(v, S), id_of(v, "a")}));

    auto b = spm_gguf(v);
    b.kv_bool("tokenizer.ggml.add_space_prefix", false);
    b.kv_bool("tokenizer.ggml.add_bos_token", false);
    b.kv_u32("tokenizer.ggml.eos_token_id", 5);
    t = GgufTokenizer{b.build()}.load();
    ASSERT_TRUE(t.ok()) << t.error().message;
    EXPECT_FALSE((*t)->wants_bos());
    EXPECT_EQ((*t)->eos(), 5);
    EXPECT_EQ((*t)->encode("a", false), Ids{id_of(v, "a")});

    // gpt2: BOS/EOS default to 11, add_bos to false except for llama3's pre-tokenizer.
    auto bv = bpe_vocab({{"a", "b"}});
    test::GgufBuilder g;
    g.kv_string("tokenizer.ggml.model", "gpt2");
    g.kv_strings("tokenizer.ggml.tokens", bv.tokens);
    g.kv_strings("tokenizer.ggml.merges", bv.merges);
    t = GgufTokenizer{g.build()}.load();
    ASSERT_TRUE(t.ok()) << t.error().message;
    EXPECT_EQ((*t)->kind(), TokenizerKind::kGpt2Bpe);
    EXPECT_EQ((*t)->bos(), 11);
    EXPECT_FALSE((*t)->wants_bos());
    EXPECT_EQ((*t)->encode("ab", false), Ids{256});
    g.kv_string("tokenizer.ggml.pre", "llama-bpe");
    t = GgufTokenizer{g.build()}.load();
    ASSERT_TRUE(t.ok()) << t.error().message;
    EXPECT_TRUE((*t)->wants_bos());
}

TEST(Tokenizer, FromGgufErrorsNameTheKey) {
    const auto v = spm_vocab({{S, -1}});
    test::GgufBuilder b;
    b.kv_string("tokenizer.ggml.model", "bert");
    b.kv_strings("tokenizer.ggml.tokens", v.tokens);
    std::string e = gguf_error(b);
    EXPECT_NE(e.find("tok.gguf: tokenizer.ggml.model 'bert' is not supported"), std::string::npos)
        << e;

    test::GgufBuilder no_tokens;
    no_tokens.kv_string("tokenizer.ggml.model", "llama");
    EXPECT_NE(gguf_error(no_tokens).find("tokenizer.ggml.tokens"), std::string::npos);

    auto short_scores = v;
    short_scores.scores.resize(10);
    e = gguf_error(spm_gguf(short_scores));
    EXPECT_NE(e.find("tok.gguf: tokenizer.ggml.scores has 10 entries for 260 tokens"),
              std::string::npos)
        << e;

    auto bos = spm_gguf(v);
    bos.kv_u32("tokenizer.ggml.bos_token_id", 260);
    EXPECT_NE(gguf_error(bos).find("tokenizer.ggml.bos_token_id 260 is outside"),
              std::string::npos);

    auto bad_type = spm_gguf(v);
    bad_type.kv_string("tokenizer.ggml.add_bos_token", "yes");
    EXPECT_NE(gguf_error(bad_type).find("tokenizer.ggml.add_bos_token"), std::string::npos);

    test::GgufBuilder f32_types;
    f32_types.kv_string("tokenizer.ggml.model", "llama");
    f32_types.kv_strings("tokenizer.ggml.tokens", {"a", "b"});
    f32_types.kv_f32s("tokenizer.ggml.token_type", {1.0f, 1.5f});
    EXPECT_NE(gguf_error(f32_types).find("tokenizer.ggml.token_type[1] is not a 32-bit integer"),
              std::string::npos);

    test::GgufBuilder no_merges;
    no_merges.kv_string("tokenizer.ggml.model", "gpt2");
    no_merges.kv_strings("tokenizer.ggml.tokens", {"a"});
    EXPECT_NE(gguf_error(no_merges).find("tokenizer.ggml.merges"), std::string::npos);
}

// [SECTION] Speed: O(n log n), 100 KB well under a second even in a debug build

TEST(Tokenizer, HundredKilobytesTokenizeQuickly) {
    std::mt19937 rng(7);
    std::vector<std::pair<std::string, float>> pieces{{S, -20}};
    std::vector<std::pair<std::string, std::string>> merges;
    for (char a = 'a'; a <= 'z'; ++a) {
        pieces.push_back({std::string(1, a), -20});
        pieces.push_back({S + a, -static_cast<float>(rng() % 1000) / 100});
        merges.push_back({" ", std::string(1, a)});
        for (char b = 'a'; b <= 'z'; ++b) {
            pieces.push_back({std::string{a, b}, -static_cast<float>(rng() % 1000) / 100});
            if (rng() % 3 == 0) merges.push_back({std::string(1, a), std::string(1, b)});
        }
    }
    std::string text;
    while (text.size() < 100'000) {
        for (int k = 0, n = 1 + static_cast<int>(rng() % 9); k < n; ++k)
            text += static_cast<char>('a' + rng() % 26);
        text += rng() % 10 == 0 ? "\n" : " ";
    }
    auto spm = make(spm_vocab(pieces));
    auto bpe = make(bpe_vocab(merges));
    for (const Tokenizer* t : {spm.get(), bpe.get()}) {
        for (const std::string& s : {text, std::string(100'000, 'a')}) {
            auto start = std::chrono::steady_clock::now();
            Ids ids = t->encode(s, false);
            double seconds =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            EXPECT_LT(seconds, 1.0);
            EXPECT_EQ(t->decode(ids, true), s);
        }
    }
}

// [SECTION] The bundled model

TEST(Tokenizer, BundledModelRoundTripsText) {
    auto path = test::source_file("assets/models/kvscope-demo.gguf");
    if (!path) GTEST_SKIP() << "bundled model assets/models/kvscope-demo.gguf not present";
    auto f = GgufFile::open(*path);
    ASSERT_TRUE(f.ok()) << f.error().message;
    auto t = Tokenizer::from_gguf(f.value());
    ASSERT_TRUE(t.ok()) << t.error().message;
    EXPECT_EQ((*t)->kind(), TokenizerKind::kSentencePiece);
    EXPECT_EQ((*t)->vocab_size(), 2048);
    EXPECT_TRUE((*t)->wants_bos());
    EXPECT_TRUE((*t)->warnings().empty());
    for (std::string text :
         {"In the beginning God created the heaven and the earth.",
          "And the LORD said unto Moses, Speak unto the children of Israel",
          "  leading and trailing spaces,   and runs of them  ", "lines\nand\ttabs\r\n",
          "numbers 1234 and symbols #@! and unicode \xc3\xa9\xe2\x82\xac \xf0\x9f\x98\x80",
          "invalid \x80\xbf utf-8 \xc3", ""}) {
        Ids ids = (*t)->encode(text, true);
        ASSERT_FALSE(ids.empty());
        EXPECT_EQ(ids[0], (*t)->bos());
        EXPECT_EQ((*t)->decode(ids, true), text);
        EXPECT_EQ((*t)->decode(ids), text.empty() ? "" : " " + text);
        if (text.rfind("In the", 0) == 0 || text.rfind("And the", 0) == 0) {
            EXPECT_LT(ids.size(), text.size() / 3) << "merges should make tokens of words";
        }
    }
}

}  // namespace
}  // namespace kvscope
