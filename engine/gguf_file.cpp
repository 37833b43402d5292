#include "engine/gguf_file.h"

#include <cstring>
#include <new>
#include <set>

#include "engine/mapped_file.h"

namespace kvscope {

uint64_t GgufTensorInfo::num_elements() const {
    uint64_t n = 1;
    for (uint64_t d : dims)
        n *= d;
    return n;
}

GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;
GgufFile::~GgufFile() = default;

namespace {
// Limits that no real file reaches, so lying headers fail before they allocate.
constexpr uint64_t kMaxStringBytes = 1ull << 30;
constexpr uint32_t kMaxDims = 4;

class Reader {
  public:
    Reader(std::span<const uint8_t> b, const std::string& name) : b_(b), name_(name) {}
    size_t pos() const { return pos_; }
    size_t left() const { return b_.size() - pos_; }
    const std::string& error() const { return error_; }
    bool fail(const std::string& what) {
        if (error_.empty()) error_ = name_ + ": " + what;
        return false;
    }
    template <class T>
    bool read(T& v, const char* what) {
        if (left() < sizeof(T))
            return fail(std::string("truncated while reading ") + what + " at byte " +
                        std::to_string(pos_) + " (the file has " + std::to_string(b_.size()) +
                        " bytes)");
        std::memcpy(&v, b_.data() + pos_, sizeof(T));
        pos_ += sizeof(T);
        return true;
    }
    bool string(std::string& s, const char* what) {
        uint64_t n;
        if (!read(n, what)) return false;
        if (n > kMaxStringBytes || n > left())
            return fail(std::string(what) + " claims " + std::to_string(n) + " bytes at byte " +
                        std::to_string(pos_) + " but only " + std::to_string(left()) +
                        " remain (truncated or corrupt?)");
        s.assign(reinterpret_cast<const char*>(b_.data() + pos_), n);
        pos_ += n;
        return true;
    }

  private:
    std::span<const uint8_t> b_;
    const std::string& name_;
    size_t pos_ = 0;
    std::string error_;
};

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

bool is_known_type(uint32_t t) {
    return t <= static_cast<uint32_t>(GgufValueType::FLOAT64);
}

// Reads one scalar of type `t` widened into `v` (u/i/f/b set as fits).
bool read_scalar(Reader& r, GgufValueType t, GgufValue& v, double* as_number,
                 const std::string& key) {
    auto num = [&](auto x) {
        using X = decltype(x);
        if (!r.read(x, key.c_str())) return false;
        if constexpr (std::is_floating_point_v<X>) {
            v.f = static_cast<double>(x);
        } else if constexpr (std::is_signed_v<X>) {
            v.i = x;
            v.u = x >= 0 ? static_cast<uint64_t>(x) : 0;
            v.f = static_cast<double>(x);
        } else {
            v.u = x;
            v.i = x <= static_cast<X>(INT64_MAX) ? static_cast<int64_t>(x) : INT64_MAX;
            v.f = static_cast<double>(x);
        }
        if (as_number) *as_number = v.f;
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
            if (!r.read(b, key.c_str())) return false;
            if (b > 1)
                return r.fail("key '" + key + "': bool value " + std::to_string(b) +
                              " is neither 0 nor 1");
            v.b = b != 0;
            v.u = b;
            v.i = b;
            v.f = b;
            if (as_number) *as_number = b;
            return true;
        }
        default:
            return r.fail("key '" + key + "': unexpected value type");
    }
}

bool read_value(Reader& r, const std::string& key, GgufValue& v) {
    uint32_t type;
    if (!r.read(type, "a value type")) return false;
    if (!is_known_type(type))
        return r.fail("key '" + key + "' has unknown value type " + std::to_string(type));
    v.type = static_cast<GgufValueType>(type);
    if (v.type == GgufValueType::STRING) return r.string(v.str, ("value of '" + key + "'").c_str());
    if (v.type != GgufValueType::ARRAY) return read_scalar(r, v.type, v, nullptr, key);
    uint32_t elem;
    uint64_t count;
    if (!r.read(elem, "an array type") || !r.read(count, "an array length")) return false;
    if (!is_known_type(elem))
        return r.fail("array '" + key + "' has unknown element type " + std::to_string(elem));
    v.array_type = static_cast<GgufValueType>(elem);
    if (v.array_type == GgufValueType::ARRAY)
        return r.fail("array '" + key + "' nests arrays, which kvscope does not support");
    // Each element takes at least one byte (strings: eight), so the count is bounded by the file.
    size_t min_size = v.array_type == GgufValueType::STRING ? 8 : scalar_size(v.array_type);
    if (count > r.left() / min_size)
        return r.fail("array '" + key + "' claims " + std::to_string(count) +
                      " elements but only " + std::to_string(r.left()) +
                      " bytes remain (truncated or corrupt?)");
    if (v.array_type == GgufValueType::STRING) {
        v.strings.resize(count);
        for (auto& s : v.strings)
            if (!r.string(s, ("an element of '" + key + "'").c_str())) return false;
    } else {
        v.numbers.resize(count);
        GgufValue tmp;
        for (auto& x : v.numbers)
            if (!read_scalar(r, v.array_type, tmp, &x, key)) return false;
    }
    return true;
}
}  // namespace

Result<GgufFile> GgufFile::open(const std::string& path) {
    auto m = MappedFile::open(path);
    if (!m) return m.error();
    auto bytes = (*m)->bytes();
    auto parsed = parse(bytes, path);
    if (!parsed) return parsed.error();
    parsed->mapping_ = std::move(m).value();
    return parsed;
}

Result<GgufFile> GgufFile::parse(std::span<const uint8_t> bytes, std::string name) {
    try {
        GgufFile f;
        f.bytes_ = bytes;
        f.name_ = std::move(name);
        Reader r(bytes, f.name_);
        char magic[4];
        if (!r.read(magic, "the magic")) return Error{r.error()};
        if (std::memcmp(magic, "GGUF", 4) != 0)
            return Error{f.name_ + ": not a GGUF file (wrong magic)"};
        uint64_t n_tensors, n_kv;
        if (!r.read(f.version_, "the version")) return Error{r.error()};
        if (f.version_ < 2 || f.version_ > 3)
            return Error{f.name_ + ": GGUF version " + std::to_string(f.version_) +
                         " is not supported (only 2 and 3)"};
        if (!r.read(n_tensors, "the tensor count") || !r.read(n_kv, "the metadata count"))
            return Error{r.error()};
        // A key-value pair takes at least 12 bytes and a tensor entry at least 28.
        if (n_kv > r.left() / 12)
            return Error{f.name_ + ": claims " + std::to_string(n_kv) +
                         " metadata entries, more than the file can hold"};
        if (n_tensors > r.left() / 28)
            return Error{f.name_ + ": claims " + std::to_string(n_tensors) +
                         " tensors, more than the file can hold"};
        for (uint64_t i = 0; i < n_kv; ++i) {
            std::string key;
            if (!r.string(key, "a metadata key")) return Error{r.error()};
            GgufValue v;
            if (!read_value(r, key, v)) return Error{r.error()};
            if (!f.metadata_.emplace(key, std::move(v)).second)
                return Error{f.name_ + ": metadata key '" + key + "' appears twice"};
        }
        uint64_t alignment = 32;
        if (const GgufValue* a = f.find("general.alignment")) {
            if (a->type == GgufValueType::ARRAY || a->type == GgufValueType::STRING || a->u == 0 ||
                (a->u & (a->u - 1)) != 0 || a->u > (1u << 20))
                return Error{f.name_ + ": general.alignment must be a power of two, got " +
                             std::to_string(a->u)};
            alignment = a->u;
        }
        std::set<std::string> names;
        for (uint64_t i = 0; i < n_tensors; ++i) {
            GgufTensorInfo t;
            if (!r.string(t.name, "a tensor name")) return Error{r.error()};
            uint32_t n_dims;
            if (!r.read(n_dims, "a tensor's dimension count")) return Error{r.error()};
            if (n_dims == 0 || n_dims > kMaxDims)
                return Error{f.name_ + ": tensor '" + t.name + "' has " + std::to_string(n_dims) +
                             " dimensions (1 to 4 allowed)"};
            uint64_t elements = 1;
            for (uint32_t d = 0; d < n_dims; ++d) {
                uint64_t dim;
                if (!r.read(dim, "a tensor dimension")) return Error{r.error()};
                if (dim == 0 || dim > (1ull << 40) || elements > (1ull << 50) / dim)
                    return Error{f.name_ + ": tensor '" + t.name + "' has an absurd dimension " +
                                 std::to_string(dim)};
                elements *= dim;
                t.dims.push_back(dim);
            }
            uint32_t type;
            uint64_t offset;
            if (!r.read(type, "a tensor type") || !r.read(offset, "a tensor offset"))
                return Error{r.error()};
            auto traits = ggml_type_traits(type);
            if (!traits)
                return Error{f.name_ + ": tensor '" + t.name + "' has unknown type id " +
                             std::to_string(type)};
            t.type = static_cast<GgmlType>(type);
            if (t.dims[0] % traits->block_elements != 0)
                return Error{f.name_ + ": tensor '" + t.name + "' rows of " +
                             std::to_string(t.dims[0]) + " do not divide into " +
                             std::string(traits->name) + " blocks"};
            auto size = ggml_row_bytes(t.type, elements);
            if (!size) return Error{f.name_ + ": tensor '" + t.name + "': " + size.error().message};
            t.size_bytes = size.value();
            if (offset % alignment != 0)
                return Error{f.name_ + ": tensor '" + t.name + "' offset " +
                             std::to_string(offset) + " is not aligned to " +
                             std::to_string(alignment)};
            t.offset = offset;  // relative for now
            if (!names.insert(t.name).second)
                return Error{f.name_ + ": tensor '" + t.name + "' appears twice"};
            f.tensors_.push_back(std::move(t));
        }
        uint64_t data_start = (r.pos() + alignment - 1) / alignment * alignment;
        if (data_start > bytes.size() && !f.tensors_.empty())
            return Error{f.name_ +
                         ": the tensor data section starts past the end of the file (truncated?)"};
        for (GgufTensorInfo& t : f.tensors_) {
            if (t.offset > bytes.size() || data_start > bytes.size() - t.offset ||
                t.size_bytes > bytes.size() - data_start - t.offset)
                return Error{f.name_ + ": tensor '" + t.name + "' ends at byte " +
                             std::to_string(data_start + t.offset + t.size_bytes) +
                             " but the file has " + std::to_string(bytes.size()) +
                             " bytes (truncated or corrupt?)"};
            t.offset += data_start;
        }
        return f;
    } catch (const std::bad_alloc&) {
        return Error{name + ": out of memory while reading the header (corrupt sizes?)"};
    }
}

const GgufValue* GgufFile::find(const std::string& key) const {
    auto it = metadata_.find(key);
    return it == metadata_.end() ? nullptr : &it->second;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
    for (const auto& t : tensors_)
        if (t.name == name) return &t;
    return nullptr;
}

namespace {
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
}  // namespace

Result<std::string> GgufFile::get_string(const std::string& key) const {
    const GgufValue* v = find(key);
    if (!v) return Error{name_ + ": metadata key '" + key + "' is missing"};
    if (v->type != GgufValueType::STRING)
        return Error{name_ + ": metadata key '" + key + "' is not a string"};
    return v->str;
}

Result<uint64_t> GgufFile::get_uint(const std::string& key) const {
    const GgufValue* v = find(key);
    if (!v) return Error{name_ + ": metadata key '" + key + "' is missing"};
    if (!is_integer(v->type) || v->i < 0)
        return Error{name_ + ": metadata key '" + key + "' is not a non-negative integer"};
    return v->u;
}

Result<double> GgufFile::get_float(const std::string& key) const {
    const GgufValue* v = find(key);
    if (!v) return Error{name_ + ": metadata key '" + key + "' is missing"};
    if (!is_integer(v->type) && v->type != GgufValueType::FLOAT32 &&
        v->type != GgufValueType::FLOAT64)
        return Error{name_ + ": metadata key '" + key + "' is not a number"};
    return v->f;
}

Result<bool> GgufFile::get_bool(const std::string& key) const {
    const GgufValue* v = find(key);
    if (!v) return Error{name_ + ": metadata key '" + key + "' is missing"};
    if (v->type != GgufValueType::BOOL)
        return Error{name_ + ": metadata key '" + key + "' is not a bool"};
    return v->b;
}

Result<const std::vector<std::string>*> GgufFile::get_string_array(const std::string& key) const {
    const GgufValue* v = find(key);
    if (!v) return Error{name_ + ": metadata key '" + key + "' is missing"};
    if (v->type != GgufValueType::ARRAY || v->array_type != GgufValueType::STRING)
        return Error{name_ + ": metadata key '" + key + "' is not an array of strings"};
    return &v->strings;
}

Result<const std::vector<double>*> GgufFile::get_number_array(const std::string& key) const {
    const GgufValue* v = find(key);
    if (!v) return Error{name_ + ": metadata key '" + key + "' is missing"};
    if (v->type != GgufValueType::ARRAY || v->array_type == GgufValueType::STRING)
        return Error{name_ + ": metadata key '" + key + "' is not an array of numbers"};
    return &v->numbers;
}

}  // namespace kvscope
