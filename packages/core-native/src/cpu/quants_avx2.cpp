// AVX2 (+FMA, F16C, optional AVX-VNNI) kernels.
#include "cpu/quants_impl.h"

namespace kail::cpu {

void kernels_init_avx2(kernel_table & t, bool vnni) {
    t.level = "avx2";
    (void)vnni;
}

} // namespace kail::cpu
