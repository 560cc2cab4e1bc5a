// GGUF parser: turns a file image (mapping or buffer) into gguf_file's metadata and tensor table.
//
// Every read is bounds-checked against the image size, every count is checked against the bytes
// that remain before anything is allocated for it, and every size computation is overflow-checked,
// so memory use stays a small multiple of the file size and no input can make the parser read out
// of bounds, loop without consuming bytes, or recurse without limit.
#include "kail/gguf.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <string>

#include "kail/status.h"
#include "kail/types.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the GGUF reader assumes a little-endian host"
#endif

namespace kail {

namespace {

constexpr char GGUF_KEY_ALIGNMENT[] = "general.alignment";

// Smallest encoding of one KV pair: key length (8) + a 1-byte key + value type (4) + a 1-byte value.
constexpr uint64_t MIN_KV_BYTES = 8 + 1 + 4 + 1;
// Smallest tensor table entry: name length (8) + a 1-byte name + n_dims (4) + one dim (8) + type (4) + offset (8).
constexpr uint64_t MIN_TENSOR_INFO_BYTES = 8 + 1 + 4 + 8 + 4 + 8;
// Smallest array element of each kind: a string is its 8-byte length, a nested array its type and count.
uint64_t min_element_bytes(uint32_t t) {
    if (t == GGUF_TYPE_STRING) return 8;
    if (t == GGUF_TYPE_ARRAY) return 4 + 8;
    return gguf_type_size(t);
}

// What one entry of a key or tensor-name index costs, roughly (node, bucket, hash).
constexpr uint64_t INDEX_ENTRY_BYTES = 48;

std::string u64s(uint64_t v) { return std::to_string(v); }

// Names taken from the file go into messages escaped and capped, so a hostile name can neither
// flood a log nor inject control characters.
std::string printable(std::string_view s) {
    constexpr size_t cap = 96;
    std::string out;
    out.reserve(std::min(s.size(), cap) + 8);
    for (size_t i = 0; i < s.size() && i < cap; i++) {
        unsigned char c = static_cast<unsigned char>(s[i]);
        if (c >= 0x20 && c < 0x7f && c != '\\') {
            out.push_back(static_cast<char>(c));
        } else if (c >= 0x80) {
            out.push_back(static_cast<char>(c));  // UTF-8 passes through
        } else {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\x%02x", c);
            out += buf;
        }
    }
    if (s.size() > cap) out += "...";
    return out;
}

bool checked_mul(uint64_t a, uint64_t b, uint64_t & out) { return !__builtin_mul_overflow(a, b, &out); }
bool checked_add(uint64_t a, uint64_t b, uint64_t & out) { return !__builtin_add_overflow(a, b, &out); }

} // namespace

struct gguf_parser {
    gguf_file &     f;
    const uint8_t * base;
    uint64_t        size;
    uint64_t        pos = 0;
    uint64_t        heap = 0;      // bytes allocated for metadata and the tensor table so far
    uint64_t        max_heap;
    std::string     ctx;  // "header", "key 'k'", "tensor 'name'": prefixes every message

    gguf_parser(gguf_file & file, const uint8_t * b, uint64_t s, uint64_t max) : f(file), base(b), size(s), max_heap(max) {}

    // Called before every allocation driven by the file, so no count can make us allocate more
    // than max_heap (containers grow only as entries are actually parsed).
    void charge(uint64_t bytes, uint64_t at) {
        if (bytes > max_heap - std::min(heap, max_heap))
            fail("metadata at offset " + u64s(at) + " would take more than " + u64s(max_heap) +
                 " bytes of memory (gguf_open_params::max_metadata_bytes)");
        heap += bytes;
    }

    uint64_t remain() const { return size - pos; }

    [[noreturn]] void fail(const std::string & msg) const {
        throw error(KAIL_E_BAD_MODEL, "GGUF: " + (ctx.empty() ? std::string() : ctx + ": ") + msg);
    }

    [[noreturn]] void fail_truncated(uint64_t at, uint64_t need, const std::string & what) const {
        fail(what + " at offset " + u64s(at) + " needs " + u64s(need) + " bytes but the file ends at " +
             u64s(size) + " (truncated)");
    }

    template <typename T> T load(uint64_t at) const {
        T v;
        std::memcpy(&v, base + at, sizeof v);
        return v;
    }

    template <typename T> T read(const char * what) {
        if (remain() < sizeof(T)) fail_truncated(pos, sizeof(T), what);
        T v = load<T>(pos);
        pos += sizeof(T);
        return v;
    }

    std::string_view read_str(const std::string & what) {
        uint64_t at = pos;
        if (remain() < 8) fail_truncated(at, 8, "length of " + what);
        uint64_t len = load<uint64_t>(at);
        pos += 8;
        if (len > remain())
            fail(what + " at offset " + u64s(at) + ": length " + u64s(len) + " exceeds the " + u64s(remain()) +
                 " bytes left in the file (size " + u64s(size) + "): truncated or corrupt");
        std::string_view s(reinterpret_cast<const char *>(base + pos), static_cast<size_t>(len));
        pos += len;
        return s;
    }

    void parse_header(uint64_t & n_tensors, uint64_t & n_kv) {
        ctx = "header";
        if (size < 4) fail_truncated(0, 4, "magic");
        if (std::memcmp(base, "GGUF", 4) != 0) {
            char shown[40];
            std::snprintf(shown, sizeof shown, "%02x %02x %02x %02x", base[0], base[1], base[2], base[3]);
            fail(std::string("bad magic at offset 0: bytes ") + shown + ", expected \"GGUF\" (47 47 55 46)");
        }
        pos = 4;
        uint32_t version = read<uint32_t>("version");
        if (version != 2 && version != 3) {
            if (version == 1)
                fail("unsupported version 1 at offset 4 (GGUF v1 is obsolete; only versions 2 and 3 are supported)");
            if ((version & 0xffffu) == 0 && (__builtin_bswap32(version) == 2 || __builtin_bswap32(version) == 3))
                fail("unsupported version " + u64s(version) + " at offset 4 (2 or 3 byte-swapped): this is a big-endian GGUF file; "
                     "only little-endian files are supported");
            fail("unsupported version " + u64s(version) + " at offset 4 (only versions 2 and 3 are supported)");
        }
        f.version_ = version;
        n_tensors = read<uint64_t>("tensor count");  // checked against the bytes left after the metadata
        uint64_t at = pos;
        n_kv = read<uint64_t>("metadata count");
        if (n_kv > remain() / MIN_KV_BYTES)
            fail("metadata count " + u64s(n_kv) + " at offset " + u64s(at) + " is impossible: at least " +
                 u64s(MIN_KV_BYTES) + " bytes per key/value pair but only " + u64s(remain()) +
                 " bytes remain (corrupt count or truncated file)");
    }

    // Reads the body of a value of type `type` (the type id itself is already consumed).
    // `depth` is the array nesting depth of the value's parent (0 for a top-level value).
    void parse_value(gguf_value & v, uint32_t type, uint64_t type_at, int depth) {
        if (type >= GGUF_TYPE_COUNT)
            fail("unknown value type id " + u64s(type) + " at offset " + u64s(type_at));
        v.type_ = static_cast<gguf_type>(type);
        if (type == GGUF_TYPE_STRING) {
            std::string_view s = read_str("string value");
            charge(s.size(), type_at);
            v.bytes_.assign(s.begin(), s.end());
            return;
        }
        if (type != GGUF_TYPE_ARRAY) {
            size_t sz = gguf_type_size(type);
            if (remain() < sz) fail_truncated(pos, sz, std::string(gguf_type_name(type)) + " value");
            std::memcpy(&v.scalar_, base + pos, sz);
            if (type == GGUF_TYPE_BOOL) v.scalar_ = v.scalar_ != 0;
            pos += sz;
            return;
        }
        if (depth + 1 > GGUF_MAX_ARRAY_DEPTH)
            fail("arrays nested deeper than " + u64s(GGUF_MAX_ARRAY_DEPTH) + " levels at offset " + u64s(type_at));
        uint64_t at = pos;
        uint32_t elem = read<uint32_t>("array element type");
        if (elem >= GGUF_TYPE_COUNT)
            fail("unknown array element type id " + u64s(elem) + " at offset " + u64s(at));
        at = pos;
        uint64_t n = read<uint64_t>("array count");
        uint64_t min = min_element_bytes(elem);
        if (n > remain() / min)
            fail("array count " + u64s(n) + " at offset " + u64s(at) + " is impossible: elements of type " +
                 gguf_type_name(elem) + " take at least " + u64s(min) + " bytes each but only " + u64s(remain()) +
                 " bytes remain (corrupt count or truncated file)");
        v.elem_ = static_cast<gguf_type>(elem);
        v.n_ = n;
        if (elem == GGUF_TYPE_STRING) {
            parse_string_array(v, n);
        } else if (elem == GGUF_TYPE_ARRAY) {
            for (uint64_t i = 0; i < n; i++) {
                charge(sizeof(gguf_value), pos);
                v.items_.emplace_back();
                parse_value(v.items_.back(), GGUF_TYPE_ARRAY, pos, depth + 1);
            }
        } else {
            uint64_t nbytes = n * min;  // cannot overflow: n * min <= remain()
            charge(nbytes, at);
            v.bytes_.assign(base + pos, base + pos + nbytes);
            if (elem == GGUF_TYPE_BOOL)
                for (auto & b : v.bytes_) b = b != 0;
            pos += nbytes;
        }
    }

    // Two passes: validate every length and sum them, then copy into one allocation of exactly
    // the string bytes plus n + 1 offsets (about the size of the array in the file).
    void parse_string_array(gguf_value & v, uint64_t n) {
        const uint64_t at = pos;
        uint64_t p = pos;
        uint64_t total = 0;
        for (uint64_t i = 0; i < n; i++) {
            if (size - p < 8) fail_truncated(p, 8, "length of string element " + u64s(i));
            uint64_t len = load<uint64_t>(p);
            if (len > size - p - 8)
                fail("string element " + u64s(i) + " at offset " + u64s(p) + ": length " + u64s(len) + " exceeds the " +
                     u64s(size - p - 8) + " bytes left in the file (size " + u64s(size) + "): truncated or corrupt");
            p += 8 + len;
            total += len;
        }
        charge(total + (n + 1) * sizeof(uint64_t), at);
        v.bytes_.resize(static_cast<size_t>(total));
        v.str_offs_.resize(static_cast<size_t>(n) + 1);
        uint64_t off = 0;
        uint8_t * dst = v.bytes_.data();
        for (uint64_t i = 0; i < n; i++) {
            uint64_t len = load<uint64_t>(pos);
            pos += 8;
            v.str_offs_[i] = off;
            if (len) std::memcpy(dst + off, base + pos, len);
            off += len;
            pos += len;
        }
        v.str_offs_[n] = off;
    }

    void parse_kvs(uint64_t n_kv) {
        for (uint64_t i = 0; i < n_kv; i++) {
            ctx = "key/value pair #" + u64s(i);
            gguf_kv kv;
            kv.offset = pos;
            std::string_view key = read_str("key");
            if (key.empty()) fail("empty key at offset " + u64s(kv.offset));
            charge(sizeof(gguf_kv) + INDEX_ENTRY_BYTES + key.size(), kv.offset);
            kv.key.assign(key);
            ctx = "key '" + printable(key) + "'";
            uint64_t type_at = pos;
            uint32_t type = read<uint32_t>("value type");
            parse_value(kv.value, type, type_at, 0);
            f.kv_.push_back(std::move(kv));
        }
        ctx.clear();
        f.kv_index_.reserve(f.kv_.size());
        for (size_t i = 0; i < f.kv_.size(); i++) {
            auto ins = f.kv_index_.emplace(std::string_view(f.kv_[i].key), i);
            if (!ins.second)
                fail("duplicate key '" + printable(f.kv_[i].key) + "' at offsets " +
                     u64s(f.kv_[ins.first->second].offset) + " and " + u64s(f.kv_[i].offset));
        }
    }

    void parse_tensor_info(uint64_t i, gguf_tensor_info & t) {
        ctx = "tensor #" + u64s(i);
        t.info_offset = pos;
        std::string_view name = read_str("tensor name");
        if (name.empty()) fail("empty tensor name at offset " + u64s(t.info_offset));
        charge(sizeof(gguf_tensor_info) + INDEX_ENTRY_BYTES + name.size(), t.info_offset);
        t.name.assign(name);
        ctx = "tensor '" + printable(name) + "'";
        uint64_t at = pos;
        t.n_dims = read<uint32_t>("n_dims");
        if (t.n_dims == 0 || t.n_dims > GGUF_MAX_DIMS)
            fail("n_dims " + u64s(t.n_dims) + " at offset " + u64s(at) + " is out of range (must be 1.." +
                 u64s(GGUF_MAX_DIMS) + ")");
        for (uint32_t j = 0; j < t.n_dims; j++) {
            at = pos;
            int64_t ne = read<int64_t>("dimension");
            if (ne <= 0)
                fail("dimension " + u64s(j) + " at offset " + u64s(at) + " is " + std::to_string(ne) + " (must be > 0)");
            t.ne[j] = ne;
        }
        at = pos;
        t.type = read<uint32_t>("type");
        const type_traits * tr = type_traits_get(t.type);
        if (!tr) fail("unknown tensor type id " + u64s(t.type) + " at offset " + u64s(at));
        std::string shape = "[" + std::to_string(t.ne[0]);
        for (uint32_t j = 1; j < t.n_dims; j++) shape += ", " + std::to_string(t.ne[j]);
        shape += "]";
        shape += " (tensor table entry at offset " + u64s(t.info_offset) + ")";
        if (t.ne[0] % tr->block_size != 0)
            fail("shape " + shape + ": ne[0] is not a multiple of the block size " + std::to_string(tr->block_size) +
                 " of type " + tr->name);
        uint64_t n_el = 1;
        uint64_t nbytes = static_cast<uint64_t>(t.ne[0] / tr->block_size);
        bool ok = checked_mul(nbytes, tr->type_size, nbytes);
        for (int j = 0; j < GGUF_MAX_DIMS; j++) {
            ok = ok && checked_mul(n_el, static_cast<uint64_t>(t.ne[j]), n_el);
            if (j > 0) ok = ok && checked_mul(nbytes, static_cast<uint64_t>(t.ne[j]), nbytes);
        }
        if (!ok || n_el > static_cast<uint64_t>(INT64_MAX))
            fail("shape " + shape + " of type " + tr->name + ": element count or byte size overflows 64 bits");
        t.n_elements = static_cast<int64_t>(n_el);
        t.nbytes = nbytes;
        t.offset = read<uint64_t>("data offset");
    }

    void parse_tensors(uint64_t n_tensors) {
        ctx = "header";
        if (n_tensors > remain() / MIN_TENSOR_INFO_BYTES)
            fail("tensor count " + u64s(n_tensors) + " at offset 8 is impossible: at least " +
                 u64s(MIN_TENSOR_INFO_BYTES) + " bytes per tensor table entry but only " + u64s(remain()) +
                 " bytes remain after the metadata (corrupt count or truncated file)");
        for (uint64_t i = 0; i < n_tensors; i++) {
            gguf_tensor_info t;
            parse_tensor_info(i, t);
            f.tensors_.push_back(std::move(t));
        }
        ctx.clear();
        f.tensor_index_.reserve(f.tensors_.size());
        for (size_t i = 0; i < f.tensors_.size(); i++) {
            auto ins = f.tensor_index_.emplace(std::string_view(f.tensors_[i].name), i);
            if (!ins.second)
                fail("duplicate tensor name '" + printable(f.tensors_[i].name) + "' in the tensor table at offsets " +
                     u64s(f.tensors_[ins.first->second].info_offset) + " and " + u64s(f.tensors_[i].info_offset));
        }
    }

    void resolve_alignment() {
        ctx.clear();
        auto it = f.kv_index_.find(GGUF_KEY_ALIGNMENT);
        if (it == f.kv_index_.end()) return;
        const gguf_kv & kv = f.kv_[it->second];
        ctx = std::string("key '") + GGUF_KEY_ALIGNMENT + "'";
        if (kv.value.type() != GGUF_TYPE_UINT32)
            fail("type " + kv.value.type_string() + " at offset " + u64s(kv.offset) + ", expected uint32");
        uint32_t a = kv.value.scalar<uint32_t>();
        if (a == 0 || (a & (a - 1)) != 0)
            fail("alignment " + u64s(a) + " at offset " + u64s(kv.offset) + " is not a power of two");
        f.alignment_ = a;
        ctx.clear();
    }

    void place_tensors() {
        ctx.clear();
        uint64_t header_end = pos;
        if (f.tensors_.empty()) {
            f.data_offset_ = header_end;  // no data section: nothing to align (as ggml does)
            return;
        }
        uint64_t a = f.alignment_;
        uint64_t start = (header_end + (a - 1)) / a * a;  // header_end <= size, a <= 2^31: no overflow
        if (start > size)
            fail("data section start " + u64s(start) + " (end of tensor table " + u64s(header_end) + " aligned to " +
                 u64s(a) + ") is past the end of the file (size " + u64s(size) + ")");
        f.data_offset_ = start;
        for (auto & t : f.tensors_) {
            ctx = "tensor '" + printable(t.name) + "'";
            if (t.offset % a != 0)
                fail("data offset " + u64s(t.offset) + " (tensor table entry at offset " + u64s(t.info_offset) +
                     ") is not a multiple of the alignment " + u64s(a));
            uint64_t begin = 0, end = 0;
            if (!checked_add(start, t.offset, begin) || !checked_add(begin, t.nbytes, end))
                fail("data offset " + u64s(t.offset) + " + " + u64s(t.nbytes) + " bytes overflows 64 bits");
            if (end > size)
                fail("data [offset " + u64s(begin) + ".." + u64s(end) + ") extends past end of file (size " +
                     u64s(size) + ")");
            t.file_offset = begin;
        }
        ctx.clear();
        std::vector<const gguf_tensor_info *> order(f.tensors_.size());
        for (size_t i = 0; i < order.size(); i++) order[i] = &f.tensors_[i];
        std::sort(order.begin(), order.end(),
                  [](const gguf_tensor_info * x, const gguf_tensor_info * y) { return x->file_offset < y->file_offset; });
        for (size_t i = 1; i < order.size(); i++) {
            const gguf_tensor_info & p = *order[i - 1];
            const gguf_tensor_info & q = *order[i];
            if (p.file_offset + p.nbytes > q.file_offset)
                fail("tensor '" + printable(p.name) + "' data [offset " + u64s(p.file_offset) + ".." +
                     u64s(p.file_offset + p.nbytes) + ") overlaps tensor '" + printable(q.name) + "' data [offset " +
                     u64s(q.file_offset) + ".." + u64s(q.file_offset + q.nbytes) + ")");
        }
    }

    void run() {
        uint64_t n_tensors = 0, n_kv = 0;
        parse_header(n_tensors, n_kv);
        parse_kvs(n_kv);
        resolve_alignment();
        parse_tensors(n_tensors);
        place_tensors();
    }
};

void gguf_file::parse(const uint8_t * base, uint64_t size, uint64_t max_heap) {
    file_size_ = size;
    gguf_parser p(*this, base, size, max_heap);
    p.run();
    size_t bytes = kv_.capacity() * sizeof(gguf_kv) + tensors_.capacity() * sizeof(gguf_tensor_info);
    for (auto & kv : kv_) bytes += kv.key.capacity() + kv.value.heap_bytes();
    for (auto & t : tensors_) bytes += t.name.capacity();
    // Hash maps: a node plus a bucket pointer per entry, roughly.
    bytes += (kv_index_.size() + tensor_index_.size()) * (sizeof(void *) * 2 + sizeof(std::string_view) + sizeof(size_t));
    heap_bytes_ = bytes;
}

} // namespace kail
