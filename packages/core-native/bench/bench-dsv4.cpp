// Micro-benchmark of DeepSeek-V4's attention (model/dsv4.h attend) at the model's shapes (not a test).
//
//   bench-dsv4 [--threads N] [--secs S]
//
// One decode step of one attention layer: n_head query heads of head_dim 512 over the rows a token
// sees at context C: the sliding window (128) and, per layer kind, the compressed rows (HCA, ratio
// 128: C / 128 of them; CSA, ratio 4: the indexer's top_k = 512 of C / 4). Three figures per shape:
//   before   the previous kernel (a scalar double-precision loop, kept below as the baseline), on
//            one thread: the op ran a decode step's single token on one thread;
//   1 thread the GQA kernels (matmul scores, attention_softmax, attention_weighted_rows);
//   N threads the same with the heads split over the pool, as op_dsv4_attention splits a decode step.
// F32 rows (and F16 for the new kernels: the default cache type). Each figure is the best of several
// windows; tokens/s is one layer's op per second.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kail/quants.h"
#include "kail/threadpool.h"
#include "kail/types.h"
#include "model/dsv4.h"

using namespace kail;

namespace {

double now_s() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// The kernel this benchmark replaced (dsv4.cpp before): per head, double-precision dot products
// over the rows as F32 (the op dequantized each row first), softmax, double-precision weighted sum.
void attend_before(const float * q, int64_t n_head, int64_t d, const float * const * rows, int64_t n, float scale, const float * sinks, float * out) {
    std::vector<float> p(static_cast<size_t>(n));
    for (int64_t h = 0; h < n_head; h++) {
        const float * qh = q + h * d;
        float * oh = out + h * d;
        float mx = sinks ? sinks[h] : -std::numeric_limits<float>::infinity();
        for (int64_t i = 0; i < n; i++) {
            double s = 0;
            for (int64_t j = 0; j < d; j++) s += static_cast<double>(qh[j]) * rows[i][j];
            p[i] = static_cast<float>(s) * scale;
            mx = std::max(mx, p[i]);
        }
        double sum = 0;
        for (int64_t i = 0; i < n; i++) {
            p[i] = std::exp(p[i] - mx);
            sum += p[i];
        }
        if (sinks) sum += std::exp(sinks[h] - mx);
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t i = 0; i < n; i++) p[i] *= inv;
        for (int64_t j = 0; j < d; j++) {
            double acc = 0;
            for (int64_t i = 0; i < n; i++) acc += static_cast<double>(rows[i][j]) * p[i];
            oh[j] = static_cast<float>(acc);
        }
    }
}

template <typename F>
double best_time(double secs, F && f) {
    f();  // warm
    double best = 1e30;
    const double until = now_s() + secs;
    int runs = 0;
    do {
        const double t0 = now_s();
        f();
        best = std::min(best, now_s() - t0);
        runs++;
    } while (now_s() < until || runs < 3);
    return best;
}

} // namespace

int main(int argc, char ** argv) {
    int threads = 0;
    double secs = 0.3;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string a = argv[i];
        if (a == "--threads") threads = std::atoi(argv[i + 1]);
        else if (a == "--secs") secs = std::atof(argv[i + 1]);
    }
    threadpool pool(threads);
    const int nt = pool.n_threads();
    const int64_t d = 512, window = 128, top_k = 512;
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::printf("DeepSeek-V4 attention, one decode step of one layer, head_dim %lld, window %lld (%d threads in the pool)\n", static_cast<long long>(d),
                static_cast<long long>(window), nt);
    std::printf("%-5s %-4s %6s %5s | %12s | %12s %12s | %12s %12s | %8s\n", "heads", "kind", "ctx", "rows", "before tok/s", "F32 1T tok/s", "F32 NT tok/s",
                "F16 1T tok/s", "F16 NT tok/s", "speedup");
    for (int64_t nh : {64, 128}) {
        for (int64_t ctx : {1024, 4096, 16384}) {
            for (const char * kind : {"SWA", "HCA", "CSA"}) {
                const int64_t nc = std::string(kind) == "HCA" ? ctx / 128 : std::string(kind) == "CSA" ? std::min(top_k, ctx / 4) : 0;
                if (std::string(kind) == "SWA" && ctx != 1024) continue;  // no compressed rows: the same at every context
                const int64_t n = window + nc;
                std::vector<float> q(nh * d), kv(n * d), sk(nh), out(nh * d), ref(nh * d);
                for (float & v : q) v = nd(rng);
                for (float & v : kv) v = nd(rng) * 0.2f;
                for (float & v : sk) v = nd(rng);
                std::vector<const float *> rows;
                for (int64_t i = 0; i < n; i++) rows.push_back(kv.data() + i * d);
                std::vector<uint16_t> kv16(n * d);
                fp32_to_fp16_row(kv.data(), kv16.data(), n * d);
                const float scale = 1.0f / std::sqrt(static_cast<float>(d));
                const double t_before = best_time(secs, [&] { attend_before(q.data(), nh, d, rows.data(), n, scale, sk.data(), ref.data()); });
                double t_new[2][2];
                double err = 0, den = 0;
                for (int ti = 0; ti < 2; ti++) {
                    const uint32_t type = ti == 0 ? KAIL_TYPE_F32 : KAIL_TYPE_F16;
                    const void * base = ti == 0 ? static_cast<const void *>(kv.data()) : static_cast<const void *>(kv16.data());
                    const size_t rb = row_size(type, d);
                    std::vector<float> sc;
                    std::vector<uint16_t> half;
                    t_new[ti][0] = best_time(secs, [&] { dsv4::attend(type, q.data(), nh, d, base, rb, n, scale, sk.data(), out.data(), sc, half); });
                    if (ti == 0)
                        for (int64_t i = 0; i < nh * d; i++) {
                            err += (out[i] - ref[i]) * double(out[i] - ref[i]);
                            den += double(ref[i]) * ref[i];
                        }
                    // Heads split as the op splits a one-token step (rows gathered once): about 4
                    // chunks per thread, 4 heads or more each.
                    const int64_t n_chunk = std::min<int64_t>({nh, std::max<int64_t>((nh + 3) / 4, nt), 4 * nt}), hb = (nh + n_chunk - 1) / n_chunk, n_chunks = (nh + hb - 1) / hb;
                    std::vector<std::vector<float>> scs(nt);
                    std::vector<std::vector<uint16_t>> halves(nt);
                    t_new[ti][1] = best_time(secs, [&] {
                        pool.parallel_for(n_chunks, [&](int64_t b, int64_t e, int tid) {
                            for (int64_t c = b; c < e; c++) {
                                const int64_t h0 = c * hb, hn = std::min(hb, nh - h0);
                                dsv4::attend(type, q.data() + h0 * d, hn, d, base, rb, n, scale, sk.data() + h0, out.data() + h0 * d, scs[tid], halves[tid]);
                            }
                        }, 1);
                    });
                }
                std::printf("%-5lld %-4s %6lld %5lld | %12.0f | %12.0f %12.0f | %12.0f %12.0f | %7.1fx   (F32 NMSE vs before %.1e)\n", static_cast<long long>(nh), kind,
                            static_cast<long long>(ctx), static_cast<long long>(n), 1 / t_before, 1 / t_new[0][0], 1 / t_new[0][1], 1 / t_new[1][0], 1 / t_new[1][1],
                            t_before / t_new[1][1], err / den);
            }
        }
    }
    return 0;
}
