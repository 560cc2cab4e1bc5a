// Tensor-type kernels for tests and benchmarks: quantize, dequantize, matmul.
#include "addon_common.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "kail/cpu_features.h"
#include "kail/matmul.h"
#include "kail/quants.h"
#include "kail/threadpool.h"
#include "kail/types.h"

namespace kail_addon {

namespace {

uint32_t arg_type(const Napi::CallbackInfo & info, size_t i) {
    const double v = arg_number(info, i, "type");
    if (!(v >= 0 && v < kail::KAIL_TYPE_COUNT) || std::floor(v) != v || !kail::type_traits_get(static_cast<uint32_t>(v)))
        throw make_error(info.Env(), "KAIL_E_UNSUPPORTED",
                         "unknown tensor type " + (std::floor(v) == v && std::fabs(v) < 1e15 ? std::to_string(static_cast<long long>(v)) : std::to_string(v)));
    return static_cast<uint32_t>(v);
}

int64_t arg_count(const Napi::CallbackInfo & info, size_t i, const char * name) {
    const double v = arg_number(info, i, name);
    if (!(v >= 0 && v <= 9007199254740991.0) || std::floor(v) != v)
        throw make_error(info.Env(), "KAIL_E_INVALID_ARG", std::string(name) + " must be a non-negative integer");
    return static_cast<int64_t>(v);
}

template <typename T>
T arg_typed(const Napi::CallbackInfo & info, size_t i, const char * name, napi_typedarray_type want, const char * what) {
    if (info.Length() <= i || !info[i].IsTypedArray() || info[i].As<Napi::TypedArray>().TypedArrayType() != want)
        throw make_error(info.Env(), "KAIL_E_INVALID_ARG", std::string(name) + " must be a " + what);
    return info[i].As<T>();
}

// Optional argument i: a thread count from 1 to 1024 (default 1).
int arg_threads(const Napi::CallbackInfo & info, size_t i, const char * what) {
    if (info.Length() <= i || info[i].IsUndefined()) return 1;
    const int64_t t = arg_count(info, i, "threads");
    if (t < 1 || t > 1024) throw make_error(info.Env(), "KAIL_E_INVALID_ARG", std::string(what) + ": threads must be 1 to 1024, got " + std::to_string(t));
    return static_cast<int>(t);
}

// One pool per thread count, kept for the life of the process (benchmarks call matmul in loops).
kail::threadpool * pool_for(int n_threads) {
    static std::mutex mtx;
    static std::unique_ptr<kail::threadpool> pools[65];
    if (n_threads < 1 || n_threads > 64) return nullptr;
    std::lock_guard<std::mutex> lk(mtx);
    if (!pools[n_threads]) pools[n_threads].reset(new kail::threadpool(n_threads));
    return pools[n_threads].get();
}

// quantize and convert hand out slices of this many values to their threads: as small as
// llama-quantize's chunks, so a 256 x 256 matrix is four slices and two threads share it.
constexpr int64_t SLICE_VALUES = int64_t{1} << 14;

// quantize(type, data: Float32Array, threads = 1): Uint8Array. Every format quantizes block by
// block, so slices of whole blocks on several threads give the same bytes as one thread.
Napi::Value quantize(const Napi::CallbackInfo & info) {
    Napi::Env env = info.Env();
    return guarded(env, [&]() -> Napi::Value {
        const uint32_t type = arg_type(info, 0);
        Napi::Float32Array src = arg_typed<Napi::Float32Array>(info, 1, "data", napi_float32_array, "Float32Array");
        const int64_t n = static_cast<int64_t>(src.ElementLength());
        if (!kail::type_can_quantize(type))
            throw make_error(env, "KAIL_E_UNSUPPORTED", std::string("quantize: type ") + kail::type_name(type) + " is not supported");
        const int64_t bs = kail::type_traits_get(type)->block_size;
        if (n % bs != 0)
            throw make_error(env, "KAIL_E_INVALID_ARG", std::string(kail::type_name(type)) + ": data length " + std::to_string(n) +
                                                            " is not a multiple of the block size " + std::to_string(bs));
        const int threads = arg_threads(info, 2, "quantize");
        Napi::Uint8Array out = Napi::Uint8Array::New(env, kail::row_size(type, n));
        const int64_t slice = std::max<int64_t>(1, SLICE_VALUES / bs) * bs;
        const int64_t n_slices = (n + slice - 1) / slice;
        kail::threadpool * pool = threads > 1 && n_slices > 1 ? pool_for(std::min(threads, 64)) : nullptr;
        const float * x = src.Data();
        uint8_t * y = out.Data();
        const size_t slice_bytes = kail::row_size(type, slice);
        auto run = [&](int64_t b, int64_t e, int) {
            for (int64_t i = b; i < e; i++) {
                const int64_t n0 = i * slice;
                kail::quantize_row(type, x + n0, y + static_cast<size_t>(i) * slice_bytes, std::min(slice, n - n0));
            }
        };
        if (pool) pool->parallel_for(n_slices, run, 1);
        else run(0, n_slices, 0);
        return out;
    });
}

// convert(srcType, data: Uint8Array, n, dstType, threads = 1, imatrix?: Float32Array): Uint8Array.
// n values of srcType become dstType as llama-quantize writes it: each slice of about SLICE_VALUES
// (whole rows when an importance matrix is given) is expanded to F32 (unless it is F32) and
// quantized with quantize_rows_file (unless F32 is asked for) on one thread. So a file is
// requantized without an F32 copy of it in between, and on any thread count the bytes are those of
// dequantize_row then quantize_rows_file over the whole. imatrix: one weight per column of the
// rows (its length is the row length), as llama-quantize's --imatrix gives for one tensor or expert.
Napi::Value convert(const Napi::CallbackInfo & info) {
    Napi::Env env = info.Env();
    return guarded(env, [&]() -> Napi::Value {
        const uint32_t from = arg_type(info, 0);
        Napi::Uint8Array src = arg_typed<Napi::Uint8Array>(info, 1, "data", napi_uint8_array, "Uint8Array");
        const int64_t n = arg_count(info, 2, "n");
        const uint32_t to = arg_type(info, 3);
        if (from != kail::KAIL_TYPE_F32 && !kail::type_can_dequantize(from))
            throw make_error(env, "KAIL_E_UNSUPPORTED", std::string("convert: type ") + kail::type_name(from) + " cannot be read back to floats");
        if (!kail::type_can_quantize_file(to))
            throw make_error(env, "KAIL_E_UNSUPPORTED", std::string("convert: type ") + kail::type_name(to) + " is not written here");
        const int64_t bs_from = kail::type_traits_get(from)->block_size;
        const int64_t bs_to = kail::type_traits_get(to)->block_size;
        if (n % bs_from != 0 || n % bs_to != 0)
            throw make_error(env, "KAIL_E_INVALID_ARG", std::string("convert: ") + std::to_string(n) + " values are not whole blocks of " + kail::type_name(from) +
                                                            " (" + std::to_string(bs_from) + ") and " + kail::type_name(to) + " (" + std::to_string(bs_to) + ")");
        if (src.ByteLength() != kail::row_size(from, n))
            throw make_error(env, "KAIL_E_INVALID_ARG", std::string("convert: ") + std::to_string(n) + " values of " + kail::type_name(from) + " are " +
                                                            std::to_string(kail::row_size(from, n)) + " bytes, got " + std::to_string(src.ByteLength()));
        const int threads = arg_threads(info, 4, "convert");
        const float * qw = nullptr;
        int64_t n_per_row = n;
        if (info.Length() > 5 && !info[5].IsUndefined() && !info[5].IsNull()) {
            Napi::Float32Array w = arg_typed<Napi::Float32Array>(info, 5, "imatrix", napi_float32_array, "Float32Array");
            n_per_row = static_cast<int64_t>(w.ElementLength());
            if (n_per_row == 0 || n % n_per_row != 0 || n_per_row % bs_to != 0)
                throw make_error(env, "KAIL_E_INVALID_ARG", std::string("convert: an importance matrix of ") + std::to_string(n_per_row) + " values does not give whole rows of " +
                                                                kail::type_name(to) + " blocks in " + std::to_string(n) + " values");
            if (n_per_row % bs_from != 0)
                throw make_error(env, "KAIL_E_INVALID_ARG", std::string("convert: rows of ") + std::to_string(n_per_row) + " values are not whole blocks of " + kail::type_name(from));
            qw = w.Data();
        }
        Napi::Uint8Array out = Napi::Uint8Array::New(env, kail::row_size(to, n));
        // Whole blocks of every type (blocks are at most 256 values); with an importance matrix,
        // whole rows (one at least).
        const int64_t slice = qw ? std::max<int64_t>(1, SLICE_VALUES / n_per_row) * n_per_row : SLICE_VALUES;
        const int64_t n_slices = (n + slice - 1) / slice;
        kail::threadpool * pool = threads > 1 && n_slices > 1 ? pool_for(std::min(threads, 64)) : nullptr;
        const int n_bufs = pool ? pool->n_threads() : 1;
        std::vector<std::vector<float>> bufs(static_cast<size_t>(n_bufs));
        const uint8_t * x = src.Data();
        uint8_t * y = out.Data();
        auto run = [&](int64_t b, int64_t e, int tid) {
            std::vector<float> & buf = bufs[static_cast<size_t>(tid)];
            for (int64_t i = b; i < e; i++) {
                const int64_t n0 = i * slice;
                const int64_t m = std::min(slice, n - n0);
                const uint8_t * xs = x + kail::row_size(from, n0);
                uint8_t * ys = y + kail::row_size(to, n0);
                if (to == kail::KAIL_TYPE_F32) {
                    // (The output is a fresh buffer: aligned for floats.)
                    kail::dequantize_row(from, xs, reinterpret_cast<float *>(ys), m);
                    continue;
                }
                buf.resize(static_cast<size_t>(m));
                if (from == kail::KAIL_TYPE_F32) std::memcpy(buf.data(), xs, static_cast<size_t>(m) * sizeof(float));
                else kail::dequantize_row(from, xs, buf.data(), m);
                kail::quantize_rows_file(to, buf.data(), ys, qw ? m / n_per_row : 1, qw ? n_per_row : m, qw);
            }
        };
        if (pool) pool->parallel_for(n_slices, run, 1);
        else run(0, n_slices, 0);
        return out;
    });
}

// dequantize(type, data: Uint8Array, n): Float32Array
Napi::Value dequantize(const Napi::CallbackInfo & info) {
    Napi::Env env = info.Env();
    return guarded(env, [&]() -> Napi::Value {
        const uint32_t type = arg_type(info, 0);
        Napi::Uint8Array src = arg_typed<Napi::Uint8Array>(info, 1, "data", napi_uint8_array, "Uint8Array");
        const int64_t n = arg_count(info, 2, "n");
        if (!kail::type_can_dequantize(type))
            throw make_error(env, "KAIL_E_UNSUPPORTED", std::string("dequantize: type ") + kail::type_name(type) + " is not supported");
        const int64_t bs = kail::type_traits_get(type)->block_size;
        if (n % bs != 0 || src.ByteLength() != kail::row_size(type, n))
            throw make_error(env, "KAIL_E_INVALID_ARG", std::string(kail::type_name(type)) + ": " + std::to_string(n) + " elements need " +
                                                            (n % bs ? std::string("a multiple of ") + std::to_string(bs)
                                                                    : std::to_string(kail::row_size(type, n)) + " bytes, got " +
                                                                          std::to_string(src.ByteLength())));
        Napi::Float32Array out = Napi::Float32Array::New(env, static_cast<size_t>(n));
        kail::dequantize_row(type, src.Data(), out.Data(), n);
        return out;
    });
}

// matmul(type, weights: Uint8Array, rows, cols, x: Float32Array, n, threads?): Float32Array of n * rows
Napi::Value matmul(const Napi::CallbackInfo & info) {
    Napi::Env env = info.Env();
    return guarded(env, [&]() -> Napi::Value {
        const uint32_t type = arg_type(info, 0);
        Napi::Uint8Array w = arg_typed<Napi::Uint8Array>(info, 1, "weights", napi_uint8_array, "Uint8Array");
        const int64_t rows = arg_count(info, 2, "rows");
        const int64_t cols = arg_count(info, 3, "cols");
        Napi::Float32Array x = arg_typed<Napi::Float32Array>(info, 4, "x", napi_float32_array, "Float32Array");
        const int64_t n = arg_count(info, 5, "n");
        int threads = 0;
        if (info.Length() > 6 && !info[6].IsUndefined()) threads = static_cast<int>(arg_count(info, 6, "threads"));
        if (!kail::type_can_dot(type))
            throw make_error(env, "KAIL_E_UNSUPPORTED", std::string("matmul: type ") + kail::type_name(type) + " has no dot product");
        const int64_t bs = kail::type_traits_get(type)->block_size;
        if (cols <= 0 || cols % bs != 0)
            throw make_error(env, "KAIL_E_INVALID_ARG", std::string("matmul: cols must be a positive multiple of ") + std::to_string(bs));
        const size_t rs = kail::row_size(type, cols);
        if (w.ByteLength() != rs * static_cast<size_t>(rows))
            throw make_error(env, "KAIL_E_INVALID_ARG", "matmul: weights must be rows * " + std::to_string(rs) + " bytes, got " +
                                                            std::to_string(w.ByteLength()));
        if (x.ElementLength() != static_cast<size_t>(n * cols))
            throw make_error(env, "KAIL_E_INVALID_ARG", "matmul: x must hold n * cols = " + std::to_string(n * cols) + " floats");
        kail::threadpool * pool = pool_for(threads > 0 ? threads : kail::cpu_features_get().default_threads);
        Napi::Float32Array y = Napi::Float32Array::New(env, static_cast<size_t>(n * rows));
        kail::matmul(type, w.Data(), rs, rows, cols, x.Data(), static_cast<size_t>(cols) * 4, n, y.Data(),
                     static_cast<size_t>(rows) * 4, pool);
        return y;
    });
}

} // namespace

void register_quants(Napi::Env env, Napi::Object exports) {
    exports.Set("quantize", Napi::Function::New(env, quantize, "quantize"));
    exports.Set("dequantize", Napi::Function::New(env, dequantize, "dequantize"));
    exports.Set("convert", Napi::Function::New(env, convert, "convert"));
    exports.Set("matmul", Napi::Function::New(env, matmul, "matmul"));
}

} // namespace kail_addon
