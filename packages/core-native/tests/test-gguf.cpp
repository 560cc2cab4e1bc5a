// GGUF reader: round trips through an in-test writer, one test per validation rule, a deterministic
// mutation run (every outcome must be a self-consistent file or a kail::error; run under ASan it also
// proves no out-of-bounds read), and the real vocabulary fixtures.
#include "kail/gguf.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kail/status.h"
#include "kail/types.h"
#include "op_test_util.h"

using namespace kail;

// ---------------------------------------------------------------------------------------------
// Builder: a tree of values written the way ggml's gguf writer lays a file out, recording where
// every count, type id, dimension and offset went so the mutation run can aim at them.

struct tval {
    uint32_t                 type = GGUF_TYPE_UINT8;
    uint32_t                 elem = GGUF_TYPE_COUNT;
    std::vector<uint8_t>     raw;   // scalar bytes or packed numeric/bool array
    std::string              s;
    std::vector<std::string> strs;
    std::vector<tval>        items;
    uint64_t                 n = 0;
};

template <typename T> uint32_t tid();
template <> uint32_t tid<uint8_t>() { return GGUF_TYPE_UINT8; }
template <> uint32_t tid<int8_t>() { return GGUF_TYPE_INT8; }
template <> uint32_t tid<uint16_t>() { return GGUF_TYPE_UINT16; }
template <> uint32_t tid<int16_t>() { return GGUF_TYPE_INT16; }
template <> uint32_t tid<uint32_t>() { return GGUF_TYPE_UINT32; }
template <> uint32_t tid<int32_t>() { return GGUF_TYPE_INT32; }
template <> uint32_t tid<float>() { return GGUF_TYPE_FLOAT32; }
template <> uint32_t tid<bool>() { return GGUF_TYPE_BOOL; }
template <> uint32_t tid<uint64_t>() { return GGUF_TYPE_UINT64; }
template <> uint32_t tid<int64_t>() { return GGUF_TYPE_INT64; }
template <> uint32_t tid<double>() { return GGUF_TYPE_FLOAT64; }

template <typename T> tval scalar(T v) {
    tval t;
    t.type = tid<T>();
    t.raw.resize(sizeof(T));
    std::memcpy(t.raw.data(), &v, sizeof(T));
    return t;
}
tval str(const std::string & s) {
    tval t;
    t.type = GGUF_TYPE_STRING;
    t.s = s;
    return t;
}
template <typename T> tval arr(const std::vector<T> & v) {
    tval t;
    t.type = GGUF_TYPE_ARRAY;
    t.elem = tid<T>();
    t.n = v.size();
    for (T x : v) {
        uint8_t b[sizeof(T)];
        std::memcpy(b, &x, sizeof(T));
        t.raw.insert(t.raw.end(), b, b + sizeof(T));
    }
    return t;
}
tval arr_bool(const std::vector<bool> & v) {
    tval t;
    t.type = GGUF_TYPE_ARRAY;
    t.elem = GGUF_TYPE_BOOL;
    t.n = v.size();
    for (bool x : v) t.raw.push_back(x ? 1 : 0);
    return t;
}
tval arr_str(const std::vector<std::string> & v) {
    tval t;
    t.type = GGUF_TYPE_ARRAY;
    t.elem = GGUF_TYPE_STRING;
    t.n = v.size();
    t.strs = v;
    return t;
}
tval arr_arr(const std::vector<tval> & v) {
    tval t;
    t.type = GGUF_TYPE_ARRAY;
    t.elem = GGUF_TYPE_ARRAY;
    t.n = v.size();
    t.items = v;
    return t;
}

struct field_positions {
    std::vector<size_t> u64s;      // counts, string lengths, array counts
    std::vector<size_t> types;     // value type, array element type and tensor type ids (u32)
    std::vector<size_t> n_dims;    // u32
    std::vector<size_t> dims;      // i64
    std::vector<size_t> offsets;   // tensor data offsets (u64)
    std::vector<std::pair<size_t, size_t>> names;  // tensor names (pos, len)
    std::vector<std::pair<size_t, size_t>> keys;   // keys (pos, len)
    size_t alignment_value = 0;    // position of general.alignment's value, 0 if absent
    size_t version = 4;
};

struct writer {
    std::vector<uint8_t> b;
    field_positions *    fp = nullptr;
    void raw(const void * p, size_t n) { b.insert(b.end(), (const uint8_t *) p, (const uint8_t *) p + n); }
    void u32(uint32_t v) { raw(&v, 4); }
    void u64(uint64_t v, bool record = true) {
        if (record) fp->u64s.push_back(b.size());
        raw(&v, 8);
    }
    void type(uint32_t v) {
        fp->types.push_back(b.size());
        u32(v);
    }
    void str(const std::string & s) {
        u64(s.size());
        raw(s.data(), s.size());
    }
    void value_body(const tval & v) {
        if (v.type == GGUF_TYPE_STRING) return str(v.s);
        if (v.type != GGUF_TYPE_ARRAY) return raw(v.raw.data(), v.raw.size());
        type(v.elem);
        u64(v.n);
        if (v.elem == GGUF_TYPE_STRING)
            for (auto & s : v.strs) str(s);
        else if (v.elem == GGUF_TYPE_ARRAY)
            for (auto & it : v.items) value_body(it);
        else
            raw(v.raw.data(), v.raw.size());
    }
    void pad(size_t a) {
        while (b.size() % a) b.push_back(0);
    }
};

struct ttensor {
    std::string          name;
    std::vector<int64_t> ne;
    uint32_t             type = KAIL_TYPE_F32;
    uint64_t             nbytes = 0;
};

struct gguf_builder {
    uint32_t                                 version = 3;
    uint32_t                                 alignment = GGUF_DEFAULT_ALIGNMENT;
    std::vector<std::pair<std::string, tval>> kvs;
    std::vector<ttensor>                     tensors;
    field_positions                          fp;

    gguf_builder & kv(const std::string & k, const tval & v) {
        kvs.emplace_back(k, v);
        if (k == "general.alignment") std::memcpy(&alignment, v.raw.data(), 4);
        return *this;
    }
    gguf_builder & tensor(const std::string & name, uint32_t type, std::vector<int64_t> ne) {
        ttensor t;
        t.name = name;
        t.type = type;
        t.ne = ne;
        t.nbytes = row_size(type, ne[0]);
        for (size_t i = 1; i < ne.size(); i++) t.nbytes *= static_cast<uint64_t>(ne[i]);
        tensors.push_back(t);
        return *this;
    }
    // Tensor data: byte j of tensor i is (i * 31 + j) & 0xff.
    std::vector<uint8_t> build() {
        fp = field_positions{};
        writer w;
        w.fp = &fp;
        w.raw("GGUF", 4);
        fp.version = w.b.size();
        w.u32(version);
        w.u64(tensors.size());
        w.u64(kvs.size());
        for (auto & kv : kvs) {
            fp.keys.emplace_back(w.b.size() + 8, kv.first.size());
            w.str(kv.first);
            w.type(kv.second.type);
            if (kv.first == "general.alignment") fp.alignment_value = w.b.size();
            w.value_body(kv.second);
        }
        uint64_t off = 0;
        for (auto & t : tensors) {
            fp.names.emplace_back(w.b.size() + 8, t.name.size());
            w.str(t.name);
            fp.n_dims.push_back(w.b.size());
            w.u32(static_cast<uint32_t>(t.ne.size()));
            for (int64_t d : t.ne) {
                fp.dims.push_back(w.b.size());
                w.raw(&d, 8);
            }
            w.type(t.type);
            fp.offsets.push_back(w.b.size());
            w.u64(off, false);
            off += (t.nbytes + alignment - 1) / alignment * alignment;
        }
        if (!tensors.empty()) w.pad(alignment);
        for (size_t i = 0; i < tensors.size(); i++) {
            for (uint64_t j = 0; j < tensors[i].nbytes; j++) w.b.push_back(static_cast<uint8_t>(i * 31 + j));
            w.pad(alignment);
        }
        return w.b;
    }
};

// ---------------------------------------------------------------------------------------------
// Checks

bool same_value(const tval & t, const gguf_value & v) {
    if (v.type() != t.type) return false;
    if (t.type == GGUF_TYPE_STRING) return v.str() == t.s;
    if (t.type != GGUF_TYPE_ARRAY) {
        return std::memcmp(v.scalar_bytes(), t.raw.data(), t.raw.size()) == 0;
    }
    if (v.array_type() != t.elem || v.array_size() != t.n) return false;
    if (t.elem == GGUF_TYPE_STRING) {
        for (uint64_t i = 0; i < t.n; i++)
            if (v.array_str(i) != t.strs[i]) return false;
        return true;
    }
    if (t.elem == GGUF_TYPE_ARRAY) {
        for (uint64_t i = 0; i < t.n; i++)
            if (!same_value(t.items[i], v.array_item(i))) return false;
        return true;
    }
    if (t.raw.empty()) return v.array_data() == nullptr;
    return std::memcmp(v.array_data(), t.raw.data(), t.raw.size()) == 0;
}

// Touches every byte a value exposes (so ASan sees any bad pointer) and returns a checksum.
uint64_t walk(const gguf_value & v) {
    uint64_t h = v.type();
    if (v.type() == GGUF_TYPE_STRING) {
        for (char c : v.str()) h = h * 31 + static_cast<uint8_t>(c);
    } else if (v.is_array()) {
        if (v.array_type() == GGUF_TYPE_STRING) {
            for (uint64_t i = 0; i < v.array_size(); i++)
                for (char c : v.array_str(i)) h = h * 31 + static_cast<uint8_t>(c);
        } else if (v.array_type() == GGUF_TYPE_ARRAY) {
            for (uint64_t i = 0; i < v.array_size(); i++) h += walk(v.array_item(i));
        } else {
            const uint8_t * p = static_cast<const uint8_t *>(v.array_data());
            size_t n = v.array_size() * gguf_type_size(v.array_type());
            CHECK((n == 0) == (p == nullptr));
            for (size_t i = 0; i < n; i++) h = h * 31 + p[i];
        }
    } else {
        const uint8_t * p = static_cast<const uint8_t *>(v.scalar_bytes());
        for (size_t i = 0; i < gguf_type_size(v.type()); i++) h = h * 31 + p[i];
    }
    return h;
}

// What any successfully parsed file must satisfy.
bool consistent(const gguf_file & f, const uint8_t * base, size_t size) {
    bool ok = true;
    auto expect = [&](bool c, const char * what) {
        if (!c) {
            std::fprintf(stderr, "inconsistent parse: %s\n", what);
            ok = false;
        }
    };
    expect(f.file_size() == size, "file size");
    expect(f.version() == 2 || f.version() == 3, "version");
    expect(f.alignment() && (f.alignment() & (f.alignment() - 1)) == 0, "alignment power of two");
    expect(f.data_offset() <= size, "data offset within file");
    for (auto & kv : f.metadata()) {
        expect(!kv.key.empty(), "non-empty key");
        expect(f.find_kv(kv.key) == &kv, "unique keys, indexed");
        walk(kv.value);
    }
    std::vector<std::pair<uint64_t, uint64_t>> ranges;
    for (auto & t : f.tensors()) {
        expect(f.find_tensor(t.name) == &t, "unique tensor names, indexed");
        expect(t.n_dims >= 1 && t.n_dims <= 4, "n_dims");
        const type_traits * tr = type_traits_get(t.type);
        expect(tr != nullptr, "known type");
        if (!tr) continue;
        uint64_t nb = row_size(t.type, t.ne[0]);
        int64_t  n = 1;
        for (int j = 0; j < 4; j++) {
            expect(t.ne[j] >= 1, "dims positive");
            expect(j < (int) t.n_dims || t.ne[j] == 1, "unused dims are 1");
            if (j) nb *= static_cast<uint64_t>(t.ne[j]);
            n *= t.ne[j];
        }
        expect(nb == t.nbytes && n == t.n_elements, "nbytes / n_elements");
        expect(t.file_offset == f.data_offset() + t.offset, "file_offset");
        expect(t.file_offset % f.alignment() == 0, "aligned");
        expect(t.file_offset >= f.data_offset() && t.file_offset + t.nbytes <= size, "within file");
        expect(f.tensor_data(t) == base + t.file_offset, "tensor_data");
        ranges.emplace_back(t.file_offset, t.file_offset + t.nbytes);
    }
    std::sort(ranges.begin(), ranges.end());
    for (size_t i = 1; i < ranges.size(); i++) expect(ranges[i - 1].second <= ranges[i].first, "non-overlapping");
    // Memory stays proportional to the file (the worst case, arrays of empty arrays and minimal
    // key/value pairs, is about 12 bytes of bookkeeping per 12-14 bytes of file).
    expect(f.heap_bytes() <= 16 * size + 1024, "heap bytes bounded by file size");
    return ok;
}

// Parses a copy in an exactly-sized heap block so ASan flags any read past its end.
enum class outcome { parsed, error, crash };
outcome try_parse(const std::vector<uint8_t> & img, size_t len, std::string * msg = nullptr) {
    uint8_t * p = static_cast<uint8_t *>(std::malloc(len ? len : 1));
    if (len) std::memcpy(p, img.data(), len);
    outcome r = outcome::crash;
    try {
        auto f = gguf_file::from_buffer(len ? p : nullptr, len);
        r = consistent(*f, p, len) ? outcome::parsed : outcome::crash;
    } catch (const error & e) {
        r = e.code() == KAIL_E_BAD_MODEL ? outcome::error : outcome::crash;
        if (msg) *msg = e.what();
        if (r == outcome::crash) std::fprintf(stderr, "unexpected error code: %s\n", e.what());
    } catch (const std::exception & e) {
        std::fprintf(stderr, "non-kail exception: %s\n", e.what());
    }
    std::free(p);
    return r;
}

template <typename F> void expect_error(const char * name, F && fn, error_code code, std::vector<std::string> subs) {
    try {
        fn();
        std::fprintf(stderr, "%s: expected an error, got none\n", name);
        g_failures++;
    } catch (const error & e) {
        if (std::getenv("KAIL_TEST_VERBOSE")) std::printf("%-24s [%s] %s\n", name, error_code_name(e.code()), e.what());
        bool ok = e.code() == code;
        for (auto & s : subs) ok = ok && std::string(e.what()).find(s) != std::string::npos;
        if (!ok) {
            std::fprintf(stderr, "%s: unexpected error [%s] %s\n", name, error_code_name(e.code()), e.what());
            g_failures++;
        }
    }
}

void expect_bad(const char * name, const std::vector<uint8_t> & img, std::vector<std::string> subs) {
    expect_error(name, [&] { gguf_file::from_buffer(img.data(), img.size()); }, KAIL_E_BAD_MODEL, subs);
}

template <typename T> void put(std::vector<uint8_t> & b, size_t pos, T v) { std::memcpy(b.data() + pos, &v, sizeof v); }
template <typename T> T get(const std::vector<uint8_t> & b, size_t pos) {
    T v;
    std::memcpy(&v, b.data() + pos, sizeof v);
    return v;
}

// ---------------------------------------------------------------------------------------------
// Sample files

gguf_builder all_types_builder() {
    gguf_builder g;
    g.kv("general.architecture", str("llama"))
        .kv("t.u8", scalar<uint8_t>(200))
        .kv("t.i8", scalar<int8_t>(-100))
        .kv("t.u16", scalar<uint16_t>(60000))
        .kv("t.i16", scalar<int16_t>(-30000))
        .kv("t.u32", scalar<uint32_t>(4000000000u))
        .kv("t.i32", scalar<int32_t>(-2000000000))
        .kv("t.f32", scalar<float>(1.5f))
        .kv("t.bool", scalar<bool>(true))
        .kv("t.u64", scalar<uint64_t>(UINT64_MAX))
        .kv("t.i64", scalar<int64_t>(INT64_MIN))
        .kv("t.f64", scalar<double>(-2.25))
        .kv("t.str.empty", str(""))
        .kv("t.str.nul", str(std::string("a\0b", 3)))
        .kv("t.arr.u8", arr<uint8_t>({1, 2, 255}))
        .kv("t.arr.i8", arr<int8_t>({-1, 0, 1}))
        .kv("t.arr.u16", arr<uint16_t>({1, 65535}))
        .kv("t.arr.i16", arr<int16_t>({-32768, 7}))
        .kv("t.arr.u32", arr<uint32_t>({0, 1, 4294967295u}))
        .kv("t.arr.i32", arr<int32_t>({-5, 5, 0}))
        .kv("t.arr.f32", arr<float>({0.5f, -1.0f, 3.25f}))
        .kv("t.arr.bool", arr_bool({true, false, true}))
        .kv("t.arr.u64", arr<uint64_t>({0, UINT64_MAX}))
        .kv("t.arr.i64", arr<int64_t>({INT64_MIN, -1, INT64_MAX}))
        .kv("t.arr.f64", arr<double>({1e300, -0.0}))
        .kv("t.arr.str", arr_str({"hello", "", "w\xc3\xb6rld", std::string("\0", 1)}))
        .kv("t.arr.empty", arr<float>({}))
        .kv("t.arr.empty_str", arr_str({}))
        .kv("t.arr.nested", arr_arr({arr<int32_t>({1, 2}), arr_str({"x"}), arr_arr({arr<float>({9.f}), arr_arr({})}),
                                     arr<uint8_t>({})}));
    return g;
}

gguf_builder tensors_builder(uint32_t version) {
    gguf_builder g;
    g.version = version;
    g.kv("general.architecture", str("test"))
        .kv("general.name", str("tiny"))
        .kv("tokenizer.ggml.tokens", arr_str({"<s>", "</s>", "a", "b"}))
        .kv("tokenizer.ggml.scores", arr<float>({0.f, 0.f, -1.f, -2.f}));
    g.tensor("blk.0.a", KAIL_TYPE_F32, {4, 3})
        .tensor("blk.0.b", KAIL_TYPE_Q8_0, {64, 2})
        .tensor("blk.1.a", KAIL_TYPE_F16, {8})
        .tensor("blk.1.b", KAIL_TYPE_Q4_K, {256, 1, 2, 1});
    return g;
}

gguf_builder aligned64_builder() {
    gguf_builder g;
    g.kv("general.alignment", scalar<uint32_t>(64)).kv("k.aa", scalar<uint32_t>(1)).kv("k.bb", scalar<uint32_t>(2));
    g.tensor("w.0", KAIL_TYPE_I32, {5}).tensor("w.1", KAIL_TYPE_BF16, {3, 2}).tensor("w.2", KAIL_TYPE_Q4_0, {32});
    return g;
}

// ---------------------------------------------------------------------------------------------
// Tests

void test_round_trip() {
    gguf_builder g = all_types_builder();
    auto img = g.build();
    auto f = gguf_file::from_buffer(img.data(), img.size());
    CHECK(f->version() == 3);
    CHECK(f->alignment() == 32);
    CHECK(f->tensors().empty());
    CHECK(f->data_offset() == img.size());  // no tensors: the data section starts (empty) after the KVs
    CHECK(f->metadata().size() == g.kvs.size());
    for (size_t i = 0; i < g.kvs.size() && i < f->metadata().size(); i++) {
        const gguf_kv & kv = f->metadata()[i];
        CHECK(kv.key == g.kvs[i].first);  // file order
        if (!same_value(g.kvs[i].second, kv.value)) {
            std::fprintf(stderr, "round trip mismatch for %s\n", kv.key.c_str());
            g_failures++;
        }
    }
    CHECK(consistent(*f, img.data(), img.size()));

    // typed getters
    CHECK(f->get_u32("t.u32") == 4000000000u);
    CHECK(f->get_u32("t.u8") == 200);  // widening
    CHECK(f->get_i32("t.i8") == -100);
    CHECK(f->get_i64("t.i64") == INT64_MIN);
    CHECK(f->get_u64("t.u64") == UINT64_MAX);
    CHECK(f->get_f32("t.f32") == 1.5f);
    CHECK(f->get_f64("t.f64") == -2.25);
    CHECK(f->get_f64("t.f32") == 1.5);
    CHECK(f->get_bool("t.bool"));
    CHECK(f->get_str("general.architecture") == "llama");
    CHECK(f->get_str("t.str.nul") == std::string("a\0b", 3));
    CHECK(f->get_u32("missing", 7) == 7);
    CHECK(f->get_str("missing", "d") == "d");
    CHECK(f->get_arr_n("t.arr.str") == 4);
    auto strs = f->get_arr_str("t.arr.str");
    CHECK(strs.size() == 4 && strs[2] == "w\xc3\xb6rld" && strs[3] == std::string("\0", 1) && strs[1].empty());
    auto fl = f->get_arr_num<float>("t.arr.f32");
    CHECK(fl.size() == 3 && fl[2] == 3.25f);
    auto fi = f->get_arr_num<float>("t.arr.i32");
    CHECK(fi.size() == 3 && fi[0] == -5.f);
    auto i64 = f->get_arr_num<int64_t>("t.arr.u32");
    CHECK(i64.size() == 3 && i64[2] == 4294967295ll);
    CHECK(f->get_arr_num<float>("t.arr.empty").empty());
    const gguf_value & nested = f->get("t.arr.nested");
    CHECK(nested.type_string() == "array<array>");
    CHECK(nested.array_item(2).array_item(1).array_size() == 0);
    CHECK(nested.array_item(2).array_item(0).type_string() == "array<float32>");

    expect_error("u32 of string", [&] { f->get_u32("general.architecture"); }, KAIL_E_BAD_MODEL,
                 {"key 'general.architecture'", "type string", "expected uint32"});
    expect_error("u32 overflow", [&] { f->get_u32("t.u64"); }, KAIL_E_BAD_MODEL,
                 {"key 't.u64'", "18446744073709551615", "does not fit in uint32"});
    expect_error("u32 of negative", [&] { f->get_u32("t.i8"); }, KAIL_E_BAD_MODEL, {"-100", "does not fit"});
    expect_error("missing key", [&] { f->get_u32("nope"); }, KAIL_E_BAD_MODEL, {"required key 'nope' is missing"});
    expect_error("bool of u8", [&] { f->get_bool("t.u8"); }, KAIL_E_BAD_MODEL, {"type uint8", "expected bool"});
    expect_error("f32 of u8", [&] { f->get_f32("t.u8"); }, KAIL_E_BAD_MODEL, {"expected float32"});
    expect_error("arr str of f32", [&] { f->get_arr_str("t.arr.f32"); }, KAIL_E_BAD_MODEL,
                 {"type array<float32>", "expected array<string>"});
    expect_error("int array of floats", [&] { f->get_arr_num<int32_t>("t.arr.f32"); }, KAIL_E_BAD_MODEL,
                 {"expected array of integers"});
    expect_error("int array overflow", [&] { f->get_arr_num<int8_t>("t.arr.u8"); }, KAIL_E_BAD_MODEL,
                 {"element 2", "value 255", "does not fit in int8"});
    expect_error("scalar<T> mismatch", [&] { f->get("t.u8").scalar<uint32_t>(); }, KAIL_E_BAD_MODEL,
                 {"expected uint32, got uint8"});

    // v2 and tensors
    for (uint32_t version : {2u, 3u}) {
        gguf_builder t = tensors_builder(version);
        auto timg = t.build();
        auto tf = gguf_file::from_buffer(timg.data(), timg.size());
        CHECK(tf->version() == version);
        CHECK(tf->tensors().size() == 4);
        CHECK(tf->data_offset() % 32 == 0);
        CHECK(consistent(*tf, timg.data(), timg.size()));
        const gguf_tensor_info * b = tf->find_tensor("blk.0.b");
        CHECK(b && b->type == KAIL_TYPE_Q8_0 && b->nbytes == 4 * 34 && b->n_dims == 2 && b->ne[1] == 2 && b->ne[2] == 1);
        const gguf_tensor_info * q = tf->find_tensor("blk.1.b");
        CHECK(q && q->nbytes == 2 * 144 && q->n_elements == 512);
        CHECK(tf->find_tensor("nope") == nullptr);
        for (size_t i = 0; i < tf->tensors().size(); i++) {
            const gguf_tensor_info & ti = tf->tensors()[i];
            CHECK(ti.name == t.tensors[i].name);
            const uint8_t * d = tf->tensor_data(ti);
            bool same = true;
            for (uint64_t j = 0; j < ti.nbytes; j++) same = same && d[j] == static_cast<uint8_t>(i * 31 + j);
            CHECK(same);
        }
        CHECK(tf->get_arr_str("tokenizer.ggml.tokens").size() == 4);
    }
    {
        gguf_builder a = aligned64_builder();
        auto aimg = a.build();
        auto af = gguf_file::from_buffer(aimg.data(), aimg.size());
        CHECK(af->alignment() == 64 && af->data_offset() % 64 == 0);
        CHECK(af->tensors()[1].offset == 64 && af->tensors()[2].offset == 128);
        CHECK(consistent(*af, aimg.data(), aimg.size()));
    }
}

void test_validation() {
    auto base_b = tensors_builder(3);
    const auto base = base_b.build();
    const auto & fp = base_b.fp;
    auto mut = [&](auto fn) {
        auto b = base;
        fn(b);
        return b;
    };

    expect_bad("empty", {}, {"magic at offset 0", "truncated"});
    expect_bad("magic", mut([](auto & b) { b[0] = 'X'; }), {"bad magic at offset 0", "58 47 55 46"});
    expect_bad("version 1", mut([](auto & b) { put<uint32_t>(b, 4, 1); }), {"unsupported version 1 at offset 4"});
    expect_bad("version 4", mut([](auto & b) { put<uint32_t>(b, 4, 4); }), {"unsupported version 4"});
    expect_bad("big endian", mut([](auto & b) { put<uint32_t>(b, 4, 0x03000000); }), {"big-endian"});
    expect_bad("truncated header", std::vector<uint8_t>(base.begin(), base.begin() + 10), {"tensor count at offset 8", "truncated"});
    expect_bad("truncated counts", std::vector<uint8_t>(base.begin(), base.begin() + 20), {"metadata count", "truncated"});
    // the fourth key's string (earlier cuts leave too few bytes for the metadata count itself)
    expect_bad("truncated key", std::vector<uint8_t>(base.begin(), base.begin() + fp.keys[3].first + 3),
               {"key/value pair #3", "key at offset " + std::to_string(fp.keys[3].first - 8), "exceeds", "truncated"});
    expect_bad("truncated early", std::vector<uint8_t>(base.begin(), base.begin() + 35),
               {"metadata count 4 at offset 16 is impossible", "truncated file"});
    // inside the tokens array (kv #2)
    expect_bad("truncated array", std::vector<uint8_t>(base.begin(), base.begin() + fp.keys[2].first + 30),
               {"key 'tokenizer.ggml.tokens'"});
    expect_bad("truncated tensor info", std::vector<uint8_t>(base.begin(), base.begin() + fp.offsets[3] + 4),
               {"tensor 'blk.1.b'", "data offset at offset " + std::to_string(fp.offsets[3]), "truncated"});
    expect_bad("n_kv absurd", mut([](auto & b) { put<uint64_t>(b, 16, 1ull << 40); }),
               {"metadata count 1099511627776 at offset 16 is impossible"});
    expect_bad("n_tensors absurd", mut([](auto & b) { put<uint64_t>(b, 8, UINT64_MAX); }),
               {"tensor count 18446744073709551615 at offset 8 is impossible"});
    expect_bad("string length absurd", mut([&](auto & b) { put<uint64_t>(b, fp.keys[1].first - 8, 1ull << 62); }),
               {"key/value pair #1", "length 4611686018427387904 exceeds the"});
    {
        // tokens array count: the u64 after the element type, which follows the value type
        size_t count_pos = fp.keys[2].first + fp.keys[2].second + 4 + 4;
        CHECK(get<uint64_t>(base, count_pos) == 4);
        expect_bad("array count absurd", mut([&](auto & b) { put<uint64_t>(b, count_pos, 1ull << 60); }),
                   {"key 'tokenizer.ggml.tokens'", "array count 1152921504606846976 at offset", "is impossible"});
        expect_bad("array element type", mut([&](auto & b) { put<uint32_t>(b, count_pos - 4, 13); }),
                   {"unknown array element type id 13"});
        expect_bad("string element length", mut([&](auto & b) { put<uint64_t>(b, count_pos + 8, 1ull << 40); }),
                   {"string element 0 at offset", "exceeds"});
    }
    expect_bad("value type", mut([&](auto & b) { put<uint32_t>(b, fp.keys[0].first + fp.keys[0].second, 42); }),
               {"key 'general.architecture'", "unknown value type id 42 at offset"});
    {
        // keys[0] = "general.architecture", keys[1] = "general.name": make both "general.name"
        gguf_builder d = tensors_builder(3);
        d.kvs[0].first = "general.name";
        expect_bad("duplicate key", d.build(), {"duplicate key 'general.name' at offsets 24 and"});
        gguf_builder e = tensors_builder(3);
        e.kvs[1].first = "";
        expect_bad("empty key", e.build(), {"empty key at offset"});
    }
    expect_bad("duplicate tensor", mut([&](auto & b) { std::memcpy(&b[fp.names[2].first], "blk.0.a", 7); }),
               {"duplicate tensor name 'blk.0.a'", "at offsets"});
    expect_bad("n_dims 0", mut([&](auto & b) { put<uint32_t>(b, fp.n_dims[0], 0); }), {"tensor 'blk.0.a'", "n_dims 0"});
    expect_bad("n_dims 5", mut([&](auto & b) { put<uint32_t>(b, fp.n_dims[0], 5); }), {"n_dims 5", "must be 1..4"});
    expect_bad("dim 0", mut([&](auto & b) { put<int64_t>(b, fp.dims[1], 0); }), {"tensor 'blk.0.a'", "dimension 1", "is 0"});
    expect_bad("dim -1", mut([&](auto & b) { put<int64_t>(b, fp.dims[0], -1); }), {"dimension 0", "is -1"});
    expect_bad("dim overflow", mut([&](auto & b) { put<int64_t>(b, fp.dims[1], INT64_MAX); }),
               {"tensor 'blk.0.a'", "overflows 64 bits"});
    expect_bad("dims product overflow", mut([&](auto & b) {
                   put<int64_t>(b, fp.dims[5], int64_t(1) << 40);  // blk.1.b ne[0], ne[1]
                   put<int64_t>(b, fp.dims[6], int64_t(1) << 40);
               }),
               {"tensor 'blk.1.b'", "overflows"});
    expect_bad("block size", mut([&](auto & b) { put<int64_t>(b, fp.dims[2], 33); }),
               {"tensor 'blk.0.b'", "not a multiple of the block size 32 of type Q8_0"});
    expect_bad("unknown tensor type", mut([&](auto & b) { put<uint32_t>(b, fp.offsets[0] - 4, 99); }),
               {"tensor 'blk.0.a'", "unknown tensor type id 99 at offset"});
    expect_bad("retired tensor type", mut([&](auto & b) { put<uint32_t>(b, fp.offsets[0] - 4, 4); }),
               {"unknown tensor type id 4"});
    expect_bad("misaligned", mut([&](auto & b) { put<uint64_t>(b, fp.offsets[1], 8); }),
               {"tensor 'blk.0.b'", "data offset 8", "not a multiple of the alignment 32"});
    expect_bad("outside file", mut([&](auto & b) { put<uint64_t>(b, fp.offsets[3], 1 << 20); }),
               {"tensor 'blk.1.b'", "data [offset", "extends past end of file (size " + std::to_string(base.size()) + ")"});
    expect_bad("offset overflow", mut([&](auto & b) { put<uint64_t>(b, fp.offsets[3], UINT64_MAX - 31); }),
               {"overflows 64 bits"});
    expect_bad("overlap", mut([&](auto & b) { put<uint64_t>(b, fp.offsets[2], 0); }),
               {"overlaps tensor", "blk.0.a", "blk.1.a"});
    expect_bad("truncated data", std::vector<uint8_t>(base.begin(), base.end() - 40), {"extends past end of file"});
    {
        gguf_builder a = aligned64_builder();
        auto img = a.build();
        size_t p = a.fp.alignment_value;
        for (uint32_t bad : {0u, 3u, 48u, 0xffffffffu}) {
            auto b = img;
            put<uint32_t>(b, p, bad);
            expect_bad("alignment", b, {"key 'general.alignment'", "alignment " + std::to_string(bad), "not a power of two"});
        }
        auto b = img;
        put<uint32_t>(b, p - 4, GGUF_TYPE_INT32);
        expect_bad("alignment type", b, {"key 'general.alignment'", "type int32", "expected uint32"});
        put<uint32_t>(b, p, 1u << 31);
        put<uint32_t>(b, p - 4, GGUF_TYPE_UINT32);
        expect_bad("alignment huge", b, {"data section start", "past the end of the file"});
    }
    {
        // Nesting: depth 16 parses, 17 does not.
        tval v = arr<int32_t>({1});
        for (int i = 1; i < GGUF_MAX_ARRAY_DEPTH; i++) v = arr_arr({v});
        gguf_builder g;
        g.kv("deep", v);
        auto img = g.build();
        CHECK(try_parse(img, img.size()) == outcome::parsed);
        gguf_builder h;
        h.kv("deep", arr_arr({v}));
        expect_bad("nesting", h.build(), {"key 'deep'", "nested deeper than 16"});
    }
    {
        // Hostile names are escaped and capped in messages.
        gguf_builder g;
        g.kv(std::string(1000, 'k') + "\n", scalar<uint8_t>(1)).kv(std::string(1000, 'k') + "\n", scalar<uint8_t>(1));
        std::string msg;
        auto img = g.build();
        CHECK(try_parse(img, img.size(), &msg) == outcome::error);
        CHECK(msg.find("...") != std::string::npos && msg.size() < 400 && msg.find('\n') == std::string::npos);
    }
    {
        // A huge array of empty arrays stays within the memory bound (checked in consistent()),
        // and the metadata cap stops it when set lower.
        gguf_builder g;
        g.kv("many", arr_arr(std::vector<tval>(100000, arr<uint8_t>({}))));
        auto img = g.build();
        CHECK(try_parse(img, img.size()) == outcome::parsed);
        gguf_open_params p;
        p.max_metadata_bytes = 1 << 20;
        expect_error("metadata cap", [&] { gguf_file::from_buffer(img.data(), img.size(), p); }, KAIL_E_BAD_MODEL,
                     {"key 'many'", "would take more than 1048576 bytes", "max_metadata_bytes"});
        auto t = tensors_builder(3).build();
        p.max_metadata_bytes = 1000;
        expect_error("metadata cap tensors", [&] { gguf_file::from_buffer(t.data(), t.size(), p); }, KAIL_E_BAD_MODEL,
                     {"would take more than 1000 bytes"});
        p.max_metadata_bytes = 1 << 16;
        CHECK(gguf_file::from_buffer(t.data(), t.size(), p)->tensors().size() == 4);
    }
}

// Applies deterministic mutations to a valid image; each must give a consistent parse or a
// KAIL_E_BAD_MODEL error. Returns the number of mutated images parsed.
struct mutation_stats {
    size_t total = 0, parsed = 0, errors = 0, bad = 0;
};

void mutate_all(const char * label, gguf_builder g, mutation_stats & st) {
    const std::vector<uint8_t> img = g.build();
    const field_positions & fp = g.fp;
    const size_t n = img.size();
    uint64_t rng = 0x9e3779b97f4a7c15ull ^ n;
    auto next = [&]() {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        return rng;
    };
    auto run = [&](const std::vector<uint8_t> & b, size_t len, const char * what, size_t where) {
        st.total++;
        outcome o = try_parse(b, len);
        if (o == outcome::parsed) st.parsed++;
        if (o == outcome::error) st.errors++;
        if (o == outcome::crash) {
            st.bad++;
            std::fprintf(stderr, "%s: mutation %s at %zu (len %zu) broke an invariant\n", label, what, where, len);
        }
    };
    run(img, n, "none", 0);

    // truncation at every byte (small files) or every few bytes
    size_t step = std::max<size_t>(1, n / 1500);
    for (size_t len = 0; len < n; len += step) run(img, len, "truncate", len);

    std::vector<uint8_t> b;
    // single byte flips and random overwrites
    for (int i = 0; i < 4000; i++) {
        b = img;
        size_t p = next() % n;
        b[p] ^= static_cast<uint8_t>(1u << (next() % 8));
        run(b, n, "bitflip", p);
    }
    for (int i = 0; i < 2000; i++) {
        b = img;
        size_t p = next() % n;
        size_t k = 1 + next() % 8;
        for (size_t j = 0; j < k && p + j < n; j++) b[p + j] = static_cast<uint8_t>(next());
        run(b, n, "overwrite", p);
    }
    // several structural fields at once
    std::vector<size_t> fields = fp.u64s;
    fields.insert(fields.end(), fp.types.begin(), fp.types.end());
    fields.insert(fields.end(), fp.dims.begin(), fp.dims.end());
    fields.insert(fields.end(), fp.offsets.begin(), fp.offsets.end());
    for (int i = 0; i < 2000 && !fields.empty(); i++) {
        b = img;
        int k = 2 + static_cast<int>(next() % 3);
        for (int j = 0; j < k; j++) {
            size_t p = fields[next() % fields.size()];
            uint64_t r = next();
            uint32_t small = static_cast<uint32_t>(r % 64);
            if (r & 0x100) std::memcpy(&b[p], &small, 4);
            else b[p + (r >> 9) % 4] ^= static_cast<uint8_t>(r >> 16);
        }
        run(b, n, "multi-field", 0);
    }
    // counts and lengths
    for (size_t p : fp.u64s) {
        uint64_t v = get<uint64_t>(img, p);
        for (uint64_t nv : {uint64_t(0), uint64_t(1), v + 1, v - 1, v * 2, uint64_t(n), uint64_t(n - p), uint64_t(1) << 32,
                            uint64_t(1) << 63, UINT64_MAX, UINT64_MAX / 8 + 1}) {
            b = img;
            put<uint64_t>(b, p, nv);
            run(b, n, "count", p);
        }
    }
    // type ids (value, array element, tensor)
    for (size_t p : fp.types) {
        for (uint32_t nv : {0u, 1u, 2u, 3u, 4u, 5u, 6u, 7u, 8u, 9u, 10u, 11u, 12u, 13u, 14u, 30u, 39u, 40u, 41u, 255u,
                            0x80000000u, 0xffffffffu}) {
            b = img;
            put<uint32_t>(b, p, nv);
            run(b, n, "type", p);
        }
    }
    for (size_t p : fp.n_dims) {
        for (uint32_t nv : {0u, 1u, 2u, 3u, 4u, 5u, 1000u, 0xffffffffu}) {
            b = img;
            put<uint32_t>(b, p, nv);
            run(b, n, "n_dims", p);
        }
    }
    for (size_t p : fp.dims) {
        for (int64_t nv : {int64_t(0), int64_t(-1), int64_t(1), int64_t(3), int64_t(32), int64_t(256), int64_t(1) << 31,
                           int64_t(1) << 62, INT64_MAX, INT64_MIN}) {
            b = img;
            put<int64_t>(b, p, nv);
            run(b, n, "dim", p);
        }
    }
    for (size_t p : fp.offsets) {
        uint64_t v = get<uint64_t>(img, p);
        std::vector<uint64_t> vals = {v + 1, v + g.alignment, v - g.alignment, 0, uint64_t(n), uint64_t(1) << 63, UINT64_MAX,
                                      UINT64_MAX - g.alignment + 1};
        for (size_t q : fp.offsets) vals.push_back(get<uint64_t>(img, q));
        for (uint64_t nv : vals) {
            b = img;
            put<uint64_t>(b, p, nv);
            run(b, n, "offset", p);
        }
    }
    // duplicate names: copy each name over every other one of the same length
    for (auto * list : {&fp.names, &fp.keys}) {
        for (auto & x : *list)
            for (auto & y : *list) {
                if (&x == &y || x.second != y.second) continue;
                b = img;
                std::memcpy(&b[y.first], &img[x.first], x.second);
                run(b, n, "duplicate name", y.first);
            }
    }
    if (fp.alignment_value) {
        for (uint32_t nv : {0u, 1u, 2u, 3u, 16u, 32u, 128u, 4096u, 1u << 31, 0xffffffffu}) {
            b = img;
            put<uint32_t>(b, fp.alignment_value, nv);
            run(b, n, "alignment", fp.alignment_value);
        }
    }
    b = img;
    put<uint32_t>(b, fp.version, 2);
    run(b, n, "version 2", fp.version);
}

void test_mutations() {
    mutation_stats st;
    auto t0 = std::chrono::steady_clock::now();
    mutate_all("all types", all_types_builder(), st);
    mutate_all("tensors v2", tensors_builder(2), st);
    mutate_all("tensors v3", tensors_builder(3), st);
    mutate_all("aligned 64", aligned64_builder(), st);
    {
        gguf_builder g;
        g.tensor("only", KAIL_TYPE_F32, {2});
        mutate_all("no metadata", g, st);
    }
    mutate_all("empty", gguf_builder(), st);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("mutations: %zu images, %zu parsed consistently, %zu rejected with KAIL_E_BAD_MODEL, %zu broke an invariant (%.2f s)\n",
                st.total, st.parsed, st.errors, st.bad, s);
    CHECK(st.bad == 0);
    CHECK(st.total > 10000);
}

std::string write_temp(const std::vector<uint8_t> & img) {
    char path[] = "/tmp/test-gguf-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    CHECK(write(fd, img.data(), img.size()) == (ssize_t) img.size());
    close(fd);
    return path;
}

void test_files() {
    expect_error("missing file", [] { gguf_file::open("/nonexistent/x.gguf"); }, KAIL_E_IO,
                 {"cannot open '/nonexistent/x.gguf'", "No such file or directory"});
    expect_error("directory", [] { gguf_file::open("/tmp"); }, KAIL_E_IO, {"not a regular file"});

    auto g = tensors_builder(3);
    auto img = g.build();
    std::string path = write_temp(img);
    {
        auto f = gguf_file::open(path);
        CHECK(f->data_mapped());
        CHECK(f->path() == path);
        CHECK(f->file_size() == img.size());
        const gguf_tensor_info * t = f->find_tensor("blk.0.b");
        CHECK(t && std::memcmp(f->tensor_data(*t), img.data() + t->file_offset, t->nbytes) == 0);
        // A private mapping can be written without touching the file or the shared mapping.
        auto r = f->tensor_map_private(*t);
        CHECK(r->size() == t->nbytes && std::memcmp(r->data(), img.data() + t->file_offset, t->nbytes) == 0);
        r->data()[0] ^= 0xff;
        CHECK(f->tensor_data(*t)[0] == img[t->file_offset]);
        auto g2 = gguf_file::open(path);
        CHECK(g2->tensor_data(*g2->find_tensor("blk.0.b"))[0] == img[t->file_offset]);
    }
    {
        gguf_open_params p;
        p.map_data = false;
        auto f = gguf_file::open(path, p);
        CHECK(!f->data_mapped());
        CHECK(f->get_arr_n("tokenizer.ggml.tokens") == 4);
        const gguf_tensor_info * t = f->find_tensor("blk.1.a");
        expect_error("unmapped", [&] { f->tensor_data(*t); }, KAIL_E_INVALID_ARG, {"not mapped"});
        auto r = f->tensor_map_private(*t);
        CHECK(std::memcmp(r->data(), img.data() + t->file_offset, t->nbytes) == 0);
        // The file shrinking under us is reported, not a SIGBUS.
        CHECK(truncate(path.c_str(), 100) == 0);
        expect_error("shrunk", [&] { f->tensor_map_private(*t); }, KAIL_E_IO, {"shrank"});
    }
    {
        // A 64 GiB sparse file whose counts claim billions of entries: rejected quickly, without
        // allocating for the claimed counts (they are only bounded by the bytes left).
        std::vector<uint8_t> hdr;
        auto put_raw = [&](const void * p, size_t n) { hdr.insert(hdr.end(), (const uint8_t *) p, (const uint8_t *) p + n); };
        uint32_t version = 3;
        uint64_t n_tensors = uint64_t(1) << 30, n_kv = 0;  // 35 GB of minimal entries: fits
        put_raw("GGUF", 4);
        put_raw(&version, 4);
        put_raw(&n_tensors, 8);
        put_raw(&n_kv, 8);
        std::string big = write_temp(hdr);
        if (truncate(big.c_str(), int64_t(64) << 30) == 0) {
            expect_error("sparse tensors", [&] { gguf_file::open(big); }, KAIL_E_BAD_MODEL, {"tensor #0", "empty tensor name"});
            // one key: an array of 2^31 arrays, each (zero bytes) a valid empty uint8 array
            hdr.resize(16);
            n_tensors = 0;
            n_kv = 1;
            put_raw(&n_kv, 8);
            uint64_t klen = 1;
            uint32_t t_arr = GGUF_TYPE_ARRAY;
            uint64_t count = uint64_t(1) << 31;
            put_raw(&klen, 8);
            put_raw("k", 1);
            put_raw(&t_arr, 4);
            put_raw(&t_arr, 4);
            put_raw(&count, 8);
            std::memcpy(hdr.data() + 8, &n_tensors, 8);
            int fd = ::open(big.c_str(), O_WRONLY);
            CHECK(fd >= 0 && pwrite(fd, hdr.data(), hdr.size(), 0) == (ssize_t) hdr.size());
            close(fd);
            gguf_open_params p;
            p.max_metadata_bytes = 16 << 20;
            expect_error("sparse nested", [&] { gguf_file::open(big, p); }, KAIL_E_BAD_MODEL, {"key 'k'", "would take more than"});
        } else {
            std::printf("no sparse files in /tmp: 64 GiB check skipped\n");
        }
        unlink(big.c_str());
    }
    expect_error("truncated file", [&] { gguf_file::open(path); }, KAIL_E_BAD_MODEL, {"truncated", "(file " + path + ")"});
    CHECK(truncate(path.c_str(), 0) == 0);
    expect_error("empty file", [&] { gguf_file::open(path); }, KAIL_E_BAD_MODEL, {"magic", "truncated"});
    unlink(path.c_str());
}

int main() {
    auto t0 = std::chrono::steady_clock::now();
    test_round_trip();
    test_validation();
    test_files();
    test_mutations();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (g_failures) {
        std::fprintf(stderr, "test-gguf: %d failure(s)\n", g_failures);
        return 1;
    }
    std::printf("test-gguf: ok (%.2f s)\n", s);
    return 0;
}
