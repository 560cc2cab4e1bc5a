// The gated_delta_net op against a straightforward reference (double precision, the delta rule
// written on the state matrix S[key i][value j]), with the scalar gate per value head (Qwen3.5,
// Qwen3-Next) and with Kimi Delta Attention's gate per key channel (kda: column i of the state
// decays by exp(g_i)), over two forward calls; and the checkpoint's record/replay: a sequence
// taken back over rejected tokens (seq_keep_rollback + seq_truncate) continues bit for bit as one
// that never saw them. The model runs a program of its own over a GGUF built in memory: the input
// rows carry q|k|v, the gate logits and the beta logits; the op's output is the hidden buffer.
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

struct shape {
    int64_t hk, hv, S;
    bool    kda;
    float   lb = 0.0f;  // the safe gate's lower bound (bailingmoe3); 0: softplus gate
    int64_t gw() const { return kda ? S : 1; }
    int64_t qkv() const { return (2 * hk + hv) * S; }
    int64_t in() const { return qkv() + hv * gw() + hv; }
};

struct fixture {
    shape                      s;
    std::vector<uint8_t>       image;
    std::vector<float>         dt, A;
    float                      eps = 1e-6f;
};

static fixture make_fixture(const shape & s, std::mt19937 & rng) {
    fixture f;
    f.s = s;
    std::normal_distribution<float> nd(0.0f, 1.0f);
    f.dt.resize(static_cast<size_t>(s.hv * s.gw()));
    for (auto & v : f.dt) v = 0.5f * nd(rng);
    f.A.resize(static_cast<size_t>(s.hv));
    // -exp(A_log), as the converters store it; with the safe gate exp(A_log) (bailingmoe3's converter).
    for (auto & v : f.A) v = (s.lb < 0 ? 1.0f : -1.0f) * std::exp(0.3f * nd(rng));
    std::vector<float> w(static_cast<size_t>(s.hv * s.S * 2));
    for (auto & v : w) v = nd(rng);
    f.image = gguf_image({{"dt_bias", {static_cast<int64_t>(f.dt.size())}, f.dt}, {"a", {1, s.hv}, f.A}, {"head", {s.hv * s.S, 2}, w}});
    return f;
}

// input -> copies into q|k|v, gates, betas -> gated_delta_net (hidden) -> two logits per output row.
static program make_program(const shape & s, bool narrow_gate = false, double lower_bound = 0) {
    program p;
    const int in = add_buf(p, "in", s.in()), qkv = add_buf(p, "qkv", s.qkv()), al = add_buf(p, "alpha", narrow_gate ? s.hv : s.hv * s.gw()), be = add_buf(p, "beta", s.hv);
    const int core = add_buf(p, "core", s.hv * s.S), o = add_buf(p, "o", s.hv * s.S, true), logits = add_buf(p, "logits", 2, true);
    add_op(p, OP_INPUT, in, -1);
    add_op(p, OP_COPY, qkv, in, {{"a_off", 0}, {"n", static_cast<double>(s.qkv())}});
    add_op(p, OP_COPY, al, in, {{"a_off", static_cast<double>(s.qkv())}, {"n", static_cast<double>(narrow_gate ? s.hv : s.hv * s.gw())}});
    add_op(p, OP_COPY, be, in, {{"a_off", static_cast<double>(s.qkv() + s.hv * s.gw())}, {"n", static_cast<double>(s.hv)}});
    op_desc & g = add_op(p, OP_GATED_DELTA_NET, core, qkv,
                     {{"layer", 0}, {"n_k_heads", static_cast<double>(s.hk)}, {"n_v_heads", static_cast<double>(s.hv)}, {"head_dim", static_cast<double>(s.S)}, {"eps", 1e-6}, {"kda", s.kda ? 1 : 0}});
    if (s.lb < 0 || lower_bound != 0) g.params["lower_bound"] = lower_bound != 0 ? lower_bound : s.lb;
    g.b = al;
    g.c = be;
    g.weights = {{"dt_bias", "dt_bias"}, {"a", "a"}};
    end_with_head(p, core, o, logits);
    p.rs_width = {s.hv * s.S * s.S};
    return p;
}

static std::unique_ptr<model> load(const fixture & f, const program & p) {
    std::shared_ptr<gguf_file> file = gguf_file::from_buffer(f.image.data(), f.image.size());
    model_params mp;
    mp.n_threads = 2;
    mp.n_ctx = 64;
    return std::make_unique<model>(file, p, mp);
}

// The op's outputs (n x hv S) for input rows `in` (n x s.in()) at positions pos0.. of sequence 0.
static std::vector<float> run(model & m, const shape & s, const float * in, int64_t n, int32_t pos0) { return run_hidden(m, nullptr, n, pos0, 0, in, s.in()); }

// The delta rule as written: per value head h (key head h % hk), q and k L2-normalized
// (x / sqrt(sum x^2 + eps), as ggml_rms_norm(eps / S) then 1 / sqrt(S)), g_i = softplus(alpha_i +
// dt_i) A_h (one g for the head without kda), beta = sigmoid(b); S[i][j] *= exp(g_i);
// delta_j = (v_j - sum_i S[i][j] k_i) beta; S[i][j] += k_i delta_j; out_j = sum_i S[i][j] q_i / sqrt(S).
struct reference {
    shape               s;
    std::vector<double> st;  // hv x S (key i) x S (value j)
    explicit reference(const shape & sh) : s(sh), st(static_cast<size_t>(sh.hv * sh.S * sh.S), 0.0) {}
    std::vector<double> step(const fixture & f, const float * row) {
        const int64_t S = s.S;
        std::vector<double> out(static_cast<size_t>(s.hv * S));
        auto l2 = [&](const float * x) {
            double ss = 0;
            for (int64_t i = 0; i < S; i++) ss += double(x[i]) * x[i];
            std::vector<double> y(static_cast<size_t>(S));
            for (int64_t i = 0; i < S; i++) y[static_cast<size_t>(i)] = x[i] / std::sqrt(ss + f.eps);
            return y;
        };
        for (int64_t h = 0; h < s.hv; h++) {
            const int64_t hk = h % s.hk;
            const std::vector<double> q = l2(row + hk * S), k = l2(row + (s.hk + hk) * S);
            const float * v = row + (2 * s.hk + h) * S;
            const float * al = row + s.qkv() + h * s.gw();
            const double beta = 1.0 / (1.0 + std::exp(-double(row[s.qkv() + s.hv * s.gw() + h])));
            double * M = st.data() + h * S * S;
            for (int64_t i = 0; i < S; i++) {
                const int64_t gi = s.kda ? i : 0;
                const double z = double(al[gi]) + f.dt[static_cast<size_t>(h * s.gw() + gi)];
                const double g = s.lb < 0 ? s.lb / (1.0 + std::exp(-z * f.A[static_cast<size_t>(h)])) : std::log1p(std::exp(z)) * f.A[static_cast<size_t>(h)];
                for (int64_t j = 0; j < S; j++) M[i * S + j] *= std::exp(g);
            }
            for (int64_t j = 0; j < S; j++) {
                double mem = 0;
                for (int64_t i = 0; i < S; i++) mem += M[i * S + j] * k[static_cast<size_t>(i)];
                const double delta = (v[j] - mem) * beta;
                for (int64_t i = 0; i < S; i++) M[i * S + j] += k[static_cast<size_t>(i)] * delta;
            }
            for (int64_t j = 0; j < S; j++) {
                double o = 0;
                for (int64_t i = 0; i < S; i++) o += M[i * S + j] * q[static_cast<size_t>(i)];
                out[static_cast<size_t>(h * S + j)] = o / std::sqrt(double(S));
            }
        }
        return out;
    }
};

static void test_against_reference(const shape & s) {
    std::mt19937 rng(static_cast<uint32_t>(7 + s.hk * 100 + s.hv * 10 + s.kda));
    const fixture f = make_fixture(s, rng);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    const int64_t n = 9;
    std::vector<float> in(static_cast<size_t>(n * s.in()));
    for (auto & v : in) v = nd(rng);
    auto m = load(f, make_program(s));
    // Two calls: 6 tokens, then 3 that continue the state.
    std::vector<float> got = run(*m, s, in.data(), 6, 0);
    const std::vector<float> rest = run(*m, s, in.data() + 6 * s.in(), 3, 6);
    got.insert(got.end(), rest.begin(), rest.end());
    reference r(s);
    double err = 0, norm = 0;
    for (int64_t t = 0; t < n; t++) {
        const std::vector<double> want = r.step(f, in.data() + t * s.in());
        for (int64_t j = 0; j < s.hv * s.S; j++) {
            const double d = got[static_cast<size_t>(t * s.hv * s.S + j)] - want[static_cast<size_t>(j)];
            err += d * d;
            norm += want[static_cast<size_t>(j)] * want[static_cast<size_t>(j)];
        }
    }
    const double nmse = err / norm;
    std::printf("gated_delta_net %s%s hk %lld hv %lld S %lld: NMSE vs reference %.2e\n", s.kda ? "kda" : "scalar", s.lb < 0 ? " safe gate" : "", (long long) s.hk, (long long) s.hv, (long long) s.S, nmse);
    CHECK(norm > 0);
    CHECK(nmse < 1e-10);

    // Rollback: keep a checkpoint, run 4 tokens, take back the last 3, run 2 others; equal bit for
    // bit to a fresh model that ran the accepted tokens only.
    std::vector<float> other(static_cast<size_t>(2 * s.in()));
    for (auto & v : other) v = nd(rng);
    auto a = load(f, make_program(s));
    run(*a, s, in.data(), 3, 0);
    a->seq_keep_rollback(0, true);
    run(*a, s, in.data() + 3 * s.in(), 4, 3);
    CHECK(a->seq_truncate(0, 4) == 4);
    const std::vector<float> after = run(*a, s, other.data(), 2, 4);
    auto b = load(f, make_program(s));
    run(*b, s, in.data(), 4, 0);
    const std::vector<float> fresh = run(*b, s, other.data(), 2, 4);
    CHECK(after.size() == fresh.size() && std::memcmp(after.data(), fresh.data(), after.size() * 4) == 0);
    CHECK(a->seq_states(0) == b->seq_states(0));
}

static void expect_bad_model(const char * what, const std::function<void()> & f, const char * sub) {
    try {
        f();
        std::fprintf(stderr, "%s: no error\n", what);
        g_failures++;
    } catch (const error & e) {
        if (e.code() != KAIL_E_BAD_MODEL || std::string(e.what()).find(sub) == std::string::npos) {
            std::fprintf(stderr, "%s: unexpected error %d: %s\n", what, static_cast<int>(e.code()), e.what());
            g_failures++;
        }
    }
}

int main() {
    test_against_reference({2, 2, 16, false});
    test_against_reference({1, 2, 8, false});
    test_against_reference({3, 3, 16, true});  // Kimi-Linear: as many key heads as value heads
    test_against_reference({2, 4, 8, true});
    test_against_reference({2, 2, 16, true, -5.0f});  // Ling 3 (bailingmoe3): the safe gate, lower bound -5
    test_against_reference({1, 2, 8, false, -2.5f});
    // A KDA op whose gate buffer holds one value per head, or whose dt_bias is per head, is refused.
    std::mt19937 rng(3);
    const shape kda{2, 2, 8, true};
    const fixture f = make_fixture(kda, rng);
    expect_bad_model("narrow gate", [&] { load(f, make_program(kda, true)); }, "do not fit buffer 'alpha'");
    const fixture scalar = make_fixture({2, 2, 8, false}, rng);
    expect_bad_model("non-negative lower bound", [&] { load(f, make_program(kda, false, 0.5)); }, "must be finite and negative");
    expect_bad_model("per-head dt_bias", [&] { load(scalar, make_program(kda)); }, "must be F32 with 16 elements (one per key channel of each value head)");
    return test_status("test-delta-net");
}
