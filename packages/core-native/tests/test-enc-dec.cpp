// Encoder-decoder passes (T5): ops tagged pass 1 run only in a pass over empty sequences (the
// encoder), pass 2 only in later passes (the decoder). The encoder pass stores each row's k and v
// with a store_only attention op; the decoder's rows, at the positions after the encoder's, attend
// causally over their own positions only (from enc_len) and, through a cross reader, over every
// encoder position. Against a double reference: the decoder's rows over two passes, two sequences
// encoded and decoded side by side, and the refusals (logits from an encoding pass, a batch mixing
// both, context shift, sequence state; truncation into the encoder's rows clears the sequence).
// The cache holds each row once: the encoder's own self-attention rows (layer 2) for the encoding
// pass only, exactly enc_len cross rows, the decoder's rows from row 0 (at most n_ctx - enc_len);
// the budget (kv_bytes_capacity) is the most that makes over any prompt length.
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

static const int64_t H = 4, Hkv = 2, D = 8, W = H * D, KW = Hkv * D, IN = W + 2 * KW;

// in = q|k|v per row; o = self-attention (columns [0, W)) | cross-attention ([W, 2W)).
static program make_program() {
    program p;
    auto d = [](int64_t x) { return static_cast<double>(x); };
    const int in = add_buf(p, "in", IN), q = add_buf(p, "q", W), k = add_buf(p, "k", KW), v = add_buf(p, "v", KW);
    const int o = add_buf(p, "o", 2 * W), go = add_buf(p, "go", 2 * W, true), logits = add_buf(p, "logits", 2, true), eo = add_buf(p, "eo", W);
    add_op(p, OP_INPUT, in, -1);
    add_op(p, OP_COPY, q, in, {{"a_off", 0}, {"n", d(W)}});
    add_op(p, OP_COPY, k, in, {{"a_off", d(W)}, {"n", d(KW)}});
    add_op(p, OP_COPY, v, in, {{"a_off", d(W + KW)}, {"n", d(KW)}});
    const std::map<std::string, double> heads = {{"n_head", d(H)}, {"n_head_kv", d(Hkv)}, {"head_dim", d(D)}};
    auto attn = [&](int out, int a, std::map<std::string, double> extra) -> op_desc & {
        std::map<std::string, double> ap = heads;
        for (const auto & [key, val] : extra) ap[key] = val;
        return add_op(p, OP_ATTENTION, out, a, ap);
    };
    // The encoder's own self-attention (both ways; its output unused here), then the cross K/V.
    op_desc & enc = attn(eo, q, {{"layer", 2}, {"causal", 0}, {"pass", 1}});
    enc.b = k;
    enc.c = v;
    op_desc & store = attn(o, k, {{"layer", 0}, {"store_only", 1}, {"pass", 1}});
    store.b = k;
    store.c = v;
    op_desc & self = attn(o, q, {{"layer", 1}, {"pass", 2}});
    self.b = k;
    self.c = v;
    attn(o, q, {{"layer", 0}, {"cross", 1}, {"out_off", d(W)}, {"pass", 2}});
    add_op(p, OP_GATHER_OUT, go, o, {{"pass", 2}});
    add_op(p, OP_MATMUL, logits, go, {{"pass", 2}}).weights = {{"weight", "head"}};
    p.logits = logits;
    p.hidden = o;
    p.n_kv_layers = 3;
    p.kv_k_width = {KW, KW, KW};
    p.kv_v_width = {KW, KW, KW};
    return p;
}

// Query q (W floats) over rows' k and v (at offsets W and W + KW of each row), scale 1/sqrt(D), in double.
static void attend(const float * q, const std::vector<const float *> & rows, double * out) {
    const int64_t G = H / Hkv;
    for (int64_t qh = 0; qh < H; qh++) {
        const int64_t h = qh / G;
        std::vector<double> p(rows.size());
        double mx = -INFINITY;
        for (size_t j = 0; j < rows.size(); j++) {
            double s = 0;
            for (int64_t i = 0; i < D; i++) s += double(q[qh * D + i]) * rows[j][W + h * D + i];
            p[j] = s / std::sqrt(double(D));
            mx = std::max(mx, p[j]);
        }
        double sum = 0;
        for (double & x : p) sum += (x = std::exp(x - mx));
        for (int64_t i = 0; i < D; i++) {
            double acc = 0;
            for (size_t j = 0; j < rows.size(); j++) acc += p[j] / sum * rows[j][W + KW + h * D + i];
            out[qh * D + i] = acc;
        }
    }
}

// The decoder rows' reference: self over dec[0..j], cross over every encoder row.
static std::vector<double> reference(const std::vector<float> & enc, int64_t n_enc, const std::vector<float> & dec, int64_t n_dec) {
    std::vector<const float *> er, dr;
    for (int64_t t = 0; t < n_enc; t++) er.push_back(enc.data() + t * IN);
    std::vector<double> out(static_cast<size_t>(n_dec * 2 * W));
    for (int64_t j = 0; j < n_dec; j++) {
        dr.push_back(dec.data() + j * IN);
        attend(dec.data() + j * IN, dr, out.data() + j * 2 * W);
        attend(dec.data() + j * IN, er, out.data() + j * 2 * W + W);
    }
    return out;
}

struct rows_of {
    const float * in;
    int32_t pos0, seq;
    int64_t n;
};

// One forward pass over the rows of several sequences (in order); hidden rows when `out`.
static std::vector<float> pass(model & m, const std::vector<rows_of> & parts, bool out) {
    std::vector<int32_t> tok, pos, seq;
    std::vector<uint8_t> o;
    std::vector<float> in;
    for (const rows_of & r : parts)
        for (int64_t t = 0; t < r.n; t++) {
            tok.push_back(0);
            pos.push_back(r.pos0 + static_cast<int32_t>(t));
            seq.push_back(r.seq);
            o.push_back(out ? 1 : 0);
            in.insert(in.end(), r.in + t * IN, r.in + (t + 1) * IN);
        }
    batch b;
    b.tokens = tok.data();
    b.pos = pos.data();
    b.seq = seq.data();
    b.output = o.data();
    b.n = static_cast<int64_t>(tok.size());
    b.embd = in.data();
    b.embd_width = IN;
    b.want_hidden = out;
    std::vector<float> logits, hidden;
    m.forward(b, logits, &hidden);
    return hidden;
}

static std::shared_ptr<gguf_file> head_file(std::vector<uint8_t> & image) {
    std::mt19937 rng(3);
    image = gguf_image({{"head", {2 * W, 2}, randn(rng, static_cast<size_t>(2 * W * 2))}});
    return gguf_file::from_buffer(image.data(), image.size());
}

static void run_one_sequence() {
    const int64_t n_enc = 30, n_dec = 12, split = 5;
    std::mt19937 rng(7);
    const std::vector<float> enc = randn(rng, static_cast<size_t>(n_enc * IN)), dec = randn(rng, static_cast<size_t>(n_dec * IN));
    std::vector<uint8_t> image;
    model m(head_file(image), make_program(), attention_test_params(64));
    pass(m, {{enc.data(), 0, 0, n_enc}}, false);
    CHECK(m.seq_len(0) == n_enc);
    std::vector<float> got = pass(m, {{dec.data(), static_cast<int32_t>(n_enc), 0, split}}, true);
    const std::vector<float> tail = pass(m, {{dec.data() + split * IN, static_cast<int32_t>(n_enc + split), 0, n_dec - split}}, true);
    got.insert(got.end(), tail.begin(), tail.end());
    const std::vector<double> want = reference(enc, n_enc, dec, n_dec);
    // Without the encoder's rows the cross half would differ: another encoder input moves it.
    std::vector<float> enc2 = enc;
    for (float & x : enc2) x = -x;
    const std::vector<double> other = reference(enc2, n_enc, dec, n_dec);
    const double e = nmse(got, want), moved = nmse(got, other);
    std::printf("enc-dec: %lld encoder rows, %lld decoder rows in two passes: NMSE %.3e; another encoder input moves them %.3e\n", (long long)n_enc, (long long)n_dec, e, moved);
    CHECK(e < 1e-12);
    CHECK(moved > 1e-3);
}

// Bytes per cached position of one layer (F32 K and V rows of Hkv heads).
static const uint64_t ROW = 2 * KW * sizeof(float);

static void run_cache_rows() {
    const int64_t n_ctx = 64, n_enc = 30;
    std::mt19937 rng(13);
    const std::vector<float> enc = randn(rng, static_cast<size_t>(n_enc * IN)), dec = randn(rng, static_cast<size_t>((n_ctx - n_enc) * IN));
    std::vector<uint8_t> image;
    model m(head_file(image), make_program(), attention_test_params(n_ctx, 2));
    // Per sequence: encoding a whole context (encoder + cross rows) or decoding all but one
    // position (1 cross row, 63 decoder rows): max(64 x 2, 1 + 63) rows; not 3 x 64.
    const uint64_t cap = m.kv_bytes_capacity();
    std::printf("enc-dec cache: budget %llu bytes for 2 sequences of %lld positions (%llu rows of %llu bytes each)\n", (unsigned long long)cap, (long long)n_ctx, (unsigned long long)(cap / ROW / 2), (unsigned long long)ROW);
    CHECK(cap == 2 * 2 * n_ctx * ROW);
    pass(m, {{enc.data(), 0, 0, n_enc}}, false);
    const uint64_t encoded = m.kv_bytes_used();
    std::printf("enc-dec cache: after encoding %lld positions %llu bytes (%llu rows)\n", (long long)n_enc, (unsigned long long)encoded, (unsigned long long)(encoded / ROW));
    CHECK(encoded == n_enc * ROW);  // the cross rows only
    pass(m, {{dec.data(), static_cast<int32_t>(n_enc), 0, 5}}, true);
    const uint64_t five = m.kv_bytes_used();
    std::printf("enc-dec cache: after 5 decoder rows %llu bytes (%llu rows)\n", (unsigned long long)five, (unsigned long long)(five / ROW));
    CHECK(five == (n_enc + 16) * ROW);  // the decoder's first 16 rows (the growth's first step)
    // The decoder fills the context: its rows end at n_ctx - n_enc.
    for (int64_t j = 5; j < n_ctx - n_enc; j++) pass(m, {{dec.data() + j * IN, static_cast<int32_t>(n_enc + j), 0, 1}}, true);
    CHECK(m.seq_len(0) == n_ctx);
    CHECK(m.kv_bytes_used() == static_cast<uint64_t>(n_ctx) * ROW);
    expect_error("a position past the context", KAIL_E_INVALID_ARG, [&] { pass(m, {{dec.data(), static_cast<int32_t>(n_ctx), 0, 1}}, true); }, "past the context length");
    // Two prompts encoded together: each its own cross rows.
    m.seq_truncate(0, 0);
    CHECK(m.kv_bytes_used() == 0);
    pass(m, {{enc.data(), 0, 0, n_enc}, {enc.data(), 0, 1, 7}}, false);
    CHECK(m.kv_bytes_used() == (n_enc + 7) * ROW);
    // An encoding pass the budget stops halfway (its encoder and cross rows at once) leaves its
    // sequence empty, holding nothing; a shorter prompt then fits.
    model_params mp = attention_test_params(n_ctx);
    mp.kv_max_bytes = 40 * ROW;
    model small(head_file(image), make_program(), mp);
    expect_error("an encoding pass over the budget", KAIL_E_BUDGET, [&] { pass(small, {{enc.data(), 0, 0, n_enc}}, false); }, "KV cache budget exceeded");
    CHECK(small.seq_len(0) == 0);
    CHECK(small.kv_bytes_used() == 0);
    pass(small, {{enc.data(), 0, 0, 20}}, false);
    CHECK(small.kv_bytes_used() == 20 * ROW);
}

static void run_two_sequences() {
    const int64_t n0 = 30, n1 = 17, n_dec = 4;
    std::mt19937 rng(11);
    const std::vector<float> e0 = randn(rng, static_cast<size_t>(n0 * IN)), e1 = randn(rng, static_cast<size_t>(n1 * IN));
    const std::vector<float> d0 = randn(rng, static_cast<size_t>(n_dec * IN)), d1 = randn(rng, static_cast<size_t>(n_dec * IN));
    std::vector<uint8_t> image;
    model m(head_file(image), make_program(), attention_test_params(64, 2));
    pass(m, {{e1.data(), 0, 1, n1}, {e0.data(), 0, 0, n0}}, false);
    std::vector<float> g0, g1;
    for (int64_t j = 0; j < n_dec; j++) {
        const std::vector<float> h = pass(m, {{d0.data() + j * IN, static_cast<int32_t>(n0 + j), 0, 1}, {d1.data() + j * IN, static_cast<int32_t>(n1 + j), 1, 1}}, true);
        g0.insert(g0.end(), h.begin(), h.begin() + 2 * W);
        g1.insert(g1.end(), h.begin() + 2 * W, h.end());
    }
    const double a = nmse(g0, reference(e0, n0, d0, n_dec)), b = nmse(g1, reference(e1, n1, d1, n_dec));
    std::printf("enc-dec: two sequences encoded in one pass, decoded side by side: NMSE %.3e / %.3e\n", a, b);
    CHECK(a < 1e-12);
    CHECK(b < 1e-12);
}

static void run_refusals() {
    const int64_t n = 6;
    std::mt19937 rng(5);
    const std::vector<float> in = randn(rng, static_cast<size_t>(n * IN));
    std::vector<uint8_t> image;
    model m(head_file(image), make_program(), attention_test_params(32, 2));
    expect_error("logits from an encoding pass", KAIL_E_INVALID_ARG, [&] { pass(m, {{in.data(), 0, 0, n}}, true); }, "encodes its prompt and returns no logits");
    CHECK(m.seq_len(0) == 0);
    pass(m, {{in.data(), 0, 0, n}}, false);
    expect_error("a batch mixing encoding and decoding", KAIL_E_INVALID_ARG, [&] { pass(m, {{in.data(), static_cast<int32_t>(n), 0, 1}, {in.data(), 0, 1, n}}, true); }, "in separate batches");
    expect_error("context shift", KAIL_E_UNSUPPORTED, [&] { m.seq_shift(0, 1, 2); }, "encoder-decoder");
    expect_error("sequence state", KAIL_E_UNSUPPORTED, [&] { m.seq_state(0); }, "encoder-decoder");
    pass(m, {{in.data(), static_cast<int32_t>(n), 0, 2}}, true);
    CHECK(m.seq_truncate(0, n + 1) == n + 1);  // within the decoder's rows: kept
    CHECK(m.seq_truncate(0, n - 1) == 0);      // into the encoder's: cleared
    // Cleared, the sequence encodes again.
    pass(m, {{in.data(), 0, 0, n}}, false);
    CHECK(m.seq_len(0) == n);
}

int main() {
    run_one_sequence();
    run_two_sequences();
    run_refusals();
    run_cache_rows();
    return test_status();
}
