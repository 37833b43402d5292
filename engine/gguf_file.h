#pragma once
// GGUF (v2 and v3) reader. The file is memory mapped; tensor data is handed out as pointers into
// the mapping, so a GgufFile must outlive every view taken from it (it is move-only).
//
// Layout (little endian): magic "GGUF", u32 version, u64 tensor_count, u64 kv_count,
// kv_count x {string key, u32 value_type, value}, tensor_count x {string name, u32 n_dims,
// u64 dims[n_dims] (fastest-varying first), u32 ggml_type, u64 offset}, padding to
// general.alignment (default 32), then the tensor data section; offsets are relative to it.
// Strings are u64 length + bytes (no terminator). Every count, length and offset is checked
// against the file size before use, so a hostile file gets a one-line Error naming the file, the
// key or tensor and what is wrong, never an out-of-bounds read, an exception or a huge
// allocation. Beyond what the format needs, kvscope also refuses: nested arrays, arrays of more
// than 2^24 elements, strings over 1 GiB, tensors of 0 or more than 4 dimensions, a dimension of
// 0 or above 2^40, more than 2^50 elements, duplicate keys or tensor names, and
// general.alignment that is not an integer power of two in 1..2^30. Version 1 (32-bit counts)
// and big-endian files are refused by name.

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/result.h"
#include "engine/gguf_tensor_type.h"

namespace kvscope {

enum class GgufValueType : uint32_t {
    UINT8 = 0,
    INT8 = 1,
    UINT16 = 2,
    INT16 = 3,
    UINT32 = 4,
    INT32 = 5,
    FLOAT32 = 6,
    BOOL = 7,
    STRING = 8,
    ARRAY = 9,
    UINT64 = 10,
    INT64 = 11,
    FLOAT64 = 12,
};

// A numeric array as the file holds it: a view of its elements in the image, at their own size,
// each widened to double as it is read. Widening them all up front made a 287 MB file of uint8
// arrays take 2.3 GB. Valid as long as the GgufFile (its mapping, or the bytes given to parse()).
class GgufNumberArray {
  public:
    GgufNumberArray() = default;
    // `data` holds `size` little-endian elements of `type` (a numeric or bool type), checked.
    GgufNumberArray(GgufValueType type, const uint8_t* data, size_t size)
        : type_(type), data_(data), size_(size) {}

    size_t size() const { return size_; }
    bool empty() const { return size_ == 0; }
    double operator[](size_t i) const;

    class const_iterator {
      public:
        using iterator_category = std::input_iterator_tag;
        using value_type = double;
        using difference_type = std::ptrdiff_t;
        using pointer = void;
        using reference = double;
        const_iterator(const GgufNumberArray* array, size_t i) : array_(array), i_(i) {}
        double operator*() const { return (*array_)[i_]; }
        const_iterator& operator++() {
            ++i_;
            return *this;
        }
        const_iterator operator++(int) { return {array_, i_++}; }
        bool operator==(const const_iterator& o) const { return i_ == o.i_; }

      private:
        const GgufNumberArray* array_;
        size_t i_;
    };
    const_iterator begin() const { return {this, 0}; }
    const_iterator end() const { return {this, size_}; }

  private:
    GgufValueType type_ = GgufValueType::UINT8;
    const uint8_t* data_ = nullptr;
    size_t size_ = 0;
};

// One metadata value. Scalars are widened: integers to int64/uint64, floats to double.
// Arrays keep their element type; numeric elements stay in the file (`numbers`), strings are
// copied into `strings` (nested arrays are rejected as unsupported).
struct GgufValue {
    GgufValueType type = GgufValueType::UINT32;
    GgufValueType array_type = GgufValueType::UINT32;  // element type when type == ARRAY
    uint64_t u = 0;
    int64_t i = 0;
    double f = 0;
    bool b = false;
    std::string str;
    GgufNumberArray numbers;
    std::vector<std::string> strings;
};

struct GgufTensorInfo {
    std::string name;
    std::vector<uint64_t> dims;  // fastest-varying first (ggml ne[]), e.g. {in_features, out}
    GgmlType type = GgmlType::F32;
    uint64_t offset = 0;      // absolute offset in the file
    uint64_t size_bytes = 0;  // validated: offset + size_bytes <= file size
    uint64_t num_elements() const;
};

class MappedFile;  // read-only mmap, defined in mapped_file.h

class GgufFile {
  public:
    static Result<GgufFile> open(const std::string& path);
    // Parses a file already mapped (load_model maps once to sniff the format); takes ownership.
    static Result<GgufFile> from_mapping(std::unique_ptr<MappedFile> mapping);
    // Parses an in-memory image (used by the fuzzer and tests); `bytes` must outlive the result.
    static Result<GgufFile> parse(std::span<const uint8_t> bytes, std::string display_name);

    GgufFile(GgufFile&&) noexcept;
    GgufFile& operator=(GgufFile&&) noexcept;
    ~GgufFile();

    uint32_t version() const { return version_; }
    const std::map<std::string, GgufValue>& metadata() const { return metadata_; }
    const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }

    const GgufValue* find(const std::string& key) const;
    const GgufTensorInfo* find_tensor(const std::string& name) const;  // null when absent
    // Typed getters: error message names the key and what was expected.
    Result<std::string> get_string(const std::string& key) const;
    Result<uint64_t> get_uint(const std::string& key) const;  // any non-negative integer type
    Result<double> get_float(const std::string& key) const;   // float or integer types
    Result<bool> get_bool(const std::string& key) const;
    Result<const std::vector<std::string>*> get_string_array(const std::string& key) const;
    Result<const GgufNumberArray*> get_number_array(const std::string& key) const;

    // Start of a tensor's size_bytes bytes; t must come from this file's tensors().
    const uint8_t* data(const GgufTensorInfo& t) const { return bytes_.data() + t.offset; }
    // The whole image (the mapping, or the span given to parse()).
    std::span<const uint8_t> bytes() const { return bytes_; }
    const std::string& path() const { return name_; }

  private:
    GgufFile() = default;
    std::unique_ptr<MappedFile> mapping_;
    std::span<const uint8_t> bytes_;
    std::string name_;
    uint32_t version_ = 0;
    std::map<std::string, GgufValue> metadata_;
    std::vector<GgufTensorInfo> tensors_;
    std::unordered_map<std::string, size_t> tensor_index_;  // name -> index in tensors_
};

}  // namespace kvscope
