// Type conversions, (de)quantization and dot products, at every kernel level this CPU has.
//
// Golden hashes below come from the real ggml (node-llama-cpp 3.22.1's libggml-base.so and
// libggml-cpu-zen4.so, llama.cpp release v0.5.0) run on the same generated input: quantize with
// ggml_quantize_chunk (no imatrix), dequantize with to_float, activations with the CPU backend's
// from_float, and vec_dot values from its vec_dot.
#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/fp16.h"
#include "cpu/quants_impl.h"
#include "kail/quants.h"
#include "kail/status.h"

using namespace kail;
using namespace kail::cpu;

namespace {

int g_fails = 0;
long g_checks = 0;

#define CHECK(cond, ...)                                         \
    do {                                                         \
        g_checks++;                                              \
        if (!(cond)) {                                           \
            std::fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
            std::fprintf(stderr, __VA_ARGS__);                   \
            std::fprintf(stderr, "\n");                          \
            g_fails++;                                           \
        }                                                        \
    } while (0)

uint64_t fnv(const void * p, size_t n) {
    const uint8_t * b = static_cast<const uint8_t *>(p);
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) { h ^= b[i]; h *= 1099511628211ull; }
    return h;
}

struct rng {
    uint64_t s;
    uint64_t next() {
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    float uniform() { return static_cast<float>((next() >> 40) * (1.0 / 16777216.0)); }
};

// Mixed scales, outliers and all-zero blocks (same generator as the golden-data program).
void fill(std::vector<float> & v, uint64_t seed) {
    rng r{seed};
    for (size_t i = 0; i < v.size(); i++) {
        const float u = r.uniform() * 2.f - 1.f;
        const float scale = (i / 256) % 3 == 0 ? 0.02f : (i / 256) % 3 == 1 ? 1.0f : 37.5f;
        float x = u * scale;
        if ((r.next() & 63) == 0) x *= 8.f;
        if ((i / 32) % 17 == 5) x = 0.f;
        v[i] = x;
    }
}

struct level {
    std::string name;
    const kernel_table * t;
};

std::vector<level> levels() {
    static kernel_table avx2_novnni;
    std::vector<level> out{{"scalar", &kernels_scalar()}};
    if (const kernel_table * t = kernels_avx2()) {
        out.push_back({"avx2", t});
#if defined(__x86_64__) || defined(_M_X64)
        // The table a CPU without AVX-VNNI would get (the ISA files exist only on x86-64 builds).
        kernels_init_scalar(avx2_novnni);
        kernels_init_avx2(avx2_novnni, false);
        out.push_back({"avx2-novnni", &avx2_novnni});
#endif
    }
    if (const kernel_table * t = kernels_avx512()) out.push_back({"avx512", t});
    return out;
}

const uint32_t kWeightTypes[] = {KAIL_TYPE_F32, KAIL_TYPE_F16, KAIL_TYPE_BF16, KAIL_TYPE_Q4_0, KAIL_TYPE_Q4_1,
                                 KAIL_TYPE_Q5_0, KAIL_TYPE_Q5_1, KAIL_TYPE_Q8_0, KAIL_TYPE_Q2_K, KAIL_TYPE_Q3_K,
                                 KAIL_TYPE_Q4_K, KAIL_TYPE_Q5_K, KAIL_TYPE_Q6_K, KAIL_TYPE_IQ4_NL, KAIL_TYPE_IQ4_XS,
                                 KAIL_TYPE_IQ2_XXS, KAIL_TYPE_IQ2_XS, KAIL_TYPE_IQ2_S, KAIL_TYPE_IQ3_XXS, KAIL_TYPE_IQ3_S,
                                 KAIL_TYPE_IQ1_S, KAIL_TYPE_IQ1_M, KAIL_TYPE_MXFP4, KAIL_TYPE_NVFP4, KAIL_TYPE_Q1_0,
                                 KAIL_TYPE_Q2_0, KAIL_TYPE_TQ1_0, KAIL_TYPE_TQ2_0};

// ---------------------------------------------------------------- fp16 / bf16

// Round-to-nearest-even reference for fp32 -> fp16 by searching the neighbouring halves.
uint16_t fp16_reference(float f) {
    if (std::isnan(f)) return 0;  // not compared here
    const double v = f;
    const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
    const double a = std::fabs(v);
    if (a >= 65520.0) return sign | 0x7c00;
    uint16_t best = 0;
    double best_err = 1e300;
    // Halves are monotonic in their bit pattern; binary search the magnitude.
    uint32_t lo = 0, hi = 0x7bff;
    while (lo < hi) {
        const uint32_t mid = (lo + hi + 1) / 2;
        if (fp16_to_fp32_sw(static_cast<uint16_t>(mid)) <= a) lo = mid; else hi = mid - 1;
    }
    for (uint32_t c = lo; c <= std::min<uint32_t>(lo + 1, 0x7c00); c++) {
        const double err = std::fabs(static_cast<double>(fp16_to_fp32_sw(static_cast<uint16_t>(c))) - a);
        if (err < best_err || (err == best_err && !(c & 1))) { best = static_cast<uint16_t>(c); best_err = err; }
    }
    return sign | best;
}

void test_fp16() {
    // Every half round-trips; NaNs stay NaN.
    for (uint32_t h = 0; h < 65536; h++) {
        const float f = fp16_to_fp32(static_cast<uint16_t>(h));
        const uint16_t back = fp32_to_fp16(f);
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) {
            CHECK(std::isnan(f) && (back & 0x7e00) == 0x7e00, "fp16 NaN %04x", h);
        } else {
            CHECK(back == h, "fp16 round trip %04x -> %g -> %04x", h, f, back);
        }
    }
    // Correct rounding of arbitrary floats in and around the half range.
    rng r{1};
    for (int i = 0; i < 200000; i++) {
        uint32_t bits = static_cast<uint32_t>(r.next());
        const uint32_t e = 100 + (bits >> 24) % 50;  // exponents 2^-27 .. 2^22
        bits = (bits & 0x807fffffu) | (e << 23);
        if (i % 7 == 0) bits &= ~0x1fffu, bits |= 0x1000u;  // exact ties
        const float f = bits_f32(bits);
        CHECK(fp32_to_fp16(f) == fp16_reference(f), "fp32->fp16 %a: %04x vs %04x", f, fp32_to_fp16(f), fp16_reference(f));
    }
    // Row conversions at every level agree with the scalar ones bit for bit (NaNs included).
    std::vector<uint16_t> halves(65536 + 37);
    for (size_t i = 0; i < halves.size(); i++) halves[i] = static_cast<uint16_t>(i * 40503u);
    std::vector<float> floats(70001);
    for (size_t i = 0; i < floats.size(); i++) floats[i] = bits_f32(static_cast<uint32_t>(r.next()));
    floats[0] = 65519.99f; floats[1] = 65520.f; floats[2] = -0.f; floats[3] = 5.9604645e-08f; floats[4] = 2.9802322e-08f;
    for (const level & L : levels()) {
        std::vector<float> f(halves.size());
        L.t->fp16_to_fp32(halves.data(), f.data(), static_cast<int64_t>(halves.size()));
        for (size_t i = 0; i < halves.size(); i++)
            CHECK(f32_bits(f[i]) == f32_bits(fp16_to_fp32(halves[i])), "%s fp16_to_fp32 %04x", L.name.c_str(), halves[i]);
        std::vector<uint16_t> h(floats.size());
        L.t->fp32_to_fp16(floats.data(), h.data(), static_cast<int64_t>(floats.size()));
        for (size_t i = 0; i < floats.size(); i++)
            CHECK(h[i] == fp32_to_fp16(floats[i]), "%s fp32_to_fp16 %08x: %04x vs %04x", L.name.c_str(), f32_bits(floats[i]), h[i], fp32_to_fp16(floats[i]));
        L.t->fp32_to_bf16(floats.data(), h.data(), static_cast<int64_t>(floats.size()));
        for (size_t i = 0; i < floats.size(); i++)
            CHECK(h[i] == fp32_to_bf16(floats[i]), "%s fp32_to_bf16 %08x", L.name.c_str(), f32_bits(floats[i]));
        L.t->bf16_to_fp32(halves.data(), f.data(), static_cast<int64_t>(halves.size()));
        for (size_t i = 0; i < halves.size(); i++)
            CHECK(f32_bits(f[i]) == static_cast<uint32_t>(halves[i]) << 16, "%s bf16_to_fp32", L.name.c_str());
    }
    // bf16 rounding: ties to even, NaN quiet.
    CHECK(fp32_to_bf16(bits_f32(0x3f808000u)) == 0x3f80, "bf16 tie to even (down)");
    CHECK(fp32_to_bf16(bits_f32(0x3f818000u)) == 0x3f82, "bf16 tie to even (up)");
    CHECK(fp32_to_bf16(bits_f32(0x3f808001u)) == 0x3f81, "bf16 above tie");
    CHECK(fp32_to_bf16(bits_f32(0x7f800001u)) == 0x7fc0, "bf16 NaN quiet");
}

// ---------------------------------------------------------------- golden ggml data

struct golden_q { uint32_t type; uint64_t quant, dequant; };
const golden_q kGoldenQuant[] = {
    {1, 0x89920555bae59be9ull, 0x3145a100732f7773ull},   // F16
    {30, 0x86994233bc161991ull, 0x26d829b3f6bf79b1ull},  // BF16
    {2, 0xd57a075100cf90e2ull, 0xd262b804cdf65846ull},   // Q4_0
    {3, 0x99a470855484d081ull, 0x6db49b4e1358c24aull},   // Q4_1
    {6, 0xa8f341fce000207bull, 0xdb8448f6c2914550ull},   // Q5_0
    {7, 0x8dea4e258ce7fcbdull, 0xf71033662c3f89fbull},   // Q5_1
    {8, 0xc4088131f00794e8ull, 0x42f02a2a49c45557ull},   // Q8_0
    {10, 0x0de3a1929e32dedeull, 0xf016fb5de01bd52eull},  // Q2_K
    {11, 0x3646fc55aa0239bcull, 0x1b34f7d22c1ff4d9ull},  // Q3_K
    {12, 0x3084d8b3c8867a26ull, 0x85e46223dd440d35ull},  // Q4_K
    {13, 0xbe1a7f30516fd140ull, 0x5efc172f198fdbb9ull},  // Q5_K
    {14, 0xd8ea84a26ed4f365ull, 0xa361a69cb25e742dull},  // Q6_K
    // The same program on ggml's ternary, NVFP4 and Q1_0/Q2_0 types (their ggml_quantize_chunk is
    // the reference quantizer, imatrix or not).
    {34, 0xeff433a95b7dca98ull, 0x1b43089449806f34ull},  // TQ1_0
    {35, 0xf8217badba408f91ull, 0x1b43089449806f34ull},  // TQ2_0
    {40, 0x2e958c71f301b560ull, 0x8321868627cf3706ull},  // NVFP4
    {41, 0xf9222f83b077d045ull, 0xe585f3c56e79be83ull},  // Q1_0
    {42, 0x3b87de61807abc92ull, 0x8d25919e452a5a7cull},  // Q2_0
};
struct golden_a { uint32_t type; uint64_t hash; };
const golden_a kGoldenAct[] = {
    {8, 0xc4088131f00794e8ull},   // Q8_0
    {9, 0xeb05d2157ed33d32ull},   // Q8_1
    {15, 0x6e1ba661d146fe43ull},  // Q8_K
    {1, 0x89920555bae59be9ull},   // F16
    {30, 0x86994233bc161991ull},  // BF16
};
struct golden_d { uint32_t type; double value; };
const golden_d kGoldenDot[] = {
    {0, 27257.0703}, {1, 27254.9219}, {30, 27493.418}, {2, 26679.1191}, {3, 24514.5977}, {6, 25765.0215}, {7, 28386.9688},
    {8, 27152.1367}, {10, 28677.0605}, {11, 33630.418}, {12, 22220.4375}, {13, 25845.6719}, {14, 26128.7305},
    // (zen4 build; TQ1_0 and TQ2_0 quantize this input to the same values)
    {34, 20419.4688}, {35, 20419.4688}, {40, 27013.7051}, {41, -19428.4277}, {42, 24116.6699},
};
// ggml_vec_dot_*_generic (the same program on libggml-cpu-x64.so, whose x86 files fall back to the
// generic C for these types): the scalar level evaluates the same expressions, so the same float.
const golden_d kGoldenDotGeneric[] = {
    {34, 20419.4609}, {35, 20419.4609}, {40, 27013.6992}, {41, -19428.4258}, {42, 24116.668},
};

void test_golden() {
    const int N = 4096;
    std::vector<float> x(N), w(N);
    fill(x, 42);
    fill(w, 7);
    CHECK(fnv(x.data(), N * 4) == 0x0b3d1ed98a3a9a49ull, "generated input differs from the golden program's");
    for (const golden_q & g : kGoldenQuant) {
        std::vector<uint8_t> q(row_size(g.type, N));
        const size_t written = quantize_row(g.type, x.data(), q.data(), N);
        CHECK(written == q.size(), "%s quantize_row size", type_name(g.type));
        CHECK(fnv(q.data(), q.size()) == g.quant, "%s quantize differs from ggml", type_name(g.type));
        std::vector<float> d(N);
        dequantize_row(g.type, q.data(), d.data(), N);
        CHECK(fnv(d.data(), N * 4) == g.dequant, "%s dequantize differs from ggml", type_name(g.type));
    }
    for (const level & L : levels()) {
        for (const golden_a & g : kGoldenAct) {
            std::vector<uint8_t> q(row_size(g.type, N));
            L.t->from_float[g.type](x.data(), q.data(), N);
            CHECK(fnv(q.data(), q.size()) == g.hash, "%s: %s activation quantizer differs from ggml-cpu", L.name.c_str(), type_name(g.type));
        }
        for (const golden_d & g : kGoldenDot) {
            const weight_kernels & wk = L.t->w[g.type];
            std::vector<uint8_t> q(row_size(g.type, N));
            quantize_row(g.type, w.data(), q.data(), N);
            std::vector<uint8_t> a(row_size(wk.vd_type, N));
            L.t->from_float[wk.vd_type](x.data(), a.data(), N);
            std::vector<uint8_t> prep;
            const uint8_t * ap = a.data();
            if (wk.prepare) {
                prep.resize(wk.prepared_size(N));
                wk.prepare(N, a.data(), prep.data());
                ap = prep.data();
            }
            float out = 0, *outp = &out;
            wk.gemm(N, q.data(), 0, 1, &ap, 1, &outp);
            CHECK(std::fabs(out - g.value) <= 2e-5 * std::fabs(g.value) + 1e-3, "%s: %s vec_dot %.9g vs ggml %.9g",
                  L.name.c_str(), type_name(g.type), out, g.value);
        }
    }
    for (const golden_d & g : kGoldenDotGeneric) {
        std::vector<uint8_t> q(row_size(g.type, N));
        quantize_row(g.type, w.data(), q.data(), N);
        const uint32_t vd = kernels_scalar().w[g.type].vd_type;
        std::vector<uint8_t> a(row_size(vd, N));
        kernels_scalar().from_float[vd](x.data(), a.data(), N);
        const uint8_t * ap = a.data();
        float out = 0, *outp = &out;
        kernels_scalar().w[g.type].gemm(N, q.data(), 0, 1, &ap, 1, &outp);
        // printed with 9 significant digits: the float nearest the printed value.
        CHECK(out == static_cast<float>(g.value), "scalar %s vec_dot %.9g vs ggml generic %.9g", type_name(g.type), out, g.value);
    }
}

// ---------------------------------------------------------------- round trips

void test_round_trip() {
    // ggml's test-quantize-fns data and error metric (sqrt(sum sq) / n) with its thresholds.
    const size_t N = 32 * 256;
    std::vector<float> x(N);
    for (size_t i = 0; i < N; i++) x[i] = 0.1f + 2.0f * std::cos(static_cast<float>(i) + 0.0f);
    struct { uint32_t t; float max_err; } cases[] = {
        {KAIL_TYPE_F16, 0.002f}, {KAIL_TYPE_BF16, 0.002f}, {KAIL_TYPE_Q4_0, 0.002f}, {KAIL_TYPE_Q4_1, 0.002f},
        {KAIL_TYPE_Q5_0, 0.002f}, {KAIL_TYPE_Q5_1, 0.002f}, {KAIL_TYPE_Q8_0, 0.002f}, {KAIL_TYPE_Q8_1, 0.002f},
        {KAIL_TYPE_Q2_K, 0.0075f}, {KAIL_TYPE_Q3_K, 0.0040f}, {KAIL_TYPE_Q4_K, 0.002f}, {KAIL_TYPE_Q5_K, 0.002f},
        {KAIL_TYPE_Q6_K, 0.002f}, {KAIL_TYPE_Q8_K, 0.002f}, {KAIL_TYPE_F32, 0.0f}, {KAIL_TYPE_IQ4_NL, 0.002f},
        {KAIL_TYPE_IQ4_XS, 0.002f},
        // The writer's codebook quantizers (a grid search under max-fitted scales, no importance
        // matrix): ggml's 2-bit and 3-bit thresholds are 0.0075 and 0.0050; IQ1 gets its ternary types' 0.01.
        {KAIL_TYPE_IQ2_XXS, 0.0075f}, {KAIL_TYPE_IQ2_XS, 0.0075f}, {KAIL_TYPE_IQ2_S, 0.0075f},
        {KAIL_TYPE_IQ3_XXS, 0.0050f}, {KAIL_TYPE_IQ3_S, 0.0050f}, {KAIL_TYPE_IQ1_S, 0.01f}, {KAIL_TYPE_IQ1_M, 0.01f},
        // FP4 levels under a power-of-two scale: about Q3_K's bound.
        {KAIL_TYPE_MXFP4, 0.0040f},
        // ggml's test-quantize-fns bounds: FP4 under E4M3 scales per 16 values 0.003, the ternary
        // types and Q2_0 0.01, sign-only Q1_0 0.025.
        {KAIL_TYPE_NVFP4, 0.0030f}, {KAIL_TYPE_TQ1_0, 0.01f}, {KAIL_TYPE_TQ2_0, 0.01f}, {KAIL_TYPE_Q2_0, 0.01f},
        {KAIL_TYPE_Q1_0, 0.025f},
    };
    for (auto & c : cases) {
        std::vector<uint8_t> q(row_size(c.t, N));
        quantize_row(c.t, x.data(), q.data(), N);
        std::vector<float> y(N);
        dequantize_row(c.t, q.data(), y.data(), N);
        double sum = 0;
        for (size_t i = 0; i < N; i++) sum += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
        const float err = static_cast<float>(std::sqrt(sum) / N);
        if (std::getenv("KAIL_TEST_VERBOSE")) std::printf("  %s round-trip error %.5f (max %.4f)\n", type_name(c.t), err, c.max_err);
        CHECK(err <= c.max_err, "%s round-trip error %g > %g", type_name(c.t), err, c.max_err);
        // A second pass over the dequantized values must be (nearly) a fixed point.
        std::vector<uint8_t> q2(q.size());
        quantize_row(c.t, y.data(), q2.data(), N);
        std::vector<float> y2(N);
        dequantize_row(c.t, q2.data(), y2.data(), N);
        double sum2 = 0;
        for (size_t i = 0; i < N; i++) sum2 += (double(y[i]) - y2[i]) * (double(y[i]) - y2[i]);
        CHECK(std::sqrt(sum2) / N <= c.max_err, "%s requantize error", type_name(c.t));
    }
    // All-zero and constant rows are exact for every type.
    for (uint32_t t : {KAIL_TYPE_Q4_0, KAIL_TYPE_Q4_1, KAIL_TYPE_Q5_0, KAIL_TYPE_Q5_1, KAIL_TYPE_Q8_0, KAIL_TYPE_Q2_K,
                       KAIL_TYPE_Q3_K, KAIL_TYPE_Q4_K, KAIL_TYPE_Q5_K, KAIL_TYPE_Q6_K, KAIL_TYPE_Q8_K, KAIL_TYPE_IQ4_NL,
                       KAIL_TYPE_IQ4_XS, KAIL_TYPE_IQ2_XXS, KAIL_TYPE_IQ2_XS, KAIL_TYPE_IQ2_S, KAIL_TYPE_IQ3_XXS,
                       KAIL_TYPE_IQ3_S, KAIL_TYPE_MXFP4, KAIL_TYPE_NVFP4, KAIL_TYPE_Q1_0, KAIL_TYPE_Q2_0,
                       KAIL_TYPE_TQ1_0, KAIL_TYPE_TQ2_0}) {
        std::vector<float> z(512, 0.f), y(512, 1.f);
        std::vector<uint8_t> q(row_size(t, 512));
        quantize_row(t, z.data(), q.data(), 512);
        dequantize_row(t, q.data(), y.data(), 512);
        bool ok = true;
        for (float v : y) ok = ok && v == 0.f;
        CHECK(ok, "%s zeros", type_name(t));
    }
    // Errors: bad sizes and unsupported types.
    bool threw = false;
    try { std::vector<float> v(33); std::vector<uint8_t> q(64); quantize_row(KAIL_TYPE_Q4_0, v.data(), q.data(), 33); }
    catch (const kail::error & e) { threw = e.code() == KAIL_E_INVALID_ARG; }
    CHECK(threw, "quantize_row with a partial block must throw KAIL_E_INVALID_ARG");
    threw = false;
    try { float f[256]; uint8_t q[256]; dequantize_row(KAIL_TYPE_I8, q, f, 256); }
    catch (const kail::error & e) { threw = e.code() == KAIL_E_UNSUPPORTED; }
    CHECK(threw, "dequantize_row of I8 must throw KAIL_E_UNSUPPORTED");
}

// ---------------------------------------------------------------- dot products

// Double-precision reference: dequantize both sides (exact) and sum in double.
double dot_reference(uint32_t type, uint32_t vd, int64_t n, const void * w, const void * a, double * abs_sum) {
    std::vector<float> fw(n), fa(n);
    dequantize_row(type, w, fw.data(), n);
    dequantize_row(vd, a, fa.data(), n);
    double s = 0, s_abs = 0;
    for (int64_t i = 0; i < n; i++) {
        s += double(fw[i]) * fa[i];
        s_abs += std::fabs(double(fw[i]) * fa[i]);
    }
    // Q8_1 carries s = fp16(d * sum(q)), and ggml's Q4_1/Q5_1 dot uses it for the min term:
    // replace the exact m * d * sum(q) by m * s, block by block.
    if (vd == KAIL_TYPE_Q8_1) {
        const block_q8_1 * ab = static_cast<const block_q8_1 *>(a);
        for (int64_t b = 0; b < n / 32; b++) {
            uint16_t mbits;
            std::memcpy(&mbits, static_cast<const uint8_t *>(w) + row_size(type, 32) * b + 2, 2);
            int sumq = 0;
            for (int j = 0; j < 32; j++) sumq += ab[b].qs[j];
            const double m = fp16_to_fp32(mbits);
            s += m * (double(fp16_to_fp32(ab[b].s)) - double(fp16_to_fp32(ab[b].d)) * sumq);
        }
    }
    *abs_sum = s_abs;
    return s;
}

void test_dot() {
    const int64_t sizes_blocks[] = {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 64};
    for (const level & L : levels()) {
        for (uint32_t type : kWeightTypes) {
            const weight_kernels & wk = L.t->w[type];
            CHECK(wk.gemm != nullptr, "%s: %s has no gemm", L.name.c_str(), type_name(type));
            if (!wk.gemm) continue;
            const int64_t bs = std::max<int64_t>(type_traits_get(type)->block_size, type_traits_get(wk.vd_type)->block_size);
            const int64_t bs_unit = bs == 1 ? 16 : bs;
            for (int64_t nb : sizes_blocks) {
                int64_t n = nb * bs_unit;
                if (bs == 1) n += nb % 5;  // odd lengths for the float types
                const int R = wk.max_r, T = wk.max_t;
                // R weight rows and T activation rows; check every tile shape against the reference.
                std::vector<std::vector<uint8_t>> wq(R), aq(T), prep(T);
                std::vector<const uint8_t *> ap(T);
                const size_t wrs = row_size(type, n);
                std::vector<uint8_t> wall(wrs * R + 64);
                for (int r = 0; r < R; r++) {
                    std::vector<float> v(n);
                    fill(v, 1000 + r * 31 + nb);
                    quantize_row(type, v.data(), wall.data() + wrs * r, n);
                }
                for (int t = 0; t < T; t++) {
                    std::vector<float> v(n);
                    fill(v, 5000 + t * 17 + nb);
                    aq[t].resize(row_size(wk.vd_type, n));
                    L.t->from_float[wk.vd_type](v.data(), aq[t].data(), n);
                    ap[t] = aq[t].data();
                    if (wk.prepare) {
                        prep[t].resize(wk.prepared_size(n));
                        wk.prepare(n, aq[t].data(), prep[t].data());
                        ap[t] = prep[t].data();
                    }
                }
                // The reference of every (row, token) pair, computed once: a tile shape only picks
                // which of them the kernel must reproduce.
                std::vector<double> ref(size_t(T) * R), tol(size_t(T) * R);
                for (int t = 0; t < T; t++) {
                    for (int r = 0; r < R; r++) {
                        double abs_sum;
                        ref[t * R + r] = dot_reference(type, wk.vd_type, n, wall.data() + wrs * r, aq[t].data(), &abs_sum);
                        tol[t * R + r] = 2e-6 * abs_sum + 1e-30;
                    }
                }
                // Tile shapes of gemm, then the matrix x vector kernel (nt = 1, nr <= decode_r).
                const int shapes = R * T + (wk.gemm_decode ? wk.decode_r : 0);
                for (int shape = 0; shape < shapes; shape++) {
                    const bool dec = shape >= R * T;
                    const int nr = dec ? shape - R * T + 1 : shape / T + 1;
                    const int nt = dec ? 1 : shape % T + 1;
                    {
                        std::vector<float> out(T * R, -12345.f);
                        std::vector<float *> op(T);
                        for (int t = 0; t < nt; t++) op[t] = out.data() + t * R;
                        (dec ? wk.gemm_decode : wk.gemm)(n, wall.data(), wrs, nr, ap.data(), nt, op.data());
                        for (int t = 0; t < T; t++) {
                            for (int r = 0; r < R; r++) {
                                const float got = out[t * R + r];
                                if (t >= nt || r >= nr) {
                                    CHECK(got == -12345.f, "%s %s gemm wrote outside its %dx%d tile", L.name.c_str(), type_name(type), nr, nt);
                                    continue;
                                }
                                const double want = ref[t * R + r], tl = tol[t * R + r];
                                CHECK(std::fabs(got - want) <= tl, "%s %s n=%lld tile %dx%d [%d,%d]: %.9g vs ref %.9g (tol %.3g)",
                                      L.name.c_str(), type_name(type), (long long)n, nr, nt, r, t, got, want, tl);
                            }
                        }
                    }
                }
            }
        }
    }
}

// Vectorised prepare functions write exactly what the scalar ones in quants.cpp write.
void test_prepare_matches_scalar() {
    struct { uint32_t type; prepare_fn scalar; } cases[] = {
        {KAIL_TYPE_Q4_0, prepare_split_q8_0_off8}, {KAIL_TYPE_Q5_0, prepare_split_q8_0_off16},
        {KAIL_TYPE_Q8_0, prepare_split_q8_0_off128}, {KAIL_TYPE_Q4_1, prepare_split_q8_1}, {KAIL_TYPE_Q5_1, prepare_split_q8_1},
    };
    for (const level & L : levels()) {
        for (auto & c : cases) {
            const weight_kernels & wk = L.t->w[c.type];
            if (!wk.prepare) continue;
            for (int64_t n : {32, 96, 128, 160, 4096, 77 * 32}) {
                std::vector<float> x(n);
                fill(x, 900 + n);
                std::vector<uint8_t> std_row(row_size(wk.vd_type, n));
                quantize_row_activations(wk.vd_type, x.data(), std_row.data(), n);
                std::vector<uint8_t> a(prepared_size_split(n), 0x11), b(prepared_size_split(n), 0x22);
                c.scalar(n, std_row.data(), a.data());
                wk.prepare(n, std_row.data(), b.data());
                CHECK(a == b, "%s %s n=%lld: prepare differs from the scalar one", L.name.c_str(), type_name(c.type), (long long)n);
            }
        }
    }
}

// A fused float -> prepared quantizer writes exactly what from_float + prepare would.
void test_quantize_prepared() {
    for (const level & L : levels()) {
        for (uint32_t type : kWeightTypes) {
            const weight_kernels & wk = L.t->w[type];
            if (!wk.quantize_prepared) continue;
            CHECK(wk.prepare != nullptr, "%s %s: quantize_prepared without prepare", L.name.c_str(), type_name(type));
            for (int64_t n : {32, 64, 96, 128, 160, 224, 4096, 4128, 77 * 32}) {
                if (n % type_traits_get(wk.vd_type)->block_size) continue;
                std::vector<float> x(n);
                fill(x, 300 + n);
                std::vector<uint8_t> std_row(row_size(wk.vd_type, n)), a(wk.prepared_size(n), 0xAB), b(wk.prepared_size(n), 0xCD);
                L.t->from_float[wk.vd_type](x.data(), std_row.data(), n);
                wk.prepare(n, std_row.data(), a.data());
                wk.quantize_prepared(x.data(), b.data(), n);
                CHECK(a == b, "%s %s n=%lld: quantize_prepared differs from from_float + prepare", L.name.c_str(), type_name(type), (long long)n);
            }
        }
    }
}

// Every level gives the scalar level's answer (up to summation order) on large rows.
void test_levels_agree() {
    const int64_t n = 4096 + 256;
    std::vector<float> w(n), x(n);
    fill(w, 99);
    fill(x, 77);
    const std::vector<level> ls = levels();
    for (uint32_t type : kWeightTypes) {
        std::vector<uint8_t> q(row_size(type, n));
        quantize_row(type, w.data(), q.data(), n);
        std::vector<float> results;
        for (const level & L : ls) {
            const weight_kernels & wk = L.t->w[type];
            std::vector<uint8_t> a(row_size(wk.vd_type, n));
            L.t->from_float[wk.vd_type](x.data(), a.data(), n);
            std::vector<uint8_t> prep;
            const uint8_t * ap = a.data();
            if (wk.prepare) {
                prep.resize(wk.prepared_size(n));
                wk.prepare(n, a.data(), prep.data());
                ap = prep.data();
            }
            float out = 0, *op = &out;
            wk.gemm(n, q.data(), 0, 1, &ap, 1, &op);
            results.push_back(out);
        }
        for (size_t i = 1; i < results.size(); i++)
            CHECK(std::fabs(results[i] - results[0]) <= 1e-5 * std::fabs(results[0]) + 1e-4, "%s: %s gives %.9g, scalar %.9g",
                  type_name(type), ls[i].name.c_str(), results[i], results[0]);
    }
    // The public entry point works and validates.
    std::vector<uint8_t> q(row_size(KAIL_TYPE_Q4_0, 256)), a(row_size(KAIL_TYPE_Q8_0, 256));
    std::vector<float> v(256, 0.5f);
    quantize_row(KAIL_TYPE_Q4_0, v.data(), q.data(), 256);
    quantize_row_activations(KAIL_TYPE_Q8_0, v.data(), a.data(), 256);
    const float d = vec_dot(KAIL_TYPE_Q4_0, 256, q.data(), a.data());
    CHECK(std::fabs(d - 64.f) < 0.5f, "public vec_dot %g", d);
    CHECK(vec_dot_type(KAIL_TYPE_Q4_K) == KAIL_TYPE_Q8_K && vec_dot_type(KAIL_TYPE_Q5_1) == KAIL_TYPE_Q8_1 &&
              vec_dot_type(KAIL_TYPE_BF16) == KAIL_TYPE_BF16, "vec_dot_type table");
    CHECK(vec_dot_type(KAIL_TYPE_TQ1_0) == KAIL_TYPE_Q8_K && vec_dot_type(KAIL_TYPE_TQ2_0) == KAIL_TYPE_Q8_K &&
              vec_dot_type(KAIL_TYPE_NVFP4) == KAIL_TYPE_Q8_0 && vec_dot_type(KAIL_TYPE_Q1_0) == KAIL_TYPE_Q8_0 &&
              vec_dot_type(KAIL_TYPE_Q2_0) == KAIL_TYPE_Q8_0, "vec_dot_type of the ternary / NVFP4 / Q1_0 / Q2_0 types (ggml-cpu's)");
}

// The integer-sum kernels (Q1_0, Q2_0, TQ1_0, TQ2_0: exact int32 sums per activation block, then
// the scalar kernel's own float steps) give the scalar kernel's bits at every level and tile shape,
// over block counts around their 2- and 4-block groups, on quantized rows and on random bytes
// (every packed-trit byte value, not only the quantizer's).
void test_integer_kernels_bit_exact() {
    const uint32_t types[] = {KAIL_TYPE_Q1_0, KAIL_TYPE_Q2_0, KAIL_TYPE_TQ1_0, KAIL_TYPE_TQ2_0};
    const kernel_table & S = kernels_scalar();
    rng r{4242};
    for (const level & L : levels()) {
        for (uint32_t type : types) {
            const weight_kernels & wk = L.t->w[type];
            const int64_t bs = type_traits_get(type)->block_size;
            const size_t bbytes = row_size(type, bs), doff = type == KAIL_TYPE_TQ1_0 ? 52 : type == KAIL_TYPE_TQ2_0 ? 64 : 0;
            for (int64_t nb : {1, 2, 3, 4, 5, 7, 8, 9, 17}) {
                const int64_t n = nb * bs;
                const int R = wk.max_r, T = wk.max_t;
                const size_t wrs = row_size(type, n);
                std::vector<uint8_t> wall(wrs * R);
                for (int i = 0; i < R; i++) {
                    std::vector<float> v(n);
                    fill(v, 300 + i * 7 + nb);
                    quantize_row(type, v.data(), wall.data() + wrs * i, n);
                    if (i % 2 == 1)
                        for (size_t j = 0; j < wrs; j++)
                            if (j % bbytes != doff && j % bbytes != doff + 1) wall[wrs * i + j] = static_cast<uint8_t>(r.next());
                }
                std::vector<std::vector<uint8_t>> aq(T);
                std::vector<const uint8_t *> ap(T);
                for (int t = 0; t < T; t++) {
                    std::vector<float> v(n);
                    fill(v, 900 + t * 13 + nb);
                    aq[t].resize(row_size(wk.vd_type, n));
                    S.from_float[wk.vd_type](v.data(), aq[t].data(), n);
                    ap[t] = aq[t].data();
                }
                for (int nr = 1; nr <= R; nr++)
                    for (int nt = 1; nt <= T; nt++) {
                        std::vector<float> out(T * R);
                        std::vector<float *> op(T);
                        for (int t = 0; t < T; t++) op[t] = out.data() + t * R;
                        wk.gemm(n, wall.data(), wrs, nr, ap.data(), nt, op.data());
                        for (int t = 0; t < nt; t++)
                            for (int i = 0; i < nr; i++) {
                                float ref, *rp = &ref;
                                const uint8_t * a1 = ap[t];
                                S.w[type].gemm(n, wall.data() + wrs * i, wrs, 1, &a1, 1, &rp);
                                CHECK(f32_bits(out[t * R + i]) == f32_bits(ref), "%s %s n=%lld tile %dx%d [%d,%d]: %.9g, scalar %.9g",
                                      L.name.c_str(), type_name(type), (long long)n, nr, nt, i, t, out[t * R + i], ref);
                            }
                    }
            }
        }
    }
}

// attention_weighted_rows: every level gives the bits of one fused multiply-add per row in row
// order (so a sequence's attention does not depend on the level's vector width or the batch),
// over column counts around the 8/16/64-column tiles, probability groups around the 4-row tile,
// padded strides, F32 and F16 rows; and the public entry validates its arguments.
void test_weighted_rows() {
    rng r{77};
    const int64_t widths[] = {1, 5, 8, 15, 16, 17, 40, 63, 64, 65, 128, 130, 512};
    const int64_t groups[] = {1, 2, 3, 4, 5, 8, 9, 16};
    const int64_t ns[] = {0, 1, 7, 33};
    for (int64_t width : widths)
        for (int64_t group : groups)
            for (int64_t n : ns) {
                const size_t xs = static_cast<size_t>(width + 3), ps = static_cast<size_t>(n + 2), os = static_cast<size_t>(width + 1);
                std::vector<float> x(xs * static_cast<size_t>(std::max<int64_t>(n, 1))), p(ps * group);
                std::vector<uint16_t> xh(x.size());
                for (size_t i = 0; i < x.size(); i++) {
                    xh[i] = fp32_to_fp16(r.uniform() * 4.f - 2.f);
                    x[i] = r.uniform() * 2.f - 1.f;
                }
                for (float & v : p) v = r.uniform();
                for (int f16 = 0; f16 < 2; f16++) {
                    std::vector<float> want(os * group, -7.f);
                    for (int64_t g = 0; g < group; g++)
                        for (int64_t c = 0; c < width; c++) {
                            float acc = 0.0f;
                            for (int64_t j = 0; j < n; j++)
                                acc = std::fma(p[g * ps + j], f16 ? fp16_to_fp32(xh[j * xs + c]) : x[j * xs + c], acc);
                            want[g * os + c] = acc;
                        }
                    for (const level & L : levels()) {
                        std::vector<float> got(os * group, -7.f);
                        if (f16) L.t->weighted_rows_f16(xh.data(), xs, n, width, p.data(), ps, group, got.data(), os);
                        else L.t->weighted_rows_f32(x.data(), xs, n, width, p.data(), ps, group, got.data(), os);
                        int bad = 0;
                        for (size_t i = 0; i < got.size(); i++) bad += f32_bits(got[i]) != f32_bits(want[i]);
                        CHECK(bad == 0, "%s weighted_rows_%s n %lld width %lld group %lld: %d of %zu outputs differ (padding included)",
                              L.name.c_str(), f16 ? "f16" : "f32", static_cast<long long>(n), static_cast<long long>(width),
                              static_cast<long long>(group), bad, got.size());
                    }
                }
            }
    std::vector<float> x(64), p(8), out(64);
    bool threw = false;
    try { attention_weighted_rows(KAIL_TYPE_Q4_K, x.data(), 64, 1, 256, p.data(), 1, 1, out.data(), 256); }
    catch (const kail::error & e) { threw = e.code() == KAIL_E_UNSUPPORTED; }
    CHECK(threw, "attention_weighted_rows on a Q4_K cache -> KAIL_E_UNSUPPORTED");
    {
        // A level's own dequantizer (to_float) gives the reference's bits: (q - 8) * d for Q4_0,
        // ((q | high bit << 4) - 16) * d for Q5_0, d * level[q] for IQ4_NL, q * d + m for Q4_1 and
        // Q5_1 (the high bit too).
        const int64_t k = 32 * 37;
        std::vector<float> src(static_cast<size_t>(k)), want(src.size()), got(src.size());
        for (float & v : src) v = (r.uniform() * 2.f - 1.f) * (r.uniform() < 0.1f ? 1e4f : 1.f);
        for (uint32_t type : {KAIL_TYPE_Q4_0, KAIL_TYPE_Q5_0, KAIL_TYPE_IQ4_NL, KAIL_TYPE_Q4_1, KAIL_TYPE_Q5_1}) {
            const size_t bb = row_size(type, 32);
            std::vector<uint8_t> q(row_size(type, k));
            quantize_row(type, src.data(), q.data(), k);
            for (int64_t b = 0; b < k / 32; b++) {
                const uint8_t * blk = q.data() + bb * b;
                uint16_t dh;
                std::memcpy(&dh, blk, 2);
                const float d = fp16_to_fp32(dh);
                const bool with_min = type == KAIL_TYPE_Q4_1 || type == KAIL_TYPE_Q5_1;
                uint16_t mh = 0;
                if (with_min) std::memcpy(&mh, blk + 2, 2);
                const float mn = fp16_to_fp32(mh);
                uint32_t qh = 0;
                if (type == KAIL_TYPE_Q5_0) std::memcpy(&qh, blk + 2, 4);
                if (type == KAIL_TYPE_Q5_1) std::memcpy(&qh, blk + 4, 4);
                const uint8_t * qs = blk + (type == KAIL_TYPE_Q5_0 ? 6 : type == KAIL_TYPE_Q4_1 ? 4 : type == KAIL_TYPE_Q5_1 ? 8 : 2);
                for (int j = 0; j < 16; j++) {
                    const int lo = qs[j] & 0x0F, hi = qs[j] >> 4;
                    if (with_min) {
                        const int h0 = type == KAIL_TYPE_Q5_1 ? static_cast<int>(((qh >> j) << 4) & 0x10) : 0;
                        const int h1 = type == KAIL_TYPE_Q5_1 ? static_cast<int>((qh >> (j + 12)) & 0x10) : 0;
                        // (Volatile: a product then a sum, as the reference rounds them, never one fused step.)
                        volatile float p0 = static_cast<float>(lo | h0) * d, p1 = static_cast<float>(hi | h1) * d;
                        want[b * 32 + j] = p0 + mn;
                        want[b * 32 + j + 16] = p1 + mn;
                    } else if (type == KAIL_TYPE_Q4_0) {
                        want[b * 32 + j] = static_cast<float>(lo - 8) * d;
                        want[b * 32 + j + 16] = static_cast<float>(hi - 8) * d;
                    } else if (type == KAIL_TYPE_Q5_0) {
                        const int h0 = static_cast<int>(((qh >> j) << 4) & 0x10), h1 = static_cast<int>((qh >> (j + 12)) & 0x10);
                        want[b * 32 + j] = static_cast<float>((lo | h0) - 16) * d;
                        want[b * 32 + j + 16] = static_cast<float>((hi | h1) - 16) * d;
                    } else {
                        want[b * 32 + j] = d * kIq4Levels[lo];
                        want[b * 32 + j + 16] = d * kIq4Levels[hi];
                    }
                }
            }
            int levels_with = 0;
            for (const level & L : levels()) {
                if (!L.t->to_float[type]) continue;
                levels_with++;
                L.t->to_float[type](q.data(), got.data(), k);
                CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0, "%s to_float %s differs from the reference's bits", L.name.c_str(), type_name(type));
            }
            dequantize_row(type, q.data(), got.data(), k);
            CHECK(std::memcmp(got.data(), want.data(), got.size() * 4) == 0, "dequantize_row %s differs from the reference's bits", type_name(type));
            std::printf("  to_float %s: %d level(s) with their own\n", type_name(type), levels_with);
        }
    }
    {
        // Q4_0, Q5_1, IQ4_NL, BF16 caches: each row's values as dequantize_row gives them; 300 rows
        // (two 256-row chunks).
        const int64_t width = 64, n = 300, group = 3;
        std::vector<float> src(static_cast<size_t>(width * n)), deq(src.size()), pr(static_cast<size_t>(n * group)), got(static_cast<size_t>(width * group));
        for (float & v : src) v = r.uniform() * 2.f - 1.f;
        for (float & v : pr) v = r.uniform() / 100.f;
        for (uint32_t type : {KAIL_TYPE_Q4_0, KAIL_TYPE_Q5_1, KAIL_TYPE_IQ4_NL, KAIL_TYPE_BF16}) {
            const size_t rb = row_size(type, width);
            std::vector<uint8_t> q(rb * static_cast<size_t>(n));
            for (int64_t j = 0; j < n; j++) {
                quantize_row(type, src.data() + j * width, q.data() + j * rb, width);
                dequantize_row(type, q.data() + j * rb, deq.data() + j * width, width);
            }
            attention_weighted_rows(type, q.data(), rb, n, width, pr.data(), static_cast<size_t>(n), group, got.data(), static_cast<size_t>(width));
            int bad = 0;
            for (int64_t g = 0; g < group; g++)
                for (int64_t c = 0; c < width; c++) {
                    double acc = 0.0;
                    for (int64_t j = 0; j < n; j++) acc += double(deq[j * width + c]) * pr[g * n + j];
                    bad += std::fabs(acc - got[g * width + c]) > 1e-5 * (1.0 + std::fabs(acc));
                }
            CHECK(bad == 0, "attention_weighted_rows on %s rows: %d of %lld outputs differ from the dequantized rows' sums", type_name(type), bad, static_cast<long long>(width * group));
        }
    }
    threw = false;
    try { attention_weighted_rows(KAIL_TYPE_Q8_0, x.data(), 64, 1, 16, p.data(), 1, 1, out.data(), 16); }
    catch (const kail::error & e) { threw = e.code() == KAIL_E_INVALID_ARG; }
    CHECK(threw, "attention_weighted_rows on Q8_0 rows of 16 values (not whole blocks) -> KAIL_E_INVALID_ARG");
    {
        // A Q8_0 cache: each row's values as dequantize_row gives them, summed in row order.
        const int64_t width = 64, n = 5, group = 3;
        const size_t rb = row_size(KAIL_TYPE_Q8_0, width);
        std::vector<float> src(static_cast<size_t>(width * n)), deq(src.size()), pr(static_cast<size_t>(n * group)), got(static_cast<size_t>(width * group));
        std::vector<uint8_t> q(rb * static_cast<size_t>(n));
        for (float & v : src) v = r.uniform() * 2.f - 1.f;
        for (float & v : pr) v = r.uniform();
        for (int64_t j = 0; j < n; j++) {
            quantize_row(KAIL_TYPE_Q8_0, src.data() + j * width, q.data() + j * rb, width);
            dequantize_row(KAIL_TYPE_Q8_0, q.data() + j * rb, deq.data() + j * width, width);
        }
        attention_weighted_rows(KAIL_TYPE_Q8_0, q.data(), rb, n, width, pr.data(), static_cast<size_t>(n), group, got.data(), static_cast<size_t>(width));
        int bad = 0;
        for (int64_t g = 0; g < group; g++)
            for (int64_t c = 0; c < width; c++) {
                float acc = 0.0f;
                for (int64_t j = 0; j < n; j++) acc += deq[j * width + c] * pr[g * n + j];
                bad += std::fabs(acc - got[g * width + c]) > 1e-6f * (1.0f + std::fabs(acc));
            }
        CHECK(bad == 0, "attention_weighted_rows on Q8_0 rows: %d of %lld outputs differ from the dequantized rows' sums", bad, static_cast<long long>(width * group));
        // Every kernel level gives the same bits (widths of one and of several 64-column chunks).
        for (int64_t w : {32, 64, 96, 128}) {
            const size_t wb = row_size(KAIL_TYPE_Q8_0, w);
            std::vector<uint8_t> qq(wb * static_cast<size_t>(n));
            std::vector<float> one(static_cast<size_t>(w));
            for (int64_t j = 0; j < n; j++) {
                for (float & v : one) v = r.uniform() * 2.f - 1.f;
                quantize_row(KAIL_TYPE_Q8_0, one.data(), qq.data() + j * wb, w);
            }
            std::vector<float> ref(static_cast<size_t>(w * group));
            levels().front().t->weighted_rows_q8_0(qq.data(), wb, n, w, pr.data(), static_cast<size_t>(n), group, ref.data(), static_cast<size_t>(w));
            for (const level & L : levels()) {
                std::vector<float> out2(static_cast<size_t>(w * group), -7.f);
                L.t->weighted_rows_q8_0(qq.data(), wb, n, w, pr.data(), static_cast<size_t>(n), group, out2.data(), static_cast<size_t>(w));
                int diff = 0;
                for (size_t i = 0; i < out2.size(); i++) diff += f32_bits(out2[i]) != f32_bits(ref[i]);
                CHECK(diff == 0, "%s weighted_rows_q8_0 width %lld: %d outputs differ from %s", L.name.c_str(), static_cast<long long>(w), diff, levels().front().name.c_str());
            }
        }
    }
    threw = false;
    try { attention_weighted_rows(KAIL_TYPE_F32, x.data(), 32, 2, 16, p.data(), 2, 2, out.data(), 8); }
    catch (const kail::error & e) { threw = e.code() == KAIL_E_INVALID_ARG; }
    CHECK(threw, "attention_weighted_rows with out_stride < width -> KAIL_E_INVALID_ARG");
    x.assign(64, 1.0f);
    p.assign(8, 0.5f);
    attention_weighted_rows(KAIL_TYPE_F32, x.data(), 64, 3, 16, p.data(), 4, 2, out.data(), 16);
    CHECK(out[0] == 1.5f && out[31] == 1.5f, "public attention_weighted_rows: %g %g", out[0], out[31]);
}

// Attention's softmax kernels: attention_exp within 2 ulp of exp (in double) over [ln 2^-126, 0]
// and 0 below it; scale_max and exp_sum give the same bits at every level (lengths around the 8-
// and 16-lane steps, with and without a bias), and exp_sum's sum is lane j % 16's values added in
// order, then the lanes in order.
void test_softmax_kernels() {
    const float lo = -87.33654475f;
    int worst = 0;
    float worst_x = 0;
    for (int i = 0; i <= 2000000; i++) {
        // An even stride through [lo, 0], and as many points of [-2^-10, 0] (small arguments).
        for (const float x : {lo * static_cast<float>(i / 2000000.0), -static_cast<float>(i / 2000000.0) * 0x1p-10f}) {
            if (x < lo) continue;
            const double want = std::exp(static_cast<double>(x));
            const float got = attention_exp(x);
            const float w = static_cast<float>(want);
            const double ulp = std::fabs(static_cast<double>(std::nextafter(w, INFINITY)) - static_cast<double>(w));
            const int err = static_cast<int>(std::lround(std::fabs(static_cast<double>(got) - want) / ulp));
            if (err > worst) {
                worst = err;
                worst_x = x;
            }
        }
    }
    CHECK(worst <= 2, "attention_exp: %d ulp from exp at %.9g", worst, static_cast<double>(worst_x));
    CHECK(attention_exp(-88.0f) == 0.0f && attention_exp(-INFINITY) == 0.0f && attention_exp(0.0f) == 1.0f && attention_exp(-0.0f) == 1.0f,
          "attention_exp at -88, -inf, 0, -0: %g %g %g %g", attention_exp(-88.0f), attention_exp(-INFINITY), attention_exp(0.0f), attention_exp(-0.0f));
    CHECK(std::isnan(attention_exp(NAN)), "attention_exp(NaN) is NaN");
    rng r{91};
    for (int64_t n : {0, 1, 7, 8, 9, 15, 16, 17, 31, 33, 100, 1000}) {
        std::vector<float> base(static_cast<size_t>(n)), bias(static_cast<size_t>(n));
        for (int64_t j = 0; j < n; j++) {
            base[static_cast<size_t>(j)] = (r.uniform() * 2.f - 1.f) * 40.f;
            bias[static_cast<size_t>(j)] = -static_cast<float>(r.next() % 64);
        }
        for (const float * b : {static_cast<const float *>(nullptr), static_cast<const float *>(bias.data())}) {
            std::vector<float> ref = base;
            const float mref = levels().front().t->scale_max(ref.data(), n, 0.088f, b);
            std::vector<float> e = ref;
            const double sref = levels().front().t->exp_sum(e.data(), n, mref);
            // The scalar level against its definition.
            double lane[16] = {};
            float mx = -INFINITY;
            for (int64_t j = 0; j < n; j++) {
                float v = base[static_cast<size_t>(j)] * 0.088f;
                if (b) v += b[j];
                CHECK(v == ref[static_cast<size_t>(j)], "scale_max n %lld: element %lld", static_cast<long long>(n), static_cast<long long>(j));
                mx = std::max(mx, v);
            }
            for (int64_t j = 0; j < n; j++) {
                const float v = attention_exp(ref[static_cast<size_t>(j)] - mx);
                CHECK(v == e[static_cast<size_t>(j)], "exp_sum n %lld: element %lld", static_cast<long long>(n), static_cast<long long>(j));
                lane[j % 16] += v;
            }
            double want = 0.0;
            for (double l : lane) want += l;
            CHECK(mx == mref && want == sref, "scalar scale_max/exp_sum n %lld: max %g/%g sum %.17g/%.17g", static_cast<long long>(n), mx, mref, want, sref);
            // (memcmp is not given the null data of an empty vector.)
            const auto same_bits = [](const std::vector<float> & u, const std::vector<float> & v) {
                return u.size() == v.size() && (u.empty() || std::memcmp(u.data(), v.data(), u.size() * 4) == 0);
            };
            for (const level & L : levels()) {
                std::vector<float> x = base;
                const float m = L.t->scale_max(x.data(), n, 0.088f, b);
                CHECK(m == mref && same_bits(x, ref), "%s scale_max n %lld%s differs", L.name.c_str(), static_cast<long long>(n), b ? " (bias)" : "");
                const double sum = L.t->exp_sum(x.data(), n, m);
                CHECK(sum == sref && same_bits(x, e), "%s exp_sum n %lld%s differs", L.name.c_str(), static_cast<long long>(n), b ? " (bias)" : "");
            }
        }
    }
}

} // namespace

int main() {
    std::printf("kernel level in use: %s; testing:", quants_kernel_level());
    for (const level & L : levels()) std::printf(" %s", L.name.c_str());
    std::printf("\n");
    test_fp16();
    test_golden();
    test_round_trip();
    test_dot();
    test_prepare_matches_scalar();
    test_quantize_prepared();
    test_levels_agree();
    test_integer_kernels_bit_exact();
    test_weighted_rows();
    test_softmax_kernels();
    if (g_fails) std::fprintf(stderr, "%d check(s) failed\n", g_fails);
    else std::printf("all %ld quants checks passed\n", g_checks);
    return g_fails ? 1 : 0;
}
