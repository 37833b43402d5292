#pragma once
// Writes GGUF images in memory for tests: metadata of every type and F32 / F16 / BF16 / Q8_0
// tensors, with knobs to make the file lie (bad magic, versions, offsets, counts).

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "engine/ggml_type.h"

namespace kvscope::test {

class GgufBuilder {
  public:
    uint32_t version = 3;
    uint32_t alignment = 32;

    void kv_string(const std::string& k, const std::string& v) {
        key(k, 8);
        str(meta_, v);
        ++n_kv_;
    }
    void kv_u32(const std::string& k, uint32_t v) {
        key(k, 4);
        pod(meta_, v);
        ++n_kv_;
    }
    void kv_i32(const std::string& k, int32_t v) {
        key(k, 5);
        pod(meta_, v);
        ++n_kv_;
    }
    void kv_f32(const std::string& k, float v) {
        key(k, 6);
        pod(meta_, v);
        ++n_kv_;
    }
    void kv_bool(const std::string& k, bool v) {
        key(k, 7);
        pod(meta_, static_cast<uint8_t>(v));
        ++n_kv_;
    }
    void kv_u64(const std::string& k, uint64_t v) {
        key(k, 10);
        pod(meta_, v);
        ++n_kv_;
    }
    void kv_strings(const std::string& k, const std::vector<std::string>& v) {
        key(k, 9);
        pod(meta_, uint32_t{8});
        pod(meta_, static_cast<uint64_t>(v.size()));
        for (const auto& s : v)
            str(meta_, s);
        ++n_kv_;
    }
    void kv_f32s(const std::string& k, const std::vector<float>& v) { array(k, 6, v); }
    void kv_i32s(const std::string& k, const std::vector<int32_t>& v) { array(k, 5, v); }

    // dims fastest-first, as GGUF stores them; data given as fp32 and converted to `type`.
    void tensor(const std::string& name, std::vector<uint64_t> dims,
                const std::vector<float>& values, GgmlType type = GgmlType::F32) {
        std::vector<uint8_t> bytes;
        if (type == GgmlType::F32) {
            bytes.resize(values.size() * 4);
            if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
        } else if (type == GgmlType::F16 || type == GgmlType::BF16) {
            for (float f : values) {
                uint16_t h;
                if (type == GgmlType::F16) {
                    h = f32_to_fp16(f);
                } else {
                    uint32_t x;
                    std::memcpy(&x, &f, 4);
                    h = static_cast<uint16_t>(x >> 16);
                }
                pod(bytes, h);
            }
        } else if (type == GgmlType::Q8_0) {
            for (size_t b = 0; b < values.size(); b += 32) {
                float amax = 0;
                for (size_t i = 0; i < 32; ++i)
                    amax = std::max(amax, std::fabs(values[b + i]));
                float d = amax / 127.0f;
                pod(bytes, f32_to_fp16(d));
                for (size_t i = 0; i < 32; ++i)
                    bytes.push_back(static_cast<uint8_t>(
                        static_cast<int8_t>(d ? std::lround(values[b + i] / d) : 0)));
            }
        }
        tensors_.push_back({name, std::move(dims), static_cast<uint32_t>(type), bytes});
    }

    // The whole file. offset_bias shifts every tensor's offset (to make them lie).
    std::string build(uint64_t offset_bias = 0) const {
        std::vector<uint8_t> out;
        out.insert(out.end(), {'G', 'G', 'U', 'F'});
        pod(out, version);
        pod(out, static_cast<uint64_t>(tensors_.size()));
        pod(out, static_cast<uint64_t>(n_kv_ + 1));
        out.insert(out.end(), meta_.begin(), meta_.end());
        str(out, "general.alignment");
        pod(out, uint32_t{4});
        pod(out, alignment);
        uint64_t offset = 0;
        std::vector<uint64_t> offsets;
        for (const auto& t : tensors_) {
            str(out, t.name);
            pod(out, static_cast<uint32_t>(t.dims.size()));
            for (uint64_t d : t.dims)
                pod(out, d);
            pod(out, t.type);
            pod(out, offset + offset_bias);
            offsets.push_back(offset);
            offset += (t.data.size() + alignment - 1) / alignment * alignment;
        }
        while (out.size() % alignment)
            out.push_back(0);
        size_t base = out.size();
        for (size_t i = 0; i < tensors_.size(); ++i) {
            out.resize(base + offsets[i]);
            out.insert(out.end(), tensors_[i].data.begin(), tensors_[i].data.end());
        }
        return std::string(out.begin(), out.end());
    }

  private:
    struct Tensor {
        std::string name;
        std::vector<uint64_t> dims;
        uint32_t type;
        std::vector<uint8_t> data;
    };
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
    void key(const std::string& k, uint32_t type) {
        str(meta_, k);
        pod(meta_, type);
    }
    template <class T>
    void array(const std::string& k, uint32_t elem, const std::vector<T>& v) {
        key(k, 9);
        pod(meta_, elem);
        pod(meta_, static_cast<uint64_t>(v.size()));
        for (T x : v)
            pod(meta_, x);
        ++n_kv_;
    }
    std::vector<uint8_t> meta_;
    uint64_t n_kv_ = 0;
    std::vector<Tensor> tensors_;
};

}  // namespace kvscope::test
