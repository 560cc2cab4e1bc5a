// AVX-512 (F/BW/VL/DQ + VNNI) kernels. Only reached through kernels_avx512(), which exists only
// when the CPU has all of these.
//
// Integer products use VPDPBUSD (unsigned x signed bytes) for the Q8_0-activation family: weights
// are made unsigned (q + offset) and the prepared activations carry -offset * sum(q) per lane, so
// the int32 sums are exactly ggml's. K-quants use VPMADDUBSW + VPDPWSSD, which folds the
// sub-block scale into the integer accumulation.
#include <immintrin.h>

#include <cmath>

// GCC 12's _mm512_undefined_* helpers (used inside reduce/cast intrinsics) trip -Wuninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#include <cstring>
#include <initializer_list>
#include <type_traits>

#include "cpu/exp_f32.h"
#include "cpu/fp16.h"
#include "kail/cpu_features.h"
#include "cpu/quants_impl.h"
#include "cpu/quants_x86_steps.h"

namespace kail::cpu {

namespace {

#define KAIL_INLINE inline __attribute__((always_inline))

KAIL_INLINE __m512 h16_to_f32x16(const void * p) { return _mm512_cvtph_ps(_mm256_loadu_si256(static_cast<const __m256i *>(p))); }


KAIL_INLINE __mmask64 bytes_mask(int64_t n) {
    return n >= 64 ? ~__mmask64(0) : n <= 0 ? __mmask64(0) : (__mmask64(1) << n) - 1;
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

// Horizontal sum in a fixed order: the two 256-bit halves lane by lane, then the AVX2 kernels'
// 8-lane sum (so a 512-bit accumulator that holds an AVX2 kernel's two accumulators side by side
// reduces to the same bits).
KAIL_INLINE float reduce16(__m512 v) {
    const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

template <int R, int T>
KAIL_INLINE void store_tile(__m512 (&acc)[R][T], float * const * out) {
#pragma GCC unroll 8
    for (int t = 0; t < T; t++)
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) out[t][r] = reduce16(acc[r][t]);
}

// ---------------------------------------------------------------- legacy 32-element blocks

// Word indices that gather a group's quant bytes (and scales) from two 64-byte loads:
// A = group bytes [0, 64), B = group bytes [GB*BB - 64, GB*BB).
template <int GB, int BB>
struct group_layout {
    static constexpr int bytes = GB * BB;
    static constexpr int boff = bytes - 64;
    static constexpr int word(int off) { return off + 2 <= 64 ? off / 2 : 32 + (off - boff) / 2; }
};

template <int GB, int BB, int QS_OFF, int QS_BYTES>
struct qs_index {
    alignas(64) int16_t v[32];
    constexpr qs_index() : v() {
        // QS_BYTES quant bytes per block, GB blocks, 64 bytes in all.
        for (int b = 0; b < GB; b++)
            for (int w = 0; w < QS_BYTES / 2; w++) v[b * (QS_BYTES / 2) + w] = static_cast<int16_t>(group_layout<GB, BB>::word(BB * b + QS_OFF + 2 * w));
    }
};

// 16 words (then widened to 16 floats): lane l takes the fp16 at FIELD_OFF of block l / (16/GB).
template <int GB, int BB, int FIELD_OFF>
struct scale_index {
    alignas(64) int16_t v[32];
    constexpr scale_index() : v() {
        for (int l = 0; l < 16; l++) v[l] = static_cast<int16_t>(group_layout<GB, BB>::word(BB * (l / (16 / GB)) + FIELD_OFF));
        for (int l = 16; l < 32; l++) v[l] = 0;
    }
};

template <class IDX>
KAIL_INLINE __m512i idx_load() {
    static constexpr IDX idx{};
    return _mm512_load_si512(idx.v);
}

// Loads one group's two 64-byte windows (masked for a partial last group).
template <int GB, int BB, bool TAIL>
KAIL_INLINE void load_group(const uint8_t * p, int rem, __m512i & A, __m512i & B) {
    constexpr int boff = GB * BB - 64;
    if (!TAIL) {
        A = _mm512_loadu_si512(p);
        B = _mm512_loadu_si512(p + boff);
    } else {
        const int64_t valid = int64_t(rem) * BB;
        A = _mm512_maskz_loadu_epi8(bytes_mask(valid), p);
        B = _mm512_maskz_loadu_epi8(bytes_mask(valid - boff), p + boff);
    }
}

// Weights of one group, in the split layout (4 blocks) or natural layout (Q8_0, 2 blocks).
struct wsplit {
    __m512i lo, hi;
    __m512 d, m;
};

// Sets bit 4 of the quant bytes whose qh bit is set (Q5_0/Q5_1), from 4 blocks' 32-bit qh.
template <int BB, int QH_OFF, bool TAIL>
KAIL_INLINE void add_qh(const uint8_t * p, int rem, wsplit & w) {
    uint64_t u01 = 0, u23 = 0;
    uint32_t q[4] = {0, 0, 0, 0};
    const int nbk = TAIL ? rem : 4;
    for (int b = 0; b < nbk; b++) std::memcpy(&q[b], p + BB * b + QH_OFF, 4);
    u01 = q[0] | (uint64_t(q[1]) << 32);
    u23 = q[2] | (uint64_t(q[3]) << 32);
    const uint64_t mlo = _pext_u64(u01, 0x0000FFFF0000FFFFull) | (_pext_u64(u23, 0x0000FFFF0000FFFFull) << 32);
    const uint64_t mhi = _pext_u64(u01, 0xFFFF0000FFFF0000ull) | (_pext_u64(u23, 0xFFFF0000FFFF0000ull) << 32);
    const __m512i k16 = _mm512_set1_epi8(16);
    w.lo = _mm512_mask_add_epi8(w.lo, _cvtu64_mask64(mlo), w.lo, k16);
    w.hi = _mm512_mask_add_epi8(w.hi, _cvtu64_mask64(mhi), w.hi, k16);
}

// TYPE: 0 = Q4_0, 1 = Q4_1, 2 = Q5_0, 3 = Q5_1
template <int TYPE>
struct split_dec {
    static constexpr int GB = 4;
    static constexpr int BB = TYPE == 0 ? 18 : TYPE == 1 ? 20 : TYPE == 2 ? 22 : 24;
    static constexpr int QS_OFF = TYPE == 0 ? 2 : TYPE == 1 ? 4 : TYPE == 2 ? 6 : 8;
    static constexpr bool HAS_MIN = TYPE == 1 || TYPE == 3;
    static constexpr bool HAS_QH = TYPE >= 2;

    template <bool TAIL>
    static KAIL_INLINE wsplit load(const uint8_t * p, int rem) {
        __m512i A, B;
        load_group<GB, BB, TAIL>(p, rem, A, B);
        wsplit w;
        const __m512i q = _mm512_permutex2var_epi16(A, idx_load<qs_index<GB, BB, QS_OFF, 16>>(), B);
        const __m512i m4 = _mm512_set1_epi8(0x0F);
        w.lo = _mm512_and_si512(q, m4);
        w.hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
        w.d = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutex2var_epi16(A, idx_load<scale_index<GB, BB, 0>>(), B)));
        if constexpr (HAS_MIN)
            w.m = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutex2var_epi16(A, idx_load<scale_index<GB, BB, 2>>(), B)));
        else
            w.m = _mm512_setzero_ps();
        if constexpr (HAS_QH) add_qh<BB, HAS_MIN ? 4 : 2, TAIL>(p, rem, w);
        return w;
    }

    static KAIL_INLINE __m512 dot(const wsplit & w, const uint8_t * ap, __m512 acc) {
        __m512i c = HAS_MIN ? _mm512_setzero_si512() : _mm512_loadu_si512(ap + 128);
        c = _mm512_dpbusd_epi32(c, w.lo, _mm512_loadu_si512(ap));
        c = _mm512_dpbusd_epi32(c, w.hi, _mm512_loadu_si512(ap + 64));
        acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(c), _mm512_mul_ps(w.d, _mm512_loadu_ps(reinterpret_cast<const float *>(ap + 192))), acc);
        if constexpr (HAS_MIN) acc = _mm512_fmadd_ps(w.m, _mm512_loadu_ps(reinterpret_cast<const float *>(ap + 128)), acc);
        return acc;
    }
};

// 16 bytes at p + off of each of four blocks BB bytes apart as the four 128-bit lanes (zeros for
// the blocks past nbk): the split layout's gather where the quants do not sit at even offsets.
KAIL_INLINE __m512i lanes4x16(const uint8_t * p, int bb, int off, int nbk) {
    __m128i q[4];
#pragma GCC unroll 4
    for (int b = 0; b < 4; b++) q[b] = b < nbk ? _mm_loadu_si128(reinterpret_cast<const __m128i *>(p + bb * b + off)) : _mm_setzero_si128();
    return _mm512_inserti32x4(_mm512_inserti32x4(_mm512_inserti32x4(_mm512_castsi128_si512(q[0]), q[1], 1), q[2], 2), q[3], 3);
}

// Four per-block scales as the split layout's 16 lanes (block b's in lanes 4b..4b+3).
KAIL_INLINE __m512 scales4(__m128 d4) {
    return _mm512_permutexvar_ps(_mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0), _mm512_castps128_ps512(d4));
}

// Q8_0 in the split layout: four 16-byte pieces per half, gathered with inserts (the quants of
// four 34-byte blocks span more than two 64-byte windows).
struct q8_0_dec {
    static constexpr int GB = 4, BB = 34;
    template <bool TAIL>
    static KAIL_INLINE wsplit load(const uint8_t * p, int rem) {
        const int nbk = TAIL ? rem : 4;
        uint64_t dbits = 0;
        for (int b = 0; b < nbk; b++) {
            uint16_t h;
            std::memcpy(&h, p + BB * b, 2);
            dbits |= uint64_t(h) << (16 * b);
        }
        const __m512i k80 = _mm512_set1_epi8(char(0x80));
        wsplit w;
        w.lo = _mm512_xor_si512(lanes4x16(p, BB, 2, nbk), k80);
        w.hi = _mm512_xor_si512(lanes4x16(p, BB, 18, nbk), k80);
        // Missing blocks have d = 0, so their (offset) quants contribute nothing.
        w.d = scales4(_mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<long long>(dbits))));
        w.m = _mm512_setzero_ps();
        return w;
    }
    static KAIL_INLINE __m512 dot(const wsplit & w, const uint8_t * ap, __m512 acc) { return split_dec<0>::dot(w, ap, acc); }
};

// MXFP4 in the split layout, as Q4_0 with a table: the 4-bit indices of four 17-byte blocks
// (gathered with inserts: their quants start at odd offsets) look up the levels plus 12 (0..24,
// unsigned for VPDPBUSD), and the prepared activations carry -12 * sum(q) per lane, so the int32
// sums are exactly sum(level * q). The scale is the block's E8M0 halved (e8m0_half).
struct mxfp4_dec {
    static constexpr int GB = 4, BB = 17;
    template <bool TAIL>
    static KAIL_INLINE wsplit load(const uint8_t * p, int rem) {
        const int nbk = TAIL ? rem : 4;
        const __m512i qq = lanes4x16(p, BB, 1, nbk);  // missing blocks meet zeroed activations
        const __m512i m4 = _mm512_set1_epi8(0x0F);
        const __m512i table = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i *>(kFp4LevelsU12)));
        wsplit w;
        w.lo = _mm512_shuffle_epi8(table, _mm512_and_si512(qq, m4));
        w.hi = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(qq, 4), m4));
        // e8m0_half, four at once: (e - 1) << 23, or the subnormal 0x00200000 << e for e < 2. (Taking
        // the bytes from a 64-byte load with VPSHUFB, no permute, measured ~8% slower decode.)
        uint32_t e = 0;
        for (int b = 0; b < nbk; b++) e |= uint32_t(p[BB * b]) << (8 * b);
        const __m128i ev = _mm_cvtepu8_epi32(_mm_cvtsi32_si128(static_cast<int>(e)));
        const __m128i normal = _mm_slli_epi32(_mm_sub_epi32(ev, _mm_set1_epi32(1)), 23);
        const __m128i sub = _mm_sllv_epi32(_mm_set1_epi32(0x00200000), ev);
        const __m128 d4 = _mm_castsi128_ps(_mm_mask_blend_epi32(_mm_cmplt_epu32_mask(ev, _mm_set1_epi32(2)), normal, sub));
        w.d = scales4(d4);
        w.m = _mm512_setzero_ps();
        return w;
    }
    static KAIL_INLINE __m512 dot(const wsplit & w, const uint8_t * ap, __m512 acc) { return split_dec<0>::dot(w, ap, acc); }
};

// IQ4_NL: Q4_0's block layout (fp16 d, 16 bytes of 4-bit indices), so Q4_0's gather, with the
// indices looking up the levels + 128 (1..241, unsigned for VPDPBUSD) against activations prepared
// with -128 x their sums (as Q8_0's).
struct iq4_nl_dec {
    static constexpr int GB = 4, BB = 18;
    template <bool TAIL>
    static KAIL_INLINE wsplit load(const uint8_t * p, int rem) {
        wsplit w = split_dec<0>::load<TAIL>(p, rem);
        const __m512i table = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i *>(kIq4LevelsU128)));
        w.lo = _mm512_shuffle_epi8(table, w.lo);
        w.hi = _mm512_shuffle_epi8(table, w.hi);
        return w;
    }
    static KAIL_INLINE __m512 dot(const wsplit & w, const uint8_t * ap, __m512 acc) { return split_dec<0>::dot(w, ap, acc); }
};

// NVFP4: a block's 64 values are one vector. The 32 index bytes broadcast to both halves, the
// upper half shifted by 4 (low nibbles, then high), and one VPERMQ puts sub-block s (bytes 8s..8s+7:
// 8 low nibbles, then their 8 high ones) in 128-bit lane s: element order. The indices look up the
// levels + 12 (0..24, unsigned for VPDPBUSD, as MXFP4's) against the two Q8_0 blocks' 64 quants,
// the accumulation started at -12 x their sums per 4-byte lane (once per token, shared by the
// tile's rows), so the int32 lanes hold exactly sum(level * q) over 4 values; lane 4s..4s+3 takes
// sub-block s's scale (ue4m3_half) x its Q8_0 block's. The same operations per (row, token)
// whatever the tile: batch-invariant.
KAIL_INLINE __m128 ue4m3_half4(const uint8_t * p) {
    uint32_t d4;
    std::memcpy(&d4, p, 4);
    const __m128i u = _mm_cvtepu8_epi32(_mm_cvtsi32_si128(static_cast<int>(d4)));
    // fp16 bits (v & 0x7F) << 7 are the E4M3 value x 2^-8 exactly; 0x7F (NaN) reads 0.
    const __m128i h = _mm_andnot_si128(_mm_cmpeq_epi32(u, _mm_set1_epi32(0x7F)), _mm_slli_epi32(_mm_and_si128(u, _mm_set1_epi32(0x7F)), 7));
    return _mm_mul_ps(_mm_cvtph_ps(_mm_packus_epi32(h, h)), _mm_set1_ps(128.0f));
}

struct nvfp4_kernel {
    template <int R, int T>
    struct tile {
        static void run(int64_t k, const uint8_t * w, size_t ws, const uint8_t * const * a, float * const * out) {
            const __m512i table = _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i *>(kFp4LevelsU12)));
            const __m512i m4 = _mm512_set1_epi8(0x0F), k12 = _mm512_set1_epi8(12);
            const __m512i sh = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
            const __m512i order = _mm512_setr_epi64(0, 4, 1, 5, 2, 6, 3, 7);
            __m512 acc[R][T];
#pragma GCC unroll 8
            for (int r = 0; r < R; r++)
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) acc[r][t] = _mm512_setzero_ps();
            const size_t ahead = rows_ahead(ws, R);
            for (int64_t ib = 0; ib < k / QK_NVFP4; ib++) {
                __m512i u[R];
                __m512 S[R];
#pragma GCC unroll 8
                for (int r = 0; r < R; r++) {
                    const block_nvfp4 * b = reinterpret_cast<const block_nvfp4 *>(w + r * ws) + ib;
                    prefetch_bytes(reinterpret_cast<const uint8_t *>(b) + ahead, sizeof(block_nvfp4));
                    const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(b->qs)));
                    const __m512i n = _mm512_and_si512(_mm512_srlv_epi16(q, sh), m4);
                    u[r] = _mm512_shuffle_epi8(table, _mm512_permutexvar_epi64(order, n));
                    S[r] = scales4(ue4m3_half4(b->d));
                }
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) {
                    const block_q8_0 * y = reinterpret_cast<const block_q8_0 *>(a[t]) + 2 * ib;
                    const __m512i yq = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(y[0].qs))),
                                                          _mm256_loadu_si256(reinterpret_cast<const __m256i *>(y[1].qs)), 1);
                    const __m512i c0 = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), k12, yq));
                    const __m512 dy = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(_cvtsh_ss(y[0].d))), _mm256_set1_ps(_cvtsh_ss(y[1].d)), 1);
#pragma GCC unroll 8
                    for (int r = 0; r < R; r++)
                        acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_dpbusd_epi32(c0, u[r], yq)), _mm512_mul_ps(S[r], dy), acc[r][t]);
                }
            }
            store_tile<R, T>(acc, out);
        }
    };
};

// TQ2_0: the codes q (0..2) of a super-block as four vectors of 64 (Q2_K's layout: shifts 0/2 and
// 4/6 in the two halves of a broadcast 32 bytes) into VPDPBUSD against the activations; the offset
// 1 comes off as the bsums once both are reduced to one int32 (per lane they cover different
// elements), the scalar kernel's exact sum; float(sum) * (d_y * d) is then added as the scalar
// kernel does: its bits at every tile shape (batch-invariant). See the AVX2 file.
struct tq2_0_kernel {
    template <int R, int T>
    struct tile {
        static void run(int64_t k, const uint8_t * w, size_t ws, const uint8_t * const * a, float * const * out) {
            const __m512i m3 = _mm512_set1_epi8(3);
            const __m512i sh01 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
            const __m512i sh23 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1);
            __m128 acc[R][T];
            zero_acc(acc);
            const size_t ahead = rows_ahead(ws, R);
            for (int64_t i = 0; i < k / QK_K; i++) {
                __m512i u[R][4];
                float d[R];
#pragma GCC unroll 8
                for (int r = 0; r < R; r++) {
                    const block_tq2_0 * b = reinterpret_cast<const block_tq2_0 *>(w + r * ws) + i;
                    prefetch_bytes(reinterpret_cast<const uint8_t *>(b) + ahead, sizeof(block_tq2_0));
#pragma GCC unroll 2
                    for (int c = 0; c < 2; c++) {
                        const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(b->qs + 32 * c)));
                        u[r][2 * c] = _mm512_and_si512(_mm512_srlv_epi16(q, sh01), m3);
                        u[r][2 * c + 1] = _mm512_and_si512(_mm512_srlv_epi16(q, sh23), m3);
                    }
                    d[r] = _cvtsh_ss(b->d);
                }
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) {
                    const block_q8_K * y = reinterpret_cast<const block_q8_K *>(a[t]) + i;
                    const __m512i y0 = _mm512_loadu_si512(y->qs), y1 = _mm512_loadu_si512(y->qs + 64);
                    const __m512i y2 = _mm512_loadu_si512(y->qs + 128), y3 = _mm512_loadu_si512(y->qs + 192);
                    const __m512i bs = _mm512_zextsi256_si512(_mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(y->bsums)), _mm256_set1_epi16(1)));
#pragma GCC unroll 8
                    for (int r = 0; r < R; r++) {
                        __m512i s = _mm512_dpbusd_epi32(_mm512_sub_epi32(_mm512_setzero_si512(), bs), u[r][0], y0);
                        s = _mm512_dpbusd_epi32(s, u[r][1], y1);
                        s = _mm512_dpbusd_epi32(s, u[r][2], y2);
                        s = _mm512_dpbusd_epi32(s, u[r][3], y3);
                        const __m128 f = _mm_cvtsi32_ss(_mm_setzero_ps(), _mm512_reduce_add_epi32(s));
                        acc[r][t] = _mm_add_ss(acc[r][t], _mm_mul_ss(f, _mm_set_ss(y->d * d[r])));
                    }
                }
            }
            store_acc(acc, out);
        }
    };
};

// TQ1_0: the AVX2 file's byte powers (elements 32j..32j+31 per 256-bit vector; see there), paired
// into four vectors of 64, the top trit (q >= 86) + (q >= 171) taken on those; then as TQ2_0:
// VPDPBUSD of the trits (0..2) against the activations, started at -bsums, reduced to the
// super-block's one int32, float(sum) * (d * d_y) added: the scalar kernel's bits at every tile shape.
KAIL_INLINE __m512i tq1_trit(__m256i lo, __m256i hi) {
    const __m512i q = _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1), one = _mm512_set1_epi8(1);
    const __m512i t1 = _mm512_min_epu8(_mm512_subs_epu8(q, _mm512_set1_epi8(85)), one);
    const __m512i t2 = _mm512_min_epu8(_mm512_subs_epu8(q, _mm512_set1_epi8(static_cast<char>(170))), one);
    return _mm512_add_epi8(t1, t2);
}
KAIL_INLINE void tq1_0_trits(const block_tq1_0 * b, __m512i (&u)[4]) {
    const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(b->qs));
    const __m256i x3 = tq1_mul3(x1), x9 = tq1_mul9(x1), x27 = tq1_mul9(x3), x81 = tq1_mul9(x9);
    uint32_t h;
    std::memcpy(&h, b->qh, 4);
    const __m256i z1 = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b->qs + 32))),
                                               _mm_set1_epi32(static_cast<int>(h)), 1);
    const __m256i z3 = tq1_mul3(z1), z9 = tq1_mul9(z1), z27 = tq1_mul9(z3), z81 = tq1_mul9(z9);
    u[0] = tq1_trit(x1, x3);
    u[1] = tq1_trit(x9, x27);
    u[2] = tq1_trit(x81, _mm256_permute2x128_si256(z1, z3, 0x20));
    u[3] = tq1_trit(_mm256_permute2x128_si256(z9, z27, 0x20),
                    _mm256_blend_epi32(z81, _mm256_blend_epi32(_mm256_blend_epi32(z1, z3, 0x20), _mm256_blend_epi32(z9, z27, 0x80), 0xC0), 0xF0));
}

struct tq1_0_kernel {
    template <int R, int T>
    struct tile {
        static void run(int64_t k, const uint8_t * w, size_t ws, const uint8_t * const * a, float * const * out) {
            __m128 acc[R][T];
            zero_acc(acc);
            const size_t ahead = rows_ahead(ws, R);
            for (int64_t i = 0; i < k / QK_K; i++) {
                __m512i u[R][4];
                float d[R];
#pragma GCC unroll 8
                for (int r = 0; r < R; r++) {
                    const block_tq1_0 * b = reinterpret_cast<const block_tq1_0 *>(w + r * ws) + i;
                    prefetch_bytes(reinterpret_cast<const uint8_t *>(b) + ahead, sizeof(block_tq1_0));
                    tq1_0_trits(b, u[r]);
                    d[r] = _cvtsh_ss(b->d);
                }
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) {
                    const block_q8_K * y = reinterpret_cast<const block_q8_K *>(a[t]) + i;
                    const __m512i y0 = _mm512_loadu_si512(y->qs), y1 = _mm512_loadu_si512(y->qs + 64);
                    const __m512i y2 = _mm512_loadu_si512(y->qs + 128), y3 = _mm512_loadu_si512(y->qs + 192);
                    const __m512i bs = _mm512_zextsi256_si512(_mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(y->bsums)), _mm256_set1_epi16(1)));
#pragma GCC unroll 8
                    for (int r = 0; r < R; r++) {
                        __m512i s = _mm512_dpbusd_epi32(_mm512_sub_epi32(_mm512_setzero_si512(), bs), u[r][0], y0);
                        s = _mm512_dpbusd_epi32(s, u[r][1], y1);
                        s = _mm512_dpbusd_epi32(s, u[r][2], y2);
                        s = _mm512_dpbusd_epi32(s, u[r][3], y3);
                        const __m128 f = _mm_cvtsi32_ss(_mm_setzero_ps(), _mm512_reduce_add_epi32(s));
                        acc[r][t] = _mm_add_ss(acc[r][t], _mm_mul_ss(f, _mm_set_ss(d[r] * y->d)));
                    }
                }
            }
            store_acc(acc, out);
        }
    };
};

// Q2_0 and Q1_0 (Q8_0 activations) take the scalar kernels' float steps on exact per-Q8_0-block
// int32 sums, as the AVX2 kernels do (quants_x86_steps.h): the scalar kernel's bits at every tile shape.
KAIL_INLINE __m512i q8_0_pair(const block_q8_0 * y) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(y[0].qs))),
                              _mm256_loadu_si256(reinterpret_cast<const __m256i *>(y[1].qs)), 1);
}


// Q2_0: a block's 16 bytes broadcast to the four 128-bit lanes, lane p shifted by 2p and masked
// (code p of every byte), a 4 x 4 dword transpose (VPERMD) and one byte shuffle put the 64 codes
// (0..3, unsigned) in element order: one vector, into VPDPBUSD against the two Q8_0 blocks'
// quants with the accumulation started at -(their sums per 4-byte lane) (the offset 1; once per
// token, shared by the tile's rows); each block's 8 lanes reduced to its exact int sum.
struct q2_0_kernel {
    template <int R, int T>
    struct tile {
        static void run(int64_t k, const uint8_t * w, size_t ws, const uint8_t * const * a, float * const * out) {
            const __m512i m3 = _mm512_set1_epi8(3), ones8 = _mm512_set1_epi8(1);
            const __m512i sh = _mm512_setr_epi32(0, 0, 0, 0, 0x20002, 0x20002, 0x20002, 0x20002, 0x40004, 0x40004, 0x40004, 0x40004,
                                                 0x60006, 0x60006, 0x60006, 0x60006);  // 16-bit shifts 2p in lane p
            const __m512i tr = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
            const __m512i il = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
            __m128 acc[R][T];
            zero_acc(acc);
            const size_t ahead = rows_ahead(ws, R);
            const auto codes = [&](const block_q2_0 * b) {
                const __m512i q = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b->qs)));
                return _mm512_shuffle_epi8(_mm512_permutexvar_epi32(tr, _mm512_and_si512(_mm512_srlv_epi16(q, sh), m3)), il);
            };
            const int64_t nb = k / QK2_0;
            int64_t ib = 0;
            for (; ib + 4 <= nb; ib += 4) {
                __m512i u[R][4];
                __m256 d[R];
#pragma GCC unroll 8
                for (int r = 0; r < R; r++) {
                    const block_q2_0 * b = reinterpret_cast<const block_q2_0 *>(w + r * ws) + ib;
                    prefetch_bytes(reinterpret_cast<const uint8_t *>(b) + ahead, 4 * sizeof(block_q2_0));
#pragma GCC unroll 4
                    for (int j = 0; j < 4; j++) u[r][j] = codes(b + j);
                    d[r] = q2_0_scales4(b);
                }
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) {
                    const block_q8_0 * y = reinterpret_cast<const block_q8_0 *>(a[t]) + 2 * ib;
                    __m512i yq[4], c[4];
#pragma GCC unroll 4
                    for (int j = 0; j < 4; j++) {
                        yq[j] = q8_0_pair(y + 2 * j);
                        c[j] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones8, yq[j]));
                    }
                    const __m256 dy = q8_0_scales8(y);
#pragma GCC unroll 8
                    for (int r = 0; r < R; r++) {
                        __m256i sv[8];
#pragma GCC unroll 4
                        for (int j = 0; j < 4; j++) {
                            const __m512i sj = _mm512_dpbusd_epi32(c[j], u[r][j], yq[j]);
                            sv[2 * j] = _mm512_castsi512_si256(sj);
                            sv[2 * j + 1] = _mm512_extracti64x4_epi64(sj, 1);
                        }
                        acc[r][t] = q2_0_group_steps(acc[r][t], hsum8x8i(sv), dy, d[r]);
                    }
                }
            }
            for (; ib < nb; ib++) {
                __m512i u[R];
                float d[R];
#pragma GCC unroll 8
                for (int r = 0; r < R; r++) {
                    const block_q2_0 * b = reinterpret_cast<const block_q2_0 *>(w + r * ws) + ib;
                    prefetch_bytes(reinterpret_cast<const uint8_t *>(b) + ahead, sizeof(block_q2_0));
                    const __m512i q = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b->qs)));
                    u[r] = _mm512_shuffle_epi8(_mm512_permutexvar_epi32(tr, _mm512_and_si512(_mm512_srlv_epi16(q, sh), m3)), il);
                    d[r] = _cvtsh_ss(b->d);
                }
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) {
                    const block_q8_0 * y = reinterpret_cast<const block_q8_0 *>(a[t]) + 2 * ib;
                    const __m512i yq = q8_0_pair(y);
                    const __m512i c = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones8, yq));
#pragma GCC unroll 8
                    for (int r = 0; r < R; r++) {
                        const __m512i s = _mm512_dpbusd_epi32(c, u[r], yq);
                        acc[r][t] = q8_0_block_steps<2>(acc[r][t], hsum2x8i(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1)), y, d[r]);
                    }
                }
            }
            store_acc(acc, out);
        }
    };
};

// Q1_0: a block's 128 sign bits are two 64-bit masks over the four Q8_0 blocks' quants; VPDPBUSD
// of 2 against the quants under the set bits (zero-masked moves), started at -(all of them) per
// 4-byte lane (once per token): 2 * set - all, exact for any int8 activations; each Q8_0 block's
// 8 lanes reduced to its int sum.
struct q1_0_kernel {
    template <int R, int T>
    struct tile {
        static void run(int64_t k, const uint8_t * w, size_t ws, const uint8_t * const * a, float * const * out) {
            const __m512i ones8 = _mm512_set1_epi8(1), twos8 = _mm512_set1_epi8(2);
            __m128 acc[R][T];
            zero_acc(acc);
            const size_t ahead = rows_ahead(ws, R);
            const int64_t nb = k / QK1_0;
            int64_t ib = 0;
            for (; ib + 2 <= nb; ib += 2) {
                __mmask64 m[R][4];
                __m256 d[R];
#pragma GCC unroll 8
                for (int r = 0; r < R; r++) {
                    const block_q1_0 * b = reinterpret_cast<const block_q1_0 *>(w + r * ws) + ib;
                    prefetch_bytes(reinterpret_cast<const uint8_t *>(b) + ahead, 2 * sizeof(block_q1_0));
#pragma GCC unroll 4
                    for (int j = 0; j < 4; j++) {
                        uint64_t bits;
                        std::memcpy(&bits, b[j / 2].qs + 8 * (j % 2), 8);
                        m[r][j] = _cvtu64_mask64(bits);
                    }
                    d[r] = q1_0_scales2(b);
                }
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) {
                    const block_q8_0 * y = reinterpret_cast<const block_q8_0 *>(a[t]) + 4 * ib;
                    __m512i yq[4], c[4];
#pragma GCC unroll 4
                    for (int j = 0; j < 4; j++) {
                        yq[j] = q8_0_pair(y + 2 * j);
                        c[j] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones8, yq[j]));
                    }
                    const __m256 dy = q8_0_scales8(y);
#pragma GCC unroll 8
                    for (int r = 0; r < R; r++) {
                        __m256i sv[8];
#pragma GCC unroll 4
                        for (int j = 0; j < 4; j++) {
                            const __m512i sj = _mm512_dpbusd_epi32(c[j], twos8, _mm512_maskz_mov_epi8(m[r][j], yq[j]));
                            sv[2 * j] = _mm512_castsi512_si256(sj);
                            sv[2 * j + 1] = _mm512_extracti64x4_epi64(sj, 1);
                        }
                        acc[r][t] = q1_0_group_steps(acc[r][t], hsum8x8i(sv), dy, d[r]);
                    }
                }
            }
            for (; ib < nb; ib++) {
                __mmask64 m0[R], m1[R];
                float d[R];
#pragma GCC unroll 8
                for (int r = 0; r < R; r++) {
                    const block_q1_0 * b = reinterpret_cast<const block_q1_0 *>(w + r * ws) + ib;
                    prefetch_bytes(reinterpret_cast<const uint8_t *>(b) + ahead, sizeof(block_q1_0));
                    uint64_t lo, hi;
                    std::memcpy(&lo, b->qs, 8);
                    std::memcpy(&hi, b->qs + 8, 8);
                    m0[r] = _cvtu64_mask64(lo);
                    m1[r] = _cvtu64_mask64(hi);
                    d[r] = _cvtsh_ss(b->d);
                }
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) {
                    const block_q8_0 * y = reinterpret_cast<const block_q8_0 *>(a[t]) + 4 * ib;
                    const __m512i y0 = q8_0_pair(y), y1 = q8_0_pair(y + 2);
                    const __m512i c0 = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones8, y0));
                    const __m512i c1 = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones8, y1));
#pragma GCC unroll 8
                    for (int r = 0; r < R; r++) {
                        const __m512i s0 = _mm512_dpbusd_epi32(c0, twos8, _mm512_maskz_mov_epi8(m0[r], y0));
                        const __m512i s1 = _mm512_dpbusd_epi32(c1, twos8, _mm512_maskz_mov_epi8(m1[r], y1));
                        const __m128i s = hsum4x8i(_mm512_castsi512_si256(s0), _mm512_extracti64x4_epi64(s0, 1), _mm512_castsi512_si256(s1),
                                                   _mm512_extracti64x4_epi64(s1, 1));
                        acc[r][t] = q8_0_block_steps<4>(acc[r][t], s, y, d[r]);
                    }
                }
            }
            store_acc(acc, out);
        }
    };
};

template <class D>
struct legacy {
    static constexpr size_t PREP = PREP_SPLIT_GROUP;

    template <int R, int T, bool TAIL>
    static KAIL_INLINE void group(const uint8_t * w, size_t ws, size_t ahead, int64_t g, int rem, const uint8_t * const * a, __m512 (&acc)[R][T]) {
        wsplit wv[R];
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            prefetch_bytes(w + r * ws + ahead + g * (D::GB * D::BB), D::GB * D::BB);
            wv[r] = D::template load<TAIL>(w + r * ws + g * (D::GB * D::BB), rem);
        }
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            const uint8_t * ap = a[t] + g * PREP;
#pragma GCC unroll 8
            for (int r = 0; r < R; r++) acc[r][t] = D::dot(wv[r], ap, acc[r][t]);
        }
    }

    template <int R, int T>
    struct tile {
        static void run(int64_t k, const uint8_t * w, size_t ws, const uint8_t * const * a, float * const * out) {
            const int64_t nb = k / 32;
            const int64_t ng = nb / D::GB;
            const int rem = static_cast<int>(nb % D::GB);
            __m512 acc[R][T];
#pragma GCC unroll 8
            for (int r = 0; r < R; r++)
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) acc[r][t] = _mm512_setzero_ps();
            const size_t ahead = rows_ahead(ws, R);
            for (int64_t g = 0; g < ng; g++) group<R, T, false>(w, ws, ahead, g, 0, a, acc);
            if (rem) group<R, T, true>(w, ws, ahead, ng, rem, a, acc);
            store_tile<R, T>(acc, out);
        }
    };
};

// ---------------------------------------------------------------- K-quants (Q8_K activations)

KAIL_INLINE void k4_unpack_scales_scalar(const uint8_t * packed, __m128i & sc8, __m128i & mn8) {
    const uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
    uint32_t utmp[4];
    std::memcpy(utmp, packed, 12);
    utmp[3] = ((utmp[2] >> 4) & kmask2) | (((utmp[1] >> 6) & kmask3) << 4);
    const uint32_t uaux = utmp[1] & kmask1;
    utmp[1] = (utmp[2] & kmask2) | (((utmp[0] >> 6) & kmask3) << 4);
    utmp[2] = uaux;
    utmp[0] &= kmask1;
    const __m128i v = _mm_setr_epi32(static_cast<int>(utmp[0]), static_cast<int>(utmp[1]), static_cast<int>(utmp[2]), static_cast<int>(utmp[3]));
    sc8 = _mm_cvtepu8_epi16(v);
    mn8 = _mm_cvtepu8_epi16(_mm_srli_si128(v, 8));
}

// The six-bit scales and mins of 4 Q4_K/Q5_K blocks (16 bytes from each block's scales on: the 12
// scale bytes and 4 quant bytes, which are ignored; one block per 128-bit lane) as bytes
// sc0..sc7 mn0..mn7 per lane (get_scale_min_k4 for j = 0..7), unpacked with byte shuffles.
KAIL_INLINE __m512i k4_scales_x4(__m512i q) {
    const __m512i m3f = _mm512_set1_epi8(0x3F), m0f = _mm512_set1_epi8(0x0F), m03 = _mm512_set1_epi8(0x03);
    const __m512i lo8 = _mm512_and_si512(q, m3f);  // bytes 0-3: sc0-3, 4-7: mn0-3
    const __m512i y = _mm512_shuffle_epi8(q, _mm512_set4_epi32(0x0B0A0908, 0x0B0A0908, 0x0B0A0908, 0x0B0A0908));
    // bytes 0-3: q[8..11] & 15 (sc4-7 low bits), 4-7: q[8..11] >> 4 (mn4-7 low bits)
    const __m512i z = _mm512_mask_blend_epi16(0x0C0C0C0C, _mm512_and_si512(y, m0f), _mm512_and_si512(_mm512_srli_epi16(y, 4), m0f));
    const __m512i top = _mm512_slli_epi16(_mm512_and_si512(_mm512_srli_epi16(q, 6), m03), 4);  // (q[0..7] >> 6) << 4
    return _mm512_unpacklo_epi32(lo8, _mm512_or_si512(z, top));  // sc0-3 sc4-7 mn0-3 mn4-7
}

// The 8 scales and mins of one block as 16-bit words: k4_scales_x4 on one lane.
KAIL_INLINE void k4_unpack_scales_vec(const uint8_t * packed, __m128i & sc8, __m128i & mn8) {
    const __m128i v = _mm512_castsi512_si128(k4_scales_x4(_mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i *>(packed)))));
    sc8 = _mm_cvtepu8_epi16(v);
    mn8 = _mm_cvtepu8_epi16(_mm_srli_si128(v, 8));
}

// Vector unpacking is faster when a block is used once (matrix x vector); the scalar one leaves
// the vector pipes to the dot products when the block serves a whole token tile.
template <bool VEC>
KAIL_INLINE void k4_unpack_scales(const uint8_t * packed, __m128i & sc8, __m128i & mn8) {
    if constexpr (VEC) k4_unpack_scales_vec(packed, sc8, mn8);
    else k4_unpack_scales_scalar(packed, sc8, mn8);
}

// [w[A0] x16, w[A1] x16] from 8 int16 scales held in every 128-bit lane of `words4`: byte
// shuffles inside the lanes (one cycle each; cross-lane word permutes measured ~10% slower decode).
template <int A0, int A1>
KAIL_INLINE __m512i pair_bcast16_lanes(__m512i words4) {
    const char a0 = char(2 * A0), a1 = char(2 * A0 + 1), b0 = char(2 * A1), b1 = char(2 * A1 + 1);
    const __m512i ctl = _mm512_set_epi8(b1, b0, b1, b0, b1, b0, b1, b0, b1, b0, b1, b0, b1, b0, b1, b0,
                                        b1, b0, b1, b0, b1, b0, b1, b0, b1, b0, b1, b0, b1, b0, b1, b0,
                                        a1, a0, a1, a0, a1, a0, a1, a0, a1, a0, a1, a0, a1, a0, a1, a0,
                                        a1, a0, a1, a0, a1, a0, a1, a0, a1, a0, a1, a0, a1, a0, a1, a0);
    return _mm512_shuffle_epi8(words4, ctl);
}

// [m0 m0 m1 m1 ... m7 m7] from 8 int16 mins in the low 128 bits.
KAIL_INLINE __m256i mins_pairs(__m128i mn8) {
    const __m256i b = _mm256_broadcastsi128_si256(mn8);
    const __m256i ctl = _mm256_setr_epi8(0, 1, 0, 1, 2, 3, 2, 3, 4, 5, 4, 5, 6, 7, 6, 7,
                                         8, 9, 8, 9, 10, 11, 10, 11, 12, 13, 12, 13, 14, 15, 14, 15);
    return _mm256_shuffle_epi8(b, ctl);
}

template <int G>
KAIL_INLINE __m512i quad_bcast8(__m512i words) {
    // [w[G] x8, w[G+1] x8, w[G+2] x8, w[G+3] x8]
    const __m512i idx = _mm512_set_epi16(G + 3, G + 3, G + 3, G + 3, G + 3, G + 3, G + 3, G + 3, G + 2, G + 2, G + 2, G + 2, G + 2, G + 2, G + 2, G + 2,
                                         G + 1, G + 1, G + 1, G + 1, G + 1, G + 1, G + 1, G + 1, G, G, G, G, G, G, G, G);
    return _mm512_permutexvar_epi16(idx, words);
}

struct kv {
    __m512i u[4];   // unsigned quants, 64 per vector, natural order (IQ4_XS: the levels' magnitudes)
    __m512i sc[4];  // int16 sub-block scale per maddubs lane
    __m256i mn;     // Q4_K/Q5_K/Q2_K: int16 mins per bsum; Q6_K/Q3_K: -offset * scale per bsum
    __mmask64 neg[4];  // IQ4_XS (D::SIGNED): the weights whose level is negative
    float d, dmin;
};

// Scales, mins and the two super-block factors of a Q4_K/Q5_K block into w.
template <bool VEC>
KAIL_INLINE void k4_scales(const uint8_t * scales, uint16_t d, uint16_t dmin, kv & w) {
    __m128i sc8, mn8;
    k4_unpack_scales<VEC>(scales, sc8, mn8);
    const __m512i s = _mm512_broadcast_i32x4(sc8);
    w.sc[0] = pair_bcast16_lanes<0, 1>(s);
    w.sc[1] = pair_bcast16_lanes<2, 3>(s);
    w.sc[2] = pair_bcast16_lanes<4, 5>(s);
    w.sc[3] = pair_bcast16_lanes<6, 7>(s);
    w.mn = mins_pairs(mn8);
    w.d = _cvtsh_ss(d);
    w.dmin = _cvtsh_ss(dmin);
}

struct q5_K_dec {
    static constexpr int BB = 176;
    static constexpr bool MIN = true;
    template <bool VEC = false>
    static KAIL_INLINE void load(const uint8_t * p, kv & w) {
        const block_q5_K * b = reinterpret_cast<const block_q5_K *>(p);
        const __m512i m4 = _mm512_set1_epi8(0x0F);
        const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(b->qh)));
        const __m512i k16 = _mm512_set1_epi8(16);
        const __m512i sh = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
        // Chunk c (32 bytes) holds sub-block 2c in its low nibbles and 2c+1 in its high ones:
        // broadcast it to both halves and shift the upper half by 4; plus 16 where qh bit 2c / 2c+1 is set.
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            const __m512i z = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(b->qs + 32 * c)));
            const __m512i u = _mm512_and_si512(_mm512_srlv_epi16(z, sh), m4);
            const __m512i bits = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi8(char(1 << (2 * c)))), _mm256_set1_epi8(char(1 << (2 * c + 1))), 1);
            w.u[c] = _mm512_mask_add_epi8(u, _mm512_test_epi8_mask(qh, bits), u, k16);
        }
        k4_scales<VEC>(b->scales, b->d, b->dmin, w);
    }
};

struct q6_K_dec {
    static constexpr int BB = 210;
    static constexpr bool MIN = false;
    template <bool VEC = false>
    static KAIL_INLINE void load(const uint8_t * p, kv & w) {
        const block_q6_K * b = reinterpret_cast<const block_q6_K *>(p);
        const __m512i m4 = _mm512_set1_epi8(0x0F);
        const __m512i m30 = _mm512_set1_epi8(0x30);
        const __m512i sh_lo = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
        const __m512i sh_hi = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m512i ql = _mm512_loadu_si512(b->ql + 64 * h);
            const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(b->qh + 32 * h)));
            const __m512i hl = _mm512_and_si512(_mm512_sllv_epi16(qh, sh_lo), m30);
            const __m512i hh = _mm512_and_si512(_mm512_srlv_epi16(qh, sh_hi), m30);
            w.u[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, m4), hl);
            w.u[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4), hh);
        }
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i *>(b->scales)));
        const __m512i s = _mm512_castsi256_si512(sc16);
        w.sc[0] = quad_bcast8<0>(s);
        w.sc[1] = quad_bcast8<4>(s);
        w.sc[2] = quad_bcast8<8>(s);
        w.sc[3] = quad_bcast8<12>(s);
        w.mn = _mm256_slli_epi16(sc16, 5);  // 32 * scale; subtracted times bsums
        w.d = _cvtsh_ss(b->d);
        w.dmin = 0;
    }
};

// IQ4_XS: the 4-bit indices pick levels from kIq4Levels; VPMADDUBSW takes the levels' magnitudes
// (<= 127, so a pair of products stays below 2^15) and the activations negated where the level is
// negative (D::SIGNED); sub-block scales (ls - 32) go through VPDPWSSD as for Q4_K. No offset.
struct iq4_xs_dec {
    static constexpr int BB = 136;
    static constexpr bool MIN = false;
    static constexpr bool SIGNED = true;
    template <bool VEC = false>
    static KAIL_INLINE void load(const uint8_t * p, kv & w) {
        const block_iq4_xs * b = reinterpret_cast<const block_iq4_xs *>(p);
        const __m512i mag = _mm512_abs_epi8(_mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i *>(kIq4Levels))));
        const __m512i m4 = _mm512_set1_epi8(0x0F);
        // Per 128-bit lane: 0, 4, 0, 4 bits of shift (lanes: block 2c low/high nibbles, block 2c+1 low/high).
        const __m512i sh = _mm512_setr_epi64(0, 0, 0x0004000400040004ll, 0x0004000400040004ll, 0, 0, 0x0004000400040004ll, 0x0004000400040004ll);
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            // Bytes [A | B] of blocks 2c and 2c+1 as lanes [A, A, B, B]; element j of a block is
            // the low nibble of byte j, element j + 16 its high nibble.
            const __m512i z = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(b->qs + 32 * c)));
            const __m512i idx = _mm512_and_si512(_mm512_srlv_epi16(_mm512_shuffle_i64x2(z, z, 0x50), sh), m4);
            w.u[c] = _mm512_shuffle_epi8(mag, idx);
            w.neg[c] = _mm512_testn_epi8_mask(idx, _mm512_set1_epi8(8));  // indices 0-7: negative levels
        }
        // Block scales ls_j - 32 as 8 words: the low 4 bits are nibble j of scales_l (bytes' low
        // nibble first), the high 2 bits are bits 2j..2j+1 of scales_h.
        int32_t l4;
        std::memcpy(&l4, b->scales_l, 4);
        const __m128i l = _mm_cvtsi32_si128(l4);
        const __m128i m4x = _mm_set1_epi8(0x0F);
        const __m128i lo = _mm_cvtepu8_epi16(_mm_unpacklo_epi8(_mm_and_si128(l, m4x), _mm_and_si128(_mm_srli_epi16(l, 4), m4x)));
        const __m128i hi = _mm_slli_epi16(_mm_and_si128(_mm_srlv_epi16(_mm_set1_epi16(static_cast<short>(b->scales_h)), _mm_setr_epi16(0, 2, 4, 6, 8, 10, 12, 14)), _mm_set1_epi16(3)), 4);
        const __m128i sc8 = _mm_sub_epi16(_mm_or_si128(lo, hi), _mm_set1_epi16(32));
        const __m512i s = _mm512_broadcast_i32x4(sc8);
        w.sc[0] = pair_bcast16_lanes<0, 1>(s);
        w.sc[1] = pair_bcast16_lanes<2, 3>(s);
        w.sc[2] = pair_bcast16_lanes<4, 5>(s);
        w.sc[3] = pair_bcast16_lanes<6, 7>(s);
        w.mn = _mm256_setzero_si256();
        w.d = _cvtsh_ss(b->d);
        w.dmin = 0;
    }
};

struct q3_K_dec {
    static constexpr int BB = 110;
    static constexpr bool MIN = false;
    template <bool VEC = false>
    static KAIL_INLINE void load(const uint8_t * p, kv & w) {
        const block_q3_K * b = reinterpret_cast<const block_q3_K *>(p);
        const __m512i m3 = _mm512_set1_epi8(3);
        const __m512i k4 = _mm512_set1_epi8(4);
        const __m512i hm = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(b->hmask)));
        const __m512i sh01 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
        const __m512i sh23 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1);
#pragma GCC unroll 2
        for (int c = 0; c < 2; c++) {
            const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(b->qs + 32 * c)));
#pragma GCC unroll 2
            for (int j = 0; j < 2; j++) {
                const int k = 2 * c + j;  // elements 64k.. : shifts 4j, 4j+2; hmask bits 2k, 2k+1
                __m512i u = _mm512_and_si512(_mm512_srlv_epi16(q, j == 0 ? sh01 : sh23), m3);
                const __m512i bits = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi8(char(1 << (2 * k)))), _mm256_set1_epi8(char(1 << (2 * k + 1))), 1);
                u = _mm512_mask_add_epi8(u, _mm512_test_epi8_mask(hm, bits), u, k4);
                w.u[k] = u;
            }
        }
        const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
        uint32_t aux[4];
        std::memcpy(aux, b->scales, 12);
        const uint32_t tmp = aux[2];
        aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
        aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
        aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
        aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
        const __m128i s8 = _mm_sub_epi8(_mm_setr_epi32(static_cast<int>(aux[0]), static_cast<int>(aux[1]), static_cast<int>(aux[2]), static_cast<int>(aux[3])), _mm_set1_epi8(32));
        const __m256i sc16 = _mm256_cvtepi8_epi16(s8);
        const __m512i s = _mm512_castsi256_si512(sc16);
        w.sc[0] = quad_bcast8<0>(s);
        w.sc[1] = quad_bcast8<4>(s);
        w.sc[2] = quad_bcast8<8>(s);
        w.sc[3] = quad_bcast8<12>(s);
        w.mn = _mm256_slli_epi16(sc16, 2);  // 4 * scale
        w.d = _cvtsh_ss(b->d);
        w.dmin = 0;
    }
};

struct q2_K_dec {
    static constexpr int BB = 84;
    static constexpr bool MIN = true;
    template <bool VEC = false>
    static KAIL_INLINE void load(const uint8_t * p, kv & w) {
        const block_q2_K * b = reinterpret_cast<const block_q2_K *>(p);
        const __m512i m3 = _mm512_set1_epi8(3);
        const __m512i sh01 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
        const __m512i sh23 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1);
#pragma GCC unroll 2
        for (int c = 0; c < 2; c++) {
            const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(b->qs + 32 * c)));
            w.u[2 * c] = _mm512_and_si512(_mm512_srlv_epi16(q, sh01), m3);
            w.u[2 * c + 1] = _mm512_and_si512(_mm512_srlv_epi16(q, sh23), m3);
        }
        const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i *>(b->scales));
        const __m256i sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(raw, _mm_set1_epi8(0x0F)));
        const __m512i s = _mm512_castsi256_si512(sc16);
        w.sc[0] = quad_bcast8<0>(s);
        w.sc[1] = quad_bcast8<4>(s);
        w.sc[2] = quad_bcast8<8>(s);
        w.sc[3] = quad_bcast8<12>(s);
        w.mn = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), _mm_set1_epi8(0x0F)));
        w.d = _cvtsh_ss(b->d);
        w.dmin = _cvtsh_ss(b->dmin);
    }
};

// Tiles prefetch the weights this far ahead (bytes along the row, and on into the next rows,
// which follow it in memory). Measured with bench-matmul on 14336 x 4096 Q4_K, 1 thread: 2, 4 and
// 8 tokens 70/110/170 -> 100/160/185 GFLOP/s; 1024 and 4096 bytes did less. For matrix x vector
// that prefetch along the row gained nothing (AMD VM); prefetching the next rows (rows_ahead) did,
// on the Intel Xeon VM (session 12, 4096 x 4096 from DRAM, 1 thread): Q6_K 5.8-6.2 -> 8.0-8.5
// GB/s, Q5_K 5.0-5.8 -> 6.9-8.2.
constexpr size_t kTilePrefetch = 2048;

// Each output keeps two chains, as matrix x vector wants them (they run side by side): the scale
// terms in a 512-bit accumulator and, for the types with mins, the min terms in a 256-bit one,
// subtracted at the end. Tiles and decode perform the same operations, so a token's result is
// the same bits alone or in a batch.
template <class D>
struct kquant {
    template <int R, int T>
    struct tile {
        static void run(int64_t k, const uint8_t * w, size_t ws, const uint8_t * const * a, float * const * out) {
            const int64_t nsb = k / QK_K;
            __m512 acc[R][T];
            __m256 accm[R][T];
#pragma GCC unroll 8
            for (int r = 0; r < R; r++)
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) {
                    acc[r][t] = _mm512_setzero_ps();
                    accm[r][t] = _mm256_setzero_ps();
                }
            for (int64_t i = 0; i < nsb; i++) {
                kv wv[R];
#pragma GCC unroll 8
                for (int r = 0; r < R; r++) {
                    // Prefetching never faults, so running past the matrix end is harmless.
                    const char * pf = reinterpret_cast<const char *>(w + r * ws + i * D::BB) + kTilePrefetch;
                    for (int l = 0; l < D::BB; l += 64) _mm_prefetch(pf + l, _MM_HINT_T0);
                    D::template load<false>(w + r * ws + i * D::BB, wv[r]);
                }
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) {
                    const block_q8_K * y = reinterpret_cast<const block_q8_K *>(a[t]) + i;
                    const __m512i y0 = _mm512_loadu_si512(y->qs), y1 = _mm512_loadu_si512(y->qs + 64);
                    const __m512i y2 = _mm512_loadu_si512(y->qs + 128), y3 = _mm512_loadu_si512(y->qs + 192);
                    const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(y->bsums));
#pragma GCC unroll 8
                    for (int r = 0; r < R; r++) step(wv[r], y0, y1, y2, y3, bs, y->d, acc[r][t], accm[r][t]);
                }
            }
#pragma GCC unroll 8
            for (int t = 0; t < T; t++)
#pragma GCC unroll 8
                for (int r = 0; r < R; r++) out[t][r] = finish(acc[r][t], accm[r][t]);
        }
    };

    template <class X, class = void>
    struct signed_levels : std::false_type {};
    template <class X>
    struct signed_levels<X, std::void_t<decltype(X::SIGNED)>> : std::bool_constant<X::SIGNED> {};

    static KAIL_INLINE void step(const kv & wv, __m512i y0, __m512i y1, __m512i y2, __m512i y3, __m256i bs, float yd, __m512 & acc, __m256 & accm) {
        if constexpr (signed_levels<D>::value) {
            // |level| * (y negated where the level is negative) = level * y
            const __m512i z = _mm512_setzero_si512();
            y0 = _mm512_mask_sub_epi8(y0, wv.neg[0], z, y0);
            y1 = _mm512_mask_sub_epi8(y1, wv.neg[1], z, y1);
            y2 = _mm512_mask_sub_epi8(y2, wv.neg[2], z, y2);
            y3 = _mm512_mask_sub_epi8(y3, wv.neg[3], z, y3);
        }
        __m512i is = _mm512_dpwssd_epi32(_mm512_setzero_si512(), _mm512_maddubs_epi16(wv.u[0], y0), wv.sc[0]);
        is = _mm512_dpwssd_epi32(is, _mm512_maddubs_epi16(wv.u[1], y1), wv.sc[1]);
        is = _mm512_dpwssd_epi32(is, _mm512_maddubs_epi16(wv.u[2], y2), wv.sc[2]);
        is = _mm512_dpwssd_epi32(is, _mm512_maddubs_epi16(wv.u[3], y3), wv.sc[3]);
        if constexpr (D::MIN) {
            const __m256i mt = _mm256_madd_epi16(wv.mn, bs);
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_set1_ps(wv.d * yd), acc);
            accm = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mt), _mm256_set1_ps(wv.dmin * yd), accm);
        } else {
            // quants are u = q + offset: subtract offset * sum(scale * bsum) (signed levels have none)
            if constexpr (!signed_levels<D>::value) is = _mm512_sub_epi32(is, _mm512_zextsi256_si512(_mm256_madd_epi16(wv.mn, bs)));
            acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_set1_ps(wv.d * yd), acc);
        }
    }

    static KAIL_INLINE float finish(__m512 acc, __m256 accm) {
        return D::MIN ? reduce16(acc) - reduce16(_mm512_zextps256_ps512(accm)) : reduce16(acc);
    }

    // Matrix x vector: one row at a time (one sequential stream), the tile's operations.
    static void decode(int64_t k, const uint8_t * w, size_t ws, int nr, const uint8_t * const * a, int nt, float * const * out) {
        const int64_t nsb = k / QK_K;
        const size_t ahead = rows_ahead(ws, 1);
        for (int r = 0; r < nr; r++) {
            __m512 acc = _mm512_setzero_ps();
            __m256 accm = _mm256_setzero_ps();
            for (int64_t i = 0; i < nsb; i++) {
                prefetch_bytes(w + r * ws + i * D::BB + ahead, D::BB);
                kv wv;
                D::template load<true>(w + r * ws + i * D::BB, wv);
                const block_q8_K * y = reinterpret_cast<const block_q8_K *>(a[0]) + i;
                step(wv, _mm512_loadu_si512(y->qs), _mm512_loadu_si512(y->qs + 64), _mm512_loadu_si512(y->qs + 128),
                     _mm512_loadu_si512(y->qs + 192), _mm256_loadu_si256(reinterpret_cast<const __m256i *>(y->bsums)), y->d, acc, accm);
            }
            out[0][r] = finish(acc, accm);
        }
    }
};

// Q4_K four rows at a time (VNNI), for matrix x vector and token tiles alike. One 512-bit vector
// holds 16 consecutive weights of each of the 4 rows (a 128-bit lane per row), so an activation's
// 16 bytes broadcast to every lane make each VPDPBUSD 64 multiply-adds of 4 outputs, and the
// activations keep their layout. Per 32-weight sub-block a dword lane (row r, group g) sums 8
// products, |sum| <= 8 * 15 * 128 < 2^15, so it fits an int16 exactly: VPACKSSDW packs the sums of
// the two sub-blocks that share a byte range (low and high nibbles) into one vector, and a single
// VPDPWSSD against (scale, scale) pairs applies both sub-blocks' scales, exactly. That is 5 VNNI
// operations per token and 256 weights of 4 rows, not 6: they all issue on one port on Intel
// server cores, where this kernel is bound by them once a tile has a few tokens. The super-block's
// integer sums become floats once per lane; each output is its row's 4 lanes added in a fixed
// order at the end: the same operations for a row whatever the tile's rows and tokens, so a
// token's result is the same bits alone or in a batch.
struct q4_K_rows4 {
    // 16 bytes at `off` of each of the 4 rows, one row per 128-bit lane.
    static KAIL_INLINE __m512i load4x16(const uint8_t * const * row, size_t off) {
        __m512i v = _mm512_castsi128_si512(_mm_loadu_si128(reinterpret_cast<const __m128i *>(row[0] + off)));
        v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i *>(row[1] + off)), 1);
        v = _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i *>(row[2] + off)), 2);
        return _mm512_inserti32x4(v, _mm_loadu_si128(reinterpret_cast<const __m128i *>(row[3] + off)), 3);
    }

    static KAIL_INLINE __m512i bcast16(const void * p) { return _mm512_broadcast_i32x4(_mm_loadu_si128(static_cast<const __m128i *>(p))); }

    static KAIL_INLINE int load32(const uint8_t * p) {
        int v;
        std::memcpy(&v, p, 4);
        return v;
    }

    template <int T>
    static void run(int64_t k, const uint8_t * w, size_t ws, int nr, const uint8_t * const * a, float * const * out) {
        const int64_t nsb = k / QK_K;
        const uint8_t * row[4];
        for (int r = 0; r < 4; r++) row[r] = w + static_cast<size_t>(r < nr ? r : nr - 1) * ws;
        const __m512i m4 = _mm512_set1_epi8(0x0F);
        // Whole groups of four rows ahead in memory.
        const size_t ahead = rows_ahead(ws, 4);
        // Sub-block pair c's scale vector: in row r's lane, words 0-3 (the packed sums of sub-block
        // 2c) take word 16r + 2c of the widened scales, words 4-7 (sub-block 2c + 1) word 16r + 2c + 1
        // (rows 0-1 in the first vector, 2-3 in the second).
        const __m512i sc_idx0 = _mm512_set_epi16(49, 49, 49, 49, 48, 48, 48, 48, 33, 33, 33, 33, 32, 32, 32, 32,
                                                 17, 17, 17, 17, 16, 16, 16, 16, 1, 1, 1, 1, 0, 0, 0, 0);
        // Mins vector q: lane (r, g) takes min 4q + g of row r twice (it meets two 16-value bsums).
        const __m512i mn_idx0 = _mm512_set_epi16(59, 59, 58, 58, 57, 57, 56, 56, 43, 43, 42, 42, 41, 41, 40, 40,
                                                 27, 27, 26, 26, 25, 25, 24, 24, 11, 11, 10, 10, 9, 9, 8, 8);
        const __m512i d_idx = _mm512_set_epi32(6, 6, 6, 6, 4, 4, 4, 4, 2, 2, 2, 2, 0, 0, 0, 0);
        const __m512i dm_idx = _mm512_set_epi32(7, 7, 7, 7, 5, 5, 5, 5, 3, 3, 3, 3, 1, 1, 1, 1);
        __m512 fa[T];
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) fa[t] = _mm512_setzero_ps();
        for (int64_t i = 0; i < nsb; i++) {
            const size_t off = static_cast<size_t>(i) * 144;
            // The same block of rows further on (the rows that follow in memory, which the next
            // calls read): prefetching ahead along each row would run into the group's own rows.
            for (int r = 0; r < 4; r++)
                prefetch_bytes(row[r] + ahead + off, 144);
            // d and dmin of the 4 rows: lanes (r, g) of D and DM.
            const __m256 ddf = _mm256_cvtph_ps(_mm_setr_epi32(load32(row[0] + off), load32(row[1] + off), load32(row[2] + off), load32(row[3] + off)));
            const __m512 dd = _mm512_castps256_ps512(ddf);
            const __m512 D = _mm512_permutexvar_ps(d_idx, dd), DM = _mm512_permutexvar_ps(dm_idx, dd);
            // Scales and mins as words 16r + j (scales) and 16r + 8 + j (mins).
            const __m512i v = k4_scales_x4(load4x16(row, off + 4));
            const __m512i w0 = _mm512_cvtepu8_epi16(_mm512_castsi512_si256(v)), w1 = _mm512_cvtepu8_epi16(_mm512_extracti64x4_epi64(v, 1));
            __m512i acc[T];
#pragma GCC unroll 8
            for (int t = 0; t < T; t++) acc[t] = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) {
                const size_t qo = off + 16 + 32 * static_cast<size_t>(c);
                const __m512i x0 = load4x16(row, qo), x1 = load4x16(row, qo + 16);  // weights 0-15 and 16-31
                // Low nibbles: sub-block 2c; high nibbles: sub-block 2c + 1.
                const __m512i l0 = _mm512_and_si512(x0, m4), l1 = _mm512_and_si512(x1, m4);
                const __m512i h0 = _mm512_and_si512(_mm512_srli_epi16(x0, 4), m4), h1 = _mm512_and_si512(_mm512_srli_epi16(x1, 4), m4);
                const __m512i sc = _mm512_permutex2var_epi16(w0, _mm512_add_epi16(sc_idx0, _mm512_set1_epi16(static_cast<short>(2 * c))), w1);
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) {
                    const int8_t * yq = reinterpret_cast<const block_q8_K *>(a[t])[i].qs + 64 * c;
                    const __m512i sl = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), l0, bcast16(yq)), l1, bcast16(yq + 16));
                    const __m512i sh = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), h0, bcast16(yq + 32)), h1, bcast16(yq + 48));
                    acc[t] = _mm512_dpwssd_epi32(acc[t], _mm512_packs_epi32(sl, sh), sc);
                }
            }
            const __m512i mq0 = _mm512_permutex2var_epi16(w0, mn_idx0, w1);
            const __m512i mq1 = _mm512_permutex2var_epi16(w0, _mm512_add_epi16(mn_idx0, _mm512_set1_epi16(4)), w1);
#pragma GCC unroll 8
            for (int t = 0; t < T; t++) {
                const block_q8_K * y = reinterpret_cast<const block_q8_K *>(a[t]) + i;
                const __m512i m = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(_mm512_setzero_si512(), mq0, bcast16(y->bsums)), mq1, bcast16(y->bsums + 8));
                const __m512 yd = _mm512_set1_ps(y->d);
                fa[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[t]), _mm512_mul_ps(D, yd), fa[t]);
                fa[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(m), _mm512_mul_ps(DM, yd), fa[t]);
            }
        }
        // Each row's four lanes: (g0 + g1) + (g2 + g3).
#pragma GCC unroll 8
        for (int t = 0; t < T; t++) {
            const __m512 p = _mm512_add_ps(fa[t], _mm512_permute_ps(fa[t], 0xB1));
            const __m512 q = _mm512_add_ps(p, _mm512_permute_ps(p, 0x4E));
            alignas(64) float v[16];
            _mm512_store_ps(v, q);
            for (int r = 0; r < nr; r++) out[t][r] = v[4 * r];
        }
    }
};

template <int R, int T>
struct q4_K_rows4_tile {
    static void run(int64_t k, const uint8_t * w, size_t ws, const uint8_t * const * a, float * const * out) { q4_K_rows4::run<T>(k, w, ws, R, a, out); }
};

// ---------------------------------------------------------------- float types

// W: F32 / F16 / BF16 rows; activations are floats (F16/BF16 ones already rounded).
template <int WT>  // 0 = F32, 1 = F16, 2 = BF16
KAIL_INLINE __m512 load_w16(const uint8_t * p, int64_t i) {
    if constexpr (WT == 0) return _mm512_loadu_ps(reinterpret_cast<const float *>(p) + i);
    else if constexpr (WT == 1) return h16_to_f32x16(reinterpret_cast<const uint16_t *>(p) + i);
    else return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(reinterpret_cast<const uint16_t *>(p) + i))), 16));
}

template <int WT>
KAIL_INLINE __m512 load_w16_masked(const uint8_t * p, int64_t i, __mmask16 m) {
    if constexpr (WT == 0) return _mm512_maskz_loadu_ps(m, reinterpret_cast<const float *>(p) + i);
    else if constexpr (WT == 1) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, reinterpret_cast<const uint16_t *>(p) + i));
    else return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, reinterpret_cast<const uint16_t *>(p) + i)), 16));
}

// One step of the float tiles: N weights of a row against N activation values of a token.
// WT 0-2: the weights widened to 16 floats (F32 / F16 / BF16) against float activations, one FMA.
// WT 3, BF16 on CPUs with AVX512_BF16: VDPBF16PS multiplies 32 weights by 32 activations kept in
// BF16 (the type's standard activation rows: no widening pass, no prepared layout) and adds the
// products into 16 float lanes, pair by pair: lane j adds the product of elements 2j+1, then of 2j,
// each product exact (8-bit significands) and each addition rounded to nearest even, denormal
// inputs and results as zero. llama.cpp's BF16 dot product uses the same instruction where the CPU
// has it: twice the multiply-adds per instruction of widening to floats.
template <int WT>
struct float_step {
    static constexpr int N = 16;
    using wvec = __m512;
    static KAIL_INLINE wvec load_w(const uint8_t * p, int64_t i) { return load_w16<WT>(p, i); }
    static KAIL_INLINE wvec load_w(const uint8_t * p, int64_t i, int64_t n) { return load_w16_masked<WT>(p, i, mask(n)); }
    static KAIL_INLINE __m512 load_x(const uint8_t * a, int64_t i) { return _mm512_loadu_ps(reinterpret_cast<const float *>(a) + i); }
    static KAIL_INLINE __m512 load_x(const uint8_t * a, int64_t i, int64_t n) { return _mm512_maskz_loadu_ps(mask(n), reinterpret_cast<const float *>(a) + i); }
    static KAIL_INLINE __m512 mac(__m512 acc, wvec w, __m512 x) { return _mm512_fmadd_ps(w, x, acc); }
    static KAIL_INLINE __mmask16 mask(int64_t n) { return static_cast<__mmask16>((1u << n) - 1); }
};
template <>
struct float_step<3> {
    static constexpr int N = 32;
    using wvec = __m512bh;
    static KAIL_INLINE __m512bh bh(__m512i v) { return reinterpret_cast<__m512bh &>(v); }
    // Missing elements of the tail load as +0, whose products add nothing.
    static KAIL_INLINE __mmask32 mask(int64_t n) { return static_cast<__mmask32>((uint64_t(1) << n) - 1); }
    static KAIL_INLINE wvec load_w(const uint8_t * p, int64_t i) { return bh(_mm512_loadu_si512(p + 2 * i)); }
    static KAIL_INLINE wvec load_w(const uint8_t * p, int64_t i, int64_t n) { return bh(_mm512_maskz_loadu_epi16(mask(n), p + 2 * i)); }
    static KAIL_INLINE wvec load_x(const uint8_t * a, int64_t i) { return load_w(a, i); }
    static KAIL_INLINE wvec load_x(const uint8_t * a, int64_t i, int64_t n) { return load_w(a, i, n); }
    static KAIL_INLINE __m512 mac(__m512 acc, wvec w, wvec x) { return _mm512_dpbf16_ps(acc, w, x); }
};

template <int WT>  // 0 = F32, 1 = F16, 2 = BF16 widened, 3 = BF16 pairs (VDPBF16PS)
struct floats {
    using S = float_step<WT>;
    template <int R, int T>
    struct impl {
        static void run(int64_t k, const uint8_t * w, size_t ws, const uint8_t * const * a, float * const * out) {
            __m512 acc[R][T];
#pragma GCC unroll 8
            for (int r = 0; r < R; r++)
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) acc[r][t] = _mm512_setzero_ps();
            int64_t i = 0;
            for (; i + S::N <= k; i += S::N) {
                typename S::wvec wv[R];
#pragma GCC unroll 8
                for (int r = 0; r < R; r++) wv[r] = S::load_w(w + r * ws, i);
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) {
                    const auto x = S::load_x(a[t], i);
#pragma GCC unroll 8
                    for (int r = 0; r < R; r++) acc[r][t] = S::mac(acc[r][t], wv[r], x);
                }
            }
            if (i < k) {
                typename S::wvec wv[R];
#pragma GCC unroll 8
                for (int r = 0; r < R; r++) wv[r] = S::load_w(w + r * ws, i, k - i);
#pragma GCC unroll 8
                for (int t = 0; t < T; t++) {
                    const auto x = S::load_x(a[t], i, k - i);
#pragma GCC unroll 8
                    for (int r = 0; r < R; r++) acc[r][t] = S::mac(acc[r][t], wv[r], x);
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

// B = float or uint16_t (fp16 bits): 16 elements (masked for the tail) widened to floats.
KAIL_INLINE __m512 load16(const float * p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }
KAIL_INLINE __m512 load16(const uint16_t * p, __mmask16 m) { return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p)); }

// Probability-weighted rows (attention_weighted_rows): a tile of NV vectors (16 columns each, the
// last one masked) by NG probability rows; each cached row is loaded and widened once per tile.
constexpr int64_t kWeightedPrefetchRows = 8;

template <int NV, int NG, typename X>
void weighted_tile(const X * x, size_t xs, int64_t n, const __mmask16 * m, const float * p, size_t ps, float * out, size_t os) {
    __m512 acc[NG][NV];
#pragma GCC unroll 4
    for (int g = 0; g < NG; g++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) acc[g][v] = _mm512_setzero_ps();
    for (int64_t j = 0; j < n; j++) {
        const X * r = x + j * xs;
        // Rows are far apart (the other heads' columns lie between): fetch a few rows ahead.
        const char * pf = reinterpret_cast<const char *>(r + kWeightedPrefetchRows * xs);
#pragma GCC unroll 4
        for (int l = 0; l < NV * 16 * int(sizeof(X)); l += 64) _mm_prefetch(pf + l, _MM_HINT_T0);
        __m512 xv[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) xv[v] = load16(r + 16 * v, m[v]);
#pragma GCC unroll 4
        for (int g = 0; g < NG; g++) {
            const __m512 w = _mm512_set1_ps(p[g * ps + j]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) acc[g][v] = _mm512_fmadd_ps(w, xv[v], acc[g][v]);
        }
    }
#pragma GCC unroll 4
    for (int g = 0; g < NG; g++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) _mm512_mask_storeu_ps(out + g * os + 16 * v, m[v], acc[g][v]);
}

template <typename X>
void weighted_rows(const X * x, size_t xs, int64_t n, int64_t width, const float * p, size_t ps, int64_t group, float * out, size_t os) {
    using fn = void (*)(const X *, size_t, int64_t, const __mmask16 *, const float *, size_t, float *, size_t);
    static const fn tiles[4][4] = {
        {weighted_tile<1, 1, X>, weighted_tile<1, 2, X>, weighted_tile<1, 3, X>, weighted_tile<1, 4, X>},
        {weighted_tile<2, 1, X>, weighted_tile<2, 2, X>, weighted_tile<2, 3, X>, weighted_tile<2, 4, X>},
        {weighted_tile<3, 1, X>, weighted_tile<3, 2, X>, weighted_tile<3, 3, X>, weighted_tile<3, 4, X>},
        {weighted_tile<4, 1, X>, weighted_tile<4, 2, X>, weighted_tile<4, 3, X>, weighted_tile<4, 4, X>},
    };
    for (int64_t c0 = 0; c0 < width; c0 += 64) {
        const int64_t nc = std::min<int64_t>(64, width - c0);
        const int nv = static_cast<int>((nc + 15) / 16);
        __mmask16 m[4];
        for (int v = 0; v < 4; v++) {
            const int64_t left = nc - 16 * v;
            m[v] = left >= 16 ? __mmask16(0xFFFF) : left > 0 ? static_cast<__mmask16>((1u << left) - 1) : __mmask16(0);
        }
        for (int64_t g0 = 0; g0 < group; g0 += 4) {
            const int ng = static_cast<int>(std::min<int64_t>(4, group - g0));
            tiles[nv - 1][ng - 1](x + c0, xs, n, m, p + g0 * ps, ps, out + g0 * os + c0, os);
        }
    }
}

// Attention's softmax (attention_scale_max, attention_exp_sum): 16 elements a step, exp_f32's
// operations lane by lane, lane j % 16's sum in double (two 8-lane halves).
float scale_max(float * x, int64_t n, float scale, const float * bias) {
    const __m512 sc = _mm512_set1_ps(scale);
    __m512 mx = _mm512_set1_ps(-INFINITY);
    for (int64_t j = 0; j < n; j += 16) {
        const __mmask16 m = n - j >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (n - j)) - 1);
        __m512 v = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + j), sc);
        __asm__("" : "+v"(v));  // two roundings: the compiler may not fuse the add into the multiply
        if (bias) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, bias + j));
        _mm512_mask_storeu_ps(x + j, m, v);
        mx = _mm512_mask_max_ps(mx, m, v, mx);
    }
    return _mm512_reduce_max_ps(mx);
}

struct exp_ops16 {
    using V = __m512;
    static KAIL_INLINE V set1(float v) { return _mm512_set1_ps(v); }
    static KAIL_INLINE V mul(V a, V b) { return _mm512_mul_ps(a, b); }
    static KAIL_INLINE V add(V a, V b) { return _mm512_add_ps(a, b); }
    static KAIL_INLINE V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
    static KAIL_INLINE V round(V a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
    static KAIL_INLINE V pow2(V n) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23)); }
};

// exp_f32 on 16 lanes: 0 below lo (NaN goes through the steps and stays NaN).
KAIL_INLINE __m512 exp16(__m512 x) {
    const __mmask16 zero = _mm512_cmp_ps_mask(x, _mm512_set1_ps(exp_f32_consts::lo), _CMP_LT_OQ);
    return _mm512_maskz_mov_ps(static_cast<__mmask16>(~zero), exp_f32_steps<exp_ops16>(x));
}

double exp_sum(float * x, int64_t n, float mx) {
    const __m512 m0 = _mm512_set1_ps(mx);
    __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
    for (int64_t j = 0; j < n; j += 16) {
        const __mmask16 m = n - j >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (n - j)) - 1);
        const __m512 e = _mm512_maskz_mov_ps(m, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + j), m0)));
        _mm512_mask_storeu_ps(x + j, m, e);
        lo = _mm512_add_pd(lo, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        hi = _mm512_add_pd(hi, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1))));
    }
    alignas(64) double lane[16];
    _mm512_store_pd(lane, lo);
    _mm512_store_pd(lane + 8, hi);
    return exp_lane_total(lane);
}

// Q8_0 rows (a quantized KV cache; width a multiple of 32, so each 16 values lie in one block):
// 16 values widened to floats and scaled by their block's d, then the F32 tile's multiply-adds.
template <int NV, int NG>
void weighted_tile_q8_0(const uint8_t * x, size_t xs, int64_t n, int64_t c0, const float * p, size_t ps, float * out, size_t os) {
    __m512 acc[NG][NV];
#pragma GCC unroll 4
    for (int g = 0; g < NG; g++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) acc[g][v] = _mm512_setzero_ps();
    for (int64_t j = 0; j < n; j++) {
        const uint8_t * r = x + j * xs;
        const uint8_t * pf = r + kWeightedPrefetchRows * xs + (c0 / 32) * 34;
        for (int l = 0; l < (NV / 2) * 34; l += 64) _mm_prefetch(reinterpret_cast<const char *>(pf + l), _MM_HINT_T0);
        __m512 xv[NV];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            const int64_t c = c0 + 16 * v;
            const uint8_t * blk = r + (c / 32) * 34;
            uint16_t dh;
            std::memcpy(&dh, blk, 2);
            const __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(blk + 2 + (c % 32)))));
            xv[v] = _mm512_mul_ps(q, _mm512_set1_ps(fp16_to_fp32_sw(dh)));
        }
        // The F32 tile's multiply-adds (weighted_tile).
#pragma GCC unroll 4
        for (int g = 0; g < NG; g++) {
            const __m512 w = _mm512_set1_ps(p[g * ps + j]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) acc[g][v] = _mm512_fmadd_ps(w, xv[v], acc[g][v]);
        }
    }
#pragma GCC unroll 4
    for (int g = 0; g < NG; g++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) _mm512_storeu_ps(out + g * os + c0 + 16 * v, acc[g][v]);
}

void weighted_rows_q8_0(const uint8_t * x, size_t xs, int64_t n, int64_t width, const float * p, size_t ps, int64_t group, float * out, size_t os) {
    using fn = void (*)(const uint8_t *, size_t, int64_t, int64_t, const float *, size_t, float *, size_t);
    static const fn tiles[2][4] = {
        {weighted_tile_q8_0<2, 1>, weighted_tile_q8_0<2, 2>, weighted_tile_q8_0<2, 3>, weighted_tile_q8_0<2, 4>},
        {weighted_tile_q8_0<4, 1>, weighted_tile_q8_0<4, 2>, weighted_tile_q8_0<4, 3>, weighted_tile_q8_0<4, 4>},
    };
    for (int64_t c0 = 0; c0 < width; c0 += 64) {
        const int wide = width - c0 >= 64 ? 1 : 0;  // 64 columns, else the last 32
        for (int64_t g0 = 0; g0 < group; g0 += 4) {
            const int ng = static_cast<int>(std::min<int64_t>(4, group - g0));
            tiles[wide][ng - 1](x, xs, n, c0, p + g0 * ps, ps, out + g0 * os, os);
        }
    }
}

// ---------------------------------------------------------------- activation quantizers / conversions

// ggml-cpu's x86 quantize_row_q8_0 / q8_1: d = amax/127, q = round-half-even(x * 127/amax).
template <bool Q8_1>
void from_float_q8(const float * x, void * vy, int64_t k) {
    const int64_t nb = k / 32;
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (int64_t i = 0; i < nb; i++, x += 32) {
        const __m512 v0 = _mm512_loadu_ps(x), v1 = _mm512_loadu_ps(x + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_andnot_ps(sign, v0), _mm512_andnot_ps(sign, v1)));
        const float d = amax / 127.f;
        const float id = amax != 0.0f ? 127.f / amax : 0.0f;
        const __m512 mul = _mm512_set1_ps(id);
        const __m512i i0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, mul));  // MXCSR default: nearest even
        const __m512i i1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, mul));
        int8_t * qs;
        if (Q8_1) {
            block_q8_1 * y = static_cast<block_q8_1 *>(vy) + i;
            y->d = fp32_to_fp16_sw(d);
            y->s = fp32_to_fp16_sw(d * static_cast<float>(_mm512_reduce_add_epi32(_mm512_add_epi32(i0, i1))));
            qs = y->qs;
        } else {
            block_q8_0 * y = static_cast<block_q8_0 *>(vy) + i;
            y->d = fp32_to_fp16_sw(d);
            qs = y->qs;
        }
        _mm_storeu_si128(reinterpret_cast<__m128i *>(qs), _mm512_cvtsepi32_epi8(i0));
        _mm_storeu_si128(reinterpret_cast<__m128i *>(qs + 16), _mm512_cvtsepi32_epi8(i1));
    }
}

// quantize_row_q8_K_ref: iscale = -127/max where max is the first element of largest magnitude.
void from_float_q8_K(const float * x, void * vy, int64_t k) {
    block_q8_K * y = static_cast<block_q8_K *>(vy);
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (int64_t i = 0; i < k / QK_K; i++, x += QK_K) {
        __m512 am = _mm512_setzero_ps();
        for (int j = 0; j < QK_K; j += 16) am = _mm512_max_ps(am, _mm512_andnot_ps(sign, _mm512_loadu_ps(x + j)));
        const float amax = _mm512_reduce_max_ps(am);
        if (!(amax > 0)) {  // also NaN-free zero rows; ggml tests !amax
            y[i].d = 0;
            std::memset(y[i].qs, 0, QK_K);
            std::memset(y[i].bsums, 0, sizeof y[i].bsums);
            continue;
        }
        float max = 0;
        const __m512 vam = _mm512_set1_ps(amax);
        for (int j = 0; j < QK_K; j += 16) {
            const __mmask16 m = _mm512_cmpeq_ps_mask(_mm512_andnot_ps(sign, _mm512_loadu_ps(x + j)), vam);
            if (m) { max = x[j + __builtin_ctz(m)]; break; }
        }
        const float iscale = -127.f / max;
        const __m512 vs = _mm512_set1_ps(iscale);
        const __m512i k127 = _mm512_set1_epi32(127);
        for (int j = 0; j < QK_K; j += 16) {
            __m512i q = _mm512_min_epi32(_mm512_cvtps_epi32(_mm512_mul_ps(vs, _mm512_loadu_ps(x + j))), k127);
            _mm_storeu_si128(reinterpret_cast<__m128i *>(y[i].qs + j), _mm512_cvtsepi32_epi8(q));
            y[i].bsums[j / 16] = static_cast<int16_t>(_mm512_reduce_add_epi32(q));
        }
        y[i].d = 1 / iscale;
    }
}

void cvt_f16_f32(const void * vx, void * vy, int64_t n) {
    const uint16_t * x = static_cast<const uint16_t *>(vx);
    float * y = static_cast<float *>(vy);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, h16_to_f32x16(x + i));
    if (i < n) {
        const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, x + i)));
    }
}

void cvt_f32_f16(const void * vx, void * vy, int64_t n) {
    const float * x = static_cast<const float *>(vx);
    uint16_t * y = static_cast<uint16_t *>(vy);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(y + i), _mm512_cvtps_ph(_mm512_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    if (i < n) {
        const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1);
        _mm256_mask_storeu_epi16(y + i, m, _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, x + i), _MM_FROUND_TO_NEAREST_INT));
    }
}

void cvt_bf16_f32(const void * vx, void * vy, int64_t n) {
    const uint16_t * x = static_cast<const uint16_t *>(vx);
    float * y = static_cast<float *>(vy);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_si512(y + i, _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i *>(x + i))), 16));
    for (; i < n; i++) y[i] = bf16_to_fp32_sw(x[i]);
}

// ggml's GGML_FP32_TO_BF16 (round to nearest even, NaN quietened), 16 at a time.
void cvt_f32_bf16(const void * vx, void * vy, int64_t n) {
    const float * x = static_cast<const float *>(vx);
    uint16_t * y = static_cast<uint16_t *>(vy);
    int64_t i = 0;
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    for (; i + 16 <= n; i += 16) {
        const __m512i u = _mm512_loadu_si512(x + i);
        const __m512i rounded = _mm512_srli_epi32(
            _mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1)))), 16);
        const __m512i nan = _mm512_or_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(64));
        const __mmask16 is_nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
        _mm256_storeu_si256(reinterpret_cast<__m256i *>(y + i), _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(rounded, is_nan, nan)));
    }
    for (; i < n; i++) y[i] = fp32_to_bf16_sw(x[i]);
}

void from_float_f16(const float * x, void * y, int64_t k) { cvt_f32_f16(x, y, k); }
void from_float_bf16(const float * x, void * y, int64_t k) { cvt_f32_bf16(x, y, k); }

template <template <int, int> class TILE, int R, int T>
void set(kernel_table & t, uint32_t type, int decode_r, prepare_fn prep = nullptr, prepared_size_fn psz = nullptr) {
    weight_kernels & wk = t.w[type];
    // A vectorised prepare of the same layout from the AVX2 init stays in place, with its fused
    // quantizer; another layout (or none) drops that quantizer, which would write the old one.
    if (prep && wk.prepared_size == psz && wk.prepare) prep = wk.prepare;
    else wk.quantize_prepared = nullptr;
    wk.gemm = gemm_dispatch<TILE, R, T>;
    wk.max_r = R;
    wk.max_t = T;
    wk.chunk_t = 0;
    wk.decode_r = decode_r;
    wk.prepare = prep;
    wk.prepared_size = psz;
    wk.gemm_decode = nullptr;
}

template <int R, int T> using q4_0_tile = legacy<split_dec<0>>::tile<R, T>;
template <int R, int T> using q4_1_tile = legacy<split_dec<1>>::tile<R, T>;
template <int R, int T> using q5_0_tile = legacy<split_dec<2>>::tile<R, T>;
template <int R, int T> using q5_1_tile = legacy<split_dec<3>>::tile<R, T>;
template <int R, int T> using q8_0_tile = legacy<q8_0_dec>::tile<R, T>;
template <int R, int T> using mxfp4_tile = legacy<mxfp4_dec>::tile<R, T>;
template <int R, int T> using iq4_nl_tile = legacy<iq4_nl_dec>::tile<R, T>;
template <int R, int T> using nvfp4_tile = nvfp4_kernel::tile<R, T>;
template <int R, int T> using tq2_0_tile = tq2_0_kernel::tile<R, T>;
template <int R, int T> using q2_0_tile = q2_0_kernel::tile<R, T>;
template <int R, int T> using q1_0_tile = q1_0_kernel::tile<R, T>;
template <int R, int T> using tq1_0_tile = tq1_0_kernel::tile<R, T>;
template <int R, int T> using q2_K_tile = kquant<q2_K_dec>::tile<R, T>;
template <int R, int T> using q3_K_tile = kquant<q3_K_dec>::tile<R, T>;
template <int R, int T> using q5_K_tile = kquant<q5_K_dec>::tile<R, T>;
template <int R, int T> using q6_K_tile = kquant<q6_K_dec>::tile<R, T>;
template <int R, int T> using iq4_xs_tile = kquant<iq4_xs_dec>::tile<R, T>;
template <int R, int T> using f32_tile = floats<0>::tile<R, T>;
template <int R, int T> using f16_tile = floats<1>::tile<R, T>;
template <int R, int T> using bf16_tile = floats<2>::tile<R, T>;
template <int R, int T> using bf16_dp_tile = floats<3>::tile<R, T>;

// Q4_0, Q4_1, Q5_0 and Q5_1 rows to floats (TYPE as split_dec's): the 4-bit quants with the
// 5th bit from qh, less the offset (8 for Q4_0, 16 for Q5_0), times d, plus m for the types with
// a min; the reference's bits: an exact int to float conversion, then a product and a sum in the
// rounding-mode forms, which the compiler never fuses into one multiply-add.
template <int TYPE>
void to_float_split(const void * vx, void * vy, int64_t k) {
    using D = split_dec<TYPE>;
    constexpr int OFFSET = TYPE == 0 ? 8 : TYPE == 2 ? 16 : 0;
    constexpr int R = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    const uint8_t * x = static_cast<const uint8_t *>(vx);
    float * y = static_cast<float *>(vy);
    const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512i one = _mm512_set1_epi32(1), m4 = _mm512_set1_epi32(0x0F), sixteen = _mm512_set1_epi32(16), off = _mm512_set1_epi32(OFFSET);
    for (int64_t i = 0; i < k / 32; i++, x += D::BB, y += 32) {
        uint16_t dh, mh = 0;
        std::memcpy(&dh, x, 2);
        if constexpr (D::HAS_MIN) std::memcpy(&mh, x + 2, 2);
        const __m512 d = _mm512_set1_ps(fp16_to_fp32_sw(dh)), m = _mm512_set1_ps(fp16_to_fp32_sw(mh));
        const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(x + D::QS_OFF)));
        __m512i lo = _mm512_and_si512(q, m4), hi = _mm512_srli_epi32(q, 4);
        if constexpr (D::HAS_QH) {
            uint32_t qh;
            std::memcpy(&qh, x + (D::HAS_MIN ? 4 : 2), 4);
            const __m512i h = _mm512_set1_epi32(static_cast<int>(qh));
            lo = _mm512_or_si512(lo, _mm512_slli_epi32(_mm512_and_si512(_mm512_srlv_epi32(h, iota), one), 4));
            hi = _mm512_or_si512(hi, _mm512_slli_epi32(_mm512_and_si512(_mm512_srlv_epi32(h, _mm512_add_epi32(iota, sixteen)), one), 4));
        }
        __m512 vlo = _mm512_mul_round_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(lo, off)), d, R);
        __m512 vhi = _mm512_mul_round_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(hi, off)), d, R);
        if constexpr (D::HAS_MIN) {
            vlo = _mm512_add_round_ps(vlo, m, R);
            vhi = _mm512_add_round_ps(vhi, m, R);
        }
        _mm512_storeu_ps(y, vlo);
        _mm512_storeu_ps(y + 16, vhi);
    }
}

// IQ4_NL rows to floats: d * level[index], the reference's bits (the 16 levels as one vector).
void to_float_iq4_nl(const void * vx, void * vy, int64_t k) {
    const uint8_t * x = static_cast<const uint8_t *>(vx);
    float * y = static_cast<float *>(vy);
    const __m512i levels = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(kIq4Levels)));
    const __m512i m4 = _mm512_set1_epi32(0x0F);
    for (int64_t i = 0; i < k / 32; i++, x += 18, y += 32) {
        uint16_t dh;
        std::memcpy(&dh, x, 2);
        const __m512 d = _mm512_set1_ps(fp16_to_fp32_sw(dh));
        const __m512i q = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i *>(x + 2)));
        _mm512_storeu_ps(y, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_permutexvar_epi32(_mm512_and_si512(q, m4), levels))));
        _mm512_storeu_ps(y + 16, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_permutexvar_epi32(_mm512_srli_epi32(q, 4), levels))));
    }
}

} // namespace

void kernels_init_avx512(kernel_table & t) {
    t.level = "avx512";
    // The 32-element block types take these tiles in matrix x vector too (one row per call). They
    // replaced the AVX2 (AVX-VNNI) loop there in session 61: on this project's Zen 5 VM,
    // `bench-matmul` (4096 x 4096, DRAM-resident copies, 1 thread) measured 14-15 -> 20-22 GB/s
    // for Q4_0, 13-14 -> 18-19 for Q5_0 and 18-20 -> 24-26 for Q8_0 (the loaders here have changed
    // since 537804d found the AVX2 loop ~1.7x faster). Two or four rows per call measured slower
    // than one. The bits are those of the AVX2 loop: a 512-bit lane here does what its lane does
    // in the accumulator for that half of the group (lanes 0-7: blocks 0-1 of each group, lanes
    // 8-15: blocks 2-3), and the final reduction adds the two halves before the same 8-lane sum.
    set<q4_0_tile, 4, 6>(t, KAIL_TYPE_Q4_0, 1, prepare_split_q8_0_off8, prepared_size_split);
    set<q4_1_tile, 4, 6>(t, KAIL_TYPE_Q4_1, 1, prepare_split_q8_1, prepared_size_split);
    set<q5_0_tile, 4, 6>(t, KAIL_TYPE_Q5_0, 1, prepare_split_q8_0_off16, prepared_size_split);
    set<q5_1_tile, 4, 6>(t, KAIL_TYPE_Q5_1, 1, prepare_split_q8_1, prepared_size_split);
    set<q8_0_tile, 4, 6>(t, KAIL_TYPE_Q8_0, 1, prepare_split_q8_0_off128, prepared_size_split);
    // One row at a time streams best for the other super-block types. With mins (Q2_K/Q5_K) each
    // output holds two accumulators: one row per tile keeps them in registers. Q4_K takes four rows
    // per call in decode and tiles alike (q4_K_rows4).
    set<q2_K_tile, 1, 8>(t, KAIL_TYPE_Q2_K, 1);
    set<q3_K_tile, 2, 8>(t, KAIL_TYPE_Q3_K, 1);
    set<q4_K_rows4_tile, 4, 8>(t, KAIL_TYPE_Q4_K, 4);
    set<mxfp4_tile, 4, 6>(t, KAIL_TYPE_MXFP4, 1, prepare_split_q8_0_off12, prepared_size_split);
    set<iq4_nl_tile, 4, 6>(t, KAIL_TYPE_IQ4_NL, 1, prepare_split_q8_0_off128, prepared_size_split);
    set<q5_K_tile, 1, 8>(t, KAIL_TYPE_Q5_K, 1);
    set<q6_K_tile, 1, 8>(t, KAIL_TYPE_Q6_K, 1);
    set<iq4_xs_tile, 1, 8>(t, KAIL_TYPE_IQ4_XS, 1);
    set<nvfp4_tile, 4, 4>(t, KAIL_TYPE_NVFP4, 1);
    set<tq2_0_tile, 2, 4>(t, KAIL_TYPE_TQ2_0, 1);
    set<q2_0_tile, 2, 4>(t, KAIL_TYPE_Q2_0, 1);
    set<q1_0_tile, 2, 4>(t, KAIL_TYPE_Q1_0, 1);
    set<tq1_0_tile, 2, 4>(t, KAIL_TYPE_TQ1_0, 1);
    t.w[KAIL_TYPE_Q2_K].gemm_decode = kquant<q2_K_dec>::decode;
    t.w[KAIL_TYPE_Q3_K].gemm_decode = kquant<q3_K_dec>::decode;
    t.w[KAIL_TYPE_Q5_K].gemm_decode = kquant<q5_K_dec>::decode;
    t.w[KAIL_TYPE_Q6_K].gemm_decode = kquant<q6_K_dec>::decode;
    t.w[KAIL_TYPE_IQ4_XS].gemm_decode = kquant<iq4_xs_dec>::decode;
    set<f32_tile, 4, 4>(t, KAIL_TYPE_F32, 1);
    set<f16_tile, 4, 4>(t, KAIL_TYPE_F16, 1, prepare_f16_as_f32, prepared_size_f32);
    set<bf16_tile, 4, 4>(t, KAIL_TYPE_BF16, 1, prepare_bf16_as_f32, prepared_size_f32);
    t.w[KAIL_TYPE_F32].gemm_decode = floats<0>::decode;
    t.w[KAIL_TYPE_F16].gemm_decode = floats<1>::decode;
    t.w[KAIL_TYPE_BF16].gemm_decode = floats<2>::decode;
    if (cpu_features_get().avx512_bf16) {
        set<bf16_dp_tile, 4, 6>(t, KAIL_TYPE_BF16, 1);
        t.w[KAIL_TYPE_BF16].gemm_decode = floats<3>::decode;
    }
    t.from_float[KAIL_TYPE_Q8_0] = from_float_q8<false>;
    t.from_float[KAIL_TYPE_Q8_1] = from_float_q8<true>;
    t.from_float[KAIL_TYPE_Q8_K] = from_float_q8_K;
    t.from_float[KAIL_TYPE_F16] = from_float_f16;
    t.from_float[KAIL_TYPE_BF16] = from_float_bf16;
    t.fp16_to_fp32 = cvt_f16_f32;
    t.fp32_to_fp16 = cvt_f32_f16;
    t.bf16_to_fp32 = cvt_bf16_f32;
    t.fp32_to_bf16 = cvt_f32_bf16;
    t.weighted_rows_f32 = weighted_rows<float>;
    t.weighted_rows_f16 = weighted_rows<uint16_t>;
    t.weighted_rows_q8_0 = weighted_rows_q8_0;
    t.scale_max = scale_max;
    t.exp_sum = exp_sum;
    t.to_float[KAIL_TYPE_Q4_0] = to_float_split<0>;
    t.to_float[KAIL_TYPE_Q4_1] = to_float_split<1>;
    t.to_float[KAIL_TYPE_Q5_0] = to_float_split<2>;
    t.to_float[KAIL_TYPE_Q5_1] = to_float_split<3>;
    t.to_float[KAIL_TYPE_IQ4_NL] = to_float_iq4_nl;
}

} // namespace kail::cpu
