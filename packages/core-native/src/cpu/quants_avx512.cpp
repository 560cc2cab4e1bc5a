// AVX-512 (F/BW/VL/DQ + VNNI) kernels.
#include "cpu/quants_impl.h"

namespace kail::cpu {

void kernels_init_avx512(kernel_table & t) { t.level = "avx512"; }

} // namespace kail::cpu
