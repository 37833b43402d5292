// `kvscope kv-size`: the acceptance numbers from the command line, JSON, a model file's
// config, and one line with exit 2 for each bad value.
#include <gtest/gtest.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "test_support.h"

namespace kvscope {
namespace {

test::CommandResult kvscope(std::vector<std::string> args) {
    return test::run_kvscope(std::move(args), 60);
}

TEST(KvSizeCli, Llama2SevenBAt2048TokensOfF16IsAGibibyte) {
    auto r = kvscope({"kv-size", "--shape", "llama-2-7b", "--ctx", "2048", "--kv-dtype", "f16"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("1073741824 bytes"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("2 (K and V) x 32 layers x 32 KV heads x 128 head_dim x 2 bytes"),
              std::string::npos)
        << r.out;
    auto j = kvscope({"kv-size", "--shape", "llama-3-8b", "--ctx", "2048", "--kv-dtype", "f16",
                      "--batch", "4", "--json"});
    ASSERT_EQ(j.exit_code, 0) << j.err;
    auto doc = nlohmann::json::parse(j.out);
    EXPECT_EQ(doc["bytes_per_sequence"], 1073741824 / 4);
    EXPECT_EQ(doc["bytes_per_batch"], 1073741824);
    EXPECT_EQ(doc["variants"].size(), 3u);
    // A synthetic model is its shape.
    auto syn = kvscope({"kv-size", "--model", "synthetic:llama-3-8b:q4_0", "--ctx", "2048",
                        "--kv-dtype", "f16", "--json"});
    ASSERT_EQ(syn.exit_code, 0) << syn.err;
    EXPECT_EQ(nlohmann::json::parse(syn.out)["bytes_per_sequence"], 1073741824 / 4);
}

TEST(KvSizeCli, ReadsAModelFilesConfig) {
    // The bundled model, from its GGUF metadata: the same numbers as its config.
    auto r = kvscope({"kv-size", "--model", test::bundled_model(), "--ctx", "256", "--json"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto j = nlohmann::json::parse(r.out);
    const int64_t per_token = 2 * j["n_layers"].get<int64_t>() * j["n_kv_heads"].get<int64_t>() *
                              j["head_dim"].get<int64_t>() * 2;
    EXPECT_GT(per_token, 0);
    EXPECT_EQ(j["bytes_per_token"], per_token);
    EXPECT_EQ(j["bytes_per_sequence"], per_token * 256);
    auto missing = kvscope({"kv-size", "--model", test::temp_dir() + "/none.gguf"});
    EXPECT_EQ(missing.exit_code, 1);
}

TEST(KvSizeCli, BadValuesAreOneLineAndExitTwo) {
    struct Case {
        std::vector<std::string> args;
        std::string says;
    };
    for (const Case& c : {
             Case{{"kv-size", "--shape", "llama-9"}, "known: qwen2.5-0.5b"},
             Case{{"kv-size", "--shape", "llama-2-7b", "--ctx", "0"}, "--ctx"},
             Case{{"kv-size", "--shape", "llama-2-7b", "--ctx", "99999999999"}, "--ctx"},
             Case{{"kv-size", "--shape", "llama-2-7b", "--batch", "0"}, "--batch"},
             Case{{"kv-size", "--shape", "llama-2-7b", "--kv-dtype", "fp8"}, "--kv-dtype"},
             Case{{"kv-size", "--shape", "deepseek-v3", "--kv-dtype", "int4"}, "MLA"},
             Case{{"kv-size", "--shape", "llama-2-7b", "--model", "x.gguf"}, "not both"},
         }) {
        auto r = kvscope(c.args);
        EXPECT_EQ(r.exit_code, 2) << c.args.back() << ": " << r.err;
        EXPECT_NE(r.err.find(c.says), std::string::npos) << r.err;
        EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
        EXPECT_TRUE(r.out.empty()) << r.out;
    }
}

}  // namespace
}  // namespace kvscope
