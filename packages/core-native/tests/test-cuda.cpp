// Runs the Q8_0 dequantize kernel on a GPU and compares with the CPU definition.
// Skips (exit 77) without a CUDA build or device; never fails for lack of one.
#include "kail/cuda.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

static uint16_t f32_to_f16_bits(float f) {
    // Exact for the small powers of two used below.
    uint32_t x; std::memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000, exp = ((x >> 23) & 0xff), mant = x & 0x7fffff;
    int e = static_cast<int>(exp) - 127 + 15;
    return static_cast<uint16_t>(sign | (e << 10) | (mant >> 13));
}

int main() {
    if (!kail::cuda_compiled()) { std::printf("SKIP: built without CUDA\n"); return 77; }
    if (kail::cuda_device_count() == 0) { std::printf("SKIP: no CUDA device\n"); return 77; }
    kail::cuda_device_info info;
    kail::cuda_device_info_get(0, info);
    std::printf("device 0: %s, %zu MiB\n", info.name.c_str(), info.total_bytes >> 20);
    const int64_t nb = 1000;
    std::vector<uint8_t> blocks(nb * 34);
    std::vector<float> expect(nb * 32);
    for (int64_t b = 0; b < nb; b++) {
        float d = std::ldexp(1.0f, static_cast<int>(b % 7) - 3);
        uint16_t h = f32_to_f16_bits(d);
        std::memcpy(&blocks[b * 34], &h, 2);
        for (int i = 0; i < 32; i++) {
            int8_t q = static_cast<int8_t>((b * 31 + i * 17) % 255 - 127);
            blocks[b * 34 + 2 + i] = static_cast<uint8_t>(q);
            expect[b * 32 + i] = d * q;
        }
    }
    std::vector<float> out(nb * 32);
    std::string err;
    if (!kail::cuda_dequantize_q8_0(0, blocks.data(), nb, out.data(), err)) { std::fprintf(stderr, "cuda: %s\n", err.c_str()); return 1; }
    for (size_t i = 0; i < out.size(); i++) {
        if (out[i] != expect[i]) { std::fprintf(stderr, "mismatch at %zu: %f vs %f\n", i, out[i], expect[i]); return 1; }
    }
    std::printf("cuda dequantize_q8_0 matches CPU on %lld values\n", static_cast<long long>(nb * 32));
    return 0;
}
