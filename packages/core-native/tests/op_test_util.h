// The pieces the native op tests share: CHECK (counted in g_failures), a GGUF v3 image of F32
// tensors built in memory (the weights of a test's own program), the program's buffers and ops,
// one forward call that returns the hidden rows, the NMSE of float outputs against a double
// reference, normal random fills, and for the attention tests a program of one attention op over
// q|k|v input rows, ALiBi's slopes, a double reference attention and a batch of two sequences
// interleaved. Each test is its own executable, so the statics here are per test.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kail/gguf.h"
#include "kail/model.h"
#include "kail/status.h"
#include "kail/types.h"

static int g_failures = 0;

#define CHECK(cond)                                                                       \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
            g_failures++;                                                                 \
        }                                                                                 \
    } while (0)

// A test program's exit status: 1 after printing the failure count, else 0 after "ok" (after
// "NAME: ok" with a name).
inline int test_status(const char * name = nullptr) {
    if (g_failures) {
        std::fprintf(stderr, "%d failures\n", g_failures);
        return 1;
    }
    if (name) std::printf("%s: ok\n", name);
    else std::printf("ok\n");
    return 0;
}

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

// A test program's end: core's rows gathered into o (out rows) and read through a 2-logit head
// (weight "head", [width(o), 2]); core is the hidden output run_hidden returns.
inline void end_with_head(program & p, int core, int o, int logits) {
    add_op(p, OP_GATHER_OUT, o, core);
    add_op(p, OP_MATMUL, logits, o).weights = {{"weight", "head"}};
    p.logits = logits;
    p.hidden = core;
}

// A model over an in-memory image (gguf_image) running a test's own program: 2 threads, n_ctx
// positions, and whatever else `tune` sets.
inline std::unique_ptr<model> load_test_model(const std::vector<uint8_t> & image, const program & p, int64_t n_ctx,
                                              const std::function<void(model_params &)> & tune = {}) {
    std::shared_ptr<gguf_file> file = gguf_file::from_buffer(image.data(), image.size());
    model_params mp;
    mp.n_threads = 2;
    mp.n_ctx = n_ctx;
    if (tune) tune(mp);
    return std::make_unique<model>(file, p, mp);
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

// Parameters of the attention op tests' models: 2 threads, n_ctx positions, n_seq sequences, the KV
// cache in kv_type (keys and values).
inline model_params attention_test_params(int64_t n_ctx, int n_seq = 1, uint32_t kv_type = KAIL_TYPE_F32) {
    model_params mp;
    mp.n_threads = 2;
    mp.n_ctx = n_ctx;
    mp.n_seq_max = n_seq;
    mp.kv_type = kv_type;
    mp.kv_type_v = kv_type;
    return mp;
}

// One attention op over q|k|v taken from each input row (H*D, then Hkv*D twice), its output the
// hidden rows and a 2-logit head (tensor "head") after it; `extra` adds to the op's layer, n_head,
// n_head_kv and head_dim.
inline program qkv_attention_program(int64_t H, int64_t Hkv, int64_t D, const std::map<std::string, double> & extra) {
    program p;
    auto d = [](int64_t x) { return static_cast<double>(x); };
    const int in = add_buf(p, "in", H * D + 2 * Hkv * D), q = add_buf(p, "q", H * D), k = add_buf(p, "k", Hkv * D), v = add_buf(p, "v", Hkv * D);
    const int att = add_buf(p, "att", H * D), o = add_buf(p, "o", H * D, true), logits = add_buf(p, "logits", 2, true);
    add_op(p, OP_INPUT, in, -1);
    add_op(p, OP_COPY, q, in, {{"a_off", 0}, {"n", d(H * D)}});
    add_op(p, OP_COPY, k, in, {{"a_off", d(H * D)}, {"n", d(Hkv * D)}});
    add_op(p, OP_COPY, v, in, {{"a_off", d(H * D + Hkv * D)}, {"n", d(Hkv * D)}});
    std::map<std::string, double> ap = {{"layer", 0}, {"n_head", d(H)}, {"n_head_kv", d(Hkv)}, {"head_dim", d(D)}};
    for (const auto & [key, val] : extra) ap[key] = val;
    op_desc & a = add_op(p, OP_ATTENTION, att, q, ap);
    a.b = k;
    a.c = v;
    add_op(p, OP_GATHER_OUT, o, att);
    add_op(p, OP_MATMUL, logits, o).weights = {{"weight", "head"}};
    p.logits = logits;
    p.hidden = att;
    p.n_kv_layers = 1;
    p.kv_k_width = {Hkv * D};
    p.kv_v_width = {Hkv * D};
    return p;
}

// ALiBi's slope of head h of H in double, as ggml's soft_max_ext: 2^(-max_bias (h + 1) / n2) for
// h < n2 (the largest power of two <= H), 2^(-max_bias (2 (h - n2) + 1) / (2 n2)) beyond.
inline double alibi_slope(double max_bias, int64_t H, int64_t h) {
    int64_t n2 = 1;
    while (n2 * 2 <= H) n2 *= 2;
    return h < n2 ? std::pow(2.0, -max_bias * double(h + 1) / double(n2)) : std::pow(2.0, -max_bias * double(2 * (h - n2) + 1) / double(2 * n2));
}

// Double reference attention for the queries of rows[from, to) of one sequence (rows[i]: the
// input row at position i, q|k|v as qkv_attention_program reads it): query t sees position j
// when keep(t, j), its score there q.k / sqrt(D) + bias(query head, t, j).
template <class Keep, class Bias>
inline std::vector<double> attention_reference(int64_t H, int64_t Hkv, int64_t D, const std::vector<const float *> & rows, int64_t from, int64_t to, Keep keep, Bias bias) {
    const int64_t G = H / Hkv, ko = H * D, vo = ko + Hkv * D, n = static_cast<int64_t>(rows.size());
    std::vector<double> out(static_cast<size_t>((to - from) * H * D));
    for (int64_t t = from; t < to; t++) {
        for (int64_t qh = 0; qh < H; qh++) {
            const int64_t h = qh / G;
            std::vector<double> p(static_cast<size_t>(n), 0.0);
            double mx = -INFINITY;
            for (int64_t j = 0; j < n; j++) {
                if (!keep(t, j)) continue;
                double dot = 0;
                for (int64_t i = 0; i < D; i++) dot += double(rows[static_cast<size_t>(t)][qh * D + i]) * rows[static_cast<size_t>(j)][ko + h * D + i];
                p[static_cast<size_t>(j)] = dot / std::sqrt(double(D)) + bias(qh, t, j);
                mx = std::max(mx, p[static_cast<size_t>(j)]);
            }
            softmax_mix(p, mx, n - 1, [&](int64_t j) { return keep(t, j); }, [&](int64_t j) { return rows[static_cast<size_t>(j)] + vo + h * D; }, D,
                        out.data() + (t - from) * H * D + qh * D);
        }
    }
    return out;
}

// One sequence's rows for interleaved_forward: n input rows `in` (`width` floats each) at positions pos0...
struct seq_rows {
    const float * in;
    int64_t       pos0, n;
};

// One forward pass over two sequences interleaved token by token (sequence ids 0 and 1); the
// hidden rows in batch order, with each row's sequence and position.
inline std::vector<float> interleaved_forward(model & m, const seq_rows & s0, const seq_rows & s1, int64_t width, std::vector<int32_t> & seq, std::vector<int32_t> & pos) {
    std::vector<int32_t> toks;
    std::vector<float> rows;
    seq.clear();
    pos.clear();
    for (int64_t t = 0; t < std::max(s0.n, s1.n); t++)
        for (int sq = 0; sq < 2; sq++) {
            const seq_rows & r = sq ? s1 : s0;
            if (t >= r.n) continue;
            pos.push_back(static_cast<int32_t>(r.pos0 + t));
            seq.push_back(sq);
            rows.insert(rows.end(), r.in + t * width, r.in + (t + 1) * width);
        }
    toks.assign(pos.size(), 0);
    std::vector<uint8_t> outs(pos.size(), 1);
    batch b;
    b.tokens = toks.data();
    b.pos = pos.data();
    b.seq = seq.data();
    b.output = outs.data();
    b.n = static_cast<int64_t>(pos.size());
    b.embd = rows.data();
    b.embd_width = width;
    b.want_hidden = true;
    std::vector<float> logits, hidden;
    m.forward(b, logits, &hidden);
    return hidden;
}

// The reference rows of interleaved_forward's batch: row i is sequence seq[i]'s (w0 or w1, each
// [position][width]) at position pos[i].
inline std::vector<double> interleaved_reference(const std::vector<double> & w0, const std::vector<double> & w1, const std::vector<int32_t> & seq, const std::vector<int32_t> & pos, int64_t width) {
    std::vector<double> want;
    for (size_t i = 0; i < pos.size(); i++) {
        const std::vector<double> & w = seq[i] ? w1 : w0;
        want.insert(want.end(), w.begin() + pos[i] * width, w.begin() + (pos[i] + 1) * width);
    }
    return want;
}

// f() must throw kail's error with this code and `sub` in its message (a failure counted otherwise).
inline void expect_error(const char * what, error_code code, const std::function<void()> & f, const char * sub) {
    try {
        f();
        std::fprintf(stderr, "%s: no error\n", what);
        g_failures++;
    } catch (const error & e) {
        if (e.code() != code || std::string(e.what()).find(sub) == std::string::npos) {
            std::fprintf(stderr, "%s: unexpected error %d: %s\n", what, static_cast<int>(e.code()), e.what());
            g_failures++;
        }
    }
}

}  // namespace kail
