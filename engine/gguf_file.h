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

#include <cstdint>
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

// One metadata value. Scalars are widened: integers to int64/uint64, floats to double.
// Arrays keep their element type; numeric elements are widened into `numbers`, strings into
// `strings` (nested arrays are rejected as unsupported).
struct GgufValue {
    GgufValueType type = GgufValueType::UINT32;
    GgufValueType array_type = GgufValueType::UINT32;  // element type when type == ARRAY
    uint64_t u = 0;
    int64_t i = 0;
    double f = 0;
    bool b = false;
    std::string str;
    std::vector<double> numbers;
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
    Result<const std::vector<double>*> get_number_array(const std::string& key) const;

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
