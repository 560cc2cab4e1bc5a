// Tensor element types, numbered exactly as ggml numbers them in GGUF files.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kail {

enum kail_type : uint32_t {
    KAIL_TYPE_F32 = 0,
    KAIL_TYPE_F16 = 1,
    KAIL_TYPE_Q4_0 = 2,
    KAIL_TYPE_Q4_1 = 3,
    KAIL_TYPE_Q5_0 = 6,
    KAIL_TYPE_Q5_1 = 7,
    KAIL_TYPE_Q8_0 = 8,
    KAIL_TYPE_Q8_1 = 9,
    KAIL_TYPE_Q2_K = 10,
    KAIL_TYPE_Q3_K = 11,
    KAIL_TYPE_Q4_K = 12,
    KAIL_TYPE_Q5_K = 13,
    KAIL_TYPE_Q6_K = 14,
    KAIL_TYPE_Q8_K = 15,
    KAIL_TYPE_IQ2_XXS = 16,
    KAIL_TYPE_IQ2_XS = 17,
    KAIL_TYPE_IQ3_XXS = 18,
    KAIL_TYPE_IQ1_S = 19,
    KAIL_TYPE_IQ4_NL = 20,
    KAIL_TYPE_IQ3_S = 21,
    KAIL_TYPE_IQ2_S = 22,
    KAIL_TYPE_IQ4_XS = 23,
    KAIL_TYPE_I8 = 24,
    KAIL_TYPE_I16 = 25,
    KAIL_TYPE_I32 = 26,
    KAIL_TYPE_I64 = 27,
    KAIL_TYPE_F64 = 28,
    KAIL_TYPE_IQ1_M = 29,
    KAIL_TYPE_BF16 = 30,
    KAIL_TYPE_TQ1_0 = 34,
    KAIL_TYPE_TQ2_0 = 35,
    KAIL_TYPE_MXFP4 = 39,
    KAIL_TYPE_NVFP4 = 40,
    KAIL_TYPE_Q1_0 = 41,
    KAIL_TYPE_Q2_0 = 42,
    KAIL_TYPE_COUNT = 43,
};

struct type_traits {
    const char * name;      // nullptr for ids ggml never assigned or has retired
    int64_t      block_size; // elements per block
    size_t       type_size;  // bytes per block
    bool         compute;    // kail has dequantize / dot-product kernels for it
};

// Traits of a type id; returns nullptr for ids that are not a known ggml type.
const type_traits * type_traits_get(uint32_t type);

// Name of a type id, or "unknown(N)" style string kept in a static buffer per id.
const char * type_name(uint32_t type);

// Bytes taken by a row of n elements (n must be a multiple of the block size; returns 0 if not).
size_t row_size(uint32_t type, int64_t n);

} // namespace kail
