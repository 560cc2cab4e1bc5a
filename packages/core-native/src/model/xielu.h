// xIELU (Apertus's FFN activation), as llama.cpp's ggml_xielu computes it: the file's raw
// parameters become alpha_p' = softplus(alpha_p) and alpha_n' = beta + softplus(alpha_n) (ggml's
// softplus: x above 20, else log(1 + exp(x)), in float), then per value
//   x > 0:  alpha_p' x^2 + beta x
//   x <= 0: (expm1(min(x, eps)) - x) alpha_n' + beta x
// all in float.
#pragma once

#include <cmath>

namespace kail {

struct xielu_coeffs {
    float alpha_n, alpha_p, beta, eps;
};

inline float xielu_softplus(float v) { return v > 20.0f ? v : std::log(1.0f + std::exp(v)); }

/** The coefficients ggml_xielu stores for the raw parameters. */
inline xielu_coeffs xielu_from_raw(float alpha_n, float alpha_p, float beta, float eps) {
    return {beta + xielu_softplus(alpha_n), xielu_softplus(alpha_p), beta, eps};
}

inline float xielu(float x, const xielu_coeffs & c) {
    if (x > 0.0f) return c.alpha_p * x * x + c.beta * x;
    const float m = std::fmin(x, c.eps);
    return (std::expm1(m) - x) * c.alpha_n + c.beta * x;
}

}  // namespace kail
