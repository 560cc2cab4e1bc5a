// Internal to the CPU kernels: ggml's block layouts and the per-ISA kernel tables that the public
// quants.h / matmul.h entry points dispatch through.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kail/types.h"

#include <cmath>
#include <cstring>

namespace kail::cpu {

// ggml's nearest_int: round half to even through the 1.5*2^23 trick (valid for |x| < 2^22).
inline int nearest_int(float fval) {
    float val = fval + 12582912.f;
    int i;
    std::memcpy(&i, &val, sizeof(int));
    return (i & 0x007fffff) - 0x00400000;
}

// ggml's threshold below which a group's largest magnitude counts as zero.
constexpr float GROUP_MAX_EPS = 1e-15f;

constexpr int QK4_0 = 32, QK4_1 = 32, QK5_0 = 32, QK5_1 = 32, QK8_0 = 32, QK8_1 = 32;
constexpr int QK_K = 256;
constexpr int K_SCALE_SIZE = 12;

// Block layouts, byte for byte those of ggml-common.h. fp16 fields are raw uint16_t bits.
struct block_q4_0 { uint16_t d; uint8_t qs[QK4_0 / 2]; };
struct block_q4_1 { uint16_t d; uint16_t m; uint8_t qs[QK4_1 / 2]; };
struct block_q5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[QK5_0 / 2]; };
struct block_q5_1 { uint16_t d; uint16_t m; uint8_t qh[4]; uint8_t qs[QK5_1 / 2]; };
struct block_q8_0 { uint16_t d; int8_t qs[QK8_0]; };
struct block_q8_1 { uint16_t d; uint16_t s; int8_t qs[QK8_1]; };
struct block_q2_K { uint8_t scales[QK_K / 16]; uint8_t qs[QK_K / 4]; uint16_t d; uint16_t dmin; };
struct block_q3_K { uint8_t hmask[QK_K / 8]; uint8_t qs[QK_K / 4]; uint8_t scales[12]; uint16_t d; };
struct block_q4_K { uint16_t d; uint16_t dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qs[QK_K / 2]; };
struct block_q5_K { uint16_t d; uint16_t dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; };
struct block_q6_K { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; uint16_t d; };
struct block_q8_K { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; };
// IQ4_NL / IQ4_XS: 4-bit indices into a fixed non-linear table of int8 levels (kIq4Levels), a
// 32-element block with one fp16 scale (IQ4_NL, dot with Q8_0) or a 256-element super-block of 8
// such blocks with 6-bit signed block scales (stored + 32) under one fp16 scale (IQ4_XS, dot with
// Q8_K). As in Q4_0, byte j of a block holds element j (low nibble) and j + 16 (high nibble).
constexpr int QK4_NL = 32;
struct block_iq4_nl { uint16_t d; uint8_t qs[QK4_NL / 2]; };
struct block_iq4_xs { uint16_t d; uint16_t scales_h; uint8_t scales_l[QK_K / 64]; uint8_t qs[QK_K / 2]; };
static_assert(sizeof(block_iq4_nl) == 18 && sizeof(block_iq4_xs) == 136, "iq4 block layout");
/** The IQ4 levels, part of the format (ggml's kvalues_iq4nl). */
inline constexpr int8_t kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
/** The IQ4 levels + 128 (1..241): unsigned for VPDPBUSD against activations prepared with -128 x their sums. */
alignas(16) inline constexpr uint8_t kIq4LevelsU128[16] = {1, 24, 45, 63, 79, 93, 106, 118, 129, 141, 153, 166, 181, 197, 217, 241};
/** IQ4_XS block ib's scale, 0..63 (the signed scale + 32). */
inline int iq4_xs_scale(const block_iq4_xs & b, int ib) { return ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((b.scales_h >> (2 * ib)) & 3) << 4); }

// MXFP4 (OCP microscaling): 32 FP4 (E2M1) values, stored as 4-bit indices into their doubled
// values (kFp4Levels), under one power-of-two scale E8M0 (e: 2^(e - 127), halved to undo the
// doubling). Byte j holds element j (low nibble) and j + 16 (high). Dot with Q8_0, as IQ4_NL.
struct block_mxfp4 { uint8_t e; uint8_t qs[16]; };
static_assert(sizeof(block_mxfp4) == 17, "mxfp4 block layout");
inline constexpr int8_t kFp4Levels[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
/** kFp4Levels + 12 (0..24): unsigned for VPDPBUSD against activations prepared with -12 x their sums. */
alignas(16) inline constexpr uint8_t kFp4LevelsU12[16] = {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};
/** 2^(e - 128): the block scale for the doubled levels (ggml's GGML_E8M0_TO_FP32_HALF). */
inline float e8m0_half(uint8_t e) {
    const uint32_t bits = e < 2 ? (uint32_t(0x00200000) << e) : (uint32_t(e - 1) << 23);
    float f;
    __builtin_memcpy(&f, &bits, 4);
    return f;
}

// NVFP4: 64 FP4 (E2M1) values in 4 sub-blocks of 16, each under its own unsigned E4M3 scale
// (d[s]); as in MXFP4 the 4-bit indices name kFp4Levels (doubled values) and the scale is read
// halved. Sub-block s is qs[8s .. 8s+7]: byte j holds element j (low nibble) and j + 8 (high).
// Dot with Q8_0 (sub-blocks 0-1 against one Q8_0 block, 2-3 against the next).
constexpr int QK_NVFP4 = 64, QK_NVFP4_SUB = 16;
struct block_nvfp4 { uint8_t d[QK_NVFP4 / QK_NVFP4_SUB]; uint8_t qs[QK_NVFP4 / 2]; };
static_assert(sizeof(block_nvfp4) == 36, "nvfp4 block layout");
/** ggml_ue4m3_to_fp32: an UE4M3 scale (bias 7; bit 7 ignored, 0 and 0x7F read 0) times 0.5. */
inline float ue4m3_half(uint8_t x) {
    if (x == 0 || x == 0x7F) return 0.0f;
    const int exp = (x >> 3) & 0xF, man = x & 7;
    // Both forms are exact in float (ldexpf of at most 4 significant bits).
    const float raw = exp == 0 ? std::ldexp(static_cast<float>(man), -9) : std::ldexp(1.0f + static_cast<float>(man) / 8.0f, exp - 7);
    return raw * 0.5f;
}

// Q1_0: 128 signs under one fp16 scale: bit j of the block (qs[j / 8] bit j % 8) set means +d, clear -d.
// Q2_0: 64 2-bit codes q under one fp16 scale, value (q - 1) * d; qs[j / 4] bits 2(j % 4).. hold element j.
// Both dot with Q8_0.
constexpr int QK1_0 = 128, QK2_0 = 64;
struct block_q1_0 { uint16_t d; uint8_t qs[QK1_0 / 8]; };
struct block_q2_0 { uint16_t d; uint8_t qs[QK2_0 / 4]; };
static_assert(sizeof(block_q1_0) == 18 && sizeof(block_q2_0) == 18, "q1_0 / q2_0 block layout");

// Ternary types (BitNet b1.58, TriLMs): values in {-1, 0, 1} * d over a 256-element block, dot with Q8_K.
// TQ1_0 packs 5 trits per byte (qs: elements 0..159 five per byte over 32 bytes, then 160..239 over
// 16 bytes) and 4 per byte in qh (elements 240..255), each byte holding ceil(t * 256 / 243) of its
// base-3 number t, first element most significant. TQ2_0: 2 bits per element, q - 1.
struct block_tq1_0 { uint8_t qs[(QK_K - 4 * QK_K / 64) / 5]; uint8_t qh[QK_K / 64]; uint16_t d; };
struct block_tq2_0 { uint8_t qs[QK_K / 4]; uint16_t d; };
static_assert(sizeof(block_tq1_0) == 54 && sizeof(block_tq2_0) == 66, "ternary block layout");

// Codebook i-quants (quants_iq.cpp; grids in iq_grids.h).
struct block_iq2_xxs { uint16_t d; uint16_t qs[QK_K / 8]; };
struct block_iq2_xs { uint16_t d; uint16_t qs[QK_K / 8]; uint8_t scales[QK_K / 32]; };
struct block_iq2_s { uint16_t d; uint8_t qs[QK_K / 4]; uint8_t qh[QK_K / 32]; uint8_t scales[QK_K / 32]; };
struct block_iq3_xxs { uint16_t d; uint8_t qs[3 * QK_K / 8]; };
struct block_iq3_s { uint16_t d; uint8_t qs[QK_K / 4]; uint8_t qh[QK_K / 32]; uint8_t signs[QK_K / 8]; uint8_t scales[QK_K / 64]; };
struct block_iq1_s { uint16_t d; uint8_t qs[QK_K / 8]; uint16_t qh[QK_K / 32]; };
struct block_iq1_m { uint8_t qs[QK_K / 8]; uint8_t qh[QK_K / 16]; uint8_t scales[QK_K / 32]; };
static_assert(sizeof(block_iq2_xxs) == 66 && sizeof(block_iq2_xs) == 74 && sizeof(block_iq2_s) == 82 &&
              sizeof(block_iq3_xxs) == 98 && sizeof(block_iq3_s) == 110 && sizeof(block_iq1_s) == 50 &&
              sizeof(block_iq1_m) == 56, "i-quant block layout");

// Scalar dequantize / dot with Q8_K / reference quantize of the codebook i-quants.
#define KAIL_IQ_FNS(T)                                                  \
    void dequantize_##T(const void * vx, float * y, int64_t k);         \
    float dot_##T(int64_t n, const void * vx, const void * vy);         \
    void quantize_##T##_ref(const float * x, void * vy, int64_t k);
KAIL_IQ_FNS(iq2_xxs)
KAIL_IQ_FNS(iq2_xs)
KAIL_IQ_FNS(iq2_s)
KAIL_IQ_FNS(iq3_xxs)
KAIL_IQ_FNS(iq3_s)
KAIL_IQ_FNS(iq1_s)
KAIL_IQ_FNS(iq1_m)
#undef KAIL_IQ_FNS

static_assert(sizeof(block_q4_0) == 18 && sizeof(block_q4_1) == 20 && sizeof(block_q5_0) == 22 &&
              sizeof(block_q5_1) == 24 && sizeof(block_q8_0) == 34 && sizeof(block_q8_1) == 36,
              "legacy block layout");
static_assert(sizeof(block_q2_K) == 84 && sizeof(block_q3_K) == 110 && sizeof(block_q4_K) == 144 &&
              sizeof(block_q5_K) == 176 && sizeof(block_q6_K) == 210 && sizeof(block_q8_K) == 292,
              "k-quant block layout");

// One tile of a matrix product: out[t][r] = dot(weight row r, activation row a[t]) for r < nr,
// t < nt, over k elements. Weight rows start at w and are w_stride bytes apart; a[t] points at
// an activation row in the kernel's layout (see weight_kernels::prepare); out[t] points at the
// float that receives row 0's result for token t.
using gemm_fn = void (*)(int64_t k, const uint8_t * w, size_t w_stride, int nr,
                         const uint8_t * const * a, int nt, float * const * out);
// Converts one row of k elements of the standard vec_dot_type layout into the kernel's layout.
using prepare_fn = void (*)(int64_t k, const void * src, void * dst);
using prepared_size_fn = size_t (*)(int64_t k);
// Activation quantizer: k floats to the standard layout of a vec_dot_type.
using from_float_fn = void (*)(const float * x, void * y, int64_t k);
using convert_fn = void (*)(const void * x, void * y, int64_t n);

struct weight_kernels {
    uint32_t vd_type = 0;        // ggml's vec_dot_type
    gemm_fn gemm = nullptr;      // null: the type has no dot product
    int max_r = 1;               // gemm accepts nr <= max_r
    int max_t = 1;               // gemm accepts nt <= max_t
    // Tokens matmul's chunk_cols sizes the activation chunks for (0: max_t): a kernel whose tiles
    // grow past the width its chunks were cut for keeps the old cuts, and so its bits.
    int chunk_t = 0;
    int decode_r = 1;            // rows per call in matrix x vector
    // Optional kernel for matrix x vector (nt == 1, nr <= decode_r); null means gemm. Lets a level
    // stream weights with a different loop shape than its prefill tiles.
    gemm_fn gemm_decode = nullptr;
    // Optional: a layout the kernel prefers for activations. When null the kernel reads standard
    // vec_dot_type rows (row_size(vd_type, k) bytes each).
    prepare_fn prepare = nullptr;
    prepared_size_fn prepared_size = nullptr;
    // Optional: floats straight to the prepared layout, bit-identical to from_float[vd_type]
    // followed by prepare (saves a pass per matmul call).
    from_float_fn quantize_prepared = nullptr;
};

struct kernel_table {
    const char * level = "scalar";
    weight_kernels w[KAIL_TYPE_COUNT];
    from_float_fn from_float[KAIL_TYPE_COUNT] = {};  // indexed by vec_dot_type
    convert_fn fp16_to_fp32 = nullptr, fp32_to_fp16 = nullptr;
    convert_fn bf16_to_fp32 = nullptr, fp32_to_bf16 = nullptr;
    // Optional: dequantize_row for a type at this level, the reference's bits (a quantized KV
    // cache's rows, read once per attention pass). Null: the reference.
    convert_fn to_float[KAIL_TYPE_COUNT] = {};
    // Attention's probability-weighted sum of cached rows (see attention_weighted_rows in
    // kail/quants.h): x rows of `width` F32 / F16 values, xs elements apart.
    void (*weighted_rows_f32)(const float * x, size_t xs, int64_t n, int64_t width, const float * p, size_t ps, int64_t group,
                              float * out, size_t os) = nullptr;
    void (*weighted_rows_f16)(const uint16_t * x, size_t xs, int64_t n, int64_t width, const float * p, size_t ps,
                              int64_t group, float * out, size_t os) = nullptr;
    // The same over Q8_0 rows (xs bytes apart; width a multiple of 32): each value q * d, then one
    // fused multiply-add per row in row order, at every level.
    void (*weighted_rows_q8_0)(const uint8_t * x, size_t xs, int64_t n, int64_t width, const float * p, size_t ps,
                               int64_t group, float * out, size_t os) = nullptr;
    // Attention's softmax (attention_scale_max and attention_exp_sum in kail/quants.h).
    float (*scale_max)(float * x, int64_t n, float scale, const float * bias) = nullptr;
    double (*exp_sum)(float * x, int64_t n, float mx) = nullptr;
};

// The 16 lane sums of attention_exp_sum, added in lane order (every level ends with this).
inline double exp_lane_total(const double * lane) {
    double s = 0.0;
    for (int l = 0; l < 16; l++) s += lane[l];
    return s;
}

// Prepared activation layouts shared by the AVX2 and AVX-512 kernels (built by scalar code in
// quants.cpp so they are identical whatever the level).
//
// "Split" groups serve Q4_0/Q5_0/Q8_0 (Q8_0 activations) and Q4_1/Q5_1 (Q8_1): 4 blocks = 128
// values per 256-byte group, laid out to match the nibble order of the 4-bit weights:
//   lo[64]  = first 16 quants of blocks 0..3      hi[64] = last 16 quants of blocks 0..3
//   c[16]   = int32 per 4-byte lane: -offset * (sum of that lane's lo and hi bytes), which turns
//             a product with unsigned weights (q + offset) back into one with signed ones
//             (Q8_1 groups store the block's s = d * sum(q) as float in lane 4b instead, for the
//             min term)
//   d[16]   = float activation scale, lane 4b..4b+3 = block b
// Missing blocks of a last partial group are zero.
constexpr size_t PREP_SPLIT_GROUP = 256;

// Matrix x vector streams one row (or a few) per call, faster than the hardware prefetcher follows
// on some machines: the kernels prefetch the same block of the rows at least kRowsPrefetch bytes on
// in memory (the rows the next calls read). rows_ahead is that distance for `rows` rows of ws
// bytes per call (0 for ws 0: one row).
constexpr size_t kRowsPrefetch = 4096;
inline size_t rows_ahead(size_t ws, size_t rows) {
    const size_t g = rows * ws;
    return g ? g * ((kRowsPrefetch + g - 1) / g) : 0;
}

// Prefetches n bytes from p into L1 (prefetcht0). Prefetching never faults, so running past the
// matrix end is harmless.
inline __attribute__((always_inline)) void prefetch_bytes(const void * p, int n) {
    for (int l = 0; l < n; l += 64) __builtin_prefetch(static_cast<const char *>(p) + l, 0, 3);
}
size_t prepared_size_split(int64_t k);
void prepare_split_q8_0_off8(int64_t k, const void * src, void * dst);    // for Q4_0
void prepare_split_q8_0_off16(int64_t k, const void * src, void * dst);   // for Q5_0
void prepare_split_q8_0_off12(int64_t k, const void * src, void * dst);   // for MXFP4 (levels + 12)
void prepare_split_q8_0_off128(int64_t k, const void * src, void * dst);  // for Q8_0
void prepare_split_q8_1(int64_t k, const void * src, void * dst);         // for Q4_1 / Q5_1
// F16 / BF16 weights: activations (already rounded to fp16 / bf16) widened back to float.
size_t prepared_size_f32(int64_t k);
void prepare_f16_as_f32(int64_t k, const void * src, void * dst);
void prepare_bf16_as_f32(int64_t k, const void * src, void * dst);

// Tables per level. The SIMD ones return nullptr when this build or this CPU lacks the level.
const kernel_table & kernels_scalar();
const kernel_table * kernels_avx2();
const kernel_table * kernels_avx512();
// The table for a level name ("scalar", "avx2", "avx512"), or nullptr if unavailable.
const kernel_table * kernels_for_level(const char * level);
// The table chosen once from cpu_kernel_level().
const kernel_table & kernels_active();

// Filled by the ISA files (declared here so quants.cpp can build the tables).
void kernels_init_avx2(kernel_table & t, bool vnni);
void kernels_init_avx512(kernel_table & t);
// The codebook i-quants' wide prompt tiles (quants_iq_avx512.cpp), over kernels_init_avx2's.
void kernels_init_iq_avx512(kernel_table & t);

// Scalar reference pieces reused by the SIMD tables for types they do not accelerate.
void kernels_init_scalar(kernel_table & t);

// ggml's make_qp_quants (quants.cpp), for the i-quant quantizers.
float make_qp_quants_ggml(int n, int nmax, const float * x, uint8_t * L, const float * quant_weights);
// ggml's quantizers for the codebook i-quants (quants_iq_ggml.cpp): n values (whole super-blocks)
// of one row with its importance values qw (n of them; null: none, which IQ2_XXS, IQ2_XS and
// IQ1_S refuse, as ggml asserts: iq_ggml_needs_weights).
void quantize_iq_ggml_row(uint32_t type, const float * x, void * y, int64_t n, const float * qw);
bool iq_ggml_needs_weights(uint32_t type);

} // namespace kail::cpu
