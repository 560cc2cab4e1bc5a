// matmul against a naive double-precision product for every weight type, token counts 1/3/17/64
// and several thread counts, plus the thread pool itself. The parent process tests the best kernel
// level and re-runs itself with KAIL_FORCE_ISA=avx2 and =scalar so the driver is covered with the
// tile shapes of every level.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <tuple>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/fp16.h"
#include "cpu/quants_impl.h"
#include "kail/cpu_features.h"
#include "kail/matmul.h"
#include "kail/quants.h"
#include "kail/status.h"
#include "kail/threadpool.h"

using namespace kail;

namespace {

int g_fails = 0;
long g_checks = 0;

#define CHECK(cond, ...)                                              \
    do {                                                              \
        g_checks++;                                                   \
        if (!(cond)) {                                                \
            std::fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
            std::fprintf(stderr, __VA_ARGS__);                        \
            std::fprintf(stderr, "\n");                               \
            g_fails++;                                                \
        }                                                             \
    } while (0)

struct rng {
    uint64_t s;
    uint64_t next() {
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    float uniform() { return static_cast<float>((next() >> 40) * (1.0 / 16777216.0)); }
};

void fill(float * v, size_t n, uint64_t seed) {
    rng r{seed};
    for (size_t i = 0; i < n; i++) {
        float x = (r.uniform() * 2.f - 1.f) * ((i / 64) % 4 == 3 ? 6.f : 1.f);
        if ((r.next() & 127) == 0) x *= 10.f;
        v[i] = x;
    }
}

// ---------------------------------------------------------------- thread pool

void test_threadpool() {
    for (int nt : {1, 2, 3, 5}) {
        threadpool pool(nt);
        CHECK(pool.n_threads() == nt, "n_threads");
        for (int64_t n : {int64_t(1), int64_t(2), int64_t(7), int64_t(100), int64_t(10007)}) {
            for (int64_t chunk : {int64_t(0), int64_t(1), int64_t(3), int64_t(1000)}) {
                std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
                for (auto & h : hits) h.store(0);
                std::atomic<int> bad_tid{0};
                pool.parallel_for(n, [&](int64_t b, int64_t e, int tid) {
                    if (tid < 0 || tid >= nt) bad_tid++;
                    for (int64_t i = b; i < e; i++) hits[i]++;
                }, chunk);
                bool ok = bad_tid.load() == 0;
                for (auto & h : hits) ok = ok && h.load() == 1;
                CHECK(ok, "parallel_for threads=%d n=%lld chunk=%lld covers each index once", nt, (long long)n, (long long)chunk);
            }
        }
        // Exceptions reach the caller; the pool stays usable.
        bool caught = false;
        try {
            pool.parallel_for(64, [&](int64_t b, int64_t, int) { if (b == 33 || b == 0) throw std::runtime_error("boom"); }, 1);
        } catch (const std::runtime_error &) { caught = true; }
        CHECK(caught, "exception from a task is rethrown");
        // Nested calls run inline.
        std::atomic<int64_t> total{0};
        pool.parallel_for(8, [&](int64_t b, int64_t e, int) {
            for (int64_t i = b; i < e; i++) pool.parallel_for(10, [&](int64_t b2, int64_t e2, int) { total += e2 - b2; });
        }, 1);
        CHECK(total.load() == 80, "nested parallel_for %lld", (long long)total.load());
        // Dispatch latency (informational): many tiny jobs back to back.
        const int reps = 20000;
        std::atomic<int64_t> sum{0};
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < reps; i++) pool.parallel_for(nt * 2, [&](int64_t b, int64_t e, int) { sum += e - b; }, 1);
        const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / reps;
        CHECK(sum.load() == int64_t(reps) * nt * 2, "latency loop sum");
        std::printf("threadpool(%d): %.2f us per empty parallel_for\n", nt, us);
    }
}

// ---------------------------------------------------------------- matmul

// Exact value of the activation row as the kernels see it, in double.
void activation_as_double(uint32_t vd, const void * a, int64_t n, std::vector<double> & out) {
    std::vector<float> f(n);
    dequantize_row(vd, a, f.data(), n);
    out.assign(f.begin(), f.end());
}

void check_matmul(uint32_t type, int64_t rows, int64_t cols, int64_t n, threadpool * pool, const char * what) {
    const size_t wrs = row_size(type, cols);
    const size_t w_stride = wrs + 16;  // padded rows
    std::vector<uint8_t> w(w_stride * rows + 64, 0xEE);
    std::vector<float> tmp(cols);
    // Row r of a (type, cols) matrix is always the same: quantize it once (the codebook types'
    // grid searches are slow in the sanitizer build).
    static std::map<std::tuple<uint32_t, int64_t, int64_t>, std::vector<uint8_t>> quantized;
    for (int64_t r = 0; r < rows; r++) {
        std::vector<uint8_t> & q = quantized[{type, cols, r}];
        if (q.empty()) {
            q.resize(wrs);
            fill(tmp.data(), cols, 100 + r);
            quantize_row(type, tmp.data(), q.data(), cols);
        }
        std::memcpy(w.data() + w_stride * r, q.data(), wrs);
    }
    const size_t x_stride = (cols + 3) * 4, y_stride = (rows + 5) * 4;
    std::vector<float> x((x_stride / 4) * n);
    for (int64_t t = 0; t < n; t++) fill(x.data() + t * (x_stride / 4), cols, 9000 + t);
    std::vector<float> y((y_stride / 4) * n, -777.f);
    matmul(type, w.data(), w_stride, rows, cols, x.data(), x_stride, n, y.data(), y_stride, pool);

    const uint32_t vd = vec_dot_type(type);
    const size_t ars = matmul_activation_row_size(type, cols);
    std::vector<uint8_t> xq(ars * n);
    matmul_quantize_activations(type, cols, x.data(), x_stride, n, xq.data(), ars, pool);

    // Naive reference from dequantized weights and the quantized activations.
    std::vector<double> wd(cols), ad;
    std::vector<float> wf(cols);
    std::vector<std::vector<double>> acts(n);
    for (int64_t t = 0; t < n; t++) activation_as_double(vd, xq.data() + ars * t, cols, acts[t]);
    int bad = 0;
    for (int64_t r = 0; r < rows; r++) {
        dequantize_row(type, w.data() + w_stride * r, wf.data(), cols);
        for (int64_t t = 0; t < n; t++) {
            double s = 0, s_abs = 0;
            for (int64_t k = 0; k < cols; k++) {
                s += wf[k] * acts[t][k];
                s_abs += std::fabs(wf[k] * acts[t][k]);
            }
            if (vd == KAIL_TYPE_Q8_1) {  // ggml uses the fp16 s field for the min term
                const auto * ab = reinterpret_cast<const kail::cpu::block_q8_1 *>(xq.data() + ars * t);
                for (int64_t b = 0; b < cols / 32; b++) {
                    uint16_t mb;
                    std::memcpy(&mb, w.data() + w_stride * r + row_size(type, 32) * b + 2, 2);
                    int sq = 0;
                    for (int j = 0; j < 32; j++) sq += ab[b].qs[j];
                    s += double(fp16_to_fp32(mb)) * (double(fp16_to_fp32(ab[b].s)) - double(fp16_to_fp32(ab[b].d)) * sq);
                }
            }
            const float got = y[t * (y_stride / 4) + r];
            if (!(std::fabs(got - s) <= 2e-6 * s_abs + 1e-30) && bad++ < 3)
                CHECK(false, "%s %s rows=%lld cols=%lld n=%lld: y[%lld][%lld] = %.9g, reference %.9g", what, type_name(type),
                      (long long)rows, (long long)cols, (long long)n, (long long)t, (long long)r, got, s);
        }
    }
    if (bad > 3) CHECK(false, "%s %s: %d mismatches in total", what, type_name(type), bad);
    // Row padding of Y is untouched.
    for (int64_t t = 0; t < n; t++)
        for (int64_t r = rows; r < int64_t(y_stride / 4); r++)
            CHECK(y[t * (y_stride / 4) + r] == -777.f, "%s %s wrote into Y padding", what, type_name(type));

    // The pre-quantized paths give the same bits.
    std::vector<float> y2((y_stride / 4) * n, -777.f);
    matmul_quantized(type, w.data(), w_stride, rows, cols, xq.data(), ars, n, y2.data(), y_stride, pool);
    CHECK(std::memcmp(y.data(), y2.data(), y.size() * 4) == 0, "%s %s matmul_quantized differs from matmul", what, type_name(type));
    // Gather/scatter with reversed token order.
    std::vector<const void *> xr(n);
    std::vector<float *> yr(n);
    std::vector<float> y3(rows * n);
    for (int64_t t = 0; t < n; t++) {
        xr[t] = xq.data() + ars * (n - 1 - t);
        yr[t] = y3.data() + rows * (n - 1 - t);
    }
    matmul_quantized_rows(type, w.data(), w_stride, rows, cols, xr.data(), yr.data(), n, pool);
    bool same = true;
    for (int64_t t = 0; t < n; t++) same = same && std::memcmp(y3.data() + rows * t, y.data() + (y_stride / 4) * t, rows * 4) == 0;
    CHECK(same, "%s %s matmul_quantized_rows differs", what, type_name(type));

    // Batch invariance: a token's results are the same bits whether it is computed alone (the
    // decode path) or inside a batch of any size. Speculative verification relies on it: the
    // target scores k drafted tokens in one pass and must choose what one-at-a-time decoding would.
    if (n > 1) {
        std::vector<float> y1(rows);
        for (int64_t t : {int64_t(0), n / 2, n - 1}) {
            matmul(type, w.data(), w_stride, rows, cols, x.data() + t * (x_stride / 4), x_stride, 1, y1.data(), rows * 4, pool);
            int diff = -1;
            for (int64_t r = 0; r < rows && diff < 0; r++)
                if (std::memcmp(&y1[r], &y[t * (y_stride / 4) + r], 4) != 0) diff = static_cast<int>(r);
            CHECK(diff < 0, "%s %s rows=%lld cols=%lld n=%lld: token %lld alone differs from its batch at row %d (%.9g vs %.9g)", what,
                  type_name(type), (long long)rows, (long long)cols, (long long)n, (long long)t, diff,
                  diff < 0 ? 0.0 : double(y1[diff]), diff < 0 ? 0.0 : double(y[t * (y_stride / 4) + diff]));
        }
    }
}

const uint32_t kTypes[] = {KAIL_TYPE_F32, KAIL_TYPE_F16, KAIL_TYPE_BF16, KAIL_TYPE_Q4_0, KAIL_TYPE_Q4_1,
                           KAIL_TYPE_Q5_0, KAIL_TYPE_Q5_1, KAIL_TYPE_Q8_0, KAIL_TYPE_Q2_K, KAIL_TYPE_Q3_K,
                           KAIL_TYPE_Q4_K, KAIL_TYPE_Q5_K, KAIL_TYPE_Q6_K, KAIL_TYPE_IQ4_NL, KAIL_TYPE_IQ4_XS,
                           KAIL_TYPE_IQ2_XXS, KAIL_TYPE_IQ2_XS, KAIL_TYPE_IQ2_S, KAIL_TYPE_IQ3_XXS, KAIL_TYPE_IQ3_S,
                           KAIL_TYPE_IQ1_S, KAIL_TYPE_IQ1_M, KAIL_TYPE_MXFP4, KAIL_TYPE_NVFP4, KAIL_TYPE_Q1_0,
                           KAIL_TYPE_Q2_0, KAIL_TYPE_TQ1_0, KAIL_TYPE_TQ2_0};

void test_matmul() {
    threadpool p2(2), p3(3);
    threadpool * pools[] = {nullptr, &p2, &p3};
    const char * names[] = {"1 thread", "2 threads", "3 threads"};
    for (uint32_t type : kTypes) {
        const int64_t bs = type_traits_get(type)->block_size;
        const bool kq = bs == 256;
        // (NVFP4 and Q2_0 have 64-value blocks, Q1_0 128: 5 blocks of those.)
        const int64_t cols = kq ? 512 : bs > 32 ? 5 * bs : 320;
        for (int64_t n : {1, 3, 17, 64}) {
            for (int p = 0; p < 3; p++) {
                // cols: several whole 128-element groups, and (32-value blocks) a ragged tail.
                check_matmul(type, 67, cols, n, pools[p], names[p]);
                if (bs <= 32 && n != 64) check_matmul(type, 9, bs == 1 ? 77 : 96, n, pools[p], names[p]);
            }
        }
        check_matmul(type, 1, kq ? 256 : std::max<int64_t>(bs, 32), 1, nullptr, "single row");
        // Rows long enough for prefill to cut them into chunks (summed across chunks).
        check_matmul(type, 9, 6400, 17, &p2, "long rows");
        // Matrix x vector big enough to be split across threads.
        check_matmul(type, 40, 6400, 1, &p3, "threaded decode");
    }
    // Validation.
    std::vector<uint8_t> w(4096);
    std::vector<float> x(1024), y(1024);
    bool threw = false;
    try { matmul(KAIL_TYPE_Q4_0, w.data(), 18, 4, 48, x.data(), 0, 1, y.data(), 0, nullptr); }
    catch (const kail::error & e) { threw = e.code() == KAIL_E_INVALID_ARG; }
    CHECK(threw, "cols not a multiple of 32 -> KAIL_E_INVALID_ARG");
    threw = false;
    try { matmul(KAIL_TYPE_Q8_K, w.data(), 292, 4, 256, x.data(), 0, 1, y.data(), 0, nullptr); }
    catch (const kail::error & e) { threw = e.code() == KAIL_E_UNSUPPORTED; }
    CHECK(threw, "Q8_K (an activation type, no dot as a weight) -> KAIL_E_UNSUPPORTED");
    threw = false;
    try { matmul(KAIL_TYPE_Q4_0, w.data(), 10, 4, 64, x.data(), 256, 1, y.data(), 16, nullptr); }
    catch (const kail::error & e) { threw = e.code() == KAIL_E_INVALID_ARG; }
    CHECK(threw, "w_stride smaller than a row -> KAIL_E_INVALID_ARG");
}

int run_child(const char * level) {
    const pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
        setenv("KAIL_FORCE_ISA", level, 1);
        execl("/proc/self/exe", "test-matmul", "--child", static_cast<char *>(nullptr));
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

} // namespace

int main(int argc, char ** argv) {
    const bool child = argc > 1 && std::strcmp(argv[1], "--child") == 0;
    std::printf("[%s] matmul kernels: %s\n", child ? "child" : "parent", quants_kernel_level());
    if (!child) test_threadpool();
    test_matmul();
    if (!child) {
        for (const char * lvl : {"avx2", "scalar"}) {
            if (std::strcmp(lvl, "avx2") == 0 && !kail::cpu::kernels_avx2()) continue;
            const int rc = run_child(lvl);
            CHECK(rc == 0, "KAIL_FORCE_ISA=%s run failed (%d)", lvl, rc);
        }
    }
    if (g_fails) std::fprintf(stderr, "%d check(s) failed\n", g_fails);
    else std::printf("all %ld matmul checks passed\n", g_checks);
    return g_fails ? 1 : 0;
}
