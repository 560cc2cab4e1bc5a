// MiniMax-M3's sparse attention (MSA: the msa_index op and the attention op's block selection)
// against a plain double-precision reference written from llama.cpp's minimax-m3 graph: per token
// and KV head, indexer scores iq_h . ik_j over positions j <= pos, each block of `block` positions
// scored by its maximum, the token's own block and the local - 1 before it forced in (llama.cpp's
// +1e30 bias), the rest by score, top_k blocks in all; then each query head of the group attends
// with softmax(scale q . k_j) over the positions of those blocks only. The model runs a program of
// its own over a GGUF built in memory: the input rows carry q | k | v | indexer q | indexer k.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kail/gguf.h"
#include "kail/model.h"
#include "kail/status.h"
#include "kail/types.h"
#include "op_test_util.h"

using namespace kail;

struct shape {
    int64_t H, Hkv, D, I;        // query heads, KV heads (= indexer heads), head size, indexer head size
    int64_t top_k, block, local;
    int64_t q() const { return H * D; }
    int64_t in() const { return H * D + 2 * Hkv * D + Hkv * I + I; }
};

// input -> q (into the wider qs), k, v, iq, ik -> msa_index (the selection after q in qs) ->
// attention with the selection (hidden) -> two logits per output row.
static program make_program(const shape & s) {
    program p;
    const int in = add_buf(p, "in", s.in()), qs = add_buf(p, "qs", s.q() + s.Hkv * s.top_k), k = add_buf(p, "k", s.Hkv * s.D), v = add_buf(p, "v", s.Hkv * s.D);
    const int iq = add_buf(p, "iq", s.Hkv * s.I), ik = add_buf(p, "ik", s.I), att = add_buf(p, "att", s.q()), o = add_buf(p, "o", s.q(), true), logits = add_buf(p, "logits", 2, true);
    auto d = [](int64_t x) { return static_cast<double>(x); };
    add_op(p, OP_INPUT, in, -1);
    int64_t off = 0;
    add_op(p, OP_COPY, qs, in, {{"a_off", d(off)}, {"n", d(s.q())}});
    off += s.q();
    add_op(p, OP_COPY, k, in, {{"a_off", d(off)}, {"n", d(s.Hkv * s.D)}});
    off += s.Hkv * s.D;
    add_op(p, OP_COPY, v, in, {{"a_off", d(off)}, {"n", d(s.Hkv * s.D)}});
    off += s.Hkv * s.D;
    add_op(p, OP_COPY, iq, in, {{"a_off", d(off)}, {"n", d(s.Hkv * s.I)}});
    off += s.Hkv * s.I;
    add_op(p, OP_COPY, ik, in, {{"a_off", d(off)}, {"n", d(s.I)}});
    add_op(p, OP_MSA_INDEX, qs, iq, {{"layer", 1}, {"n_head", d(s.Hkv)}, {"head_dim", d(s.I)}, {"top_k", d(s.top_k)}, {"block", d(s.block)}, {"local", d(s.local)}, {"out_off", d(s.q())}}).b = ik;
    op_desc & a = add_op(p, OP_ATTENTION, att, qs,
                     {{"layer", 0}, {"n_head", d(s.H)}, {"n_head_kv", d(s.Hkv)}, {"head_dim", d(s.D)}, {"sel_off", d(s.q())}, {"top_k", d(s.top_k)}, {"block", d(s.block)}});
    a.b = k;
    a.c = v;
    add_op(p, OP_GATHER_OUT, o, att);
    add_op(p, OP_MATMUL, logits, o).weights = {{"weight", "head"}};
    p.logits = logits;
    p.hidden = att;
    p.n_kv_layers = 2;
    p.kv_k_width = {s.Hkv * s.D, s.I};
    p.kv_v_width = {s.Hkv * s.D, 0};
    return p;
}

// The attention outputs (n x H D) for input rows `in` at positions pos0.. of sequence 0.
static std::vector<float> run(model & m, const shape & s, const float * in, int64_t n, int32_t pos0) { return run_hidden(m, nullptr, n, pos0, 0, in, s.in()); }

// The reference for n tokens at positions 0..n-1 (`dense`: every visible block selected).
static std::vector<double> reference(const shape & s, const std::vector<float> & in, int64_t n, bool dense, int64_t * n_masked) {
    const int64_t W = s.in(), G = s.H / s.Hkv;
    auto row = [&](int64_t t) { return in.data() + t * W; };
    const int64_t ko = s.q(), vo = ko + s.Hkv * s.D, iqo = vo + s.Hkv * s.D, iko = iqo + s.Hkv * s.I;
    std::vector<double> out(static_cast<size_t>(n * s.q()));
    for (int64_t t = 0; t < n; t++) {
        const int64_t nb = t / s.block + 1, L = t / s.block;
        for (int64_t h = 0; h < s.Hkv; h++) {
            // block scores: the best position's score in each block
            std::vector<double> bs(static_cast<size_t>(nb), -INFINITY);
            for (int64_t j = 0; j <= t; j++) {
                double sc = 0;
                for (int64_t i = 0; i < s.I; i++) sc += double(row(t)[iqo + h * s.I + i]) * row(j)[iko + i];
                bs[static_cast<size_t>(j / s.block)] = std::max(bs[static_cast<size_t>(j / s.block)], sc);
            }
            // the forced blocks, latest first, then the others by score (higher first)
            std::vector<char> sel(static_cast<size_t>(nb), 0);
            int64_t taken = 0;
            for (int64_t l = 0; l < s.local && L - l >= 0 && taken < s.top_k; l++, taken++) sel[static_cast<size_t>(L - l)] = 1;
            std::vector<int64_t> rest;
            for (int64_t b = 0; b < nb; b++) if (!sel[static_cast<size_t>(b)]) rest.push_back(b);
            std::stable_sort(rest.begin(), rest.end(), [&](int64_t a, int64_t c) { return bs[static_cast<size_t>(a)] > bs[static_cast<size_t>(c)]; });
            for (size_t r = 0; r < rest.size() && taken < s.top_k; r++, taken++) sel[static_cast<size_t>(rest[r])] = 1;
            if (dense) std::fill(sel.begin(), sel.end(), 1);
            for (int64_t g = 0; g < G; g++) {
                const int64_t qh = h * G + g;
                std::vector<double> p(static_cast<size_t>(t + 1), 0.0);
                double mx = -INFINITY;
                for (int64_t j = 0; j <= t; j++) {
                    if (!sel[static_cast<size_t>(j / s.block)]) { if (g == 0 && n_masked) (*n_masked)++; continue; }
                    double d = 0;
                    for (int64_t i = 0; i < s.D; i++) d += double(row(t)[qh * s.D + i]) * row(j)[ko + h * s.D + i];
                    p[static_cast<size_t>(j)] = d / std::sqrt(double(s.D));
                    mx = std::max(mx, p[static_cast<size_t>(j)]);
                }
                softmax_mix(p, mx, t, [&](int64_t j) { return sel[static_cast<size_t>(j / s.block)] != 0; }, [&](int64_t j) { return row(j) + vo + h * s.D; }, s.D,
                            out.data() + t * s.q() + qh * s.D);
            }
        }
    }
    return out;
}

static void run_case(const shape & s, int64_t n, int64_t split) {
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> in(static_cast<size_t>(n * s.in()));
    for (auto & v : in) v = nd(rng);
    std::vector<float> head(static_cast<size_t>(s.q() * 2));
    for (auto & v : head) v = nd(rng);
    const std::vector<uint8_t> image = gguf_image({{"head", {s.q(), 2}, head}});
    std::shared_ptr<gguf_file> file = gguf_file::from_buffer(image.data(), image.size());
    model_params mp;
    mp.n_threads = 2;
    mp.n_ctx = 128;
    mp.kv_type = KAIL_TYPE_F32;
    mp.kv_type_v = KAIL_TYPE_F32;
    int64_t masked = 0;
    const std::vector<double> want = reference(s, in, n, false, &masked);
    const std::vector<double> dense = reference(s, in, n, true, nullptr);
    std::vector<float> got, parts;
    {
        model m(file, make_program(s), mp);
        got = run(m, s, in.data(), n, 0);
    }
    {
        model m(file, make_program(s), mp);
        parts = run(m, s, in.data(), split, 0);
        const std::vector<float> tail = run(m, s, in.data() + split * s.in(), n - split, static_cast<int32_t>(split));
        parts.insert(parts.end(), tail.begin(), tail.end());
    }
    const int64_t span = s.top_k * s.block;  // positions before this see every block
    const double e = nmse(got, want, 0, n * s.q());
    const double e_dense_head = nmse(got, dense, 0, std::min(n, span) * s.q());
    const double sparse_vs_dense = n > span ? nmse(got, dense, span * s.q(), n * s.q()) : 0;
    std::printf("msa H %lld/%lld D %lld I %lld, top %lld of blocks of %lld, %lld local, %lld tokens: NMSE %.3e (positions masked: %lld); dense part %.3e; sparse vs dense %.3e\n",
                (long long)s.H, (long long)s.Hkv, (long long)s.D, (long long)s.I, (long long)s.top_k, (long long)s.block, (long long)s.local, (long long)n, e,
                (long long)masked, e_dense_head, sparse_vs_dense);
    CHECK(e < 1e-12);
    CHECK(e_dense_head < 1e-12);
    CHECK(masked > 0);
    CHECK(n <= span || sparse_vs_dense > 1e-4);
    // Split into two forward calls: the same bits.
    CHECK(parts.size() == got.size() && std::memcmp(parts.data(), got.data(), got.size() * 4) == 0);
}

int main() {
    // GQA groups of 2, the own block and one before forced, top 3 of blocks of 4.
    run_case({4, 2, 16, 8, 3, 4, 2}, 40, 17);
    // One forced block, top 2 of blocks of 8, groups of 3.
    run_case({6, 2, 32, 16, 2, 8, 1}, 50, 1);
    // More forced blocks than kept: the latest local ones are the selection (top 2 of 3 forced).
    run_case({2, 1, 16, 16, 2, 4, 3}, 30, 9);
    // No forced block: the top 3 by score alone.
    run_case({4, 2, 16, 8, 3, 4, 0}, 40, 23);
    return test_status();
}
