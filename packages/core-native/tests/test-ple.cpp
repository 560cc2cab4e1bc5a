// qwen4exp's per-layer n-gram embeddings (PLE) against straightforward references: the ple_ngram op
// (the n-gram hash of a token and the ones before it in its sequence, reset at EOS, 64-bit
// multipliers, per-head row ranges, the rows gathered), the ple_gate op (the signed square root
// of a scaled per-stream dot product through a sigmoid, in double) and ssm_conv with a dilation
// (PLE's depthwise causal convolution, taps n_gram positions apart, then SiLU, in double); each
// over two forward calls and two sequences, and the checkpoint's record/replay: a sequence taken
// back over rejected tokens continues bit for bit as one that never saw them. The model runs a
// program of its own over a GGUF built in memory; the op's output is the hidden buffer.
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kail/gguf.h"
#include "kail/model.h"
#include "kail/status.h"
#include "kail/types.h"
#include "op_test_util.h"

using namespace kail;

struct runner {
    std::vector<uint8_t>   image;
    program                prog;
    std::unique_ptr<model> make() const {
        std::shared_ptr<gguf_file> file = gguf_file::from_buffer(image.data(), image.size());
        model_params mp;
        mp.n_threads = 2;
        mp.n_ctx = 64;
        mp.n_seq_max = 2;
        return std::make_unique<model>(file, prog, mp);
    }
};

// The hidden rows for tokens (or input rows `in`, `width` each) at positions pos0.. of sequence seq.
static std::vector<float> run(model & m, const std::vector<int32_t> & toks, int32_t pos0, int32_t seq, const float * in = nullptr, int64_t width = 0) {
    return run_hidden(m, toks.data(), static_cast<int64_t>(toks.size()), pos0, seq, in, width);
}

// ---- ple_ngram ------------------------------------------------------------------------------

struct ngram_shape {
    int64_t  n_gram, per_gram, hd, eos;
    uint64_t mult[8];
    int64_t  nh() const { return (n_gram - 1) * per_gram; }
};

static runner ngram_runner(const ngram_shape & s, const std::vector<int64_t> & off, const std::vector<int64_t> & voc, std::mt19937 & rng, std::vector<float> & table) {
    int64_t rows = 0;
    for (int64_t h = 0; h < s.nh(); h++) rows = std::max(rows, off[static_cast<size_t>(h)] + voc[static_cast<size_t>(h)]);
    table = randn(rng, static_cast<size_t>(rows * s.hd));
    runner r;
    r.image = gguf_image({{"table", {s.hd, rows}, table}, {"head", {s.nh() * s.hd, 2}, randn(rng, static_cast<size_t>(s.nh() * s.hd * 2))}});
    program & p = r.prog;
    const int emb = add_buf(p, "emb", s.nh() * s.hd), o = add_buf(p, "o", s.nh() * s.hd, true), logits = add_buf(p, "logits", 2, true);
    op_desc & g = add_op(p, OP_PLE_NGRAM, emb, -1, {{"layer", 0}, {"n_gram", double(s.n_gram)}, {"per_gram", double(s.per_gram)}, {"eos", double(s.eos)}});
    for (int64_t j = 0; j < s.n_gram; j++) {
        g.params["mult_lo_" + std::to_string(j)] = double(s.mult[j] & 0xffffffffu);
        g.params["mult_hi_" + std::to_string(j)] = double(s.mult[j] >> 32);
    }
    for (int64_t h = 0; h < s.nh(); h++) {
        g.params["off_" + std::to_string(h)] = double(off[static_cast<size_t>(h)]);
        g.params["voc_" + std::to_string(h)] = double(voc[static_cast<size_t>(h)]);
    }
    g.weights = {{"weight", "table"}};
    add_op(p, OP_GATHER_OUT, o, emb);
    add_op(p, OP_MATMUL, logits, o).weights = {{"weight", "head"}};
    p.logits = logits;
    p.hidden = emb;
    p.rs_width = {s.n_gram - 1};
    return r;
}

// The hash as the reference model writes it: token p's window is t_p, t_{p-1}, ..., a missing one
// or any at or before an EOS (other than t_p) read as EOS; for each n-gram size the XOR of the
// products (mod 2^64), each head's row that mod its vocabulary plus its offset.
static std::vector<float> ngram_reference(const ngram_shape & s, const std::vector<int64_t> & off, const std::vector<int64_t> & voc, const std::vector<float> & table, const std::vector<int32_t> & seq_toks) {
    std::vector<float> out;
    for (size_t p = 0; p < seq_toks.size(); p++) {
        std::vector<uint64_t> w(static_cast<size_t>(s.n_gram));
        bool reset = false;
        for (int64_t k = 0; k < s.n_gram; k++) {
            const int64_t i = static_cast<int64_t>(p) - k;
            if (k > 0 && (i < 0 || seq_toks[static_cast<size_t>(i)] == s.eos)) reset = true;
            w[static_cast<size_t>(k)] = static_cast<uint64_t>(reset ? s.eos : seq_toks[static_cast<size_t>(i)]);
        }
        for (int64_t n = 2; n <= s.n_gram; n++) {
            uint64_t h = 0;
            for (int64_t k = 0; k < n; k++) h ^= w[static_cast<size_t>(k)] * s.mult[k];
            for (int64_t g = 0; g < s.per_gram; g++) {
                const size_t head = static_cast<size_t>((n - 2) * s.per_gram + g);
                const uint64_t row = h % static_cast<uint64_t>(voc[head]) + static_cast<uint64_t>(off[head]);
                out.insert(out.end(), table.begin() + static_cast<long>(row * s.hd), table.begin() + static_cast<long>((row + 1) * s.hd));
            }
        }
    }
    return out;
}

static void test_ngram() {
    std::mt19937 rng(11);
    // 45-bit odd multipliers (the checkpoint's size), so the products wrap past 2^64.
    const ngram_shape s{3, 2, 8, 5, {0x1f3a5c7e9b1dULL, 0x15b7d9f13579ULL, 0x1abcdef12345ULL}};
    const std::vector<int64_t> off = {0, 37, 90, 150}, voc = {37, 53, 60, 41};
    std::vector<float> table;
    const runner r = ngram_runner(s, off, voc, rng, table);
    // Sequence 0 in two calls with EOS (5) inside; sequence 1 interleaved between them.
    const std::vector<int32_t> a = {17, 900, 5, 23, 23, 1000, 5, 5, 7, 3, 61}, b = {4, 8, 15, 16, 23, 42};
    auto m = r.make();
    std::vector<float> got = run(*m, {a.begin(), a.begin() + 4}, 0, 0);
    const std::vector<float> gb = run(*m, b, 0, 1);
    const std::vector<float> rest = run(*m, {a.begin() + 4, a.end()}, 4, 0);
    got.insert(got.end(), rest.begin(), rest.end());
    const std::vector<float> want = ngram_reference(s, off, voc, table, a), wantb = ngram_reference(s, off, voc, table, b);
    CHECK(got.size() == want.size() && std::memcmp(got.data(), want.data(), got.size() * 4) == 0);
    CHECK(gb.size() == wantb.size() && std::memcmp(gb.data(), wantb.data(), gb.size() * 4) == 0);
    std::printf("ple_ngram n_gram %lld x %lld heads: %zu rows equal to the reference\n", (long long) s.n_gram, (long long) s.per_gram, (a.size() + b.size()) * size_t(s.nh()));

    // Rollback: 3 tokens, a checkpoint, 4 more taken back to 1, then 2 others = a fresh run of the accepted ones.
    auto x = r.make();
    run(*x, {17, 900, 5}, 0, 0);
    x->seq_keep_rollback(0, true);
    run(*x, {23, 24, 25, 26}, 3, 0);
    CHECK(x->seq_truncate(0, 4) == 4);
    const std::vector<float> after = run(*x, {77, 5}, 4, 0);
    auto y = r.make();
    run(*y, {17, 900, 5, 23}, 0, 0);
    const std::vector<float> fresh = run(*y, {77, 5}, 4, 0);
    CHECK(after.size() == fresh.size() && std::memcmp(after.data(), fresh.data(), after.size() * 4) == 0);
    CHECK(x->seq_states(0) == y->seq_states(0));

    // A table too short for the heads' ranges is refused.
    runner bad = r;
    bad.prog.ops[0].params["voc_3"] = 1000;
    try {
        bad.make();
        std::fprintf(stderr, "short table: no error\n");
        g_failures++;
    } catch (const error & e) {
        if (e.code() != KAIL_E_BAD_MODEL || std::string(e.what()).find("PLE n-gram table") == std::string::npos) {
            std::fprintf(stderr, "short table: unexpected error %d: %s\n", static_cast<int>(e.code()), e.what());
            g_failures++;
        }
    }
}

// ---- ple_gate and the dilated convolution ----------------------------------------------------

static void test_gate_and_conv() {
    std::mt19937 rng(5);
    const int64_t n = 16, hc = 3, C = n * hc, K = 3, dil = 2;
    const std::vector<float> taps = randn(rng, static_cast<size_t>(K * C), 0.5f);
    runner r;
    r.image = gguf_image({{"taps", {K, C}, taps}, {"head", {hc + C, 2}, randn(rng, static_cast<size_t>((hc + C) * 2))}});
    program & p = r.prog;
    const int in = add_buf(p, "in", 2 * C), a = add_buf(p, "a", C), b = add_buf(p, "b", C), gate = add_buf(p, "gate", hc), conv = add_buf(p, "conv", C);
    const int both = add_buf(p, "both", hc + C), o = add_buf(p, "o", hc + C, true), logits = add_buf(p, "logits", 2, true);
    const float scale = 1.0f / std::sqrt(float(n));
    add_op(p, OP_INPUT, in, -1);
    add_op(p, OP_COPY, a, in, {{"n", double(C)}});
    add_op(p, OP_COPY, b, in, {{"a_off", double(C)}, {"n", double(C)}});
    add_op(p, OP_PLE_GATE, gate, a, {{"n", double(n)}, {"n_group", double(hc)}, {"scale", scale}}).b = b;
    add_op(p, OP_SSM_CONV, conv, a, {{"layer", 0}, {"d_conv", double(K)}, {"dilation", double(dil)}, {"silu", 1}}).weights = {{"weight", "taps"}};
    add_op(p, OP_COPY, both, gate, {{"n", double(hc)}});
    add_op(p, OP_COPY, both, conv, {{"n", double(C)}, {"out_off", double(hc)}});
    add_op(p, OP_GATHER_OUT, o, both);
    add_op(p, OP_MATMUL, logits, o).weights = {{"weight", "head"}};
    p.logits = logits;
    p.hidden = both;
    p.rs_width = {(K - 1) * dil * C};

    const int64_t T = 9;
    std::vector<float> rows = randn(rng, static_cast<size_t>(T * 2 * C));
    // A small dot product in stream 1 of row 2 (the clamp at 1e-6) and an exact zero in stream 2 of row 3 (sgn 0).
    for (int64_t i = 0; i < n; i++) rows[static_cast<size_t>(2 * 2 * C + C + n + i)] = 0.0f;
    rows[static_cast<size_t>(2 * 2 * C + C + n)] = 1e-9f;
    for (int64_t i = 0; i < n; i++) rows[static_cast<size_t>(3 * 2 * C + 2 * n + i)] = 0.0f;
    auto m = r.make();
    std::vector<float> got = run(*m, std::vector<int32_t>(5, 0), 0, 0, rows.data(), 2 * C);
    const std::vector<float> rest = run(*m, std::vector<int32_t>(T - 5, 0), 5, 0, rows.data() + 5 * 2 * C, 2 * C);
    got.insert(got.end(), rest.begin(), rest.end());

    double eg = 0, ng = 0, ec = 0, nc = 0;
    for (int64_t t = 0; t < T; t++) {
        const float * ra = rows.data() + t * 2 * C;
        for (int64_t c = 0; c < hc; c++) {
            double s = 0;
            for (int64_t i = 0; i < n; i++) s += double(ra[c * n + i]) * double(ra[C + c * n + i]);
            s *= double(scale);
            const double sg = s > 0 ? 1.0 : s < 0 ? -1.0 : 0.0;
            const double want = 1.0 / (1.0 + std::exp(-sg * std::sqrt(std::max(std::fabs(s), 1e-6))));
            const double d = got[static_cast<size_t>(t * (hc + C) + c)] - want;
            eg += d * d;
            ng += want * want;
        }
        for (int64_t ch = 0; ch < C; ch++) {
            // out[t] = silu(sum_k w[k] x[t - (K - 1 - k) dil]), zeros before the sequence.
            double s = 0;
            for (int64_t k = 0; k < K; k++) {
                const int64_t src = t - (K - 1 - k) * dil;
                if (src >= 0) s += double(taps[static_cast<size_t>(ch * K + k)]) * double(rows[static_cast<size_t>(src * 2 * C + ch)]);
            }
            const double want = s / (1.0 + std::exp(-s));
            const double d = got[static_cast<size_t>(t * (hc + C) + hc + ch)] - want;
            ec += d * d;
            nc += want * want;
        }
    }
    std::printf("ple_gate %lld streams of %lld: NMSE vs reference %.2e; ssm_conv %lld taps dilation %lld: NMSE %.2e\n", (long long) hc, (long long) n, eg / ng, (long long) K, (long long) dil, ec / nc);
    CHECK(ng > 0 && nc > 0);
    CHECK(eg / ng < 1e-12);
    CHECK(ec / nc < 1e-12);
    // The clamped stream: sigmoid(sqrt(1e-6)) (its dot product is ~1e-9 / 4 times a value).
    CHECK(std::fabs(got[static_cast<size_t>(2 * (hc + C) + 1)] - 1.0 / (1.0 + std::exp(-1e-3 * (rows[static_cast<size_t>(2 * 2 * C + n)] > 0 ? 1 : -1)))) < 1e-6);
    CHECK(got[static_cast<size_t>(3 * (hc + C) + 2)] == 0.5f);

    // Rollback of the dilated state: keep, run 3, take back 2, run 2 others = a fresh run.
    auto x = r.make();
    run(*x, std::vector<int32_t>(4, 0), 0, 0, rows.data(), 2 * C);
    x->seq_keep_rollback(0, true);
    run(*x, std::vector<int32_t>(3, 0), 4, 0, rows.data() + 4 * 2 * C, 2 * C);
    CHECK(x->seq_truncate(0, 5) == 5);
    const std::vector<float> after = run(*x, std::vector<int32_t>(2, 0), 5, 0, rows.data() + 7 * 2 * C, 2 * C);
    auto y = r.make();
    run(*y, std::vector<int32_t>(5, 0), 0, 0, rows.data(), 2 * C);
    const std::vector<float> fresh = run(*y, std::vector<int32_t>(2, 0), 5, 0, rows.data() + 7 * 2 * C, 2 * C);
    CHECK(after.size() == fresh.size() && std::memcmp(after.data(), fresh.data(), after.size() * 4) == 0);
    CHECK(x->seq_states(0) == y->seq_states(0));
}

int main() {
    test_ngram();
    test_gate_and_conv();
    return test_status("test-ple");
}
