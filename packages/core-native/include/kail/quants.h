// Tensor-type kernels: fp16/bf16 conversion, (de)quantization and dot products with ggml's
// semantics (block layouts of ggml-common.h, the activation types of ggml-cpu's type_traits_cpu).
//
// Every function here validates its type and size and throws kail::error (KAIL_E_UNSUPPORTED for a
// type without kernels, KAIL_E_INVALID_ARG for a size that is not a whole number of blocks). The
// kernels are picked once per process from cpu_kernel_level() (KAIL_FORCE_ISA lowers it).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kail/types.h"

namespace kail {

// ---- scalar conversions (exact; fp16 rounding is round-to-nearest-even like F16C) ----
float    fp16_to_fp32(uint16_t h);
uint16_t fp32_to_fp16(float f);
float    bf16_to_fp32(uint16_t h);
// Round-to-nearest-even, NaN kept quiet: ggml's GGML_FP32_TO_BF16.
uint16_t fp32_to_bf16(float f);

// Row conversions (F16C / AVX-512 where present; bit-identical to the scalar ones).
void fp16_to_fp32_row(const uint16_t * x, float * y, int64_t n);
void fp32_to_fp16_row(const float * x, uint16_t * y, int64_t n);

// Attention's product of probabilities with the cached values, without transposing the cache:
// out[g * out_stride + c] = sum over j < n of p[g * p_stride + j] * v(j, c) for g < group, c < width,
// where v(j, c) is element c of row j (F32 or F16 values, row j at rows + j * row_stride bytes).
// Every sum is one fused multiply-add per row, rows in order j = 0, 1, ..., starting from 0: the
// same bits at every kernel level and whatever batch the row belongs to. Each row is read once
// for a tile of up to 4 of the `group` probability rows. Q8_0 rows (a quantized cache; width a
// multiple of 32) are turned to floats once each and added in row order, as ggml's flash attention.
// BF16, Q4_0, Q4_1, IQ4_NL, Q5_0 and Q5_1 rows are turned to floats 256 rows at a time and summed
// as F32 rows per 256 rows, those sums added in order (also the same bits at every level and batch).
void attention_weighted_rows(uint32_t type, const void * rows, size_t row_stride, int64_t n, int64_t width, const float * p,
                             size_t p_stride, int64_t group, float * out, size_t out_stride);
// Attention's softmax, its per-element part: x[j] = x[j] * scale, plus bias[j] when bias is given
// (two roundings, no fused multiply-add), for j < n; returns the largest (-inf for n = 0).
float attention_scale_max(float * x, int64_t n, float scale, const float * bias);
// x[j] = attention_exp(x[j] - mx) for j < n; returns their sum in double, element j added to lane
// j % 16 in order, then the 16 lanes in order. The same bits at every kernel level.
double attention_exp_sum(float * x, int64_t n, float mx);
// exp as attention_exp_sum computes it (Cephes' polynomial in float operations; within 2 ulp of
// exp; 0 below ln(2^-126) = -87.337).
float attention_exp(float x);
// The types a KV cache may have (llama.cpp's -ctk/-ctv list): F32 F16 BF16 Q8_0 Q4_0 Q4_1 IQ4_NL Q5_0 Q5_1.
bool is_kv_cache_type(uint32_t type);
void bf16_to_fp32_row(const uint16_t * x, float * y, int64_t n);
void fp32_to_bf16_row(const float * x, uint16_t * y, int64_t n);

// ---- what a type supports ----
// dequantize_row: F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q8_1 Q2_K..Q6_K Q8_K.
bool type_can_dequantize(uint32_t type);
// quantize_row: the same set.
bool type_can_quantize(uint32_t type);
// As the weight of a dot product / matmul: F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K..Q6_K, the i-quants,
// MXFP4, NVFP4, Q1_0, Q2_0 (Q8_0 activations) and TQ1_0, TQ2_0 (Q8_K activations).
bool type_can_dot(uint32_t type);

// The type activations are converted to before a dot product with weights of `type`
// (ggml-cpu's vec_dot_type): F32->F32, F16->F16, BF16->BF16, Q4_0/Q5_0/Q8_0->Q8_0,
// Q4_1/Q5_1->Q8_1, K-quants->Q8_K. Throws KAIL_E_UNSUPPORTED when type_can_dot(type) is false.
uint32_t vec_dot_type(uint32_t type);

// ---- rows ----
// n elements of `type` (n a multiple of the block size) to float, bit-exact with ggml's
// dequantize_row_* evaluated without FMA contraction.
void dequantize_row(uint32_t type, const void * src, float * dst, int64_t n);

// n floats to `type`; returns the bytes written (row_size(type, n)). Q4_0..Q8_1 are exactly
// ggml's quantize_row_*_ref; K-quants follow ggml's *_ref algorithms (no importance matrix).
// Q8_K is ggml's quantize_row_q8_K_ref (bsums included).
size_t quantize_row(uint32_t type, const float * src, void * dst, int64_t n);

// What llama.cpp's ggml_quantize_chunk writes without an importance matrix (llama-quantize's
// files): F32 F16 BF16, Q4_0..Q8_0, Q2_K..Q6_K, MXFP4, NVFP4, Q1_0, Q2_0, TQ1_0 and TQ2_0 as
// quantize_row (ggml's reference quantizers, which are what it writes for those), IQ4_NL and IQ4_XS with ggml's
// own scale search (quantize_row's IQ4 is a simpler one that defines the test models' bytes).
bool type_can_quantize_file(uint32_t type);
size_t quantize_row_file(uint32_t type, const float * src, void * dst, int64_t n);
// The same for nrows rows of n_per_row values with an importance matrix qw (n_per_row values, the
// mean squared activation each column sees; null: none), as ggml_quantize_chunk with imatrix does:
// ggml's weighted searches for Q4_0..Q5_1, Q2_K..Q6_K, IQ4_NL and IQ4_XS; the other types ignore it.
size_t quantize_rows_file(uint32_t type, const float * src, void * dst, int64_t nrows, int64_t n_per_row, const float * qw);

// Activation quantizer for a vec_dot_type (F32, F16, BF16, Q8_0, Q8_1, Q8_K), exactly as ggml-cpu
// computes it on x86: Q8_0/Q8_1 use d = amax/127, q = round-half-even(x * 127/amax) (the AVX path of
// quantize_row_q8_0/q8_1, with Q8_1's s = fp16(d * sum(q))), Q8_K is quantize_row_q8_K_ref.
// Returns the bytes written.
size_t quantize_row_activations(uint32_t vd_type, const float * src, void * dst, int64_t n);

// Dot product of n weights of `type` with n activations already in vec_dot_type(type).
float vec_dot(uint32_t type, int64_t n, const void * w, const void * a);

// Level of the kernels in use: "avx512", "avx2" or "scalar".
const char * quants_kernel_level();

} // namespace kail
