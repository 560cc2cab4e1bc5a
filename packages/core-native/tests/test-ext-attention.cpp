// Attention over another model's KV cache (model_params::kv_source; a Gemma 4 assistant draft
// over its target, llama.cpp's ctx_other): a draft's attention op with ext_layer L and exclusive 1
// reads the target's layer L (its K/V types, its ring of a sliding window, wrapped and mirrored),
// a query at P seeing the target's positions [max(0, P + 1 - window), P - 1], against a double
// reference over the target's q|k|v rows. The target: one sliding layer (window 8, a ring of
// window + n_batch - 1 rows) and one full layer; the draft: one op over each, its logits through
// the target's tensor ("target:head"). Cases: every length 1..40 of a target decoded token by
// token (the ring wraps at 22), several rows at one position, two sequences in one batch, a row
// alone = in a batch (bit for bit), after the target's truncation, an F16 cache, and the
// refusals (no source, a layer out of range, heads, windows the ring cannot hold, positions
// other than the target's length, an empty target sequence, the draft's own cache, states).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "kail/gguf.h"
#include "kail/model.h"
#include "kail/status.h"
#include "kail/types.h"
#include "op_test_util.h"

using namespace kail;

namespace {

const int64_t H = 4, Hkv = 2, D = 8, W = 8, NB = 4;  // query heads, kv heads, head dim, target window, target n_batch
const double kScale = 0.5;
int64_t in_w() { return H * D + 2 * Hkv * D; }
double d(int64_t x) { return static_cast<double>(x); }

// The target: q|k|v input rows; layer 0 sliding (window W), layer 1 full; logits through "head".
program target_program() {
    program p;
    const int in = add_buf(p, "in", in_w()), q = add_buf(p, "q", H * D), k = add_buf(p, "k", Hkv * D), v = add_buf(p, "v", Hkv * D);
    const int a0 = add_buf(p, "a0", H * D), a1 = add_buf(p, "a1", H * D), o = add_buf(p, "o", H * D, true), logits = add_buf(p, "logits", 2, true);
    add_op(p, OP_INPUT, in, -1);
    add_op(p, OP_COPY, q, in, {{"a_off", 0}, {"n", d(H * D)}});
    add_op(p, OP_COPY, k, in, {{"a_off", d(H * D)}, {"n", d(Hkv * D)}});
    add_op(p, OP_COPY, v, in, {{"a_off", d(H * D + Hkv * D)}, {"n", d(Hkv * D)}});
    for (int l = 0; l < 2; l++) {
        op_desc & a = add_op(p, OP_ATTENTION, l ? a1 : a0, q, {{"layer", d(l)}, {"n_head", d(H)}, {"n_head_kv", d(Hkv)}, {"head_dim", d(D)}, {"window", l ? 0.0 : d(W)}});
        a.b = k;
        a.c = v;
    }
    add_op(p, OP_GATHER_OUT, o, a0);
    add_op(p, OP_MATMUL, logits, o).weights = {{"weight", "head"}};
    p.logits = logits;
    p.hidden = a1;
    p.n_kv_layers = 2;
    p.kv_k_width = {Hkv * D, Hkv * D};
    p.kv_v_width = {Hkv * D, Hkv * D};
    return p;
}

// The draft: a query row (H*D) per token; attention over the target's layer 0 (window wd) and
// layer 1 (full) into hidden = [a0 | a1]; logits = a0 . target's head.
struct draft_opts {
    int64_t wd = W, layer0 = 0, hkv = Hkv;
    bool exclusive = true, own_kv = false;
    std::string head = "target:head";
};
program draft_program(const draft_opts & o = {}) {
    program p;
    const int q = add_buf(p, "q", H * D), hid = add_buf(p, "hid", 2 * H * D), a0 = add_buf(p, "a0", H * D), g = add_buf(p, "g", H * D, true), logits = add_buf(p, "logits", 2, true);
    add_op(p, OP_INPUT, q, -1);
    // (Layer 0's op twice: into hid at 0, and into a0 for the logits.)
    for (int l = 0; l < 3; l++) {
        std::map<std::string, double> ap = {{"ext_layer", l == 1 ? 1.0 : d(o.layer0)}, {"n_head", d(H)}, {"n_head_kv", d(o.hkv)}, {"head_dim", d(D)}, {"scale", kScale}, {"out_off", d(l == 1 ? H * D : 0)}};
        if (o.exclusive) ap["exclusive"] = 1;
        if (l != 1 && o.wd) ap["window"] = d(o.wd);
        add_op(p, OP_ATTENTION, l == 2 ? a0 : hid, q, ap);
    }
    add_op(p, OP_GATHER_OUT, g, a0);
    add_op(p, OP_MATMUL, logits, g).weights = {{"weight", o.head}};
    p.logits = logits;
    p.hidden = hid;
    if (o.own_kv) {
        p.n_kv_layers = 1;
        p.kv_k_width = {Hkv * D};
        p.kv_v_width = {Hkv * D};
    }
    return p;
}

model_params tparams(int n_seq, uint32_t kvt) {
    model_params mp;
    mp.n_threads = 2;
    mp.n_ctx = 64;
    mp.n_seq_max = n_seq;
    mp.n_batch = NB;
    mp.kv_type = kvt;
    mp.kv_type_v = kvt;
    return mp;
}

model_params dparams(const std::shared_ptr<const model> & t, int n_seq = 1) {
    model_params mp;
    mp.n_threads = 2;
    mp.n_ctx = 64;
    mp.n_seq_max = n_seq;
    mp.kv_source = t;
    return mp;
}

// The draft's expected hidden row [a0 | a1] (double) for query q at position P over the target's
// rows (rows[j]: position j's q|k|v), and its logits a0 . head.
std::vector<double> reference(const float * q, int64_t P, const std::vector<const float *> & rows, int64_t wd) {
    std::vector<double> out(static_cast<size_t>(2 * H * D), 0.0);
    const int64_t G = H / Hkv, ko = H * D, vo = ko + Hkv * D;
    for (int l = 0; l < 2; l++) {
        const int64_t lo = l == 0 && wd > 0 ? std::max<int64_t>(0, P + 1 - wd) : 0;
        for (int64_t qh = 0; qh < H; qh++) {
            const int64_t h = qh / G;
            std::vector<double> s;
            double mx = -INFINITY;
            for (int64_t j = lo; j < P; j++) {
                double dot = 0;
                for (int64_t i = 0; i < D; i++) dot += double(q[qh * D + i]) * rows[static_cast<size_t>(j)][ko + h * D + i];
                s.push_back(dot * kScale);
                mx = std::max(mx, s.back());
            }
            double sum = 0;
            for (double & x : s) sum += (x = std::exp(x - mx));
            for (int64_t i = 0; i < D; i++) {
                double o = 0;
                for (int64_t j = lo; j < P; j++) o += s[static_cast<size_t>(j - lo)] / sum * rows[static_cast<size_t>(j)][vo + h * D + i];
                out[static_cast<size_t>(l * H * D + qh * D + i)] = o;
            }
        }
    }
    return out;
}

// One target token (input row) at the next position of sequence s.
void target_step(model & t, const float * row, int s) {
    const int32_t tok = 0, pos = static_cast<int32_t>(t.seq_len(s)), seq = s;
    const uint8_t out = 1;
    batch b;
    b.tokens = &tok;
    b.pos = &pos;
    b.seq = &seq;
    b.output = &out;
    b.n = 1;
    b.embd = row;
    b.embd_width = in_w();
    std::vector<float> logits;
    t.forward(b, logits);
}

// Draft rows (query rows qs, one per entry of seqs / pos); hidden and logits.
void draft_rows(model & dm, const std::vector<float> & qs, const std::vector<int32_t> & seqs, const std::vector<int32_t> & pos, std::vector<float> & hidden, std::vector<float> & logits) {
    std::vector<int32_t> toks(seqs.size(), 0);
    std::vector<uint8_t> outs(seqs.size(), 1);
    batch b;
    b.tokens = toks.data();
    b.pos = pos.data();
    b.seq = seqs.data();
    b.output = outs.data();
    b.n = static_cast<int64_t>(seqs.size());
    b.embd = qs.data();
    b.embd_width = H * D;
    b.want_hidden = true;
    dm.forward(b, logits, &hidden);
}

double max_nmse = 0;

// Draft rows against the reference: hidden and logits.
void check_rows(const std::vector<float> & qs, const std::vector<int32_t> & pos, const std::vector<const std::vector<const float *> *> & rows, const std::vector<float> & hidden,
                const std::vector<float> & logits, const std::vector<float> & head, int64_t wd, double tol, const char * what) {
    // (Each row's hidden state; the logits, two per row, over the call's rows together.)
    std::vector<double> lref;
    for (size_t r = 0; r < pos.size(); r++) {
        const std::vector<double> ref = reference(qs.data() + r * H * D, pos[r], *rows[r], wd);
        const std::vector<float> got(hidden.begin() + static_cast<int64_t>(r) * 2 * H * D, hidden.begin() + static_cast<int64_t>(r + 1) * 2 * H * D);
        for (int c = 0; c < 2; c++) {
            double l = 0;
            for (int64_t i = 0; i < H * D; i++) l += ref[static_cast<size_t>(i)] * head[static_cast<size_t>(c * H * D + i)];
            lref.push_back(l);
        }
        const double e = nmse(got, ref);
        max_nmse = std::max(max_nmse, e);
        if (!(e < tol)) {
            std::fprintf(stderr, "%s: row %zu at %d: NMSE %.3e\n", what, r, pos[r], e);
            g_failures++;
        }
    }
    const double el = nmse(logits, lref);
    max_nmse = std::max(max_nmse, el);
    if (!(el < tol)) {
        std::fprintf(stderr, "%s: logits NMSE %.3e\n", what, el);
        g_failures++;
    }
}

}  // namespace

int main() {
    std::mt19937 rng(7);
    const int64_t N = 40;  // > 2 x ring (11 rows): the ring turns mirrored at 11 and wraps
    const std::vector<float> head = randn(rng, static_cast<size_t>(H * D * 2));
    std::vector<uint8_t> timage = gguf_image({{"head", {H * D, 2}, head}});
    std::vector<uint8_t> dimage = gguf_image({{"unused", {4}, randn(rng, 4)}});
    std::shared_ptr<gguf_file> tfile = gguf_file::from_buffer(timage.data(), timage.size());
    std::shared_ptr<gguf_file> dfile = gguf_file::from_buffer(dimage.data(), dimage.size());

    for (uint32_t kvt : {static_cast<uint32_t>(KAIL_TYPE_F32), static_cast<uint32_t>(KAIL_TYPE_F16)}) {
        const double tol = kvt == KAIL_TYPE_F32 ? 1e-12 : 1e-5;
        max_nmse = 0;
        const std::vector<float> in0 = randn(rng, static_cast<size_t>(N * in_w())), in1 = randn(rng, static_cast<size_t>(N * in_w()));
        std::vector<const float *> rows0, rows1;
        for (int64_t t = 0; t < N; t++) {
            rows0.push_back(in0.data() + t * in_w());
            rows1.push_back(in1.data() + t * in_w());
        }
        auto target = std::make_shared<model>(tfile, target_program(), tparams(2, kvt));
        model dm(dfile, draft_program(), dparams(target, 2));
        // Every length of sequence 0: three rows at its length (the draft's chained steps), and a
        // row alone equal bit for bit to the same row in the batch.
        double effect = 0;
        for (int64_t P = 1; P <= N; P++) {
            target_step(*target, rows0[static_cast<size_t>(P - 1)], 0);
            const std::vector<float> qs = randn(rng, static_cast<size_t>(3 * H * D));
            const std::vector<int32_t> pos(3, static_cast<int32_t>(P)), seqs(3, 0);
            std::vector<float> hid, lg;
            draft_rows(dm, qs, seqs, pos, hid, lg);
            check_rows(qs, pos, {&rows0, &rows0, &rows0}, hid, lg, head, W, tol, "sequence 0");
            std::vector<float> hid1, lg1;
            draft_rows(dm, std::vector<float>(qs.begin() + H * D, qs.begin() + 2 * H * D), {0}, {static_cast<int32_t>(P)}, hid1, lg1);
            CHECK(std::memcmp(hid1.data(), hid.data() + 2 * H * D, hid1.size() * 4) == 0);
            CHECK(std::memcmp(lg1.data(), lg.data() + 2, 8) == 0);
            if (P > W) {
                // The window matters: the reference without it is far.
                const std::vector<double> full = reference(qs.data(), P, rows0, 0);
                effect = std::max(effect, nmse(std::vector<float>(hid.begin(), hid.begin() + H * D), std::vector<double>(full.begin(), full.begin() + H * D)));
            }
            CHECK(dm.seq_len(0) == 0);
            CHECK(target->seq_len(0) == P);
        }
        // Two sequences in one batch, interleaved, at their own lengths (sequence 1 is 13 long).
        for (int64_t t = 0; t < 13; t++) target_step(*target, rows1[static_cast<size_t>(t)], 1);
        {
            const std::vector<float> qs = randn(rng, static_cast<size_t>(4 * H * D));
            const std::vector<int32_t> pos = {13, static_cast<int32_t>(N), 13, static_cast<int32_t>(N)}, seqs = {1, 0, 1, 0};
            std::vector<float> hid, lg;
            draft_rows(dm, qs, seqs, pos, hid, lg);
            check_rows(qs, pos, {&rows1, &rows0, &rows1, &rows0}, hid, lg, head, W, tol, "two sequences");
        }
        // After the target's truncation (its ring still holds the window before 37).
        CHECK(target->seq_truncate(0, N - 3) == N - 3);
        {
            const std::vector<float> qs = randn(rng, static_cast<size_t>(H * D));
            std::vector<float> hid, lg;
            draft_rows(dm, qs, {0}, {static_cast<int32_t>(N - 3)}, hid, lg);
            check_rows(qs, {static_cast<int32_t>(N - 3)}, {&rows0}, hid, lg, head, W, tol, "after truncation");
        }
        std::printf("kv %s: %lld lengths x 3 rows, two sequences, after truncation: max NMSE %.3e (tolerance %.0e); the window's effect %.3e\n", type_name(kvt), (long long)N, max_nmse, tol, effect);
        CHECK(effect > 1e-3);
    }

    // Refusals.
    auto target = std::make_shared<model>(tfile, target_program(), tparams(2, KAIL_TYPE_F32));
    {
        model_params np;
        np.n_threads = 2;
        expect_error("no source", KAIL_E_INVALID_ARG, [&] { model m(dfile, draft_program(), np); }, "no kv_source");
        draft_opts o;
        o.layer0 = 2;
        expect_error("layer out of range", KAIL_E_BAD_MODEL, [&] { model m(dfile, draft_program(o), dparams(target)); }, "which has 2 kv layers");
        o = {};
        o.exclusive = false;
        expect_error("not exclusive", KAIL_E_INVALID_ARG, [&] { model m(dfile, draft_program(o), dparams(target)); }, "exclusive 1");
        o = {};
        o.hkv = 1;
        expect_error("heads", KAIL_E_BAD_MODEL, [&] { model m(dfile, draft_program(o), dparams(target)); }, "do not match the source's kv layer");
        o = {};
        o.wd = W + 1;
        expect_error("window past the ring", KAIL_E_BAD_MODEL, [&] { model m(dfile, draft_program(o), dparams(target)); }, "whose ring holds the last 8 positions");
        o.wd = 0;
        expect_error("full over a ring", KAIL_E_BAD_MODEL, [&] { model m(dfile, draft_program(o), dparams(target)); }, "full attention");
        o.wd = 1;
        expect_error("window 1", KAIL_E_BAD_MODEL, [&] { model m(dfile, draft_program(o), dparams(target)); }, "at least 2");
        o = {};
        o.head = "target:nothing";
        expect_error("target tensor", KAIL_E_BAD_MODEL, [&] { model m(dfile, draft_program(o), dparams(target)); }, "does not load tensor 'nothing'");
        o = {};
        o.own_kv = true;
        expect_error("own cache", KAIL_E_BAD_MODEL, [&] { model m(dfile, draft_program(o), dparams(target)); }, "keeps no cache of its own");
        expect_error("more sequences", KAIL_E_INVALID_ARG, [&] { model m(dfile, draft_program(), dparams(target, 3)); }, "n_seq_max <= 2");
        program tp = target_program();
        tp.ops[4].params["exclusive"] = 1;
        expect_error("exclusive alone", KAIL_E_INVALID_ARG, [&] { model m(tfile, tp, tparams(1, KAIL_TYPE_F32)); }, "needs ext_layer");
        // A source loaded with swa_full keeps every position: a full draft layer over it is fine.
        model_params sf = tparams(1, KAIL_TYPE_F32);
        sf.swa_full = true;
        auto tfull = std::make_shared<model>(tfile, target_program(), sf);
        o = {};
        o.wd = 0;
        model ok(dfile, draft_program(o), dparams(tfull));
    }
    {
        model dm(dfile, draft_program(), dparams(target, 2));
        std::vector<float> hid, lg;
        const std::vector<float> q = randn(rng, static_cast<size_t>(H * D));
        expect_error("empty source", KAIL_E_INVALID_ARG, [&] { draft_rows(dm, q, {0}, {0}, hid, lg); }, "is empty");
        const std::vector<float> in = randn(rng, static_cast<size_t>(3 * in_w()));
        for (int t = 0; t < 3; t++) target_step(*target, in.data() + t * in_w(), 0);
        expect_error("position", KAIL_E_INVALID_ARG, [&] { draft_rows(dm, q, {0}, {2}, hid, lg); }, "not its source model's length (3)");
        expect_error("position after", KAIL_E_INVALID_ARG, [&] { draft_rows(dm, q, {0}, {4}, hid, lg); }, "not its source model's length (3)");
        draft_rows(dm, q, {0}, {3}, hid, lg);
        CHECK(dm.seq_truncate(0, 1) == 1);
        dm.seq_copy(0, 1);
        CHECK(dm.seq_len(0) == 0 && target->seq_len(0) == 3 && target->seq_len(1) == 0);
        expect_error("state", KAIL_E_UNSUPPORTED, [&] { dm.seq_state(0); }, "keeps no state of its own");
        expect_error("set state", KAIL_E_UNSUPPORTED, [&] { dm.set_seq_state(0, nullptr, 0); }, "keeps no state of its own");
        expect_error("shift", KAIL_E_UNSUPPORTED, [&] { dm.seq_shift(0, 0, 1); }, "none of its own to shift");
        // The draft holds its source: the cache outlives the caller's reference.
        std::weak_ptr<model> weak = target;
        target.reset();
        CHECK(!weak.expired());
        draft_rows(dm, q, {0}, {3}, hid, lg);
    }
    if (g_failures) {
        std::fprintf(stderr, "%d failure(s)\n", g_failures);
        return 1;
    }
    std::printf("ok\n");
    return 0;
}
