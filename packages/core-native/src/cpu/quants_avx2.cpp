// AVX2 (+FMA, F16C, BMI2) kernels, each in two flavours: with AVX-VNNI (VPDPBUSD / VPDPWSSD) and
// without (VPMADDUBSW + VPMADDWD). The file is compiled with -mavxvnni, so it must hold no plain C
// loops the vectoriser could turn into VNNI dot products: the non-VNNI table runs on CPUs without
// them. Everything here is written with intrinsics for that reason (scalar loops live in
// quants.cpp).
#include <immintrin.h>

#include <cmath>

#include <cstring>
#include <initializer_list>
#include <type_traits>

#include "cpu/exp_f32.h"
#include "cpu/fp16.h"
#include "cpu/iq_grids.h"
#include "cpu/quants_impl.h"
#include "cpu/quants_x86_steps.h"

namespace kail::cpu {

namespace {

#define KAIL_INLINE inline __attribute__((always_inline))

KAIL_INLINE float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

KAIL_INLINE int hsum8i(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
    return _mm_cvtsi128_si32(s);
}

KAIL_INLINE float h2f(const uint8_t * p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

// acc + (16-bit pairs of p) x (16-bit pairs of sc).
template <bool VNNI>
KAIL_INLINE __m256i dpw(__m256i acc, __m256i p, __m256i sc) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
    // (This file compiled again for the AVX-512 level: quants_iq_avx512.cpp. The EVEX form.)
    if constexpr (VNNI) return _mm256_dpwssd_epi32(acc, p, sc);
#else
    if constexpr (VNNI) return _mm256_dpwssd_avx_epi32(acc, p, sc);
#endif
    else return _mm256_add_epi32(acc, _mm256_madd_epi16(p, sc));
}

// 32 bits -> 32 bytes of 0xFF where the bit is set.
KAIL_INLINE __m256i bits_to_bytes(uint32_t x) {
    const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0x0000000000000000);
    const __m256i sel = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
    const __m256i b = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(x)), shuf), sel);
    return _mm256_cmpeq_epi8(b, sel);
}

// ---------------------------------------------------------------- tile dispatch

template <template <int, int> class TILE, int R, int T>
struct tile_table {
    using fn = void (*)(int64_t, const uint8_t *, size_t, const uint8_t * const *, float * const *);
    fn f[R][T];
    constexpr tile_table() : f() { fill<1, 1>(); }
    template <int r, int t>
    constexpr void fill() {
        if constexpr (r <= R) {
            if constexpr (t <= T) {
                f[r - 1][t - 1] = &TILE<r, t>::run;
                fill<r, t + 1>();
            } else {
                fill<r + 1, 1>();
            }
        }
    }
};

template <template <int, int> class TILE, int R, int T>
void gemm_dispatch(int64_t k, const uint8_t * w, size_t ws, int nr, const uint8_t * const * a, int nt, float * const * out) {
    static constexpr tile_table<TILE, R, T> table{};
    table.f[nr - 1][nt - 1](k, w, ws, a, out);
}

template <int R, int T>
KAIL_INLINE void store_tile(__m256 (&acc)[R][T], float * const * out) {
#pragma GCC unroll 8
    for (int t = 0; t < T; t++)
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) out[t][r] = hsum8(acc[r][t]);
}

// ---------------------------------------------------------------- NVFP4 (Q8_0 activations)
// Four UE4M3 scale bytes -> ue4m3_half of each: the byte's 7 low bits shifted left 7 are the fp16
// of its value x 2^-8 (an E4M3 exponent field in fp16's, subnormals included), exact, so x 128
// gives the value halved; 0x7F (NaN) reads 0, bit 7 is ignored, as in ue4m3_half.
KAIL_INLINE __m128 ue4m3_half4(const uint8_t * p) {
    uint32_t d4;
    std::memcpy(&d4, p, 4);
    const __m128i u = _mm_cvtepu8_epi32(_mm_cvtsi32_si128(static_cast<int>(d4)));
    const __m128i h = _mm_andnot_si128(_mm_cmpeq_epi32(u, _mm_set1_epi32(0x7F)), _mm_slli_epi32(_mm_and_si128(u, _mm_set1_epi32(0x7F)), 7));
    return _mm_mul_ps(_mm_cvtph_ps(_mm_packus_epi32(h, h)), _mm_set1_ps(128.0f));
}

// A block's 64 values as the two Q8_0 blocks they meet, as IQ4_NL / MXFP4 do: the 4-bit indices
// (sub-block s: bytes 8s..8s+7, low nibbles then high) reordered with 64-bit unpacks to element
// order, looked up in the FP4 table, VPMADDUBSW on the levels' magnitudes against the activations
// with the levels' signs, pairs to int32. Lanes 0-3 of each int32 vector are one sub-block, 4-7 the
// next, so each takes its scale x the Q8_0 block's; the two halves are summed before the one add
// into the accumulator (a short dependency chain for matrix x vector). The same operations per
// (row, token) whatever the tile: batch-invariant.
template <bool VNNI>
struct nvfp4_kernel {
    template <int R, int T>
    struct tile {
        static void run(int64_t k, const uint8_t * w, size_t ws, const uint8_t * const * a, float * const * out) {
            const __m256i levels = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(kFp4Levels)));
            const __m256i m4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
            const __m256i i01 = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1), i23 = _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3);
            __m256 acc[R][T];
#pragma GCC unroll 8
            for (int r = 0; r < R; r++)
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps();
            const size_t ahead = rows_ahead(ws, R);
            for (int64_t ib = 0; ib < k / QK_NVFP4; ib++) {
#pragma GCC unroll 8
                for (int r = 0; r < R; r++) {
                    const block_nvfp4 * b = reinterpret_cast<const block_nvfp4 *>(w + r * ws) + ib;
                    prefetch_bytes(reinterpret_cast<const uint8_t *>(b) + ahead, sizeof(block_nvfp4));
                    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b->qs));
                    const __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                    const __m256i A = _mm256_unpacklo_epi64(lo, hi), B = _mm256_unpackhi_epi64(lo, hi);  // [s0, s2], [s1, s3]
                    const __m256i sg0 = _mm256_shuffle_epi8(levels, _mm256_permute2x128_si256(A, B, 0x20));
                    const __m256i sg1 = _mm256_shuffle_epi8(levels, _mm256_permute2x128_si256(A, B, 0x31));
                    const __m256i u0 = _mm256_abs_epi8(sg0), u1 = _mm256_abs_epi8(sg1);
                    const __m256 d4 = _mm256_castps128_ps256(ue4m3_half4(b->d));
                    const __m256 S0 = _mm256_permutevar8x32_ps(d4, i01), S1 = _mm256_permutevar8x32_ps(d4, i23);
#pragma GCC unroll 8
                    for (int t = 0; t < T; t++) {
                        const block_q8_0 * y = reinterpret_cast<const block_q8_0 *>(a[t]) + 2 * ib;
                        const __m256i p0 = _mm256_maddubs_epi16(u0, _mm256_sign_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(y[0].qs)), sg0));
                        const __m256i p1 = _mm256_maddubs_epi16(u1, _mm256_sign_epi8(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(y[1].qs)), sg1));
                        const __m256i s0 = dpw<VNNI>(_mm256_setzero_si256(), p0, ones), s1 = dpw<VNNI>(_mm256_setzero_si256(), p1, ones);
                        __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(s0), _mm256_mul_ps(S0, _mm256_set1_ps(_cvtsh_ss(y[0].d))));
                        v = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1), _mm256_mul_ps(S1, _mm256_set1_ps(_cvtsh_ss(y[1].d))), v);
                        acc[r][t] = _mm256_add_ps(acc[r][t], v);
                    }
                }
            }
            store_tile<R, T>(acc, out);
        }
    };
};

// ---------------------------------------------------------------- TQ2_0 (Q8_K activations)
// Q2_K's 2-bit layout (element 128h + 32l + m: bits 2l of qs[32h + m]) with no scales: the codes q
// (0..2) go unsigned into VPDPBUSD / VPMADDUBSW against the activations, and the offset 1 comes
// off as the block's activation sum (its bsums). Per 4-byte lane the two sums cover different
// elements, so they are subtracted only once reduced to the super-block's one int32, which is
// then exactly the scalar kernel's sum (lane by lane in float it lost the large offset terms'
// rounding); float(sum) * (d_y * d) is added as the scalar kernel does, separately rounded: the
// scalar kernel's bits at every tile shape (batch-invariant).
template <bool VNNI>
struct tq2_0_kernel {
    template <int R, int T>
    struct tile {
        static void run(int64_t k, const uint8_t * w, size_t ws, const uint8_t * const * a, float * const * out) {
            const __m256i m3 = _mm256_set1_epi8(3), ones = _mm256_set1_epi16(1);
            __m128 acc[R][T];
            zero_acc(acc);
            const size_t ahead = rows_ahead(ws, R);
            for (int64_t i = 0; i < k / QK_K; i++) {
#pragma GCC unroll 8
                for (int r = 0; r < R; r++) {
                    const block_tq2_0 * b = reinterpret_cast<const block_tq2_0 *>(w + r * ws) + i;
                    prefetch_bytes(reinterpret_cast<const uint8_t *>(b) + ahead, sizeof(block_tq2_0));
                    __m256i u[8];
#pragma GCC unroll 2
                    for (int h = 0; h < 2; h++) {
                        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b->qs + 32 * h));
                        u[4 * h] = _mm256_and_si256(q, m3);
                        u[4 * h + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 2), m3);
                        u[4 * h + 2] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m3);
                        u[4 * h + 3] = _mm256_and_si256(_mm256_srli_epi16(q, 6), m3);
                    }
                    const float d = _cvtsh_ss(b->d);
#pragma GCC unroll 8
                    for (int t = 0; t < T; t++) {
                        const block_q8_K * y = reinterpret_cast<const block_q8_K *>(a[t]) + i;
                        __m256i s;
                        if constexpr (VNNI) {
                            s = _mm256_setzero_si256();
#pragma GCC unroll 8
                            for (int l = 0; l < 8; l++) s = _mm256_dpbusd_avx_epi32(s, u[l], _mm256_loadu_si256(reinterpret_cast<const __m256i *>(y->qs + 32 * l)));
                        } else {
                            // |pair| <= 2 * 2 * 128: eight of them stay below 2^15.
                            __m256i p = _mm256_maddubs_epi16(u[0], _mm256_loadu_si256(reinterpret_cast<const __m256i *>(y->qs)));
#pragma GCC unroll 8
                            for (int l = 1; l < 8; l++) p = _mm256_add_epi16(p, _mm256_maddubs_epi16(u[l], _mm256_loadu_si256(reinterpret_cast<const __m256i *>(y->qs + 32 * l))));
                            s = _mm256_madd_epi16(p, ones);
                        }
                        s = _mm256_sub_epi32(s, _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(y->bsums)), ones));
                        const __m128 f = _mm_cvtsi32_ss(_mm_setzero_ps(), hsum8i(s));
                        acc[r][t] = _mm_add_ss(acc[r][t], _mm_mul_ss(f, _mm_set_ss(y->d * d)));
                    }
                }
            }
            store_acc(acc, out);
        }
    };
};

// ---------------------------------------------------------------- TQ1_0 (Q8_K activations)
// The packed trits decoded as the scalar table is built: a byte's n-th trit is ((b * 3^n mod 256)
// * 3) >> 8. The powers come by byte arithmetic (x3 = x + x + x, x9 = ((x << 3) & ~7) + x per
// byte), the top trit as (q >= 86) + (q >= 171), exact for every byte. qs[0..31] give elements
// 0..159 (power n: elements 32n..32n+31); qs[32..47] (lower half) with qh broadcast to the upper
// half give 160..255 through 128-bit permutes and dword blends. Then as TQ2_0: the trits (0..2)
// unsigned against the activations, the offset 1 off through the bsums once reduced to the
// super-block's one int32, float(sum) * (d * d_y) added: the scalar kernel's bits at every tile
// shape.
KAIL_INLINE __m256i tq1_trit(__m256i q) {
    const __m256i one = _mm256_set1_epi8(1);
    const __m256i t1 = _mm256_min_epu8(_mm256_subs_epu8(q, _mm256_set1_epi8(85)), one);
    const __m256i t2 = _mm256_min_epu8(_mm256_subs_epu8(q, _mm256_set1_epi8(static_cast<char>(170))), one);
    return _mm256_add_epi8(t1, t2);
}
// A block's byte powers, before the trit step: p[j] holds elements 32j..32j+31.
KAIL_INLINE void tq1_0_powers(const block_tq1_0 * b, __m256i (&p)[8]) {
    const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b->qs));
    const __m256i x3 = tq1_mul3(x1);
    p[0] = x1, p[1] = x3, p[2] = tq1_mul9(x1), p[3] = tq1_mul9(x3), p[4] = tq1_mul9(p[2]);
    uint32_t h;
    std::memcpy(&h, b->qh, 4);
    const __m256i z1 = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b->qs + 32))),
                                               _mm_set1_epi32(static_cast<int>(h)), 1);
    const __m256i z3 = tq1_mul3(z1), z9 = tq1_mul9(z1), z27 = tq1_mul9(z3), z81 = tq1_mul9(z9);
    p[5] = _mm256_permute2x128_si256(z1, z3, 0x20);
    p[6] = _mm256_permute2x128_si256(z9, z27, 0x20);
    // Upper half: qh's trit n (dword 4 + n of z * 3^n).
    p[7] = _mm256_blend_epi32(z81, _mm256_blend_epi32(_mm256_blend_epi32(z1, z3, 0x20), _mm256_blend_epi32(z9, z27, 0x80), 0xC0), 0xF0);
}

template <bool VNNI>
struct tq1_0_kernel {
    template <int R, int T>
    struct tile {
        static void run(int64_t k, const uint8_t * w, size_t ws, const uint8_t * const * a, float * const * out) {
            const __m256i ones = _mm256_set1_epi16(1);
            __m128 acc[R][T];
            zero_acc(acc);
            const size_t ahead = rows_ahead(ws, R);
            for (int64_t i = 0; i < k / QK_K; i++) {
#pragma GCC unroll 8
                for (int r = 0; r < R; r++) {
                    const block_tq1_0 * b = reinterpret_cast<const block_tq1_0 *>(w + r * ws) + i;
                    prefetch_bytes(reinterpret_cast<const uint8_t *>(b) + ahead, sizeof(block_tq1_0));
                    __m256i u[8];
                    tq1_0_powers(b, u);
#pragma GCC unroll 8
                    for (int l = 0; l < 8; l++) u[l] = tq1_trit(u[l]);
                    const float d = _cvtsh_ss(b->d);
#pragma GCC unroll 8
                    for (int t = 0; t < T; t++) {
                        const block_q8_K * y = reinterpret_cast<const block_q8_K *>(a[t]) + i;
                        __m256i s;
                        if constexpr (VNNI) {
                            s = _mm256_setzero_si256();
#pragma GCC unroll 8
                            for (int l = 0; l < 8; l++) s = _mm256_dpbusd_avx_epi32(s, u[l], _mm256_loadu_si256(reinterpret_cast<const __m256i *>(y->qs + 32 * l)));
                        } else {
                            // |pair| <= 2 * 2 * 128: eight of them stay below 2^15.
                            __m256i p = _mm256_maddubs_epi16(u[0], _mm256_loadu_si256(reinterpret_cast<const __m256i *>(y->qs)));
#pragma GCC unroll 8
                            for (int l = 1; l < 8; l++) p = _mm256_add_epi16(p, _mm256_maddubs_epi16(u[l], _mm256_loadu_si256(reinterpret_cast<const __m256i *>(y->qs + 32 * l))));
                            s = _mm256_madd_epi16(p, ones);
                        }
                        s = _mm256_sub_epi32(s, _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(y->bsums)), ones));
                        const __m128 f = _mm_cvtsi32_ss(_mm_setzero_ps(), hsum8i(s));
                        acc[r][t] = _mm_add_ss(acc[r][t], _mm_mul_ss(f, _mm_set_ss(d * y->d)));
                    }
                }
            }
            store_acc(acc, out);
        }
    };
};

// ---------------------------------------------------------------- Q2_0, Q1_0 (Q8_0 activations)
// Both take the scalar kernels' float steps on exact per-Q8_0-block int32 sums: sumi = dy_0 * s_0 +
// dy_1 * s_1 (+ ...) in block order, then acc + d * sumi, each step a separately rounded scalar
// instruction (nothing that could contract to an FMA): the scalar kernel's bits at every tile shape
// (batch-invariant). Those steps and the sums' helpers are in quants_x86_steps.h (the AVX-512 file's too).

// Q2_0: a block's 16 bytes broadcast to both 128-bit halves, the upper shifted by 4, give codes 0
// and 1 of each byte (lower half) and 2 and 3 (upper); byte then 16-bit unpacks and 128-bit
// permutes put them in element order, two vectors of 32 unsigned codes (0..3). VPMADDUBSW against
// the activations less VPMADDUBSW of ones (the offset 1; pairs stay within int16), pairs to int32,
// each Q8_0 block's lanes reduced to its exact int sum; four blocks at a time (q2_0_group_steps),
// then single blocks.
KAIL_INLINE void q2_0_codes(const uint8_t * qs, __m256i & u0, __m256i & u1) {
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m256i q = _mm256_srlv_epi32(_mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(qs))),
                                        _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4));
    const __m256i ev = _mm256_and_si256(q, m3), od = _mm256_and_si256(_mm256_srli_epi16(q, 2), m3);
    const __m256i lo = _mm256_unpacklo_epi8(ev, od), hi = _mm256_unpackhi_epi8(ev, od);  // bytes 0-7 / 8-15: codes [0 1 | 2 3]
    const __m256i X = _mm256_permute2x128_si256(lo, hi, 0x20), Y = _mm256_permute2x128_si256(lo, hi, 0x31);
    const __m256i A = _mm256_unpacklo_epi16(X, Y), B = _mm256_unpackhi_epi16(X, Y);  // elements [0-15, 32-47], [16-31, 48-63]
    u0 = _mm256_permute2x128_si256(A, B, 0x20);
    u1 = _mm256_permute2x128_si256(A, B, 0x31);
}

template <bool VNNI>
struct q2_0_kernel {
    template <int R, int T>
    struct tile {
        static void run(int64_t k, const uint8_t * w, size_t ws, const uint8_t * const * a, float * const * out) {
            const __m256i ones8 = _mm256_set1_epi8(1), ones = _mm256_set1_epi16(1);
            __m128 acc[R][T];
            zero_acc(acc);
            const size_t ahead = rows_ahead(ws, R);
            const int64_t nb = k / QK2_0;
            int64_t ib = 0;
            for (; ib + 4 <= nb; ib += 4) {
#pragma GCC unroll 8
                for (int r = 0; r < R; r++) {
                    const block_q2_0 * b = reinterpret_cast<const block_q2_0 *>(w + r * ws) + ib;
                    prefetch_bytes(reinterpret_cast<const uint8_t *>(b) + ahead, 4 * sizeof(block_q2_0));
                    __m256i u[8];
#pragma GCC unroll 4
                    for (int j = 0; j < 4; j++) q2_0_codes(b[j].qs, u[2 * j], u[2 * j + 1]);
                    const __m256 d = q2_0_scales4(b);
#pragma GCC unroll 8
                    for (int t = 0; t < T; t++) {
                        const block_q8_0 * y = reinterpret_cast<const block_q8_0 *>(a[t]) + 2 * ib;
                        __m256i sv[8];
#pragma GCC unroll 8
                        for (int j = 0; j < 8; j++) {
                            const __m256i yj = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(y[j].qs));
                            sv[j] = dpw<VNNI>(_mm256_setzero_si256(), _mm256_sub_epi16(_mm256_maddubs_epi16(u[j], yj), _mm256_maddubs_epi16(ones8, yj)), ones);
                        }
                        acc[r][t] = q2_0_group_steps(acc[r][t], hsum8x8i(sv), q8_0_scales8(y), d);
                    }
                }
            }
            for (; ib < nb; ib++) {
#pragma GCC unroll 8
                for (int r = 0; r < R; r++) {
                    const block_q2_0 * b = reinterpret_cast<const block_q2_0 *>(w + r * ws) + ib;
                    prefetch_bytes(reinterpret_cast<const uint8_t *>(b) + ahead, sizeof(block_q2_0));
                    __m256i u0, u1;
                    q2_0_codes(b->qs, u0, u1);
                    const float d = _cvtsh_ss(b->d);
#pragma GCC unroll 8
                    for (int t = 0; t < T; t++) {
                        const block_q8_0 * y = reinterpret_cast<const block_q8_0 *>(a[t]) + 2 * ib;
                        const __m256i y0 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(y[0].qs));
                        const __m256i y1 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(y[1].qs));
                        const __m256i p0 = _mm256_sub_epi16(_mm256_maddubs_epi16(u0, y0), _mm256_maddubs_epi16(ones8, y0));
                        const __m256i p1 = _mm256_sub_epi16(_mm256_maddubs_epi16(u1, y1), _mm256_maddubs_epi16(ones8, y1));
                        const __m256i s0 = dpw<VNNI>(_mm256_setzero_si256(), p0, ones), s1 = dpw<VNNI>(_mm256_setzero_si256(), p1, ones);
                        acc[r][t] = q8_0_block_steps<2>(acc[r][t], hsum2x8i(s0, s1), y, d);
                    }
                }
            }
            store_acc(acc, out);
        }
    };
};

// Q1_0: each Q8_0 block's 32 sign bits to bytes (bits_to_bytes: 0xFF where set); the activations
// under the set bits summed (VPMADDUBSW of ones), doubled, less all of them: 2 * set - all, exact
// for any int8 activations, each Q8_0 block's lanes reduced to its int sum; two blocks at a time
// (q1_0_group_steps), then single blocks.
template <bool VNNI>
struct q1_0_kernel {
    template <int R, int T>
    struct tile {
        static void run(int64_t k, const uint8_t * w, size_t ws, const uint8_t * const * a, float * const * out) {
            const __m256i ones8 = _mm256_set1_epi8(1), ones = _mm256_set1_epi16(1);
            __m128 acc[R][T];
            zero_acc(acc);
            const size_t ahead = rows_ahead(ws, R);
            const int64_t nb = k / QK1_0;
            int64_t ib = 0;
            for (; ib + 2 <= nb; ib += 2) {
#pragma GCC unroll 8
                for (int r = 0; r < R; r++) {
                    const block_q1_0 * b = reinterpret_cast<const block_q1_0 *>(w + r * ws) + ib;
                    prefetch_bytes(reinterpret_cast<const uint8_t *>(b) + ahead, 2 * sizeof(block_q1_0));
                    __m256i m[8];
#pragma GCC unroll 8
                    for (int j = 0; j < 8; j++) {
                        uint32_t bits;
                        std::memcpy(&bits, b[j / 4].qs + 4 * (j % 4), 4);
                        m[j] = bits_to_bytes(bits);
                    }
                    const __m256 d = q1_0_scales2(b);
#pragma GCC unroll 8
                    for (int t = 0; t < T; t++) {
                        const block_q8_0 * y = reinterpret_cast<const block_q8_0 *>(a[t]) + 4 * ib;
                        __m256i sv[8];
#pragma GCC unroll 8
                        for (int j = 0; j < 8; j++) {
                            const __m256i yj = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(y[j].qs));
                            const __m256i set = _mm256_maddubs_epi16(ones8, _mm256_and_si256(m[j], yj));
                            sv[j] = dpw<VNNI>(_mm256_setzero_si256(), _mm256_sub_epi16(_mm256_add_epi16(set, set), _mm256_maddubs_epi16(ones8, yj)), ones);
                        }
                        acc[r][t] = q1_0_group_steps(acc[r][t], hsum8x8i(sv), q8_0_scales8(y), d);
                    }
                }
            }
            for (; ib < nb; ib++) {
#pragma GCC unroll 8
                for (int r = 0; r < R; r++) {
                    const block_q1_0 * b = reinterpret_cast<const block_q1_0 *>(w + r * ws) + ib;
                    prefetch_bytes(reinterpret_cast<const uint8_t *>(b) + ahead, sizeof(block_q1_0));
                    __m256i m[4];
#pragma GCC unroll 4
                    for (int j = 0; j < 4; j++) {
                        uint32_t bits;
                        std::memcpy(&bits, b->qs + 4 * j, 4);
                        m[j] = bits_to_bytes(bits);
                    }
                    const float d = _cvtsh_ss(b->d);
#pragma GCC unroll 8
                    for (int t = 0; t < T; t++) {
                        const block_q8_0 * y = reinterpret_cast<const block_q8_0 *>(a[t]) + 4 * ib;
                        __m256i s[4];
#pragma GCC unroll 4
                        for (int j = 0; j < 4; j++) {
                            const __m256i yj = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(y[j].qs));
                            const __m256i set = _mm256_maddubs_epi16(ones8, _mm256_and_si256(m[j], yj));
                            const __m256i p = _mm256_sub_epi16(_mm256_add_epi16(set, set), _mm256_maddubs_epi16(ones8, yj));
                            s[j] = dpw<VNNI>(_mm256_setzero_si256(), p, ones);
                        }
                        acc[r][t] = q8_0_block_steps<4>(acc[r][t], hsum4x8i(s[0], s[1], s[2], s[3]), y, d);
                    }
                }
            }
            store_acc(acc, out);
        }
    };
};

// ---------------------------------------------------------------- legacy 32-element blocks

// Two blocks of one weight row, matching half of a prepared split group.
struct whalf {
    __m256i lo, hi;    // unsigned quants (q + offset), or |q| for Q8_0 without VNNI
    __m256i slo, shi;  // Q8_0 without VNNI: the signed quants, for the sign trick
    __m256 d, m;
};

KAIL_INLINE __m256i load_pair16(const uint8_t * p0, const uint8_t * p1, bool has1) {
    const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p0));
    const __m128i q1 = has1 ? _mm_loadu_si128(reinterpret_cast<const __m128i *>(p1)) : _mm_setzero_si128();
    return _mm256_inserti128_si256(_mm256_castsi128_si256(q0), q1, 1);
}

// TYPE: 0 = Q4_0, 1 = Q4_1, 2 = Q5_0, 3 = Q5_1, 4 = Q8_0, 5 = IQ4_NL, 6 = MXFP4.
// IQ4_NL and MXFP4 are Q4_0's layout (MXFP4 with a one-byte E8M0 scale) whose 4-bit indices look
// up levels: with VNNI the levels + 128 (IQ4_NL, 1..241) or + 12 (MXFP4, 0..24) go unsigned into
// VPDPBUSD against activations prepared with -128 or -12 x their sums, so the int32 lanes hold
// exactly sum(level x q); without VNNI, IQ4_NL's levels take Q8_0's sign trick (their magnitudes
// against the activations signed by them: VPMADDUBSW pairs stay within int16), MXFP4's + 12 the
// unsigned path.
template <int TYPE, bool VNNI>
struct split_dec {
    static constexpr int GB = 4;
    static constexpr int BB = TYPE == 0 || TYPE == 5 ? 18 : TYPE == 1 ? 20 : TYPE == 2 ? 22 : TYPE == 3 ? 24 : TYPE == 6 ? 17 : 34;
    static constexpr int QS_OFF = TYPE == 0 || TYPE == 4 || TYPE == 5 ? 2 : TYPE == 1 ? 4 : TYPE == 2 ? 6 : TYPE == 3 ? 8 : 1;
    static constexpr bool HAS_MIN = TYPE == 1 || TYPE == 3;
    static constexpr bool HAS_QH = TYPE == 2 || TYPE == 3;
    static constexpr bool Q8 = TYPE == 4;
    static constexpr bool LUT = TYPE == 5 || TYPE == 6;
    static constexpr bool SIGN_TRICK = (Q8 || TYPE == 5) && !VNNI;
    static constexpr int QH_OFF = HAS_MIN ? 4 : 2;

    // The block's scale: fp16 d, or MXFP4's E8M0 halved.
    static KAIL_INLINE float scale(const uint8_t * p) {
        if constexpr (TYPE == 6) return e8m0_half(p[0]);
        else return h2f(p);
    }

    // nbk = 1 or 2 blocks present (the second of a pair may be missing at the end of a row).
    static KAIL_INLINE whalf load(const uint8_t * p, int nbk) {
        whalf w;
        if constexpr (Q8) {
            const __m256i lo = load_pair16(p + QS_OFF, p + BB + QS_OFF, nbk > 1);
            const __m256i hi = load_pair16(p + QS_OFF + 16, p + BB + QS_OFF + 16, nbk > 1);
            if constexpr (VNNI) {
                w.lo = _mm256_xor_si256(lo, _mm256_set1_epi8(char(0x80)));
                w.hi = _mm256_xor_si256(hi, _mm256_set1_epi8(char(0x80)));
            } else {
                w.slo = lo;
                w.shi = hi;
                w.lo = _mm256_sign_epi8(lo, lo);
                w.hi = _mm256_sign_epi8(hi, hi);
            }
        } else {
            const __m256i q = load_pair16(p + QS_OFF, p + BB + QS_OFF, nbk > 1);
            const __m256i m4 = _mm256_set1_epi8(0x0F);
            w.lo = _mm256_and_si256(q, m4);
            w.hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
            if constexpr (LUT) {
                // A missing second block looks up index 0, against zeroed activations and d = 0.
                const void * tab = TYPE == 6 ? static_cast<const void *>(kFp4LevelsU12) : SIGN_TRICK ? static_cast<const void *>(kIq4Levels) : static_cast<const void *>(kIq4LevelsU128);
                const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(static_cast<const __m128i *>(tab)));
                w.lo = _mm256_shuffle_epi8(table, w.lo);
                w.hi = _mm256_shuffle_epi8(table, w.hi);
                if constexpr (SIGN_TRICK) {
                    w.slo = w.lo;
                    w.shi = w.hi;
                    w.lo = _mm256_sign_epi8(w.lo, w.lo);
                    w.hi = _mm256_sign_epi8(w.hi, w.hi);
                }
            }
        }
        if constexpr (HAS_QH) {
            uint32_t h0, h1 = 0;
            std::memcpy(&h0, p + QH_OFF, 4);
            if (nbk > 1) std::memcpy(&h1, p + BB + QH_OFF, 4);
            const __m256i k16 = _mm256_set1_epi8(16);
            w.lo = _mm256_or_si256(w.lo, _mm256_and_si256(bits_to_bytes((h0 & 0xFFFFu) | (h1 << 16)), k16));
            w.hi = _mm256_or_si256(w.hi, _mm256_and_si256(bits_to_bytes((h0 >> 16) | (h1 & 0xFFFF0000u)), k16));
        }
        const float d0 = scale(p), d1 = nbk > 1 ? scale(p + BB) : 0.f;
        w.d = _mm256_setr_m128(_mm_set1_ps(d0), _mm_set1_ps(d1));
        if constexpr (HAS_MIN) {
            const float m0 = h2f(p + 2), m1 = nbk > 1 ? h2f(p + BB + 2) : 0.f;
            w.m = _mm256_setr_m128(_mm_set1_ps(m0), _mm_set1_ps(m1));
        } else {
            w.m = _mm256_setzero_ps();
        }
        return w;
    }

    // ap: prepared group; h: which half (blocks 2h, 2h+1).
    static KAIL_INLINE __m256 dot(const whalf & w, const uint8_t * ap, int h, __m256 acc) {
        const __m256i alo = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(ap + 32 * h));
        const __m256i ahi = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(ap + 64 + 32 * h));
        __m256i c = HAS_MIN || SIGN_TRICK ? _mm256_setzero_si256() : _mm256_loadu_si256(reinterpret_cast<const __m256i *>(ap + 128 + 32 * h));
        if constexpr (SIGN_TRICK) {
            // |w| x sign(a, w) per half; the halves cannot share an int16 sum (2 * 127 * 128 each).
            const __m256i ones = _mm256_set1_epi16(1);
            c = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(w.lo, _mm256_sign_epi8(alo, w.slo)), ones),
                                 _mm256_madd_epi16(_mm256_maddubs_epi16(w.hi, _mm256_sign_epi8(ahi, w.shi)), ones));
        } else if constexpr (VNNI) {
            c = _mm256_dpbusd_avx_epi32(c, w.lo, alo);
            c = _mm256_dpbusd_avx_epi32(c, w.hi, ahi);
        } else {
            // Both halves fit in int16 (<= 2 * 31 * 127 * 2) before widening.
            const __m256i p = _mm256_add_epi16(_mm256_maddubs_epi16(w.lo, alo), _mm256_maddubs_epi16(w.hi, ahi));
            c = _mm256_add_epi32(c, _mm256_madd_epi16(p, _mm256_set1_epi16(1)));
        }
        const __m256 ad = _mm256_loadu_ps(reinterpret_cast<const float *>(ap + 192 + 32 * h));
        acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(c), _mm256_mul_ps(w.d, ad), acc);
        if constexpr (HAS_MIN) acc = _mm256_fmadd_ps(w.m, _mm256_loadu_ps(reinterpret_cast<const float *>(ap + 128 + 32 * h)), acc);
        return acc;
    }

    template <int R, int T>
    static KAIL_INLINE void step(const uint8_t * w, size_t ws, int64_t b, int nbk, const uint8_t * const * a, __m256 (&acc)[R][T]) {
        whalf wv[R];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) wv[r] = load(w + r * ws + b * BB, nbk);
        const int64_t g = b / 4;
        const int h = static_cast<int>((b / 2) % 2);
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            const uint8_t * ap = a[t] + g * PREP_SPLIT_GROUP;
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) acc[r][t] = dot(wv[r], ap, h, acc[r][t]);
        }
    }

    // Two accumulator chains per (row, token): blocks 0-1 of every 4-block group in acc[0], blocks
    // 2-3 in acc[1] (the AVX-512 tiles hold the same two chains in the halves of one register),
    // added lane by lane at the end. Two chains hide the FMA latency of a lone row x vector; tiles
    // and decode run this same loop, so a token's result is the same bits alone or in a batch.
    template <int R, int T>
    static void run(int64_t k, const uint8_t * w, size_t ws, const uint8_t * const * a, float * const * out) {
        const int64_t nb = k / 32;
        __m256 acc[2][R][T];
#pragma GCC unroll 2
        for (int u = 0; u < 2; u++)
#pragma GCC unroll 8
            for (int r = 0; r < R; r++)
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) acc[u][r][t] = _mm256_setzero_ps();
        const size_t ahead = rows_ahead(ws, R);
        int64_t b = 0;
        for (; b + 4 <= nb; b += 4) {
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) prefetch_bytes(w + r * ws + ahead + b * BB, 4 * BB);
            step<R, T>(w, ws, b, 2, a, acc[0]);
            step<R, T>(w, ws, b + 2, 2, a, acc[1]);
        }
        if (b < nb) step<R, T>(w, ws, b, nb - b >= 2 ? 2 : 1, a, acc[0]);
        if (b + 2 < nb) step<R, T>(w, ws, b + 2, 1, a, acc[1]);
        for (int r = 0; r < R; r++)
            for (int t = 0; t < T; t++) acc[0][r][t] = _mm256_add_ps(acc[0][r][t], acc[1][r][t]);
        store_tile<R, T>(acc[0], out);
    }

    template <int R, int T>
    struct tile {
        static void run(int64_t k, const uint8_t * w, size_t ws, const uint8_t * const * a, float * const * out) { split_dec::run<R, T>(k, w, ws, a, out); }
    };

    static void decode(int64_t k, const uint8_t * w, size_t ws, int nr, const uint8_t * const * a, int nt, float * const * out) {
        if (nr == 1) run<1, 1>(k, w, ws, a, out);
        else run<2, 1>(k, w, ws, a, out);
    }
};

// ---------------------------------------------------------------- K-quants (Q8_K activations)
// Weights are decoded 64 values (two sub-blocks of 32, or four groups of 16) at a time, each token
// of the tile accumulating into its own int32 vector; scales are folded in with VPMADDWD/VPDPWSSD.

// Scale for the maddubs lanes of 32 values of sub-block j: the 16-bit word j of sc, 16 times.
KAIL_INLINE __m256i bcast_word(__m256i sc2, int j) {
    const __m256i idx = _mm256_set1_epi16(static_cast<short>((2 * j) | ((2 * j + 1) << 8)));
    return _mm256_shuffle_epi8(sc2, idx);
}

KAIL_INLINE void k4_scales(const uint8_t * packed, __m256i & sc2, __m256i & mins_pairs) {
    const uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
    uint32_t utmp[4];
    std::memcpy(utmp, packed, 12);
    utmp[3] = ((utmp[2] >> 4) & kmask2) | (((utmp[1] >> 6) & kmask3) << 4);
    const uint32_t uaux = utmp[1] & kmask1;
    utmp[1] = (utmp[2] & kmask2) | (((utmp[0] >> 6) & kmask3) << 4);
    utmp[2] = uaux;
    utmp[0] &= kmask1;
    const __m128i v = _mm_setr_epi32(static_cast<int>(utmp[0]), static_cast<int>(utmp[1]), static_cast<int>(utmp[2]), static_cast<int>(utmp[3]));
    const __m128i sc = _mm_cvtepu8_epi16(v);
    sc2 = _mm256_inserti128_si256(_mm256_castsi128_si256(sc), sc, 1);
    const __m128i mn = _mm_cvtepu8_epi16(_mm_srli_si128(v, 8));
    mins_pairs = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi16(mn, mn)), _mm_unpackhi_epi16(mn, mn), 1);
}

// Row state of one super-block that survives across the tokens of a tile.
struct kstate {
    __m256i sc2;    // int16 scales (both 128-bit lanes hold the same words)
    __m256i mn;     // per-bsum multiplier: mins (Q2/4/5_K) or offset * scale (Q3/Q6_K)
    float d, dmin;
};

template <bool VNNI>
struct q4_K_dec {
    static constexpr int BB = 144, NCHUNK = 4;
    static constexpr bool MIN = true;
    static KAIL_INLINE void state(const uint8_t * p, kstate & s) {
        const block_q4_K * b = reinterpret_cast<const block_q4_K *>(p);
        k4_scales(b->scales, s.sc2, s.mn);
        s.d = _cvtsh_ss(b->d);
        s.dmin = _cvtsh_ss(b->dmin);
    }
    // Chunk c: values 64c .. 64c+63 as two vectors, and their scales.
    static KAIL_INLINE void chunk(const uint8_t * p, const kstate & s, int c, __m256i (&u)[2], __m256i (&sc)[2]) {
        const block_q4_K * b = reinterpret_cast<const block_q4_K *>(p);
        const __m256i z = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b->qs + 32 * c));
        const __m256i m4 = _mm256_set1_epi8(0x0F);
        u[0] = _mm256_and_si256(z, m4);
        u[1] = _mm256_and_si256(_mm256_srli_epi16(z, 4), m4);
        sc[0] = bcast_word(s.sc2, 2 * c);
        sc[1] = bcast_word(s.sc2, 2 * c + 1);
    }
};

template <bool VNNI>
struct q5_K_dec {
    static constexpr int BB = 176, NCHUNK = 4;
    static constexpr bool MIN = true;
    static KAIL_INLINE void state(const uint8_t * p, kstate & s) {
        const block_q5_K * b = reinterpret_cast<const block_q5_K *>(p);
        k4_scales(b->scales, s.sc2, s.mn);
        s.d = _cvtsh_ss(b->d);
        s.dmin = _cvtsh_ss(b->dmin);
    }
    static KAIL_INLINE void chunk(const uint8_t * p, const kstate & s, int c, __m256i (&u)[2], __m256i (&sc)[2]) {
        const block_q5_K * b = reinterpret_cast<const block_q5_K *>(p);
        const __m256i z = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b->qs + 32 * c));
        const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b->qh));
        const __m256i m4 = _mm256_set1_epi8(0x0F);
        const __m256i b0 = _mm256_set1_epi8(char(1 << (2 * c))), b1 = _mm256_set1_epi8(char(1 << (2 * c + 1)));
        const __m256i k16 = _mm256_set1_epi8(16);
        u[0] = _mm256_or_si256(_mm256_and_si256(z, m4), _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, b0), b0), k16));
        u[1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(z, 4), m4), _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, b1), b1), k16));
        sc[0] = bcast_word(s.sc2, 2 * c);
        sc[1] = bcast_word(s.sc2, 2 * c + 1);
    }
};

// IQ4_XS: levels from kIq4Levels by 4-bit index. VPMADDUBSW takes their magnitudes (<= 127: a
// pair of products stays below 2^15) against the activations with the levels' signs
// (VPSIGNB; no level is 0); sub-block scales (ls - 32) as Q4_K's. No offset (SIGNED).
template <bool VNNI>
struct iq4_xs_dec {
    static constexpr int BB = 136, NCHUNK = 4;
    static constexpr bool MIN = false;
    static constexpr bool SIGNED = true;
    // The 8 six-bit scales (iq4_xs_scale) as words, unpacked in vector registers: word j takes
    // scales_l's byte j / 2 (its low nibble for even j, high for odd: x16 then >> 4 picks it) and
    // scales_h's bits 2j, 2j + 1 (shifted to the top of the word by a multiply, then down).
    static KAIL_INLINE void state(const uint8_t * p, kstate & s) {
        const block_iq4_xs * b = reinterpret_cast<const block_iq4_xs *>(p);
        uint32_t lo4;
        std::memcpy(&lo4, b->scales_l, 4);
        const __m128i bytes = _mm_shuffle_epi8(_mm_cvtsi32_si128(static_cast<int>(lo4)), _mm_setr_epi8(0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, -1));
        const __m128i nib = _mm_and_si128(_mm_srli_epi16(_mm_mullo_epi16(bytes, _mm_setr_epi16(16, 1, 16, 1, 16, 1, 16, 1)), 4), _mm_set1_epi16(0x0F));
        const __m128i top = _mm_srli_epi16(_mm_mullo_epi16(_mm_set1_epi16(static_cast<short>(b->scales_h)),
                                                           _mm_setr_epi16(1 << 14, 1 << 12, 1 << 10, 1 << 8, 1 << 6, 1 << 4, 1 << 2, 1)), 14);
        const __m128i sc = _mm_sub_epi16(_mm_or_si128(nib, _mm_slli_epi16(top, 4)), _mm_set1_epi16(32));
        s.sc2 = _mm256_inserti128_si256(_mm256_castsi128_si256(sc), sc, 1);
        s.mn = _mm256_setzero_si256();
        s.d = _cvtsh_ss(b->d);
        s.dmin = 0;
    }
    // Chunk c: sub-blocks 2c and 2c+1; levels' magnitudes in u, the levels themselves in sg.
    static KAIL_INLINE void chunk(const uint8_t * p, const kstate & s, int c, __m256i (&u)[2], __m256i (&sc)[2], __m256i (&sg)[2]) {
        const block_iq4_xs * b = reinterpret_cast<const block_iq4_xs *>(p);
        const __m256i levels = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(kIq4Levels)));
        const __m256i m4 = _mm256_set1_epi8(0x0F);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i *>(b->qs + 32 * c + 16 * h));
            // element j: low nibble of byte j; element j + 16: its high nibble
            const __m256i idx = _mm256_and_si256(_mm256_inserti128_si256(_mm256_castsi128_si256(q), _mm_srli_epi16(q, 4), 1), m4);
            sg[h] = _mm256_shuffle_epi8(levels, idx);
            u[h] = _mm256_abs_epi8(sg[h]);
        }
        sc[0] = bcast_word(s.sc2, 2 * c);
        sc[1] = bcast_word(s.sc2, 2 * c + 1);
    }
};

// ---------------------------------------------------------------- codebook i-quants
// Each group of 8 weights is a grid entry (8 magnitudes; IQ3: two entries of 4) with signs, so a
// chunk of 64 weights is 8 table loads and the signs as byte masks. VPMADDUBSW takes the
// magnitudes (<= 62: a pair of products stays below 2^15) against the activations carrying the
// weights' signs (VPSIGNB with +-1 bytes). Scales per 16 weights go to the two 128-bit halves of
// each 32-weight vector. IQ1 weights are (grid + delta) with grid in {-1, 0, 1} and delta +-1/8:
// 8 * grid +- 1 is an exact odd integer, so the dot is integer as for the others and d carries the
// 1/8. Same integer sums as quants_iq.cpp's scalar dots.
// Indices, signs and scales are read in 32- or 64-bit words and cut with shifts: reading them as
// uint16_t / byte arrays let the compiler do the arithmetic in 16-bit registers, and IQ2_XS ran at
// 1.8 GB/s against IQ2_XXS's 4.8 (`bench-matmul`, 2048 x 4096, 1 thread, AMD EPYC with AVX-512);
// with words, 4.7 (IQ1_M 1.4 -> 2.2).

// Byte masks (0xFF = minus) for a sign byte, and for the 7 stored bits of the even-parity rule.
struct sign_tables {
    uint64_t full[256];
    uint64_t even[128];
    constexpr sign_tables() : full(), even() {
        for (int b = 0; b < 256; b++) {
            uint64_t m = 0;
            for (int j = 0; j < 8; j++)
                if ((b >> j) & 1) m |= uint64_t(0xFF) << (8 * j);
            full[b] = m;
        }
        for (int c = 0; c < 128; c++) {
            int bits = c, n = 0;
            for (int j = 0; j < 7; j++) n += (c >> j) & 1;
            if (n & 1) bits |= 128;
            even[c] = full[bits];
        }
    }
};
constexpr sign_tables kSigns{};

// Magnitudes g (4 groups) and minus-byte masks (0xFF = minus) -> u = g, sg = +-1 bytes.
KAIL_INLINE void iq_vec(uint64_t g0, uint64_t g1, uint64_t g2, uint64_t g3, __m256i minus, __m256i & u, __m256i & sg) {
    u = _mm256_set_epi64x(static_cast<long long>(g3), static_cast<long long>(g2), static_cast<long long>(g1), static_cast<long long>(g0));
    sg = _mm256_or_si256(minus, _mm256_set1_epi8(1));
}

// Minus masks of 4 groups from the sign tables.
KAIL_INLINE __m256i iq_minus(uint64_t m0, uint64_t m1, uint64_t m2, uint64_t m3) {
    return _mm256_set_epi64x(static_cast<long long>(m3), static_cast<long long>(m2), static_cast<long long>(m1), static_cast<long long>(m0));
}

// Minus masks from the 32 signs as bits of a word (IQ2_S, IQ3_S store whole sign bytes): byte j of
// the word spread over weights 8j..8j+7 by one shuffle, then a bit test per byte, instead of four
// table loads.
KAIL_INLINE __m256i iq_minus_bits(uint32_t signs) {
    const __m256i spread = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(signs)),
                                               _mm256_setr_epi64x(0, 0x0101010101010101ll, 0x0202020202020202ll, 0x0303030303030303ll));
    const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
    return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}

// Scale words for the two 16-weight halves of a 32-weight vector.
KAIL_INLINE __m256i iq_scales(int lo, int hi) { return _mm256_set_m128i(_mm_set1_epi16(static_cast<short>(hi)), _mm_set1_epi16(static_cast<short>(lo))); }

KAIL_INLINE uint32_t iq_load32(const void * p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

#if defined(KAIL_IQ_WIDE_TU)
// wide16's last step: 64 signed values v (weights 32h..32h+31 of sub-blocks h = 0, 1) widened
// to int16 and times their scales, s[2h] for the first 16 weights of sub-block h, s[2h + 1] for the
// other 16 (the same twice where a scale covers the sub-block), into w[0], w[1].
KAIL_INLINE void iq_words64(__m512i v, int s0, int s1, int s2, int s3, __m512i * w) {
    const auto sc = [](int lo, int hi) { return _mm512_inserti64x4(_mm512_set1_epi16(static_cast<short>(lo)), _mm256_set1_epi16(static_cast<short>(hi)), 1); };
    w[0] = _mm512_mullo_epi16(_mm512_cvtepi8_epi16(_mm512_castsi512_si256(v)), sc(s0, s1));
    w[1] = _mm512_mullo_epi16(_mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64(v, 1)), sc(s2, s3));
}
// 8 grid entries of 8 values (64 weights): index e is byte e of q, plus hi's lane e.
KAIL_INLINE __m512i iq_grid8(const uint64_t * grid, uint64_t q, __m256i hi) {
    const __m256i idx = _mm256_or_si256(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(static_cast<long long>(q))), hi);
    return _mm512_i32gather_epi64(idx, reinterpret_cast<const long long *>(grid), 8);
}
// IQ1's values 8g + delta per byte, delta -1 where neg is set, else +1.
KAIL_INLINE __m512i iq1_values(__m512i g, __mmask64 neg) {
    const __m512i g2 = _mm512_add_epi8(g, g), g4 = _mm512_add_epi8(g2, g2);
    return _mm512_add_epi8(_mm512_add_epi8(g4, g4), _mm512_mask_blend_epi8(neg, _mm512_set1_epi8(1), _mm512_set1_epi8(-1)));
}
// The signs of two sub-blocks of IQ2_XXS / IQ3_XXS as one 64-bit mask (bit n: weight n is
// negated): each sub-block's aux word holds four 7-bit sign fields (bits 0-27), and a group's 8th
// sign is the parity that makes its count even (kSigns.even, ggml's ksigns_iq2xs).
KAIL_INLINE uint64_t iq_sign_bits(uint32_t aux0, uint32_t aux1) {
    const uint64_t s = _pdep_u64(aux0, 0x7F7F7F7Full) | (_pdep_u64(aux1, 0x7F7F7F7Full) << 32);
    uint64_t t = s ^ (s >> 4);
    t ^= t >> 2;
    t ^= t >> 1;
    return s | ((t & 0x0101010101010101ull) << 7);
}
#endif

KAIL_INLINE void iq_state(kstate & s, float d) {
    s.sc2 = _mm256_setzero_si256();
    s.mn = _mm256_setzero_si256();
    s.d = d;
    s.dmin = 0;
}

// The tile-facing part every i-quant shares: the K-quant tile's constants, the fp16 scale times the
// format's factor (S::mul), and a chunk as its two 32-weight sub-blocks (S::sub).
template <class B, class S>
struct iq_dec {
    static constexpr int BB = sizeof(B), NCHUNK = 4;
    static constexpr bool MIN = false, SIGNED = true;
    static KAIL_INLINE void state(const uint8_t * p, kstate & s) { iq_state(s, S::mul(*reinterpret_cast<const B *>(p))); }
    static KAIL_INLINE void chunk(const uint8_t * p, const kstate &, int c, __m256i (&u)[2], __m256i (&sc)[2], __m256i (&sg)[2]) {
        const B & b = *reinterpret_cast<const B *>(p);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) S::sub(b, 2 * c + h, u[h], sc[h], sg[h]);
    }
#if defined(KAIL_IQ_WIDE_TU)
    // The wide tiles' words for a whole block: w16[h] holds weights 32h..32h+31 in order, each its
    // signed grid value times its scale. This one builds them from sub(); a decoder with a faster
    // way (a gather per 64 weights) defines its own wide16, which hides this one.
    static KAIL_INLINE void wide16(const uint8_t * p, __m512i (&w16)[8]) {
        const B & b = *reinterpret_cast<const B *>(p);
        // Scale word 0 for the first 16 weights, word 8 for the other 16 (iq_scales' layout).
        const __m512i spread = _mm512_set_epi16(8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
#pragma GCC unroll 8
        for (int ib = 0; ib < 8; ib++) {
            __m256i u, sc, sg;
            S::sub(b, ib, u, sc, sg);
            w16[ib] = _mm512_mullo_epi16(_mm512_cvtepi8_epi16(_mm256_sign_epi8(u, sg)), _mm512_permutexvar_epi16(spread, _mm512_zextsi256_si512(sc)));
        }
    }
#endif
};

template <bool VNNI>
struct iq2_xxs_dec : iq_dec<block_iq2_xxs, iq2_xxs_dec<VNNI>> {
    static KAIL_INLINE float mul(const block_iq2_xxs & b) { return 0.125f * _cvtsh_ss(b.d); }
    static KAIL_INLINE void sub(const block_iq2_xxs & b, int ib, __m256i & u, __m256i & sc, __m256i & sg) {
        const uint32_t idx = iq_load32(b.qs + 4 * ib), aux = iq_load32(b.qs + 4 * ib + 2);
        iq_vec(iq2xxs_grid[idx & 0xFF], iq2xxs_grid[(idx >> 8) & 0xFF], iq2xxs_grid[(idx >> 16) & 0xFF], iq2xxs_grid[idx >> 24],
               iq_minus(kSigns.even[aux & 127], kSigns.even[(aux >> 7) & 127], kSigns.even[(aux >> 14) & 127], kSigns.even[(aux >> 21) & 127]), u, sg);
        const int ls = 2 * static_cast<int>(aux >> 28) + 1;
        sc = iq_scales(ls, ls);
    }
#if defined(KAIL_IQ_WIDE_TU)
    // As iq2_s_dec::wide16 (8 grid entries of 8 per 64 weights), the signs from iq_sign_bits.
    static KAIL_INLINE void wide16(const uint8_t * p, __m512i (&w16)[8]) {
        const block_iq2_xxs & b = *reinterpret_cast<const block_iq2_xxs *>(p);
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            // Sub-block ib: 4 index bytes, then its aux word.
            uint64_t q0, q1;
            std::memcpy(&q0, b.qs + 8 * c, 8);
            std::memcpy(&q1, b.qs + 8 * c + 4, 8);
            const __m512i g = iq_grid8(iq2xxs_grid, (q0 & 0xFFFFFFFFull) | (q1 << 32), _mm256_setzero_si256());
            const uint32_t aux0 = static_cast<uint32_t>(q0 >> 32), aux1 = static_cast<uint32_t>(q1 >> 32);
            const __m512i v = _mm512_mask_sub_epi8(g, iq_sign_bits(aux0, aux1), _mm512_setzero_si512(), g);
            const int ls0 = 2 * (aux0 >> 28) + 1, ls1 = 2 * (aux1 >> 28) + 1;
            iq_words64(v, ls0, ls0, ls1, ls1, w16 + 2 * c);
        }
    }
#endif
};

template <bool VNNI>
struct iq2_xs_dec : iq_dec<block_iq2_xs, iq2_xs_dec<VNNI>> {
    static KAIL_INLINE float mul(const block_iq2_xs & b) { return 0.125f * _cvtsh_ss(b.d); }
    static KAIL_INLINE void sub(const block_iq2_xs & b, int ib, __m256i & u, __m256i & sc, __m256i & sg) {
        const uint32_t a = iq_load32(b.qs + 4 * ib), c = iq_load32(b.qs + 4 * ib + 2);
        iq_vec(iq2xs_grid[a & 511], iq2xs_grid[(a >> 16) & 511], iq2xs_grid[c & 511], iq2xs_grid[(c >> 16) & 511],
               iq_minus(kSigns.even[(a >> 9) & 127], kSigns.even[a >> 25], kSigns.even[(c >> 9) & 127], kSigns.even[c >> 25]), u, sg);
        sc = iq_scales(2 * (b.scales[ib] & 0xF) + 1, 2 * (b.scales[ib] >> 4) + 1);
    }
};

template <bool VNNI>
struct iq2_s_dec : iq_dec<block_iq2_s, iq2_s_dec<VNNI>> {
    static KAIL_INLINE float mul(const block_iq2_s & b) { return 0.125f * _cvtsh_ss(b.d); }
    static KAIL_INLINE void sub(const block_iq2_s & b, int ib, __m256i & u, __m256i & sc, __m256i & sg) {
        const uint32_t q = iq_load32(b.qs + 4 * ib), signs = iq_load32(b.qs + QK_K / 8 + 4 * ib), qh = b.qh[ib];
        iq_vec(iq2s_grid[(q & 0xFF) | ((qh << 8) & 0x300)], iq2s_grid[((q >> 8) & 0xFF) | ((qh << 6) & 0x300)],
               iq2s_grid[((q >> 16) & 0xFF) | ((qh << 4) & 0x300)], iq2s_grid[(q >> 24) | ((qh << 2) & 0x300)], iq_minus_bits(signs), u, sg);
        sc = iq_scales(2 * (b.scales[ib] & 0xF) + 1, 2 * (b.scales[ib] >> 4) + 1);
    }
#if defined(KAIL_IQ_WIDE_TU)
    // As iq3_s_dec::wide16: 64 weights are 8 grid entries of 8 (one VPGATHERQQ), 64 sign bits, and
    // a scale per 16 weights.
    static KAIL_INLINE void wide16(const uint8_t * p, __m512i (&w16)[8]) {
        const block_iq2_s & b = *reinterpret_cast<const block_iq2_s *>(p);
        const __m256i shift = _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14);
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            // Grid index of entry e of sub-blocks 2c, 2c+1: byte e of qs, bits 2e..2e+1 of their qh bytes as bits 8-9.
            const __m256i hi = _mm256_slli_epi32(_mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(b.qh[2 * c] | (b.qh[2 * c + 1] << 8)), shift), _mm256_set1_epi32(3)), 8);
            uint64_t q, sg;
            std::memcpy(&q, b.qs + 8 * c, 8);
            std::memcpy(&sg, b.qs + QK_K / 8 + 8 * c, 8);
            const __m512i g = iq_grid8(iq2s_grid, q, hi);
            const __m512i v = _mm512_mask_sub_epi8(g, sg, _mm512_setzero_si512(), g);
            const uint8_t s0 = b.scales[2 * c], s1 = b.scales[2 * c + 1];
            iq_words64(v, 2 * (s0 & 0xF) + 1, 2 * (s0 >> 4) + 1, 2 * (s1 & 0xF) + 1, 2 * (s1 >> 4) + 1, w16 + 2 * c);
        }
    }
#endif
};

template <bool VNNI>
struct iq3_xxs_dec : iq_dec<block_iq3_xxs, iq3_xxs_dec<VNNI>> {
    static KAIL_INLINE float mul(const block_iq3_xxs & b) { return 0.25f * _cvtsh_ss(b.d); }
    static KAIL_INLINE uint64_t pair(const uint8_t * q) { return iq3xxs_grid[q[0]] | (uint64_t(iq3xxs_grid[q[1]]) << 32); }
    static KAIL_INLINE void sub(const block_iq3_xxs & b, int ib, __m256i & u, __m256i & sc, __m256i & sg) {
        const uint8_t * q = b.qs + 8 * ib;
        const uint32_t aux = iq_load32(b.qs + QK_K / 4 + 4 * ib);
        iq_vec(pair(q), pair(q + 2), pair(q + 4), pair(q + 6),
               iq_minus(kSigns.even[aux & 127], kSigns.even[(aux >> 7) & 127], kSigns.even[(aux >> 14) & 127], kSigns.even[(aux >> 21) & 127]), u, sg);
        const int ls = 2 * static_cast<int>(aux >> 28) + 1;
        sc = iq_scales(ls, ls);
    }
#if defined(KAIL_IQ_WIDE_TU)
    // As iq3_s_dec::wide16, the signs from iq_sign_bits.
    static KAIL_INLINE void wide16(const uint8_t * p, __m512i (&w16)[8]) {
        const block_iq3_xxs & b = *reinterpret_cast<const block_iq3_xxs *>(p);
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            const __m512i idx = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b.qs + 16 * c)));
            const __m512i g = _mm512_i32gather_epi32(idx, reinterpret_cast<const int *>(iq3xxs_grid), 4);
            const uint32_t aux0 = iq_load32(b.qs + QK_K / 4 + 8 * c), aux1 = iq_load32(b.qs + QK_K / 4 + 8 * c + 4);
            const __m512i v = _mm512_mask_sub_epi8(g, iq_sign_bits(aux0, aux1), _mm512_setzero_si512(), g);
            const int ls0 = 2 * (aux0 >> 28) + 1, ls1 = 2 * (aux1 >> 28) + 1;
            iq_words64(v, ls0, ls0, ls1, ls1, w16 + 2 * c);
        }
    }
#endif
};

template <bool VNNI>
struct iq3_s_dec : iq_dec<block_iq3_s, iq3_s_dec<VNNI>> {
    static KAIL_INLINE float mul(const block_iq3_s & b) { return _cvtsh_ss(b.d); }
    // Grid entries k and k + 1 of a sub-block: 9-bit indices, the low bytes from q (8 bytes, one
    // 64-bit load), the high bits from qh.
    static KAIL_INLINE uint64_t pair(uint64_t q, uint32_t qh, int k) {
        return iq3s_grid[((q >> (8 * k)) & 0xFF) | (((qh >> k) & 1) << 8)] |
               (uint64_t(iq3s_grid[((q >> (8 * k + 8)) & 0xFF) | (((qh >> (k + 1)) & 1) << 8)]) << 32);
    }
    static KAIL_INLINE void sub(const block_iq3_s & b, int ib, __m256i & u, __m256i & sc, __m256i & sg) {
        uint64_t q;
        std::memcpy(&q, b.qs + 8 * ib, 8);
        const uint32_t qh = b.qh[ib], sgn = iq_load32(b.signs + 4 * ib);
        iq_vec(pair(q, qh, 0), pair(q, qh, 2), pair(q, qh, 4), pair(q, qh, 6), iq_minus_bits(sgn), u, sg);
        const int ls = 1 + 2 * ((b.scales[ib / 2] >> (4 * (ib % 2))) & 0xF);
        sc = iq_scales(ls, ls);
    }
#if defined(KAIL_IQ_WIDE_TU)
    // iq_dec::wide16's words by gathers: 64 weights (16 grid entries) take one VPGATHERDD, and
    // their 64 sign bits are the mask that negates them.
    static KAIL_INLINE void wide16(const uint8_t * p, __m512i (&w16)[8]) {
        const block_iq3_s & b = *reinterpret_cast<const block_iq3_s *>(p);
        const __m512i entry = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            // Grid index of entry e of sub-blocks 2c, 2c+1: byte e of qs, bit e of their qh bytes as bit 8.
            const __m512i hi = _mm512_slli_epi32(_mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32(b.qh[2 * c] | (b.qh[2 * c + 1] << 8)), entry), _mm512_set1_epi32(1)), 8);
            const __m512i idx = _mm512_or_si512(_mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b.qs + 16 * c))), hi);
            const __m512i g = _mm512_i32gather_epi32(idx, reinterpret_cast<const int *>(iq3s_grid), 4);
            uint64_t sg;
            std::memcpy(&sg, b.signs + 8 * c, 8);
            const __m512i v = _mm512_mask_sub_epi8(g, sg, _mm512_setzero_si512(), g);
            const int ls0 = 1 + 2 * (b.scales[c] & 0xF), ls1 = 1 + 2 * (b.scales[c] >> 4);
            iq_words64(v, ls0, ls0, ls1, ls1, w16 + 2 * c);
        }
    }
#endif
};

// IQ1: v = 8 * grid + delta (delta +-1 per group); u = |v|, sg = v (never 0).
KAIL_INLINE void iq1_vec(uint64_t g0, uint64_t g1, uint64_t g2, uint64_t g3, int n0, int n1, int n2, int n3, __m256i & u, __m256i & sg) {
    const __m256i g = _mm256_set_epi64x(static_cast<long long>(g3), static_cast<long long>(g2), static_cast<long long>(g1), static_cast<long long>(g0));
    const auto dm = [](int neg) { return static_cast<long long>(neg ? 0xFFFFFFFFFFFFFFFFull : 0x0101010101010101ull); };
    const __m256i x2 = _mm256_add_epi8(g, g), x4 = _mm256_add_epi8(x2, x2), x8 = _mm256_add_epi8(x4, x4);
    sg = _mm256_add_epi8(x8, _mm256_set_epi64x(dm(n3), dm(n2), dm(n1), dm(n0)));
    u = _mm256_abs_epi8(sg);
}

template <bool VNNI>
struct iq1_s_dec : iq_dec<block_iq1_s, iq1_s_dec<VNNI>> {
    static KAIL_INLINE float mul(const block_iq1_s & b) { return 0.125f * _cvtsh_ss(b.d); }
    static KAIL_INLINE void sub(const block_iq1_s & b, int ib, __m256i & u, __m256i & sc, __m256i & sg) {
        const uint32_t q = iq_load32(b.qs + 4 * ib), qh = b.qh[ib];
        const int neg = (qh >> 15) & 1;
        iq1_vec(iq1s_grid[(q & 0xFF) | ((qh << 8) & 0x700)], iq1s_grid[((q >> 8) & 0xFF) | ((qh << 5) & 0x700)],
                iq1s_grid[((q >> 16) & 0xFF) | ((qh << 2) & 0x700)], iq1s_grid[(q >> 24) | ((qh >> 1) & 0x700)], neg, neg, neg, neg, u, sg);
        const int ls = 2 * ((qh >> 12) & 7) + 1;
        sc = iq_scales(ls, ls);
    }
#if defined(KAIL_IQ_WIDE_TU)
    // As iq2_s_dec::wide16: 8 grid entries per 64 weights (11-bit indices, the high 3 bits from
    // qh), then 8g + delta per byte, delta +-1 per sub-block.
    static KAIL_INLINE void wide16(const uint8_t * p, __m512i (&w16)[8]) {
        const block_iq1_s & b = *reinterpret_cast<const block_iq1_s *>(p);
        const __m256i shift = _mm256_setr_epi32(0, 3, 6, 9, 0, 3, 6, 9);
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            const uint32_t h0 = b.qh[2 * c], h1 = b.qh[2 * c + 1];
            const __m256i qh = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_set1_epi32(static_cast<int>(h0))), _mm_set1_epi32(static_cast<int>(h1)), 1);
            const __m256i hi = _mm256_slli_epi32(_mm256_and_si256(_mm256_srlv_epi32(qh, shift), _mm256_set1_epi32(7)), 8);
            uint64_t q;
            std::memcpy(&q, b.qs + 8 * c, 8);
            const __mmask64 neg = ((h0 >> 15) ? 0x00000000FFFFFFFFull : 0) | ((h1 >> 15) ? 0xFFFFFFFF00000000ull : 0);
            const __m512i v = iq1_values(iq_grid8(iq1s_grid, q, hi), neg);
            const int ls0 = 2 * ((h0 >> 12) & 7) + 1, ls1 = 2 * ((h1 >> 12) & 7) + 1;
            iq_words64(v, ls0, ls0, ls1, ls1, w16 + 2 * c);
        }
    }
#endif
};

template <bool VNNI>
struct iq1_m_dec : iq_dec<block_iq1_m, iq1_m_dec<VNNI>> {
    static KAIL_INLINE float mul(const block_iq1_m & b) {
        uint16_t sc[4];
        std::memcpy(sc, b.scales, sizeof sc);
        return 0.125f * _cvtsh_ss(static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000)));
    }
    static KAIL_INLINE void sub(const block_iq1_m & b, int ib, __m256i & u, __m256i & sc, __m256i & sg) {
        uint16_t w16;
        std::memcpy(&w16, b.scales + 2 * (ib / 2), 2);  // the scales of sub-blocks 2(ib/2) and 2(ib/2) + 1
        const uint32_t w = w16;
        const int sh = 6 * (ib % 2);
        const uint32_t q = iq_load32(b.qs + 4 * ib);
        const uint32_t q0 = b.qh[2 * ib], q1 = b.qh[2 * ib + 1];
        iq1_vec(iq1s_grid[(q & 0xFF) | ((q0 << 8) & 0x700)], iq1s_grid[((q >> 8) & 0xFF) | ((q0 << 4) & 0x700)],
                iq1s_grid[((q >> 16) & 0xFF) | ((q1 << 8) & 0x700)], iq1s_grid[(q >> 24) | ((q1 << 4) & 0x700)], (q0 >> 3) & 1, (q0 >> 7) & 1,
                (q1 >> 3) & 1, (q1 >> 7) & 1, u, sg);
        sc = iq_scales(2 * ((w >> sh) & 7) + 1, 2 * ((w >> (sh + 3)) & 7) + 1);
    }
#if defined(KAIL_IQ_WIDE_TU)
    // As iq1_s_dec::wide16, with IQ1_M's fields: entry e of 64 weights takes its high index bits
    // from nibble e of 4 qh bytes (bits 0-2) and its group's delta sign from that nibble's bit 3;
    // a scale per 16 weights.
    static KAIL_INLINE void wide16(const uint8_t * p, __m512i (&w16)[8]) {
        const block_iq1_m & b = *reinterpret_cast<const block_iq1_m *>(p);
        const __m256i shift = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            const uint32_t qh = iq_load32(b.qh + 4 * c);
            const __m256i hi = _mm256_slli_epi32(_mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(qh)), shift), _mm256_set1_epi32(7)), 8);
            uint64_t q;
            std::memcpy(&q, b.qs + 8 * c, 8);
            const __m512i v = iq1_values(iq_grid8(iq1s_grid, q, hi), _pdep_u64(_pext_u32(qh, 0x88888888u), 0x0101010101010101ull) * 0xFF);
            uint16_t w16s;
            std::memcpy(&w16s, b.scales + 2 * c, 2);
            const uint32_t w = w16s;
            iq_words64(v, 2 * (w & 7) + 1, 2 * ((w >> 3) & 7) + 1, 2 * ((w >> 6) & 7) + 1, 2 * ((w >> 9) & 7) + 1, w16 + 2 * c);
        }
    }
#endif
};

template <bool VNNI>
struct q6_K_dec {
    static constexpr int BB = 210, NCHUNK = 4;
    static constexpr bool MIN = false;
    static KAIL_INLINE void state(const uint8_t * p, kstate & s) {
        const block_q6_K * b = reinterpret_cast<const block_q6_K *>(p);
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b->scales)));
        s.sc2 = sc16;  // words 0-7 in the low lane, 8-15 in the high lane (chunk() picks the lane)
        s.mn = _mm256_slli_epi16(sc16, 5);
        s.d = _cvtsh_ss(b->d);
        s.dmin = 0;
    }
    // Chunk c: values 64c .. 64c+63 (groups 4c .. 4c+3).
    static KAIL_INLINE void chunk(const uint8_t * p, const kstate & s, int c, __m256i (&u)[2], __m256i (&sc)[2]) {
        const block_q6_K * b = reinterpret_cast<const block_q6_K *>(p);
        const int half = c / 2, sub = c % 2;  // sub 0: ql low nibbles (values l, l+32); 1: high nibbles
        const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
        const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b->ql + 64 * half));
        const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b->ql + 64 * half + 32));
        const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b->qh + 32 * half));
        if (sub == 0) {
            u[0] = _mm256_or_si256(_mm256_and_si256(ql0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30));
            u[1] = _mm256_or_si256(_mm256_and_si256(ql1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30));
        } else {
            u[0] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), m4), _mm256_and_si256(qh, m30));
            u[1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), m4), _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30));
        }
        // Groups 4c, 4c+1 cover u[0]; 4c+2, 4c+3 cover u[1]. sc2 holds 16 words: words 0-7 in the
        // low lane, 8-15 in the high lane; shuffles stay within a lane, so pick the right lane.
        const __m256i lane = (4 * c) < 8 ? _mm256_permute2x128_si256(s.sc2, s.sc2, 0x00) : _mm256_permute2x128_si256(s.sc2, s.sc2, 0x11);
        const int j = (4 * c) % 8;
        const short w0 = static_cast<short>((2 * j) | ((2 * j + 1) << 8)), w1 = static_cast<short>((2 * j + 2) | ((2 * j + 3) << 8));
        const short w2 = static_cast<short>((2 * j + 4) | ((2 * j + 5) << 8)), w3 = static_cast<short>((2 * j + 6) | ((2 * j + 7) << 8));
        sc[0] = _mm256_shuffle_epi8(lane, _mm256_setr_epi16(w0, w0, w0, w0, w0, w0, w0, w0, w1, w1, w1, w1, w1, w1, w1, w1));
        sc[1] = _mm256_shuffle_epi8(lane, _mm256_setr_epi16(w2, w2, w2, w2, w2, w2, w2, w2, w3, w3, w3, w3, w3, w3, w3, w3));
    }
};

template <bool VNNI>
struct q3_K_dec {
    static constexpr int BB = 110, NCHUNK = 4;
    static constexpr bool MIN = false;
    static KAIL_INLINE void state(const uint8_t * p, kstate & s) {
        const block_q3_K * b = reinterpret_cast<const block_q3_K *>(p);
        const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
        uint32_t aux[4];
        std::memcpy(aux, b->scales, 12);
        const uint32_t tmp = aux[2];
        aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
        aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
        aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
        aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_sub_epi8(_mm_setr_epi32(static_cast<int>(aux[0]), static_cast<int>(aux[1]), static_cast<int>(aux[2]), static_cast<int>(aux[3])), _mm_set1_epi8(32)));
        s.sc2 = sc16;
        s.mn = _mm256_slli_epi16(sc16, 2);
        s.d = _cvtsh_ss(b->d);
        s.dmin = 0;
    }
    static KAIL_INLINE void chunk(const uint8_t * p, const kstate & s, int c, __m256i (&u)[2], __m256i (&sc)[2]) {
        const block_q3_K * b = reinterpret_cast<const block_q3_K *>(p);
        // Chunk c: values 64c.. = qs half c/2, shifts 4*(c%2) and 4*(c%2)+2; hmask bits 2c, 2c+1.
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b->qs + 32 * (c / 2)));
        const __m256i hm = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b->hmask));
        const __m256i m3 = _mm256_set1_epi8(3), k4 = _mm256_set1_epi8(4);
        const int sh = 4 * (c % 2);
        const __m256i b0 = _mm256_set1_epi8(char(1 << (2 * c))), b1 = _mm256_set1_epi8(char(1 << (2 * c + 1)));
        u[0] = _mm256_or_si256(_mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(sh)), m3),
                               _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hm, b0), b0), k4));
        u[1] = _mm256_or_si256(_mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(sh + 2)), m3),
                               _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(hm, b1), b1), k4));
        const __m256i lane = (4 * c) < 8 ? _mm256_permute2x128_si256(s.sc2, s.sc2, 0x00) : _mm256_permute2x128_si256(s.sc2, s.sc2, 0x11);
        const int j = (4 * c) % 8;
        const short w0 = static_cast<short>((2 * j) | ((2 * j + 1) << 8)), w1 = static_cast<short>((2 * j + 2) | ((2 * j + 3) << 8));
        const short w2 = static_cast<short>((2 * j + 4) | ((2 * j + 5) << 8)), w3 = static_cast<short>((2 * j + 6) | ((2 * j + 7) << 8));
        sc[0] = _mm256_shuffle_epi8(lane, _mm256_setr_epi16(w0, w0, w0, w0, w0, w0, w0, w0, w1, w1, w1, w1, w1, w1, w1, w1));
        sc[1] = _mm256_shuffle_epi8(lane, _mm256_setr_epi16(w2, w2, w2, w2, w2, w2, w2, w2, w3, w3, w3, w3, w3, w3, w3, w3));
    }
};

template <bool VNNI>
struct q2_K_dec {
    static constexpr int BB = 84, NCHUNK = 4;
    static constexpr bool MIN = true;
    static KAIL_INLINE void state(const uint8_t * p, kstate & s) {
        const block_q2_K * b = reinterpret_cast<const block_q2_K *>(p);
        const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i *>(b->scales));
        s.sc2 = _mm256_cvtepu8_epi16(_mm_and_si128(raw, _mm_set1_epi8(0x0F)));
        s.mn = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0F)));
        s.d = _cvtsh_ss(b->d);
        s.dmin = _cvtsh_ss(b->dmin);
    }
    static KAIL_INLINE void chunk(const uint8_t * p, const kstate & s, int c, __m256i (&u)[2], __m256i (&sc)[2]) {
        const block_q2_K * b = reinterpret_cast<const block_q2_K *>(p);
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b->qs + 32 * (c / 2)));
        const __m256i m3 = _mm256_set1_epi8(3);
        const int sh = 4 * (c % 2);
        u[0] = _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(sh)), m3);
        u[1] = _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(sh + 2)), m3);
        const __m256i lane = (4 * c) < 8 ? _mm256_permute2x128_si256(s.sc2, s.sc2, 0x00) : _mm256_permute2x128_si256(s.sc2, s.sc2, 0x11);
        const int j = (4 * c) % 8;
        const short w0 = static_cast<short>((2 * j) | ((2 * j + 1) << 8)), w1 = static_cast<short>((2 * j + 2) | ((2 * j + 3) << 8));
        const short w2 = static_cast<short>((2 * j + 4) | ((2 * j + 5) << 8)), w3 = static_cast<short>((2 * j + 6) | ((2 * j + 7) << 8));
        sc[0] = _mm256_shuffle_epi8(lane, _mm256_setr_epi16(w0, w0, w0, w0, w0, w0, w0, w0, w1, w1, w1, w1, w1, w1, w1, w1));
        sc[1] = _mm256_shuffle_epi8(lane, _mm256_setr_epi16(w2, w2, w2, w2, w2, w2, w2, w2, w3, w3, w3, w3, w3, w3, w3, w3));
    }
};

template <class X, class = void>
struct signed_levels : std::false_type {};
template <class X>
struct signed_levels<X, std::void_t<decltype(X::SIGNED)>> : std::bool_constant<X::SIGNED> {};

template <template <bool> class DEC, bool VNNI>
struct kquant {
    using D = DEC<VNNI>;
    static constexpr bool SIGNED = signed_levels<D>::value;
    template <int R, int T>
    struct tile {
        static void run(int64_t k, const uint8_t * w, size_t ws, const uint8_t * const * a, float * const * out) {
            const int64_t nsb = k / QK_K;
            __m256 acc[R][T];
#pragma GCC unroll 8
            for (int r = 0; r < R; r++)
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps();
            const size_t ahead = rows_ahead(ws, R);
            for (int64_t i = 0; i < nsb; i++) {
#pragma GCC unroll 8
                for (int r = 0; r < R; r++) {
                    const uint8_t * p = w + r * ws + i * D::BB;
                    prefetch_bytes(p + ahead, D::BB);
                    kstate s;
                    D::state(p, s);
                    __m256i is[T];
#pragma GCC unroll 8
                    for (int t = 0; t < T; t++) is[t] = _mm256_setzero_si256();
#pragma GCC unroll 4
                    for (int c = 0; c < D::NCHUNK; c++) {
                        __m256i u[2], sc[2], sg[2];
                        if constexpr (SIGNED) D::chunk(p, s, c, u, sc, sg);
                        else D::chunk(p, s, c, u, sc);
#pragma GCC unroll 8
                        for (int t = 0; t < T; t++) {
                            const int8_t * yq = reinterpret_cast<const block_q8_K *>(a[t])[i].qs + 64 * c;
                            __m256i y0 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(yq)), y1 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(yq + 32));
                            if constexpr (SIGNED) {
                                y0 = _mm256_sign_epi8(y0, sg[0]);
                                y1 = _mm256_sign_epi8(y1, sg[1]);
                            }
                            const __m256i p0 = _mm256_maddubs_epi16(u[0], y0);
                            const __m256i p1 = _mm256_maddubs_epi16(u[1], y1);
                            is[t] = dpw<VNNI>(dpw<VNNI>(is[t], p0, sc[0]), p1, sc[1]);
                        }
                    }
#pragma GCC unroll 8
                    for (int t = 0; t < T; t++) {
                        const block_q8_K * y = reinterpret_cast<const block_q8_K *>(a[t]) + i;
                        const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(y->bsums));
                        const __m256i mterm = SIGNED ? _mm256_setzero_si256() : _mm256_madd_epi16(s.mn, bs);
                        if constexpr (D::MIN) {
                            acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[t]), _mm256_set1_ps(s.d * y->d), acc[r][t]);
                            acc[r][t] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mterm), _mm256_set1_ps(s.dmin * y->d), acc[r][t]);
                        } else {
                            acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(is[t], mterm)), _mm256_set1_ps(s.d * y->d), acc[r][t]);
                        }
                    }
                }
            }
            store_tile<R, T>(acc, out);
        }
    };
};

#if defined(KAIL_IQ_WIDE_TU)
// The codebook i-quants' prompt tiles at the AVX-512 level (this file compiled again as
// quants_iq_avx512.cpp): up to four rows by 9 to kWideT (64) tokens. A row's block is decoded once into
// its eight 32-weight halves as int16 words, sign and 16-weight scale applied (|w| <= 62 and scale
// <= 31: within 2^15), and each token's half, widened to int16 once, takes one VPDPWSSD per row;
// four tokens per decoded block at a time. kquant's tile does VPSIGNB, VPMADDUBSW and VPDPWSSD per
// token, row and half, and shares a decoded block among at most 8 tokens. The int32 lanes of a
// 32-value half, summed in pairs, are kquant's lanes (4 consecutive weights each, scaled), and two
// tokens' pair sums share one register (even and odd lanes) for the convert and the FMA, each lane
// with its own token's scale, so a token's float steps and result are kquant's bits whatever the
// tile; kquant's tiles still serve up to 8 tokens, where they measured faster. bench-matmul 4096 x
// 4096, 1 thread, AMD EPYC Zen 5 VM, prompt GFLOP/s at 256 tokens, kquant -> two rows by 32 tokens
// (one token per register) -> four rows by 32, two tokens per register -> by 64: IQ2_S 106 -> 166
// -> 190 -> 210-218, IQ3_S 81 -> 143 -> 157 -> 186-192, IQ2_XXS 101 -> 163 -> 197 -> 223, IQ3_XXS
// 150 -> 180 -> 207 (four rows alone: about +8%; one row per tile: about half the first gain; 8
// tokens: 67-83 against kquant's 97-114).
constexpr int kWideT = 64;
constexpr int kWideR = 4;
template <template <bool> class DEC, bool VNNI>
struct iq_wide {
    using D = DEC<VNNI>;
    // Tokens a[0..G) against one decoded block i of NR rows. Each (row, token) gets 16 int32 lanes;
    // pairs of them summed are kquant's 8 lanes, kept in the even lanes for the pair's first token
    // and in the odd lanes for its second, so two tokens take one convert and one FMA into
    // acc[row][pair] (row r's pairs kWideT / 2 apart), each lane with its own token's scale.
    template <int NR, int G>
    static KAIL_INLINE void group(const __m512i (*w16)[8], const __m512 * d, int64_t i, const uint8_t * const * a, __m512 * acc) {
        const block_q8_K * y[G];
        __m512i A[NR][G];
#pragma GCC unroll 8
        for (int g = 0; g < G; g++) y[g] = reinterpret_cast<const block_q8_K *>(a[g]) + i;
#pragma GCC unroll 4
        for (int r = 0; r < NR; r++)
#pragma GCC unroll 8
            for (int g = 0; g < G; g++) A[r][g] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int h = 0; h < 8; h++) {
#pragma GCC unroll 8
            for (int g = 0; g < G; g++) {
                const __m512i yv = _mm512_cvtepi8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(y[g]->qs + 32 * h)));
#pragma GCC unroll 4
                for (int r = 0; r < NR; r++) A[r][g] = _mm512_dpwssd_epi32(A[r][g], w16[r][h], yv);
            }
        }
#pragma GCC unroll 4
        for (int q = 0; q < (G + 1) / 2; q++) {
            const int g0 = 2 * q, g1 = 2 * q + 1 < G ? 2 * q + 1 : 2 * q;
            const __m512 yd = _mm512_mask_blend_ps(0xAAAA, _mm512_set1_ps(y[g0]->d), _mm512_set1_ps(y[g1]->d));
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++) {
                __m512i L = _mm512_add_epi32(A[r][g0], _mm512_srli_epi64(A[r][g0], 32));
                if (g1 != g0) L = _mm512_mask_blend_epi32(0xAAAA, L, _mm512_add_epi32(A[r][g1], _mm512_slli_epi64(A[r][g1], 32)));
                acc[r * (kWideT / 2) + q] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(L), _mm512_mul_ps(d[r], yd), acc[r * (kWideT / 2) + q]);
            }
        }
    }
    template <int NR>
    static void run(int64_t k, const uint8_t * w, size_t ws, const uint8_t * const * a, float * const * out, int nt) {
        __m512 acc[NR * (kWideT / 2)];
        const int np = (nt + 1) / 2;
        for (int r = 0; r < NR; r++)
            for (int q = 0; q < np; q++) acc[r * (kWideT / 2) + q] = _mm512_setzero_ps();
        const size_t ahead = rows_ahead(ws, NR);
        for (int64_t i = 0; i < k / QK_K; i++) {
            __m512i w16[NR][8];
            __m512 d[NR];
#pragma GCC unroll 4
            for (int r = 0; r < NR; r++) {
                const uint8_t * p = w + r * ws + i * D::BB;
                prefetch_bytes(p + ahead, D::BB);
                kstate s;
                D::state(p, s);
                d[r] = _mm512_set1_ps(s.d);
                D::wide16(p, w16[r]);
            }
            int t = 0;
            for (; t + 4 <= nt; t += 4) group<NR, 4>(w16, d, i, a + t, acc + t / 2);
            if (nt - t == 3) group<NR, 3>(w16, d, i, a + t, acc + t / 2);
            else if (nt - t == 2) group<NR, 2>(w16, d, i, a + t, acc + t / 2);
            else if (nt - t == 1) group<NR, 1>(w16, d, i, a + t, acc + t / 2);
        }
        // A token's 8 lanes in kquant's order, then kquant's horizontal sum.
        const __m512i even = _mm512_set_epi32(15, 13, 11, 9, 7, 5, 3, 1, 14, 12, 10, 8, 6, 4, 2, 0);
        for (int q = 0; q < np; q++)
            for (int r = 0; r < NR; r++) {
                const __m512 v = _mm512_permutexvar_ps(even, acc[r * (kWideT / 2) + q]);
                out[2 * q][r] = hsum8(_mm512_castps512_ps256(v));
                if (2 * q + 1 < nt) out[2 * q + 1][r] = hsum8(_mm512_extractf32x8_ps(v, 1));
            }
    }
    template <int R, int T>
    struct tile {
        static void run(int64_t k, const uint8_t * w, size_t ws, const uint8_t * const * a, float * const * out) {
            static_assert(R <= kWideR && T <= kWideT, "at most kWideR rows and kWideT tokens");
            if constexpr (T > 8 && R != 3) iq_wide::run<R>(k, w, ws, a, out, T);
            else if constexpr (T <= 8 && R <= 2) kquant<DEC, VNNI>::template tile<R, T>::run(k, w, ws, a, out);
            else {
                // The first two rows, then the rest: kquant's tiles hold two rows, and three rows
                // (the last of a row block, now and then) are not worth a wide tile of their own.
                tile<2, T>::run(k, w, ws, a, out);
                float * rest[T];
                for (int t = 0; t < T; t++) rest[t] = out[t] + 2;
                tile<R - 2, T>::run(k, w + 2 * ws, ws, a, rest);
            }
        }
    };
};
#endif

// ---------------------------------------------------------------- float types

template <int WT>  // 0 = F32, 1 = F16, 2 = BF16
KAIL_INLINE __m256 load_w8(const uint8_t * p, int64_t i) {
    if constexpr (WT == 0) return _mm256_loadu_ps(reinterpret_cast<const float *>(p) + i);
    else if constexpr (WT == 1) return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(reinterpret_cast<const uint16_t *>(p) + i)));
    else return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(reinterpret_cast<const uint16_t *>(p) + i))), 16));
}

template <int WT>
struct floats {
    template <int R, int T>
    struct impl {
        static void run(int64_t k, const uint8_t * w, size_t ws, const uint8_t * const * a, float * const * out) {
            __m256 acc[R][T];
#pragma GCC unroll 8
            for (int r = 0; r < R; r++)
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) acc[r][t] = _mm256_setzero_ps();
            int64_t i = 0;
            for (; i + 8 <= k; i += 8) {
                __m256 wv[R];
#pragma GCC unroll 8
                for (int r = 0; r < R; r++) wv[r] = load_w8<WT>(w + r * ws, i);
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) {
                    const __m256 x = _mm256_loadu_ps(reinterpret_cast<const float *>(a[t]) + i);
#pragma GCC unroll 8
                    for (int r = 0; r < R; r++) acc[r][t] = _mm256_fmadd_ps(wv[r], x, acc[r][t]);
                }
            }
            if (i < k) {
                // Ragged end: copy into zero-padded buffers and run one more vector step, so every
                // (row, token) gets the same arithmetic wherever it sits in a tile.
                const int rest = static_cast<int>(k - i);
                const size_t esz = WT == 0 ? 4 : 2;
                alignas(32) uint8_t wb[R][32] = {};
                alignas(32) float xb[T][8] = {};
                for (int r = 0; r < R; r++) std::memcpy(wb[r], w + r * ws + i * esz, rest * esz);
                for (int t = 0; t < T; t++) std::memcpy(xb[t], reinterpret_cast<const float *>(a[t]) + i, rest * 4);
                __m256 wv[R];
#pragma GCC unroll 8
                for (int r = 0; r < R; r++) wv[r] = load_w8<WT>(wb[r], 0);
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) {
                    const __m256 x = _mm256_load_ps(xb[t]);
#pragma GCC unroll 8
                    for (int r = 0; r < R; r++) acc[r][t] = _mm256_fmadd_ps(wv[r], x, acc[r][t]);
                }
            }
            store_tile<R, T>(acc, out);
        }
    };
    template <int R, int T>
    using tile = impl<R, T>;

    // Matrix x vector with the tile's single accumulator per output: the same bits as in a batch.
    static void decode(int64_t k, const uint8_t * w, size_t ws, int nr, const uint8_t * const * a, int nt, float * const * out) {
        if (nr == 1) impl<1, 1>::run(k, w, ws, a, out);
        else impl<2, 1>::run(k, w, ws, a, out);
    }
};

// ---------------------------------------------------------------- attention vectors

// B = float or uint16_t (fp16 bits): 8 elements, or one for the tail, widened to float.
KAIL_INLINE __m256 load8(const float * p) { return _mm256_loadu_ps(p); }
KAIL_INLINE __m256 load8(const uint16_t * p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(p))); }
KAIL_INLINE float load1(const float * p) { return *p; }
KAIL_INLINE float load1(const uint16_t * p) { return fp16_to_fp32_sw(*p); }

// Attention's softmax (attention_scale_max, attention_exp_sum): 8 elements a step, exp_f32's
// operations lane by lane, lane j % 16's sum in double; the last few elements in scalar code.
float scale_max(float * x, int64_t n, float scale, const float * bias) {
    const __m256 sc = _mm256_set1_ps(scale);
    __m256 mv = _mm256_set1_ps(-INFINITY);
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + j), sc);
        __asm__("" : "+x"(v));  // two roundings: the compiler may not fuse the add into the multiply
        if (bias) v = _mm256_add_ps(v, _mm256_loadu_ps(bias + j));
        _mm256_storeu_ps(x + j, v);
        mv = _mm256_max_ps(v, mv);
    }
    alignas(32) float l[8];
    _mm256_store_ps(l, mv);
    float mx = -INFINITY;
    for (float v : l) mx = std::max(mx, v);
    for (; j < n; j++) {
        float v = x[j] * scale;
        __asm__("" : "+x"(v));
        if (bias) v += bias[j];
        x[j] = v;
        mx = std::max(mx, v);
    }
    return mx;
}

struct exp_ops8 {
    using V = __m256;
    static KAIL_INLINE V set1(float v) { return _mm256_set1_ps(v); }
    static KAIL_INLINE V mul(V a, V b) { return _mm256_mul_ps(a, b); }
    static KAIL_INLINE V add(V a, V b) { return _mm256_add_ps(a, b); }
    static KAIL_INLINE V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
    static KAIL_INLINE V round(V a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
    static KAIL_INLINE V pow2(V n) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23)); }
};

// exp_f32 on 8 lanes: 0 below lo (NaN goes through the steps and stays NaN).
KAIL_INLINE __m256 exp8(__m256 x) {
    const __m256 keep = _mm256_cmp_ps(x, _mm256_set1_ps(exp_f32_consts::lo), _CMP_NLT_UQ);
    return _mm256_and_ps(exp_f32_steps<exp_ops8>(x), keep);
}

double exp_sum(float * x, int64_t n, float mx) {
    const __m256 m0 = _mm256_set1_ps(mx);
    __m256d a[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), m0));
        _mm256_storeu_ps(x + j, e);
        const int h = static_cast<int>((j / 8) % 2) * 2;  // lanes 0-7 or 8-15
        a[h] = _mm256_add_pd(a[h], _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        a[h + 1] = _mm256_add_pd(a[h + 1], _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    alignas(32) double lane[16];
    for (int q = 0; q < 4; q++) _mm256_store_pd(lane + 4 * q, a[q]);
    for (; j < n; j++) {
        x[j] = exp_f32(x[j] - mx);
        lane[j % 16] += x[j];
    }
    return exp_lane_total(lane);
}

// Probability-weighted rows (attention_weighted_rows): a tile of NV vectors (8 columns each) by
// NG probability rows, each cached row loaded and widened once per tile; columns past the last
// multiple of 8 one at a time, with the same fused multiply-adds in the same order.
template <int NV, int NG, typename X>
void weighted_tile(const X * x, size_t xs, int64_t n, const float * p, size_t ps, float * out, size_t os) {
    __m256 acc[NG][NV];
#pragma GCC unroll 4
    for (int g = 0; g < NG; g++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) acc[g][v] = _mm256_setzero_ps();
    for (int64_t j = 0; j < n; j++) {
        const X * r = x + j * xs;
        __m256 xv[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) xv[v] = load8(r + 8 * v);
#pragma GCC unroll 4
        for (int g = 0; g < NG; g++) {
            const __m256 w = _mm256_set1_ps(p[g * ps + j]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) acc[g][v] = _mm256_fmadd_ps(w, xv[v], acc[g][v]);
        }
    }
#pragma GCC unroll 4
    for (int g = 0; g < NG; g++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) _mm256_storeu_ps(out + g * os + 8 * v, acc[g][v]);
}

template <typename X>
void weighted_rows(const X * x, size_t xs, int64_t n, int64_t width, const float * p, size_t ps, int64_t group, float * out, size_t os) {
    using fn = void (*)(const X *, size_t, int64_t, const float *, size_t, float *, size_t);
    static const fn tiles[2][4] = {
        {weighted_tile<1, 1, X>, weighted_tile<1, 2, X>, weighted_tile<1, 3, X>, weighted_tile<1, 4, X>},
        {weighted_tile<2, 1, X>, weighted_tile<2, 2, X>, weighted_tile<2, 3, X>, weighted_tile<2, 4, X>},
    };
    const int64_t wv = width / 8 * 8;
    for (int64_t c0 = 0; c0 < wv; c0 += 16) {
        const int nv = wv - c0 >= 16 ? 2 : 1;
        for (int64_t g0 = 0; g0 < group; g0 += 4) {
            const int ng = static_cast<int>(std::min<int64_t>(4, group - g0));
            tiles[nv - 1][ng - 1](x + c0, xs, n, p + g0 * ps, ps, out + g0 * os + c0, os);
        }
    }
    for (int64_t c = wv; c < width; c++)
        for (int64_t g = 0; g < group; g++) {
            float acc = 0.0f;
            for (int64_t j = 0; j < n; j++) acc = std::fma(p[g * ps + j], load1(x + j * xs + c), acc);
            out[g * os + c] = acc;
        }
}

// ---------------------------------------------------------------- activation quantizers / conversions

// ggml-cpu's AVX2 quantize_row_q8_0 / q8_1.
template <bool Q8_1>
void from_float_q8(const float * x, void * vy, int64_t k) {
    const int64_t nb = k / 32;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < nb; i++, x += 32) {
        __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8), v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
        __m256 am = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1)),
                                  _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
        __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(am, 1), _mm256_castps256_ps128(am));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float amax = _mm_cvtss_f32(m4);
        const float d = amax / 127.f;
        const float id = amax != 0.0f ? 127.f / amax : 0.0f;
        const __m256 mul = _mm256_set1_ps(id);
        const __m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v0, mul), _MM_ROUND_NEAREST));
        const __m256i i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v1, mul), _MM_ROUND_NEAREST));
        const __m256i i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v2, mul), _MM_ROUND_NEAREST));
        const __m256i i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v3, mul), _MM_ROUND_NEAREST));
        int8_t * qs;
        if (Q8_1) {
            block_q8_1 * y = static_cast<block_q8_1 *>(vy) + i;
            y->d = fp32_to_fp16_sw(d);
            y->s = fp32_to_fp16_sw(d * static_cast<float>(hsum8i(_mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3)))));
            qs = y->qs;
        } else {
            block_q8_0 * y = static_cast<block_q8_0 *>(vy) + i;
            y->d = fp32_to_fp16_sw(d);
            qs = y->qs;
        }
        const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(qs), _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    }
}

// quantize_row_q8_K_ref with the magnitude search and rounding vectorised.
void from_float_q8_K(const float * x, void * vy, int64_t k) {
    block_q8_K * y = static_cast<block_q8_K *>(vy);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t i = 0; i < k / QK_K; i++, x += QK_K) {
        __m256 am = _mm256_setzero_ps();
        for (int j = 0; j < QK_K; j += 8) am = _mm256_max_ps(am, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
        __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(am, 1), _mm256_castps256_ps128(am));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
        const float amax = _mm_cvtss_f32(m4);
        if (!(amax > 0)) {
            y[i].d = 0;
            std::memset(y[i].qs, 0, QK_K);
            std::memset(y[i].bsums, 0, sizeof y[i].bsums);
            continue;
        }
        float max = 0;
        const __m256 vam = _mm256_set1_ps(amax);
        for (int j = 0; j < QK_K; j += 8) {
            const int m = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), vam, _CMP_EQ_OQ));
            if (m) { max = x[j + __builtin_ctz(static_cast<unsigned>(m))]; break; }
        }
        const float iscale = -127.f / max;
        const __m256 vs = _mm256_set1_ps(iscale);
        const __m256i k127 = _mm256_set1_epi32(127);
        for (int j = 0; j < QK_K; j += 16) {
            const __m256i a = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(vs, _mm256_loadu_ps(x + j))), k127);
            const __m256i b = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(vs, _mm256_loadu_ps(x + j + 8))), k127);
            const __m256i p16 = _mm256_packs_epi32(a, b);  // lanes: a0-3 b0-3 | a4-7 b4-7
            const __m128i p8 = _mm_packs_epi16(_mm256_castsi256_si128(p16), _mm256_extracti128_si256(p16, 1));
            _mm_storeu_si128(reinterpret_cast<__m128i *>(y[i].qs + j), _mm_shuffle_epi8(p8, _mm_setr_epi8(0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15)));
            y[i].bsums[j / 16] = static_cast<int16_t>(hsum8i(_mm256_add_epi32(a, b)));
        }
        y[i].d = 1 / iscale;
    }
}

void cvt_f16_f32(const void * vx, void * vy, int64_t n) {
    const uint16_t * x = static_cast<const uint16_t *>(vx);
    float * y = static_cast<float *>(vy);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i *>(x + i))));
    for (; i < n; i++) y[i] = _cvtsh_ss(x[i]);
}

void cvt_f32_f16(const void * vx, void * vy, int64_t n) {
    const float * x = static_cast<const float *>(vx);
    uint16_t * y = static_cast<uint16_t *>(vy);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i *>(y + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++) y[i] = static_cast<uint16_t>(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(x[i]), _MM_FROUND_TO_NEAREST_INT), 0));
}

void cvt_bf16_f32(const void * vx, void * vy, int64_t n) {
    const uint16_t * x = static_cast<const uint16_t *>(vx);
    float * y = static_cast<float *>(vy);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(y + i),
                            _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(x + i))), 16));
    for (; i < n; i++) y[i] = bf16_to_fp32_sw(x[i]);
}

void cvt_f32_bf16(const void * vx, void * vy, int64_t n) {
    const float * x = static_cast<const float *>(vx);
    uint16_t * y = static_cast<uint16_t *>(vy);
    int64_t i = 0;
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    for (; i + 8 <= n; i += 8) {
        const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(x + i));
        const __m256i rounded = _mm256_srli_epi32(
            _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1)))), 16);
        const __m256i nan = _mm256_or_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(64));
        const __m256i is_nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);  // both non-negative
        const __m256i r = _mm256_blendv_epi8(rounded, nan, is_nan);
        const __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
        _mm_storeu_si128(reinterpret_cast<__m128i *>(y + i), packed);
    }
    for (; i < n; i++) y[i] = fp32_to_bf16_sw(x[i]);
}

// ---------------------------------------------------------------- floats straight to prepared layouts
// Same arithmetic as from_float_q8 (hence bit-identical to from_float + prepare_* in quants.cpp).

// One 32-value block: quants (in order), the fp16-rounded d, d itself and the sum of the quants.
struct q8_block {
    __m256i q;
    float d16, d;
    int sum;
};

KAIL_INLINE q8_block quantize_block(const float * x) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256 v0 = _mm256_loadu_ps(x), v1 = _mm256_loadu_ps(x + 8), v2 = _mm256_loadu_ps(x + 16), v3 = _mm256_loadu_ps(x + 24);
    const __m256 am = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, v0), _mm256_andnot_ps(sign, v1)),
                                    _mm256_max_ps(_mm256_andnot_ps(sign, v2), _mm256_andnot_ps(sign, v3)));
    __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(am, 1), _mm256_castps256_ps128(am));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    q8_block b;
    b.d = amax / 127.f;
    b.d16 = fp16_to_fp32_sw(fp32_to_fp16_sw(b.d));
    const __m256 mul = _mm256_set1_ps(amax != 0.0f ? 127.f / amax : 0.0f);
    const __m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v0, mul), _MM_ROUND_NEAREST));
    const __m256i i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v1, mul), _MM_ROUND_NEAREST));
    const __m256i i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v2, mul), _MM_ROUND_NEAREST));
    const __m256i i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v3, mul), _MM_ROUND_NEAREST));
    b.sum = hsum8i(_mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3)));
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
    b.q = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    return b;
}

// Sum of each 4-byte lane of q (int8), as int32.
KAIL_INLINE __m128i lane_sums4(__m128i q) { return _mm_madd_epi16(_mm_maddubs_epi16(_mm_set1_epi8(1), q), _mm_set1_epi16(1)); }

template <int OFF, bool Q8_1>
void quantize_prepared_split(const float * x, void * dst, int64_t k) {
    const int64_t nb = k / 32;
    uint8_t * out = static_cast<uint8_t *>(dst);
    const int64_t ng = (nb + 3) / 4;
    for (int64_t g = 0; g < ng; g++) {
        uint8_t * G = out + g * PREP_SPLIT_GROUP;
        for (int j = 0; j < 4; j++) {
            const int64_t b = g * 4 + j;
            __m128i lo = _mm_setzero_si128(), hi = _mm_setzero_si128(), c = _mm_setzero_si128();
            __m128 d = _mm_setzero_ps();
            if (b < nb) {
                const q8_block q = quantize_block(x + 32 * b);
                lo = _mm256_castsi256_si128(q.q);
                hi = _mm256_extracti128_si256(q.q, 1);
                d = _mm_set1_ps(q.d16);
                if (Q8_1) c = _mm_castps_si128(_mm_set_ss(fp16_to_fp32_sw(fp32_to_fp16_sw(q.d * static_cast<float>(q.sum)))));
                else c = _mm_mullo_epi32(_mm_add_epi32(lane_sums4(lo), lane_sums4(hi)), _mm_set1_epi32(-OFF));
            }
            _mm_storeu_si128(reinterpret_cast<__m128i *>(G + 16 * j), lo);
            _mm_storeu_si128(reinterpret_cast<__m128i *>(G + 64 + 16 * j), hi);
            _mm_storeu_si128(reinterpret_cast<__m128i *>(G + 128 + 16 * j), c);
            _mm_storeu_ps(reinterpret_cast<float *>(G + 192 + 16 * j), d);
        }
    }
}

// Standard Q8_0 / Q8_1 rows to the split layout (same bytes as prepare_split_* in quants.cpp), for
// activations quantized ahead of time (matmul_quantized, expert routing).
template <int OFF, bool Q8_1>
void prepare_split_fast(int64_t k, const void * src, void * dst) {
    const int64_t nb = k / 32;
    constexpr size_t BS = Q8_1 ? sizeof(block_q8_1) : sizeof(block_q8_0);
    constexpr size_t QOFF = Q8_1 ? 4 : 2;
    const uint8_t * in = static_cast<const uint8_t *>(src);
    uint8_t * out = static_cast<uint8_t *>(dst);
    const int64_t ng = (nb + 3) / 4;
    for (int64_t g = 0; g < ng; g++) {
        uint8_t * G = out + g * PREP_SPLIT_GROUP;
        for (int j = 0; j < 4; j++) {
            const int64_t b = g * 4 + j;
            __m128i lo = _mm_setzero_si128(), hi = _mm_setzero_si128(), c = _mm_setzero_si128();
            __m128 d = _mm_setzero_ps();
            if (b < nb) {
                const uint8_t * blk = in + BS * b;
                lo = _mm_loadu_si128(reinterpret_cast<const __m128i *>(blk + QOFF));
                hi = _mm_loadu_si128(reinterpret_cast<const __m128i *>(blk + QOFF + 16));
                uint16_t dh;
                std::memcpy(&dh, blk, 2);
                d = _mm_set1_ps(_cvtsh_ss(dh));
                if (Q8_1) {
                    uint16_t sh;
                    std::memcpy(&sh, blk + 2, 2);
                    c = _mm_castps_si128(_mm_set_ss(_cvtsh_ss(sh)));
                } else {
                    c = _mm_mullo_epi32(_mm_add_epi32(lane_sums4(lo), lane_sums4(hi)), _mm_set1_epi32(-OFF));
                }
            }
            _mm_storeu_si128(reinterpret_cast<__m128i *>(G + 16 * j), lo);
            _mm_storeu_si128(reinterpret_cast<__m128i *>(G + 64 + 16 * j), hi);
            _mm_storeu_si128(reinterpret_cast<__m128i *>(G + 128 + 16 * j), c);
            _mm_storeu_ps(reinterpret_cast<float *>(G + 192 + 16 * j), d);
        }
    }
}

// F16 / BF16 weights: the activations rounded to the weight type and widened back.
void quantize_prepared_f16(const float * x, void * dst, int64_t k) {
    float * y = static_cast<float *>(dst);
    int64_t i = 0;
    for (; i + 8 <= k; i += 8)
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT)));
    for (; i < k; i++) y[i] = fp16_to_fp32_sw(fp32_to_fp16_sw(x[i]));
}

void quantize_prepared_bf16(const float * x, void * dst, int64_t k) {
    float * y = static_cast<float *>(dst);
    for (int64_t i = 0; i < k; i += 256) {
        uint16_t tmp[256];
        const int64_t m = k - i < 256 ? k - i : 256;
        cvt_f32_bf16(x + i, tmp, m);
        cvt_bf16_f32(tmp, y + i, m);
    }
}

void from_float_f16(const float * x, void * y, int64_t k) { cvt_f32_f16(x, y, k); }
void from_float_bf16(const float * x, void * y, int64_t k) { cvt_f32_bf16(x, y, k); }

template <template <int, int> class TILE, int R, int T>
void set(kernel_table & t, uint32_t type, gemm_fn decode, prepare_fn prep = nullptr, prepared_size_fn psz = nullptr) {
    weight_kernels & wk = t.w[type];
    wk.gemm_decode = decode;
    const int decode_r = type == KAIL_TYPE_Q4_0 || type == KAIL_TYPE_Q4_1 || type == KAIL_TYPE_Q5_0 || type == KAIL_TYPE_Q5_1 || type == KAIL_TYPE_Q8_0 ||
                                 type == KAIL_TYPE_IQ4_NL || type == KAIL_TYPE_MXFP4
                             ? 2
                             : 1;
    wk.gemm = gemm_dispatch<TILE, R, T>;
    wk.max_r = R;
    wk.max_t = T;
    wk.chunk_t = 0;
    wk.decode_r = decode_r;
    wk.prepare = prep;
    wk.prepared_size = psz;
}

template <bool V> struct tiles {
    template <int R, int T> using q4_0 = typename split_dec<0, V>::template tile<R, T>;
    template <int R, int T> using q4_1 = typename split_dec<1, V>::template tile<R, T>;
    template <int R, int T> using q5_0 = typename split_dec<2, V>::template tile<R, T>;
    template <int R, int T> using q5_1 = typename split_dec<3, V>::template tile<R, T>;
    template <int R, int T> using q8_0 = typename split_dec<4, V>::template tile<R, T>;
    template <int R, int T> using q2_K = typename kquant<q2_K_dec, V>::template tile<R, T>;
    template <int R, int T> using q3_K = typename kquant<q3_K_dec, V>::template tile<R, T>;
    template <int R, int T> using q4_K = typename kquant<q4_K_dec, V>::template tile<R, T>;
    template <int R, int T> using q5_K = typename kquant<q5_K_dec, V>::template tile<R, T>;
    template <int R, int T> using q6_K = typename kquant<q6_K_dec, V>::template tile<R, T>;
    template <int R, int T> using iq4_xs = typename kquant<iq4_xs_dec, V>::template tile<R, T>;
    template <int R, int T> using iq4_nl = typename split_dec<5, V>::template tile<R, T>;
    template <int R, int T> using mxfp4 = typename split_dec<6, V>::template tile<R, T>;
    template <int R, int T> using nvfp4 = typename nvfp4_kernel<V>::template tile<R, T>;
    template <int R, int T> using tq2_0 = typename tq2_0_kernel<V>::template tile<R, T>;
    template <int R, int T> using q2_0 = typename q2_0_kernel<V>::template tile<R, T>;
    template <int R, int T> using q1_0 = typename q1_0_kernel<V>::template tile<R, T>;
    template <int R, int T> using tq1_0 = typename tq1_0_kernel<V>::template tile<R, T>;
    template <int R, int T> using iq2_xxs = typename kquant<iq2_xxs_dec, V>::template tile<R, T>;
    template <int R, int T> using iq2_xs = typename kquant<iq2_xs_dec, V>::template tile<R, T>;
    template <int R, int T> using iq2_s = typename kquant<iq2_s_dec, V>::template tile<R, T>;
    template <int R, int T> using iq3_xxs = typename kquant<iq3_xxs_dec, V>::template tile<R, T>;
    template <int R, int T> using iq3_s = typename kquant<iq3_s_dec, V>::template tile<R, T>;
    template <int R, int T> using iq1_s = typename kquant<iq1_s_dec, V>::template tile<R, T>;
    template <int R, int T> using iq1_m = typename kquant<iq1_m_dec, V>::template tile<R, T>;
};

template <int R, int T> using f32_tile = floats<0>::tile<R, T>;
template <int R, int T> using f16_tile = floats<1>::tile<R, T>;
template <int R, int T> using bf16_tile = floats<2>::tile<R, T>;

// decode_r = 1 but for the split-layout types: without software prefetch, two or four interleaved
// row streams measured 2-3x slower from DRAM than one (AMD VM). The split-layout loop now
// prefetches the rows ahead, and two rows per call measured faster there (Intel Xeon VM, 4096 x
// 4096, 2 threads, decode GB/s: Q8_0 15.0-16.1 -> 17.6-19.3, Q4_0 10.1-12.9 -> 14.1-15.6 with
// KAIL_FORCE_ISA=avx2; at the avx512 level Q8_0 14.1-15.7 -> 16.2-16.9).
template <bool V>
void init(kernel_table & t) {
    using TS = tiles<V>;
    set<TS::template q4_0, 2, 3>(t, KAIL_TYPE_Q4_0, split_dec<0, V>::decode, prepare_split_q8_0_off8, prepared_size_split);
    set<TS::template q4_1, 2, 3>(t, KAIL_TYPE_Q4_1, split_dec<1, V>::decode, prepare_split_q8_1, prepared_size_split);
    // Q5_0 in tiles of up to 4 tokens: the K-quant files of models whose rows are not a multiple of
    // 256 (Nemotron-3-Nano's 2688) fall back to it for most tensors, and a pass of 4 sequences was a
    // 3-token and a 1-token tile (Nemotron-3-Nano shape, 8 blocks, 2 threads, AVX2: 4 sequences
    // 49.9-51.3 -> 59.2-60.5 tokens/s, 16 sequences 49.7-53.9 -> 60.0-63.2, measured interleaved).
    set<TS::template q5_0, 2, 4>(t, KAIL_TYPE_Q5_0, split_dec<2, V>::decode, prepare_split_q8_0_off16, prepared_size_split);
    set<TS::template q5_1, 2, 3>(t, KAIL_TYPE_Q5_1, split_dec<3, V>::decode, prepare_split_q8_1, prepared_size_split);
    set<TS::template q8_0, 2, 3>(t, KAIL_TYPE_Q8_0, split_dec<4, V>::decode, prepare_split_q8_0_off128, prepared_size_split);
    set<TS::template q2_K, 1, 4>(t, KAIL_TYPE_Q2_K, nullptr);
    set<TS::template q3_K, 1, 4>(t, KAIL_TYPE_Q3_K, nullptr);
    set<TS::template q4_K, 1, 4>(t, KAIL_TYPE_Q4_K, nullptr);
    set<TS::template q5_K, 1, 4>(t, KAIL_TYPE_Q5_K, nullptr);
    set<TS::template q6_K, 1, 4>(t, KAIL_TYPE_Q6_K, nullptr);
    set<TS::template iq4_xs, 1, 4>(t, KAIL_TYPE_IQ4_XS, nullptr);
    set<TS::template iq4_nl, 2, 3>(t, KAIL_TYPE_IQ4_NL, split_dec<5, V>::decode, prepare_split_q8_0_off128, prepared_size_split);
    set<TS::template mxfp4, 2, 3>(t, KAIL_TYPE_MXFP4, split_dec<6, V>::decode, prepare_split_q8_0_off12, prepared_size_split);
    set<TS::template nvfp4, 1, 4>(t, KAIL_TYPE_NVFP4, nullptr);
    set<TS::template tq2_0, 1, 4>(t, KAIL_TYPE_TQ2_0, nullptr);
    set<TS::template q2_0, 1, 4>(t, KAIL_TYPE_Q2_0, nullptr);
    set<TS::template q1_0, 1, 4>(t, KAIL_TYPE_Q1_0, nullptr);
    set<TS::template tq1_0, 1, 4>(t, KAIL_TYPE_TQ1_0, nullptr);
    // The codebook i-quants decode a block with scalar table loads, so a tile of 8 tokens shares
    // each decoded block twice as widely as 4 (prompt GFLOP/s, bench-matmul 2048 x 4096, 64 tokens,
    // 1 thread, AMD EPYC AVX-512 VM: IQ2_S 78 -> 100, IQ3_XXS 81 -> 101, IQ3_S 59 -> 81, IQ1_M
    // 69 -> 90, IQ2_XXS 103 -> 106). The cost: rows of 4096+ values are cut in more chunks (see
    // chunk_cols), about 8% on such a matrix x vector; rows of 2048 are not cut either way.
    set<TS::template iq2_xxs, 1, 8>(t, KAIL_TYPE_IQ2_XXS, nullptr);
    set<TS::template iq2_xs, 1, 8>(t, KAIL_TYPE_IQ2_XS, nullptr);
    set<TS::template iq2_s, 1, 8>(t, KAIL_TYPE_IQ2_S, nullptr);
    set<TS::template iq3_xxs, 1, 8>(t, KAIL_TYPE_IQ3_XXS, nullptr);
    set<TS::template iq3_s, 1, 8>(t, KAIL_TYPE_IQ3_S, nullptr);
    set<TS::template iq1_s, 1, 8>(t, KAIL_TYPE_IQ1_S, nullptr);
    set<TS::template iq1_m, 1, 8>(t, KAIL_TYPE_IQ1_M, nullptr);
}

// Q4_0 and Q5_0 rows to floats (Q5 = Q5_0): the 4-bit quants with the 5th bit from qh, less the
// offset (8, 16), times d: the reference's bits (one exact conversion and one product; Q4_1 and
// Q5_1's added min would need a product and a sum the compiler may fuse, so they stay scalar here).
template <bool Q5>
void to_float_split(const void * vx, void * vy, int64_t k) {
    constexpr int BB = Q5 ? 22 : 18, QS = Q5 ? 6 : 2;
    const uint8_t * x = static_cast<const uint8_t *>(vx);
    float * y = static_cast<float *>(vy);
    const __m256i iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256i one = _mm256_set1_epi32(1), m4 = _mm256_set1_epi32(0x0F), sixteen = _mm256_set1_epi32(16), off = _mm256_set1_epi32(Q5 ? 16 : 8);
    for (int64_t i = 0; i < k / 32; i++, x += BB, y += 32) {
        uint16_t dh;
        uint32_t qh = 0;
        std::memcpy(&dh, x, 2);
        if constexpr (Q5) std::memcpy(&qh, x + 2, 4);
        const __m256 d = _mm256_set1_ps(fp16_to_fp32_sw(dh));
        const __m256i h = _mm256_set1_epi32(static_cast<int>(qh));
        for (int g = 0; g < 2; g++) {
            const __m256i q = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i *>(x + QS + 8 * g)));
            __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_srli_epi32(q, 4);
            if constexpr (Q5) {
                const __m256i at = _mm256_add_epi32(iota, _mm256_set1_epi32(8 * g));
                lo = _mm256_or_si256(lo, _mm256_slli_epi32(_mm256_and_si256(_mm256_srlv_epi32(h, at), one), 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi32(_mm256_and_si256(_mm256_srlv_epi32(h, _mm256_add_epi32(at, sixteen)), one), 4));
            }
            _mm256_storeu_ps(y + 8 * g, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(lo, off)), d));
            _mm256_storeu_ps(y + 16 + 8 * g, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(hi, off)), d));
        }
    }
}

// IQ4_NL rows to floats: d * level[index], the reference's bits (a byte shuffle looks the levels up).
void to_float_iq4_nl(const void * vx, void * vy, int64_t k) {
    const uint8_t * x = static_cast<const uint8_t *>(vx);
    float * y = static_cast<float *>(vy);
    const __m128i levels = _mm_loadu_si128(reinterpret_cast<const __m128i *>(kIq4Levels));
    const __m128i m4 = _mm_set1_epi8(0x0F);
    for (int64_t i = 0; i < k / 32; i++, x += 18, y += 32) {
        uint16_t dh;
        std::memcpy(&dh, x, 2);
        const __m256 d = _mm256_set1_ps(fp16_to_fp32_sw(dh));
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i *>(x + 2));
        const __m128i lo = _mm_shuffle_epi8(levels, _mm_and_si128(q, m4));
        const __m128i hi = _mm_shuffle_epi8(levels, _mm_and_si128(_mm_srli_epi16(q, 4), m4));
        _mm256_storeu_ps(y, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo))));
        _mm256_storeu_ps(y + 8, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8)))));
        _mm256_storeu_ps(y + 16, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi))));
        _mm256_storeu_ps(y + 24, _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8)))));
    }
}

} // namespace

#if defined(KAIL_IQ_WIDE_TU)
void kernels_init_iq_avx512(kernel_table & t) {
    // (The AVX-512 level has VNNI; kquant's tiles under 9 tokens take VPDPWSSD.) Activation chunks
    // stay sized for 8 tokens (chunk_t), as with kquant's tiles: the same cuts, so the same bits.
    set<iq_wide<iq2_xxs_dec, true>::tile, kWideR, kWideT>(t, KAIL_TYPE_IQ2_XXS, nullptr);
    set<iq_wide<iq2_xs_dec, true>::tile, kWideR, kWideT>(t, KAIL_TYPE_IQ2_XS, nullptr);
    set<iq_wide<iq2_s_dec, true>::tile, kWideR, kWideT>(t, KAIL_TYPE_IQ2_S, nullptr);
    set<iq_wide<iq3_xxs_dec, true>::tile, kWideR, kWideT>(t, KAIL_TYPE_IQ3_XXS, nullptr);
    set<iq_wide<iq3_s_dec, true>::tile, kWideR, kWideT>(t, KAIL_TYPE_IQ3_S, nullptr);
    set<iq_wide<iq1_s_dec, true>::tile, kWideR, kWideT>(t, KAIL_TYPE_IQ1_S, nullptr);
    set<iq_wide<iq1_m_dec, true>::tile, kWideR, kWideT>(t, KAIL_TYPE_IQ1_M, nullptr);
    for (uint32_t type : {KAIL_TYPE_IQ2_XXS, KAIL_TYPE_IQ2_XS, KAIL_TYPE_IQ2_S, KAIL_TYPE_IQ3_XXS, KAIL_TYPE_IQ3_S, KAIL_TYPE_IQ1_S, KAIL_TYPE_IQ1_M})
        t.w[type].chunk_t = 8;
}
#else
void kernels_init_avx2(kernel_table & t, bool vnni) {
    t.level = "avx2";
    if (vnni) init<true>(t);
    else init<false>(t);
    set<f32_tile, 3, 4>(t, KAIL_TYPE_F32, floats<0>::decode);
    set<f16_tile, 3, 4>(t, KAIL_TYPE_F16, floats<1>::decode, prepare_f16_as_f32, prepared_size_f32);
    set<bf16_tile, 3, 4>(t, KAIL_TYPE_BF16, floats<2>::decode, prepare_bf16_as_f32, prepared_size_f32);
    t.w[KAIL_TYPE_Q4_0].prepare = prepare_split_fast<8, false>;
    t.w[KAIL_TYPE_Q5_0].prepare = prepare_split_fast<16, false>;
    t.w[KAIL_TYPE_Q8_0].prepare = prepare_split_fast<128, false>;
    t.w[KAIL_TYPE_Q4_1].prepare = prepare_split_fast<0, true>;
    t.w[KAIL_TYPE_Q5_1].prepare = prepare_split_fast<0, true>;
    t.w[KAIL_TYPE_Q4_0].quantize_prepared = quantize_prepared_split<8, false>;
    t.w[KAIL_TYPE_Q5_0].quantize_prepared = quantize_prepared_split<16, false>;
    t.w[KAIL_TYPE_Q4_1].quantize_prepared = quantize_prepared_split<0, true>;
    t.w[KAIL_TYPE_Q5_1].quantize_prepared = quantize_prepared_split<0, true>;
    t.w[KAIL_TYPE_Q8_0].quantize_prepared = quantize_prepared_split<128, false>;
    t.w[KAIL_TYPE_F16].quantize_prepared = quantize_prepared_f16;
    t.w[KAIL_TYPE_BF16].quantize_prepared = quantize_prepared_bf16;
    t.from_float[KAIL_TYPE_Q8_0] = from_float_q8<false>;
    t.from_float[KAIL_TYPE_Q8_1] = from_float_q8<true>;
    t.from_float[KAIL_TYPE_Q8_K] = from_float_q8_K;
    t.from_float[KAIL_TYPE_F16] = from_float_f16;
    t.to_float[KAIL_TYPE_Q4_0] = to_float_split<false>;
    t.to_float[KAIL_TYPE_Q5_0] = to_float_split<true>;
    t.to_float[KAIL_TYPE_IQ4_NL] = to_float_iq4_nl;
    t.from_float[KAIL_TYPE_BF16] = from_float_bf16;
    t.fp16_to_fp32 = cvt_f16_f32;
    t.fp32_to_fp16 = cvt_f32_f16;
    t.bf16_to_fp32 = cvt_bf16_f32;
    t.fp32_to_bf16 = cvt_f32_bf16;
    t.weighted_rows_f32 = weighted_rows<float>;
    t.weighted_rows_f16 = weighted_rows<uint16_t>;
    t.scale_max = scale_max;
    t.exp_sum = exp_sum;
}

#endif

} // namespace kail::cpu
