// xIELU (Apertus's FFN activation, model/xielu.h, the xielu op) against a double reference of
// llama.cpp's ggml_xielu: softplus of the raw alpha_p and beta + softplus of the raw alpha_n, then
// alpha_p x^2 + beta x above 0 and (expm1(min(x, eps)) - x) alpha_n + beta x at or below it; over
// both branches, values around eps and 0, large magnitudes, the softplus threshold (raw parameters
// past 20), and Apertus's own initial parameters (alpha 0.8, beta 0.5, eps -1e-6). The float
// kernel must be within a few float ulps of the largest term at every value.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "model/xielu.h"
#include "op_test_util.h"

using namespace kail;

static double softplus_d(double v) { return v > 20.0 ? v : std::log1p(std::exp(v)); }

static double xielu_ref(double x, double alpha_n_raw, double alpha_p_raw, double beta, double eps) {
    const double an = beta + softplus_d(alpha_n_raw), ap = softplus_d(alpha_p_raw);
    if (x > 0.0) return ap * x * x + beta * x;
    return (std::expm1(std::fmin(x, eps)) - x) * an + beta * x;
}

int main() {
    struct params { double an, ap, beta, eps; };
    // (Raw alpha 0.8 after softplus: log(expm1(0.8)) before it, as Apertus initializes them.)
    const double raw08 = std::log(std::expm1(0.8));
    const std::vector<params> ps = {{raw08, raw08, 0.5, -1e-6}, {0.3, -1.2, 0.25, -1e-3}, {25.0, 21.0, 0.5, -1e-6}, {-4.0, 2.0, 0.0, 0.0}};
    std::vector<float> xs = {0.0f, -0.0f, 1e-7f, -1e-7f, -1e-6f, -2e-6f, 1e-3f, -1e-3f, 0.5f, -0.5f, 1.0f, -1.0f, 3.0f, -3.0f, 20.0f, -20.0f, -80.0f, 1e3f};
    std::mt19937 rng(5);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    for (int i = 0; i < 4000; i++) xs.push_back(nd(rng));
    double worst = 0;
    for (const auto & p : ps) {
        const xielu_coeffs c = xielu_from_raw(static_cast<float>(p.an), static_cast<float>(p.ap), static_cast<float>(p.beta), static_cast<float>(p.eps));
        // The coefficients as ggml stores them (float softplus), to float precision.
        const double an = p.beta + softplus_d(static_cast<float>(p.an)), ap = softplus_d(static_cast<float>(p.ap));
        if (std::fabs(c.alpha_n - an) > 4e-7 * std::fmax(1.0, std::fabs(an)) || std::fabs(c.alpha_p - ap) > 4e-7 * std::fmax(1.0, std::fabs(ap))) {
            std::fprintf(stderr, "coefficients %g %g vs %g %g\n", c.alpha_n, c.alpha_p, an, ap);
            g_failures++;
        }
        for (float x : xs) {
            const double want = xielu_ref(x, static_cast<float>(p.an), static_cast<float>(p.ap), static_cast<float>(p.beta), static_cast<float>(p.eps));
            const double got = xielu(x, c);
            // Relative to the largest term summed (expm1(x) - x cancels near 0: a float result is
            // exact only to the ulps of x alpha_n' there, in llama.cpp's kernel as in this one).
            const double xd = x;
            const double scale = std::fmax(std::fabs(want), std::fmax(std::fabs(xd) * (std::fabs(an) + std::fabs(p.beta)), ap * xd * xd)) + 1e-30;
            const double err = std::fabs(got - want) / scale;
            if (err > worst) worst = err;
            if (!(err <= 1e-6)) {
                std::fprintf(stderr, "xielu(%.9g) = %.9g, want %.9g (params %g %g %g %g)\n", x, got, want, p.an, p.ap, p.beta, p.eps);
                g_failures++;
            }
        }
    }
    // The branches meet continuously at 0 and the negative side saturates at -alpha_n' x + beta x.
    const xielu_coeffs c = xielu_from_raw(static_cast<float>(raw08), static_cast<float>(raw08), 0.5f, -1e-6f);
    CHECK(std::fabs(xielu(1e-6f, c) - xielu(-1e-6f, c)) < 1e-5);
    CHECK(std::fabs(xielu(-80.0f, c) - ((-1.0 + 80.0) * c.alpha_n - 40.0)) < 1e-3);
    std::printf("test-xielu: %zu values x %zu parameter sets, worst relative error %.2e vs the double reference, %d failures\n", xs.size(), ps.size(), worst, g_failures);
    return g_failures == 0 ? 0 : 1;
}
