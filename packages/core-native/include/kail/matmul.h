// Matrix products against GGUF weight matrices: Y[t][r] = sum_k X[t][k] * W[r][k].
//
// W holds `rows` rows of `cols` elements of `type`, each row w_stride bytes after the previous one
// (a GGUF 2-D tensor with ne0 = cols, ne1 = rows has w_stride = row_size(type, cols)). Activations
// are first converted to vec_dot_type(type) (quants.h), exactly as ggml-cpu does, then rows are
// split across the pool. n == 1 is decode (matrix x vector); n > 1 is blocked over several tokens
// per weight tile so each weight block is read once for many tokens.
//
// All strides are in bytes. Errors throw kail::error: KAIL_E_UNSUPPORTED for a type without dot
// products, KAIL_E_INVALID_ARG for sizes (cols not a multiple of the block size, strides too small).
//
// Numerics: integer block sums are exact (as in ggml); only the float summation order differs from
// ggml's. Batch invariance: a token's results are the same bits whatever the batch around it: alone
// (n == 1, decode), at any position of any n, with any pool. Every level runs each output through
// one accumulator chain in block order, the decode kernels perform the tiles' operations, and
// long rows are cut into chunks at places that depend on type, level and cols only (decode cuts at
// the same places). Speculative verification depends on this: k drafted tokens scored in one pass
// must choose what one-token-at-a-time decoding chooses (tests/test-matmul.cpp checks it).
//
// Threads: pool == nullptr runs on the calling thread. Decode splits rows into chunks streamed one
// row at a time (one sequential stream per thread measured fastest from DRAM); calls smaller than
// ~32 KiB of weights stay on the calling thread.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kail/types.h"

namespace kail {

class threadpool;

// X is n rows of cols floats (x_stride bytes apart); Y is n rows of `rows` floats (y_stride bytes
// apart). pool may be null (runs on the calling thread).
void matmul(uint32_t type, const void * w, size_t w_stride, int64_t rows, int64_t cols,
            const float * x, size_t x_stride, int64_t n,
            float * y, size_t y_stride, threadpool * pool);

// Bytes of one activation row for weights of `type`: row_size(vec_dot_type(type), cols).
size_t matmul_activation_row_size(uint32_t type, int64_t cols);

// Converts n activation rows to vec_dot_type(type), each matmul_activation_row_size() bytes at
// dst + t * dst_stride. Lets a MoE layer quantize once and apply many experts.
void matmul_quantize_activations(uint32_t type, int64_t cols, const float * x, size_t x_stride, int64_t n,
                                 void * dst, size_t dst_stride, threadpool * pool);

// matmul with activations already in vec_dot_type(type) (from matmul_quantize_activations or
// quantize_row_activations): row t at xq + t * xq_stride.
void matmul_quantized(uint32_t type, const void * w, size_t w_stride, int64_t rows, int64_t cols,
                      const void * xq, size_t xq_stride, int64_t n,
                      float * y, size_t y_stride, threadpool * pool);

// Gather/scatter form for expert routing: token t reads activation row xq_rows[t] and writes its
// `rows` results to y_rows[t]. Rows need not be contiguous or ordered.
void matmul_quantized_rows(uint32_t type, const void * w, size_t w_stride, int64_t rows, int64_t cols,
                           const void * const * xq_rows, float * const * y_rows, int64_t n, threadpool * pool);

} // namespace kail
