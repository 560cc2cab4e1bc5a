// gguf_file: opening and mapping files, metadata values and typed getters.
#include "kail/gguf.h"

#include <cerrno>
#include <cstdio>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kail/status.h"

namespace kail {

namespace {

[[noreturn]] void bad_model(const std::string & msg) { throw error(KAIL_E_BAD_MODEL, "GGUF: " + msg); }

[[noreturn]] void io_error(const std::string & what, const std::string & path, int err) {
    throw error(KAIL_E_IO, "GGUF: " + what + " '" + path + "': " + std::strerror(err));
}

template <typename T> struct gguf_type_of;
template <> struct gguf_type_of<uint8_t>  { static constexpr gguf_type value = GGUF_TYPE_UINT8; };
template <> struct gguf_type_of<int8_t>   { static constexpr gguf_type value = GGUF_TYPE_INT8; };
template <> struct gguf_type_of<uint16_t> { static constexpr gguf_type value = GGUF_TYPE_UINT16; };
template <> struct gguf_type_of<int16_t>  { static constexpr gguf_type value = GGUF_TYPE_INT16; };
template <> struct gguf_type_of<uint32_t> { static constexpr gguf_type value = GGUF_TYPE_UINT32; };
template <> struct gguf_type_of<int32_t>  { static constexpr gguf_type value = GGUF_TYPE_INT32; };
template <> struct gguf_type_of<float>    { static constexpr gguf_type value = GGUF_TYPE_FLOAT32; };
template <> struct gguf_type_of<bool>     { static constexpr gguf_type value = GGUF_TYPE_BOOL; };
template <> struct gguf_type_of<uint64_t> { static constexpr gguf_type value = GGUF_TYPE_UINT64; };
template <> struct gguf_type_of<int64_t>  { static constexpr gguf_type value = GGUF_TYPE_INT64; };
template <> struct gguf_type_of<double>   { static constexpr gguf_type value = GGUF_TYPE_FLOAT64; };

bool is_int_type(uint32_t t) {
    switch (t) {
        case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16:
        case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64:
            return true;
        default:
            return false;
    }
}

bool is_float_type(uint32_t t) { return t == GGUF_TYPE_FLOAT32 || t == GGUF_TYPE_FLOAT64; }

// An integer of any GGUF integer type as sign + magnitude, so every target range check is exact.
struct int_val {
    bool     neg = false;
    uint64_t mag = 0;
};

int_val int_from_bytes(uint32_t t, const void * p) {
    int_val r;
    switch (t) {
        case GGUF_TYPE_UINT8:  { uint8_t v;  std::memcpy(&v, p, 1); r.mag = v; break; }
        case GGUF_TYPE_UINT16: { uint16_t v; std::memcpy(&v, p, 2); r.mag = v; break; }
        case GGUF_TYPE_UINT32: { uint32_t v; std::memcpy(&v, p, 4); r.mag = v; break; }
        case GGUF_TYPE_UINT64: { uint64_t v; std::memcpy(&v, p, 8); r.mag = v; break; }
        default: {
            int64_t v = 0;
            if (t == GGUF_TYPE_INT8)  { int8_t x;  std::memcpy(&x, p, 1); v = x; }
            if (t == GGUF_TYPE_INT16) { int16_t x; std::memcpy(&x, p, 2); v = x; }
            if (t == GGUF_TYPE_INT32) { int32_t x; std::memcpy(&x, p, 4); v = x; }
            if (t == GGUF_TYPE_INT64) { std::memcpy(&v, p, 8); }
            r.neg = v < 0;
            r.mag = r.neg ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
        }
    }
    return r;
}

std::string int_to_string(int_val v) { return (v.neg ? "-" : "") + std::to_string(v.mag); }

template <typename T> bool int_fits(int_val v, T & out) {
    if (v.neg) {
        if (!std::is_signed<T>::value) return false;
        uint64_t lim = static_cast<uint64_t>(std::numeric_limits<T>::max()) + 1;
        if (v.mag > lim) return false;
        out = static_cast<T>(-static_cast<int64_t>(v.mag - 1) - 1);
        return true;
    }
    if (v.mag > static_cast<uint64_t>(std::numeric_limits<T>::max())) return false;
    out = static_cast<T>(v.mag);
    return true;
}

double float_from_bytes(uint32_t t, const void * p) {
    if (t == GGUF_TYPE_FLOAT32) { float f; std::memcpy(&f, p, 4); return f; }
    double d;
    std::memcpy(&d, p, 8);
    return d;
}

double number_from_bytes(uint32_t t, const void * p) {
    if (is_float_type(t)) return float_from_bytes(t, p);
    int_val v = int_from_bytes(t, p);
    return v.neg ? -static_cast<double>(v.mag) : static_cast<double>(v.mag);
}

std::string key_str(std::string_view key) { return "key '" + std::string(key) + "'"; }

[[noreturn]] void wrong_type(std::string_view key, const gguf_value & v, const char * expected) {
    bad_model(key_str(key) + " has type " + v.type_string() + ", expected " + expected);
}

template <typename T> T get_int(const gguf_file & f, std::string_view key, const char * tname) {
    const gguf_value & v = f.get(key);
    if (!is_int_type(v.type())) wrong_type(key, v, tname);
    int_val iv = int_from_bytes(v.type(), v.scalar_bytes());
    T out{};
    if (!int_fits(iv, out))
        bad_model(key_str(key) + " value " + int_to_string(iv) + " (" + v.type_string() + ") does not fit in " + tname);
    return out;
}

double get_float(const gguf_file & f, std::string_view key, const char * tname) {
    const gguf_value & v = f.get(key);
    if (v.type() == GGUF_TYPE_FLOAT32) return v.scalar<float>();
    if (v.type() == GGUF_TYPE_FLOAT64) return v.scalar<double>();
    wrong_type(key, v, tname);
}

template <typename T> constexpr const char * c_type_name() {
    if (std::is_same<T, float>::value) return "float32";
    if (std::is_same<T, double>::value) return "float64";
    if (std::is_same<T, uint8_t>::value) return "uint8";
    if (std::is_same<T, int8_t>::value) return "int8";
    if (std::is_same<T, uint16_t>::value) return "uint16";
    if (std::is_same<T, int16_t>::value) return "int16";
    if (std::is_same<T, uint32_t>::value) return "uint32";
    if (std::is_same<T, int32_t>::value) return "int32";
    if (std::is_same<T, uint64_t>::value) return "uint64";
    return "int64";
}

} // namespace

// ---- types ----

const char * gguf_type_name(uint32_t type) {
    static const char * const names[GGUF_TYPE_COUNT] = {
        "uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
        "bool", "string", "array", "uint64", "int64", "float64",
    };
    return type < GGUF_TYPE_COUNT ? names[type] : "unknown";
}

size_t gguf_type_size(uint32_t type) {
    switch (type) {
        case GGUF_TYPE_UINT8: case GGUF_TYPE_INT8: case GGUF_TYPE_BOOL: return 1;
        case GGUF_TYPE_UINT16: case GGUF_TYPE_INT16: return 2;
        case GGUF_TYPE_UINT32: case GGUF_TYPE_INT32: case GGUF_TYPE_FLOAT32: return 4;
        case GGUF_TYPE_UINT64: case GGUF_TYPE_INT64: case GGUF_TYPE_FLOAT64: return 8;
        default: return 0;
    }
}

// ---- gguf_value ----

std::string gguf_value::type_string() const {
    if (type_ != GGUF_TYPE_ARRAY) return gguf_type_name(type_);
    return std::string("array<") + gguf_type_name(elem_) + ">";
}

template <typename T> T gguf_value::scalar() const {
    constexpr gguf_type want = gguf_type_of<T>::value;
    if (type_ != want) bad_model(std::string("expected ") + gguf_type_name(want) + ", got " + type_string());
    if (std::is_same<T, bool>::value) return scalar_ != 0;
    T v;
    std::memcpy(&v, &scalar_, sizeof v);
    return v;
}

template uint8_t  gguf_value::scalar<uint8_t>() const;
template int8_t   gguf_value::scalar<int8_t>() const;
template uint16_t gguf_value::scalar<uint16_t>() const;
template int16_t  gguf_value::scalar<int16_t>() const;
template uint32_t gguf_value::scalar<uint32_t>() const;
template int32_t  gguf_value::scalar<int32_t>() const;
template uint64_t gguf_value::scalar<uint64_t>() const;
template int64_t  gguf_value::scalar<int64_t>() const;
template float    gguf_value::scalar<float>() const;
template double   gguf_value::scalar<double>() const;
template bool     gguf_value::scalar<bool>() const;

std::string_view gguf_value::str() const {
    if (type_ != GGUF_TYPE_STRING) bad_model("expected string, got " + type_string());
    return std::string_view(reinterpret_cast<const char *>(bytes_.data()), bytes_.size());
}

std::string_view gguf_value::array_str(uint64_t i) const {
    if (type_ != GGUF_TYPE_ARRAY || elem_ != GGUF_TYPE_STRING) bad_model("expected array<string>, got " + type_string());
    return std::string_view(reinterpret_cast<const char *>(bytes_.data()) + str_offs_[i],
                            static_cast<size_t>(str_offs_[i + 1] - str_offs_[i]));
}

const gguf_value & gguf_value::array_item(uint64_t i) const {
    if (type_ != GGUF_TYPE_ARRAY || elem_ != GGUF_TYPE_ARRAY) bad_model("expected array<array>, got " + type_string());
    return items_[i];
}

size_t gguf_value::heap_bytes() const {
    size_t n = bytes_.capacity() + str_offs_.capacity() * sizeof(uint64_t) + items_.capacity() * sizeof(gguf_value);
    for (auto & it : items_) n += it.heap_bytes();
    return n;
}

// ---- gguf_region ----

gguf_region::~gguf_region() {
    if (map_) munmap(map_, map_size_);
}

// ---- gguf_file ----

std::unique_ptr<gguf_file> gguf_file::open(const std::string & path, const gguf_open_params & params) {
    std::unique_ptr<gguf_file> f = open_one(path, params);
    f->open_splits(params);
    return f;
}

namespace {
// llama.cpp's split file names (llama_split_path): PREFIX-%05d-of-%05d.gguf, numbered from 1.
std::string split_postfix(uint32_t no, uint32_t count) {
    char b[48];
    std::snprintf(b, sizeof b, "-%05u-of-%05u.gguf", no + 1, count);
    return b;
}
} // namespace

void gguf_file::open_splits(const gguf_open_params & params) {
    if (!has("split.count")) return;
    uint32_t n = 0, no = 0;
    try {
        n = get_u32("split.count");
        no = get_u32("split.no", 0);
    } catch (const error & e) {
        throw error(e.code(), std::string(e.what()) + " (file " + path_ + ")");
    }
    if (n <= 1) return;
    const std::string what = "GGUF: '" + path_ + "' ";
    if (no != 0)
        throw error(KAIL_E_BAD_MODEL, what + "is split " + std::to_string(no + 1) + " of " + std::to_string(n) + " of a model: open its first split (the file ending in '" +
                                          split_postfix(0, n) + "')");
    const std::string post = split_postfix(0, n);
    if (path_.size() <= post.size() || path_.compare(path_.size() - post.size(), post.size(), post) != 0)
        throw error(KAIL_E_BAD_MODEL, what + "is the first of " + std::to_string(n) + " splits, but its name does not end in '" + post +
                                          "', so the others cannot be found (splits are named PREFIX-00001-of-NNNNN.gguf, as llama.cpp's gguf-split writes them)");
    const std::string prefix = path_.substr(0, path_.size() - post.size());
    for (uint32_t i = 1; i < n; i++) {
        const std::string sp = prefix + split_postfix(i, n);
        std::unique_ptr<gguf_file> s;
        try {
            s = open_one(sp, params);
        } catch (const error & e) {
            throw error(e.code(), "GGUF: split " + std::to_string(i + 1) + " of " + std::to_string(n) + " of '" + path_ + "': " + e.what());
        }
        uint32_t s_no = UINT32_MAX, s_n = 0;
        try {
            s_no = s->get_u32("split.no");
            s_n = s->get_u32("split.count");
        } catch (const error & e) {
            throw error(KAIL_E_BAD_MODEL, "GGUF: '" + sp + "' is not a split of '" + path_ + "': " + e.what());
        }
        if (s_no != i || s_n != n)
            throw error(KAIL_E_BAD_MODEL, "GGUF: '" + sp + "' says it is split " + std::to_string(s_no + 1) + " of " + std::to_string(s_n) + ", expected " +
                                              std::to_string(i + 1) + " of " + std::to_string(n));
        for (gguf_tensor_info & t : s->tensors_) {
            t.split = i;
            tensors_.push_back(std::move(t));
        }
        s->tensors_.clear();
        s->tensor_index_.clear();
        heap_bytes_ += s->heap_bytes_;
        splits_.push_back(std::move(s));
    }
    // The table moved: index it again, now across splits.
    tensor_index_.clear();
    tensor_index_.reserve(tensors_.size());
    for (size_t i = 0; i < tensors_.size(); i++)
        if (!tensor_index_.emplace(std::string_view(tensors_[i].name), i).second)
            throw error(KAIL_E_BAD_MODEL, what + "tensor '" + tensors_[i].name + "' appears in two splits (split " + std::to_string(tensors_[i].split + 1) + ")");
    if (has("split.tensors.count")) {
        const int64_t want = get_i64("split.tensors.count");
        if (want != static_cast<int64_t>(tensors_.size()))
            throw error(KAIL_E_BAD_MODEL, what + "declares " + std::to_string(want) + " tensors over its " + std::to_string(n) + " splits, which hold " +
                                              std::to_string(tensors_.size()));
    }
}

uint64_t gguf_file::total_size() const {
    uint64_t b = file_size_;
    for (const auto & s : splits_) b += s->file_size_;
    return b;
}

const gguf_file & gguf_file::holder(const gguf_tensor_info & t) const {
    if (t.split == 0) return *this;
    if (t.split > splits_.size()) throw error(KAIL_E_INVALID_ARG, "GGUF: tensor '" + t.name + "' names split " + std::to_string(t.split + 1) + " of " + std::to_string(n_splits()));
    return *splits_[t.split - 1];
}

std::unique_ptr<gguf_file> gguf_file::open_one(const std::string & path, const gguf_open_params & params) {
    std::unique_ptr<gguf_file> f(new gguf_file());
    f->path_ = path;
    f->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (f->fd_ < 0) io_error("cannot open", path, errno);
    struct stat st;
    if (fstat(f->fd_, &st) != 0) io_error("cannot stat", path, errno);
    if (!S_ISREG(st.st_mode)) throw error(KAIL_E_IO, "GGUF: '" + path + "' is not a regular file");
    uint64_t size = static_cast<uint64_t>(st.st_size);
    if (size > 0) {
        void * m = mmap(nullptr, static_cast<size_t>(size), PROT_READ, MAP_SHARED, f->fd_, 0);
        if (m == MAP_FAILED) io_error("cannot mmap", path, errno);
        f->map_ = m;
        f->data_ = static_cast<const uint8_t *>(m);
        f->file_size_ = size;
    }
    try {
        f->parse(f->data_, size, params.max_metadata_bytes);
    } catch (const error & e) {
        throw error(e.code(), std::string(e.what()) + " (file " + path + ")");
    }
    if (!params.map_data && f->map_) {
        munmap(f->map_, static_cast<size_t>(f->file_size_));
        f->map_ = nullptr;
        f->data_ = nullptr;
    }
    return f;
}

std::unique_ptr<gguf_file> gguf_file::from_buffer(const void * data, size_t size, const gguf_open_params & params) {
    if (!data && size) throw error(KAIL_E_INVALID_ARG, "GGUF: null buffer");
    std::unique_ptr<gguf_file> f(new gguf_file());
    f->data_ = static_cast<const uint8_t *>(data);
    f->parse(f->data_, size, params.max_metadata_bytes);
    return f;
}

gguf_file::~gguf_file() {
    if (map_) munmap(map_, static_cast<size_t>(file_size_));
    if (fd_ >= 0) ::close(fd_);
}

const gguf_kv * gguf_file::find_kv(std::string_view key) const {
    auto it = kv_index_.find(key);
    return it == kv_index_.end() ? nullptr : &kv_[it->second];
}

const gguf_value & gguf_file::get(std::string_view key) const {
    const gguf_kv * kv = find_kv(key);
    if (!kv) bad_model("required key '" + std::string(key) + "' is missing");
    return kv->value;
}

uint32_t gguf_file::get_u32(std::string_view key) const { return get_int<uint32_t>(*this, key, "uint32"); }
int32_t  gguf_file::get_i32(std::string_view key) const { return get_int<int32_t>(*this, key, "int32"); }
uint64_t gguf_file::get_u64(std::string_view key) const { return get_int<uint64_t>(*this, key, "uint64"); }
int64_t  gguf_file::get_i64(std::string_view key) const { return get_int<int64_t>(*this, key, "int64"); }
float    gguf_file::get_f32(std::string_view key) const { return static_cast<float>(get_float(*this, key, "float32")); }
double   gguf_file::get_f64(std::string_view key) const { return get_float(*this, key, "float64"); }

bool gguf_file::get_bool(std::string_view key) const {
    const gguf_value & v = get(key);
    if (v.type() != GGUF_TYPE_BOOL) wrong_type(key, v, "bool");
    return v.scalar<bool>();
}

std::string gguf_file::get_str(std::string_view key) const {
    const gguf_value & v = get(key);
    if (v.type() != GGUF_TYPE_STRING) wrong_type(key, v, "string");
    return std::string(v.str());
}

uint32_t gguf_file::get_u32(std::string_view key, uint32_t def) const { return has(key) ? get_u32(key) : def; }
int64_t  gguf_file::get_i64(std::string_view key, int64_t def) const { return has(key) ? get_i64(key) : def; }
float    gguf_file::get_f32(std::string_view key, float def) const { return has(key) ? get_f32(key) : def; }
bool     gguf_file::get_bool(std::string_view key, bool def) const { return has(key) ? get_bool(key) : def; }
std::string gguf_file::get_str(std::string_view key, const std::string & def) const {
    return has(key) ? get_str(key) : def;
}

std::vector<std::string> gguf_file::get_arr_str(std::string_view key) const {
    const gguf_value & v = get(key);
    if (!v.is_array() || v.array_type() != GGUF_TYPE_STRING) wrong_type(key, v, "array<string>");
    std::vector<std::string> out;
    out.reserve(static_cast<size_t>(v.array_size()));
    for (uint64_t i = 0; i < v.array_size(); i++) out.emplace_back(v.array_str(i));
    return out;
}

template <typename T> std::vector<T> gguf_file::get_arr_num(std::string_view key) const {
    const gguf_value & v = get(key);
    const uint32_t et = v.array_type();
    constexpr bool want_int = std::is_integral<T>::value;
    if (!v.is_array() || !(is_int_type(et) || (!want_int && is_float_type(et))))
        wrong_type(key, v, want_int ? "array of integers" : "array of numbers");
    const size_t es = gguf_type_size(et);
    const uint8_t * p = static_cast<const uint8_t *>(v.array_data());
    std::vector<T> out(static_cast<size_t>(v.array_size()));
    if (et == gguf_type_of<T>::value) {
        if (!out.empty()) std::memcpy(out.data(), p, out.size() * sizeof(T));
        return out;
    }
    for (size_t i = 0; i < out.size(); i++) {
        if constexpr (want_int) {
            int_val iv = int_from_bytes(et, p + i * es);
            if (!int_fits(iv, out[i]))
                bad_model(key_str(key) + " element " + std::to_string(i) + " value " + int_to_string(iv) + " (" +
                          gguf_type_name(et) + ") does not fit in " + c_type_name<T>());
        } else {
            out[i] = static_cast<T>(number_from_bytes(et, p + i * es));
        }
    }
    return out;
}

template std::vector<uint8_t>  gguf_file::get_arr_num<uint8_t>(std::string_view) const;
template std::vector<int8_t>   gguf_file::get_arr_num<int8_t>(std::string_view) const;
template std::vector<uint16_t> gguf_file::get_arr_num<uint16_t>(std::string_view) const;
template std::vector<int16_t>  gguf_file::get_arr_num<int16_t>(std::string_view) const;
template std::vector<uint32_t> gguf_file::get_arr_num<uint32_t>(std::string_view) const;
template std::vector<int32_t>  gguf_file::get_arr_num<int32_t>(std::string_view) const;
template std::vector<uint64_t> gguf_file::get_arr_num<uint64_t>(std::string_view) const;
template std::vector<int64_t>  gguf_file::get_arr_num<int64_t>(std::string_view) const;
template std::vector<float>    gguf_file::get_arr_num<float>(std::string_view) const;
template std::vector<double>   gguf_file::get_arr_num<double>(std::string_view) const;

uint64_t gguf_file::get_arr_n(std::string_view key) const {
    const gguf_value & v = get(key);
    if (!v.is_array()) wrong_type(key, v, "array");
    return v.array_size();
}

const gguf_tensor_info * gguf_file::find_tensor(std::string_view name) const {
    auto it = tensor_index_.find(name);
    return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const uint8_t * gguf_file::tensor_data(const gguf_tensor_info & t) const {
    const gguf_file & h = holder(t);
    if (!h.data_)
        throw error(KAIL_E_INVALID_ARG, "GGUF: tensor data of '" + t.name + "' is not mapped (file opened with map_data = false)");
    return h.data_ + t.file_offset;
}

std::unique_ptr<gguf_region> gguf_file::tensor_map_private(const gguf_tensor_info & t) const {
    const gguf_file & h = holder(t);
    if (h.fd_ < 0) throw error(KAIL_E_INVALID_ARG, "GGUF: tensor_map_private needs a file opened from a path");
    // The file may have shrunk since it was parsed; mapping past its end would fault on access.
    struct stat st;
    if (fstat(h.fd_, &st) != 0) io_error("cannot stat", h.path_, errno);
    if (static_cast<uint64_t>(st.st_size) < t.file_offset + t.nbytes)
        throw error(KAIL_E_IO, "GGUF: '" + h.path_ + "' shrank to " + std::to_string(st.st_size) +
                               " bytes since it was opened; tensor '" + t.name + "' is gone");
    const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    const uint64_t start = t.file_offset / page * page;
    const uint64_t delta = t.file_offset - start;
    std::unique_ptr<gguf_region> r(new gguf_region());
    r->map_size_ = static_cast<size_t>(delta + t.nbytes);
    void * m = mmap(nullptr, r->map_size_, PROT_READ | PROT_WRITE, MAP_PRIVATE, h.fd_, static_cast<off_t>(start));
    if (m == MAP_FAILED) io_error("cannot mmap tensor '" + t.name + "' of", h.path_, errno);
    r->map_ = m;
    r->data_ = static_cast<uint8_t *>(m) + delta;
    r->size_ = static_cast<size_t>(t.nbytes);
    return r;
}

} // namespace kail
