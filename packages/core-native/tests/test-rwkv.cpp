// RWKV's recurrent ops against straightforward references: rwkv_wkv7 and rwkv_wkv6 (RWKV-7's and
// RWKV-6's WKV, as ggml_rwkv_wkv7 / ggml_rwkv_wkv6 compute them) in double precision over two
// forward calls, and token_shift (each token's previous row in its sequence); each with the
// checkpoint's record/replay (a sequence taken back over rejected tokens continues bit for bit as
// one that never saw them), with two sequences interleaved in one batch (each as when run alone),
// and with seq_copy, seq_state / set_seq_state and seq_clear. The model runs a program of its own
// over a GGUF built in memory: the input rows carry the op's input; its output is the hidden buffer.
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

enum class kind { wkv7, wkv6, shift, gla };  // gla: rwkv_wkv6 with gla_scale (ggml_gated_linear_attn)

struct shape {
    kind    k;
    int64_t H, D;  // wkv7: heads and head size; shift: D is the row width
    int64_t out() const { return k == kind::shift ? D : H * D; }
    int64_t in() const { return k == kind::wkv7 ? 6 * H * D : k == kind::wkv6 || k == kind::gla ? 4 * H * D : D; }
    double gla_scale() const { return 1.0 / std::sqrt(static_cast<double>(D)); }
};

// The logits head, and RWKV-6's time_first u (C values; `u_width` other than C: a misshaped one).
static std::vector<uint8_t> make_image(const shape & s, std::mt19937 & rng, int64_t u_width = 0) {
    std::vector<f32_tensor> ts = {{"head", {s.out(), 2}, randn(rng, static_cast<size_t>(s.out() * 2))}};
    if (s.k == kind::wkv6) ts.push_back({"u", {u_width ? u_width : s.H * s.D}, randn(rng, static_cast<size_t>(u_width ? u_width : s.H * s.D), 0.5f)});
    return gguf_image(ts);
}

// input -> the op (hidden) -> two logits per output row; `in_width` and `rs` other than the
// shape's make a malformed program.
static program make_program(const shape & s, int64_t in_width = 0, int64_t rs = 0) {
    program p;
    const int in = add_buf(p, "in", in_width ? in_width : s.in()), core = add_buf(p, "core", s.out());
    const int o = add_buf(p, "o", s.out(), true), logits = add_buf(p, "logits", 2, true);
    add_op(p, OP_INPUT, in, -1);
    if (s.k == kind::wkv7) add_op(p, OP_RWKV_WKV7, core, in, {{"layer", 0}, {"n_head", static_cast<double>(s.H)}, {"head_dim", static_cast<double>(s.D)}});
    else if (s.k == kind::wkv6) add_op(p, OP_RWKV_WKV6, core, in, {{"layer", 0}, {"n_head", static_cast<double>(s.H)}, {"head_dim", static_cast<double>(s.D)}}).weights = {{"u", "u"}};
    else if (s.k == kind::gla) add_op(p, OP_RWKV_WKV6, core, in, {{"layer", 0}, {"n_head", static_cast<double>(s.H)}, {"head_dim", static_cast<double>(s.D)}, {"gla_scale", static_cast<double>(static_cast<float>(s.gla_scale()))}});
    else add_op(p, OP_TOKEN_SHIFT, core, in, {{"layer", 0}});
    end_with_head(p, core, o, logits);
    p.rs_width = {rs ? rs : (s.k == kind::shift ? s.D : s.H * s.D * s.D)};
    return p;
}

static std::unique_ptr<model> load(const std::vector<uint8_t> & image, const program & p) {
    return load_test_model(image, p, 64, [](model_params & mp) { mp.n_seq_max = 2; });
}

static std::vector<float> run(model & m, const shape & s, const float * in, int64_t n, int32_t pos0, int32_t seq = 0) { return run_hidden(m, nullptr, n, pos0, seq, in, s.in()); }

// Input rows as RWKV-7 makes them: r, k, v normal; w = exp(-0.606531 sigmoid(z)) (its decay);
// a = -kk, b = kk g with kk a unit vector per head and g in (0, 1) (the in-context learning rate).
static std::vector<float> make_inputs(const shape & s, int64_t n, std::mt19937 & rng) {
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::uniform_real_distribution<float> ud(0.0f, 1.0f);
    std::vector<float> in(static_cast<size_t>(n * s.in()));
    if (s.k == kind::shift) {
        for (auto & v : in) v = nd(rng);
        return in;
    }
    const int64_t C = s.H * s.D;
    if (s.k == kind::wkv6 || s.k == kind::gla) {
        // r, k, v normal; w = exp(-exp(z)) (RWKV-6's data-dependent decay).
        for (int64_t t = 0; t < n; t++) {
            float * row = in.data() + t * s.in();
            for (int64_t c = 0; c < 3 * C; c++) row[c] = (c >= C && c < 2 * C ? 0.5f : 1.0f) * nd(rng);
            for (int64_t c = 0; c < C; c++) row[3 * C + c] = std::exp(-std::exp(-1.0f + 0.7f * nd(rng)));
        }
        return in;
    }
    for (int64_t t = 0; t < n; t++) {
        float * row = in.data() + t * s.in();
        for (int64_t c = 0; c < C; c++) {
            row[c] = nd(rng);
            row[C + c] = std::exp(-0.606531f / (1.0f + std::exp(-2.0f * nd(rng))));
            row[2 * C + c] = 0.5f * nd(rng);
            row[3 * C + c] = nd(rng);
        }
        for (int64_t h = 0; h < s.H; h++) {
            std::vector<float> kk(static_cast<size_t>(s.D));
            double ss = 0;
            for (auto & v : kk) {
                v = nd(rng);
                ss += double(v) * v;
            }
            for (int64_t j = 0; j < s.D; j++) {
                const float u = static_cast<float>(kk[static_cast<size_t>(j)] / std::sqrt(ss));
                row[4 * C + h * s.D + j] = -u;
                row[5 * C + h * s.D + j] = u * ud(rng);
            }
        }
    }
    return in;
}

// WKV7 as written (ggml_rwkv_wkv7): per head, sa_i = sum_j a_j S[i][j]; S[i][j] = S[i][j] w_j +
// v_i k_j + sa_i b_j; out_i = sum_j S[i][j] r_j. WKV6 (ggml_rwkv_wkv6): S[key i][value j],
// out_j = sum_i r_i (u_i k_i v_j + S[i][j]); S[i][j] = S[i][j] w_i + k_i v_j. token_shift: the
// previous row (zeros first).
struct reference {
    shape               s;
    std::vector<float>  u;
    std::vector<double> st;
    explicit reference(const shape & sh, std::vector<float> uu = {}) : s(sh), u(std::move(uu)), st(static_cast<size_t>(sh.k != kind::shift ? sh.H * sh.D * sh.D : sh.D), 0.0) {}
    std::vector<double> step(const float * row) {
        std::vector<double> out(static_cast<size_t>(s.out()));
        if (s.k == kind::shift) {
            out = st;
            for (int64_t j = 0; j < s.D; j++) st[static_cast<size_t>(j)] = row[j];
            return out;
        }
        const int64_t D = s.D, C = s.H * D;
        if (s.k == kind::wkv6) {
            for (int64_t h = 0; h < s.H; h++) {
                const float *r = row + h * D, *k = row + C + h * D, *v = row + 2 * C + h * D, *w = row + 3 * C + h * D, *uh = u.data() + h * D;
                double * M = st.data() + h * D * D;
                for (int64_t j = 0; j < D; j++) {
                    double o = 0;
                    for (int64_t i = 0; i < D; i++) o += double(r[i]) * (double(uh[i]) * k[i] * v[j] + M[i * D + j]);
                    out[static_cast<size_t>(h * D + j)] = o;
                }
                for (int64_t i = 0; i < D; i++)
                    for (int64_t j = 0; j < D; j++) M[i * D + j] = M[i * D + j] * w[i] + double(k[i]) * v[j];
            }
            return out;
        }
        if (s.k == kind::gla) {
            // ggml_gated_linear_attn: S[i][j] = S[i][j] w_i + k_i v_j, then out_j = scale sum_i r_i S[i][j].
            const double sc = static_cast<float>(s.gla_scale());
            for (int64_t h = 0; h < s.H; h++) {
                const float *r = row + h * D, *k = row + C + h * D, *v = row + 2 * C + h * D, *w = row + 3 * C + h * D;
                double * M = st.data() + h * D * D;
                for (int64_t i = 0; i < D; i++)
                    for (int64_t j = 0; j < D; j++) M[i * D + j] = M[i * D + j] * w[i] + double(k[i]) * v[j];
                for (int64_t j = 0; j < D; j++) {
                    double o = 0;
                    for (int64_t i = 0; i < D; i++) o += sc * r[i] * M[i * D + j];
                    out[static_cast<size_t>(h * D + j)] = o;
                }
            }
            return out;
        }
        for (int64_t h = 0; h < s.H; h++) {
            const float *r = row + h * D, *w = row + C + h * D, *k = row + 2 * C + h * D, *v = row + 3 * C + h * D, *a = row + 4 * C + h * D, *b = row + 5 * C + h * D;
            double * M = st.data() + h * D * D;
            for (int64_t i = 0; i < D; i++) {
                double sa = 0;
                for (int64_t j = 0; j < D; j++) sa += double(a[j]) * M[i * D + j];
                double o = 0;
                for (int64_t j = 0; j < D; j++) {
                    M[i * D + j] = M[i * D + j] * w[j] + double(v[i]) * k[j] + sa * b[j];
                    o += M[i * D + j] * r[j];
                }
                out[static_cast<size_t>(h * D + i)] = o;
            }
        }
        return out;
    }
};

static void test_against_reference(const shape & s) {
    std::mt19937 rng(static_cast<uint32_t>(11 + s.H * 100 + s.D));
    const std::vector<uint8_t> image = make_image(s, rng);
    // (The u make_image drew: the same generator state, replayed.)
    std::vector<float> u;
    if (s.k == kind::wkv6) {
        std::mt19937 r2(static_cast<uint32_t>(11 + s.H * 100 + s.D));
        randn(r2, static_cast<size_t>(s.out() * 2));
        u = randn(r2, static_cast<size_t>(s.H * s.D), 0.5f);
    }
    const int64_t n = 24;
    const std::vector<float> in = make_inputs(s, n, rng);
    auto m = load(image, make_program(s));
    // Two calls: 16 tokens, then 8 that continue the state.
    std::vector<float> got = run(*m, s, in.data(), 16, 0);
    const std::vector<float> rest = run(*m, s, in.data() + 16 * s.in(), 8, 16);
    got.insert(got.end(), rest.begin(), rest.end());
    reference r(s, u);
    std::vector<double> want;
    for (int64_t t = 0; t < n; t++) {
        const std::vector<double> o = r.step(in.data() + t * s.in());
        want.insert(want.end(), o.begin(), o.end());
    }
    const double e = nmse(got, want);
    std::printf("%s H %lld D %lld: NMSE vs reference %.2e\n", s.k == kind::wkv7 ? "rwkv_wkv7" : s.k == kind::wkv6 ? "rwkv_wkv6" : s.k == kind::gla ? "rwkv_wkv6 gla" : "token_shift", (long long) s.H, (long long) s.D, e);
    CHECK(got.size() == want.size());
    CHECK(e < (s.k == kind::shift ? 1e-30 : 1e-10));

    // Rollback: keep a checkpoint, run 4 tokens, take back the last 3, run 2 others; equal bit for
    // bit to a fresh model that ran the accepted tokens only.
    const std::vector<float> other = make_inputs(s, 2, rng);
    auto a = load(image, make_program(s));
    run(*a, s, in.data(), 3, 0);
    a->seq_keep_rollback(0, true);
    run(*a, s, in.data() + 3 * s.in(), 4, 3);
    CHECK(a->seq_truncate(0, 4) == 4);
    const std::vector<float> after = run(*a, s, other.data(), 2, 4);
    auto b = load(image, make_program(s));
    run(*b, s, in.data(), 4, 0);
    const std::vector<float> fresh = run(*b, s, other.data(), 2, 4);
    CHECK(after.size() == fresh.size() && std::memcmp(after.data(), fresh.data(), after.size() * 4) == 0);
    CHECK(a->seq_states(0) == b->seq_states(0));

    // Two sequences interleaved in one batch (tokens 0..5 of in as sequence 0, 6..11 as sequence
    // 1): each sequence's rows as the first call's.
    auto c = load(image, make_program(s));
    const int64_t k = 6;
    std::vector<float> rows(static_cast<size_t>(2 * k * s.in()));
    std::vector<int32_t> toks(static_cast<size_t>(2 * k), 0), pos(static_cast<size_t>(2 * k)), sq(static_cast<size_t>(2 * k));
    std::vector<uint8_t> outf(static_cast<size_t>(2 * k), 1);
    for (int64_t t = 0; t < k; t++)
        for (int q = 0; q < 2; q++) {
            const int64_t bt = 2 * t + q;
            std::memcpy(rows.data() + bt * s.in(), in.data() + (q * k + t) * s.in(), static_cast<size_t>(s.in()) * 4);
            pos[static_cast<size_t>(bt)] = static_cast<int32_t>(t);
            sq[static_cast<size_t>(bt)] = q;
        }
    batch bb;
    bb.tokens = toks.data();
    bb.pos = pos.data();
    bb.seq = sq.data();
    bb.output = outf.data();
    bb.n = 2 * k;
    bb.embd = rows.data();
    bb.embd_width = s.in();
    bb.want_hidden = true;
    std::vector<float> logits, hidden;
    c->forward(bb, logits, &hidden);
    auto d = load(image, make_program(s));
    const std::vector<float> s0 = run(*d, s, in.data(), k, 0, 0), s1 = run(*d, s, in.data() + k * s.in(), k, 0, 1);
    bool same = hidden.size() == static_cast<size_t>(2 * k * s.out());
    for (int64_t t = 0; same && t < k; t++) {
        same = std::memcmp(hidden.data() + (2 * t) * s.out(), s0.data() + t * s.out(), static_cast<size_t>(s.out()) * 4) == 0 &&
               std::memcmp(hidden.data() + (2 * t + 1) * s.out(), s1.data() + t * s.out(), static_cast<size_t>(s.out()) * 4) == 0;
    }
    CHECK(same);

    // Copy, save/restore and clear (sequence 0 of d holds k tokens): a copy continues as its
    // source does; a saved state restored into sequence 1 continues as the saved sequence did;
    // a cleared sequence starts from zeros.
    auto bits = [](const std::vector<float> & x, const std::vector<float> & y) { return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * 4) == 0; };
    const std::vector<uint8_t> saved = d->seq_state(0);
    d->seq_copy(0, 1);
    const std::vector<float> on1 = run(*d, s, other.data(), 2, static_cast<int32_t>(k), 1), on0 = run(*d, s, other.data(), 2, static_cast<int32_t>(k), 0);
    CHECK(bits(on1, on0));
    d->set_seq_state(1, saved.data(), saved.size());
    CHECK(bits(run(*d, s, other.data(), 2, static_cast<int32_t>(k), 1), on0));
    d->seq_clear(1);
    CHECK(bits(run(*d, s, in.data(), 2, 0, 1), std::vector<float>(s0.begin(), s0.begin() + 2 * s.out())));
}

int main() {
    test_against_reference({kind::wkv7, 2, 16});
    test_against_reference({kind::wkv7, 3, 8});
    test_against_reference({kind::wkv7, 1, 64});  // RWKV-7's head size
    test_against_reference({kind::wkv6, 2, 16});
    test_against_reference({kind::wkv6, 1, 64});  // RWKV-6's head size
    test_against_reference({kind::gla, 2, 16});
    test_against_reference({kind::gla, 1, 64});
    test_against_reference({kind::shift, 1, 24});
    // Malformed programs are refused, naming the op and the numbers.
    std::mt19937 rng(5);
    const shape s{kind::wkv7, 2, 8};
    const std::vector<uint8_t> image = make_image(s, rng);
    expect_error("narrow input", KAIL_E_BAD_MODEL, [&] { load(image, make_program(s, 5 * 16)); }, "r|w|k|v|a|b input is 80 wide, expected 96");
    expect_error("state width", KAIL_E_INVALID_ARG, [&] { load(image, make_program(s, 0, 2 * 8 * 8 + 1)); }, "the recurrent layer's width is not n_head x head_dim^2");
    const shape s6{kind::wkv6, 2, 8};
    const std::vector<uint8_t> image6 = make_image(s6, rng), bad_u = make_image(s6, rng, 8);
    expect_error("wkv6 narrow input", KAIL_E_BAD_MODEL, [&] { load(image6, make_program(s6, 3 * 16)); }, "r|k|v|w input is 48 wide, expected 64");
    expect_error("wkv6 time_first", KAIL_E_BAD_MODEL, [&] { load(bad_u, make_program(s6)); }, "must be F32 with 16 elements (n_head x head_dim)");
    expect_error("wkv6 without time_first", KAIL_E_BAD_MODEL, [&] { load(image, make_program(s6)); }, "lacks tensor 'u'");
    // Gated linear attention takes no u, and a positive scale.
    const shape sg{kind::gla, 2, 8};
    program pu = make_program(sg);
    pu.ops[1].weights = {{"u", "u"}};
    expect_error("gla with time_first", KAIL_E_BAD_MODEL, [&] { load(image6, pu); }, "takes no time_first, has 'u'");
    program pz = make_program(sg);
    pz.ops[1].params["gla_scale"] = -1;
    expect_error("gla scale", KAIL_E_BAD_MODEL, [&] { load(image, pz); }, "gla_scale -1.000000 is not a positive number");
    const shape t{kind::shift, 1, 12};
    const std::vector<uint8_t> timage = make_image(t, rng);
    expect_error("shift state width", KAIL_E_INVALID_ARG, [&] { load(timage, make_program(t, 0, 11)); }, "the recurrent layer's width is not a's");
    return test_status("test-rwkv");
}
