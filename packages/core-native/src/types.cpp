#include "kail/types.h"

#include <cstdio>
#include <string>

namespace kail {

namespace {

type_traits make(const char * name, int64_t bs, size_t ts, bool compute) {
    return type_traits{name, bs, ts, compute};
}

struct type_table {
    type_traits t[KAIL_TYPE_COUNT] = {};
    type_table() {
        t[KAIL_TYPE_F32]     = make("F32", 1, 4, true);
        t[KAIL_TYPE_F16]     = make("F16", 1, 2, true);
        t[KAIL_TYPE_Q4_0]    = make("Q4_0", 32, 18, true);
        t[KAIL_TYPE_Q4_1]    = make("Q4_1", 32, 20, true);
        t[KAIL_TYPE_Q5_0]    = make("Q5_0", 32, 22, true);
        t[KAIL_TYPE_Q5_1]    = make("Q5_1", 32, 24, true);
        t[KAIL_TYPE_Q8_0]    = make("Q8_0", 32, 34, true);
        t[KAIL_TYPE_Q8_1]    = make("Q8_1", 32, 36, false);
        t[KAIL_TYPE_Q2_K]    = make("Q2_K", 256, 84, true);
        t[KAIL_TYPE_Q3_K]    = make("Q3_K", 256, 110, true);
        t[KAIL_TYPE_Q4_K]    = make("Q4_K", 256, 144, true);
        t[KAIL_TYPE_Q5_K]    = make("Q5_K", 256, 176, true);
        t[KAIL_TYPE_Q6_K]    = make("Q6_K", 256, 210, true);
        t[KAIL_TYPE_Q8_K]    = make("Q8_K", 256, 292, false);
        t[KAIL_TYPE_IQ2_XXS] = make("IQ2_XXS", 256, 66, true);
        t[KAIL_TYPE_IQ2_XS]  = make("IQ2_XS", 256, 74, true);
        t[KAIL_TYPE_IQ3_XXS] = make("IQ3_XXS", 256, 98, true);
        t[KAIL_TYPE_IQ1_S]   = make("IQ1_S", 256, 50, true);
        t[KAIL_TYPE_IQ4_NL]  = make("IQ4_NL", 32, 18, true);
        t[KAIL_TYPE_IQ3_S]   = make("IQ3_S", 256, 110, true);
        t[KAIL_TYPE_IQ2_S]   = make("IQ2_S", 256, 82, true);
        t[KAIL_TYPE_IQ4_XS]  = make("IQ4_XS", 256, 136, true);
        t[KAIL_TYPE_I8]      = make("I8", 1, 1, false);
        t[KAIL_TYPE_I16]     = make("I16", 1, 2, false);
        t[KAIL_TYPE_I32]     = make("I32", 1, 4, false);
        t[KAIL_TYPE_I64]     = make("I64", 1, 8, false);
        t[KAIL_TYPE_F64]     = make("F64", 1, 8, false);
        t[KAIL_TYPE_IQ1_M]   = make("IQ1_M", 256, 56, true);
        t[KAIL_TYPE_BF16]    = make("BF16", 1, 2, true);
        t[KAIL_TYPE_TQ1_0]   = make("TQ1_0", 256, 54, true);
        t[KAIL_TYPE_TQ2_0]   = make("TQ2_0", 256, 66, true);
        t[KAIL_TYPE_MXFP4]   = make("MXFP4", 32, 17, true);
        t[KAIL_TYPE_NVFP4]   = make("NVFP4", 64, 36, true);
        t[KAIL_TYPE_Q1_0]    = make("Q1_0", 128, 18, true);
        t[KAIL_TYPE_Q2_0]    = make("Q2_0", 64, 18, true);
    }
};

const type_table & table() {
    static const type_table tt;
    return tt;
}

} // namespace

const type_traits * type_traits_get(uint32_t type) {
    if (type >= KAIL_TYPE_COUNT) return nullptr;
    const type_traits & tr = table().t[type];
    return tr.name ? &tr : nullptr;
}

const char * type_name(uint32_t type) {
    const type_traits * tr = type_traits_get(type);
    if (tr) return tr->name;
    static thread_local char buf[32];
    std::snprintf(buf, sizeof buf, "unknown(%u)", type);
    return buf;
}

size_t row_size(uint32_t type, int64_t n) {
    const type_traits * tr = type_traits_get(type);
    if (!tr || n < 0 || n % tr->block_size != 0) return 0;
    return static_cast<size_t>(n / tr->block_size) * tr->type_size;
}

} // namespace kail
