#include "kail/cpu_features.h"
#include "kail/types.h"

#include <cstdio>
#include <cstring>

int main() {
    const kail::cpu_features & f = kail::cpu_features_get();
    int fails = 0;
    if (f.logical_cores < 1 || f.physical_cores < 1 || f.physical_cores > f.logical_cores) {
        std::fprintf(stderr, "bad core counts %d/%d\n", f.physical_cores, f.logical_cores);
        fails++;
    }
    // Implications that hold on every real CPU: a kernel level never exceeds what was detected.
    const char * lvl = kail::cpu_kernel_level();
    if (std::strcmp(lvl, "avx512") == 0 && !(f.avx512f && f.avx2)) { std::fprintf(stderr, "avx512 level without avx512f\n"); fails++; }
    if (std::strcmp(lvl, "avx2") == 0 && !f.avx2) { std::fprintf(stderr, "avx2 level without avx2\n"); fails++; }
    if (f.avx2 && !f.avx) { std::fprintf(stderr, "avx2 without avx\n"); fails++; }
    std::printf("kernel level %s, cores %d physical / %d logical, features:", lvl, f.physical_cores, f.logical_cores);
    for (auto & n : kail::cpu_features_names(f)) std::printf(" %s", n.c_str());
    std::printf("\n");
    // Type table: ggml's block layouts.
    struct { uint32_t t; int64_t bs; size_t ts; } expect[] = {
        {kail::KAIL_TYPE_F32, 1, 4}, {kail::KAIL_TYPE_F16, 1, 2}, {kail::KAIL_TYPE_BF16, 1, 2},
        {kail::KAIL_TYPE_Q4_0, 32, 18}, {kail::KAIL_TYPE_Q4_1, 32, 20}, {kail::KAIL_TYPE_Q5_0, 32, 22},
        {kail::KAIL_TYPE_Q5_1, 32, 24}, {kail::KAIL_TYPE_Q8_0, 32, 34}, {kail::KAIL_TYPE_Q2_K, 256, 84},
        {kail::KAIL_TYPE_Q3_K, 256, 110}, {kail::KAIL_TYPE_Q4_K, 256, 144}, {kail::KAIL_TYPE_Q5_K, 256, 176},
        {kail::KAIL_TYPE_Q6_K, 256, 210}, {kail::KAIL_TYPE_Q8_K, 256, 292},
    };
    for (auto & e : expect) {
        const kail::type_traits * tr = kail::type_traits_get(e.t);
        if (!tr || tr->block_size != e.bs || tr->type_size != e.ts) {
            std::fprintf(stderr, "type %u has wrong traits\n", e.t);
            fails++;
        }
    }
    if (kail::type_traits_get(4) != nullptr || kail::type_traits_get(1000) != nullptr) { std::fprintf(stderr, "retired/unknown id accepted\n"); fails++; }
    if (kail::row_size(kail::KAIL_TYPE_Q4_K, 512) != 288 || kail::row_size(kail::KAIL_TYPE_Q4_K, 100) != 0) { std::fprintf(stderr, "row_size wrong\n"); fails++; }
    return fails ? 1 : 0;
}
