// qwen4exp's QSA sparse attention (the qsa_index op and the attention op's selection of single
// positions) against a plain double-precision reference written from llama.cpp's qwen4exp graph
// (build_qsa_top_k, build_attn_qsa, set_input_qsa) for one sequence: indexer keys stored raw;
// each whole block of `ratio` positions ending at or before the token gets the key
// rope(rms_norm(mean of its raw keys) * w, block start) and the score sum_h relu(iq_h . key);
// every position of a block carries its block's score, the incomplete tail ranks first, and the
// kept positions are ggml_top_k's (std::partial_sort, larger first) to W = top_k + ratio - 1, so a
// block split at the boundary and tied blocks resolve as llama.cpp's do. Then each query head
// attends with softmax(scale q . k_j) over the kept positions only. The input rows carry
// q | k | v | indexer q (already normed and roped: the program's own ops do that) | indexer k.
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

static int64_t g_zero_blocks = 0;  // (token, block) pairs whose score is exactly 0: tied

struct shape {
    int64_t H, Hkv, D;      // query heads, KV heads, head size
    int64_t NI, I, n_dims;  // indexer heads, indexer head size, its rotary dims
    int64_t top_k, ratio;
    bool relu_ties;         // indexer queries pushed negative: many blocks score exactly 0 (ties)
    int64_t W() const { return top_k + ratio - 1; }
    int64_t q() const { return H * D; }
    int64_t in() const { return H * D + 2 * Hkv * D + NI * I + I; }
};

static const double kEps = 1e-6, kBase = 10000.0;

// input -> q (into the wider qs), k, v, iq, ik -> qsa_index (the selection after q in qs, one copy
// per KV head) -> attention with the selection (hidden) -> two logits per output row.
// `select` false: the attention without the selection (dense), the sparse case's contrast.
static program make_program(const shape & s, bool select) {
    program p;
    const int in = add_buf(p, "in", s.in()), qs = add_buf(p, "qs", s.q() + s.Hkv * s.W()), k = add_buf(p, "k", s.Hkv * s.D), v = add_buf(p, "v", s.Hkv * s.D);
    const int iq = add_buf(p, "iq", s.NI * s.I), ik = add_buf(p, "ik", s.I), att = add_buf(p, "att", s.q()), o = add_buf(p, "o", s.q(), true), logits = add_buf(p, "logits", 2, true);
    auto d = [](int64_t x) { return static_cast<double>(x); };
    add_op(p, OP_INPUT, in, -1);
    int64_t off = 0;
    add_op(p, OP_COPY, qs, in, {{"a_off", d(off)}, {"n", d(s.q())}});
    off += s.q();
    add_op(p, OP_COPY, k, in, {{"a_off", d(off)}, {"n", d(s.Hkv * s.D)}});
    off += s.Hkv * s.D;
    add_op(p, OP_COPY, v, in, {{"a_off", d(off)}, {"n", d(s.Hkv * s.D)}});
    off += s.Hkv * s.D;
    add_op(p, OP_COPY, iq, in, {{"a_off", d(off)}, {"n", d(s.NI * s.I)}});
    off += s.NI * s.I;
    add_op(p, OP_COPY, ik, in, {{"a_off", d(off)}, {"n", d(s.I)}});
    op_desc & qi = add_op(p, OP_QSA_INDEX, qs, iq,
                      {{"layer", 1}, {"block_layer", 2}, {"n_head", d(s.NI)}, {"head_dim", d(s.I)}, {"top_k", d(s.top_k)}, {"ratio", d(s.ratio)}, {"eps", kEps},
                       {"out_off", d(s.q())}, {"repeat", d(s.Hkv)}, {"n_dims", d(s.n_dims)}, {"neox", 1}, {"freq_base", kBase}});
    qi.b = ik;
    qi.weights = {{"weight", "knorm"}};
    std::map<std::string, double> ap = {{"layer", 0}, {"n_head", d(s.H)}, {"n_head_kv", d(s.Hkv)}, {"head_dim", d(s.D)}};
    if (select) ap.insert({{"sel_off", d(s.q())}, {"top_k", d(s.W())}, {"block", 1}});
    op_desc & a = add_op(p, OP_ATTENTION, att, qs, ap);
    a.b = k;
    a.c = v;
    add_op(p, OP_GATHER_OUT, o, att);
    add_op(p, OP_MATMUL, logits, o).weights = {{"weight", "head"}};
    p.logits = logits;
    p.hidden = att;
    p.n_kv_layers = 3;
    p.kv_k_width = {s.Hkv * s.D, s.I, s.I};
    p.kv_v_width = {s.Hkv * s.D, 0, 0};
    return p;
}

// The attention outputs (n x H D) for input rows `in` at positions pos0.. of sequence `seq`.
static std::vector<float> run(model & m, const shape & s, const float * in, int64_t n, int32_t pos0, int32_t seq = 0) { return run_hidden(m, nullptr, n, pos0, seq, in, s.in()); }

// The kept positions of token t (the reference's selection, in double).
static std::vector<char> reference_selection(const shape & s, const std::vector<float> & in, const std::vector<float> & norm, int64_t t, int64_t * n_split) {
    const int64_t Wd = s.in();
    auto row = [&](int64_t j) { return in.data() + j * Wd; };
    const int64_t iqo = s.q() + 2 * s.Hkv * s.D, iko = iqo + s.NI * s.I;
    std::vector<char> keep(static_cast<size_t>(t + 1), 1);
    if (t + 1 <= s.W()) return keep;
    const int64_t nb = (t + 1) / s.ratio;
    std::vector<double> val(static_cast<size_t>(t + 1), INFINITY);
    std::vector<double> key(static_cast<size_t>(s.I));
    for (int64_t b = 0; b < nb; b++) {
        for (int64_t e = 0; e < s.I; e++) {
            double m = 0;
            for (int64_t i = 0; i < s.ratio; i++) m += row(b * s.ratio + i)[iko + e];
            key[static_cast<size_t>(e)] = m / double(s.ratio);
        }
        double ss = 0;
        for (double v : key) ss += v * v;
        const double sc = 1.0 / std::sqrt(ss / double(s.I) + kEps);
        for (int64_t e = 0; e < s.I; e++) key[static_cast<size_t>(e)] *= sc * norm[static_cast<size_t>(e)];
        // NeoX RoPE of the first n_dims at the block's first position.
        const double pos = double(b * s.ratio);
        for (int64_t i = 0; i < s.n_dims / 2; i++) {
            const double th = pos * std::pow(kBase, -2.0 * double(i) / double(s.n_dims));
            const double x0 = key[static_cast<size_t>(i)], x1 = key[static_cast<size_t>(i + s.n_dims / 2)];
            key[static_cast<size_t>(i)] = x0 * std::cos(th) - x1 * std::sin(th);
            key[static_cast<size_t>(i + s.n_dims / 2)] = x0 * std::sin(th) + x1 * std::cos(th);
        }
        double score = 0;
        for (int64_t h = 0; h < s.NI; h++) {
            double dd = 0;
            for (int64_t e = 0; e < s.I; e++) dd += double(row(t)[iqo + h * s.I + e]) * key[static_cast<size_t>(e)];
            score += dd > 0 ? dd : 0;
        }
        g_zero_blocks += score == 0;
        for (int64_t i = 0; i < s.ratio; i++) val[static_cast<size_t>(b * s.ratio + i)] = score;
    }
    std::vector<int32_t> idx(static_cast<size_t>(t + 1));
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + s.W(), idx.end(), [&](int32_t a, int32_t c) { return val[static_cast<size_t>(a)] > val[static_cast<size_t>(c)]; });
    std::fill(keep.begin(), keep.end(), 0);
    for (int64_t i = 0; i < s.W(); i++) keep[static_cast<size_t>(idx[static_cast<size_t>(i)])] = 1;
    // A block split at the boundary: some of its positions kept, some not.
    for (int64_t b = 0; b < nb; b++) {
        int64_t c = 0;
        for (int64_t i = 0; i < s.ratio; i++) c += keep[static_cast<size_t>(b * s.ratio + i)];
        if (c > 0 && c < s.ratio) (*n_split)++;
    }
    return keep;
}

// The reference for n tokens at positions 0..n-1 (`dense`: every visible position kept).
static std::vector<double> reference(const shape & s, const std::vector<float> & in, const std::vector<float> & norm, int64_t n, bool dense, int64_t * n_masked, int64_t * n_split) {
    const int64_t Wd = s.in(), G = s.H / s.Hkv;
    auto row = [&](int64_t t) { return in.data() + t * Wd; };
    const int64_t ko = s.q(), vo = ko + s.Hkv * s.D;
    std::vector<double> out(static_cast<size_t>(n * s.q()));
    for (int64_t t = 0; t < n; t++) {
        std::vector<char> sel = dense ? std::vector<char>(static_cast<size_t>(t + 1), 1) : reference_selection(s, in, norm, t, n_split);
        for (int64_t j = 0; j <= t && n_masked; j++) *n_masked += !sel[static_cast<size_t>(j)];
        for (int64_t qh = 0; qh < s.H; qh++) {
            const int64_t h = qh / G;
            std::vector<double> p(static_cast<size_t>(t + 1), 0.0);
            double mx = -INFINITY;
            for (int64_t j = 0; j <= t; j++) {
                if (!sel[static_cast<size_t>(j)]) continue;
                double d = 0;
                for (int64_t i = 0; i < s.D; i++) d += double(row(t)[qh * s.D + i]) * row(j)[ko + h * s.D + i];
                p[static_cast<size_t>(j)] = d / std::sqrt(double(s.D));
                mx = std::max(mx, p[static_cast<size_t>(j)]);
            }
            softmax_mix(p, mx, t, [&](int64_t j) { return sel[static_cast<size_t>(j)] != 0; }, [&](int64_t j) { return row(j) + vo + h * s.D; }, s.D, out.data() + t * s.q() + qh * s.D);
        }
    }
    return out;
}

static void run_case(const shape & s, int64_t n, int64_t split) {
    std::mt19937 rng(11);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> in(static_cast<size_t>(n * s.in()));
    for (auto & v : in) v = nd(rng);
    if (s.relu_ties) {
        // Indexer queries mostly negative against block keys of mixed sign: many blocks' every head
        // dot product is negative, so their scores are exactly 0 and tie.
        const int64_t iqo = s.q() + 2 * s.Hkv * s.D;
        for (int64_t t = 0; t < n; t++)
            for (int64_t e = 0; e < s.NI * s.I; e++) in[static_cast<size_t>(t * s.in() + iqo + e)] = std::abs(in[static_cast<size_t>(t * s.in() + iqo + e)]) * (e % s.I < s.I / 2 ? 1.0f : -1.0f);
    }
    std::vector<float> head(static_cast<size_t>(s.q() * 2)), norm(static_cast<size_t>(s.I));
    for (auto & v : head) v = nd(rng);
    for (auto & v : norm) v = 0.5f + std::abs(nd(rng));
    const std::vector<uint8_t> image = gguf_image({{"head", {s.q(), 2}, head}, {"knorm", {s.I}, norm}});
    std::shared_ptr<gguf_file> file = gguf_file::from_buffer(image.data(), image.size());
    model_params mp;
    mp.n_threads = 2;
    mp.n_ctx = 256;
    mp.n_seq_max = 2;
    mp.kv_type = KAIL_TYPE_F32;
    mp.kv_type_v = KAIL_TYPE_F32;
    int64_t masked = 0, split_blocks = 0;
    g_zero_blocks = 0;
    const std::vector<double> want = reference(s, in, norm, n, false, &masked, &split_blocks);
    const std::vector<double> dense = reference(s, in, norm, n, true, nullptr, nullptr);
    std::vector<float> got, parts, unselected;
    {
        model m(file, make_program(s, true), mp);
        got = run(m, s, in.data(), n, 0);
    }
    {
        // A prefill of `split` tokens, then one token per call (decode).
        model m(file, make_program(s, true), mp);
        parts = run(m, s, in.data(), split, 0);
        for (int64_t t = split; t < n; t++) {
            const std::vector<float> one = run(m, s, in.data() + t * s.in(), 1, static_cast<int32_t>(t));
            parts.insert(parts.end(), one.begin(), one.end());
        }
    }
    // Rolled back into the middle of a block, then continued (and continued on a copy): the block
    // keys kept before the cut are reused, the cut block's is computed again when it is whole.
    std::vector<float> resumed, copied;
    const int64_t cut = (n / s.ratio / 2) * s.ratio + s.ratio / 2 + 1;
    {
        model m(file, make_program(s, true), mp);
        run(m, s, in.data(), n, 0);
        CHECK(m.seq_truncate(0, cut) == cut);
        resumed = run(m, s, in.data() + cut * s.in(), n - cut, static_cast<int32_t>(cut));
        CHECK(m.seq_truncate(0, cut) == cut);
        m.seq_copy(0, 1);
        m.seq_truncate(0, 0);
        copied = run(m, s, in.data() + cut * s.in(), n - cut, static_cast<int32_t>(cut), 1);
    }
    {
        model m(file, make_program(s, false), mp);
        unselected = run(m, s, in.data(), n, 0);
    }
    const int64_t span = s.W();  // positions before this keep every position
    const double e = nmse(got, want, 0, n * s.q());
    const double e_dense_head = nmse(got, dense, 0, std::min(n, span) * s.q());
    const double sparse_vs_dense = n > span ? nmse(got, dense, span * s.q(), n * s.q()) : 0;
    const double unselected_vs_want = nmse(unselected, want, 0, n * s.q());
    std::printf("qsa H %lld/%lld D %lld, indexer %lld x %lld (%lld rotary), top %lld in blocks of %lld, %lld tokens%s: NMSE %.3e (positions dropped: %lld, blocks split at the boundary: %lld, tied at 0: %lld); "
                "dense part %.3e; sparse vs dense %.3e; without the selection %.3e\n",
                (long long)s.H, (long long)s.Hkv, (long long)s.D, (long long)s.NI, (long long)s.I, (long long)s.n_dims, (long long)s.top_k, (long long)s.ratio, (long long)n,
                s.relu_ties ? " (tied scores)" : "", e, (long long)masked, (long long)split_blocks, (long long)g_zero_blocks, e_dense_head, sparse_vs_dense, unselected_vs_want);
    CHECK(e < 1e-12);
    CHECK(e_dense_head < 1e-12);
    CHECK(masked > 0);
    CHECK(split_blocks > 0);
    CHECK(!s.relu_ties || g_zero_blocks > n);
    CHECK(sparse_vs_dense > 1e-4);
    CHECK(unselected_vs_want > 1e-4);
    // Prefill then decode one token at a time: the same bits.
    CHECK(parts.size() == got.size() && std::memcmp(parts.data(), got.data(), got.size() * 4) == 0);
    const size_t tail = static_cast<size_t>((n - cut) * s.q());
    CHECK(resumed.size() == tail && std::memcmp(resumed.data(), got.data() + cut * s.q(), tail * 4) == 0);
    CHECK(copied.size() == tail && std::memcmp(copied.data(), got.data() + cut * s.q(), tail * 4) == 0);
}

int main() {
    // GQA groups of 2, two indexer heads, top 8 in blocks of 4 (W 11).
    run_case({4, 2, 16, 2, 16, 16, 8, 4, false}, 48, 13);
    // Blocks of 3, top 6 (W 8), partial rotary indexer, one indexer head; decode from token 1.
    run_case({2, 1, 16, 1, 32, 16, 6, 3, false}, 40, 1);
    // Many blocks tie at score 0: the partial sort's tie order decides.
    run_case({4, 2, 16, 1, 16, 16, 8, 4, true}, 60, 20);
    // A budget that is not whole blocks (top 5 in blocks of 4).
    run_case({4, 4, 8, 3, 8, 8, 5, 4, false}, 45, 30);
    return test_status();
}
