// Helpers of the x86 kernels of the newer types (quants_avx2.cpp and quants_avx512.cpp, which
// include this): tile accumulators, horizontal sums of int32 lanes and the scalar kernels' float
// steps taken on exact per-Q8_0-block sums, so a tile's result is the scalar kernel's bits. They live in an anonymous
// namespace: each kernel file compiles its own copy with its own target flags (one shared inline
// definition could hand the AVX-512 file's code to the AVX2 level).
#pragma once

#include <immintrin.h>

#include "cpu/quants_impl.h"

namespace kail::cpu {
namespace {

#ifndef KAIL_INLINE
#define KAIL_INLINE inline __attribute__((always_inline))
#endif

// A tile's scalar accumulators (one per weight row and token) zeroed, and stored to out[token][row].
template <int R, int T>
KAIL_INLINE void zero_acc(__m128 (&acc)[R][T]) {
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) acc[r][t] = _mm_setzero_ps();
}
template <int R, int T>
KAIL_INLINE void store_acc(const __m128 (&acc)[R][T], float * const * out) {
#pragma GCC unroll 8
    for (int t = 0; t < T; t++)
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) out[t][r] = _mm_cvtss_f32(acc[r][t]);
}

// keep() hides a value from the compiler, so a product is not contracted into an FMA with the sum
// that follows (the scalar kernel rounds each).
KAIL_INLINE __m256 keep(__m256 v) {
    __asm__("" : "+x"(v));
    return v;
}
// The int32 lanes summed: [s0, s1, s0, s1] of two vectors, [s0, s1, s2, s3] of four, [s0..s7] of eight.
KAIL_INLINE __m128i hsum2x8i(__m256i a, __m256i b) {
    const __m256i h = _mm256_hadd_epi32(a, b);
    const __m128i g = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
    return _mm_hadd_epi32(g, g);
}
KAIL_INLINE __m128i hsum4x8i(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i h = _mm256_hadd_epi32(_mm256_hadd_epi32(a, b), _mm256_hadd_epi32(c, d));
    return _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
}
KAIL_INLINE __m256i hsum8x8i(const __m256i (&s)[8]) {
    const __m256i a = _mm256_hadd_epi32(_mm256_hadd_epi32(s[0], s[1]), _mm256_hadd_epi32(s[2], s[3]));  // [0-3 lo | 0-3 hi]
    const __m256i b = _mm256_hadd_epi32(_mm256_hadd_epi32(s[4], s[5]), _mm256_hadd_epi32(s[6], s[7]));
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20), _mm256_permute2x128_si256(a, b, 0x31));
}
// The scalar steps on N (2 or 4) Q8_0 blocks' sums: sumi = dy_0 * s_0 + dy_1 * s_1 (+ ...) in block
// order, then acc + d * sumi, each a separately rounded scalar instruction.
template <int N>
KAIL_INLINE __m128 q8_0_block_steps(__m128 acc, __m128i s, const block_q8_0 * y, float d) {
    const __m128 f = _mm_cvtepi32_ps(s);
    __m128 sumi = _mm_mul_ss(f, _mm_set_ss(_cvtsh_ss(y[0].d)));
    sumi = _mm_add_ss(sumi, _mm_mul_ss(_mm_movehdup_ps(f), _mm_set_ss(_cvtsh_ss(y[1].d))));
    if constexpr (N == 4) {
        sumi = _mm_add_ss(sumi, _mm_mul_ss(_mm_movehl_ps(f, f), _mm_set_ss(_cvtsh_ss(y[2].d))));
        sumi = _mm_add_ss(sumi, _mm_mul_ss(_mm_shuffle_ps(f, f, 3), _mm_set_ss(_cvtsh_ss(y[3].d))));
    }
    return _mm_add_ss(acc, _mm_mul_ss(sumi, _mm_set_ss(d)));
}
// fp16 scales to floats: eight Q8_0 blocks', four Q2_0 blocks' (lanes 0, 1, 4, 5), two Q1_0 blocks' (lanes 0, 4).
KAIL_INLINE __m256 q8_0_scales8(const block_q8_0 * y) {
    __m128i h = _mm_cvtsi32_si128(y[0].d);
    h = _mm_insert_epi16(h, y[1].d, 1), h = _mm_insert_epi16(h, y[2].d, 2), h = _mm_insert_epi16(h, y[3].d, 3);
    h = _mm_insert_epi16(h, y[4].d, 4), h = _mm_insert_epi16(h, y[5].d, 5), h = _mm_insert_epi16(h, y[6].d, 6);
    h = _mm_insert_epi16(h, y[7].d, 7);
    return _mm256_cvtph_ps(h);
}
KAIL_INLINE __m256 q2_0_scales4(const block_q2_0 * b) {
    __m128i h = _mm_cvtsi32_si128(b[0].d);
    h = _mm_insert_epi16(h, b[1].d, 1), h = _mm_insert_epi16(h, b[2].d, 4), h = _mm_insert_epi16(h, b[3].d, 5);
    return _mm256_cvtph_ps(h);
}
// Four Q2_0 blocks at once (eight Q8_0 blocks' sums [s0..s7]), the same float steps lane-wise:
// products dy_j * s_j, VHADDPS for each block's dy_0 s_0 + dy_1 s_1 (as the scalar sumi: 0 + a + b
// = a + b), times d, added to the accumulator one block at a time in block order.
KAIL_INLINE __m128 q2_0_group_steps(__m128 acc, __m256i s, __m256 dy, __m256 d) {
    const __m256 p = keep(_mm256_mul_ps(_mm256_cvtepi32_ps(s), dy));
    const __m256 m = keep(_mm256_mul_ps(_mm256_hadd_ps(p, p), d));
    const __m128 lo = _mm256_castps256_ps128(m), hi = _mm256_extractf128_ps(m, 1);
    acc = _mm_add_ss(acc, lo);
    acc = _mm_add_ss(acc, _mm_movehdup_ps(lo));
    acc = _mm_add_ss(acc, hi);
    return _mm_add_ss(acc, _mm_movehdup_ps(hi));
}
KAIL_INLINE __m256 q1_0_scales2(const block_q1_0 * b) {
    return _mm256_cvtph_ps(_mm_insert_epi16(_mm_cvtsi32_si128(b[0].d), b[1].d, 4));
}
// Two Q1_0 blocks at once (eight Q8_0 blocks' sums): products dy_j * s_j, each block's sumi
// ((p0 + p1) + p2) + p3 in the scalar kernel's order (lanes 0 and 4), times d, added to the
// accumulator in block order; keep() between the steps, so none contracts to an FMA.
KAIL_INLINE __m128 q1_0_group_steps(__m128 acc, __m256i s, __m256 dy, __m256 d) {
    const __m256 p = keep(_mm256_mul_ps(_mm256_cvtepi32_ps(s), dy));
    __m256 sumi = keep(_mm256_add_ps(p, _mm256_movehdup_ps(p)));
    sumi = keep(_mm256_add_ps(sumi, _mm256_shuffle_ps(p, p, 2)));
    sumi = keep(_mm256_add_ps(sumi, _mm256_shuffle_ps(p, p, 3)));
    const __m256 m = keep(_mm256_mul_ps(sumi, d));
    acc = _mm_add_ss(acc, _mm256_castps256_ps128(m));
    return _mm_add_ss(acc, _mm256_extractf128_ps(m, 1));
}
// TQ1_0's powers of 3 by byte arithmetic: x3 = x + x + x, x9 = ((x << 3) & ~7) + x per byte (mod 256).
KAIL_INLINE __m256i tq1_mul3(__m256i x) { return _mm256_add_epi8(x, _mm256_add_epi8(x, x)); }
KAIL_INLINE __m256i tq1_mul9(__m256i x) { return _mm256_add_epi8(_mm256_and_si256(_mm256_slli_epi16(x, 3), _mm256_set1_epi8(static_cast<char>(0xF8))), x); }

}  // namespace
}  // namespace kail::cpu
