// exp for attention's softmax, the same bits at every kernel level: each step is one IEEE float
// operation (multiply, fused multiply-add, add, round to nearest even), which scalar code
// (std::fma, std::nearbyint) and the AVX2 and AVX-512 lanes compute alike. Cephes' expf: x = n ln2
// + r with |r| <= ln2 / 2 (ln2 in two parts), e^r by its degree-7 polynomial, times 2^n built in
// the exponent bits. Within 2 ulp of exp (test-quants measures it); 0 below ln(2^-126), where 2^n
// would leave the normal range (a softmax's terms there are below any weight F16 or F32 keeps).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace kail::cpu {

struct exp_f32_consts {
    static constexpr float lo = -87.33654475f;  // ln(2^-126): below it, 0
    static constexpr float log2e = 1.44269504088896341f;
    static constexpr float ln2_hi = 0.693359375f, ln2_lo = -2.12194440e-4f;
    static constexpr float p0 = 1.9875691500e-4f, p1 = 1.3981999507e-3f, p2 = 8.3334519073e-3f, p3 = 4.1665795894e-2f,
                           p4 = 1.6666665459e-1f, p5 = 5.0000001201e-1f;
};

// exp's steps for x >= lo (NaN aside), on a float or on a vector of them: O gives its type V and
// set1, mul, add, fma, round (to nearest, ties even) and pow2 (2^n of an integral n in [-126, 127]
// built in the exponent bits). Every level computes exp with this one definition.
template <typename O>
typename O::V exp_f32_steps(typename O::V x) {
    using c = exp_f32_consts;
    const auto n = O::round(O::mul(x, O::set1(c::log2e)));
    auto r = O::fma(n, O::set1(-c::ln2_hi), x);
    r = O::fma(n, O::set1(-c::ln2_lo), r);
    auto p = O::fma(O::set1(c::p0), r, O::set1(c::p1));
    p = O::fma(p, r, O::set1(c::p2));
    p = O::fma(p, r, O::set1(c::p3));
    p = O::fma(p, r, O::set1(c::p4));
    p = O::fma(p, r, O::set1(c::p5));
    const auto y = O::add(O::fma(p, O::mul(r, r), r), O::set1(1.0f));
    return O::mul(y, O::pow2(n));
}

struct exp_ops_scalar {
    using V = float;
    static float set1(float v) { return v; }
    static float mul(float a, float b) { return a * b; }
    static float add(float a, float b) { return a + b; }
    static float fma(float a, float b, float c) { return std::fma(a, b, c); }
    static float round(float a) { return std::nearbyint(a); }
    static float pow2(float n) {
        const uint32_t e = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
        float s;
        std::memcpy(&s, &e, 4);
        return s;
    }
};

inline float exp_f32(float x) {
    if (x < exp_f32_consts::lo) return 0.0f;
    if (x != x) return x;
    return exp_f32_steps<exp_ops_scalar>(x);
}

} // namespace kail::cpu
