#include "model/dsv4.h"

#include "kail/matmul.h"
#include "kail/quants.h"
#include "model/mla.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace kail::dsv4 {

namespace {

// ggml's soft_max row: exp(x - max) in F32, their sum in double, times (float) 1 / sum.
void softmax_row(float * v, int64_t n) {
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < n; i++) mx = std::max(mx, v[i]);
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        const float e = std::exp(v[i] - mx);
        v[i] = e;
        sum += e;
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t i = 0; i < n; i++) v[i] *= inv;
}

} // namespace

void compress_entry(const float * const * cur, const float * const * prev, int64_t ratio, int64_t d, bool overlap, float * out) {
    const int64_t w = (overlap ? 2 : 1) * d;
    const int64_t n = overlap ? 2 * ratio : ratio;
    std::vector<float> s(static_cast<size_t>(n)), v(static_cast<size_t>(n));
    for (int64_t j = 0; j < d; j++) {
        for (int64_t i = 0; i < n; i++) {
            if (overlap && i < ratio) {
                v[i] = prev ? prev[i][j] : 0.0f;
                s[i] = prev ? prev[i][w + j] : -std::numeric_limits<float>::infinity();
            } else {
                const float * r = cur[overlap ? i - ratio : i];
                v[i] = r[(overlap ? d : 0) + j];
                s[i] = r[w + (overlap ? d : 0) + j];
            }
        }
        softmax_row(s.data(), n);
        double acc = 0;
        for (int64_t i = 0; i < n; i++) acc += v[i] * s[i];
        out[j] = static_cast<float>(acc);
    }
}

void hc_comb(const float * mix, const float * scale, const float * base, int64_t hc, float eps, int iters, float * comb) {
    const int64_t o = 2 * hc;
    for (int64_t e = 0; e < hc * hc; e++) comb[e] = mix[o + e] * scale[2] + base[o + e];
    for (int64_t src = 0; src < hc; src++) softmax_row(comb + src * hc, hc);
    for (int64_t e = 0; e < hc * hc; e++) comb[e] += eps;
    // Normalizes each of hc lines of comb (the line's entries `step` apart, lines `next` apart) by its sum + eps.
    auto normalize = [&](int64_t next, int64_t step) {
        for (int64_t l = 0; l < hc; l++) {
            float * c = comb + l * next;
            double s = 0;
            for (int64_t e = 0; e < hc; e++) s += c[e * step];
            const float den = static_cast<float>(s) + eps;
            for (int64_t e = 0; e < hc; e++) c[e * step] /= den;
        }
    };
    const auto norm_cols = [&]() { normalize(1, hc); };   // per dst: over src
    const auto norm_rows = [&]() { normalize(hc, 1); };   // per src: over dst
    norm_cols();
    for (int i = 1; i < iters; i++) {
        norm_rows();
        norm_cols();
    }
}

void hc_post(const float * y, const float * res, const float * mix, const float * scale, const float * base, int64_t hc, int64_t d, float eps, int iters, float * out) {
    // The thread's scratch, reused row after row (no allocation per token once grown).
    thread_local std::vector<float> comb, post, o;
    comb.resize(static_cast<size_t>(hc * hc));
    post.resize(static_cast<size_t>(hc));
    o.resize(static_cast<size_t>(hc * d));
    hc_comb(mix, scale, base, hc, eps, iters, comb.data());
    for (int64_t dst = 0; dst < hc; dst++) {
        const float z = mix[hc + dst] * scale[1] + base[hc + dst];
        post[dst] = (1.0f / (1.0f + std::exp(-z))) * 2.0f;
    }
    for (int64_t dst = 0; dst < hc; dst++) {
        float * od = o.data() + dst * d;
        for (int64_t i = 0; i < d; i++) od[i] = y[i] * post[dst];
        for (int64_t src = 0; src < hc; src++) {
            const float c = comb[dst + hc * src];
            const float * r = res + src * d;
            for (int64_t i = 0; i < d; i++) od[i] = od[i] + r[i] * c;
        }
    }
    std::copy(o.begin(), o.end(), out);
}

void attend(uint32_t type, const float * q, int64_t n_head, int64_t d, const void * rows, size_t row_stride, int64_t n, float scale,
            const float * sinks, float * out, std::vector<float> & scores, std::vector<uint16_t> & half) {
    scores.resize(static_cast<size_t>(n_head * n));
    matmul(type, rows, row_stride, n, d, q, static_cast<size_t>(d) * sizeof(float), n_head, scores.data(), static_cast<size_t>(n) * sizeof(float), nullptr);
    for (int64_t h = 0; h < n_head; h++)
        attention_softmax(scores.data() + h * n, n, scale, type, half, sinks ? sinks[h] : -std::numeric_limits<float>::infinity());
    attention_weighted_rows(type, rows, row_stride, n, d, scores.data(), static_cast<size_t>(n), n_head, out, static_cast<size_t>(d));
}

} // namespace kail::dsv4
