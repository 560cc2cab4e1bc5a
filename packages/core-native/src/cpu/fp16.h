// Scalar half-precision conversions shared by every kernel file (header-only so the ISA-specific
// files can inline them). Bit-exact with F16C (VCVTPS2PH imm=0 / VCVTPH2PS) for every input,
// NaN payloads included, so scalar and SIMD paths never disagree.
#pragma once

#include <cstdint>
#include <cstring>

namespace kail::cpu {

inline uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

inline float fp16_to_fp32_sw(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) {  // inf / NaN; NaNs come out quiet, as VCVTPH2PS makes them
        return bits_f32(sign | 0x7f800000u | (mant ? 0x400000u : 0u) | (mant << 13));
    }
    if (exp != 0) return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
    if (mant == 0) return bits_f32(sign);
    // Subnormal half: normalise the mantissa into an fp32 normal.
    uint32_t e = 113;
    while (!(mant & 0x400u)) { mant <<= 1; e--; }
    return bits_f32(sign | (e << 23) | ((mant & 0x3ffu) << 13));
}

inline uint16_t fp32_to_fp16_sw(float f) {
    uint32_t x = f32_bits(f);
    const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
    x &= 0x7fffffffu;
    if (x >= 0x7f800000u) {  // inf or NaN (NaN: quieted, top mantissa bits kept, like F16C)
        if (x == 0x7f800000u) return sign | 0x7c00u;
        return static_cast<uint16_t>(sign | 0x7e00u | ((x & 0x7fffffu) >> 13));
    }
    if (x >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to inf
    if (x < 0x38800000u) {                         // below the smallest normal half (2^-14)
        if (x <= 0x33000000u) return sign;         // <= 2^-25 rounds (to even) to zero
        const uint32_t e = x >> 23;
        const uint32_t mant = (x & 0x7fffffu) | 0x800000u;
        const uint32_t shift = 126 - e;            // 14..24
        uint32_t h = mant >> shift;
        const uint32_t rem = mant & ((1u << shift) - 1);
        const uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (h & 1))) h++;
        return static_cast<uint16_t>(sign | h);
    }
    x += 0xfffu + ((x >> 13) & 1u);  // round to nearest even on the 13 dropped bits
    return static_cast<uint16_t>(sign | ((x - (112u << 23)) >> 13));
}

inline float bf16_to_fp32_sw(uint16_t h) { return bits_f32(static_cast<uint32_t>(h) << 16); }

inline uint16_t fp32_to_bf16_sw(float f) {
    const uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 64);  // quiet NaN
    return static_cast<uint16_t>((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

} // namespace kail::cpu
