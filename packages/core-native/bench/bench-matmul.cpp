// Micro-benchmark of the matmul kernels (not a test).
//
//   bench-matmul [--types q4_0,q8_0,...] [--threads 1,2] [--rows R] [--cols C] [--prompt N] [--secs S]
//                [--hot 1] [--clock wall|cpu] [--cold 0]
//
// decode: Y = W x, one token; weights are cycled through a working set larger than the last-level
//         cache, so the figure is the weight bytes streamed from DRAM per second (GB/s).
// prefill: N tokens against one weight matrix (GFLOP/s = 2 * rows * cols * N / time), cache-hot when it
//          fits; "from DRAM" is the same with the weight copies cycled, as in a batched decode step.
// --clock cpu times 1-thread runs by the calling thread's CPU time instead of the wall clock, which
// keeps figures meaningful on a machine shared with other work (multi-thread runs stay on wall).
// --cold 0 skips the "from DRAM" prefill figure (every weight copy per window: minutes for a slow
// kernel such as a scalar one).
// Each figure is the best of several short windows.
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kail/cpu_features.h"
#include "kail/matmul.h"
#include "kail/quants.h"
#include "kail/threadpool.h"

using namespace kail;

namespace {

bool g_cpu_clock = false;

double now_s() {
    if (g_cpu_clock) {
        timespec ts;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return ts.tv_sec + ts.tv_nsec * 1e-9;
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Best rate (work / second) over `windows` windows of `secs` each.
template <typename F>
double best_rate(F && f, double work, double secs, int windows = 5) {
    double best = 0;
    for (int w = 0; w < windows; w++) {
        int it = 0;
        const double t0 = now_s();
        double t1 = t0;
        while ((t1 = now_s()) - t0 < secs || it < 1) {
            f();
            it++;
        }
        best = std::max(best, work * it / (t1 - t0));
    }
    return best;
}

std::vector<std::string> split(const std::string & s) {
    std::vector<std::string> out;
    size_t p = 0;
    while (p <= s.size()) {
        size_t q = s.find(',', p);
        if (q == std::string::npos) q = s.size();
        if (q > p) out.push_back(s.substr(p, q - p));
        p = q + 1;
    }
    return out;
}

uint32_t type_from_name(const std::string & n) {
    for (uint32_t t = 0; t < KAIL_TYPE_COUNT; t++) {
        const type_traits * tr = type_traits_get(t);
        if (!tr) continue;
        std::string a = tr->name, b = n;
        for (auto & c : a) c = static_cast<char>(std::tolower(c));
        for (auto & c : b) c = static_cast<char>(std::tolower(c));
        if (a == b) return t;
    }
    std::fprintf(stderr, "unknown type %s\n", n.c_str());
    std::exit(2);
}

struct aligned_buf {
    uint8_t * p = nullptr;
    explicit aligned_buf(size_t n) {
        p = static_cast<uint8_t *>(std::aligned_alloc(64, (n + 63) & ~size_t(63)));
        if (!p) { std::fprintf(stderr, "out of memory\n"); std::exit(1); }
    }
    ~aligned_buf() { std::free(p); }
};

} // namespace

int main(int argc, char ** argv) {
    std::string types = "q4_0,q8_0,q4_k,q6_k,f16,f32,q4_1,q5_0,q5_1,q2_k,q3_k,q5_k,bf16";
    std::string threads = "1,2";
    int64_t rows = 4096, cols = 4096, prompt = 128;
    double secs = 0.5;
    bool hot = false;  // --hot 1: one weight copy (cache-resident when small), to see kernel speed
    bool clock_cpu = false;
    bool cold = true;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i];
        if (a == "--types") types = argv[i + 1];
        else if (a == "--threads") threads = argv[i + 1];
        else if (a == "--rows") rows = std::atoll(argv[i + 1]);
        else if (a == "--cols") cols = std::atoll(argv[i + 1]);
        else if (a == "--prompt") prompt = std::atoll(argv[i + 1]);
        else if (a == "--secs") secs = std::atof(argv[i + 1]);
        else if (a == "--hot") hot = std::atoi(argv[i + 1]) != 0;
        else if (a == "--clock") clock_cpu = std::string(argv[i + 1]) == "cpu";
        else if (a == "--cold") cold = std::atoi(argv[i + 1]) != 0;
    }
    const cpu_features & f = cpu_features_get();
    std::printf("kernels %s, %d physical cores; W %lld x %lld, prompt %lld tokens; %s clock for 1 thread, best of 5 windows\n",
                quants_kernel_level(), f.physical_cores, (long long)rows, (long long)cols, (long long)prompt, clock_cpu ? "cpu" : "wall");
    std::printf("%-6s %3s %14s %14s %16s %16s\n", "type", "thr", "decode GB/s", "decode ms", "prefill GFLOP/s", "from DRAM");

    std::vector<float> src(static_cast<size_t>(cols) * 64);
    for (size_t i = 0; i < src.size(); i++) src[i] = static_cast<float>((i * 2654435761u) % 2001) / 1000.f - 1.f;
    std::vector<float> x(static_cast<size_t>(cols) * prompt);
    for (size_t i = 0; i < x.size(); i++) x[i] = static_cast<float>((i * 40503u) % 1999) / 999.f - 1.f;
    std::vector<float> y(static_cast<size_t>(rows) * prompt);

    for (const std::string & tn : split(types)) {
        const uint32_t type = type_from_name(tn);
        const size_t rs = row_size(type, cols);
        if (rs == 0) {
            const type_traits * tr = type_traits_get(type);
            std::printf("%-6s skipped: --cols %lld is not a multiple of its block size %lld\n", type_name(type), (long long)cols, tr ? (long long)tr->block_size : 0LL);
            continue;
        }
        const size_t mat_bytes = rs * rows;
        // Enough copies to overflow the last-level cache (>= 256 MiB) for the decode figure.
        const int copies = hot ? 1 : static_cast<int>(std::max<size_t>(1, (size_t(256) << 20) / mat_bytes + 1));
        aligned_buf w(mat_bytes * copies);
        for (int64_t r = 0; r < rows; r++)
            quantize_row(type, src.data() + (r % 64) * cols, w.p + rs * r, cols);
        for (int c = 1; c < copies; c++) std::memcpy(w.p + mat_bytes * c, w.p, mat_bytes);

        for (const std::string & ts : split(threads)) {
            const int nt = std::atoi(ts.c_str());
            threadpool pool(nt);
            g_cpu_clock = clock_cpu && nt == 1;
            matmul(type, w.p, rs, rows, cols, x.data(), cols * 4, 1, y.data(), rows * 4, &pool);  // warm-up
            const double dec_rate = best_rate([&] {
                for (int c = 0; c < copies; c++)
                    matmul(type, w.p + mat_bytes * c, rs, rows, cols, x.data(), cols * 4, 1, y.data(), rows * 4, &pool);
            }, double(copies), secs / 5);
            const double dec_s = 1.0 / dec_rate;
            matmul(type, w.p, rs, rows, cols, x.data(), cols * 4, prompt, y.data(), rows * 4, &pool);
            const double pre_rate = best_rate([&] {
                matmul(type, w.p, rs, rows, cols, x.data(), cols * 4, prompt, y.data(), rows * 4, &pool);
            }, 1.0, secs / 5);
            const double pre_s = 1.0 / pre_rate;
            // The same N tokens with the weights streamed from DRAM (the copies cycled): a batch of
            // decode steps, where reading and computing have to overlap.
            const double cold_rate = !cold ? 0.0 : best_rate([&] {
                for (int c = 0; c < copies; c++)
                    matmul(type, w.p + mat_bytes * c, rs, rows, cols, x.data(), cols * 4, prompt, y.data(), rows * 4, &pool);
            }, double(copies), secs / 5);
            std::printf("%-6s %3d %14.1f %14.3f %16.1f %16.1f\n", type_name(type), nt, mat_bytes / dec_s / 1e9, dec_s * 1e3,
                        2.0 * rows * cols * prompt / pre_s / 1e9, 2.0 * rows * cols * prompt * cold_rate / 1e9);
            std::fflush(stdout);
        }
    }
    return 0;
}
