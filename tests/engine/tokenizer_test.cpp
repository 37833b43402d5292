// Tokenizers: SentencePiece merges by score with byte fallback (llama.cpp's behaviour), GPT-2
// byte-level BPE, construction errors, and the bundled model's vocabulary when present.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "engine/model_loader.h"
#include "engine/tokenizer.h"
#include "test_support.h"

namespace kvscope {
namespace {

// <unk> <s> </s>, 256 byte tokens, then pieces with scores (higher merges first).
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
    for (const auto& [p, s] : pieces) {
        v.tokens.push_back(p);
        v.token_types.push_back(1);
    }
    v.scores.assign(v.tokens.size(), 0.0f);
    for (size_t i = 0; i < pieces.size(); ++i)
        v.scores[259 + i] = pieces[i].second;
    return v;
}

int32_t id_of(const TokenizerVocab& v, const std::string& piece) {
    for (size_t i = 0; i < v.tokens.size(); ++i)
        if (v.tokens[i] == piece) return static_cast<int32_t>(i);
    return -1;
}

const std::string S = "\xe2\x96\x81";  // U+2581

TEST(SpmTokenizer, MergesByScoreAndFallsBackToBytes) {
    auto v = spm_vocab({{S, -1},
                        {"h", -1},
                        {"e", -1},
                        {"l", -1},
                        {"o", -1},
                        {S + "h", -3},
                        {"el", -2},
                        {"ll", -0.5f},
                        {"lo", -0.6f},
                        {"he", -2.5f},
                        {S + "hell", -4},
                        {"hell", -3.5f}});
    auto t = Tokenizer::from_vocab(v);
    ASSERT_TRUE(t.ok()) << t.error().message;
    // "hello" -> "▁hello": "ll" (-0.5) merges first, then "he"... final pieces are vocab tokens.
    auto ids = (*t)->encode("hello", true);
    ASSERT_FALSE(ids.empty());
    EXPECT_EQ(ids[0], 1);  // BOS
    std::string back;
    for (size_t i = 1; i < ids.size(); ++i)
        back += (*t)->decode_token(ids[i]);
    EXPECT_EQ(back, " hello");
    // "é" is not in the vocabulary: two byte tokens.
    auto e = (*t)->encode("\xc3\xa9", false);
    EXPECT_EQ(e, (std::vector<int32_t>{id_of(v, S), id_of(v, "<0xC3>"), id_of(v, "<0xA9>")}));
    EXPECT_EQ((*t)->decode(e), " \xc3\xa9");
    // Ties go to the leftmost pair; an empty text is just BOS.
    EXPECT_EQ((*t)->encode("", true), std::vector<int32_t>{1});
    EXPECT_TRUE((*t)->encode("", false).empty());
}

TEST(SpmTokenizer, RoundTripsArbitraryBytesIncludingInvalidUtf8) {
    auto v = spm_vocab({{S, -1}, {"a", -1}, {"b", -1}, {"ab", -0.1f}, {S + "a", -0.2f}});
    auto t = Tokenizer::from_vocab(v);
    ASSERT_TRUE(t.ok());
    std::mt19937 rng(4);
    for (int i = 0; i < 500; ++i) {
        std::string s;
        for (int k = 0, n = static_cast<int>(rng() % 20); k < n; ++k) {
            int r = static_cast<int>(rng() % 6);
            s += r == 0   ? 'a'
                 : r == 1 ? 'b'
                 : r == 2 ? ' '
                 : r == 3 ? '\n'
                          : static_cast<char>(rng() % 256);
        }
        if (s.empty() || s.find(' ') != std::string::npos) continue;  // spaces: checked below
        EXPECT_EQ((*t)->decode((*t)->encode(s, false)), " " + s);
    }
    EXPECT_EQ((*t)->decode((*t)->encode("a b  ab", false)), " a b  ab");
}

TEST(BpeTokenizer, Gpt2ByteLevelMergesByRank) {
    TokenizerVocab v;
    v.kind = TokenizerKind::kGpt2Bpe;
    v.tokens = {"h",         "e",  "l",           "o",  "\xc4\xa0",      "w",
                "r",         "d",  "he",          "ll", "hell",          "hello",
                "\xc4\xa0w", "or", "\xc4\xa0wor", "ld", "\xc4\xa0world", "!",
                "<|end|>"};
    v.merges = {"h e", "l l",          "he ll", "hell o",        "\xc4\xa0 w",
                "o r", "\xc4\xa0w or", "l d",   "\xc4\xa0wor ld"};
    v.token_types.assign(v.tokens.size(), 1);
    v.token_types.back() = 3;
    v.bos = -1;
    v.eos = 18;
    v.unk = -1;
    v.add_bos = false;
    auto t = Tokenizer::from_vocab(v);
    ASSERT_TRUE(t.ok()) << t.error().message;
    auto ids = (*t)->encode("hello world!", false);
    EXPECT_EQ(ids, (std::vector<int32_t>{11, 16, 17}));
    EXPECT_EQ((*t)->decode(ids), "hello world!");
    EXPECT_EQ((*t)->decode_token(18), "");  // control tokens print nothing
}

TEST(Tokenizer, RefusesInconsistentVocabularies) {
    auto v = spm_vocab({{"a", 0}});
    auto bad_scores = v;
    bad_scores.scores.pop_back();
    EXPECT_NE(Tokenizer::from_vocab(bad_scores).error().message.find("scores"), std::string::npos);
    auto bad_bos = v;
    bad_bos.bos = 100000;
    EXPECT_NE(Tokenizer::from_vocab(bad_bos).error().message.find("bos token id"),
              std::string::npos);
    TokenizerVocab empty;
    EXPECT_FALSE(Tokenizer::from_vocab(empty).ok());
    TokenizerVocab bpe;
    bpe.kind = TokenizerKind::kGpt2Bpe;
    bpe.tokens = {"a"};
    bpe.bos = bpe.eos = bpe.unk = -1;
    EXPECT_NE(Tokenizer::from_vocab(bpe).error().message.find("merges"), std::string::npos);
}

TEST(Tokenizer, BundledModelRoundTripsText) {
    auto path = test::source_file("assets/models/kvscope-demo.gguf");
    if (!path) GTEST_SKIP() << "bundled model assets/models/kvscope-demo.gguf not present";
    auto m = load_model(*path);
    ASSERT_TRUE(m.ok()) << m.error().message;
    ASSERT_TRUE(m->tokenizer);
    for (const char* text : {"In the beginning God created the heaven and the earth.",
                             "And the LORD said unto Moses, Speak unto the children of Israel",
                             "numbers 1234 and symbols #@! and unicode \xc3\xa9\xe2\x82\xac"}) {
        auto ids = m->tokenizer->encode(text, false);
        EXPECT_LT(ids.size(), std::string(text).size());
        std::string back = m->tokenizer->decode(ids);
        EXPECT_EQ(back, std::string(" ") + text);
    }
}

}  // namespace
}  // namespace kvscope
