#include "engine/gguf_file.h"

#include <cstring>
#include <exception>
#include <new>
#include <string_view>
#include <type_traits>

#include "base/terminal_text.h"
#include "engine/mapped_file.h"

namespace kvscope {

uint64_t GgufTensorInfo::num_elements() const {
    uint64_t n = 1;
    for (uint64_t d : dims)
        n *= d;  // parse() has checked that the product stays below kMaxElements
    return n;
}

GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;
GgufFile::~GgufFile() = default;

namespace {

// Limits no real file reaches, so that a lying header fails before it allocates or overflows.
constexpr uint64_t kMaxStringBytes = 1ull << 30;
constexpr uint64_t kMaxArrayElements = 1ull << 24;  // > any vocabulary (kvscope caps it at 10M)
constexpr uint32_t kMaxDims = 4;                    // GGML_MAX_DIMS
constexpr uint64_t kMaxDim = 1ull << 40;
constexpr uint64_t kMaxElements = 1ull << 50;
constexpr uint64_t kMaxAlignment = 1ull << 30;
constexpr uint64_t kDefaultAlignment = 32;
// Smallest possible encodings, used to bound counts by the bytes that are left.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;                  // empty key, type, one-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // empty name, 1 dim, type, offset

const char* value_type_name(uint32_t t) {
    static const char* names[] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                  "int32",  "float32", "bool",   "string", "array",
                                  "uint64", "int64",   "float64"};
    return t < sizeof names / sizeof names[0] ? names[t] : "unknown";
}

bool is_integer(GgufValueType t) {
    switch (t) {
        case GgufValueType::UINT8:
        case GgufValueType::INT8:
        case GgufValueType::UINT16:
        case GgufValueType::INT16:
        case GgufValueType::UINT32:
        case GgufValueType::INT32:
        case GgufValueType::UINT64:
        case GgufValueType::INT64:
            return true;
        default:
            return false;
    }
}

size_t scalar_size(GgufValueType t) {
    switch (t) {
        case GgufValueType::UINT8:
        case GgufValueType::INT8:
        case GgufValueType::BOOL:
            return 1;
        case GgufValueType::UINT16:
        case GgufValueType::INT16:
            return 2;
        case GgufValueType::UINT32:
        case GgufValueType::INT32:
        case GgufValueType::FLOAT32:
            return 4;
        case GgufValueType::UINT64:
        case GgufValueType::INT64:
        case GgufValueType::FLOAT64:
            return 8;
        default:
            return 0;
    }
}

// Bounds-checked little-endian cursor over the image. The first failure is kept as the error;
// every later read fails too, so callers may simply bail out on false.
class Reader {
  public:
    Reader(std::span<const uint8_t> b, const std::string& file) : b_(b), file_(file) {}
    uint64_t pos() const { return pos_; }
    uint64_t left() const { return b_.size() - pos_; }
    uint64_t size() const { return b_.size(); }
    const std::string& error() const { return error_; }

    bool fail(const std::string& what) {
        if (error_.empty()) error_ = file_ + ": " + what;
        return false;
    }
    template <class T>
    bool read(T& v, const std::string& what) {
        if (!error_.empty()) return false;
        if (left() < sizeof(T))
            return fail("truncated at byte " + std::to_string(pos_) + " while reading " + what +
                        " (the file has " + std::to_string(b_.size()) + " bytes)");
        std::memcpy(&v, b_.data() + pos_, sizeof(T));
        pos_ += sizeof(T);
        return true;
    }
    const uint8_t* here() const { return b_.data() + pos_; }
    bool skip(uint64_t n, const std::string& what) {
        if (!error_.empty()) return false;
        if (left() < n)
            return fail("truncated at byte " + std::to_string(pos_) + " while reading " + what +
                        " (the file has " + std::to_string(b_.size()) + " bytes)");
        pos_ += n;
        return true;
    }
    bool string(std::string& s, const std::string& what) {
        uint64_t n;
        if (!read(n, "the length of " + what)) return false;
        if (n > left())
            return fail(what + " claims " + std::to_string(n) + " bytes at byte " +
                        std::to_string(pos_) + " but only " + std::to_string(left()) +
                        " remain (truncated or corrupt?)");
        if (n > kMaxStringBytes)
            return fail(what + " claims " + std::to_string(n) + " bytes, more than the 1 GiB " +
                        "kvscope accepts for a string");
        s.assign(reinterpret_cast<const char*>(b_.data() + pos_), n);
        pos_ += n;
        return true;
    }

  private:
    std::span<const uint8_t> b_;
    const std::string& file_;
    uint64_t pos_ = 0;
    std::string error_;
};

// Reads one scalar of type `t` into `v`, widened: integers set u, i and f (u is 0 for negative
// values, i saturates for huge unsigned ones), floats set f, bools set b, u, i and f.
bool read_scalar(Reader& r, GgufValueType t, GgufValue& v, const std::string& what) {
    auto num = [&](auto x) {
        using X = decltype(x);
        if (!r.read(x, what)) return false;
        if constexpr (std::is_floating_point_v<X>) {
            v.f = static_cast<double>(x);
        } else if constexpr (std::is_signed_v<X>) {
            v.i = x;
            v.u = x >= 0 ? static_cast<uint64_t>(x) : 0;
            v.f = static_cast<double>(x);
        } else {
            v.u = x;
            v.i = x <= static_cast<uint64_t>(INT64_MAX) ? static_cast<int64_t>(x) : INT64_MAX;
            v.f = static_cast<double>(x);
        }
        return true;
    };
    switch (t) {
        case GgufValueType::UINT8:
            return num(uint8_t{});
        case GgufValueType::INT8:
            return num(int8_t{});
        case GgufValueType::UINT16:
            return num(uint16_t{});
        case GgufValueType::INT16:
            return num(int16_t{});
        case GgufValueType::UINT32:
            return num(uint32_t{});
        case GgufValueType::INT32:
            return num(int32_t{});
        case GgufValueType::UINT64:
            return num(uint64_t{});
        case GgufValueType::INT64:
            return num(int64_t{});
        case GgufValueType::FLOAT32:
            return num(float{});
        case GgufValueType::FLOAT64:
            return num(double{});
        case GgufValueType::BOOL: {
            uint8_t b;
            if (!r.read(b, what)) return false;
            if (b > 1)
                return r.fail(what + " is a bool of value " + std::to_string(b) +
                              ", neither 0 nor 1 (corrupt?)");
            v.b = b != 0;
            v.u = b;
            v.i = b;
            v.f = b;
            return true;
        }
        default:
            return r.fail(what + " has value type " + value_type_name(static_cast<uint32_t>(t)) +
                          ", which is not a scalar");
    }
}

bool read_value(Reader& r, const std::string& qkey, GgufValue& v) {
    uint32_t type;
    if (!r.read(type, "the value type of key " + qkey)) return false;
    if (type > static_cast<uint32_t>(GgufValueType::FLOAT64))
        return r.fail("key " + qkey + " has unknown value type " + std::to_string(type) +
                      " (corrupt, or a newer GGUF?)");
    v.type = static_cast<GgufValueType>(type);
    if (v.type == GgufValueType::STRING) return r.string(v.str, "the value of key " + qkey);
    if (v.type != GgufValueType::ARRAY)
        return read_scalar(r, v.type, v, "the value of key " + qkey);

    uint32_t elem;
    uint64_t count;
    if (!r.read(elem, "the element type of array " + qkey) ||
        !r.read(count, "the length of array " + qkey))
        return false;
    if (elem > static_cast<uint32_t>(GgufValueType::FLOAT64))
        return r.fail("array " + qkey + " has unknown element type " + std::to_string(elem));
    v.array_type = static_cast<GgufValueType>(elem);
    if (v.array_type == GgufValueType::ARRAY)
        return r.fail("array " + qkey + " nests arrays, which kvscope does not support");
    // Every element takes at least its scalar size (a string at least its 8-byte length), so a
    // count that cannot fit in the bytes left is a lie: refuse it before allocating anything.
    const uint64_t min_size = v.array_type == GgufValueType::STRING ? 8 : scalar_size(v.array_type);
    if (count > r.left() / min_size)
        return r.fail("array " + qkey + " claims " + std::to_string(count) + " elements of " +
                      value_type_name(elem) + " at byte " + std::to_string(r.pos()) + " but only " +
                      std::to_string(r.left()) + " bytes remain (truncated or corrupt?)");
    if (count > kMaxArrayElements)
        return r.fail("array " + qkey + " has " + std::to_string(count) +
                      " elements, more than the " + std::to_string(kMaxArrayElements) +
                      " kvscope accepts");
    if (v.array_type == GgufValueType::STRING) {
        v.strings.resize(count);
        for (uint64_t k = 0; k < count; ++k)
            if (!r.string(v.strings[k], "element " + std::to_string(k) + " of array " + qkey))
                return false;
    } else {
        // Left in the image; only bools are looked at now (a byte other than 0 or 1 is corrupt).
        const uint8_t* first = r.here();
        if (v.array_type == GgufValueType::BOOL) {
            GgufValue element;
            for (uint64_t k = 0; k < count; ++k)
                if (!read_scalar(r, v.array_type, element,
                                 "element " + std::to_string(k) + " of array " + qkey))
                    return false;
        } else if (!r.skip(count * min_size, "the elements of array " + qkey)) {
            return false;
        }
        v.numbers = GgufNumberArray(v.array_type, first, count);
    }
    return true;
}

}  // namespace

double GgufNumberArray::operator[](size_t i) const {
    auto element = [&](auto x) {
        std::memcpy(&x, data_ + i * sizeof(x), sizeof(x));
        return static_cast<double>(x);
    };
    switch (type_) {
        case GgufValueType::UINT8:
        case GgufValueType::BOOL:
            return element(uint8_t{});
        case GgufValueType::INT8:
            return element(int8_t{});
        case GgufValueType::UINT16:
            return element(uint16_t{});
        case GgufValueType::INT16:
            return element(int16_t{});
        case GgufValueType::UINT32:
            return element(uint32_t{});
        case GgufValueType::INT32:
            return element(int32_t{});
        case GgufValueType::UINT64:
            return element(uint64_t{});
        case GgufValueType::INT64:
            return element(int64_t{});
        case GgufValueType::FLOAT32:
            return element(float{});
        case GgufValueType::FLOAT64:
            return element(double{});
        default:
            return 0;
    }
}

Result<GgufFile> GgufFile::open(const std::string& path) {
    auto m = MappedFile::open(path);
    if (!m) return m.error();
    return from_mapping(std::move(m).value());
}

Result<GgufFile> GgufFile::from_mapping(std::unique_ptr<MappedFile> mapping) {
    if (!mapping) return Error{"GgufFile::from_mapping: no mapping"};
    auto parsed = parse(mapping->bytes(), mapping->path());
    if (!parsed) return parsed.error();
    parsed->mapping_ = std::move(mapping);  // bytes_ points into it; the heap object stays put
    return parsed;
}

Result<GgufFile> GgufFile::parse(std::span<const uint8_t> bytes, std::string display_name) {
    // Kept outside the try so that even an allocation failure can name the file.
    const std::string file = std::move(display_name);
    try {
        GgufFile f;
        f.bytes_ = bytes;
        f.name_ = file;
        Reader r(bytes, file);

        char magic[4];
        if (!r.read(magic, "the magic")) return Error{r.error()};
        if (std::memcmp(magic, "GGUF", 4) != 0)
            return Error{file + ": not a GGUF file (wrong magic: it does not start with \"GGUF\")"};
        if (!r.read(f.version_, "the version")) return Error{r.error()};
        if (f.version_ == 0x02000000u || f.version_ == 0x03000000u)
            return Error{file + ": a big-endian GGUF file (version " +
                         std::to_string(f.version_ >> 24) +
                         " byte-swapped), which kvscope does not read"};
        if (f.version_ < 2 || f.version_ > 3)
            return Error{file + ": GGUF version " + std::to_string(f.version_) +
                         " is not supported (kvscope reads versions 2 and 3" +
                         (f.version_ == 1 ? "; convert the file with a current llama.cpp)" : ")")};

        uint64_t n_tensors, n_kv;
        if (!r.read(n_tensors, "the tensor count") || !r.read(n_kv, "the metadata count"))
            return Error{r.error()};
        if (n_kv > r.left() / kMinKvBytes)
            return Error{file + ": claims " + std::to_string(n_kv) + " metadata entries, more " +
                         "than its " + std::to_string(bytes.size()) + " bytes can hold (corrupt?)"};
        if (n_tensors > r.left() / kMinTensorInfoBytes)
            return Error{file + ": claims " + std::to_string(n_tensors) + " tensors, more than " +
                         "its " + std::to_string(bytes.size()) + " bytes can hold (corrupt?)"};

        for (uint64_t i = 0; i < n_kv; ++i) {
            std::string key;
            if (!r.string(key, "metadata key #" + std::to_string(i))) return Error{r.error()};
            const std::string qkey = quote_for_message(key);
            GgufValue v;
            if (!read_value(r, qkey, v)) return Error{r.error()};
            if (!f.metadata_.emplace(std::move(key), std::move(v)).second)
                return Error{file + ": metadata key " + qkey + " appears twice"};
        }

        uint64_t alignment = kDefaultAlignment;
        if (const GgufValue* a = f.find("general.alignment")) {
            if (!is_integer(a->type))
                return Error{file + ": general.alignment must be an integer, not a " +
                             value_type_name(static_cast<uint32_t>(a->type))};
            if (a->i <= 0 || (a->u & (a->u - 1)) != 0 || a->u > kMaxAlignment)
                return Error{file + ": general.alignment must be a power of two from 1 to 2^30, " +
                             "got " + (a->i < 0 ? std::to_string(a->i) : std::to_string(a->u))};
            alignment = a->u;
        }

        f.tensors_.reserve(n_tensors);
        for (uint64_t i = 0; i < n_tensors; ++i) {
            GgufTensorInfo t;
            if (!r.string(t.name, "the name of tensor #" + std::to_string(i)))
                return Error{r.error()};
            const std::string qname = "tensor " + quote_for_message(t.name);
            uint32_t n_dims;
            if (!r.read(n_dims, "the dimension count of " + qname)) return Error{r.error()};
            if (n_dims == 0 || n_dims > kMaxDims)
                return Error{file + ": " + qname + " has " + std::to_string(n_dims) +
                             " dimensions (kvscope reads 1 to 4; corrupt?)"};
            uint64_t elements = 1;
            for (uint32_t d = 0; d < n_dims; ++d) {
                uint64_t dim;
                if (!r.read(dim, "dimension " + std::to_string(d) + " of " + qname))
                    return Error{r.error()};
                if (dim == 0)
                    return Error{file + ": " + qname + " has a zero-sized dimension " +
                                 std::to_string(d)};
                if (dim > kMaxDim || elements > kMaxElements / dim)
                    return Error{file + ": " + qname + " has an absurd dimension " +
                                 std::to_string(dim) + " (more elements than any real model)"};
                elements *= dim;
                t.dims.push_back(dim);
            }
            uint32_t type;
            uint64_t offset;
            if (!r.read(type, "the type of " + qname) || !r.read(offset, "the offset of " + qname))
                return Error{r.error()};
            auto traits = ggml_type_traits(type);
            if (!traits)
                return Error{file + ": " + qname + " has unknown type id " + std::to_string(type) +
                             " (corrupt, or a ggml type newer than kvscope)"};
            t.type = static_cast<GgmlType>(type);
            if (t.dims[0] % traits->block_elements != 0)
                return Error{file + ": " + qname + " has rows of " + std::to_string(t.dims[0]) +
                             " elements, not a whole number of " + std::string(traits->name) +
                             " blocks of " + std::to_string(traits->block_elements)};
            auto size = ggml_row_bytes(t.type, elements);
            if (!size) return Error{file + ": " + qname + ": " + size.error().message};
            t.size_bytes = size.value();
            if (offset % alignment != 0)
                return Error{file + ": " + qname + " has data offset " + std::to_string(offset) +
                             ", which is not aligned to " + std::to_string(alignment) +
                             " bytes (general.alignment)"};
            t.offset = offset;  // relative to the data section until it is known
            if (!f.tensor_index_.emplace(t.name, f.tensors_.size()).second)
                return Error{file + ": " + qname + " appears twice"};
            f.tensors_.push_back(std::move(t));
        }

        // The data section starts at the next multiple of the alignment. pos <= size and
        // alignment <= 2^30, so this cannot overflow.
        const uint64_t file_size = bytes.size();
        const uint64_t data_start = (r.pos() + alignment - 1) / alignment * alignment;
        if (!f.tensors_.empty() && data_start > file_size)
            return Error{file + ": the tensor data section would start at byte " +
                         std::to_string(data_start) + " but the file has " +
                         std::to_string(file_size) + " bytes (truncated?)"};
        for (GgufTensorInfo& t : f.tensors_) {
            const uint64_t room = file_size - data_start;
            if (t.offset > room || t.size_bytes > room - t.offset) {
                uint64_t end;
                bool overflows = __builtin_add_overflow(data_start, t.offset, &end) ||
                                 __builtin_add_overflow(end, t.size_bytes, &end);
                if (overflows)
                    return Error{file + ": tensor " + quote_for_message(t.name) +
                                 " has data offset " + std::to_string(t.offset) +
                                 ", far past the end of the file (" + std::to_string(file_size) +
                                 " bytes; corrupt?)"};
                return Error{file + ": tensor " + quote_for_message(t.name) + " ends at byte " +
                             std::to_string(end) + " but the file has " +
                             std::to_string(file_size) + " bytes (truncated or corrupt?)"};
            }
            t.offset += data_start;
        }
        return f;
    } catch (const std::bad_alloc&) {
        return Error{file + ": out of memory while reading the GGUF header (corrupt sizes?)"};
    } catch (const std::exception& e) {
        return Error{file + ": cannot read the GGUF header: " + e.what()};
    }
}

const GgufValue* GgufFile::find(const std::string& key) const {
    auto it = metadata_.find(key);
    return it == metadata_.end() ? nullptr : &it->second;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
    auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

Result<std::string> GgufFile::get_string(const std::string& key) const {
    const GgufValue* v = find(key);
    if (!v) return Error{name_ + ": metadata key '" + key + "' is missing"};
    if (v->type != GgufValueType::STRING)
        return Error{name_ + ": metadata key '" + key + "' should be a string, not a " +
                     value_type_name(static_cast<uint32_t>(v->type))};
    return v->str;
}

Result<uint64_t> GgufFile::get_uint(const std::string& key) const {
    const GgufValue* v = find(key);
    if (!v) return Error{name_ + ": metadata key '" + key + "' is missing"};
    if (!is_integer(v->type))
        return Error{name_ + ": metadata key '" + key + "' should be an integer, not a " +
                     value_type_name(static_cast<uint32_t>(v->type))};
    if (v->i < 0)
        return Error{name_ + ": metadata key '" + key + "' is negative (" + std::to_string(v->i) +
                     ")"};
    return v->u;
}

Result<double> GgufFile::get_float(const std::string& key) const {
    const GgufValue* v = find(key);
    if (!v) return Error{name_ + ": metadata key '" + key + "' is missing"};
    if (!is_integer(v->type) && v->type != GgufValueType::FLOAT32 &&
        v->type != GgufValueType::FLOAT64)
        return Error{name_ + ": metadata key '" + key + "' should be a number, not a " +
                     value_type_name(static_cast<uint32_t>(v->type))};
    return v->f;
}

Result<bool> GgufFile::get_bool(const std::string& key) const {
    const GgufValue* v = find(key);
    if (!v) return Error{name_ + ": metadata key '" + key + "' is missing"};
    if (v->type != GgufValueType::BOOL)
        return Error{name_ + ": metadata key '" + key + "' should be a bool, not a " +
                     value_type_name(static_cast<uint32_t>(v->type))};
    return v->b;
}

Result<const std::vector<std::string>*> GgufFile::get_string_array(const std::string& key) const {
    const GgufValue* v = find(key);
    if (!v) return Error{name_ + ": metadata key '" + key + "' is missing"};
    if (v->type != GgufValueType::ARRAY || v->array_type != GgufValueType::STRING)
        return Error{name_ + ": metadata key '" + key + "' should be an array of strings"};
    return &v->strings;
}

Result<const GgufNumberArray*> GgufFile::get_number_array(const std::string& key) const {
    const GgufValue* v = find(key);
    if (!v) return Error{name_ + ": metadata key '" + key + "' is missing"};
    if (v->type != GgufValueType::ARRAY || v->array_type == GgufValueType::STRING)
        return Error{name_ + ": metadata key '" + key + "' should be an array of numbers"};
    return &v->numbers;
}

}  // namespace kvscope
