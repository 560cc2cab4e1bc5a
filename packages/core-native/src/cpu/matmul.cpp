// Matmul driver: converts activations once, then splits weight rows (and, for prefill, token
// blocks) across the pool and calls the active kernel table's gemm tiles.
#include "kail/matmul.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include "cpu/quants_impl.h"
#include "kail/quants.h"
#include "kail/status.h"
#include "kail/threadpool.h"

namespace kail {

using namespace kail::cpu;

namespace {

// Grow-only 64-byte aligned scratch, one set per calling thread.
struct scratch {
    uint8_t * p = nullptr;
    size_t cap = 0;
    ~scratch() { std::free(p); }
    uint8_t * get(size_t n) {
        if (n > cap) {
            std::free(p);
            const size_t sz = (n + 63) & ~size_t(63);
            p = static_cast<uint8_t *>(std::aligned_alloc(64, sz));
            if (!p) { cap = 0; throw std::bad_alloc(); }
            cap = sz;
        }
        return p;
    }
};

thread_local scratch tl_quant, tl_prep;
thread_local std::vector<const uint8_t *> tl_aptr, tl_aptr2;
thread_local std::vector<float *> tl_yptr;

const weight_kernels & checked_kernels(uint32_t type, int64_t rows, int64_t cols, int64_t n) {
    if (!type_can_dot(type))
        throw error(KAIL_E_UNSUPPORTED, std::string("matmul: type ") + type_name(type) + " has no dot product");
    const type_traits * tr = type_traits_get(type);
    if (rows < 0 || n < 0 || cols <= 0 || cols % tr->block_size != 0)
        throw error(KAIL_E_INVALID_ARG, std::string("matmul: ") + type_name(type) + " needs cols to be a positive multiple of " +
                                            std::to_string(tr->block_size) + ", got " + std::to_string(cols));
    const weight_kernels & wk = kernels_active().w[type];
    const type_traits * vt = type_traits_get(wk.vd_type);
    if (cols % vt->block_size != 0)
        throw error(KAIL_E_INVALID_ARG, std::string("matmul: cols must be a multiple of ") + std::to_string(vt->block_size));
    return wk;
}

template <typename F>
void maybe_parallel(threadpool * pool, int64_t n_tasks, bool worth_it, F && f) {
    if (pool && worth_it && n_tasks > 1) pool->parallel_for(n_tasks, [&](int64_t b, int64_t e, int) { f(b, e); });
    else f(0, n_tasks);
}

struct gemm_job {
    uint32_t type;
    const weight_kernels * wk;
    const uint8_t * w;
    size_t ws;
    int64_t rows, cols;
    const uint8_t * const * a;
    float * const * y;
    int64_t n;
};

constexpr int kMaxTileT = 64;

// Long rows are cut into chunks of kc values (prefill: so the activation chunks of a token tile
// stay in L1 while every row group of a block passes over them) and the chunk results are summed
// into Y. kc depends on the type, the level and cols only, and decode cuts at the same places, so
// a token's results are the same bits alone or in a batch of any size (see matmul.h).
int64_t chunk_cols(const gemm_job & j) {
    const int T = std::max(1, std::min(kMaxTileT, j.wk->chunk_t > 0 ? j.wk->chunk_t : j.wk->max_t));
    const size_t act_row = j.wk->prepare ? j.wk->prepared_size(j.cols) : row_size(j.wk->vd_type, j.cols);
    const double act_bytes_per_value = double(act_row) / double(j.cols);
    int64_t kc = static_cast<int64_t>((24 * 1024) / (act_bytes_per_value * T));
    kc = std::max<int64_t>(256, (kc / 256) * 256);
    if (kc >= j.cols || j.cols % 256 != 0) kc = j.cols;
    return kc;
}

size_t act_offset(const gemm_job & j, int64_t k0) {
    return j.wk->prepare ? j.wk->prepared_size(k0) : row_size(j.wk->vd_type, k0);
}

void gemm_decode(const gemm_job & j, threadpool * pool) {
    const int R = std::max(1, j.wk->decode_r);
    const gemm_fn fn = j.wk->gemm_decode ? j.wk->gemm_decode : j.wk->gemm;
    const int64_t n_groups = (j.rows + R - 1) / R;
    const int64_t kc = chunk_cols(j);
    auto body = [&](int64_t gb, int64_t ge, int) {
        float tmp[kMaxTileT];
        for (int64_t g = gb; g < ge; g++) {
            const int64_t r = g * R;
            const int nr = static_cast<int>(std::min<int64_t>(R, j.rows - r));
            float * out = j.y[0] + r;
            if (kc == j.cols) {
                fn(j.cols, j.w + r * j.ws, j.ws, nr, j.a, 1, &out);
                continue;
            }
            float * tp = tmp;
            for (int64_t k0 = 0; k0 < j.cols; k0 += kc) {
                const int64_t kn = std::min(kc, j.cols - k0);
                const uint8_t * ap = j.a[0] + act_offset(j, k0);
                fn(kn, j.w + r * j.ws + row_size(j.type, k0), j.ws, nr, &ap, 1, &tp);
                if (k0 == 0)
                    for (int q = 0; q < nr; q++) out[q] = tmp[q];
                else
                    for (int q = 0; q < nr; q++) out[q] += tmp[q];
            }
        }
    };
    // Below ~32 KiB of weights a dispatch costs more than it saves.
    const bool worth_it = row_size(j.type, j.cols) * static_cast<size_t>(j.rows) >= 32 * 1024;
    if (pool && pool->n_threads() > 1 && n_groups > 1 && worth_it) {
        // Several chunks per thread so a thread the OS slows down does not hold the others back;
        // each chunk still streams tens of kilobytes.
        const int64_t chunk = std::max<int64_t>(1, n_groups / (int64_t(pool->n_threads()) * 8));
        pool->parallel_for(n_groups, body, chunk);
    } else {
        body(0, n_groups, 0);
    }
}

void gemm_prefill(const gemm_job & j, threadpool * pool) {
    const int R = std::max(1, std::min(8, j.wk->max_r));
    const int T = std::max(1, std::min(kMaxTileT, j.wk->max_t));
    const size_t row_bytes = row_size(j.type, j.cols);
    // A block of weight rows small enough to stay in L2 while every token tile passes over it.
    int64_t rb = static_cast<int64_t>((256 * 1024) / std::max<size_t>(row_bytes, 1));
    rb = std::max<int64_t>(R, std::min<int64_t>(rb, 256));
    rb = (rb / R) * R;
    const int64_t n_rb = (j.rows + rb - 1) / rb;
    const int threads = pool ? pool->n_threads() : 1;
    // Split tokens too when there are too few row blocks to feed every thread.
    int64_t n_tb = 1;
    if (n_rb < int64_t(threads) * 4) n_tb = std::min<int64_t>((int64_t(threads) * 4 + n_rb - 1) / n_rb, (j.n + T - 1) / T);
    n_tb = std::max<int64_t>(1, n_tb);
    int64_t tb = (j.n + n_tb - 1) / n_tb;
    tb = ((tb + T - 1) / T) * T;
    n_tb = (j.n + tb - 1) / tb;

    const int64_t kc = chunk_cols(j);

    auto body = [&](int64_t b, int64_t e, int) {
        float * outp[kMaxTileT];
        const uint8_t * ap[kMaxTileT];
        float tmp[kMaxTileT * 8];
        for (int64_t task = b; task < e; task++) {
            const int64_t r0 = (task / n_tb) * rb, r1 = std::min(j.rows, r0 + rb);
            const int64_t t0 = (task % n_tb) * tb, t1 = std::min(j.n, t0 + tb);
            for (int64_t k0 = 0; k0 < j.cols; k0 += kc) {
                const int64_t kn = std::min(kc, j.cols - k0);
                const size_t woff = row_size(j.type, k0), aoff = act_offset(j, k0);
                const bool first = k0 == 0, single = kn == j.cols;
                for (int64_t t = t0; t < t1; t += T) {
                    const int nt = static_cast<int>(std::min<int64_t>(T, t1 - t));
                    for (int i = 0; i < nt; i++) ap[i] = j.a[t + i] + aoff;
                    for (int64_t r = r0; r < r1; r += R) {
                        const int nr = static_cast<int>(std::min<int64_t>(R, r1 - r));
                        if (single) {
                            for (int i = 0; i < nt; i++) outp[i] = j.y[t + i] + r;
                            j.wk->gemm(kn, j.w + r * j.ws + woff, j.ws, nr, ap, nt, outp);
                            continue;
                        }
                        for (int i = 0; i < nt; i++) outp[i] = tmp + i * R;
                        j.wk->gemm(kn, j.w + r * j.ws + woff, j.ws, nr, ap, nt, outp);
                        for (int i = 0; i < nt; i++) {
                            float * yrow = j.y[t + i] + r;
                            if (first)
                                for (int q = 0; q < nr; q++) yrow[q] = tmp[i * R + q];
                            else
                                for (int q = 0; q < nr; q++) yrow[q] += tmp[i * R + q];
                        }
                    }
                }
            }
        }
    };
    const int64_t n_tasks = n_rb * n_tb;
    if (pool && threads > 1 && n_tasks > 1) pool->parallel_for(n_tasks, body, 1);
    else body(0, n_tasks, 0);
}

void gemm_run(const gemm_job & j, threadpool * pool) {
    if (j.rows == 0 || j.n == 0) return;
    if (j.n == 1) gemm_decode(j, pool);
    else gemm_prefill(j, pool);
}

// Prepares activation rows (standard vec_dot_type layout) for the kernel; returns the pointers the
// kernel should read.
const uint8_t * const * prepare_rows(const weight_kernels & wk, int64_t cols, const uint8_t * const * rows, int64_t n,
                                     threadpool * pool) {
    if (!wk.prepare) return rows;
    const size_t psz = (wk.prepared_size(cols) + 63) & ~size_t(63);
    uint8_t * buf = tl_prep.get(psz * static_cast<size_t>(n));
    tl_aptr2.resize(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; t++) tl_aptr2[t] = buf + psz * t;
    maybe_parallel(pool, n, n * cols >= 65536, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; t++) wk.prepare(cols, rows[t], buf + psz * t);
    });
    return tl_aptr2.data();
}

} // namespace

size_t matmul_activation_row_size(uint32_t type, int64_t cols) { return row_size(vec_dot_type(type), cols); }

void matmul_quantize_activations(uint32_t type, int64_t cols, const float * x, size_t x_stride, int64_t n, void * dst,
                                 size_t dst_stride, threadpool * pool) {
    const weight_kernels & wk = checked_kernels(type, 0, cols, n);
    const size_t rs = row_size(wk.vd_type, cols);
    if (n > 1 && (dst_stride < rs || x_stride < size_t(cols) * 4))
        throw error(KAIL_E_INVALID_ARG, "matmul_quantize_activations: stride smaller than a row");
    const from_float_fn ff = kernels_active().from_float[wk.vd_type];
    maybe_parallel(pool, n, n * cols >= 65536, [&](int64_t b, int64_t e) {
        for (int64_t t = b; t < e; t++)
            ff(reinterpret_cast<const float *>(reinterpret_cast<const uint8_t *>(x) + x_stride * t),
               static_cast<uint8_t *>(dst) + dst_stride * t, cols);
    });
}

namespace {

void run_rows(uint32_t type, const weight_kernels & wk, const void * w, size_t w_stride, int64_t rows, int64_t cols,
              const uint8_t * const * a_std, float * const * y_rows, int64_t n, threadpool * pool) {
    const uint8_t * const * a = prepare_rows(wk, cols, a_std, n, pool);
    gemm_job j{type, &wk, static_cast<const uint8_t *>(w), w_stride, rows, cols, a, y_rows, n};
    gemm_run(j, pool);
}

} // namespace

void matmul_quantized_rows(uint32_t type, const void * w, size_t w_stride, int64_t rows, int64_t cols,
                           const void * const * xq_rows, float * const * y_rows, int64_t n, threadpool * pool) {
    const weight_kernels & wk = checked_kernels(type, rows, cols, n);
    if (rows > 1 && w_stride < row_size(type, cols)) throw error(KAIL_E_INVALID_ARG, "matmul: w_stride smaller than a row");
    if (rows == 0 || n == 0) return;
    run_rows(type, wk, w, w_stride, rows, cols, reinterpret_cast<const uint8_t * const *>(xq_rows), y_rows, n, pool);
}

void matmul_quantized(uint32_t type, const void * w, size_t w_stride, int64_t rows, int64_t cols, const void * xq,
                      size_t xq_stride, int64_t n, float * y, size_t y_stride, threadpool * pool) {
    const weight_kernels & wk = checked_kernels(type, rows, cols, n);
    if (rows > 1 && w_stride < row_size(type, cols)) throw error(KAIL_E_INVALID_ARG, "matmul: w_stride smaller than a row");
    if (n > 1 && (y_stride < size_t(rows) * 4 || xq_stride < row_size(wk.vd_type, cols)))
        throw error(KAIL_E_INVALID_ARG, "matmul: xq_stride or y_stride smaller than a row");
    if (rows == 0 || n == 0) return;
    tl_aptr.resize(static_cast<size_t>(n));
    tl_yptr.resize(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; t++) {
        tl_aptr[t] = static_cast<const uint8_t *>(xq) + xq_stride * t;
        tl_yptr[t] = reinterpret_cast<float *>(reinterpret_cast<uint8_t *>(y) + y_stride * t);
    }
    run_rows(type, wk, w, w_stride, rows, cols, tl_aptr.data(), tl_yptr.data(), n, pool);
}

void matmul(uint32_t type, const void * w, size_t w_stride, int64_t rows, int64_t cols, const float * x, size_t x_stride,
            int64_t n, float * y, size_t y_stride, threadpool * pool) {
    const weight_kernels & wk = checked_kernels(type, rows, cols, n);
    if (rows > 1 && w_stride < row_size(type, cols)) throw error(KAIL_E_INVALID_ARG, "matmul: w_stride smaller than a row");
    if (n > 1 && (x_stride < size_t(cols) * 4 || y_stride < size_t(rows) * 4))
        throw error(KAIL_E_INVALID_ARG, "matmul: x_stride or y_stride smaller than a row");
    if (rows == 0 || n == 0) return;

    tl_aptr.resize(static_cast<size_t>(n));
    tl_yptr.resize(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; t++) tl_yptr[t] = reinterpret_cast<float *>(reinterpret_cast<uint8_t *>(y) + y_stride * t);

    if (wk.vd_type == KAIL_TYPE_F32 && !wk.prepare) {
        // F32 weights read the caller's floats directly.
        for (int64_t t = 0; t < n; t++) tl_aptr[t] = reinterpret_cast<const uint8_t *>(x) + x_stride * t;
    } else if (wk.prepare && wk.quantize_prepared) {
        // Straight to the kernel's layout in one pass.
        const size_t psz = (wk.prepared_size(cols) + 63) & ~size_t(63);
        uint8_t * buf = tl_prep.get(psz * static_cast<size_t>(n));
        maybe_parallel(pool, n, n * cols >= 65536, [&](int64_t b, int64_t e) {
            for (int64_t t = b; t < e; t++)
                wk.quantize_prepared(reinterpret_cast<const float *>(reinterpret_cast<const uint8_t *>(x) + x_stride * t), buf + psz * t, cols);
        });
        for (int64_t t = 0; t < n; t++) tl_aptr[t] = buf + psz * t;
        gemm_job j{type, &wk, static_cast<const uint8_t *>(w), w_stride, rows, cols, tl_aptr.data(), tl_yptr.data(), n};
        gemm_run(j, pool);
        return;
    } else {
        const size_t rs = (row_size(wk.vd_type, cols) + 63) & ~size_t(63);
        uint8_t * buf = tl_quant.get(rs * static_cast<size_t>(n));
        for (int64_t t = 0; t < n; t++) tl_aptr[t] = buf + rs * t;
        const from_float_fn ff = kernels_active().from_float[wk.vd_type];
        maybe_parallel(pool, n, n * cols >= 65536, [&](int64_t b, int64_t e) {
            for (int64_t t = b; t < e; t++)
                ff(reinterpret_cast<const float *>(reinterpret_cast<const uint8_t *>(x) + x_stride * t), buf + rs * t, cols);
        });
    }
    run_rows(type, wk, w, w_stride, rows, cols, tl_aptr.data(), tl_yptr.data(), n, pool);
}

} // namespace kail
