// Gemma 3n's small ops against references computed in double: `altup` in its three modes (predict:
// each stream plus the streams mixed by the token's n x n coefficients; correct: each stream plus
// the innovation times coefficient + 1, in place; magnitude: each stream rescaled to a target row's
// RMS, the target at b_off, the stream's mean square floored at eps: an all-zero stream stays zero) and `gaussian_topk` (relu(a - mean - s std), std with n - 1), over
// several input rows. Malformed programs are refused with the op and the numbers.
#include <algorithm>
#include <cmath>
#include <cstdio>
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

static const int64_t N = 4, D = 24, FF = 40;
static const double STD_MUL = 1.6448533535003662;
// in = streams (N D) | coefficients (N N) | block output (D) | correct coefficients (N) | gate (FF)
static const int64_t I_XS = 0, I_PC = N * D, I_BO = I_PC + N * N, I_CC = I_BO + D, I_G = I_CC + N, IN_W = I_G + FF;
// out = predicted (N D) | corrected (N D) | magnitude of streams 1..N-1 to stream 2 ((N - 1) D) | top-k (FF)
static const int64_t O_P = 0, O_C = N * D, O_M = 2 * N * D, O_T = O_M + (N - 1) * D, OUT_W = O_T + FF;

static program make_program(int mode0 = 0, int64_t n_streams = N, int64_t act = 1, bool topk_mul = true) {
    program p;
    const int in = add_buf(p, "in", IN_W), xs = add_buf(p, "xs", N * D), pc = add_buf(p, "pc", N * N), bo = add_buf(p, "bo", D), cc = add_buf(p, "cc", N);
    const int pred = add_buf(p, "pred", N * D), rest = add_buf(p, "rest", (N - 1) * D), g = add_buf(p, "g", FF), core = add_buf(p, "core", OUT_W);
    const int o = add_buf(p, "o", OUT_W, true), logits = add_buf(p, "logits", 2, true);
    add_op(p, OP_INPUT, in, -1);
    add_op(p, OP_COPY, xs, in, {{"a_off", I_XS}, {"n", N * D}});
    add_op(p, OP_COPY, pc, in, {{"a_off", I_PC}, {"n", N * N}});
    add_op(p, OP_COPY, bo, in, {{"a_off", I_BO}, {"n", D}});
    add_op(p, OP_COPY, cc, in, {{"a_off", I_CC}, {"n", N}});
    add_op(p, OP_COPY, g, in, {{"a_off", I_G}, {"n", FF}});
    add_op(p, OP_ALTUP, pred, xs, {{"mode", mode0}, {"n", static_cast<double>(n_streams)}, {"dim", D}, {"act", static_cast<double>(act)}}).b = pc;
    add_op(p, OP_COPY, core, pred, {{"out_off", O_P}, {"n", N * D}});
    // Correct in place on the predictions.
    op_desc & c = add_op(p, OP_ALTUP, pred, pred, {{"mode", 1}, {"n", N}, {"dim", D}, {"act", 1}});
    c.b = bo;
    c.c = cc;
    add_op(p, OP_COPY, core, pred, {{"out_off", O_C}, {"n", N * D}});
    add_op(p, OP_COPY, rest, xs, {{"a_off", D}, {"n", (N - 1) * D}});
    add_op(p, OP_ALTUP, rest, rest, {{"mode", 2}, {"n", N - 1}, {"dim", D}, {"b_off", 2 * D}, {"eps", 1e-5}}).b = xs;
    add_op(p, OP_COPY, core, rest, {{"out_off", O_M}, {"n", (N - 1) * D}});
    add_op(p, OP_GAUSSIAN_TOPK, g, g, topk_mul ? std::map<std::string, double>{{"std_mul", STD_MUL}} : std::map<std::string, double>{});
    add_op(p, OP_COPY, core, g, {{"out_off", O_T}, {"n", FF}});
    end_with_head(p, core, o, logits);
    return p;
}

static std::unique_ptr<model> load(const std::vector<uint8_t> & image, const program & p) {
    return load_test_model(image, p, 16);
}

int main() {
    std::mt19937 rng(5);
    const std::vector<uint8_t> image = gguf_image({{"head", {OUT_W, 2}, randn(rng, static_cast<size_t>(OUT_W * 2))}});
    const int64_t n = 5;
    std::vector<float> in = randn(rng, static_cast<size_t>(n * IN_W));
    // Token 3's stream 3 all zeros: the magnitude's floor keeps it zero (not 0 / 0).
    for (int64_t i = 0; i < D; i++) in[static_cast<size_t>(3 * IN_W + I_XS + 3 * D + i)] = 0.0f;
    auto m = load(image, make_program());
    const std::vector<float> got = run_hidden(*m, nullptr, n, 0, 0, in.data(), IN_W);
    CHECK(got.size() == static_cast<size_t>(n * OUT_W));
    std::vector<double> want(static_cast<size_t>(n * OUT_W));
    for (int64_t t = 0; t < n; t++) {
        const float * r = in.data() + t * IN_W;
        const float * xs = r + I_XS, * pc = r + I_PC, * bo = r + I_BO, * cc = r + I_CC, * g = r + I_G;
        double * w = want.data() + t * OUT_W;
        std::vector<double> pred(static_cast<size_t>(N * D));
        for (int64_t j = 0; j < N; j++)
            for (int64_t i = 0; i < D; i++) {
                double s = xs[j * D + i];
                for (int64_t k = 0; k < N; k++) s += static_cast<double>(pc[j * N + k]) * xs[k * D + i];
                pred[static_cast<size_t>(j * D + i)] = s;
                w[O_P + j * D + i] = s;
            }
        for (int64_t j = 0; j < N; j++)
            for (int64_t i = 0; i < D; i++) w[O_C + j * D + i] = (bo[i] - pred[static_cast<size_t>(1 * D + i)]) * (cc[j] + 1.0) + pred[static_cast<size_t>(j * D + i)];
        auto norm = [](const float * v) {
            double s = 0;
            for (int64_t i = 0; i < D; i++) s += static_cast<double>(v[i]) * v[i];
            return std::sqrt(s);
        };
        const double target = norm(xs + 2 * D) / std::sqrt(double(D));
        for (int64_t j = 1; j < N; j++) {
            const double nj = std::sqrt(std::max(norm(xs + j * D) * norm(xs + j * D) / D, 1e-5));
            for (int64_t i = 0; i < D; i++) w[O_M + (j - 1) * D + i] = xs[j * D + i] * target / nj;
        }
        double mean = 0, var = 0;
        for (int64_t i = 0; i < FF; i++) mean += g[i];
        mean /= FF;
        for (int64_t i = 0; i < FF; i++) var += (g[i] - mean) * (g[i] - mean);
        const double cut = mean + STD_MUL * std::sqrt(var / (FF - 1));
        int kept = 0;
        for (int64_t i = 0; i < FF; i++) {
            w[O_T + i] = std::max(0.0, g[i] - cut);
            kept += g[i] > cut;
        }
        CHECK(kept > 0 && kept < FF);  // the top-k keeps some and drops most
    }
    const double e = nmse(got, want);
    std::printf("altup / gaussian_topk vs double: NMSE %.3g\n", e);
    CHECK(e <= 1e-12);
    for (int64_t i = 0; i < D; i++) CHECK(got[static_cast<size_t>(3 * OUT_W + O_M + 2 * D + i)] == 0.0f);
    // Malformed programs.
    std::mt19937 rng2(1);
    expect_error("an unknown mode", KAIL_E_INVALID_ARG, [&] { load(image, make_program(3)); }, "mode 3 is not 0 (predict), 1 (correct) or 2 (magnitude)");
    expect_error("more streams than the buffer", KAIL_E_BAD_MODEL, [&] { load(image, make_program(0, N + 1)); }, "(altup): 120 values at offset 0 do not fit buffer 'xs'");
    expect_error("an active stream past the streams", KAIL_E_BAD_MODEL, [&] { load(image, make_program(0, N, N)); }, "active stream 4 is not one of the 4 streams");
    expect_error("top-k without its multiplier", KAIL_E_BAD_MODEL, [&] { load(image, make_program(0, N, 1, false)); }, "(gaussian_topk): std_mul is missing");
    return test_status("test-altup");
}
