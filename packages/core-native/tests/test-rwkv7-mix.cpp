// RWKV-7's small ops against references computed in double (or, where llama.cpp computes in float,
// the same float expressions): `sigmoid` (ggml_sigmoid, and with `decay` RWKV-7's w = exp(-d sigmoid(x))),
// `head_sum_mul` (per head b * sum a: the r.k bonus v * sum_rows(k r r_k)), `head_rms_norm` with `l2`
// (ggml_l2_norm per head) and with layer_norm plus a per-head weight and bias (RWKV-7's group norm),
// `mul` by a slice of a longer weight (w_off: the fused lerp weights), and for RWKV-6 `sigmoid` with
// `exp_decay` (w = exp(-exp(x))) and a grouped `matmul` over a 3-D weight [n_in, n_out / G, G] plus a
// bias (time_mix_w2's five slices and the fused lerp). Malformed programs are
// refused with the op and the numbers. One program runs them all over input rows.
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

static const int64_t H = 3, D = 8, C = H * D, NL = 6;
static const int64_t GK = 4, GN = 2;  // the grouped product: 2 groups of 4 inputs, C / 2 outputs each
enum { O_SIG, O_DECAY, O_SUM, O_L2, O_GN, O_LERP, O_EXPD, O_W2, N_OUT };

static std::vector<uint8_t> make_image(std::mt19937 & rng, int64_t lerp_n = NL * C) {
    std::vector<f32_tensor> ts = {{"head", {N_OUT * C, 2}, randn(rng, static_cast<size_t>(N_OUT * C * 2))},
                                  {"lerp", {lerp_n}, randn(rng, static_cast<size_t>(lerp_n), 0.5f)},
                                  {"gn_w", {C}, randn(rng, static_cast<size_t>(C))},
                                  {"gn_b", {C}, randn(rng, static_cast<size_t>(C))},
                                  {"w2", {GK, C / GN, GN}, randn(rng, static_cast<size_t>(GK * C))},
                                  {"w2_b", {C}, randn(rng, static_cast<size_t>(C))}};
    return gguf_image(ts);
}

// in = a | b (2C wide) -> out (N_OUT sections of C); `lerp_off`: the lerp slice read; `bad_sum`: head_sum_mul without b.
static program make_program(int64_t lerp_off = 4 * C, bool bad_sum = false, double exp_decay = 1) {
    program p;
    const int in = add_buf(p, "in", 2 * C), a = add_buf(p, "a", C), b = add_buf(p, "b", C), t = add_buf(p, "t", C), core = add_buf(p, "core", N_OUT * C);
    const int o = add_buf(p, "o", N_OUT * C, true), logits = add_buf(p, "logits", 2, true);
    add_op(p, OP_INPUT, in, -1);
    add_op(p, OP_COPY, a, in, {{"n", C}});
    add_op(p, OP_COPY, b, in, {{"a_off", C}, {"n", C}});
    add_op(p, OP_SIGMOID, core, a, {{"out_off", O_SIG * C}, {"n", C}});
    add_op(p, OP_SIGMOID, core, a, {{"out_off", O_DECAY * C}, {"n", C}, {"decay", 0.606531}});
    op_desc & hs = add_op(p, OP_HEAD_SUM_MUL, t, a, {{"head_dim", D}, {"n_head", H}});
    if (!bad_sum) hs.b = b;
    add_op(p, OP_COPY, core, t, {{"out_off", O_SUM * C}, {"n", C}});
    add_op(p, OP_HEAD_RMS_NORM, t, a, {{"l2", 1}, {"eps", 1e-12}, {"head_dim", D}, {"n_head", H}});
    add_op(p, OP_COPY, core, t, {{"out_off", O_L2 * C}, {"n", C}});
    add_op(p, OP_HEAD_RMS_NORM, t, a, {{"layer_norm", 1}, {"eps", 64e-5}, {"head_dim", D}, {"n_head", H}}).weights = {{"weight", "gn_w"}, {"bias", "gn_b"}};
    add_op(p, OP_COPY, core, t, {{"out_off", O_GN * C}, {"n", C}});
    add_op(p, OP_MUL, core, a, {{"out_off", O_LERP * C}, {"n", C}, {"w_off", static_cast<double>(lerp_off)}}).weights = {{"weight", "lerp"}};
    add_op(p, OP_SIGMOID, core, a, {{"out_off", O_EXPD * C}, {"n", C}, {"exp_decay", exp_decay}});
    add_op(p, OP_MATMUL, core, a, {{"out_off", O_W2 * C}, {"n_in", GK}, {"n_out", C}, {"groups", GN}}).weights = {{"weight", "w2"}, {"bias", "w2_b"}};
    end_with_head(p, core, o, logits);
    return p;
}

static std::unique_ptr<model> load(const std::vector<uint8_t> & image, const program & p) {
    return load_test_model(image, p, 16);
}

int main() {
    std::mt19937 rng(3);
    const std::vector<uint8_t> image = make_image(rng);
    // The weights as the image holds them (drawn in the same order).
    std::mt19937 rng2(3);
    randn(rng2, static_cast<size_t>(N_OUT * C * 2));
    const std::vector<float> lerp = randn(rng2, static_cast<size_t>(NL * C), 0.5f), gw = randn(rng2, static_cast<size_t>(C)), gb = randn(rng2, static_cast<size_t>(C));
    const std::vector<float> w2 = randn(rng2, static_cast<size_t>(GK * C)), w2b = randn(rng2, static_cast<size_t>(C));
    const int64_t n = 5;
    std::vector<float> in = randn(rng, static_cast<size_t>(n * 2 * C), 2.0f);
    for (int64_t i = 0; i < D; i++) in[static_cast<size_t>(2 * C + D + i)] = 0.0f;  // token 1, head 1 all zeros: l2's eps floor
    auto m = load(image, make_program());
    const std::vector<float> got = run_hidden(*m, nullptr, n, 0, 0, in.data(), 2 * C);
    CHECK(got.size() == static_cast<size_t>(n * N_OUT * C));
    std::vector<double> want(static_cast<size_t>(n * N_OUT * C));
    for (int64_t t = 0; t < n; t++) {
        const float * a = in.data() + t * 2 * C, * b = a + C;
        double * w = want.data() + t * N_OUT * C;
        for (int64_t i = 0; i < C; i++) {
            const double sg = 1.0 / (1.0 + std::exp(-static_cast<double>(a[i])));
            w[O_SIG * C + i] = sg;
            w[O_DECAY * C + i] = std::exp(-0.606531 * sg);
            w[O_LERP * C + i] = static_cast<double>(a[i]) * lerp[static_cast<size_t>(4 * C + i)];
            w[O_EXPD * C + i] = std::exp(-std::exp(static_cast<double>(a[i])));
        }
        // Group g: outputs [g C / G, (g + 1) C / G) from inputs [g GK, (g + 1) GK) through w2's slice g.
        for (int64_t g = 0; g < GN; g++)
            for (int64_t j = 0; j < C / GN; j++) {
                double acc = w2b[static_cast<size_t>(g * (C / GN) + j)];
                for (int64_t k = 0; k < GK; k++) acc += static_cast<double>(a[g * GK + k]) * w2[static_cast<size_t>(k + GK * (j + (C / GN) * g))];
                w[O_W2 * C + g * (C / GN) + j] = acc;
            }
        for (int64_t h = 0; h < H; h++) {
            double s = 0, ss = 0, mean = 0, var = 0;
            for (int64_t i = 0; i < D; i++) s += a[h * D + i], ss += static_cast<double>(a[h * D + i]) * a[h * D + i];
            mean = s / D;
            for (int64_t i = 0; i < D; i++) var += (a[h * D + i] - mean) * (a[h * D + i] - mean);
            var /= D;
            for (int64_t i = 0; i < D; i++) {
                const int64_t j = h * D + i;
                w[O_SUM * C + j] = b[j] * s;
                w[O_L2 * C + j] = a[j] / std::max(std::sqrt(ss), 1e-12);
                w[O_GN * C + j] = (a[j] - mean) / std::sqrt(var + 64e-5) * gw[static_cast<size_t>(j)] + gb[static_cast<size_t>(j)];
            }
        }
    }
    for (int o = 0; o < N_OUT; o++) {
        double worst = 0;
        for (int64_t t = 0; t < n; t++)
            for (int64_t i = 0; i < C; i++) {
                const size_t k = static_cast<size_t>(t * N_OUT * C + o * C + i);
                worst = std::max(worst, std::fabs(got[k] - want[k]) / std::max(1.0, std::fabs(want[k])));
            }
        if (worst > 1e-5) std::fprintf(stderr, "output %d: worst relative error %g\n", o, worst);
        CHECK(worst <= 1e-5);
    }
    // The all-zero head stays zero under l2 (1 / max(0, eps) times zeros), not NaN.
    for (int64_t i = 0; i < D; i++) CHECK(got[static_cast<size_t>(1 * N_OUT * C + O_L2 * C + D + i)] == 0.0f);
    // Malformed programs.
    expect_error("lerp slice past the weight", KAIL_E_BAD_MODEL, [&] { load(image, make_program(NL * C - C + 1)); }, "must be F32 with at least 145 elements (w_off 121 + 24)");
    expect_error("exp_decay other than 1", KAIL_E_BAD_MODEL, [&] { load(image, make_program(4 * C, false, 2)); }, "sigmoid exp_decay 2.000000 is not 1");
    expect_error("head_sum_mul without b", KAIL_E_INVALID_ARG, [&] { load(image, make_program(0, true)); }, "needs buffer b");
    return test_status("test-rwkv7-mix");
}
