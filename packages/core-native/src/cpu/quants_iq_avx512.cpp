// The codebook i-quants' wide prompt tiles for the AVX-512 level (kernels_init_iq_avx512): the
// AVX2 kernel file compiled again with the AVX-512 flags (this file's name gives them), where its
// iq_wide kernel is built on the same block decoders as its kquant tiles. Everything it defines
// lives in an anonymous namespace, so the two copies never meet; only the init function differs.
#define KAIL_IQ_WIDE_TU 1
#pragma GCC diagnostic ignored "-Wunused-function"
// (GCC 12 takes the undefined pass-through operand of some AVX-512 intrinsics, such as
// _mm512_permutexvar_ps and _mm512_castps512_ps256, for an uninitialized value.)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include "quants_avx2.cpp"
