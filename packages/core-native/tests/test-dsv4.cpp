// DeepSeek-V4's kernels (model/dsv4.h) against plain double-precision references on random
// inputs: the compressor's block fold (HCA: one block; CSA: overlapping with the previous block,
// and the first block without one), the Sinkhorn-normalized stream mix and the hyper-connection
// post, and attention over explicit key/value rows with and without sinks.
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include "kail/quants.h"
#include "kail/types.h"
#include "model/dsv4.h"
#include "op_test_util.h"

using namespace kail;

static void expect(const char * what, double e, double bound) {
    const bool ok = e <= bound;
    std::printf("%-46s nmse %.2e (bound %.0e) %s\n", what, e, bound, ok ? "ok" : "FAIL");
    if (!ok) g_failures++;
}

// Reference fold: per dim j, softmax over the entries' scores, in double.
static std::vector<double> ref_compress(const std::vector<std::vector<float>> & cur, const std::vector<std::vector<float>> * prev, int64_t ratio, int64_t d, bool overlap) {
    const int64_t w = (overlap ? 2 : 1) * d;
    std::vector<double> out(static_cast<size_t>(d));
    for (int64_t j = 0; j < d; j++) {
        std::vector<double> s, v;
        if (overlap)
            for (int64_t i = 0; i < ratio; i++) {
                if (prev) { v.push_back((*prev)[i][j]); s.push_back((*prev)[i][w + j]); }
                else { v.push_back(0); s.push_back(-std::numeric_limits<double>::infinity()); }
            }
        for (int64_t i = 0; i < ratio; i++) {
            v.push_back(cur[i][(overlap ? d : 0) + j]);
            s.push_back(cur[i][w + (overlap ? d : 0) + j]);
        }
        double mx = -std::numeric_limits<double>::infinity();
        for (double x : s) mx = std::max(mx, x);
        double z = 0, acc = 0;
        for (size_t i = 0; i < s.size(); i++) z += std::exp(s[i] - mx);
        for (size_t i = 0; i < s.size(); i++) acc += v[i] * std::exp(s[i] - mx) / z;
        out[j] = acc;
    }
    return out;
}

static void test_compress(std::mt19937 & rng, int64_t ratio, int64_t d, bool overlap, bool first) {
    std::normal_distribution<float> nd(0.0f, 1.5f);
    const int64_t w = (overlap ? 2 : 1) * d;
    auto draw = [&]() {
        std::vector<std::vector<float>> rows(static_cast<size_t>(ratio), std::vector<float>(static_cast<size_t>(2 * w)));
        for (auto & r : rows) for (float & x : r) x = nd(rng);
        return rows;
    };
    const auto cur = draw(), prev = draw();
    std::vector<const float *> pc, pp;
    for (auto & r : cur) pc.push_back(r.data());
    for (auto & r : prev) pp.push_back(r.data());
    std::vector<float> out(static_cast<size_t>(d));
    const bool has_prev = overlap && !first;
    dsv4::compress_entry(pc.data(), has_prev ? pp.data() : nullptr, ratio, d, overlap, out.data());
    char what[96];
    std::snprintf(what, sizeof what, "compress ratio %lld d %lld%s%s", static_cast<long long>(ratio), static_cast<long long>(d), overlap ? " overlap" : "", overlap && first ? " (first block)" : "");
    expect(what, nmse(out, ref_compress(cur, has_prev ? &prev : nullptr, ratio, d, overlap)), 1e-12);
}

static void test_hc(std::mt19937 & rng, int64_t hc, int64_t d, int iters) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const int64_t nmix = (2 + hc) * hc;
    std::vector<float> mix(nmix), base(nmix), scale(3), y(d), res(hc * d);
    for (float & x : mix) x = nd(rng);
    for (float & x : base) x = 0.5f * nd(rng);
    for (float & x : scale) x = 1.0f + 0.3f * nd(rng);
    for (float & x : y) x = nd(rng);
    for (float & x : res) x = nd(rng);
    const double eps = 1e-6;
    // Reference: softmax over dst per src, + eps, column then (row, column) normalizations.
    std::vector<double> c(hc * hc);
    for (int64_t src = 0; src < hc; src++) {
        double mx = -1e300, z = 0;
        for (int64_t dst = 0; dst < hc; dst++) mx = std::max(mx, double(mix[2 * hc + dst + hc * src]) * scale[2] + base[2 * hc + dst + hc * src]);
        for (int64_t dst = 0; dst < hc; dst++) z += std::exp(double(mix[2 * hc + dst + hc * src]) * scale[2] + base[2 * hc + dst + hc * src] - mx);
        for (int64_t dst = 0; dst < hc; dst++) c[dst + hc * src] = std::exp(double(mix[2 * hc + dst + hc * src]) * scale[2] + base[2 * hc + dst + hc * src] - mx) / z + eps;
    }
    auto cols = [&]() {
        for (int64_t dst = 0; dst < hc; dst++) {
            double s = 0;
            for (int64_t src = 0; src < hc; src++) s += c[dst + hc * src];
            for (int64_t src = 0; src < hc; src++) c[dst + hc * src] /= s + eps;
        }
    };
    auto rows = [&]() {
        for (int64_t src = 0; src < hc; src++) {
            double s = 0;
            for (int64_t dst = 0; dst < hc; dst++) s += c[dst + hc * src];
            for (int64_t dst = 0; dst < hc; dst++) c[dst + hc * src] /= s + eps;
        }
    };
    cols();
    for (int i = 1; i < iters; i++) { rows(); cols(); }
    std::vector<float> comb(hc * hc);
    dsv4::hc_comb(mix.data(), scale.data(), base.data(), hc, static_cast<float>(eps), iters, comb.data());
    char what[96];
    std::snprintf(what, sizeof what, "hc_comb hc %lld iters %d", static_cast<long long>(hc), iters);
    expect(what, nmse(comb, c), 1e-12);
    std::vector<double> ref(hc * d);
    for (int64_t dst = 0; dst < hc; dst++) {
        const double post = 2.0 / (1.0 + std::exp(-(double(mix[hc + dst]) * scale[1] + base[hc + dst])));
        for (int64_t i = 0; i < d; i++) {
            double v = y[i] * post;
            for (int64_t src = 0; src < hc; src++) v += double(res[src * d + i]) * c[dst + hc * src];
            ref[dst * d + i] = v;
        }
    }
    std::vector<float> out(res);  // in place, as the op runs it
    dsv4::hc_post(y.data(), out.data(), mix.data(), scale.data(), base.data(), hc, d, static_cast<float>(eps), iters, out.data());
    std::snprintf(what, sizeof what, "hc_post hc %lld d %lld iters %d (in place)", static_cast<long long>(hc), static_cast<long long>(d), iters);
    expect(what, nmse(out, ref), 1e-12);
}

// f16: the rows as an F16 cache holds them (the reference on the rounded values; the kernels
// round the query and the probabilities to F16 as ggml-cpu does, hence the looser bound).
static void test_attend(std::mt19937 & rng, int64_t H, int64_t d, int64_t n, bool sinks, bool f16 = false) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> q(H * d), kv(n * d), sk(H), out(H * d);
    for (float & x : q) x = nd(rng);
    for (float & x : kv) x = nd(rng);
    for (float & x : sk) x = nd(rng);
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    // Scratch reused (and grown) across calls, as the op's threads reuse theirs; F32 rows.
    static std::vector<float> sc;
    static std::vector<uint16_t> half;
    std::vector<uint16_t> kv16(n * d);
    if (f16) {
        fp32_to_fp16_row(kv.data(), kv16.data(), n * d);
        fp16_to_fp32_row(kv16.data(), kv.data(), n * d);
        dsv4::attend(KAIL_TYPE_F16, q.data(), H, d, kv16.data(), static_cast<size_t>(d) * 2, n, scale, sinks ? sk.data() : nullptr, out.data(), sc, half);
    } else {
        dsv4::attend(KAIL_TYPE_F32, q.data(), H, d, kv.data(), static_cast<size_t>(d) * sizeof(float), n, scale, sinks ? sk.data() : nullptr, out.data(), sc, half);
    }
    std::vector<double> ref(H * d, 0.0);
    for (int64_t h = 0; h < H; h++) {
        std::vector<double> s(n);
        double mx = sinks ? sk[h] : -1e300;
        for (int64_t i = 0; i < n; i++) {
            double dot = 0;
            for (int64_t j = 0; j < d; j++) dot += double(q[h * d + j]) * kv[i * d + j];
            s[i] = dot * scale;
            mx = std::max(mx, s[i]);
        }
        double z = sinks ? std::exp(sk[h] - mx) : 0;
        for (int64_t i = 0; i < n; i++) z += std::exp(s[i] - mx);
        for (int64_t i = 0; i < n; i++)
            for (int64_t j = 0; j < d; j++) ref[h * d + j] += std::exp(s[i] - mx) / z * kv[i * d + j];
    }
    char what[96];
    std::snprintf(what, sizeof what, "attend %lld heads x %lld over %lld %s rows%s", static_cast<long long>(H), static_cast<long long>(d), static_cast<long long>(n),
                  f16 ? "F16" : "F32", sinks ? " with sinks" : "");
    expect(what, nmse(out, ref), f16 ? 1e-6 : 1e-12);
}

int main() {
    std::mt19937 rng(4);
    test_compress(rng, 128, 96, false, false);
    test_compress(rng, 4, 96, true, false);
    test_compress(rng, 4, 64, true, true);
    test_hc(rng, 4, 128, 1);
    test_hc(rng, 4, 128, 20);
    test_hc(rng, 3, 64, 5);
    test_attend(rng, 4, 96, 1, true);
    test_attend(rng, 8, 128, 37, true);
    test_attend(rng, 4, 64, 20, false);
    test_attend(rng, 16, 512, 300, true);  // DeepSeek-V4's head size, a window and compressed rows
    test_attend(rng, 8, 128, 37, true, true);
    if (g_failures) std::printf("%d failures\n", g_failures);
    return g_failures ? 1 : 0;
}
