// The GGUF reader and ggml types: values and tensors read back as written (v2 and v3), fp16 /
// bf16 / block dequantization against reference values computed here, and every kind of lying
// or truncated file refused with a one-line message that names the file, the item and the
// problem, never a crash (the ASan build watches the loops over prefixes and byte flips).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>

#include "base/terminal_text.h"
#include "engine/gguf_file.h"
#include "gguf_builder.h"
#include "test_support.h"

namespace kvscope {
namespace {

using test::GgufBuilder;
using test::patch;

std::vector<double> widened(const GgufNumberArray& numbers) {
    return {numbers.begin(), numbers.end()};
}

Result<GgufFile> parse(const std::string& image, const std::string& name = "t.gguf") {
    return GgufFile::parse({reinterpret_cast<const uint8_t*>(image.data()), image.size()}, name);
}

// Refused, with a one-line message that starts with the file name and contains `needle`.
template <class T>
::testing::AssertionResult fails_with(const Result<T>& r, const std::string& needle,
                                      const std::string& file = "t.gguf") {
    if (r.ok()) return ::testing::AssertionFailure() << "accepted; expected \"" << needle << "\"";
    const std::string& m = r.error().message;
    if (m.find(needle) == std::string::npos)
        return ::testing::AssertionFailure() << "message lacks \"" << needle << "\": " << m;
    if (m.find('\n') != std::string::npos)
        return ::testing::AssertionFailure() << "message spans lines: " << m;
    if (m.rfind(file + ":", 0) != 0)
        return ::testing::AssertionFailure() << "message does not start with the file: " << m;
    return ::testing::AssertionSuccess();
}

// A small file with metadata of several types and one tensor of each loadable type.
GgufBuilder small_file() {
    GgufBuilder b;
    b.kv_string("general.architecture", "llama");
    b.kv_u32("llama.block_count", 2);
    b.kv_bool("flag", true);
    b.kv_strings("tokenizer.ggml.tokens", {"a", "bc", ""});
    b.kv_f32s("tokenizer.ggml.scores", {0.5f, -1, 2});
    b.tensor("f32", {4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
    b.tensor("f16", {3}, {0.5f, -2, 1024}, GgmlType::F16);
    b.tensor("q8", {32}, std::vector<float>(32, 0.25f), GgmlType::Q8_0);
    return b;
}

// [SECTION] ggml types

TEST(GgmlType, TraitsForEveryKnownId) {
    struct Want {
        GgmlType type;
        const char* name;
        uint32_t block_elements, block_bytes;
        bool can_dequantize;
    };
    const Want want[] = {
        {GgmlType::F32, "F32", 1, 4, true},
        {GgmlType::F16, "F16", 1, 2, true},
        {GgmlType::Q4_0, "Q4_0", 32, 18, true},
        {GgmlType::Q4_1, "Q4_1", 32, 20, true},
        {GgmlType::Q5_0, "Q5_0", 32, 22, false},
        {GgmlType::Q5_1, "Q5_1", 32, 24, false},
        {GgmlType::Q8_0, "Q8_0", 32, 34, true},
        {GgmlType::Q8_1, "Q8_1", 32, 36, false},
        {GgmlType::Q2_K, "Q2_K", 256, 84, false},
        {GgmlType::Q3_K, "Q3_K", 256, 110, false},
        {GgmlType::Q4_K, "Q4_K", 256, 144, true},
        {GgmlType::Q5_K, "Q5_K", 256, 176, false},
        {GgmlType::Q6_K, "Q6_K", 256, 210, true},
        {GgmlType::Q8_K, "Q8_K", 256, 292, false},
        {GgmlType::IQ2_XXS, "IQ2_XXS", 256, 66, false},
        {GgmlType::IQ2_XS, "IQ2_XS", 256, 74, false},
        {GgmlType::IQ3_XXS, "IQ3_XXS", 256, 98, false},
        {GgmlType::IQ1_S, "IQ1_S", 256, 50, false},
        {GgmlType::IQ4_NL, "IQ4_NL", 32, 18, false},
        {GgmlType::IQ3_S, "IQ3_S", 256, 110, false},
        {GgmlType::IQ2_S, "IQ2_S", 256, 82, false},
        {GgmlType::IQ4_XS, "IQ4_XS", 256, 136, false},
        {GgmlType::I8, "I8", 1, 1, false},
        {GgmlType::I16, "I16", 1, 2, false},
        {GgmlType::I32, "I32", 1, 4, false},
        {GgmlType::I64, "I64", 1, 8, false},
        {GgmlType::F64, "F64", 1, 8, false},
        {GgmlType::IQ1_M, "IQ1_M", 256, 56, false},
        {GgmlType::BF16, "BF16", 1, 2, true},
        {GgmlType::TQ1_0, "TQ1_0", 256, 54, false},
        {GgmlType::TQ2_0, "TQ2_0", 256, 66, false},
        {GgmlType::MXFP4, "MXFP4", 32, 17, false},
    };
    for (const Want& w : want) {
        auto t = ggml_type_traits(static_cast<uint32_t>(w.type));
        ASSERT_TRUE(t) << w.name;
        EXPECT_EQ(t->name, w.name);
        EXPECT_EQ(t->block_elements, w.block_elements) << w.name;
        EXPECT_EQ(t->block_bytes, w.block_bytes) << w.name;
        EXPECT_EQ(t->can_dequantize, w.can_dequantize) << w.name;
    }
    // Removed or never assigned ids stay unknown.
    for (uint32_t id : {4u, 5u, 31u, 32u, 33u, 36u, 37u, 38u, 40u, 99u, 0xffffffffu})
        EXPECT_FALSE(ggml_type_traits(id)) << id;
}

TEST(GgmlType, RowBytesChecksBlocksAndOverflow) {
    EXPECT_EQ(ggml_row_bytes(GgmlType::F32, 10).value(), 40u);
    EXPECT_EQ(ggml_row_bytes(GgmlType::Q8_0, 64).value(), 68u);
    EXPECT_EQ(ggml_row_bytes(GgmlType::Q6_K, 512).value(), 420u);
    auto partial = ggml_row_bytes(GgmlType::Q8_0, 33);
    ASSERT_FALSE(partial.ok());
    EXPECT_NE(partial.error().message.find("32-element blocks"), std::string::npos);
    auto huge = ggml_row_bytes(GgmlType::F64, 1ull << 62);
    ASSERT_FALSE(huge.ok());
    EXPECT_NE(huge.error().message.find("2^64"), std::string::npos);
    EXPECT_FALSE(ggml_row_bytes(static_cast<GgmlType>(99), 1).ok());
}

// Independent decoding of a binary16 value from its fields.
double fp16_reference(uint16_t h) {
    const int sign = h >> 15, exp = (h >> 10) & 31, mant = h & 1023;
    double v = exp == 0 ? std::ldexp(mant, -24) : std::ldexp(1024 + mant, exp - 25);
    return sign ? -v : v;
}

TEST(GgmlType, Fp16DecodesEveryValueExactly) {
    for (uint32_t i = 0; i < 65536; ++i) {
        const auto h = static_cast<uint16_t>(i);
        const float f = fp16_to_f32(h);
        const int exp = (h >> 10) & 31;
        if (exp == 31) {
            if ((h & 1023) == 0) {
                ASSERT_TRUE(std::isinf(f)) << h;
                ASSERT_EQ(std::signbit(f), (h >> 15) != 0) << h;
            } else {
                ASSERT_TRUE(std::isnan(f)) << h;
            }
            continue;
        }
        ASSERT_EQ(static_cast<double>(f), fp16_reference(h)) << h;
        ASSERT_EQ(std::signbit(f), (h >> 15) != 0) << h;
        ASSERT_EQ(f32_to_fp16(f), h) << "round trip of " << h;  // incl. -0 and subnormals
    }
}

TEST(GgmlType, Fp16EncodingRoundsToNearestEven) {
    // Between every pair of adjacent finite halves: the midpoint goes to the even one, anything
    // a hair off the midpoint to the nearer one.
    for (uint16_t h = 0; h < 0x7bff; ++h) {
        const auto next = static_cast<uint16_t>(h + 1);
        const double lo = fp16_reference(h), hi = fp16_reference(next);
        const float mid = static_cast<float>((lo + hi) / 2);  // exact: 12 significant bits
        ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
        const uint16_t even = (h & 1) ? next : h;
        ASSERT_EQ(f32_to_fp16(mid), even) << h;
        ASSERT_EQ(f32_to_fp16(-mid), static_cast<uint16_t>(even | 0x8000)) << h;
        ASSERT_EQ(f32_to_fp16(std::nextafter(mid, 0.0f)), h) << h;
        ASSERT_EQ(f32_to_fp16(std::nextafter(mid, 1e9f)), next) << h;
    }
    EXPECT_EQ(f32_to_fp16(65504.0f), 0x7bff);
    EXPECT_EQ(f32_to_fp16(65519.99f), 0x7bff);  // below the midpoint to 2^16
    EXPECT_EQ(f32_to_fp16(65520.0f), 0x7c00);   // the midpoint rounds to even: infinity
    EXPECT_EQ(f32_to_fp16(1e10f), 0x7c00);
    EXPECT_EQ(f32_to_fp16(-1e10f), 0xfc00);
    EXPECT_EQ(f32_to_fp16(std::numeric_limits<float>::infinity()), 0x7c00);
    EXPECT_EQ(f32_to_fp16(std::ldexp(1.0f, -25)), 0x0000);  // half the smallest subnormal: even
    EXPECT_EQ(f32_to_fp16(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
    EXPECT_EQ(f32_to_fp16(1e-30f), 0x0000);
    EXPECT_EQ(f32_to_fp16(-1e-30f), 0x8000);
    EXPECT_EQ(f32_to_fp16(std::numeric_limits<float>::denorm_min()), 0x0000);
    const uint16_t nan = f32_to_fp16(std::numeric_limits<float>::quiet_NaN());
    EXPECT_EQ(nan & 0x7c00, 0x7c00);
    EXPECT_NE(nan & 0x03ff, 0);
}

TEST(GgmlType, Bf16RoundsToNearestEvenAndKeepsNan) {
    auto bits = [](float f) {
        uint32_t x;
        std::memcpy(&x, &f, 4);
        return x;
    };
    for (float f :
         {0.0f, -0.0f, 1.0f, -3.5f, std::ldexp(1.0f, 100), -std::ldexp(1.5f, -100), 65536.0f})
        EXPECT_EQ(bf16_to_f32(f32_to_bf16(f)), f) << f;
    const float ulp = std::ldexp(1.0f, -7);                     // bf16 keeps 7 mantissa bits
    EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + ulp / 2)), 1.0f);  // tie: even
    EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 3 * ulp / 2)), 1.0f + 2 * ulp);  // tie: even
    EXPECT_EQ(bf16_to_f32(f32_to_bf16(std::nextafter(1.0f + ulp / 2, 2.0f))), 1.0f + ulp);
    EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // overflows to inf
    EXPECT_TRUE(std::isinf(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::infinity()))));
    uint32_t low_payload_nan = 0x7f800001;  // truncation would make this an infinity
    float nan;
    std::memcpy(&nan, &low_payload_nan, 4);
    EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(nan))));
    EXPECT_EQ(bits(bf16_to_f32(0x3f80)), 0x3f800000u);
}

// [SECTION] Reading back what was written

TEST(GgufFile, MetadataOfEveryTypeRoundTripsInV2AndV3) {
    for (uint32_t version : {2u, 3u}) {
        GgufBuilder b;
        b.version = version;
        b.kv_u8("u8", 200);
        b.kv_i8("i8", -100);
        b.kv_u16("u16", 60000);
        b.kv_i16("i16", -30000);
        b.kv_u32("u32", 4000000000u);
        b.kv_i32("i32", -2000000000);
        b.kv_f32("f32", 0.25f);
        b.kv_bool("bool", true);
        b.kv_string("string", std::string("h\xc3\xa9llo\0x", 8));
        b.kv_u64("u64", 0xfedcba9876543210ull);
        b.kv_i64("i64", -(1ll << 60));
        b.kv_f64("f64", -1e300);
        b.kv_strings("strings", {"", "two", std::string(300, 'z')});
        b.kv_f32s("f32s", {1.5f, -2});
        b.kv_i32s("i32s", {-7, 7});
        b.array<uint8_t>("u8s", test::kGgufU8, {0, 255});
        b.array<int64_t>("i64s", test::kGgufI64, {-5});
        b.array<double>("f64s", test::kGgufF64, {});
        b.array<uint8_t>("bools", test::kGgufBool, {1, 0});
        std::string image = b.build();
        auto f = parse(image);
        ASSERT_TRUE(f.ok()) << f.error().message;
        EXPECT_EQ(f->version(), version);
        EXPECT_EQ(f->metadata().size(), 20u);  // + general.alignment
        EXPECT_EQ(f->get_uint("u8").value(), 200u);
        EXPECT_EQ(f->find("i8")->i, -100);
        EXPECT_EQ(f->get_uint("u16").value(), 60000u);
        EXPECT_EQ(f->find("i16")->i, -30000);
        EXPECT_EQ(f->get_uint("u32").value(), 4000000000u);
        EXPECT_EQ(f->find("i32")->i, -2000000000);
        EXPECT_EQ(f->get_float("f32").value(), 0.25);
        EXPECT_EQ(f->get_bool("bool").value(), true);
        EXPECT_EQ(f->get_string("string").value(), std::string("h\xc3\xa9llo\0x", 8));
        EXPECT_EQ(f->get_uint("u64").value(), 0xfedcba9876543210ull);
        EXPECT_EQ(f->find("i64")->i, -(1ll << 60));
        EXPECT_EQ(f->get_float("f64").value(), -1e300);
        EXPECT_EQ(*f->get_string_array("strings").value(),
                  (std::vector<std::string>{"", "two", std::string(300, 'z')}));
        EXPECT_EQ(widened(*f->get_number_array("f32s").value()), (std::vector<double>{1.5, -2}));
        EXPECT_EQ(widened(*f->get_number_array("i32s").value()), (std::vector<double>{-7, 7}));
        EXPECT_EQ(widened(*f->get_number_array("u8s").value()), (std::vector<double>{0, 255}));
        EXPECT_EQ(widened(*f->get_number_array("i64s").value()), (std::vector<double>{-5}));
        EXPECT_TRUE(f->get_number_array("f64s").value()->empty());
        EXPECT_EQ(widened(*f->get_number_array("bools").value()), (std::vector<double>{1, 0}));
        EXPECT_EQ(f->find("u8s")->array_type, GgufValueType::UINT8);
        EXPECT_EQ(f->get_uint("general.alignment").value(), 32u);
        EXPECT_EQ(f->find("nope"), nullptr);
        EXPECT_TRUE(f->tensors().empty());
    }
}

TEST(GgufFile, TypedGettersSayWhatWasExpected) {
    GgufBuilder b;
    b.kv_i32("negative", -3);
    b.kv_u32("count", 3);
    b.kv_string("name", "x");
    b.kv_f32s("scores", {1});
    std::string image = b.build();
    auto f = parse(image);
    ASSERT_TRUE(f.ok());
    EXPECT_TRUE(fails_with(f->get_uint("negative"), "'negative' is negative"));
    EXPECT_TRUE(fails_with(f->get_uint("missing"), "'missing' is missing"));
    EXPECT_TRUE(fails_with(f->get_string("count"), "should be a string, not a uint32"));
    EXPECT_TRUE(fails_with(f->get_uint("name"), "should be an integer, not a string"));
    EXPECT_TRUE(fails_with(f->get_float("name"), "should be a number"));
    EXPECT_TRUE(fails_with(f->get_bool("count"), "should be a bool"));
    EXPECT_TRUE(fails_with(f->get_string_array("scores"), "array of strings"));
    EXPECT_TRUE(fails_with(f->get_number_array("count"), "array of numbers"));
    EXPECT_EQ(f->get_float("count").value(), 3.0);
}

TEST(GgufFile, TensorsRoundTripWithTheirBytes) {
    for (uint32_t version : {2u, 3u}) {
        for (uint32_t alignment : {1u, 8u, 32u, 64u}) {
            GgufBuilder b = small_file();
            b.version = version;
            b.alignment = alignment;
            std::vector<uint8_t> q6k(210, 7);
            b.tensor_raw("q6k", {256}, static_cast<uint32_t>(GgmlType::Q6_K), q6k);
            auto img = b.build_with_layout();
            auto f = parse(img.bytes);
            ASSERT_TRUE(f.ok()) << f.error().message;
            ASSERT_EQ(f->tensors().size(), 4u);
            for (size_t i = 0; i < 4; ++i) {
                const GgufTensorInfo& t = f->tensors()[i];
                const auto& want = img.layout.tensors[i];
                EXPECT_EQ(t.name, want.name);
                EXPECT_EQ(t.offset, want.data_at);
                EXPECT_EQ(t.size_bytes, want.data_bytes);
                EXPECT_EQ((t.offset - img.layout.data_start) % alignment, 0u);
                EXPECT_EQ(f->data(t), f->bytes().data() + want.data_at);
                EXPECT_EQ(f->find_tensor(t.name), &t);
            }
            const GgufTensorInfo* f32 = f->find_tensor("f32");
            EXPECT_EQ(f32->dims, (std::vector<uint64_t>{4, 2}));
            EXPECT_EQ(f32->num_elements(), 8u);
            float values[8];
            std::memcpy(values, f->data(*f32), sizeof values);
            for (int i = 0; i < 8; ++i)
                EXPECT_EQ(values[i], static_cast<float>(i + 1));
            EXPECT_EQ(f->find_tensor("q8")->type, GgmlType::Q8_0);
            EXPECT_EQ(f->find_tensor("q8")->size_bytes, 34u);
            EXPECT_EQ(f->find_tensor("q6k")->type, GgmlType::Q6_K);
            EXPECT_EQ(std::memcmp(f->data(*f->find_tensor("q6k")), q6k.data(), 210), 0);
            EXPECT_EQ(f->find_tensor("absent"), nullptr);
        }
    }
}

TEST(GgufFile, DefaultAlignmentIs32WithoutTheKey) {
    GgufBuilder b = small_file();
    b.write_alignment_key = false;
    std::string image = b.build();
    auto f = parse(image);
    ASSERT_TRUE(f.ok()) << f.error().message;
    EXPECT_EQ(f->find("general.alignment"), nullptr);
    for (const auto& t : f->tensors())
        EXPECT_EQ(t.offset % 32, 0u);
}

// [SECTION] Dequantization against values computed here

TEST(GgufFile, DequantizesF16Bf16AndBlocksToReferenceValues) {
    // Raw encodings written by hand; the expected floats come from the formats' definitions.
    std::vector<uint16_t> halves = {0x0000, 0x8000, 0x3c00, 0xc000, 0x0001, 0x03ff,
                                    0x0400, 0x7bff, 0x3555, 0x7c00, 0xfc00, 0x7e00};
    std::vector<uint16_t> bf16s = {0x0000, 0x3f80, 0xc040, 0x0001, 0x7f7f, 0x7f80, 0x7fc0};
    std::vector<uint8_t> f16_bytes, bf16_bytes, q8(34), q4_0(18), q4_1(20);
    for (uint16_t h : halves)
        GgufBuilder::pod(f16_bytes, h);
    for (uint16_t h : bf16s)
        GgufBuilder::pod(bf16_bytes, h);
    // Q8_0: d = 0.5 (fp16 0x3800), q = -16..15.
    q8[0] = 0x00;
    q8[1] = 0x38;
    for (int i = 0; i < 32; ++i)
        q8[2 + static_cast<size_t>(i)] = static_cast<uint8_t>(static_cast<int8_t>(i - 16));
    // Q4_0: d = -2 (0xc000); byte i holds element i (low nibble) and i + 16 (high nibble).
    q4_0[0] = 0x00;
    q4_0[1] = 0xc0;
    for (int i = 0; i < 16; ++i)
        q4_0[2 + static_cast<size_t>(i)] = static_cast<uint8_t>(i | (15 - i) << 4);
    // Q4_1: d = 0.25 (0x3400), m = -1 (0xbc00).
    q4_1[0] = 0x00;
    q4_1[1] = 0x34;
    q4_1[2] = 0x00;
    q4_1[3] = 0xbc;
    for (int i = 0; i < 16; ++i)
        q4_1[4 + static_cast<size_t>(i)] = static_cast<uint8_t>((i * 7) % 16 | i << 4);

    GgufBuilder b;
    b.tensor_raw("f16", {halves.size()}, static_cast<uint32_t>(GgmlType::F16), f16_bytes);
    b.tensor_raw("bf16", {bf16s.size()}, static_cast<uint32_t>(GgmlType::BF16), bf16_bytes);
    b.tensor_raw("q8", {32}, static_cast<uint32_t>(GgmlType::Q8_0), q8);
    b.tensor_raw("q4_0", {32}, static_cast<uint32_t>(GgmlType::Q4_0), q4_0);
    b.tensor_raw("q4_1", {32}, static_cast<uint32_t>(GgmlType::Q4_1), q4_1);
    std::string image = b.build();
    auto f = parse(image);
    ASSERT_TRUE(f.ok()) << f.error().message;
    auto convert = [&](const std::string& name) {
        const GgufTensorInfo* t = f->find_tensor(name);
        std::vector<float> out(t->num_elements());
        dequantize_to_f32(t->type, f->data(*t), out.data(), out.size());
        return out;
    };

    auto f16 = convert("f16");
    for (size_t i = 0; i < halves.size(); ++i) {
        if ((halves[i] & 0x7c00) == 0x7c00) continue;
        EXPECT_EQ(static_cast<double>(f16[i]), fp16_reference(halves[i])) << i;
    }
    EXPECT_EQ(f16[4], std::ldexp(1.0f, -24));  // smallest subnormal
    EXPECT_EQ(f16[7], 65504.0f);
    EXPECT_TRUE(std::isinf(f16[9]) && f16[9] > 0);
    EXPECT_TRUE(std::isinf(f16[10]) && f16[10] < 0);
    EXPECT_TRUE(std::isnan(f16[11]));

    auto bf = convert("bf16");
    EXPECT_EQ(bf[0], 0.0f);
    EXPECT_EQ(bf[1], 1.0f);
    EXPECT_EQ(bf[2], -3.0f);
    EXPECT_EQ(bf[3], std::ldexp(1.0f, -133));   // a float subnormal
    EXPECT_EQ(bf[4], std::ldexp(255.0f, 120));  // largest finite bf16
    EXPECT_TRUE(std::isinf(bf[5]));
    EXPECT_TRUE(std::isnan(bf[6]));

    auto v8 = convert("q8");
    for (int i = 0; i < 32; ++i)
        EXPECT_EQ(v8[static_cast<size_t>(i)], 0.5f * static_cast<float>(i - 16)) << i;
    auto v4 = convert("q4_0");
    for (int i = 0; i < 16; ++i) {
        EXPECT_EQ(v4[static_cast<size_t>(i)], -2.0f * static_cast<float>(i - 8)) << i;
        EXPECT_EQ(v4[static_cast<size_t>(i) + 16], -2.0f * static_cast<float>(15 - i - 8)) << i;
    }
    auto v41 = convert("q4_1");
    for (int i = 0; i < 16; ++i) {
        EXPECT_EQ(v41[static_cast<size_t>(i)], 0.25f * static_cast<float>((i * 7) % 16) - 1) << i;
        EXPECT_EQ(v41[static_cast<size_t>(i) + 16], 0.25f * static_cast<float>(i) - 1) << i;
    }
}

// K-quant blocks built by hand from the format's layout (not from kvscope's decoder), with
// values that are exact in fp32, so every element can be checked for equality.
TEST(GgmlType, DequantizesQ4KBlocksAsTheFormatLaysThemOut) {
    const int scale[8] = {1, 2, 3, 4, 40, 50, 60, 63}, min[8] = {0, 1, 2, 3, 17, 33, 48, 63};
    std::vector<uint8_t> b(144, 0);
    b[0] = 0x00, b[1] = 0x3c;  // d = 1.0
    b[2] = 0x00, b[3] = 0x38;  // dmin = 0.5
    uint8_t* sc = &b[4];
    for (int j = 0; j < 4; ++j) {  // 6-bit scales and mins; sub-blocks 4-7 split over two bytes
        sc[j] = static_cast<uint8_t>((scale[j] & 63) | (scale[j + 4] >> 4) << 6);
        sc[j + 4] = static_cast<uint8_t>((min[j] & 63) | (min[j + 4] >> 4) << 6);
        sc[j + 8] = static_cast<uint8_t>((scale[j + 4] & 15) | (min[j + 4] & 15) << 4);
    }
    for (int i = 0; i < 128; ++i)  // low nibble: sub-block 2g, high: 2g + 1
        b[16 + i] = static_cast<uint8_t>((i % 16) | (15 - i % 16) << 4);
    std::vector<float> y(256);
    dequantize_to_f32(GgmlType::Q4_K, b.data(), y.data(), 256);
    for (int e = 0; e < 256; ++e) {
        const int g = e / 64, within = e % 64;
        const int sub = 2 * g + (within >= 32);
        const int q = within < 32 ? within % 16 : 15 - (within - 32) % 16;
        EXPECT_EQ(y[static_cast<size_t>(e)],
                  static_cast<float>(scale[sub] * q) - 0.5f * static_cast<float>(min[sub]))
            << "element " << e;
    }
}

TEST(GgmlType, DequantizesQ6KBlocksAsTheFormatLaysThemOut) {
    std::vector<uint8_t> b(210, 0);
    uint8_t *ql = &b[0], *qh = &b[128];
    auto* sc = reinterpret_cast<int8_t*>(&b[192]);
    for (int i = 0; i < 16; ++i)
        sc[i] = static_cast<int8_t>(i - 8);
    b[208] = 0x00, b[209] = 0x38;                             // d = 0.5
    auto code = [](int e) { return (e * 7 + e / 64) % 64; };  // 6-bit codes, value = code - 32
    // Element h*128 + 32*t + l: its low 4 bits in ql[h*64 + l + 32*(t%2)] (low nibble for
    // t < 2, high for t >= 2), its top 2 bits in qh[h*32 + l] at bit 2t, its scale
    // sc[h*8 + l/16 + 2t].
    for (int h = 0; h < 2; ++h)
        for (int t = 0; t < 4; ++t)
            for (int l = 0; l < 32; ++l) {
                const int c = code(h * 128 + 32 * t + l);
                uint8_t& lo = ql[h * 64 + l + 32 * (t % 2)];
                lo |= static_cast<uint8_t>(t < 2 ? (c & 15) : (c & 15) << 4);
                qh[h * 32 + l] |= static_cast<uint8_t>((c >> 4) << (2 * t));
            }
    std::vector<float> y(256);
    dequantize_to_f32(GgmlType::Q6_K, b.data(), y.data(), 256);
    for (int e = 0; e < 256; ++e) {
        const int h = e / 128, t = (e % 128) / 32, l = e % 32;
        const int s = h * 8 + l / 16 + 2 * t - 8;
        EXPECT_EQ(y[static_cast<size_t>(e)], 0.5f * static_cast<float>(s * (code(e) - 32)))
            << "element " << e;
    }
}

TEST(GgufFile, BuilderQuantizersRoundTripWithinTheirStep) {
    std::mt19937 rng(4);
    std::uniform_real_distribution<float> u(-3, 3);
    std::vector<float> values(256);
    for (float& v : values)
        v = u(rng);
    for (GgmlType type :
         {GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1}) {
        auto bytes = GgufBuilder::encode(values, type);
        ASSERT_EQ(bytes.size(), ggml_row_bytes(type, values.size()).value());
        std::vector<float> back(values.size());
        dequantize_to_f32(type, bytes.data(), back.data(), back.size());
        // Worst case: half a step of each format's grid over a block whose magnitude is <= 3.
        const double tol = type == GgmlType::F16    ? 1e-3
                           : type == GgmlType::BF16 ? 1.2e-2
                           : type == GgmlType::Q8_0 ? 3.0 / 127
                                                    : 6.0 / 15;
        for (size_t i = 0; i < values.size(); ++i)
            ASSERT_NEAR(back[i], values[i], tol)
                << ggml_type_traits(static_cast<uint32_t>(type))->name;
    }
}

// [SECTION] Opening files

TEST(GgufFile, OpenMapsTheFileAndSurvivesAMove) {
    std::string image = small_file().build();
    std::string path = test::write_file(test::temp_dir() + "/m.gguf", image);
    auto f = GgufFile::open(path);
    ASSERT_TRUE(f.ok()) << f.error().message;
    GgufFile moved = std::move(f).value();
    EXPECT_EQ(moved.path(), path);
    EXPECT_EQ(moved.bytes().size(), image.size());
    const GgufTensorInfo* t = moved.find_tensor("f32");
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(std::memcmp(moved.data(*t), image.data() + t->offset, t->size_bytes), 0);
}

TEST(GgufFile, MissingEmptyAndDirectoryPathsAreClearErrors) {
    std::string dir = test::temp_dir();
    EXPECT_TRUE(fails_with(GgufFile::open(dir + "/none.gguf"), "cannot open", dir + "/none.gguf"));
    std::string empty = test::write_file(dir + "/empty.gguf", "");
    EXPECT_TRUE(fails_with(GgufFile::open(empty), "empty", empty));
    EXPECT_TRUE(fails_with(GgufFile::open(dir), "is a directory", dir));
}

// [SECTION] Refusing lies, one per test

TEST(GgufFile, RefusesWrongMagic) {
    std::string image = small_file().build();
    image[3] = 'X';
    EXPECT_TRUE(fails_with(parse(image), "wrong magic"));
    EXPECT_TRUE(fails_with(parse("GG"), "truncated"));
}

TEST(GgufFile, RefusesVersion1AndUnknownVersions) {
    for (uint32_t v : {0u, 1u, 4u, 0xffffffffu}) {
        std::string image = small_file().build();
        patch(image, test::GgufLayout::kVersionAt, v);
        EXPECT_TRUE(
            fails_with(parse(image), "GGUF version " + std::to_string(v) + " is not supported"));
    }
    std::string image = small_file().build();
    patch(image, test::GgufLayout::kVersionAt, uint32_t{0x03000000});
    EXPECT_TRUE(fails_with(parse(image), "big-endian"));
}

TEST(GgufFile, EveryTruncationIsRefusedWithoutCrashing) {
    GgufBuilder b = small_file();
    b.kv_u64("big", 1);
    b.kv_f64("pi", 3.14);
    std::string image = b.build();
    ASSERT_TRUE(parse(image).ok());
    for (size_t n = 0; n < image.size(); ++n) {
        // A copy of exactly n bytes, so that ASan sees any read past the cut.
        std::vector<uint8_t> cut(image.begin(), image.begin() + static_cast<long>(n));
        auto r = GgufFile::parse(cut, "cut.gguf");
        ASSERT_FALSE(r.ok()) << "a prefix of " << n << " bytes parsed";
        const std::string& m = r.error().message;
        ASSERT_EQ(m.rfind("cut.gguf: ", 0), 0u) << m;
        ASSERT_EQ(m.find('\n'), std::string::npos) << m;
        ASSERT_TRUE(m.find("truncated") != std::string::npos ||
                    m.find("wrong magic") != std::string::npos ||
                    m.find("more than its") != std::string::npos ||
                    m.find("remain") != std::string::npos)
            << n << ": " << m;
    }
}

TEST(GgufFile, RandomByteFlipsNeverCrash) {
    GgufBuilder b = small_file();
    b.tensor("bf16", {64}, std::vector<float>(64, 2.0f), GgmlType::BF16);
    const std::string good = b.build();
    std::mt19937 rng(1234);
    int accepted = 0;
    for (int i = 0; i < 20000; ++i) {
        std::vector<uint8_t> s(good.begin(), good.end());
        const int flips = 1 + static_cast<int>(rng() % 4);
        for (int k = 0; k < flips; ++k) {
            size_t at = rng() % s.size();
            // Mostly header bytes (the data section has nothing to parse), sometimes anywhere.
            if (rng() % 4) at %= 200;
            s[at] = static_cast<uint8_t>(rng() % 3 == 0 ? 0xff : rng());
        }
        auto r = GgufFile::parse(s, "flip.gguf");
        if (!r.ok()) {
            ASSERT_EQ(r.error().message.find('\n'), std::string::npos) << r.error().message;
            continue;
        }
        ++accepted;
        for (const GgufTensorInfo& t : r->tensors()) {  // what was accepted lies in the image
            ASSERT_LE(t.offset + t.size_bytes, s.size());
            ASSERT_EQ(t.size_bytes, ggml_row_bytes(t.type, t.num_elements()).value());
        }
    }
    EXPECT_GT(accepted, 0);  // some flips hit harmless bytes (string contents, data)
}

TEST(GgufFile, RefusesTensorOffsetPastTheEnd) {
    GgufBuilder b;
    b.tensor("blk.0.attn_q.weight", {8}, std::vector<float>(8, 1.0f));
    auto img = b.build_with_layout(1 << 20);
    EXPECT_TRUE(
        fails_with(parse(img.bytes), "tensor 'blk.0.attn_q.weight' ends at byte " +
                                         std::to_string(img.layout.data_start + (1 << 20) + 8 * 4) +
                                         " but the file has " + std::to_string(img.bytes.size()) +
                                         " bytes (truncated or corrupt?)"));
    // An offset so large that offset + size would wrap around 2^64.
    patch(img.bytes, img.layout.tensors[0].offset_at, uint64_t{0xffffffffffffffe0ull});
    EXPECT_TRUE(fails_with(parse(img.bytes), "far past the end"));
}

TEST(GgufFile, RefusesSizesThatDoNotMatchTheFile) {
    // The dimensions claim more data than the file holds.
    GgufBuilder b;
    b.tensor("w", {8, 2}, std::vector<float>(16, 1.0f));
    auto img = b.build_with_layout();
    patch(img.bytes, img.layout.tensors[0].dims_at, uint64_t{9});
    EXPECT_TRUE(fails_with(parse(img.bytes), "tensor 'w' ends at byte"));
    // Rows that are not whole blocks of the tensor's type.
    GgufBuilder q;
    q.tensor_raw("q", {33}, static_cast<uint32_t>(GgmlType::Q8_0), std::vector<uint8_t>(68));
    EXPECT_TRUE(fails_with(parse(q.build()), "tensor 'q' has rows of 33 elements"));
}

TEST(GgufFile, RefusesAbsurdDimensions) {
    GgufBuilder b;
    b.tensor("x", {4, 4}, std::vector<float>(16, 1.0f));
    auto img = b.build_with_layout();
    std::string huge = img.bytes;
    patch(huge, img.layout.tensors[0].dims_at, uint64_t{1} << 62);
    EXPECT_TRUE(fails_with(parse(huge), "tensor 'x' has an absurd dimension 4611686018427387904"));
    std::string product = img.bytes;  // each dim allowed, the product not
    patch(product, img.layout.tensors[0].dims_at, uint64_t{1} << 30);
    patch(product, img.layout.tensors[0].dims_at + 8, uint64_t{1} << 30);
    EXPECT_TRUE(fails_with(parse(product), "absurd dimension"));
    std::string zero = img.bytes;
    patch(zero, img.layout.tensors[0].dims_at + 8, uint64_t{0});
    EXPECT_TRUE(fails_with(parse(zero), "tensor 'x' has a zero-sized dimension 1"));
}

TEST(GgufFile, RefusesZeroOrTooManyDimensions) {
    GgufBuilder b;
    b.tensor("x", {4}, std::vector<float>(4, 1.0f));
    auto img = b.build_with_layout();
    for (uint32_t n : {0u, 5u, 9u, 0xffffffffu}) {
        std::string s = img.bytes;
        patch(s, img.layout.tensors[0].n_dims_at, n);
        EXPECT_TRUE(fails_with(parse(s), "tensor 'x' has " + std::to_string(n) + " dimensions"));
    }
}

TEST(GgufFile, RefusesUnknownTensorType) {
    GgufBuilder b;
    b.tensor("x", {4}, std::vector<float>(4, 1.0f));
    auto img = b.build_with_layout();
    for (uint32_t type : {4u, 31u, 99u}) {
        std::string s = img.bytes;
        patch(s, img.layout.tensors[0].type_at, type);
        EXPECT_TRUE(fails_with(parse(s), "tensor 'x' has unknown type id " + std::to_string(type)));
    }
}

TEST(GgufFile, RefusesStringLengthPastTheEnd) {
    GgufBuilder b;
    b.kv_string("general.name", "tiny");
    b.tensor("x", {4}, std::vector<float>(4, 1.0f));
    auto img = b.build_with_layout();
    std::string value = img.bytes;  // the value's length, after the u32 type
    patch(value, img.layout.value_at["general.name"] + 4, uint64_t{1} << 40);
    EXPECT_TRUE(fails_with(parse(value), "the value of key 'general.name' claims 1099511627776"));
    std::string key = img.bytes;
    patch(key, img.layout.key_at["general.name"], uint64_t{5000});
    EXPECT_TRUE(fails_with(parse(key), "metadata key #0 claims 5000 bytes"));
    std::string name = img.bytes;  // the tensor name's length precedes n_dims by the name
    patch(name, img.layout.tensors[0].n_dims_at - 1 - 8, uint64_t{0xffffffffffffffffull});
    EXPECT_TRUE(fails_with(parse(name), "the name of tensor #0 claims"));
}

TEST(GgufFile, RefusesHugeArrayCounts) {
    GgufBuilder b;
    b.kv_strings("tokenizer.ggml.tokens", {"a", "b"});
    b.kv_f32s("tokenizer.ggml.scores", {1, 2});
    auto img = b.build_with_layout();
    for (const char* key : {"tokenizer.ggml.tokens", "tokenizer.ggml.scores"}) {
        std::string s = img.bytes;  // type u32, element type u32, then the count
        patch(s, img.layout.value_at[key] + 8, uint64_t{1} << 61);
        EXPECT_TRUE(fails_with(
            parse(s), "array '" + std::string(key) + "' claims 2305843009213693952 elements"));
    }
    // A count that fits the file but exceeds what kvscope accepts.
    GgufBuilder big;
    // A u8 array of 2^24 + 1 zeros: element type u8 (0), the count, then the elements.
    const uint64_t count = (1 << 24) + 1;
    std::vector<uint8_t> value(12 + count, 0);
    std::memcpy(value.data() + 4, &count, 8);
    big.kv_raw("bytes", test::kGgufArray, value);
    EXPECT_TRUE(fails_with(parse(big.build()), "more than the 16777216"));
}

TEST(GgufFile, RefusesNestedArraysAndUnknownValueTypes) {
    GgufBuilder nested;
    std::vector<uint8_t> value;
    GgufBuilder::pod(value, uint32_t{test::kGgufArray});
    GgufBuilder::pod(value, uint64_t{0});
    nested.kv_raw("nested", test::kGgufArray, value);
    EXPECT_TRUE(fails_with(parse(nested.build()), "array 'nested' nests arrays"));

    GgufBuilder unknown;
    unknown.kv_raw("odd", 13, {0, 0, 0, 0});
    EXPECT_TRUE(fails_with(parse(unknown.build()), "key 'odd' has unknown value type 13"));

    GgufBuilder element;
    std::vector<uint8_t> arr;
    GgufBuilder::pod(arr, uint32_t{77});
    GgufBuilder::pod(arr, uint64_t{1});
    arr.push_back(0);
    element.kv_raw("arr", test::kGgufArray, arr);
    EXPECT_TRUE(fails_with(parse(element.build()), "array 'arr' has unknown element type 77"));

    GgufBuilder flag;
    flag.kv_raw("flag", test::kGgufBool, {2});
    EXPECT_TRUE(fails_with(parse(flag.build()), "'flag' is a bool of value 2"));
}

TEST(GgufFile, RefusesMisalignedOffset) {
    GgufBuilder b;
    b.tensor("x", {8}, std::vector<float>(8, 1.0f));
    EXPECT_TRUE(fails_with(parse(b.build(4)),
                           "tensor 'x' has data offset 4, which is not aligned "
                           "to 32 bytes"));
}

TEST(GgufFile, RefusesDuplicateTensorNamesAndKeys) {
    GgufBuilder t;
    t.tensor("x", {8}, std::vector<float>(8, 1.0f));
    t.tensor("x", {8}, std::vector<float>(8, 1.0f));
    EXPECT_TRUE(fails_with(parse(t.build()), "tensor 'x' appears twice"));
    GgufBuilder k;
    k.kv_u32("llama.block_count", 1);
    k.kv_u32("llama.block_count", 2);
    EXPECT_TRUE(fails_with(parse(k.build()), "metadata key 'llama.block_count' appears twice"));
}

TEST(GgufFile, RefusesAlignmentThatIsNotAPowerOfTwo) {
    for (uint32_t alignment : {0u, 3u, 48u, 1u << 31}) {
        GgufBuilder b;
        b.alignment = alignment;
        b.tensor("x", {8}, std::vector<float>(8, 1.0f));
        EXPECT_TRUE(fails_with(parse(b.build()), "general.alignment must be a power of two"))
            << alignment;
    }
    GgufBuilder negative;
    negative.write_alignment_key = false;
    negative.kv_i32("general.alignment", -32);
    EXPECT_TRUE(fails_with(parse(negative.build()), "got -32"));
    GgufBuilder text;
    text.write_alignment_key = false;
    text.kv_f32("general.alignment", 32);
    EXPECT_TRUE(fails_with(parse(text.build()),
                           "general.alignment must be an integer, not a "
                           "float32"));
}

TEST(GgufFile, RefusesCountsTheFileCannotHold) {
    std::string image = small_file().build();
    std::string tensors = image;
    patch(tensors, test::GgufLayout::kTensorCountAt, uint64_t{1} << 40);
    EXPECT_TRUE(fails_with(parse(tensors), "claims 1099511627776 tensors"));
    std::string kvs = image;
    patch(kvs, test::GgufLayout::kKvCountAt, ~uint64_t{0});
    EXPECT_TRUE(fails_with(parse(kvs), "metadata entries"));
}

TEST(GgufFile, NamesFromTheFileStayOnOneLine) {
    GgufBuilder b;
    std::string name = "evil\nname\x01'" + std::string(500, 'x');
    b.tensor(name, {8}, std::vector<float>(8, 1.0f));
    b.tensor(name, {8}, std::vector<float>(8, 1.0f));
    auto r = parse(b.build());
    ASSERT_TRUE(fails_with(r, "tensor 'evil\\x0aname\\x01\\x27xxx"));
    EXPECT_LT(r.error().message.size(), 200u);
    EXPECT_EQ(quote_for_message("ok"), "'ok'");
}

}  // namespace
}  // namespace kvscope
