// GGUF files for JS: openGguf(path, {mapData}) -> GgufFile (metadata, tensor table, tensor bytes).
#include "addon_common.h"

#include <cstring>
#include <memory>
#include <vector>

#include "kail/gguf.h"
#include "kail/types.h"

namespace kail_addon {

namespace {

// Raw Node-API calls (the metadata of a tokenizer is ~300k values; the C++ wrappers' per-call
// overhead shows), each checked: a failure becomes the pending JS exception.
#define GGUF_NAPI(call)                                          \
    do {                                                         \
        if ((call) != napi_ok) throw Napi::Error::New(env);      \
    } while (0)

constexpr uint64_t MAX_SAFE_INTEGER = (uint64_t(1) << 53) - 1;

bool is_ascii(const char * p, size_t n) {
    unsigned char acc = 0;
    for (size_t i = 0; i < n; i++) acc |= static_cast<unsigned char>(p[i]);
    return acc < 0x80;
}

// ASCII goes through the one-byte (latin1) path, which skips UTF-8 decoding; most tokens are ASCII.
napi_value make_string(napi_env env, std::string_view s) {
    napi_value out;
    if (s.empty())
        GGUF_NAPI(napi_create_string_latin1(env, "", 0, &out));
    else if (is_ascii(s.data(), s.size()))
        GGUF_NAPI(napi_create_string_latin1(env, s.data(), s.size(), &out));
    else
        GGUF_NAPI(napi_create_string_utf8(env, s.data(), s.size(), &out));
    return out;
}

napi_value make_u64(napi_env env, uint64_t v) {
    napi_value out;
    if (v <= MAX_SAFE_INTEGER) GGUF_NAPI(napi_create_double(env, static_cast<double>(v), &out));
    else GGUF_NAPI(napi_create_bigint_uint64(env, v, &out));
    return out;
}

napi_value make_i64(napi_env env, int64_t v) {
    napi_value out;
    if (v <= static_cast<int64_t>(MAX_SAFE_INTEGER) && v >= -static_cast<int64_t>(MAX_SAFE_INTEGER))
        GGUF_NAPI(napi_create_double(env, static_cast<double>(v), &out));
    else
        GGUF_NAPI(napi_create_bigint_int64(env, v, &out));
    return out;
}

napi_value make_number(napi_env env, double v) {
    napi_value out;
    GGUF_NAPI(napi_create_double(env, v, &out));
    return out;
}

bool typed_array_kind(uint32_t elem, napi_typedarray_type & kind) {
    switch (elem) {
        case kail::GGUF_TYPE_UINT8:   kind = napi_uint8_array; return true;
        case kail::GGUF_TYPE_INT8:    kind = napi_int8_array; return true;
        case kail::GGUF_TYPE_UINT16:  kind = napi_uint16_array; return true;
        case kail::GGUF_TYPE_INT16:   kind = napi_int16_array; return true;
        case kail::GGUF_TYPE_UINT32:  kind = napi_uint32_array; return true;
        case kail::GGUF_TYPE_INT32:   kind = napi_int32_array; return true;
        case kail::GGUF_TYPE_FLOAT32: kind = napi_float32_array; return true;
        case kail::GGUF_TYPE_UINT64:  kind = napi_biguint64_array; return true;
        case kail::GGUF_TYPE_INT64:   kind = napi_bigint64_array; return true;
        case kail::GGUF_TYPE_FLOAT64: kind = napi_float64_array; return true;
        default: return false;
    }
}

// Per-environment state: the class constructor and a small JS helper for string arrays.
struct gguf_env {
    Napi::FunctionReference ctor;
    Napi::FunctionReference split;  // (prev, s, sep) => s.split(sep), appended to prev if given
};

// A tokenizer's string arrays hold ~300k strings; one N-API call per string (plus one to store it)
// costs several times what V8 needs. Instead each run of tokens is joined with an ASCII byte that
// occurs in none of them, decoded once, and split by String.prototype.split inside V8. Boundaries
// stay exact even for invalid UTF-8: an ASCII byte is never part of a multi-byte sequence, so V8's
// decoder ends any broken sequence before the separator exactly as it would at the token's end.
napi_value string_array_to_js(napi_env env, const gguf_env & ge, const kail::gguf_value & v) {
    constexpr size_t RUN_BYTES = 16u << 20;  // far below V8's string length limit
    const uint64_t n = v.array_size();
    napi_value out = nullptr;
    if (n == 0) {
        GGUF_NAPI(napi_create_array(env, &out));
        return out;
    }
    const char * first = v.array_str(0).data();
    const std::string_view last = v.array_str(n - 1);
    const size_t total = static_cast<size_t>(last.data() + last.size() - first);  // tokens are contiguous
    bool present[128] = {};
    bool ascii = true;
    for (size_t i = 0; i < total; i++) {
        unsigned char c = static_cast<unsigned char>(first[i]);
        if (c < 0x80) present[c] = true;
        else ascii = false;
    }
    int sep = -1;
    for (int c : {0x1f, 0x1e, 0x1d, 0x1c, 0x01, 0x02, 0x03, 0x7f, 0x00})
        if (!present[c]) { sep = c; break; }
    for (int c = 0; c < 128 && sep < 0; c++)
        if (!present[c]) sep = c;
    if (sep < 0) {  // every ASCII byte occurs: one string at a time
        GGUF_NAPI(napi_create_array(env, &out));
        for (uint64_t i = 0; i < n; i++)
            GGUF_NAPI(napi_set_element(env, out, static_cast<uint32_t>(i), make_string(env, v.array_str(i))));
        return out;
    }
    const char sep_char = static_cast<char>(sep);
    napi_value split = ge.split.Value();
    napi_value sep_js = make_string(env, std::string_view(&sep_char, 1));
    std::string joined;
    uint64_t i = 0;
    while (i < n) {
        // One run: tokens from i on, joined by sep, up to RUN_BYTES (at least one token).
        joined.clear();
        for (;;) {
            std::string_view tok = v.array_str(i++);
            joined.append(tok.data(), tok.size());
            if (i == n || joined.size() + 1 + v.array_str(i).size() > RUN_BYTES) break;
            joined.push_back(sep_char);
        }
        napi_value s, args[3];
        if (ascii) s = make_string(env, joined);
        else GGUF_NAPI(napi_create_string_utf8(env, joined.data(), joined.size(), &s));
        if (out == nullptr) GGUF_NAPI(napi_get_undefined(env, &args[0]));
        else args[0] = out;
        args[1] = s;
        args[2] = sep_js;
        GGUF_NAPI(napi_call_function(env, args[1], split, 3, args, &out));
    }
    return out;
}

napi_value value_to_js(napi_env env, const gguf_env & ge, const kail::gguf_value & v) {
    napi_value out;
    switch (v.type()) {
        case kail::GGUF_TYPE_UINT8:   return make_number(env, v.scalar<uint8_t>());
        case kail::GGUF_TYPE_INT8:    return make_number(env, v.scalar<int8_t>());
        case kail::GGUF_TYPE_UINT16:  return make_number(env, v.scalar<uint16_t>());
        case kail::GGUF_TYPE_INT16:   return make_number(env, v.scalar<int16_t>());
        case kail::GGUF_TYPE_UINT32:  return make_number(env, v.scalar<uint32_t>());
        case kail::GGUF_TYPE_INT32:   return make_number(env, v.scalar<int32_t>());
        case kail::GGUF_TYPE_FLOAT32: return make_number(env, v.scalar<float>());
        case kail::GGUF_TYPE_FLOAT64: return make_number(env, v.scalar<double>());
        case kail::GGUF_TYPE_UINT64:  return make_u64(env, v.scalar<uint64_t>());
        case kail::GGUF_TYPE_INT64:   return make_i64(env, v.scalar<int64_t>());
        case kail::GGUF_TYPE_BOOL:    GGUF_NAPI(napi_get_boolean(env, v.scalar<bool>(), &out)); return out;
        case kail::GGUF_TYPE_STRING:  return make_string(env, v.str());
        default: break;
    }
    const uint64_t n = v.array_size();
    if (n > UINT32_MAX)
        throw make_error(Napi::Env(env), "KAIL_E_UNSUPPORTED", "GGUF: array of " + std::to_string(n) + " elements is too long for JS");
    napi_typedarray_type kind;
    if (typed_array_kind(v.array_type(), kind)) {
        // Numeric arrays of every length become typed arrays, so a value's JS type follows from its
        // GGUF type alone (scores -> Float32Array, token_type -> Int32Array, ...).
        const size_t bytes = static_cast<size_t>(n) * kail::gguf_type_size(v.array_type());
        void * data = nullptr;
        napi_value ab;
        GGUF_NAPI(napi_create_arraybuffer(env, bytes, &data, &ab));
        if (bytes) std::memcpy(data, v.array_data(), bytes);
        GGUF_NAPI(napi_create_typedarray(env, kind, static_cast<size_t>(n), ab, 0, &out));
        return out;
    }
    if (v.array_type() == kail::GGUF_TYPE_STRING) return string_array_to_js(env, ge, v);
    // Plain arrays grow from empty: V8 gives `new Array(n)` slow dictionary elements for large n.
    GGUF_NAPI(napi_create_array(env, &out));
    const uint8_t * bools = static_cast<const uint8_t *>(v.array_data());
    for (uint64_t i = 0; i < n; i++) {
        napi_value e;
        switch (v.array_type()) {
            case kail::GGUF_TYPE_BOOL: GGUF_NAPI(napi_get_boolean(env, bools[i] != 0, &e)); break;
            default:                   e = value_to_js(env, ge, v.array_item(i)); break;
        }
        GGUF_NAPI(napi_set_element(env, out, static_cast<uint32_t>(i), e));
    }
    return out;
}

// An object whose own properties are the given keys. Defined (not assigned), so a key such as
// "__proto__" from a file becomes a plain property instead of changing the prototype.
template <typename Fn>
Napi::Object keyed_object(Napi::Env env, const std::vector<kail::gguf_kv> & kvs, Fn && value_of) {
    Napi::Object obj = Napi::Object::New(env);
    std::vector<napi_property_descriptor> props(kvs.size());
    for (size_t i = 0; i < kvs.size(); i++) {
        props[i] = napi_property_descriptor{};
        props[i].name = make_string(env, kvs[i].key);
        props[i].value = value_of(kvs[i].value);
        props[i].attributes = static_cast<napi_property_attributes>(napi_writable | napi_enumerable | napi_configurable);
    }
    if (!props.empty()) GGUF_NAPI(napi_define_properties(env, obj, props.size(), props.data()));
    return obj;
}

void freeze(Napi::Env env, Napi::Object o) { GGUF_NAPI(napi_object_freeze(env, o)); }

class AddonGgufFile : public Napi::ObjectWrap<AddonGgufFile> {
  public:
    static Napi::Function define(Napi::Env env, gguf_env * ge) {
        return DefineClass(env, "GgufFile", {
            InstanceAccessor<&AddonGgufFile::get_version>("version"),
            InstanceAccessor<&AddonGgufFile::get_alignment>("alignment"),
            InstanceAccessor<&AddonGgufFile::get_data_offset>("dataOffset"),
            InstanceAccessor<&AddonGgufFile::get_file_size>("fileSize"),
            InstanceAccessor<&AddonGgufFile::get_splits>("splits"),
            InstanceAccessor<&AddonGgufFile::get_path>("path"),
            InstanceAccessor<&AddonGgufFile::get_closed>("closed"),
            InstanceAccessor<&AddonGgufFile::get_metadata>("metadata"),
            InstanceAccessor<&AddonGgufFile::get_metadata_types>("metadataTypes"),
            InstanceAccessor<&AddonGgufFile::get_tensors>("tensors"),
            InstanceMethod<&AddonGgufFile::tensor_data>("tensorData"),
            InstanceMethod<&AddonGgufFile::close>("close"),
        }, ge);
    }

    // new GgufFile(path, options?) — called by openGguf.
    AddonGgufFile(const Napi::CallbackInfo & info) : Napi::ObjectWrap<AddonGgufFile>(info) {
        Napi::Env env = info.Env();
        env_ = static_cast<gguf_env *>(info.Data());
        guarded(env, [&]() -> Napi::Value {
            std::string path = arg_string(info, 0, "path");
            kail::gguf_open_params params;
            if (info.Length() > 1 && !info[1].IsUndefined()) {
                if (!info[1].IsObject()) throw make_error(env, "KAIL_E_INVALID_ARG", "options must be an object");
                Napi::Value md = info[1].As<Napi::Object>().Get("mapData");
                if (!md.IsUndefined()) {
                    if (!md.IsBoolean()) throw make_error(env, "KAIL_E_INVALID_ARG", "options.mapData must be a boolean");
                    params.map_data = md.As<Napi::Boolean>().Value();
                }
            }
            file_ = kail::gguf_file::open(path, params);
            version_ = file_->version();
            alignment_ = file_->alignment();
            data_offset_ = file_->data_offset();
            file_size_ = file_->total_size();
            for (uint32_t i = 0; i < file_->n_splits(); i++) splits_.push_back({file_->split_path(i), file_->split_size(i)});
            path_ = path;
            reported_ = static_cast<int64_t>(file_->heap_bytes());
            Napi::MemoryManagement::AdjustExternalMemory(env, reported_);
            return env.Undefined();
        });
    }

    ~AddonGgufFile() override { release(); }

  private:
    gguf_env *                       env_ = nullptr;
    std::shared_ptr<kail::gguf_file> file_;
    std::string                      path_;
    uint32_t                         version_ = 0;
    uint32_t                         alignment_ = 0;
    uint64_t                         data_offset_ = 0;
    uint64_t                         file_size_ = 0;
    std::vector<std::pair<std::string, uint64_t>> splits_;  // path, bytes
    int64_t                          reported_ = 0;
    Napi::ObjectReference            metadata_, metadata_types_, tensors_;

    void release() {
        file_.reset();
        if (reported_) {
            Napi::MemoryManagement::AdjustExternalMemory(Env(), -reported_);
            reported_ = 0;
        }
    }

    const kail::gguf_file & file(Napi::Env env) const {
        if (!file_) throw make_error(env, "KAIL_E_INVALID_ARG", "GgufFile '" + path_ + "' is closed");
        return *file_;
    }

    Napi::Value get_version(const Napi::CallbackInfo & info) { return Napi::Number::New(info.Env(), version_); }
    Napi::Value get_alignment(const Napi::CallbackInfo & info) { return Napi::Number::New(info.Env(), alignment_); }
    Napi::Value get_data_offset(const Napi::CallbackInfo & info) {
        return Napi::Number::New(info.Env(), static_cast<double>(data_offset_));
    }
    Napi::Value get_splits(const Napi::CallbackInfo & info) {
        Napi::Env env = info.Env();
        Napi::Array arr = Napi::Array::New(env, splits_.size());
        for (size_t i = 0; i < splits_.size(); i++) {
            Napi::Object o = Napi::Object::New(env);
            o.Set("path", Napi::String::New(env, splits_[i].first));
            o.Set("bytes", Napi::Number::New(env, static_cast<double>(splits_[i].second)));
            freeze(env, o);
            arr.Set(static_cast<uint32_t>(i), o);
        }
        freeze(env, arr);
        return arr;
    }

    Napi::Value get_file_size(const Napi::CallbackInfo & info) {
        return Napi::Number::New(info.Env(), static_cast<double>(file_size_));
    }
    Napi::Value get_path(const Napi::CallbackInfo & info) { return Napi::String::New(info.Env(), path_); }
    Napi::Value get_closed(const Napi::CallbackInfo & info) { return Napi::Boolean::New(info.Env(), !file_); }

    // Built on first access and cached: the same frozen object every time.
    Napi::Value get_metadata(const Napi::CallbackInfo & info) {
        Napi::Env env = info.Env();
        return guarded(env, [&]() -> Napi::Value {
            const kail::gguf_file & f = file(env);
            if (metadata_.IsEmpty()) {
                Napi::Object o = keyed_object(env, f.metadata(), [&](const kail::gguf_value & v) { return value_to_js(env, *env_, v); });
                freeze(env, o);
                metadata_ = Napi::Persistent(o);
            }
            return metadata_.Value();
        });
    }

    Napi::Value get_metadata_types(const Napi::CallbackInfo & info) {
        Napi::Env env = info.Env();
        return guarded(env, [&]() -> Napi::Value {
            const kail::gguf_file & f = file(env);
            if (metadata_types_.IsEmpty()) {
                Napi::Object o = keyed_object(env, f.metadata(), [&](const kail::gguf_value & v) -> napi_value {
                    return Napi::String::New(env, v.type_string());
                });
                freeze(env, o);
                metadata_types_ = Napi::Persistent(o);
            }
            return metadata_types_.Value();
        });
    }

    Napi::Value get_tensors(const Napi::CallbackInfo & info) {
        Napi::Env env = info.Env();
        return guarded(env, [&]() -> Napi::Value {
            const kail::gguf_file & f = file(env);
            if (tensors_.IsEmpty()) {
                Napi::Array arr = Napi::Array::New(env);
                uint32_t i = 0;
                for (const kail::gguf_tensor_info & t : f.tensors()) {
                    Napi::Object o = Napi::Object::New(env);
                    o.Set("name", make_string(env, t.name));
                    o.Set("type", Napi::Number::New(env, t.type));
                    o.Set("typeName", Napi::String::New(env, kail::type_name(t.type)));
                    Napi::Array dims = Napi::Array::New(env, t.n_dims);
                    for (uint32_t j = 0; j < t.n_dims; j++) dims.Set(j, Napi::Number::New(env, static_cast<double>(t.ne[j])));
                    freeze(env, dims);
                    o.Set("dims", dims);
                    // Offsets and sizes lie within the file, so they are exact as JS numbers.
                    o.Set("offset", Napi::Number::New(env, static_cast<double>(t.file_offset)));
                    o.Set("split", Napi::Number::New(env, t.split));
                    o.Set("nbytes", Napi::Number::New(env, static_cast<double>(t.nbytes)));
                    freeze(env, o);
                    arr.Set(i++, o);
                }
                freeze(env, arr);
                tensors_ = Napi::Persistent(static_cast<Napi::Object>(arr));
            }
            return tensors_.Value();
        });
    }

    // tensorData(name) -> Uint8Array over a private copy-on-write mapping of the tensor's bytes:
    // no copy, and writes from JS stay in this process (the file and other views never change).
    // Falls back to a copy where the runtime forbids external buffers.
    Napi::Value tensor_data(const Napi::CallbackInfo & info) {
        Napi::Env env = info.Env();
        return guarded(env, [&]() -> Napi::Value {
            std::string name = arg_string(info, 0, "name");
            const kail::gguf_file & f = file(env);
            const kail::gguf_tensor_info * t = f.find_tensor(name);
            if (!t) throw make_error(env, "KAIL_E_INVALID_ARG", "GGUF: no tensor named '" + name + "' in '" + path_ + "'");
            std::unique_ptr<kail::gguf_region> region = f.tensor_map_private(*t);
            napi_value ab;
            napi_status st = napi_create_external_arraybuffer(
                env, region->data(), region->size(),
                [](napi_env, void *, void * hint) { delete static_cast<kail::gguf_region *>(hint); }, region.get(), &ab);
            if (st == napi_ok) {
                region.release();  // owned by the ArrayBuffer's finalizer now
                return Napi::Uint8Array::New(env, t->nbytes, Napi::ArrayBuffer(env, ab), 0);
            }
            // e.g. napi_no_external_buffers_allowed (V8 sandbox): clear any pending error and copy.
            if (env.IsExceptionPending()) env.GetAndClearPendingException();
            Napi::Buffer<uint8_t> copy = Napi::Buffer<uint8_t>::Copy(env, region->data(), region->size());
            return copy;
        });
    }

    Napi::Value close(const Napi::CallbackInfo & info) {
        metadata_.Reset();
        metadata_types_.Reset();
        tensors_.Reset();
        release();
        return info.Env().Undefined();
    }
};

// openGguf(path, options?) -> GgufFile.
Napi::Value open_gguf(const Napi::CallbackInfo & info) {
    Napi::Env env = info.Env();
    return guarded(env, [&]() -> Napi::Value {
        auto * ge = static_cast<gguf_env *>(info.Data());
        std::vector<napi_value> args;
        for (size_t i = 0; i < info.Length() && i < 2; i++) args.push_back(info[i]);
        return ge->ctor.New(args);
    });
}

constexpr char SPLIT_SOURCE[] =
    "(function splitGgufStrings(prev, s, sep) {"
    "  const parts = s.split(sep);"
    "  return prev === undefined ? parts : prev.concat(parts);"
    "})";

} // namespace

void register_gguf(Napi::Env env, Napi::Object exports) {
    auto * ge = new gguf_env();
    env.AddCleanupHook([ge]() { delete ge; });
    ge->ctor = Napi::Persistent(AddonGgufFile::define(env, ge));
    napi_value fn;
    GGUF_NAPI(napi_run_script(env, Napi::String::New(env, SPLIT_SOURCE), &fn));
    ge->split = Napi::Persistent(Napi::Function(env, fn));
    exports.Set("openGguf", Napi::Function::New(env, open_gguf, "openGguf", ge));
}

} // namespace kail_addon
