// The pieces the native op tests share: CHECK (counted in g_failures), a GGUF v3 image of F32
// tensors built in memory (the weights of a test's own program), the program's buffers and ops,
// one forward call that returns the hidden rows, the NMSE of float outputs against a double
// reference, and normal random fills. Each test is its own executable, so the statics here are
// per test.
#pragma once

#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "kail/model.h"
#include "kail/types.h"

static int g_failures = 0;

#define CHECK(cond)                                                                       \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            g_failures++;                                                                 \
        }                                                                                 \
    } while (0)

namespace kail {

struct f32_tensor {
    std::string          name;
    std::vector<int64_t> ne;
    std::vector<float>   data;
};

// A GGUF v3 image of F32 tensors and no metadata.
inline std::vector<uint8_t> gguf_image(const std::vector<f32_tensor> & ts) {
    std::vector<uint8_t> b;
    auto raw = [&](const void * p, size_t n) { b.insert(b.end(), static_cast<const uint8_t *>(p), static_cast<const uint8_t *>(p) + n); };
    auto u32 = [&](uint32_t v) { raw(&v, 4); };
    auto u64 = [&](uint64_t v) { raw(&v, 8); };
    auto pad = [&]() { while (b.size() % 32) b.push_back(0); };
    raw("GGUF", 4);
    u32(3);
    u64(ts.size());
    u64(0);
    uint64_t off = 0;
    for (const auto & t : ts) {
        u64(t.name.size());
        raw(t.name.data(), t.name.size());
        u32(static_cast<uint32_t>(t.ne.size()));
        for (int64_t d : t.ne) u64(static_cast<uint64_t>(d));
        u32(KAIL_TYPE_F32);
        u64(off);
        off += (t.data.size() * 4 + 31) / 32 * 32;
    }
    pad();
    for (const auto & t : ts) {
        raw(t.data.data(), t.data.size() * 4);
        pad();
    }
    return b;
}

// n values drawn from N(0, std^2) by a distribution of their own.
inline std::vector<float> randn(std::mt19937 & rng, size_t n, float std = 1.0f) {
    std::normal_distribution<float> nd(0.0f, std);
    std::vector<float> v(n);
    for (auto & x : v) x = nd(rng);
    return v;
}

// A program's buffer (its index) and op (valid until the next add_op).
inline int add_buf(program & p, const char * n, int64_t w, bool out_rows = false) {
    p.buffers.push_back({n, w, out_rows});
    return static_cast<int>(p.buffers.size() - 1);
}
inline op_desc & add_op(program & p, op_type t, int out, int a, std::map<std::string, double> params = {}) {
    op_desc d;
    d.type = t;
    d.out = out;
    d.a = a;
    d.params = std::move(params);
    p.ops.push_back(d);
    return p.ops.back();
}

// One forward call over n tokens at positions pos0.. of sequence seq (toks null: token 0 each),
// with input rows `in` (`width` each; null: none); the hidden rows.
inline std::vector<float> run_hidden(model & m, const int32_t * toks, int64_t n, int32_t pos0, int32_t seq, const float * in, int64_t width) {
    std::vector<int32_t> zeros(toks ? 0 : static_cast<size_t>(n), 0), pos(static_cast<size_t>(n)), sq(static_cast<size_t>(n), seq);
    std::vector<uint8_t> out(static_cast<size_t>(n), 1);
    for (int64_t t = 0; t < n; t++) pos[static_cast<size_t>(t)] = pos0 + static_cast<int32_t>(t);
    batch b;
    b.tokens = toks ? toks : zeros.data();
    b.pos = pos.data();
    b.seq = sq.data();
    b.output = out.data();
    b.n = n;
    b.embd = in;
    b.embd_width = width;
    b.want_hidden = true;
    std::vector<float> logits, hidden;
    m.forward(b, logits, &hidden);
    return hidden;
}

// A reference attention's weighting for one query head at token t: p[j] holds the scaled scores
// of positions j <= t, mx the largest kept one; softmax over the positions `keep(j)` keeps (the
// others weigh 0), then out[i] = sum_j softmax_j value(j)[i] for i < D.
template <class Keep, class Value>
inline void softmax_mix(std::vector<double> & p, double mx, int64_t t, Keep keep, Value value, int64_t D, double * out) {
    double sum = 0;
    for (int64_t j = 0; j <= t; j++) {
        p[static_cast<size_t>(j)] = keep(j) ? std::exp(p[static_cast<size_t>(j)] - mx) : 0.0;
        sum += p[static_cast<size_t>(j)];
    }
    for (int64_t i = 0; i < D; i++) {
        double o = 0;
        for (int64_t j = 0; j <= t; j++) o += p[static_cast<size_t>(j)] / sum * value(j)[i];
        out[i] = o;
    }
}

// sum (x - y)^2 / sum y^2 over [from, to), and over all of y.
inline double nmse(const std::vector<float> & x, const std::vector<double> & y, int64_t from, int64_t to) {
    double num = 0, den = 0;
    for (int64_t i = from; i < to; i++) {
        num += (x[static_cast<size_t>(i)] - y[static_cast<size_t>(i)]) * (x[static_cast<size_t>(i)] - y[static_cast<size_t>(i)]);
        den += y[static_cast<size_t>(i)] * y[static_cast<size_t>(i)];
    }
    return num / den;
}
inline double nmse(const std::vector<float> & x, const std::vector<double> & y) { return nmse(x, y, 0, static_cast<int64_t>(y.size())); }

}  // namespace kail
