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

inline float exp_f32(float x) {
    using c = exp_f32_consts;
    if (x < c::lo) return 0.0f;
    if (x != x) return x;
    const float n = std::nearbyint(x * c::log2e);
    float r = std::fma(n, -c::ln2_hi, x);
    r = std::fma(n, -c::ln2_lo, r);
    float p = std::fma(c::p0, r, c::p1);
    p = std::fma(p, r, c::p2);
    p = std::fma(p, r, c::p3);
    p = std::fma(p, r, c::p4);
    p = std::fma(p, r, c::p5);
    const float y = std::fma(p, r * r, r) + 1.0f;
    const uint32_t e = static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23;
    float s;
    std::memcpy(&s, &e, 4);
    return y * s;
}

} // namespace kail::cpu
