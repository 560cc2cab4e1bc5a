// GGUF model files (versions 2 and 3): header, metadata, tensor table and tensor data.
//
// Every malformed input throws kail::error(KAIL_E_BAD_MODEL, msg) where msg names the field and its
// file offset; I/O failures throw KAIL_E_IO with the errno text. No input crashes, hangs or makes
// the parser allocate more than a small constant times the file size.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace kail {

// Value types of metadata, numbered as in the GGUF spec.
enum gguf_type : uint32_t {
    GGUF_TYPE_UINT8 = 0,
    GGUF_TYPE_INT8 = 1,
    GGUF_TYPE_UINT16 = 2,
    GGUF_TYPE_INT16 = 3,
    GGUF_TYPE_UINT32 = 4,
    GGUF_TYPE_INT32 = 5,
    GGUF_TYPE_FLOAT32 = 6,
    GGUF_TYPE_BOOL = 7,
    GGUF_TYPE_STRING = 8,
    GGUF_TYPE_ARRAY = 9,
    GGUF_TYPE_UINT64 = 10,
    GGUF_TYPE_INT64 = 11,
    GGUF_TYPE_FLOAT64 = 12,
    GGUF_TYPE_COUNT = 13,
};

constexpr uint32_t GGUF_DEFAULT_ALIGNMENT = 32;
constexpr int      GGUF_MAX_DIMS = 4;
// Arrays of arrays may nest this deep (the outermost array is depth 1). Bounds the parser's recursion.
constexpr int      GGUF_MAX_ARRAY_DEPTH = 16;

// "uint8", "int8", ..., "float64", "bool", "string", "array"; "unknown" for ids out of range.
const char * gguf_type_name(uint32_t type);
// Bytes of one element of a fixed-size type (numbers, bool); 0 for string, array and unknown ids.
size_t gguf_type_size(uint32_t type);

// One metadata value. Scalars hold a number, bool or string; arrays hold elements of one type,
// which may itself be GGUF_TYPE_ARRAY (each nested array then has its own element type).
class gguf_value {
  public:
    gguf_type type() const { return type_; }
    bool      is_array() const { return type_ == GGUF_TYPE_ARRAY; }
    // Element type of an array; GGUF_TYPE_COUNT for scalars.
    gguf_type array_type() const { return elem_; }
    // Element count of an array; 0 for scalars.
    uint64_t  array_size() const { return n_; }
    // "uint32", "string", "array<float32>", "array<array>" (nested element types may differ).
    std::string type_string() const;

    // Scalar of exactly type T (uint8_t .. int64_t, float, double, bool); throws KAIL_E_BAD_MODEL
    // "expected T, got X" otherwise. gguf_file's getters add the key to that message.
    template <typename T> T scalar() const;
    // Numeric or bool scalar: its gguf_type_size(type()) little-endian bytes, unchecked.
    const void * scalar_bytes() const { return &scalar_; }
    // String scalar (not NUL-terminated; GGUF strings may contain NUL bytes).
    std::string_view str() const;

    // Numeric and bool arrays: array_size() elements of gguf_type_size(array_type()) bytes each,
    // packed little-endian as in the file (bools normalised to 0/1). nullptr for empty arrays.
    const void * array_data() const { return bytes_.empty() ? nullptr : bytes_.data(); }
    // Element i of a string array (unchecked index, checked type).
    std::string_view array_str(uint64_t i) const;
    // Element i of an array of arrays (unchecked index, checked type).
    const gguf_value & array_item(uint64_t i) const;

    // Heap bytes this value holds (for memory accounting).
    size_t heap_bytes() const;

  private:
    friend struct gguf_parser;
    gguf_type                 type_ = GGUF_TYPE_UINT8;
    gguf_type                 elem_ = GGUF_TYPE_COUNT;
    uint64_t                  n_ = 0;
    uint64_t                  scalar_ = 0;  // numeric/bool scalar: its little-endian bytes
    std::vector<uint8_t>      bytes_;       // string scalar; numeric array; string array contents
    std::vector<uint64_t>     str_offs_;    // string array: n + 1 offsets into bytes_
    std::vector<gguf_value>   items_;       // array of arrays
};

struct gguf_kv {
    std::string key;
    gguf_value  value;
    uint64_t    offset = 0;  // file offset where the KV pair starts
};

struct gguf_tensor_info {
    std::string name;
    uint32_t    n_dims = 0;
    int64_t     ne[GGUF_MAX_DIMS] = {1, 1, 1, 1};  // elements per dimension; unused ones are 1
    uint32_t    type = 0;                          // kail_type id (see types.h)
    uint64_t    offset = 0;       // relative to the data section, as stored in the file
    uint64_t    file_offset = 0;  // absolute: data_offset() + offset
    uint64_t    nbytes = 0;       // unpadded size of the data
    int64_t     n_elements = 0;
    uint64_t    info_offset = 0;  // file offset of this tensor's entry in the tensor table
    uint32_t    split = 0;        // the split file holding it (gguf_file::split_path); offsets are that file's
};

struct gguf_open_params {
    // false: parse, then drop the mapping, so only metadata and the tensor table stay in memory
    // (vocabulary files, inspect). tensor_data() then throws; tensor_map_private() still works.
    // (Ignored by from_buffer.)
    bool map_data = true;
    // Cap on the heap the parsed metadata and tensor table may take. Counts are also checked
    // against the bytes left in the file, but in a 40 GB model that alone would still let one
    // corrupt count ask for tens of GB. Real files need a few MB (a 150k-token vocabulary ~6 MB).
    uint64_t max_metadata_bytes = uint64_t(1) << 30;
};

// A private copy-on-write mapping of one tensor's bytes: writable by the holder, never written back
// to the file. For handing tensor data to code that may write to it (a JS Uint8Array).
class gguf_region {
  public:
    gguf_region(const gguf_region &) = delete;
    gguf_region & operator=(const gguf_region &) = delete;
    ~gguf_region();
    uint8_t * data() { return data_; }
    size_t    size() const { return size_; }

  private:
    friend class gguf_file;
    gguf_region() = default;
    void *    map_ = nullptr;
    size_t    map_size_ = 0;
    uint8_t * data_ = nullptr;
    size_t    size_ = 0;
};

// A model split into several files (llama.cpp's gguf-split, as large models are published):
// PREFIX-00001-of-0000N.gguf holds the metadata with split.count = N, each split file its own
// tensor table and data with split.no = its index. open() on the first split opens the others by
// that naming and presents one tensor table; each tensor records its split.
class gguf_file {
  public:
    // mmaps the whole file read-only and parses it, and the other splits of a split model. Throws
    // KAIL_E_IO (open/stat/mmap failures, with the errno text; a missing split names its path) or
    // KAIL_E_BAD_MODEL (malformed file; the message ends with the path; a later split opened
    // alone, or splits that disagree, are refused naming the file).
    static std::unique_ptr<gguf_file> open(const std::string & path, const gguf_open_params & params = {});
    // Parses a file image in memory. The buffer is borrowed: it must outlive the gguf_file, and
    // tensor_data() points into it.
    static std::unique_ptr<gguf_file> from_buffer(const void * data, size_t size, const gguf_open_params & params = {});

    gguf_file(const gguf_file &) = delete;
    gguf_file & operator=(const gguf_file &) = delete;
    ~gguf_file();

    uint32_t            version() const { return version_; }
    uint32_t            alignment() const { return alignment_; }
    uint64_t            data_offset() const { return data_offset_; }  // start of the data section
    uint64_t            file_size() const { return file_size_; }  // of the (first) file
    const std::string & path() const { return path_; }             // empty for from_buffer()
    // Split files: 1 for an unsplit file; split 0 is this file.
    uint32_t            n_splits() const { return 1 + static_cast<uint32_t>(splits_.size()); }
    const std::string & split_path(uint32_t i) const { return i == 0 ? path_ : splits_.at(i - 1)->path_; }
    uint64_t            split_size(uint32_t i) const { return i == 0 ? file_size_ : splits_.at(i - 1)->file_size_; }
    uint64_t            total_size() const;  // every split's bytes
    bool                data_mapped() const { return data_ != nullptr; }

    // Metadata in file order.
    const std::vector<gguf_kv> & metadata() const { return kv_; }
    const gguf_kv *    find_kv(std::string_view key) const;  // nullptr if absent
    bool               has(std::string_view key) const { return find_kv(key) != nullptr; }
    // Throws KAIL_E_BAD_MODEL "GGUF: required key 'k' is missing" if absent.
    const gguf_value & get(std::string_view key) const;

    // Typed getters. Missing key or wrong type throws KAIL_E_BAD_MODEL naming the key and the
    // expected and actual type. Integer getters accept any integer type whose value fits the target
    // (writers differ on uint32 vs uint64 for sizes); float getters accept float32 and float64.
    uint32_t    get_u32(std::string_view key) const;
    int32_t     get_i32(std::string_view key) const;
    uint64_t    get_u64(std::string_view key) const;
    int64_t     get_i64(std::string_view key) const;
    float       get_f32(std::string_view key) const;
    double      get_f64(std::string_view key) const;
    bool        get_bool(std::string_view key) const;
    std::string get_str(std::string_view key) const;
    // Same, returning `def` when the key is absent (a present key of the wrong type still throws).
    uint32_t    get_u32(std::string_view key, uint32_t def) const;
    int64_t     get_i64(std::string_view key, int64_t def) const;
    float       get_f32(std::string_view key, float def) const;
    bool        get_bool(std::string_view key, bool def) const;
    std::string get_str(std::string_view key, const std::string & def) const;

    std::vector<std::string> get_arr_str(std::string_view key) const;
    // Array of any numeric element type converted to T (uint8_t .. int64_t, float, double);
    // integer targets are range-checked per element.
    template <typename T> std::vector<T> get_arr_num(std::string_view key) const;
    // Element count of an array of any type.
    uint64_t get_arr_n(std::string_view key) const;

    // Tensor table in file order.
    const std::vector<gguf_tensor_info> & tensors() const { return tensors_; }
    const gguf_tensor_info * find_tensor(std::string_view name) const;  // nullptr if absent
    // Pointer to the tensor's nbytes bytes in the read-only mapping (or the from_buffer() buffer).
    // Throws KAIL_E_INVALID_ARG if the file was opened with map_data = false.
    const uint8_t * tensor_data(const gguf_tensor_info & t) const;
    // A private copy-on-write mapping of the tensor's bytes (files opened from a path only; throws
    // KAIL_E_INVALID_ARG for from_buffer(), KAIL_E_IO if mmap fails).
    std::unique_ptr<gguf_region> tensor_map_private(const gguf_tensor_info & t) const;

    // Heap bytes held for metadata and the tensor table (for reporting to a GC).
    size_t heap_bytes() const { return heap_bytes_; }

  private:
    friend struct gguf_parser;
    gguf_file() = default;
    void parse(const uint8_t * base, uint64_t size, uint64_t max_heap);
    static std::unique_ptr<gguf_file> open_one(const std::string & path, const gguf_open_params & params);
    void open_splits(const gguf_open_params & params);
    const gguf_file & holder(const gguf_tensor_info & t) const;

    std::string                   path_;
    int                           fd_ = -1;
    void *                        map_ = nullptr;  // whole-file mapping (open() with map_data)
    const uint8_t *               data_ = nullptr; // base of the file image while mapped/borrowed
    uint32_t                      version_ = 0;
    uint32_t                      alignment_ = GGUF_DEFAULT_ALIGNMENT;
    uint64_t                      data_offset_ = 0;
    uint64_t                      file_size_ = 0;
    size_t                        heap_bytes_ = 0;
    std::vector<gguf_kv>          kv_;
    std::vector<gguf_tensor_info> tensors_;
    std::unordered_map<std::string_view, size_t> kv_index_;      // views into kv_[i].key
    std::unordered_map<std::string_view, size_t> tensor_index_;  // views into tensors_[i].name
    std::vector<std::unique_ptr<gguf_file>> splits_;  // splits 1.. (their tensors moved into tensors_)
};

} // namespace kail
