// The codebook i-quants: IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, IQ1_S, IQ1_M (the types of the
// 1.5-3 bit files people run the largest MoE models from). Each group of 8 weights (IQ3: two
// groups of 4) is an index into a fixed grid of magnitudes (cpu/iq_grids.h, part of the format),
// with signs and small integer scales per 16 or 32 weights under one fp16 scale per 256.
//
// Block layouts and value semantics are ggml's (ggml-common.h, dequantize_row_iq* in
// ggml-quants.c); the dot products with Q8_K activations keep ggml's integer sums per sub-block
// and apply the fp16 scale once per super-block. Scalar code: these types are read, not tuned.
//
// The quantizers here are for the project's GGUF writer (test files): a per-group search of the
// whole grid under scales fitted to each sub-block's largest magnitude. ggml quantizes these types
// only with an importance matrix; these do not need one and are not as accurate.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "cpu/fp16.h"
#include "cpu/iq_grids.h"
#include "cpu/quants_impl.h"

namespace kail::cpu {

namespace {

inline float h2f(uint16_t h) { return fp16_to_fp32_sw(h); }
inline uint16_t f2h(float f) { return fp32_to_fp16_sw(f); }

// Byte j of a grid entry (little-endian packing, as ggml reads the tables through a byte pointer).
inline int grid8(uint64_t g, int j) { return static_cast<int>((g >> (8 * j)) & 0xFF); }
inline int grid4(uint32_t g, int j) { return static_cast<int>((g >> (8 * j)) & 0xFF); }
inline int grid1(uint64_t g, int j) { return static_cast<int8_t>((g >> (8 * j)) & 0xFF); }

// 7 stored sign bits -> the 8-bit mask; the 8th sign makes the count of minus signs even.
inline int signs_from7(int code) { return code | ((__builtin_popcount(static_cast<unsigned>(code)) & 1) << 7); }
inline int sgn(int mask, int j) { return (mask >> j) & 1 ? -1 : 1; }

inline uint32_t load32(const void * p) {
    uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}

// Scale step from the largest magnitude of a group of weights and the grid's largest value.
inline float amax_of(const float * x, int n) {
    float a = 0;
    for (int j = 0; j < n; j++) a = std::max(a, std::fabs(x[j]));
    return a;
}

// Per group of `len` weights of a super-block, the step that puts its largest magnitude on the
// grid's largest value (want[g]); returns the largest of them, from which the fp16 scale follows.
inline float group_steps(const float * x, int len, float grid_max, float * want) {
    float top = 0;
    for (int g = 0; g < QK_K / len; g++) top = std::max(top, want[g] = amax_of(x + len * g, len) / grid_max);
    return top;
}

// The odd scale 1 + 2s (s in 0..smax) for which d * (1 + 2s) is nearest to `want`: s.
inline int odd_scale(float want, float d, int smax) {
    return d > 0 ? std::max(0, std::min(smax, static_cast<int>(std::lround((want / d - 1.f) * 0.5f)))) : 0;
}

// The 4-bit scale s (0..15) for which d * (0.5 + s) * f is nearest to `want`.
inline int scale4(float want, float d, float f) {
    if (d <= 0) return 0;
    return std::max(0, std::min(15, static_cast<int>(std::lround(want / (d * f) - 0.5f))));
}

// Signs of 8 weights with an even count of minus signs (the IQ2_XXS/IQ2_XS/IQ3_XXS rule): the
// weight of least magnitude gives way when the count is odd. Returns the mask; t = x * sign.
int even_signs(const float * x, float * t) {
    int mask = 0, least = 0;
    for (int j = 0; j < 8; j++) {
        if (x[j] < 0) mask |= 1 << j;
        if (std::fabs(x[j]) < std::fabs(x[least])) least = j;
    }
    if (__builtin_popcount(static_cast<unsigned>(mask)) & 1) mask ^= 1 << least;
    for (int j = 0; j < 8; j++) t[j] = x[j] * sgn(mask, j);
    return mask;
}

// Signs of 8 weights stored as a full byte (IQ2_S, IQ3_S): the mask, and t = |x|.
int free_signs(const float * x, float * t) {
    int mask = 0;
    for (int j = 0; j < 8; j++) {
        if (x[j] < 0) mask |= 1 << j;
        t[j] = std::fabs(x[j]);
    }
    return mask;
}

// A grid as floats, column-major (value j of entry g at v[j * n + g]; 8 or 4 values per entry),
// with each entry's sum of squares: the quantizers' searches minimise
// |db * g - t|^2 = db^2 |g|^2 - 2 db g.t + |t|^2 over the entries, 8 entries at a time.
struct float_grid {
    std::vector<float> v;   // per x n
    std::vector<float> g2;  // n
    int n = 0, per = 8;
};

template <typename G>
float_grid make_float_grid(const G * grid, int n, int per, int (*val)(G, int)) {
    float_grid f;
    f.n = n;
    f.per = per;
    f.v.assign(static_cast<size_t>(n) * per, 0.f);
    f.g2.assign(static_cast<size_t>(n), 0.f);
    for (int g = 0; g < n; g++)
        for (int j = 0; j < per; j++) {
            const float x = static_cast<float>(val(grid[g], j));
            f.v[static_cast<size_t>(j) * n + g] = x;
            f.g2[static_cast<size_t>(g)] += x * x;
        }
    return f;
}

const float_grid & fgrid_iq2xxs() { static const float_grid f = make_float_grid<uint64_t>(iq2xxs_grid, 256, 8, grid8); return f; }
const float_grid & fgrid_iq2xs() { static const float_grid f = make_float_grid<uint64_t>(iq2xs_grid, 512, 8, grid8); return f; }
const float_grid & fgrid_iq2s() { static const float_grid f = make_float_grid<uint64_t>(iq2s_grid, 1024, 8, grid8); return f; }
const float_grid & fgrid_iq3xxs() { static const float_grid f = make_float_grid<uint32_t>(iq3xxs_grid, 256, 4, grid4); return f; }
const float_grid & fgrid_iq3s() { static const float_grid f = make_float_grid<uint32_t>(iq3s_grid, 512, 4, grid4); return f; }
const float_grid & fgrid_iq1s() { static const float_grid f = make_float_grid<uint64_t>(iq1s_grid, 2048, 8, grid1); return f; }

// The writer's grid search is the hot loop of writing test files, and of the sanitizer test build,
// so it is compiled optimised and without sanitizer checks in every build (it only reads two
// fixed-size tables and 8 floats), and once more each for AVX2 and AVX-512 (8 and 16 entries a
// vector) where the CPU has them. All compute each entry's error with the same separate
// multiplies and adds in the same order and keep the first entry of least error, so they choose
// the same entry bit for bit.
#if defined(__GNUC__) && !defined(__clang__)
#define KAIL_HOT_SEARCH __attribute__((optimize("O2"), no_sanitize("address", "undefined")))
#define KAIL_NO_FMA_ATTR optimize("fp-contract=off")
#define KAIL_NO_FMA_BODY
#elif defined(__clang__)
#define KAIL_HOT_SEARCH __attribute__((no_sanitize("address", "undefined")))
#define KAIL_NO_FMA_ATTR
#define KAIL_NO_FMA_BODY _Pragma("clang fp contract(off)")
#else
#define KAIL_HOT_SEARCH
#endif

#if defined(__GNUC__)
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef float v16f __attribute__((vector_size(64)));
typedef int32_t v16i __attribute__((vector_size(64)));

// dot[u] = entries g + u W ... g + u W + W - 1 . t, summed in order j = 0 .. PER - 1.
#define KAIL_NEAREST_DOTS(VF, W, PER)                                                            \
    {                                                                                            \
        for (int u = 0; u < 4; u++) {                                                            \
            VF col;                                                                              \
            std::memcpy(&col, v + g + u * W, sizeof col);                                        \
            dot[u] = col * t[0];                                                                 \
        }                                                                                        \
        for (int j = 1; j < PER; j++)                                                            \
            for (int u = 0; u < 4; u++) {                                                        \
                VF col;                                                                          \
                std::memcpy(&col, v + static_cast<size_t>(j) * n + g + u * W, sizeof col);      \
                dot[u] = dot[u] + col * t[j];                                                    \
            }                                                                                    \
    }

// The entry nearest to db * entry = t (t: f.per values); *err gets the squared error without the
// constant |t|^2. Lane k of W looks at entries k, k + W, ... in order; ties go to the lower entry.
#define KAIL_NEAREST_BODY(VF, VI, W)                                                             \
    KAIL_NO_FMA_BODY                                                                             \
    const float two_db = 2 * db, db2 = db * db;                                                  \
    const float inf = std::numeric_limits<float>::infinity();                                    \
    const int n = f.n;                                                                           \
    const float * v = f.v.data();                                                                \
    VF best_e;                                                                                   \
    VI best_g, gi;                                                                               \
    for (int k = 0; k < W; k++) {                                                                \
        best_e[k] = inf;                                                                         \
        best_g[k] = 0;                                                                           \
        gi[k] = k;                                                                               \
    }                                                                                            \
    /* Four blocks of W entries at a time: four independent sums in flight. */                  \
    for (int g = 0; g < n; g += 4 * W) {                                                         \
        VF dot[4];                                                                               \
        if (f.per == 8) KAIL_NEAREST_DOTS(VF, W, 8) else KAIL_NEAREST_DOTS(VF, W, 4)             \
        for (int u = 0; u < 4; u++, gi += W) {                                                   \
            VF g2;                                                                               \
            std::memcpy(&g2, f.g2.data() + g + u * W, sizeof g2);                                \
            const VF e = db2 * g2 - two_db * dot[u];                                             \
            const VI lt = e < best_e;                                                            \
            best_e = lt ? e : best_e;                                                            \
            best_g = lt ? gi : best_g;                                                           \
        }                                                                                        \
    }                                                                                            \
    int best = 0;                                                                                \
    float be = inf;                                                                              \
    for (int k = 0; k < W; k++)                                                                  \
        if (best_e[k] < be || (best_e[k] == be && best_g[k] < best)) {                           \
            be = best_e[k];                                                                      \
            best = best_g[k];                                                                    \
        }                                                                                        \
    if (err) *err = be;                                                                          \
    return best;

// (Grids have 256-2048 entries: multiples of 4 x 16.)
KAIL_HOT_SEARCH int nearest_base(const float_grid & f, const float * t, float db, float * err) { KAIL_NEAREST_BODY(v8f, v8i, 8) }
#if defined(__x86_64__)
// Contraction to FMA is off, so the sums round as in the base version.
KAIL_HOT_SEARCH __attribute__((target("avx2"), KAIL_NO_FMA_ATTR)) int nearest_avx2(const float_grid & f, const float * t, float db, float * err) {
    KAIL_NEAREST_BODY(v8f, v8i, 8)
}
KAIL_HOT_SEARCH __attribute__((target("avx512f"), KAIL_NO_FMA_ATTR)) int nearest_avx512(const float_grid & f, const float * t, float db, float * err) {
    KAIL_NEAREST_BODY(v16f, v16i, 16)
}
#endif
#undef KAIL_NEAREST_BODY
#undef KAIL_NEAREST_DOTS

int nearest(const float_grid & f, const float * t, float db, float * err = nullptr) {
#if defined(__x86_64__)
    static const int level = __builtin_cpu_supports("avx512f") ? 2 : __builtin_cpu_supports("avx2") ? 1 : 0;
    if (level == 2) return nearest_avx512(f, t, db, err);
    if (level == 1) return nearest_avx2(f, t, db, err);
#endif
    return nearest_base(f, t, db, err);
}
#else
int nearest(const float_grid & f, const float * t, float db, float * err = nullptr) {
    int best = 0;
    float best_err = std::numeric_limits<float>::infinity();
    for (int g = 0; g < f.n; g++) {
        float dot = f.v[g] * t[0];
        for (int j = 1; j < f.per; j++) dot = dot + f.v[static_cast<size_t>(j) * f.n + g] * t[j];
        const float e = db * db * f.g2[g] - 2 * db * dot;
        if (e < best_err) {
            best_err = e;
            best = g;
        }
    }
    if (err) *err = best_err;
    return best;
}
#endif

int nearest8(const float_grid & f, const float * t, float db) { return nearest(f, t, db); }
int nearest4(const float_grid & f, const float * t, float db) { return nearest(f, t, db); }

constexpr float IQ1_DELTA = 0.125f;  // ggml's IQ1S_DELTA and IQ1M_DELTA

// The IQ1 grid entry for 8 weights, dl * (grid + delta) = x: the nearest entry to x / dl - delta.
int nearest1(const float * x, float dl, float delta, float * err_out) {
    float t[8];
    for (int j = 0; j < 8; j++) t[j] = x[j] - dl * delta;
    float e;
    const int g = nearest(fgrid_iq1s(), t, dl, &e);
    float t2 = 0;
    for (int j = 0; j < 8; j++) t2 += t[j] * t[j];
    *err_out = e + t2;
    return g;
}

// ---------------------------------------------------------------- decoding
// A super-block decoded to integers: weight j = mul * sc[j / 16] * q[j], exactly. q is the signed
// grid value (IQ1: 8 * grid +- 1, so the 1/8 shift stays an integer), sc the odd sub-block scale.
// Dequantizing and the dot with Q8_K (ggml's integer sums per sub-block, the fp16 scale once per
// super-block) both read it, so each format's bit layout is written once.
struct iq_decoded {
    int8_t  q[QK_K];
    int16_t sc[QK_K / 16];
    float   mul;
};

// 8 signed grid values from an 8-magnitude entry and a sign byte.
inline void put8(int8_t * q, uint64_t g, int signs) {
    for (int j = 0; j < 8; j++) q[j] = static_cast<int8_t>(grid8(g, j) * sgn(signs, j));
}
// The same from two 4-magnitude entries (IQ3).
inline void put4x2(int8_t * q, uint32_t g1, uint32_t g2, int signs) {
    for (int j = 0; j < 4; j++) {
        q[j] = static_cast<int8_t>(grid4(g1, j) * sgn(signs, j));
        q[j + 4] = static_cast<int8_t>(grid4(g2, j) * sgn(signs, j + 4));
    }
}
// IQ1: 8 * grid + (delta sign), grid in {-1, 0, 1}.
inline void put1(int8_t * q, uint64_t g, bool neg) {
    for (int j = 0; j < 8; j++) q[j] = static_cast<int8_t>(8 * grid1(g, j) + (neg ? -1 : 1));
}
inline void both_halves(iq_decoded & o, int ib, int ls) { o.sc[2 * ib] = o.sc[2 * ib + 1] = static_cast<int16_t>(ls); }

// Per 32 weights: 4 grid indices (bytes), then 4 x 7 sign bits and a 4-bit scale in one word.
void decode(const block_iq2_xxs & b, iq_decoded & o) {
    o.mul = 0.125f * h2f(b.d);
    for (int ib = 0; ib < QK_K / 32; ib++) {
        const uint32_t idx = load32(b.qs + 4 * ib), aux = load32(b.qs + 4 * ib + 2);
        for (int l = 0; l < 4; l++) put8(o.q + 32 * ib + 8 * l, iq2xxs_grid[(idx >> (8 * l)) & 0xFF], signs_from7((aux >> (7 * l)) & 127));
        both_halves(o, ib, 2 * static_cast<int>(aux >> 28) + 1);
    }
}

// Per 8 weights a word: 9-bit grid index, 7 sign bits; a 4-bit scale per 16 weights.
void decode(const block_iq2_xs & b, iq_decoded & o) {
    o.mul = 0.125f * h2f(b.d);
    for (int ib = 0; ib < QK_K / 32; ib++) {
        for (int l = 0; l < 4; l++) {
            const uint16_t q = b.qs[4 * ib + l];
            put8(o.q + 32 * ib + 8 * l, iq2xs_grid[q & 511], signs_from7(q >> 9));
        }
        o.sc[2 * ib] = static_cast<int16_t>(2 * (b.scales[ib] & 0xF) + 1);
        o.sc[2 * ib + 1] = static_cast<int16_t>(2 * (b.scales[ib] >> 4) + 1);
    }
}

// Per 8 weights: a 10-bit grid index (low byte in qs, 2 high bits in qh) and a full sign byte.
inline int iq2s_index(const block_iq2_s & b, int ib, int l) { return b.qs[4 * ib + l] | ((b.qh[ib] << (8 - 2 * l)) & 0x300); }

void decode(const block_iq2_s & b, iq_decoded & o) {
    o.mul = 0.125f * h2f(b.d);
    const uint8_t * signs = b.qs + QK_K / 8;
    for (int ib = 0; ib < QK_K / 32; ib++) {
        for (int l = 0; l < 4; l++) put8(o.q + 32 * ib + 8 * l, iq2s_grid[iq2s_index(b, ib, l)], signs[4 * ib + l]);
        o.sc[2 * ib] = static_cast<int16_t>(2 * (b.scales[ib] & 0xF) + 1);
        o.sc[2 * ib + 1] = static_cast<int16_t>(2 * (b.scales[ib] >> 4) + 1);
    }
}

// Per 32 weights: 8 grid indices (bytes, 4 magnitudes each), then 4 x 7 sign bits and a 4-bit scale.
void decode(const block_iq3_xxs & b, iq_decoded & o) {
    o.mul = 0.25f * h2f(b.d);
    for (int ib = 0; ib < QK_K / 32; ib++) {
        const uint32_t aux = load32(b.qs + QK_K / 4 + 4 * ib);
        const uint8_t * q = b.qs + 8 * ib;
        for (int l = 0; l < 4; l++) put4x2(o.q + 32 * ib + 8 * l, iq3xxs_grid[q[2 * l]], iq3xxs_grid[q[2 * l + 1]], signs_from7((aux >> (7 * l)) & 127));
        both_halves(o, ib, 2 * static_cast<int>(aux >> 28) + 1);
    }
}

// Per 4 weights a 9-bit grid index (low byte in qs, high bit in qh); a full sign byte per 8
// weights; a 4-bit odd scale (1 + 2s) per 32.
inline int iq3s_index(const block_iq3_s & b, int ib, int k) { return b.qs[8 * ib + k] | (((b.qh[ib] >> k) & 1) << 8); }

void decode(const block_iq3_s & b, iq_decoded & o) {
    o.mul = h2f(b.d);
    for (int ib = 0; ib < QK_K / 32; ib++) {
        for (int l = 0; l < 4; l++)
            put4x2(o.q + 32 * ib + 8 * l, iq3s_grid[iq3s_index(b, ib, 2 * l)], iq3s_grid[iq3s_index(b, ib, 2 * l + 1)], b.signs[4 * ib + l]);
        both_halves(o, ib, 1 + 2 * ((b.scales[ib / 2] >> (4 * (ib % 2))) & 0xF));
    }
}

// Per 8 weights an 11-bit index into a grid of {-1, 0, 1} values (low byte in qs, 3 bits in qh);
// per 32 weights a 3-bit odd scale (1 + 2s) and the sign of a shift of 1/8 (qh's top bits).
void decode(const block_iq1_s & b, iq_decoded & o) {
    o.mul = 0.125f * h2f(b.d);
    for (int ib = 0; ib < QK_K / 32; ib++) {
        const int qh = b.qh[ib];
        for (int l = 0; l < 4; l++) put1(o.q + 32 * ib + 8 * l, iq1s_grid[b.qs[4 * ib + l] | (((qh >> (3 * l)) & 7) << 8)], qh & 0x8000);
        both_halves(o, ib, 2 * ((qh >> 12) & 7) + 1);
    }
}

// IQ1_M: no fp16 field: the scale is spread over the top nibbles of the four scale words; per 16
// weights a 3-bit odd scale; per 8 weights the index's 3 high bits and the shift's sign in a
// nibble of qh.
inline float iq1m_d(const block_iq1_m & b) {
    uint16_t sc[4];
    std::memcpy(sc, b.scales, sizeof sc);
    return h2f(static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00F0) | ((sc[2] >> 4) & 0x0F00) | (sc[3] & 0xF000)));
}

void decode(const block_iq1_m & b, iq_decoded & o) {
    o.mul = 0.125f * iq1m_d(b);
    for (int ib = 0; ib < QK_K / 32; ib++) {
        uint16_t w;
        std::memcpy(&w, b.scales + 2 * (ib / 2), 2);
        for (int l = 0; l < 4; l++) {
            const int nib = (b.qh[2 * ib + l / 2] >> (4 * (l % 2))) & 0xF;
            put1(o.q + 32 * ib + 8 * l, iq1s_grid[b.qs[4 * ib + l] | ((nib & 7) << 8)], nib & 8);
        }
        for (int h = 0; h < 2; h++) o.sc[2 * ib + h] = static_cast<int16_t>(2 * ((w >> (6 * (ib % 2) + 3 * h)) & 7) + 1);
    }
}

template <class B>
void dequantize_iq(const void * vx, float * y, int64_t k) {
    const B * x = static_cast<const B *>(vx);
    iq_decoded o;
    for (int64_t i = 0; i < k / QK_K; i++, y += QK_K) {
        decode(x[i], o);
        for (int j = 0; j < QK_K; j++) y[j] = o.mul * o.sc[j / 16] * o.q[j];
    }
}

template <class B>
float dot_iq(int64_t n, const void * vx, const void * vy) {
    const B * x = static_cast<const B *>(vx);
    const block_q8_K * y = static_cast<const block_q8_K *>(vy);
    iq_decoded o;
    float sumf = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        decode(x[i], o);
        int32_t bsum = 0;  // |bsum| <= 256 * 72 * 127 * 31 < 2^31
        for (int g = 0; g < QK_K / 16; g++) {
            int32_t s = 0;
            for (int j = 16 * g; j < 16 * g + 16; j++) s += o.q[j] * y[i].qs[j];
            bsum += o.sc[g] * s;
        }
        sumf += o.mul * y[i].d * bsum;
    }
    return sumf;
}

} // namespace

#define KAIL_IQ_ENTRY_POINTS(T)                                                                                      \
    void dequantize_##T(const void * vx, float * y, int64_t k) { dequantize_iq<block_##T>(vx, y, k); }                \
    float dot_##T(int64_t n, const void * vx, const void * vy) { return dot_iq<block_##T>(n, vx, vy); }
KAIL_IQ_ENTRY_POINTS(iq2_xxs)
KAIL_IQ_ENTRY_POINTS(iq2_xs)
KAIL_IQ_ENTRY_POINTS(iq2_s)
KAIL_IQ_ENTRY_POINTS(iq3_xxs)
KAIL_IQ_ENTRY_POINTS(iq3_s)
KAIL_IQ_ENTRY_POINTS(iq1_s)
KAIL_IQ_ENTRY_POINTS(iq1_m)
#undef KAIL_IQ_ENTRY_POINTS

// ---------------------------------------------------------------- quantizers (the writer's)

// Each fills the layout its decode() above reads.

void quantize_iq2_xxs_ref(const float * x, void * vy, int64_t k) {
    block_iq2_xxs * y = static_cast<block_iq2_xxs *>(vy);
    for (int64_t i = 0; i < k / QK_K; i++, x += QK_K) {
        float want[QK_K / 32];
        y[i].d = f2h(group_steps(x, 32, 43.f, want) / (15.5f * 0.25f));
        const float d = h2f(y[i].d);
        for (int ib = 0; ib < QK_K / 32; ib++) {
            const int sc = scale4(want[ib], d, 0.25f);
            const float db = d * (0.5f + sc) * 0.25f;
            uint32_t idx = 0, aux = static_cast<uint32_t>(sc) << 28;
            for (int l = 0; l < 4; l++) {
                float t[8];
                const int mask = even_signs(x + 32 * ib + 8 * l, t);
                idx |= static_cast<uint32_t>(nearest8(fgrid_iq2xxs(), t, db)) << (8 * l);
                aux |= static_cast<uint32_t>(mask & 127) << (7 * l);
            }
            std::memcpy(y[i].qs + 4 * ib, &idx, 4);
            std::memcpy(y[i].qs + 4 * ib + 2, &aux, 4);
        }
    }
}

void quantize_iq2_xs_ref(const float * x, void * vy, int64_t k) {
    block_iq2_xs * y = static_cast<block_iq2_xs *>(vy);
    for (int64_t i = 0; i < k / QK_K; i++, x += QK_K) {
        float want[QK_K / 16];
        y[i].d = f2h(group_steps(x, 16, 43.f, want) / (15.5f * 0.25f));
        const float d = h2f(y[i].d);
        for (int ib = 0; ib < QK_K / 32; ib++) {
            const int sc[2] = {scale4(want[2 * ib], d, 0.25f), scale4(want[2 * ib + 1], d, 0.25f)};
            y[i].scales[ib] = static_cast<uint8_t>(sc[0] | (sc[1] << 4));
            for (int l = 0; l < 4; l++) {
                float t[8];
                const int mask = even_signs(x + 32 * ib + 8 * l, t);
                const int g = nearest8(fgrid_iq2xs(), t, d * (0.5f + sc[l / 2]) * 0.25f);
                y[i].qs[4 * ib + l] = static_cast<uint16_t>(g | ((mask & 127) << 9));
            }
        }
    }
}

void quantize_iq2_s_ref(const float * x, void * vy, int64_t k) {
    block_iq2_s * y = static_cast<block_iq2_s *>(vy);
    for (int64_t i = 0; i < k / QK_K; i++, x += QK_K) {
        float want[QK_K / 16];
        y[i].d = f2h(group_steps(x, 16, 43.f, want) / (15.5f * 0.25f));
        const float d = h2f(y[i].d);
        std::memset(y[i].qh, 0, sizeof y[i].qh);
        uint8_t * signs = y[i].qs + QK_K / 8;
        for (int ib = 0; ib < QK_K / 32; ib++) {
            const int sc[2] = {scale4(want[2 * ib], d, 0.25f), scale4(want[2 * ib + 1], d, 0.25f)};
            y[i].scales[ib] = static_cast<uint8_t>(sc[0] | (sc[1] << 4));
            for (int l = 0; l < 4; l++) {
                float t[8];
                const int mask = free_signs(x + 32 * ib + 8 * l, t);
                const int g = nearest8(fgrid_iq2s(), t, d * (0.5f + sc[l / 2]) * 0.25f);
                y[i].qs[4 * ib + l] = static_cast<uint8_t>(g & 0xFF);
                y[i].qh[ib] = static_cast<uint8_t>(y[i].qh[ib] | ((g >> 8) << (2 * l)));
                signs[4 * ib + l] = static_cast<uint8_t>(mask);
            }
        }
    }
}

void quantize_iq3_xxs_ref(const float * x, void * vy, int64_t k) {
    block_iq3_xxs * y = static_cast<block_iq3_xxs *>(vy);
    for (int64_t i = 0; i < k / QK_K; i++, x += QK_K) {
        float want[QK_K / 32];
        y[i].d = f2h(group_steps(x, 32, 62.f, want) / (15.5f * 0.5f));
        const float d = h2f(y[i].d);
        for (int ib = 0; ib < QK_K / 32; ib++) {
            const int sc = scale4(want[ib], d, 0.5f);
            const float db = d * (0.5f + sc) * 0.5f;
            uint32_t aux = static_cast<uint32_t>(sc) << 28;
            for (int l = 0; l < 4; l++) {
                float t[8];
                const int mask = even_signs(x + 32 * ib + 8 * l, t);
                y[i].qs[8 * ib + 2 * l] = static_cast<uint8_t>(nearest4(fgrid_iq3xxs(), t, db));
                y[i].qs[8 * ib + 2 * l + 1] = static_cast<uint8_t>(nearest4(fgrid_iq3xxs(), t + 4, db));
                aux |= static_cast<uint32_t>(mask & 127) << (7 * l);
            }
            std::memcpy(y[i].qs + QK_K / 4 + 4 * ib, &aux, 4);
        }
    }
}

void quantize_iq3_s_ref(const float * x, void * vy, int64_t k) {
    block_iq3_s * y = static_cast<block_iq3_s *>(vy);
    for (int64_t i = 0; i < k / QK_K; i++, x += QK_K) {
        float want[QK_K / 32];
        y[i].d = f2h(group_steps(x, 32, 15.f, want) / 31.f);
        const float d = h2f(y[i].d);
        std::memset(y[i].qh, 0, sizeof y[i].qh);
        std::memset(y[i].scales, 0, sizeof y[i].scales);
        for (int ib = 0; ib < QK_K / 32; ib++) {
            const int sc = odd_scale(want[ib], d, 15);
            y[i].scales[ib / 2] = static_cast<uint8_t>(y[i].scales[ib / 2] | (sc << (4 * (ib % 2))));
            const float db = d * (1 + 2 * sc);
            for (int l = 0; l < 4; l++) {
                float t[8];
                y[i].signs[4 * ib + l] = static_cast<uint8_t>(free_signs(x + 32 * ib + 8 * l, t));
                for (int h = 0; h < 2; h++) {
                    const int g = nearest4(fgrid_iq3s(), t + 4 * h, db);
                    const int kk = 2 * l + h;
                    y[i].qs[8 * ib + kk] = static_cast<uint8_t>(g & 0xFF);
                    y[i].qh[ib] = static_cast<uint8_t>(y[i].qh[ib] | ((g >> 8) << kk));
                }
            }
        }
    }
}

void quantize_iq1_s_ref(const float * x, void * vy, int64_t k) {
    block_iq1_s * y = static_cast<block_iq1_s *>(vy);
    for (int64_t i = 0; i < k / QK_K; i++, x += QK_K) {
        float want[QK_K / 32];
        y[i].d = f2h(group_steps(x, 32, 1 + IQ1_DELTA, want) / 15.f);
        const float d = h2f(y[i].d);
        for (int ib = 0; ib < QK_K / 32; ib++) {
            const int sc = odd_scale(want[ib], d, 7);
            const float dl = d * (2 * sc + 1);
            // The shift's sign is one per 32 weights: keep the one of least error.
            int best_idx[4] = {0, 0, 0, 0}, best_neg = 0;
            float best_err = std::numeric_limits<float>::infinity();
            for (int neg = 0; neg < 2; neg++) {
                int idx[4];
                float err = 0;
                for (int l = 0; l < 4; l++) {
                    float e;
                    idx[l] = nearest1(x + 32 * ib + 8 * l, dl, neg ? -IQ1_DELTA : IQ1_DELTA, &e);
                    err += e;
                }
                if (err < best_err) {
                    best_err = err;
                    best_neg = neg;
                    std::copy(idx, idx + 4, best_idx);
                }
            }
            int qh = (sc << 12) | (best_neg << 15);
            for (int l = 0; l < 4; l++) {
                y[i].qs[4 * ib + l] = static_cast<uint8_t>(best_idx[l] & 0xFF);
                qh |= (best_idx[l] >> 8) << (3 * l);
            }
            y[i].qh[ib] = static_cast<uint16_t>(qh);
        }
    }
}

void quantize_iq1_m_ref(const float * x, void * vy, int64_t k) {
    block_iq1_m * y = static_cast<block_iq1_m *>(vy);
    for (int64_t i = 0; i < k / QK_K; i++, x += QK_K) {
        float want[QK_K / 16];
        const uint16_t dh = f2h(group_steps(x, 16, 1 + IQ1_DELTA, want) / 15.f);
        const float d = h2f(dh);
        uint16_t sc[4] = {0, 0, 0, 0};
        std::memset(y[i].qh, 0, sizeof y[i].qh);
        for (int ib = 0; ib < QK_K / 32; ib++) {
            for (int h = 0; h < 2; h++) {
                const int s = odd_scale(want[2 * ib + h], d, 7);
                sc[ib / 2] = static_cast<uint16_t>(sc[ib / 2] | (s << (6 * (ib % 2) + 3 * h)));
                const float dl = d * (2 * s + 1);
                for (int l = 2 * h; l < 2 * h + 2; l++) {
                    // The shift's sign is one per 8 weights here.
                    float e_pos, e_neg;
                    const int ip = nearest1(x + 32 * ib + 8 * l, dl, IQ1_DELTA, &e_pos);
                    const int in = nearest1(x + 32 * ib + 8 * l, dl, -IQ1_DELTA, &e_neg);
                    const bool neg = e_neg < e_pos;
                    const int g = neg ? in : ip;
                    y[i].qs[4 * ib + l] = static_cast<uint8_t>(g & 0xFF);
                    const int nib = (g >> 8) | (neg ? 8 : 0);
                    y[i].qh[2 * ib + l / 2] = static_cast<uint8_t>(y[i].qh[2 * ib + l / 2] | (nib << (4 * (l % 2))));
                }
            }
        }
        // The fp16 scale's nibbles go to the top of the four words.
        for (int w = 0; w < 4; w++) sc[w] = static_cast<uint16_t>(sc[w] | (((dh >> (4 * w)) & 0xF) << 12));
        std::memcpy(y[i].scales, sc, sizeof sc);
    }
}

} // namespace kail::cpu
