#pragma once
// Writes GGUF images in memory for tests: metadata of every value type, tensors given as fp32
// and encoded as F32 / F16 / BF16 / Q8_0 / Q4_0 / Q4_1 (ggml's reference quantizers), or raw
// bytes of any type id. build_with_layout() also says where each field landed, so a test can
// patch exactly one of them to make the file lie.
//
//   test::GgufBuilder b;                      // version 3, alignment 32
//   b.kv_string("general.architecture", "llama");
//   b.kv_u32("llama.block_count", 1);
//   b.tensor("output_norm.weight", {64}, std::vector<float>(64, 1.0f));
//   std::string bytes = b.build();

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "engine/gguf_tensor_type.h"

namespace kvscope::test {

// GGUF metadata value type ids (GgufValueType), spelled out so the builder stays header-only.
enum GgufTypeId : uint32_t {
    kGgufU8 = 0,
    kGgufI8 = 1,
    kGgufU16 = 2,
    kGgufI16 = 3,
    kGgufU32 = 4,
    kGgufI32 = 5,
    kGgufF32 = 6,
    kGgufBool = 7,
    kGgufString = 8,
    kGgufArray = 9,
    kGgufU64 = 10,
    kGgufI64 = 11,
    kGgufF64 = 12,
};

// Where build_with_layout() put things: byte positions in the image.
struct GgufLayout {
    struct TensorFields {
        std::string name;
        size_t n_dims_at = 0;  // the u32 dimension count
        size_t dims_at = 0;    // the first u64 dimension
        size_t type_at = 0;    // the u32 ggml type
        size_t offset_at = 0;  // the u64 data offset
        size_t data_at = 0;    // the first data byte
        size_t data_bytes = 0;
    };
    static constexpr size_t kVersionAt = 4, kTensorCountAt = 8, kKvCountAt = 16;
    std::map<std::string, size_t> key_at;    // the u64 length that starts the key
    std::map<std::string, size_t> value_at;  // the u32 value type that follows the key
    std::vector<TensorFields> tensors;
    size_t data_start = 0;
};

struct GgufImage {
    std::string bytes;
    GgufLayout layout;
};

class GgufBuilder {
  public:
    uint32_t version = 3;
    uint32_t alignment = 32;          // written as general.alignment and used for the layout
    bool write_alignment_key = true;  // false: the reader's default (32) applies

    // [SECTION] Metadata scalars
    void kv_u8(const std::string& k, uint8_t v) { scalar(k, kGgufU8, v); }
    void kv_i8(const std::string& k, int8_t v) { scalar(k, kGgufI8, v); }
    void kv_u16(const std::string& k, uint16_t v) { scalar(k, kGgufU16, v); }
    void kv_i16(const std::string& k, int16_t v) { scalar(k, kGgufI16, v); }
    void kv_u32(const std::string& k, uint32_t v) { scalar(k, kGgufU32, v); }
    void kv_i32(const std::string& k, int32_t v) { scalar(k, kGgufI32, v); }
    void kv_f32(const std::string& k, float v) { scalar(k, kGgufF32, v); }
    void kv_bool(const std::string& k, bool v) { scalar(k, kGgufBool, static_cast<uint8_t>(v)); }
    void kv_u64(const std::string& k, uint64_t v) { scalar(k, kGgufU64, v); }
    void kv_i64(const std::string& k, int64_t v) { scalar(k, kGgufI64, v); }
    void kv_f64(const std::string& k, double v) { scalar(k, kGgufF64, v); }
    void kv_string(const std::string& k, const std::string& v) {
        std::vector<uint8_t> value;
        str(value, v);
        kv_raw(k, kGgufString, value);
    }

    // [SECTION] Metadata arrays
    void kv_strings(const std::string& k, const std::vector<std::string>& v) {
        std::vector<uint8_t> value;
        pod(value, uint32_t{kGgufString});
        pod(value, static_cast<uint64_t>(v.size()));
        for (const auto& s : v)
            str(value, s);
        kv_raw(k, kGgufArray, value);
    }
    void kv_f32s(const std::string& k, const std::vector<float>& v) { array(k, kGgufF32, v); }
    void kv_i32s(const std::string& k, const std::vector<int32_t>& v) { array(k, kGgufI32, v); }
    // Any numeric element type: T must have the size of `element_type`'s encoding.
    template <class T>
    void array(const std::string& k, uint32_t element_type, const std::vector<T>& v) {
        std::vector<uint8_t> value;
        pod(value, element_type);
        pod(value, static_cast<uint64_t>(v.size()));
        for (T x : v)
            pod(value, x);
        kv_raw(k, kGgufArray, value);
    }
    // A key with any type id followed by `value` verbatim (lies: unknown types, bad counts).
    void kv_raw(const std::string& k, uint32_t type, const std::vector<uint8_t>& value) {
        kvs_.push_back({k, type, value});
    }

    // [SECTION] Tensors
    // dims fastest-first, as GGUF stores them ({cols, rows} for a matrix); `values` are encoded
    // as `type` (F32, F16, BF16, Q8_0, Q4_0 or Q4_1; blocks need a multiple of 32 values).
    void tensor(const std::string& name, std::vector<uint64_t> dims,
                const std::vector<float>& values, GgmlType type = GgmlType::F32) {
        tensor_raw(name, std::move(dims), static_cast<uint32_t>(type), encode(values, type));
    }
    // Pre-encoded bytes under any type id, valid or not.
    void tensor_raw(const std::string& name, std::vector<uint64_t> dims, uint32_t type_id,
                    std::vector<uint8_t> bytes) {
        tensors_.push_back({name, std::move(dims), type_id, std::move(bytes)});
    }

    // [SECTION] Output
    // The whole file. offset_bias is added to every tensor's offset (to make them lie).
    std::string build(uint64_t offset_bias = 0) const {
        return build_with_layout(offset_bias).bytes;
    }

    GgufImage build_with_layout(uint64_t offset_bias = 0) const {
        GgufImage img;
        // Constructed, not inserted: GCC 12 warns falsely (-Wstringop-overflow) on insert into an
        // empty vector.
        std::vector<uint8_t> out = {'G', 'G', 'U', 'F'};
        pod(out, version);
        pod(out, static_cast<uint64_t>(tensors_.size()));
        pod(out, static_cast<uint64_t>(kvs_.size() + (write_alignment_key ? 1 : 0)));
        auto put_kv = [&](const Kv& kv) {
            img.layout.key_at[kv.key] = out.size();
            str(out, kv.key);
            img.layout.value_at[kv.key] = out.size();
            pod(out, kv.type);
            out.insert(out.end(), kv.value.begin(), kv.value.end());
        };
        for (const Kv& kv : kvs_)
            put_kv(kv);
        if (write_alignment_key) {
            std::vector<uint8_t> value;
            pod(value, alignment);
            put_kv({"general.alignment", kGgufU32, value});
        }
        // A lying alignment (0, 3, 2^31) still needs some layout: fall back to the default.
        const uint64_t align =
            alignment && !(alignment & (alignment - 1)) && alignment <= 4096 ? alignment : 32;
        uint64_t offset = 0;
        for (const auto& t : tensors_) {
            GgufLayout::TensorFields f;
            f.name = t.name;
            str(out, t.name);
            f.n_dims_at = out.size();
            pod(out, static_cast<uint32_t>(t.dims.size()));
            f.dims_at = out.size();
            for (uint64_t d : t.dims)
                pod(out, d);
            f.type_at = out.size();
            pod(out, t.type);
            f.offset_at = out.size();
            pod(out, offset + offset_bias);
            f.data_at = offset;  // relative until the data section starts
            f.data_bytes = t.data.size();
            img.layout.tensors.push_back(f);
            offset += (t.data.size() + align - 1) / align * align;
        }
        while (out.size() % align)
            out.push_back(0);
        img.layout.data_start = out.size();
        for (size_t i = 0; i < tensors_.size(); ++i) {
            auto& f = img.layout.tensors[i];
            f.data_at += img.layout.data_start;
            out.resize(f.data_at);
            out.insert(out.end(), tensors_[i].data.begin(), tensors_[i].data.end());
        }
        img.bytes.assign(out.begin(), out.end());
        return img;
    }

    // [SECTION] Encoders (ggml's reference quantizers, so tests can predict every byte)
    static std::vector<uint8_t> encode(const std::vector<float>& values, GgmlType type) {
        std::vector<uint8_t> bytes;
        switch (type) {
            case GgmlType::F32:
                for (float f : values)
                    pod(bytes, f);
                break;
            case GgmlType::F16:
                for (float f : values)
                    pod(bytes, f32_to_fp16(f));
                break;
            case GgmlType::BF16:
                for (float f : values)
                    pod(bytes, f32_to_bf16(f));
                break;
            case GgmlType::Q8_0:
                for (size_t b = 0; b + 32 <= values.size(); b += 32) {
                    float amax = 0;
                    for (size_t i = 0; i < 32; ++i)
                        amax = std::max(amax, std::fabs(values[b + i]));
                    const float d = amax / 127.0f, id = d ? 1.0f / d : 0.0f;
                    pod(bytes, f32_to_fp16(d));
                    for (size_t i = 0; i < 32; ++i)
                        bytes.push_back(static_cast<uint8_t>(
                            static_cast<int8_t>(std::roundf(values[b + i] * id))));
                }
                break;
            case GgmlType::Q4_0:
                for (size_t b = 0; b + 32 <= values.size(); b += 32) {
                    float amax = 0, max = 0;
                    for (size_t i = 0; i < 32; ++i)
                        if (std::fabs(values[b + i]) > amax) {
                            amax = std::fabs(values[b + i]);
                            max = values[b + i];
                        }
                    const float d = max / -8, id = d ? 1.0f / d : 0.0f;
                    pod(bytes, f32_to_fp16(d));
                    for (size_t i = 0; i < 16; ++i) {
                        auto q = [&](float x) {
                            return std::min<uint8_t>(
                                15, static_cast<uint8_t>(static_cast<int8_t>(x * id + 8.5f)));
                        };
                        bytes.push_back(
                            static_cast<uint8_t>(q(values[b + i]) | q(values[b + 16 + i]) << 4));
                    }
                }
                break;
            case GgmlType::Q4_1:
                for (size_t b = 0; b + 32 <= values.size(); b += 32) {
                    float min = values[b], max = values[b];
                    for (size_t i = 0; i < 32; ++i) {
                        min = std::min(min, values[b + i]);
                        max = std::max(max, values[b + i]);
                    }
                    const float d = (max - min) / 15, id = d ? 1.0f / d : 0.0f;
                    pod(bytes, f32_to_fp16(d));
                    pod(bytes, f32_to_fp16(min));
                    for (size_t i = 0; i < 16; ++i) {
                        auto q = [&](float x) {
                            return std::min<uint8_t>(
                                15,
                                static_cast<uint8_t>(static_cast<int8_t>((x - min) * id + 0.5f)));
                        };
                        bytes.push_back(
                            static_cast<uint8_t>(q(values[b + i]) | q(values[b + 16 + i]) << 4));
                    }
                }
                break;
            default:
                break;  // other types: use tensor_raw
        }
        return bytes;
    }

    template <class T>
    static void pod(std::vector<uint8_t>& o, T v) {
        uint8_t b[sizeof(T)];
        std::memcpy(b, &v, sizeof(T));
        o.insert(o.end(), b, b + sizeof(T));
    }
    static void str(std::vector<uint8_t>& o, const std::string& s) {
        pod(o, static_cast<uint64_t>(s.size()));
        o.insert(o.end(), s.begin(), s.end());
    }

  private:
    struct Kv {
        std::string key;
        uint32_t type;
        std::vector<uint8_t> value;
    };
    struct Tensor {
        std::string name;
        std::vector<uint64_t> dims;
        uint32_t type;
        std::vector<uint8_t> data;
    };
    template <class T>
    void scalar(const std::string& k, uint32_t type, T v) {
        std::vector<uint8_t> value;
        pod(value, v);
        kv_raw(k, type, value);
    }
    std::vector<Kv> kvs_;
    std::vector<Tensor> tensors_;
};

// Patches sizeof(T) bytes of an image at `at` (for lies written after build()).
template <class T>
void patch(std::string& image, size_t at, T value) {
    std::memcpy(image.data() + at, &value, sizeof(T));
}

}  // namespace kvscope::test
