// Scalar reference kernels (baseline x86-64, no FMA contraction possible) and the public
// quants.h entry points. The formulas follow ggml-quants.c / ggml-cpu/quants.c term by term so the
// scalar level reproduces ggml's generic results; the SIMD files only change summation order.
#include "kail/quants.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/exp_f32.h"
#include "cpu/fp16.h"
#include "cpu/quants_impl.h"
#include "kail/cpu_features.h"
#include "kail/status.h"

namespace kail::cpu {

namespace {

inline float h2f(uint16_t h) { return fp16_to_fp32_sw(h); }
inline uint16_t f2h(float f) { return fp32_to_fp16_sw(f); }

// ============================ dequantize ============================

void dequantize_q4_0(const void * vx, float * y, int64_t k) {
    const block_q4_0 * x = static_cast<const block_q4_0 *>(vx);
    for (int64_t i = 0; i < k / QK4_0; i++) {
        const float d = h2f(x[i].d);
        for (int j = 0; j < QK4_0 / 2; ++j) {
            const int x0 = (x[i].qs[j] & 0x0F) - 8;
            const int x1 = (x[i].qs[j] >> 4) - 8;
            y[i * QK4_0 + j] = x0 * d;
            y[i * QK4_0 + j + QK4_0 / 2] = x1 * d;
        }
    }
}

void dequantize_q4_1(const void * vx, float * y, int64_t k) {
    const block_q4_1 * x = static_cast<const block_q4_1 *>(vx);
    for (int64_t i = 0; i < k / QK4_1; i++) {
        const float d = h2f(x[i].d), m = h2f(x[i].m);
        for (int j = 0; j < QK4_1 / 2; ++j) {
            const int x0 = x[i].qs[j] & 0x0F;
            const int x1 = x[i].qs[j] >> 4;
            y[i * QK4_1 + j] = x0 * d + m;
            y[i * QK4_1 + j + QK4_1 / 2] = x1 * d + m;
        }
    }
}

void dequantize_q5_0(const void * vx, float * y, int64_t k) {
    const block_q5_0 * x = static_cast<const block_q5_0 *>(vx);
    for (int64_t i = 0; i < k / QK5_0; i++) {
        const float d = h2f(x[i].d);
        uint32_t qh;
        std::memcpy(&qh, x[i].qh, 4);
        for (int j = 0; j < QK5_0 / 2; ++j) {
            const uint8_t xh_0 = ((qh >> (j + 0)) << 4) & 0x10;
            const uint8_t xh_1 = ((qh >> (j + 12))) & 0x10;
            const int32_t x0 = ((x[i].qs[j] & 0x0F) | xh_0) - 16;
            const int32_t x1 = ((x[i].qs[j] >> 4) | xh_1) - 16;
            y[i * QK5_0 + j] = x0 * d;
            y[i * QK5_0 + j + QK5_0 / 2] = x1 * d;
        }
    }
}

void dequantize_q5_1(const void * vx, float * y, int64_t k) {
    const block_q5_1 * x = static_cast<const block_q5_1 *>(vx);
    for (int64_t i = 0; i < k / QK5_1; i++) {
        const float d = h2f(x[i].d), m = h2f(x[i].m);
        uint32_t qh;
        std::memcpy(&qh, x[i].qh, 4);
        for (int j = 0; j < QK5_1 / 2; ++j) {
            const uint8_t xh_0 = ((qh >> (j + 0)) << 4) & 0x10;
            const uint8_t xh_1 = ((qh >> (j + 12))) & 0x10;
            const int x0 = (x[i].qs[j] & 0x0F) | xh_0;
            const int x1 = (x[i].qs[j] >> 4) | xh_1;
            y[i * QK5_1 + j] = x0 * d + m;
            y[i * QK5_1 + j + QK5_1 / 2] = x1 * d + m;
        }
    }
}

void dequantize_q8_0(const void * vx, float * y, int64_t k) {
    const block_q8_0 * x = static_cast<const block_q8_0 *>(vx);
    for (int64_t i = 0; i < k / QK8_0; i++) {
        const float d = h2f(x[i].d);
        for (int j = 0; j < QK8_0; ++j) y[i * QK8_0 + j] = x[i].qs[j] * d;
    }
}

// ggml has no dequantize_row_q8_1; this is the obvious one (s is redundant).
void dequantize_q8_1(const void * vx, float * y, int64_t k) {
    const block_q8_1 * x = static_cast<const block_q8_1 *>(vx);
    for (int64_t i = 0; i < k / QK8_1; i++) {
        const float d = h2f(x[i].d);
        for (int j = 0; j < QK8_1; ++j) y[i * QK8_1 + j] = x[i].qs[j] * d;
    }
}

void dequantize_q2_K(const void * vx, float * y, int64_t k) {
    const block_q2_K * x = static_cast<const block_q2_K *>(vx);
    for (int64_t i = 0; i < k / QK_K; i++) {
        const float d = h2f(x[i].d);
        const float min = h2f(x[i].dmin);
        const uint8_t * q = x[i].qs;
        int is = 0;
        for (int n = 0; n < QK_K; n += 128) {
            int shift = 0;
            for (int j = 0; j < 4; ++j) {
                uint8_t sc = x[i].scales[is++];
                float dl = d * (sc & 0xF), ml = min * (sc >> 4);
                for (int l = 0; l < 16; ++l) *y++ = dl * ((int8_t)((q[l] >> shift) & 3)) - ml;
                sc = x[i].scales[is++];
                dl = d * (sc & 0xF); ml = min * (sc >> 4);
                for (int l = 0; l < 16; ++l) *y++ = dl * ((int8_t)((q[l + 16] >> shift) & 3)) - ml;
                shift += 2;
            }
            q += 32;
        }
    }
}

// The 16 six-bit scales of a Q3_K block, unpacked (value - 32 is the signed scale).
inline void q3_K_scales(const uint8_t * packed, int8_t out[16]) {
    const uint32_t kmask1 = 0x03030303, kmask2 = 0x0f0f0f0f;
    uint32_t aux[4];
    std::memcpy(aux, packed, 12);
    const uint32_t tmp = aux[2];
    aux[2] = ((aux[0] >> 4) & kmask2) | (((tmp >> 4) & kmask1) << 4);
    aux[3] = ((aux[1] >> 4) & kmask2) | (((tmp >> 6) & kmask1) << 4);
    aux[0] = (aux[0] & kmask2) | (((tmp >> 0) & kmask1) << 4);
    aux[1] = (aux[1] & kmask2) | (((tmp >> 2) & kmask1) << 4);
    std::memcpy(out, aux, 16);
}

void dequantize_q3_K(const void * vx, float * y, int64_t k) {
    const block_q3_K * x = static_cast<const block_q3_K *>(vx);
    int8_t scales[16];
    for (int64_t i = 0; i < k / QK_K; i++) {
        const float d_all = h2f(x[i].d);
        const uint8_t * q = x[i].qs;
        const uint8_t * hm = x[i].hmask;
        uint8_t m = 1;
        q3_K_scales(x[i].scales, scales);
        int is = 0;
        for (int n = 0; n < QK_K; n += 128) {
            int shift = 0;
            for (int j = 0; j < 4; ++j) {
                float dl = d_all * (scales[is++] - 32);
                for (int l = 0; l < 16; ++l) *y++ = dl * ((int8_t)((q[l + 0] >> shift) & 3) - ((hm[l + 0] & m) ? 0 : 4));
                dl = d_all * (scales[is++] - 32);
                for (int l = 0; l < 16; ++l) *y++ = dl * ((int8_t)((q[l + 16] >> shift) & 3) - ((hm[l + 16] & m) ? 0 : 4));
                shift += 2;
                m <<= 1;
            }
            q += 32;
        }
    }
}

inline void get_scale_min_k4(int j, const uint8_t * q, uint8_t * d, uint8_t * m) {
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j - 0] >> 6) << 4);
    }
}

void dequantize_q4_K(const void * vx, float * y, int64_t k) {
    const block_q4_K * x = static_cast<const block_q4_K *>(vx);
    for (int64_t i = 0; i < k / QK_K; i++) {
        const uint8_t * q = x[i].qs;
        const float d = h2f(x[i].d), min = h2f(x[i].dmin);
        int is = 0;
        uint8_t sc, m;
        for (int j = 0; j < QK_K; j += 64) {
            get_scale_min_k4(is + 0, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
            for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
            q += 32;
            is += 2;
        }
    }
}

void dequantize_q5_K(const void * vx, float * y, int64_t k) {
    const block_q5_K * x = static_cast<const block_q5_K *>(vx);
    for (int64_t i = 0; i < k / QK_K; i++) {
        const uint8_t * ql = x[i].qs;
        const uint8_t * qh = x[i].qh;
        const float d = h2f(x[i].d), min = h2f(x[i].dmin);
        int is = 0;
        uint8_t sc, m;
        uint8_t u1 = 1, u2 = 2;
        for (int j = 0; j < QK_K; j += 64) {
            get_scale_min_k4(is + 0, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = min * m;
            get_scale_min_k4(is + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = min * m;
            for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
            ql += 32;
            is += 2;
            u1 <<= 2;
            u2 <<= 2;
        }
    }
}

void dequantize_q6_K(const void * vx, float * y, int64_t k) {
    const block_q6_K * x = static_cast<const block_q6_K *>(vx);
    for (int64_t i = 0; i < k / QK_K; i++) {
        const float d = h2f(x[i].d);
        const uint8_t * ql = x[i].ql;
        const uint8_t * qh = x[i].qh;
        const int8_t * sc = x[i].scales;
        for (int n = 0; n < QK_K; n += 128) {
            for (int l = 0; l < 32; ++l) {
                const int is = l / 16;
                const int8_t q1 = (int8_t)((ql[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int8_t q2 = (int8_t)((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int8_t q3 = (int8_t)((ql[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int8_t q4 = (int8_t)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l + 0] = d * sc[is + 0] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
            y += 128;
            ql += 64;
            qh += 32;
            sc += 8;
        }
    }
}

void dequantize_iq4_nl(const void * vx, float * y, int64_t k) {
    const block_iq4_nl * x = static_cast<const block_iq4_nl *>(vx);
    for (int64_t i = 0; i < k / QK4_NL; i++, y += QK4_NL) {
        const float d = h2f(x[i].d);
        for (int j = 0; j < QK4_NL / 2; ++j) {
            y[j] = d * kIq4Levels[x[i].qs[j] & 0xF];
            y[j + QK4_NL / 2] = d * kIq4Levels[x[i].qs[j] >> 4];
        }
    }
}

void dequantize_iq4_xs(const void * vx, float * y, int64_t k) {
    const block_iq4_xs * x = static_cast<const block_iq4_xs *>(vx);
    for (int64_t i = 0; i < k / QK_K; i++) {
        const float d = h2f(x[i].d);
        for (int ib = 0; ib < QK_K / 32; ++ib, y += 32) {
            const float dl = d * (iq4_xs_scale(x[i], ib) - 32);
            const uint8_t * qs = x[i].qs + 16 * ib;
            for (int j = 0; j < 16; ++j) {
                y[j] = dl * kIq4Levels[qs[j] & 0xF];
                y[j + 16] = dl * kIq4Levels[qs[j] >> 4];
            }
        }
    }
}

void dequantize_mxfp4(const void * vx, float * y, int64_t k) {
    const block_mxfp4 * x = static_cast<const block_mxfp4 *>(vx);
    for (int64_t i = 0; i < k / 32; i++, y += 32) {
        const float d = e8m0_half(x[i].e);
        for (int j = 0; j < 16; ++j) {
            y[j] = d * kFp4Levels[x[i].qs[j] & 0xF];
            y[j + 16] = d * kFp4Levels[x[i].qs[j] >> 4];
        }
    }
}

void dequantize_nvfp4(const void * vx, float * y, int64_t k) {
    const block_nvfp4 * x = static_cast<const block_nvfp4 *>(vx);
    for (int64_t i = 0; i < k / QK_NVFP4; i++) {
        for (int s = 0; s < QK_NVFP4 / QK_NVFP4_SUB; s++, y += QK_NVFP4_SUB) {
            const float d = ue4m3_half(x[i].d[s]);
            const uint8_t * qs = x[i].qs + s * (QK_NVFP4_SUB / 2);
            for (int j = 0; j < QK_NVFP4_SUB / 2; ++j) {
                y[j] = kFp4Levels[qs[j] & 0xF] * d;
                y[j + QK_NVFP4_SUB / 2] = kFp4Levels[qs[j] >> 4] * d;
            }
        }
    }
}

void dequantize_q1_0(const void * vx, float * y, int64_t k) {
    const block_q1_0 * x = static_cast<const block_q1_0 *>(vx);
    for (int64_t i = 0; i < k / QK1_0; i++, y += QK1_0) {
        const float d = h2f(x[i].d), neg_d = -d;
        for (int j = 0; j < QK1_0; ++j) y[j] = ((x[i].qs[j / 8] >> (j % 8)) & 1) ? d : neg_d;
    }
}

void dequantize_q2_0(const void * vx, float * y, int64_t k) {
    const block_q2_0 * x = static_cast<const block_q2_0 *>(vx);
    for (int64_t i = 0; i < k / QK2_0; i++, y += QK2_0) {
        const float d = h2f(x[i].d);
        for (int j = 0; j < QK2_0; ++j) y[j] = static_cast<float>(((x[i].qs[j / 4] >> (2 * (j % 4))) & 3) - 1) * d;
    }
}

// TQ1_0's packed trits: byte b's n-th trit (n = 0 the most significant) is the top "digit" of
// (uint8)(b * 3^n) * 3, i.e. ((uint8)(b * 3^n) * 3) >> 8 (ggml's decoding, exact for its encoding).
struct tq1_table {
    int8_t v[256][5];  // trit - 1, in {-1, 0, 1}
    tq1_table() {
        const uint8_t pow3[5] = {1, 3, 9, 27, 81};
        for (int b = 0; b < 256; b++)
            for (int n = 0; n < 5; n++) {
                const uint8_t q = static_cast<uint8_t>(b * pow3[n]);
                v[b][n] = static_cast<int8_t>(((static_cast<uint16_t>(q) * 3) >> 8) - 1);
            }
    }
};
const tq1_table & tq1() {
    static const tq1_table t;
    return t;
}

// One TQ1_0 block's 256 values (trit - 1) in element order.
inline void tq1_0_unpack(const block_tq1_0 & b, int8_t * q) {
    const tq1_table & t = tq1();
    for (int n = 0; n < 5; n++)
        for (int m = 0; m < 32; m++) q[n * 32 + m] = t.v[b.qs[m]][n];
    for (int n = 0; n < 5; n++)
        for (int m = 0; m < 16; m++) q[160 + n * 16 + m] = t.v[b.qs[32 + m]][n];
    for (int n = 0; n < 4; n++)
        for (int j = 0; j < 4; j++) q[240 + n * 4 + j] = t.v[b.qh[j]][n];
}

// One TQ2_0 block's 256 values (q - 1): element 128 h + 32 l + m is bits 2l of qs[32 h + m].
inline void tq2_0_unpack(const block_tq2_0 & b, int8_t * q) {
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 4; l++)
            for (int m = 0; m < 32; m++) q[128 * h + 32 * l + m] = static_cast<int8_t>(((b.qs[32 * h + m] >> (2 * l)) & 3) - 1);
}

void dequantize_tq1_0(const void * vx, float * y, int64_t k) {
    const block_tq1_0 * x = static_cast<const block_tq1_0 *>(vx);
    int8_t q[QK_K];
    for (int64_t i = 0; i < k / QK_K; i++, y += QK_K) {
        const float d = h2f(x[i].d);
        tq1_0_unpack(x[i], q);
        for (int j = 0; j < QK_K; j++) y[j] = static_cast<float>(q[j]) * d;
    }
}

void dequantize_tq2_0(const void * vx, float * y, int64_t k) {
    const block_tq2_0 * x = static_cast<const block_tq2_0 *>(vx);
    int8_t q[QK_K];
    for (int64_t i = 0; i < k / QK_K; i++, y += QK_K) {
        const float d = h2f(x[i].d);
        tq2_0_unpack(x[i], q);
        for (int j = 0; j < QK_K; j++) y[j] = static_cast<float>(q[j]) * d;
    }
}

void dequantize_q8_K(const void * vx, float * y, int64_t k) {
    const block_q8_K * x = static_cast<const block_q8_K *>(vx);
    for (int64_t i = 0; i < k / QK_K; i++)
        for (int j = 0; j < QK_K; ++j) *y++ = x[i].d * x[i].qs[j];
}

// ============================ reference quantizers ============================

void quantize_q4_0_ref(const float * x, void * vy, int64_t k) {
    block_q4_0 * y = static_cast<block_q4_0 *>(vy);
    const int qk = QK4_0;
    for (int64_t i = 0; i < k / qk; i++) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < qk; j++) {
            const float v = x[i * qk + j];
            if (amax < std::fabs(v)) { amax = std::fabs(v); max = v; }
        }
        const float d = max / -8;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = f2h(d);
        for (int j = 0; j < qk / 2; ++j) {
            const float x0 = x[i * qk + 0 + j] * id;
            const float x1 = x[i * qk + qk / 2 + j] * id;
            const uint8_t xi0 = std::min<int8_t>(15, (int8_t)(x0 + 8.5f));
            const uint8_t xi1 = std::min<int8_t>(15, (int8_t)(x1 + 8.5f));
            y[i].qs[j] = xi0 | (xi1 << 4);
        }
    }
}

void quantize_q4_1_ref(const float * x, void * vy, int64_t k) {
    block_q4_1 * y = static_cast<block_q4_1 *>(vy);
    const int qk = QK4_1;
    for (int64_t i = 0; i < k / qk; i++) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < qk; j++) {
            const float v = x[i * qk + j];
            if (v < min) min = v;
            if (v > max) max = v;
        }
        const float d = (max - min) / ((1 << 4) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = f2h(d);
        y[i].m = f2h(min);
        for (int j = 0; j < qk / 2; ++j) {
            const float x0 = (x[i * qk + 0 + j] - min) * id;
            const float x1 = (x[i * qk + qk / 2 + j] - min) * id;
            const uint8_t xi0 = std::min<int8_t>(15, (int8_t)(x0 + 0.5f));
            const uint8_t xi1 = std::min<int8_t>(15, (int8_t)(x1 + 0.5f));
            y[i].qs[j] = xi0 | (xi1 << 4);
        }
    }
}

void quantize_q5_0_ref(const float * x, void * vy, int64_t k) {
    block_q5_0 * y = static_cast<block_q5_0 *>(vy);
    const int qk = QK5_0;
    for (int64_t i = 0; i < k / qk; i++) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < qk; j++) {
            const float v = x[i * qk + j];
            if (amax < std::fabs(v)) { amax = std::fabs(v); max = v; }
        }
        const float d = max / -16;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = f2h(d);
        uint32_t qh = 0;
        for (int j = 0; j < qk / 2; ++j) {
            const float x0 = x[i * qk + 0 + j] * id;
            const float x1 = x[i * qk + qk / 2 + j] * id;
            const uint8_t xi0 = std::min<int8_t>(31, (int8_t)(x0 + 16.5f));
            const uint8_t xi1 = std::min<int8_t>(31, (int8_t)(x1 + 16.5f));
            y[i].qs[j] = (xi0 & 0x0F) | ((xi1 & 0x0F) << 4);
            qh |= ((xi0 & 0x10u) >> 4) << (j + 0);
            qh |= ((xi1 & 0x10u) >> 4) << (j + qk / 2);
        }
        std::memcpy(y[i].qh, &qh, 4);
    }
}

void quantize_q5_1_ref(const float * x, void * vy, int64_t k) {
    block_q5_1 * y = static_cast<block_q5_1 *>(vy);
    const int qk = QK5_1;
    for (int64_t i = 0; i < k / qk; i++) {
        float min = FLT_MAX, max = -FLT_MAX;
        for (int j = 0; j < qk; j++) {
            const float v = x[i * qk + j];
            if (v < min) min = v;
            if (v > max) max = v;
        }
        const float d = (max - min) / ((1 << 5) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = f2h(d);
        y[i].m = f2h(min);
        uint32_t qh = 0;
        for (int j = 0; j < qk / 2; ++j) {
            const float x0 = (x[i * qk + 0 + j] - min) * id;
            const float x1 = (x[i * qk + qk / 2 + j] - min) * id;
            const uint8_t xi0 = (uint8_t)(x0 + 0.5f);
            const uint8_t xi1 = (uint8_t)(x1 + 0.5f);
            y[i].qs[j] = (xi0 & 0x0F) | ((xi1 & 0x0F) << 4);
            qh |= ((xi0 & 0x10u) >> 4) << (j + 0);
            qh |= ((xi1 & 0x10u) >> 4) << (j + qk / 2);
        }
        std::memcpy(y[i].qh, &qh, 4);
    }
}

void quantize_q8_0_ref(const float * x, void * vy, int64_t k) {
    block_q8_0 * y = static_cast<block_q8_0 *>(vy);
    for (int64_t i = 0; i < k / QK8_0; i++) {
        float amax = 0.0f;
        for (int j = 0; j < QK8_0; j++) amax = std::max(amax, std::fabs(x[i * QK8_0 + j]));
        const float d = amax / ((1 << 7) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = f2h(d);
        for (int j = 0; j < QK8_0; ++j) y[i].qs[j] = (int8_t)std::round(x[i * QK8_0 + j] * id);
    }
}

void quantize_q8_1_ref(const float * x, void * vy, int64_t k) {
    block_q8_1 * y = static_cast<block_q8_1 *>(vy);
    for (int64_t i = 0; i < k / QK8_1; i++) {
        float amax = 0.0f;
        for (int j = 0; j < QK8_1; j++) amax = std::max(amax, std::fabs(x[i * QK8_1 + j]));
        const float d = amax / ((1 << 7) - 1);
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = f2h(d);
        int sum = 0;
        for (int j = 0; j < QK8_1 / 2; ++j) {
            const float v0 = x[i * QK8_1 + j] * id;
            const float v1 = x[i * QK8_1 + QK8_1 / 2 + j] * id;
            y[i].qs[j] = (int8_t)std::round(v0);
            y[i].qs[QK8_1 / 2 + j] = (int8_t)std::round(v1);
            sum += y[i].qs[j] + y[i].qs[QK8_1 / 2 + j];
        }
        y[i].s = f2h(sum * d);
    }
}

float make_qx_quants(int n, int nmax, const float * x, int8_t * L, int rmse_type, const float * qw) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        const float ax = std::fabs(x[i]);
        if (ax > amax) { amax = ax; max = x[i]; }
    }
    if (amax < GROUP_MAX_EPS) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    float iscale = -nmax / max;
    if (rmse_type == 0) {
        for (int i = 0; i < n; ++i) {
            const int l = nearest_int(iscale * x[i]);
            L[i] = nmax + std::max(-nmax, std::min(nmax - 1, l));
        }
        return 1 / iscale;
    }
    bool return_early = false;
    if (rmse_type < 0) { rmse_type = -rmse_type; return_early = true; }
    auto weight = [&](int i) {
        return qw ? qw[i] : rmse_type == 1 ? x[i] * x[i] : rmse_type == 2 ? 1 : rmse_type == 3 ? std::fabs(x[i]) : std::sqrt(std::fabs(x[i]));
    };
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * x[i]);
        l = std::max(-nmax, std::min(nmax - 1, l));
        L[i] = l + nmax;
        const float w = weight(i);
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    if (return_early) return suml2 > 0 ? 0.5f * (scale + 1 / iscale) : 1 / iscale;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; ++is) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * x[i]);
            l = std::max(-nmax, std::min(nmax - 1, l));
            const float w = weight(i);
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; ++i) {
                const int l = nearest_int(iscale * x[i]);
                L[i] = nmax + std::max(-nmax, std::min(nmax - 1, l));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

float make_q3_quants(int n, int nmax, const float * x, int8_t * L, bool do_rmse) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; ++i) {
        const float ax = std::fabs(x[i]);
        if (ax > amax) { amax = ax; max = x[i]; }
    }
    if (amax < GROUP_MAX_EPS) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    const float iscale = -nmax / max;
    if (do_rmse) {
        float sumlx = 0, suml2 = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * x[i]);
            l = std::max(-nmax, std::min(nmax - 1, l));
            L[i] = l;
            const float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        for (int itry = 0; itry < 5; ++itry) {
            int n_changed = 0;
            for (int i = 0; i < n; ++i) {
                const float w = x[i] * x[i];
                float slx = sumlx - w * x[i] * L[i];
                if (slx > 0) {
                    float sl2 = suml2 - w * L[i] * L[i];
                    int new_l = nearest_int(x[i] * sl2 / slx);
                    new_l = std::max(-nmax, std::min(nmax - 1, new_l));
                    if (new_l != L[i]) {
                        slx += w * x[i] * new_l;
                        sl2 += w * new_l * new_l;
                        if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                            L[i] = new_l;
                            sumlx = slx;
                            suml2 = sl2;
                            ++n_changed;
                        }
                    }
                }
            }
            if (!n_changed) break;
        }
        for (int i = 0; i < n; ++i) L[i] += nmax;
        return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
    }
    for (int i = 0; i < n; ++i) {
        int l = nearest_int(iscale * x[i]);
        l = std::max(-nmax, std::min(nmax - 1, l));
        L[i] = l + nmax;
    }
    return 1 / iscale;
}

float make_qkx2_quants(int n, int nmax, const float * x, const float * weights, uint8_t * L, float * the_min,
                       uint8_t * Laux, float rmin, float rdelta, int nstep, bool use_mad) {
    float min = x[0], max = x[0];
    float sum_w = weights[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        const float w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; ++i) {
        const int l = nearest_int(iscale * (x[i] - min));
        L[i] = std::max(0, std::min(nmax, l));
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        best_error += weights[i] * diff;
    }
    if (nstep < 1) {
        *the_min = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * (x[i] - min));
            l = std::max(0, std::min(nmax, l));
            Laux[i] = l;
            const float w = weights[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0;
            for (int i = 0; i < n; ++i) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = use_mad ? std::fabs(diff) : diff * diff;
                cur_error += weights[i] * diff;
            }
            if (cur_error < best_error) {
                for (int i = 0; i < n; ++i) L[i] = Laux[i];
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

void quantize_q2_K_ref(const float * x, void * vy, int64_t k) {
    block_q2_K * y = static_cast<block_q2_K *>(vy);
    uint8_t L[QK_K], Laux[16];
    float weights[16], mins[QK_K / 16], scales[QK_K / 16];
    const float q4scale = 15.f;
    for (int64_t i = 0; i < k / QK_K; i++) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < QK_K / 16; ++j) {
            for (int l = 0; l < 16; ++l) weights[l] = std::fabs(x[16 * j + l]);
            scales[j] = make_qkx2_quants(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
            max_scale = std::max(max_scale, scales[j]);
            max_min = std::max(max_min, mins[j]);
        }
        if (max_scale > 0) {
            const float iscale = q4scale / max_scale;
            for (int j = 0; j < QK_K / 16; ++j) y[i].scales[j] = nearest_int(iscale * scales[j]);
            y[i].d = f2h(max_scale / q4scale);
        } else {
            for (int j = 0; j < QK_K / 16; ++j) y[i].scales[j] = 0;
            y[i].d = f2h(0.f);
        }
        if (max_min > 0) {
            const float iscale = q4scale / max_min;
            for (int j = 0; j < QK_K / 16; ++j) y[i].scales[j] |= (nearest_int(iscale * mins[j]) << 4);
            y[i].dmin = f2h(max_min / q4scale);
        } else {
            y[i].dmin = f2h(0.f);
        }
        for (int j = 0; j < QK_K / 16; ++j) {
            const float d = h2f(y[i].d) * (y[i].scales[j] & 0xF);
            if (!d) continue;
            const float dm = h2f(y[i].dmin) * (y[i].scales[j] >> 4);
            for (int ii = 0; ii < 16; ++ii) {
                const int l = nearest_int((x[16 * j + ii] + dm) / d);
                L[16 * j + ii] = std::max(0, std::min(3, l));
            }
        }
        for (int j = 0; j < QK_K; j += 128)
            for (int l = 0; l < 32; ++l)
                y[i].qs[j / 4 + l] = L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6);
        x += QK_K;
    }
}

void quantize_q3_K_ref(const float * x, void * vy, int64_t k) {
    block_q3_K * y = static_cast<block_q3_K *>(vy);
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int64_t i = 0; i < k / QK_K; i++) {
        float max_scale = 0, amax = 0;
        for (int j = 0; j < QK_K / 16; ++j) {
            scales[j] = make_q3_quants(16, 4, x + 16 * j, L + 16 * j, true);
            const float scale = std::fabs(scales[j]);
            if (scale > amax) { amax = scale; max_scale = scales[j]; }
        }
        std::memset(y[i].scales, 0, 12);
        if (max_scale) {
            const float iscale = -32.f / max_scale;
            for (int j = 0; j < QK_K / 16; ++j) {
                int8_t l = nearest_int(iscale * scales[j]);
                l = std::max<int8_t>(-32, std::min<int8_t>(31, l)) + 32;
                if (j < 8) y[i].scales[j] = l & 0xF;
                else y[i].scales[j - 8] |= ((l & 0xF) << 4);
                l >>= 4;
                y[i].scales[j % 4 + 8] |= (l << (2 * (j / 4)));
            }
            y[i].d = f2h(1 / iscale);
        } else {
            y[i].d = f2h(0.f);
        }
        for (int j = 0; j < QK_K / 16; ++j) {
            int8_t sc = j < 8 ? y[i].scales[j] & 0xF : y[i].scales[j - 8] >> 4;
            sc = (sc | (((y[i].scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
            const float d = h2f(y[i].d) * sc;
            if (!d) continue;
            for (int ii = 0; ii < 16; ++ii) {
                const int l = nearest_int(x[16 * j + ii] / d);
                L[16 * j + ii] = std::max(-4, std::min(3, l)) + 4;
            }
        }
        std::memset(y[i].hmask, 0, QK_K / 8);
        // High bit of the first 8 sub-blocks' quants goes to bit 0 of hmask, the next 8 to bit 1, ...
        int m = 0;
        uint8_t hm = 1;
        for (int j = 0; j < QK_K; ++j) {
            if (L[j] > 3) {
                y[i].hmask[m] |= hm;
                L[j] -= 4;
            }
            if (++m == QK_K / 8) { m = 0; hm <<= 1; }
        }
        for (int j = 0; j < QK_K; j += 128)
            for (int l = 0; l < 32; ++l)
                y[i].qs[j / 4 + l] = L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6);
        x += QK_K;
    }
}

// Q4_K and Q5_K share the 6-bit scale/min packing.
void pack_scale_min_k4(uint8_t * packed, const float * scales, const float * mins, float max_scale, float max_min) {
    const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    for (int j = 0; j < QK_K / 32; ++j) {
        uint8_t ls = nearest_int(inv_scale * scales[j]);
        uint8_t lm = nearest_int(inv_min * mins[j]);
        ls = std::min<uint8_t>(63, ls);
        lm = std::min<uint8_t>(63, lm);
        if (j < 4) {
            packed[j] = ls;
            packed[j + 4] = lm;
        } else {
            packed[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
            packed[j - 4] |= ((ls >> 4) << 6);
            packed[j - 0] |= ((lm >> 4) << 6);
        }
    }
}

void quantize_q4_K_ref(const float * x, void * vy, int64_t k) {
    block_q4_K * y = static_cast<block_q4_K *>(vy);
    uint8_t L[QK_K], Laux[32];
    float weights[32], mins[QK_K / 32], scales[QK_K / 32];
    for (int64_t i = 0; i < k / QK_K; i++) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < QK_K / 32; ++j) {
            float sum_x2 = 0;
            for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
            const float av_x = std::sqrt(sum_x2 / 32);
            for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
            scales[j] = make_qkx2_quants(32, 15, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, -1.f, 0.1f, 20, false);
            max_scale = std::max(max_scale, scales[j]);
            max_min = std::max(max_min, mins[j]);
        }
        std::memset(y[i].scales, 0, K_SCALE_SIZE);
        pack_scale_min_k4(y[i].scales, scales, mins, max_scale, max_min);
        y[i].d = f2h(max_scale / 63.f);
        y[i].dmin = f2h(max_min / 63.f);
        uint8_t sc, m;
        for (int j = 0; j < QK_K / 32; ++j) {
            get_scale_min_k4(j, y[i].scales, &sc, &m);
            const float d = h2f(y[i].d) * sc;
            if (!d) continue;
            const float dm = h2f(y[i].dmin) * m;
            for (int ii = 0; ii < 32; ++ii) {
                const int l = nearest_int((x[32 * j + ii] + dm) / d);
                L[32 * j + ii] = std::max(0, std::min(15, l));
            }
        }
        uint8_t * q = y[i].qs;
        for (int j = 0; j < QK_K; j += 64) {
            for (int l = 0; l < 32; ++l) q[l] = L[j + l] | (L[j + l + 32] << 4);
            q += 32;
        }
        x += QK_K;
    }
}

void quantize_q5_K_ref(const float * x, void * vy, int64_t k) {
    block_q5_K * y = static_cast<block_q5_K *>(vy);
    uint8_t L[QK_K], Laux[32];
    float weights[32], mins[QK_K / 32], scales[QK_K / 32];
    for (int64_t i = 0; i < k / QK_K; i++) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < QK_K / 32; ++j) {
            float sum_x2 = 0;
            for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
            const float av_x = std::sqrt(sum_x2 / 32);
            for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
            scales[j] = make_qkx2_quants(32, 31, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, -0.5f, 0.1f, 15, false);
            max_scale = std::max(max_scale, scales[j]);
            max_min = std::max(max_min, mins[j]);
        }
        std::memset(y[i].scales, 0, K_SCALE_SIZE);
        pack_scale_min_k4(y[i].scales, scales, mins, max_scale, max_min);
        y[i].d = f2h(max_scale / 63.f);
        y[i].dmin = f2h(max_min / 63.f);
        uint8_t sc, m;
        for (int j = 0; j < QK_K / 32; ++j) {
            get_scale_min_k4(j, y[i].scales, &sc, &m);
            const float d = h2f(y[i].d) * sc;
            if (!d) continue;
            const float dm = h2f(y[i].dmin) * m;
            for (int ii = 0; ii < 32; ++ii) {
                const int l = nearest_int((x[32 * j + ii] + dm) / d);
                L[32 * j + ii] = std::max(0, std::min(31, l));
            }
        }
        uint8_t * qh = y[i].qh;
        uint8_t * ql = y[i].qs;
        std::memset(qh, 0, QK_K / 8);
        uint8_t m1 = 1, m2 = 2;
        for (int n = 0; n < QK_K; n += 64) {
            for (int j = 0; j < 32; ++j) {
                int l1 = L[n + j];
                if (l1 > 15) { l1 -= 16; qh[j] |= m1; }
                int l2 = L[n + j + 32];
                if (l2 > 15) { l2 -= 16; qh[j] |= m2; }
                ql[j] = l1 | (l2 << 4);
            }
            m1 <<= 2;
            m2 <<= 2;
            ql += 32;
        }
        x += QK_K;
    }
}

void quantize_q6_K_ref(const float * x, void * vy, int64_t k) {
    block_q6_K * y = static_cast<block_q6_K *>(vy);
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int64_t i = 0; i < k / QK_K; i++) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < QK_K / 16; ++ib) {
            const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib, 1, nullptr);
            scales[ib] = scale;
            const float abs_scale = std::fabs(scale);
            if (abs_scale > max_abs_scale) { max_abs_scale = abs_scale; max_scale = scale; }
        }
        if (max_abs_scale < GROUP_MAX_EPS) {
            std::memset(&y[i], 0, sizeof(block_q6_K));
            y[i].d = f2h(0.f);
            x += QK_K;
            continue;
        }
        const float iscale = -128.f / max_scale;
        y[i].d = f2h(1 / iscale);
        for (int ib = 0; ib < QK_K / 16; ++ib) y[i].scales[ib] = std::min(127, nearest_int(iscale * scales[ib]));
        for (int j = 0; j < QK_K / 16; ++j) {
            const float d = h2f(y[i].d) * y[i].scales[j];
            if (!d) continue;
            for (int ii = 0; ii < 16; ++ii) {
                const int l = nearest_int(x[16 * j + ii] / d);
                L[16 * j + ii] = std::max(-32, std::min(31, l)) + 32;
            }
        }
        uint8_t * ql = y[i].ql;
        uint8_t * qh = y[i].qh;
        for (int j = 0; j < QK_K; j += 128) {
            for (int l = 0; l < 32; ++l) {
                const uint8_t q1 = L[j + l + 0] & 0xF;
                const uint8_t q2 = L[j + l + 32] & 0xF;
                const uint8_t q3 = L[j + l + 64] & 0xF;
                const uint8_t q4 = L[j + l + 96] & 0xF;
                ql[l + 0] = q1 | (q3 << 4);
                ql[l + 32] = q2 | (q4 << 4);
                qh[l] = (L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6);
            }
            ql += 64;
            qh += 32;
        }
        x += QK_K;
    }
}

// ---- IQ4_NL / IQ4_XS ----

// The level nearest to v (levels ascending; ties to the lower).
// For each integer f in [-127, 113): the last level <= f. The levels are integers, so the last
// level <= v is the last level <= floor(v) (the quantizers' hot loop: a lookup, not a search).
struct iq4_floor_table {
    uint8_t lo[113 + 127];
    constexpr iq4_floor_table() : lo{} {
        int i = 0;
        for (int f = -127; f < 113; f++) {
            while (i < 15 && kIq4Levels[i + 1] <= f) i++;
            lo[f + 127] = static_cast<uint8_t>(i);
        }
    }
};
constexpr iq4_floor_table kIq4Floor;

inline int iq4_nearest(float v) {
    if (!(v > kIq4Levels[0])) return 0;  // NaN too
    if (v >= kIq4Levels[15]) return 15;
    // v + 127 is in (0, 240): truncation is floor. Rounding of the sum can carry it up to the next
    // integer (never down past one), which the second line undoes.
    int lo = kIq4Floor.lo[static_cast<int>(v + 127.f)];
    if (kIq4Levels[lo] > v) lo--;
    const int hi = lo + 1;
    return v - kIq4Levels[lo] <= kIq4Levels[hi] - v ? lo : hi;
}

// One 32-element block: the scale d (x ~ d * level) and the indices, chosen by trying scales around
// "largest magnitude on the -127 level" and keeping the one of least squared error after a
// least-squares refit. Deterministic; weighted by x^2 as ggml's importance-free default.
float iq4_block(const float * x, uint8_t * L) {
    float amax = 0, max = 0;
    for (int j = 0; j < 32; j++)
        if (std::fabs(x[j]) > amax) {
            amax = std::fabs(x[j]);
            max = x[j];
        }
    if (amax < GROUP_MAX_EPS) {
        std::memset(L, 8, 32);  // level 1: d = 0 makes it 0
        return 0.f;
    }
    float best_d = 0, best_err = INFINITY;
    for (int t = -9; t <= 9; t++) {
        const float id = (kIq4Levels[0] + 0.1f * t) / max;  // 1 / d
        float sumqx = 0, sumq2 = 0;
        uint8_t Lt[32];
        for (int j = 0; j < 32; j++) {
            Lt[j] = static_cast<uint8_t>(iq4_nearest(id * x[j]));
            const float w = x[j] * x[j], q = kIq4Levels[Lt[j]];
            sumqx += w * q * x[j];
            sumq2 += w * q * q;
        }
        const float d = sumq2 > 0 ? sumqx / sumq2 : 0;
        float err = 0;
        for (int j = 0; j < 32; j++) {
            const float e = x[j] - d * kIq4Levels[Lt[j]];
            err += x[j] * x[j] * e * e;
        }
        if (err < best_err) {
            best_err = err;
            best_d = d;
            std::memcpy(L, Lt, 32);
        }
    }
    return best_d;
}

inline void iq4_pack(const uint8_t * L, uint8_t * qs) {
    for (int j = 0; j < 16; j++) qs[j] = static_cast<uint8_t>(L[j] | (L[j + 16] << 4));
}

void quantize_iq4_nl_ref(const float * x, void * vy, int64_t k) {
    block_iq4_nl * y = static_cast<block_iq4_nl *>(vy);
    uint8_t L[32];
    for (int64_t i = 0; i < k / QK4_NL; i++, x += QK4_NL) {
        y[i].d = f2h(iq4_block(x, L));
        // Indices for the scale as stored (fp16).
        const float d = h2f(y[i].d);
        if (d != 0)
            for (int j = 0; j < 32; j++) L[j] = static_cast<uint8_t>(iq4_nearest(x[j] / d));
        iq4_pack(L, y[i].qs);
    }
}

// MXFP4: the scale puts the largest magnitude near the top levels (ggml's choice of exponent:
// floor(log2 amax) - 2), each value then takes its nearest level.
void quantize_mxfp4_ref(const float * x, void * vy, int64_t k) {
    block_mxfp4 * y = static_cast<block_mxfp4 *>(vy);
    for (int64_t i = 0; i < k / 32; i++, x += 32) {
        float amax = 0;
        for (int j = 0; j < 32; j++) amax = std::max(amax, std::fabs(x[j]));
        const int e = amax > 0 ? std::max(0, std::min(254, static_cast<int>(std::floor(std::log2(amax))) - 2 + 127)) : 0;
        y[i].e = static_cast<uint8_t>(e);
        const float d = e8m0_half(y[i].e);
        uint8_t L[32];
        for (int j = 0; j < 32; j++) {
            int best = 0;
            float best_err = INFINITY;
            for (int l = 0; l < 16; l++) {
                const float err = std::fabs(x[j] - d * kFp4Levels[l]);
                if (err < best_err) {
                    best_err = err;
                    best = l;
                }
            }
            L[j] = static_cast<uint8_t>(best);
        }
        for (int j = 0; j < 16; j++) y[i].qs[j] = static_cast<uint8_t>(L[j] | (L[j + 16] << 4));
    }
}

// ggml_fp32_to_ue4m3: the scale byte for x > 0, rounding the mantissa's first dropped bit up,
// saturating at 448 (0x7E), subnormals as round(x * 2^9) clamped to 1..7 (else 0).
uint8_t fp32_to_ue4m3(float x) {
    if (!(x > 0.0f)) return 0;
    if (x > 448.0f) x = 448.0f;
    uint32_t bits;
    std::memcpy(&bits, &x, 4);
    const int fp32_exp = static_cast<int>((bits >> 23) & 0xFF) - 127;
    const int fp32_man = static_cast<int>((bits >> 20) & 0x7);
    int e = fp32_exp + 7;
    if (e <= 0) {
        int man = static_cast<int>(x * 512.0f + 0.5f);
        if (man > 7) man = 7;
        return man < 1 ? 0 : static_cast<uint8_t>(man);
    }
    if (e >= 15) return 0x7E;
    int man = fp32_man + static_cast<int>((bits >> 19) & 1);
    if (man > 7) {
        man = 0;
        if (++e >= 15) return 0x7E;
    }
    return static_cast<uint8_t>((e << 3) | man);
}

// The FP4 level nearest x / d (the first of equals), as ggml's best_index_mxfp4.
inline uint8_t fp4_nearest(float x, float d) {
    int best = 0;
    float best_err = std::fabs(kFp4Levels[0] * d - x);
    for (int l = 1; l < 16; l++) {
        const float err = std::fabs(kFp4Levels[l] * d - x);
        if (err < best_err) {
            best_err = err;
            best = l;
        }
    }
    return static_cast<uint8_t>(best);
}

// NVFP4 (ggml's quantize_row_nvfp4_ref): each sub-block's scale is UE4M3(amax / 6), so its
// largest magnitude meets the top level 6; each value then takes its nearest level.
void quantize_nvfp4_ref(const float * x, void * vy, int64_t k) {
    block_nvfp4 * y = static_cast<block_nvfp4 *>(vy);
    for (int64_t i = 0; i < k / QK_NVFP4; i++) {
        for (int s = 0; s < QK_NVFP4 / QK_NVFP4_SUB; s++, x += QK_NVFP4_SUB) {
            float amax = 0.0f;
            for (int j = 0; j < QK_NVFP4_SUB; j++)
                if (amax < std::fabs(x[j])) amax = std::fabs(x[j]);
            const uint8_t ue = fp32_to_ue4m3(amax / 6.0f);
            y[i].d[s] = ue;
            const float d = ue4m3_half(ue);
            for (int j = 0; j < QK_NVFP4_SUB / 2; ++j)
                y[i].qs[s * (QK_NVFP4_SUB / 2) + j] = static_cast<uint8_t>(fp4_nearest(x[j], d) | (fp4_nearest(x[j + QK_NVFP4_SUB / 2], d) << 4));
        }
    }
}

// Q1_0 (ggml's quantize_row_q1_0_ref): d = mean |x| (summed in element order), the bit = x >= 0.
void quantize_q1_0_ref(const float * x, void * vy, int64_t k) {
    block_q1_0 * y = static_cast<block_q1_0 *>(vy);
    for (int64_t i = 0; i < k / QK1_0; i++, x += QK1_0) {
        float sum_abs = 0.0f;
        for (int j = 0; j < QK1_0; j++) sum_abs += std::fabs(x[j]);
        y[i].d = f2h(sum_abs / QK1_0);
        std::memset(y[i].qs, 0, sizeof y[i].qs);
        for (int j = 0; j < QK1_0; ++j)
            if (x[j] >= 0.0f) y[i].qs[j / 8] |= static_cast<uint8_t>(1u << (j % 8));
    }
}

// Q2_0 (ggml's quantize_row_q2_0_ref): d = amax, q = round-half-away(x / d) + 1 clamped to 0..3.
void quantize_q2_0_ref(const float * x, void * vy, int64_t k) {
    block_q2_0 * y = static_cast<block_q2_0 *>(vy);
    for (int64_t i = 0; i < k / QK2_0; i++, x += QK2_0) {
        float amax = 0.0f;
        for (int j = 0; j < QK2_0; j++) {
            const float a = std::fabs(x[j]);
            if (a > amax) amax = a;
        }
        const float d = amax;
        const float id = d > 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f2h(d);
        std::memset(y[i].qs, 0, sizeof y[i].qs);
        for (int j = 0; j < QK2_0; ++j) {
            int q = static_cast<int>(std::round(x[j] * id)) + 1;
            q = std::max(0, std::min(3, q));
            y[i].qs[j / 4] |= static_cast<uint8_t>(q << (2 * (j % 4)));
        }
    }
}

// The ternary reference quantizers (ggml's quantize_row_tq1_0_ref / tq2_0_ref): d = amax, each
// value lround(x / d) + 1 in {0, 1, 2}.
inline int trit(float v, float id) { return static_cast<int>(std::lround(v * id)) + 1; }

void quantize_tq1_0_ref(const float * x, void * vy, int64_t k) {
    block_tq1_0 * y = static_cast<block_tq1_0 *>(vy);
    for (int64_t i = 0; i < k / QK_K; i++, x += QK_K) {
        float amax = 0.0f;
        for (int j = 0; j < QK_K; j++) amax = amax > std::fabs(x[j]) ? amax : std::fabs(x[j]);  // ggml's MAX
        const float d = amax;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f2h(d);
        // ceil(t * 256 / 243) of the base-3 number t (first element most significant).
        auto pack = [](int t) { return static_cast<uint8_t>((static_cast<uint16_t>(t) * 256 + (243 - 1)) / 243); };
        for (int m = 0; m < 32; m++) {
            int t = 0;
            for (int n = 0; n < 5; n++) t = t * 3 + trit(x[m + n * 32], id);
            y[i].qs[m] = pack(t);
        }
        for (int m = 0; m < 16; m++) {
            int t = 0;
            for (int n = 0; n < 5; n++) t = t * 3 + trit(x[160 + m + n * 16], id);
            y[i].qs[32 + m] = pack(t);
        }
        for (int j = 0; j < 4; j++) {
            int t = 0;
            for (int m = 0; m < 4; m++) t = t * 3 + trit(x[240 + j + m * 4], id);
            y[i].qh[j] = pack(t * 3);  // the first value as the most significant of 5 trits
        }
    }
}

void quantize_tq2_0_ref(const float * x, void * vy, int64_t k) {
    block_tq2_0 * y = static_cast<block_tq2_0 *>(vy);
    for (int64_t i = 0; i < k / QK_K; i++, x += QK_K) {
        float amax = 0.0f;
        for (int j = 0; j < QK_K; j++) amax = amax > std::fabs(x[j]) ? amax : std::fabs(x[j]);  // ggml's MAX
        const float d = amax;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = f2h(d);
        for (int h = 0; h < 2; h++)
            for (int m = 0; m < 32; m++) {
                int q = 0;
                for (int n = 0; n < 4; n++) q += (trit(x[128 * h + m + n * 32], id) & 3) << (2 * n);
                y[i].qs[32 * h + m] = static_cast<uint8_t>(q);
            }
    }
}

// ggml's own IQ4 search (quantize_row_iq4_nl_impl without an importance matrix, 7 tries each side),
// which ggml_quantize_chunk, and so llama-quantize, writes files with: written again from
// ggml-quants.c so `kail quantize` gives llama.cpp's bytes. (quantize_iq4_*_ref above are kail's
// own, simpler search, kept for the test-model writer, whose files they define.)
int iq4_best_index(float x) {
    const int8_t * val = kIq4Levels;
    if (x <= val[0]) return 0;
    if (x >= val[15]) return 15;
    int ml = 0, mu = 15;
    while (mu - ml > 1) {
        const int mav = (ml + mu) / 2;
        if (x < val[mav]) mu = mav;
        else ml = mav;
    }
    return x - val[mu - 1] < val[mu] - x ? mu - 1 : mu;
}

void iq4_ggml_impl(int super_block_size, const float * x, uint16_t * dh, uint8_t * q4, uint16_t * scales_h, uint8_t * scales_l, float * scales,
                   uint8_t * L, const float * quant_weights) {
    const int block_size = 32;
    const int ntry = 7;
    const int8_t * values = kIq4Levels;
    float weight[32];
    float sigma2 = 0;
    for (int j = 0; j < super_block_size; ++j) sigma2 += x[j] * x[j];
    sigma2 *= 2.f / super_block_size;
    std::memset(q4, 0, static_cast<size_t>(super_block_size / 2));
    dh[0] = f2h(0.f);
    float max_scale = 0, amax_scale = 0;
    for (int ib = 0; ib < super_block_size / block_size; ++ib) {
        const float * xb = x + ib * block_size;
        uint8_t * Lb = L + ib * block_size;
        if (quant_weights) {
            const float * qw = quant_weights + ib * block_size;
            for (int j = 0; j < block_size; ++j) weight[j] = qw[j] * std::sqrt(sigma2 + xb[j] * xb[j]);
        } else {
            for (int j = 0; j < block_size; ++j) weight[j] = xb[j] * xb[j];
        }
        float amax = 0, max = 0;
        for (int j = 0; j < block_size; ++j) {
            const float ax = std::fabs(xb[j]);
            if (ax > amax) {
                amax = ax;
                max = xb[j];
            }
        }
        if (amax < GROUP_MAX_EPS) {
            scales[ib] = 0;
            continue;
        }
        float d = -max / values[0];
        float id = 1 / d;
        float sumqx = 0, sumq2 = 0;
        for (int j = 0; j < block_size; ++j) {
            const float al = id * xb[j];
            const int l = iq4_best_index(al);
            Lb[j] = static_cast<uint8_t>(l);
            const float q = values[l];
            const float w = weight[j];
            sumqx += w * q * xb[j];
            sumq2 += w * q * q;
        }
        d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
        float best = d * sumqx;
        for (int itry = -ntry; itry <= ntry; ++itry) {
            id = (itry + values[0]) / max;
            sumqx = sumq2 = 0;
            for (int j = 0; j < block_size; ++j) {
                const float al = id * xb[j];
                const int l = iq4_best_index(al);
                const float q = values[l];
                const float w = weight[j];
                sumqx += w * q * xb[j];
                sumq2 += w * q * q;
            }
            if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                d = sumqx / sumq2;
                best = d * sumqx;
            }
        }
        scales[ib] = d;
        const float abs_d = std::fabs(d);
        if (abs_d > amax_scale) {
            amax_scale = abs_d;
            max_scale = d;
        }
    }
    if (super_block_size / block_size > 1) {
        const int nb = super_block_size / block_size;
        std::memset(scales_h, 0, static_cast<size_t>((nb + 7) / 8) * sizeof(uint16_t));
        const float d = -max_scale / 32;
        dh[0] = f2h(d);
        const float id = d != 0 ? 1 / d : 0.f;
        for (int ib = 0; ib < nb; ++ib) {
            int l = nearest_int(id * scales[ib]);
            l = std::max(-32, std::min(31, l));
            const float dl = d * l;
            const float idl = dl != 0 ? 1 / dl : 0.f;
            uint8_t * Lb = L + ib * block_size;
            const float * xb = x + ib * block_size;
            for (int j = 0; j < block_size; ++j) Lb[j] = static_cast<uint8_t>(iq4_best_index(idl * xb[j]));
            l += 32;
            const uint8_t l_l = static_cast<uint8_t>(l & 0xf);
            const uint8_t l_h = static_cast<uint8_t>(l >> 4);
            if (ib % 2 == 0) scales_l[ib / 2] = l_l;
            else scales_l[ib / 2] |= static_cast<uint8_t>(l_l << 4);
            scales_h[ib / 8] = static_cast<uint16_t>(scales_h[ib / 8] | (l_h << 2 * (ib % 8)));
        }
    } else {
        dh[0] = f2h(scales[0]);
        const float id = scales[0] != 0 ? 1 / scales[0] : 0;
        for (int j = 0; j < super_block_size; ++j) L[j] = static_cast<uint8_t>(iq4_best_index(id * x[j]));
    }
    for (int i = 0; i < super_block_size / 32; ++i)
        for (int j = 0; j < 16; ++j) q4[16 * i + j] = static_cast<uint8_t>(L[32 * i + j] | (L[32 * i + 16 + j] << 4));
}

// (qw: the importance of each of the k values, or null.)
void quantize_iq4_nl_ggml(const float * x, void * vy, int64_t k, const float * qw = nullptr) {
    block_iq4_nl * y = static_cast<block_iq4_nl *>(vy);
    uint8_t L[QK4_NL];
    float scale;
    uint16_t unused_h;
    for (int64_t i = 0; i < k / QK4_NL; i++)
        iq4_ggml_impl(QK4_NL, x + QK4_NL * i, &y[i].d, y[i].qs, &unused_h, nullptr, &scale, L, qw ? qw + QK4_NL * i : nullptr);
}

void quantize_iq4_xs_ggml(const float * x, void * vy, int64_t k, const float * qw = nullptr) {
    block_iq4_xs * y = static_cast<block_iq4_xs *>(vy);
    uint8_t L[QK_K];
    float scales[QK_K / 32];
    for (int64_t i = 0; i < k / QK_K; i++)
        iq4_ggml_impl(QK_K, x + QK_K * i, &y[i].d, y[i].qs, &y[i].scales_h, y[i].scales_l, scales, L, qw ? qw + QK_K * i : nullptr);
}

// ---- With an importance matrix ----
// ggml's quantizers when llama-quantize is given an imatrix (quantize_row_*_impl in
// ggml-quants.c, written again term by term): each value's weight is its column's mean squared
// activation (qw, one per value of the row) times sqrt(sigma2 + x^2). Q8_0 and MXFP4 ignore it.

float make_qkx3_quants(int n, int nmax, const float * x, const float * weights, uint8_t * L, float * the_min, uint8_t * Laux, float rmin, float rdelta,
                       int nstep, bool use_mad) {
    float min = x[0], max = x[0];
    float sum_w = weights ? weights[0] : x[0] * x[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        const float w = weights ? weights[i] : x[i] * x[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if (min > 0) min = 0;
    if (max <= min) {
        std::memset(L, 0, static_cast<size_t>(n));
        *the_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_mad = 0;
    for (int i = 0; i < n; ++i) {
        const int l = nearest_int(iscale * (x[i] - min));
        L[i] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? std::fabs(diff) : diff * diff;
        const float w = weights ? weights[i] : x[i] * x[i];
        best_mad += w * diff;
    }
    if (nstep < 1) {
        *the_min = -min;
        return scale;
    }
    for (int is = 0; is <= nstep; ++is) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; ++i) {
            int l = nearest_int(iscale * (x[i] - min));
            l = std::max(0, std::min(nmax, l));
            Laux[i] = static_cast<uint8_t>(l);
            const float w = weights ? weights[i] : x[i] * x[i];
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float mad = 0;
            for (int i = 0; i < n; ++i) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = use_mad ? std::fabs(diff) : diff * diff;
                const float w = weights ? weights[i] : x[i] * x[i];
                mad += w * diff;
            }
            if (mad < best_mad) {
                for (int i = 0; i < n; ++i) L[i] = Laux[i];
                best_mad = mad;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}

float make_qp_quants(int n, int nmax, const float * x, uint8_t * L, const float * quant_weights) {
    float max = 0;
    for (int i = 0; i < n; ++i) max = std::max(max, x[i]);
    if (max < GROUP_MAX_EPS) {
        for (int i = 0; i < n; ++i) L[i] = 0;
        return 0.f;
    }
    float iscale = nmax / max;
    for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(nearest_int(iscale * x[i]));
    const float scale = 1 / iscale;
    float best_mse = 0;
    for (int i = 0; i < n; ++i) {
        const float diff = x[i] - scale * L[i];
        best_mse += quant_weights[i] * diff * diff;
    }
    for (int is = -4; is <= 4; ++is) {
        if (is == 0) continue;
        const float iscale_is = (0.1f * is + nmax) / max;
        const float scale_is = 1 / iscale_is;
        float mse = 0;
        for (int i = 0; i < n; ++i) {
            const int l = std::min(nmax, nearest_int(iscale_is * x[i]));
            const float diff = x[i] - scale_is * l;
            mse += quant_weights[i] * diff * diff;
        }
        if (mse < best_mse) {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; ++i) {
        const int l = std::min(nmax, nearest_int(iscale * x[i]));
        L[i] = static_cast<uint8_t>(l);
        const float w = quant_weights[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; ++itry) {
        int n_changed = 0;
        for (int i = 0; i < n; ++i) {
            const float w = quant_weights[i];
            float slx = sumlx - w * x[i] * L[i];
            float sl2 = suml2 - w * L[i] * L[i];
            if (slx > 0 && sl2 > 0) {
                const int new_l = std::min(nmax, nearest_int(x[i] * sl2 / slx));
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = static_cast<uint8_t>(new_l);
                        sumlx = slx;
                        suml2 = sl2;
                        ++n_changed;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

// sum(x^2) / n over a row or a super-block, as each impl computes it.
float mean_square(const float * x, int64_t n) {
    float s = 0;
    for (int64_t j = 0; j < n; ++j) s += x[j] * x[j];
    return s / n;
}

// The five-bit values' high bits, as quantize_row_q5_*_impl packs them.
void pack_q5(const uint8_t * L, uint8_t * qs, uint8_t * qh_out) {
    uint32_t qh = 0;
    for (int j = 0; j < 16; ++j) {
        const uint8_t xi0 = L[j], xi1 = L[j + 16];
        qs[j] = static_cast<uint8_t>((xi0 & 0x0F) | ((xi1 & 0x0F) << 4));
        qh |= ((xi0 & 0x10u) >> 4) << (j + 0);
        qh |= ((xi1 & 0x10u) >> 4) << (j + 16);
    }
    std::memcpy(qh_out, &qh, sizeof qh);
}

void quantize_q4_0_w(const float * x, block_q4_0 * y, int64_t n_per_row, const float * quant_weights) {
    float weight[32];
    int8_t L[32];
    const float sigma2 = mean_square(x, n_per_row);
    for (int64_t ib = 0; ib < n_per_row / 32; ++ib) {
        const float * xb = x + 32 * ib;
        const float * qw = quant_weights + 32 * ib;
        for (int j = 0; j < 32; ++j) weight[j] = qw[j] * std::sqrt(sigma2 + xb[j] * xb[j]);
        const float d = make_qx_quants(32, 8, xb, L, 1, weight);
        y[ib].d = f2h(d);
        for (int j = 0; j < 16; ++j) y[ib].qs[j] = static_cast<uint8_t>(L[j] | (L[j + 16] << 4));
    }
}

void quantize_q4_1_w(const float * x, block_q4_1 * y, int64_t n_per_row, const float * quant_weights) {
    float weight[32];
    uint8_t L[32], Laux[32];
    const float sigma2 = mean_square(x, n_per_row);
    for (int64_t ib = 0; ib < n_per_row / 32; ++ib) {
        const float * xb = x + 32 * ib;
        const float * qw = quant_weights + 32 * ib;
        for (int j = 0; j < 32; ++j) weight[j] = qw[j] * std::sqrt(sigma2 + xb[j] * xb[j]);
        float min;
        const float d = make_qkx3_quants(32, 15, xb, weight, L, &min, Laux, -0.9f, 0.05f, 36, false);
        y[ib].d = f2h(d);
        y[ib].m = f2h(-min);
        for (int j = 0; j < 16; ++j) y[ib].qs[j] = static_cast<uint8_t>(L[j] | (L[j + 16] << 4));
    }
}

void quantize_q5_0_w(const float * x, block_q5_0 * y, int64_t n_per_row, const float * quant_weights) {
    float weight[32];
    int8_t L[32];
    const float sigma2 = mean_square(x, n_per_row);
    for (int64_t ib = 0; ib < n_per_row / 32; ++ib) {
        const float * xb = x + 32 * ib;
        const float * qw = quant_weights + 32 * ib;
        for (int j = 0; j < 32; ++j) weight[j] = qw[j] * std::sqrt(sigma2 + xb[j] * xb[j]);
        const float d = make_qx_quants(32, 16, xb, L, 1, weight);
        y[ib].d = f2h(d);
        pack_q5(reinterpret_cast<const uint8_t *>(L), y[ib].qs, y[ib].qh);
    }
}

void quantize_q5_1_w(const float * x, block_q5_1 * y, int64_t n_per_row, const float * quant_weights) {
    float weight[32];
    uint8_t L[32], Laux[32];
    const float sigma2 = mean_square(x, n_per_row);
    for (int64_t ib = 0; ib < n_per_row / 32; ++ib) {
        const float * xb = x + 32 * ib;
        const float * qw = quant_weights + 32 * ib;
        for (int j = 0; j < 32; ++j) weight[j] = qw[j] * std::sqrt(sigma2 + xb[j] * xb[j]);
        float min;
        const float d = make_qkx3_quants(32, 31, xb, weight, L, &min, Laux, -0.9f, 0.05f, 36, false);
        y[ib].d = f2h(d);
        y[ib].m = f2h(-min);
        pack_q5(L, y[ib].qs, y[ib].qh);
    }
}

void quantize_q2_K_w(const float * x, block_q2_K * y, int64_t n_per_row, const float * quant_weights) {
    uint8_t L[QK_K], Laux[16], Ls[QK_K / 16], Lm[QK_K / 16];
    float mins[QK_K / 16], scales[QK_K / 16], sw[QK_K / 16], weight[16];
    for (int64_t i = 0; i < n_per_row / QK_K; i++, x += QK_K) {
        std::memset(sw, 0, sizeof sw);
        const float sigma2 = mean_square(x, QK_K);
        for (int j = 0; j < QK_K / 16; ++j) {
            const float * qw = quant_weights + QK_K * i + 16 * j;
            for (int l = 0; l < 16; ++l) weight[l] = qw[l] * std::sqrt(sigma2 + x[16 * j + l] * x[16 * j + l]);
            for (int l = 0; l < QK_K / 16; ++l) sw[j] += weight[l];
            scales[j] = make_qkx3_quants(16, 3, x + 16 * j, weight, L + 16 * j, &mins[j], Laux, -0.9f, 0.05f, 36, false);
        }
        const float dm0 = make_qp_quants(QK_K / 16, 15, scales, Ls, sw);
        const float mm0 = make_qp_quants(QK_K / 16, 15, mins, Lm, sw);
        y[i].d = f2h(dm0);
        y[i].dmin = f2h(mm0);
        const float dm = h2f(y[i].d), mm = h2f(y[i].dmin);
        for (int j = 0; j < QK_K / 16; ++j) y[i].scales[j] = static_cast<uint8_t>(Ls[j] | (Lm[j] << 4));
        for (int j = 0; j < QK_K / 16; ++j) {
            const float d = dm * (y[i].scales[j] & 0xF);
            if (!d) continue;
            const float m = mm * (y[i].scales[j] >> 4);
            for (int ii = 0; ii < 16; ++ii) {
                const int l = nearest_int((x[16 * j + ii] + m) / d);
                L[16 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(3, l)));
            }
        }
        for (int j = 0; j < QK_K; j += 128)
            for (int l = 0; l < 32; ++l)
                y[i].qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
    }
}

void quantize_q3_K_w(const float * x, block_q3_K * y, int64_t n_per_row, const float * quant_weights) {
    int8_t L[QK_K], Ls[QK_K / 16];
    float scales[QK_K / 16], weight[16], sw[QK_K / 16];
    for (int64_t i = 0; i < n_per_row / QK_K; i++, x += QK_K) {
        const float sigma2 = 2 * mean_square(x, QK_K);
        for (int j = 0; j < QK_K / 16; ++j) {
            const float * qw = quant_weights + QK_K * i + 16 * j;
            for (int l = 0; l < 16; ++l) weight[l] = qw[l] * std::sqrt(sigma2 + x[16 * j + l] * x[16 * j + l]);
            float sumw = 0;
            for (int l = 0; l < 16; ++l) sumw += weight[l];
            sw[j] = sumw;
            scales[j] = make_qx_quants(16, 4, x + 16 * j, L + 16 * j, 1, weight);
        }
        std::memset(y[i].scales, 0, 12);
        const float d_block = make_qx_quants(QK_K / 16, 32, scales, Ls, 1, sw);
        for (int j = 0; j < QK_K / 16; ++j) {
            int l = Ls[j];
            if (j < 8) y[i].scales[j] = static_cast<uint8_t>(l & 0xF);
            else y[i].scales[j - 8] = static_cast<uint8_t>(y[i].scales[j - 8] | ((l & 0xF) << 4));
            l >>= 4;
            y[i].scales[j % 4 + 8] = static_cast<uint8_t>(y[i].scales[j % 4 + 8] | (l << (2 * (j / 4))));
        }
        y[i].d = f2h(d_block);
        for (int j = 0; j < QK_K / 16; ++j) {
            int8_t sc = static_cast<int8_t>(j < 8 ? y[i].scales[j] & 0xF : y[i].scales[j - 8] >> 4);
            sc = static_cast<int8_t>((sc | (((y[i].scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32);
            const float d = h2f(y[i].d) * sc;
            if (!d) continue;
            for (int ii = 0; ii < 16; ++ii) {
                const int l = nearest_int(x[16 * j + ii] / d);
                L[16 * j + ii] = static_cast<int8_t>(std::max(-4, std::min(3, l)) + 4);
            }
        }
        std::memset(y[i].hmask, 0, QK_K / 8);
        int m = 0;
        uint8_t hm = 1;
        for (int j = 0; j < QK_K; ++j) {
            if (L[j] > 3) {
                y[i].hmask[m] |= hm;
                L[j] -= 4;
            }
            if (++m == QK_K / 8) {
                m = 0;
                hm = static_cast<uint8_t>(hm << 1);
            }
        }
        for (int j = 0; j < QK_K; j += 128)
            for (int l = 0; l < 32; ++l)
                y[i].qs[j / 4 + l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
    }
}

// Q4_K and Q5_K share everything but the level count and the packing of L.
void quantize_q45_K_w(int nmax, const float * x, uint8_t * scales_out, uint16_t * d_out, uint16_t * dmin_out, uint8_t * L, const float * qw_block) {
    uint8_t Laux[32], Ls[QK_K / 32], Lm[QK_K / 32];
    float weights[32], sw[QK_K / 32], mins[QK_K / 32], scales[QK_K / 32];
    const float sigma2 = 2 * mean_square(x, QK_K);
    for (int j = 0; j < QK_K / 32; ++j) {
        const float * qw = qw_block + 32 * j;
        for (int l = 0; l < 32; ++l) weights[l] = qw[l] * std::sqrt(sigma2 + x[32 * j + l] * x[32 * j + l]);
        float sumw = 0;
        for (int l = 0; l < 32; ++l) sumw += weights[l];
        sw[j] = sumw;
        scales[j] = make_qkx3_quants(32, nmax, x + 32 * j, weights, L + 32 * j, &mins[j], Laux, -0.9f, 0.05f, 36, false);
    }
    const float d_block = make_qp_quants(QK_K / 32, 63, scales, Ls, sw);
    const float m_block = make_qp_quants(QK_K / 32, 63, mins, Lm, sw);
    for (int j = 0; j < QK_K / 32; ++j) {
        // (Q5_K's impl clamps to 63, Q4_K's does not.)
        const uint8_t ls = nmax == 31 ? std::min<uint8_t>(63, Ls[j]) : Ls[j];
        const uint8_t lm = nmax == 31 ? std::min<uint8_t>(63, Lm[j]) : Lm[j];
        if (j < 4) {
            scales_out[j] = ls;
            scales_out[j + 4] = lm;
        } else {
            scales_out[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
            scales_out[j - 4] = static_cast<uint8_t>(scales_out[j - 4] | ((ls >> 4) << 6));
            scales_out[j - 0] = static_cast<uint8_t>(scales_out[j - 0] | ((lm >> 4) << 6));
        }
    }
    *d_out = f2h(d_block);
    *dmin_out = f2h(m_block);
    for (int j = 0; j < QK_K / 32; ++j) {
        uint8_t sc, m;
        get_scale_min_k4(j, scales_out, &sc, &m);
        const float d = h2f(*d_out) * sc;
        if (!d) continue;
        const float dm = h2f(*dmin_out) * m;
        for (int ii = 0; ii < 32; ++ii) {
            const int l = nearest_int((x[32 * j + ii] + dm) / d);
            L[32 * j + ii] = static_cast<uint8_t>(std::max(0, std::min(nmax, l)));
        }
    }
}

void quantize_q4_K_w(const float * x, block_q4_K * y, int64_t n_per_row, const float * quant_weights) {
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n_per_row / QK_K; i++, x += QK_K) {
        quantize_q45_K_w(15, x, y[i].scales, &y[i].d, &y[i].dmin, L, quant_weights + QK_K * i);
        uint8_t * q = y[i].qs;
        for (int j = 0; j < QK_K; j += 64, q += 32)
            for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
    }
}

void quantize_q5_K_w(const float * x, block_q5_K * y, int64_t n_per_row, const float * quant_weights) {
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n_per_row / QK_K; i++, x += QK_K) {
        quantize_q45_K_w(31, x, y[i].scales, &y[i].d, &y[i].dmin, L, quant_weights + QK_K * i);
        uint8_t * qh = y[i].qh;
        uint8_t * ql = y[i].qs;
        std::memset(qh, 0, QK_K / 8);
        uint8_t m1 = 1, m2 = 2;
        for (int n = 0; n < QK_K; n += 64, ql += 32) {
            for (int j = 0; j < 32; ++j) {
                int l1 = L[n + j];
                if (l1 > 15) {
                    l1 -= 16;
                    qh[j] |= m1;
                }
                int l2 = L[n + j + 32];
                if (l2 > 15) {
                    l2 -= 16;
                    qh[j] |= m2;
                }
                ql[j] = static_cast<uint8_t>(l1 | (l2 << 4));
            }
            m1 = static_cast<uint8_t>(m1 << 2);
            m2 = static_cast<uint8_t>(m2 << 2);
        }
    }
}

void quantize_q6_K_w(const float * x, block_q6_K * y, int64_t n_per_row, const float * quant_weights) {
    int8_t L[QK_K];
    float scales[QK_K / 16];
    for (int64_t i = 0; i < n_per_row / QK_K; i++, x += QK_K) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < QK_K / 16; ++ib) {
            // (ggml passes the imatrix values themselves here, not the sigma2-scaled weights.)
            const float scale = make_qx_quants(16, 32, x + 16 * ib, L + 16 * ib, 1, quant_weights + QK_K * i + 16 * ib);
            scales[ib] = scale;
            const float abs_scale = std::fabs(scale);
            if (abs_scale > max_abs_scale) {
                max_abs_scale = abs_scale;
                max_scale = scale;
            }
        }
        if (max_abs_scale < GROUP_MAX_EPS) {
            std::memset(&y[i], 0, sizeof(block_q6_K));
            y[i].d = f2h(0.f);
            continue;
        }
        const float iscale = -128.f / max_scale;
        y[i].d = f2h(1 / iscale);
        for (int ib = 0; ib < QK_K / 16; ++ib) y[i].scales[ib] = static_cast<int8_t>(std::min(127, nearest_int(iscale * scales[ib])));
        for (int j = 0; j < QK_K / 16; ++j) {
            const float d = h2f(y[i].d) * y[i].scales[j];
            if (!d) continue;
            for (int ii = 0; ii < 16; ++ii) {
                const int l = nearest_int(x[16 * j + ii] / d);
                L[16 * j + ii] = static_cast<int8_t>(std::max(-32, std::min(31, l)) + 32);
            }
        }
        uint8_t * ql = y[i].ql;
        uint8_t * qh = y[i].qh;
        for (int j = 0; j < QK_K; j += 128, ql += 64, qh += 32) {
            for (int l = 0; l < 32; ++l) {
                const uint8_t q1 = L[j + l + 0] & 0xF, q2 = L[j + l + 32] & 0xF, q3 = L[j + l + 64] & 0xF, q4 = L[j + l + 96] & 0xF;
                ql[l + 0] = static_cast<uint8_t>(q1 | (q3 << 4));
                ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
                qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) | ((L[j + l + 96] >> 4) << 6));
            }
        }
    }
}

void quantize_iq4_xs_ref(const float * x, void * vy, int64_t k) {
    block_iq4_xs * y = static_cast<block_iq4_xs *>(vy);
    uint8_t L[QK_K];
    float scales[QK_K / 32];
    for (int64_t i = 0; i < k / QK_K; i++, x += QK_K) {
        float amax = 0, max = 0;
        for (int ib = 0; ib < QK_K / 32; ib++) {
            scales[ib] = iq4_block(x + 32 * ib, L + 32 * ib);
            if (std::fabs(scales[ib]) > amax) {
                amax = std::fabs(scales[ib]);
                max = scales[ib];
            }
        }
        // Block scales are signed 6-bit (-32..31): the largest magnitude maps to -32.
        const float d = max / -32.f;
        y[i].d = f2h(d);
        const float ds = h2f(y[i].d);
        const float id = ds != 0 ? 1.f / ds : 0.f;
        y[i].scales_h = 0;
        std::memset(y[i].scales_l, 0, sizeof y[i].scales_l);
        for (int ib = 0; ib < QK_K / 32; ib++) {
            const int l = std::max(-32, std::min(31, nearest_int(id * scales[ib])));
            const int u = l + 32;
            y[i].scales_l[ib / 2] |= static_cast<uint8_t>((u & 0xF) << (4 * (ib % 2)));
            y[i].scales_h |= static_cast<uint16_t>((u >> 4) << (2 * ib));
            const float dl = ds * l;
            if (dl != 0)
                for (int j = 0; j < 32; j++) L[32 * ib + j] = static_cast<uint8_t>(iq4_nearest(x[32 * ib + j] / dl));
            iq4_pack(L + 32 * ib, y[i].qs + 16 * ib);
        }
    }
}

void quantize_q8_K_ref(const float * x, void * vy, int64_t k) {
    block_q8_K * y = static_cast<block_q8_K *>(vy);
    for (int64_t i = 0; i < k / QK_K; i++) {
        float max = 0, amax = 0;
        for (int j = 0; j < QK_K; ++j) {
            const float ax = std::fabs(x[j]);
            if (ax > amax) { amax = ax; max = x[j]; }
        }
        if (!amax) {
            y[i].d = 0;
            std::memset(y[i].qs, 0, QK_K);
            std::memset(y[i].bsums, 0, sizeof y[i].bsums);
            x += QK_K;
            continue;
        }
        // -127 rather than -128 keeps every quant in [-127, 127] (ggml needs it for IQ2_XXS).
        const float iscale = -127.f / max;
        for (int j = 0; j < QK_K; ++j) y[i].qs[j] = std::min(127, nearest_int(iscale * x[j]));
        for (int j = 0; j < QK_K / 16; ++j) {
            int sum = 0;
            for (int ii = 0; ii < 16; ++ii) sum += y[i].qs[j * 16 + ii];
            y[i].bsums[j] = sum;
        }
        y[i].d = 1 / iscale;
        x += QK_K;
    }
}

// ============================ activation quantizers ============================
// ggml-cpu's x86 quantize_row_q8_0 / q8_1 (the AVX path): id = 127/amax, round half to even.

inline int8_t round_even_i8(float v) { return static_cast<int8_t>(nearest_int(v)); }

void from_float_q8_0(const float * x, void * vy, int64_t k) {
    block_q8_0 * y = static_cast<block_q8_0 *>(vy);
    for (int64_t i = 0; i < k / QK8_0; i++, x += QK8_0) {
        float amax = 0.0f;
        for (int j = 0; j < QK8_0; j++) amax = std::max(amax, std::fabs(x[j]));
        const float d = amax / 127.f;
        y[i].d = f2h(d);
        const float id = amax != 0.0f ? 127.f / amax : 0.0f;
        for (int j = 0; j < QK8_0; ++j) y[i].qs[j] = round_even_i8(x[j] * id);
    }
}

void from_float_q8_1(const float * x, void * vy, int64_t k) {
    block_q8_1 * y = static_cast<block_q8_1 *>(vy);
    for (int64_t i = 0; i < k / QK8_1; i++, x += QK8_1) {
        float amax = 0.0f;
        for (int j = 0; j < QK8_1; j++) amax = std::max(amax, std::fabs(x[j]));
        const float d = amax / 127.f;
        y[i].d = f2h(d);
        const float id = amax != 0.0f ? 127.f / amax : 0.0f;
        int sum = 0;
        for (int j = 0; j < QK8_1; ++j) {
            y[i].qs[j] = round_even_i8(x[j] * id);
            sum += y[i].qs[j];
        }
        y[i].s = f2h(d * static_cast<float>(sum));
    }
}

void from_float_f32(const float * x, void * y, int64_t k) { std::memcpy(y, x, static_cast<size_t>(k) * 4); }
void from_float_f16(const float * x, void * vy, int64_t k) {
    uint16_t * y = static_cast<uint16_t *>(vy);
    for (int64_t i = 0; i < k; i++) y[i] = f2h(x[i]);
}
void from_float_bf16(const float * x, void * vy, int64_t k) {
    uint16_t * y = static_cast<uint16_t *>(vy);
    for (int64_t i = 0; i < k; i++) y[i] = fp32_to_bf16_sw(x[i]);
}

void cvt_f16_f32(const void * x, void * y, int64_t n) {
    for (int64_t i = 0; i < n; i++) static_cast<float *>(y)[i] = h2f(static_cast<const uint16_t *>(x)[i]);
}
void cvt_f32_f16(const void * x, void * y, int64_t n) { from_float_f16(static_cast<const float *>(x), y, n); }
void cvt_bf16_f32(const void * x, void * y, int64_t n) {
    for (int64_t i = 0; i < n; i++) static_cast<float *>(y)[i] = bf16_to_fp32_sw(static_cast<const uint16_t *>(x)[i]);
}
void cvt_f32_bf16(const void * x, void * y, int64_t n) { from_float_bf16(static_cast<const float *>(x), y, n); }

// ============================ scalar dot products ============================
// One weight row x one activation row, mirroring ggml's *_generic functions.

float dot_f32(int64_t n, const void * vx, const void * vy) {
    const float * x = static_cast<const float *>(vx);
    const float * y = static_cast<const float *>(vy);
    double sumf = 0;
    for (int64_t i = 0; i < n; ++i) sumf += static_cast<double>(x[i] * y[i]);
    return static_cast<float>(sumf);
}

float dot_f16(int64_t n, const void * vx, const void * vy) {
    const uint16_t * x = static_cast<const uint16_t *>(vx);
    const uint16_t * y = static_cast<const uint16_t *>(vy);
    double sumf = 0;
    for (int64_t i = 0; i < n; ++i) sumf += static_cast<double>(h2f(x[i]) * h2f(y[i]));
    return static_cast<float>(sumf);
}

float dot_bf16(int64_t n, const void * vx, const void * vy) {
    const uint16_t * x = static_cast<const uint16_t *>(vx);
    const uint16_t * y = static_cast<const uint16_t *>(vy);
    double sumf = 0;
    for (int64_t i = 0; i < n; ++i) sumf += static_cast<double>(bf16_to_fp32_sw(x[i]) * bf16_to_fp32_sw(y[i]));
    return static_cast<float>(sumf);
}

float dot_q4_0(int64_t n, const void * vx, const void * vy) {
    const block_q4_0 * x = static_cast<const block_q4_0 *>(vx);
    const block_q8_0 * y = static_cast<const block_q8_0 *>(vy);
    float sumf = 0;
    for (int64_t ib = 0; ib < n / QK8_0; ++ib) {
        int sumi0 = 0, sumi1 = 0;
        for (int j = 0; j < QK8_0 / 2; ++j) {
            const int v0 = (x[ib].qs[j] & 0x0F) - 8;
            const int v1 = (x[ib].qs[j] >> 4) - 8;
            sumi0 += v0 * y[ib].qs[j];
            sumi1 += v1 * y[ib].qs[j + QK8_0 / 2];
        }
        const int sumi = sumi0 + sumi1;
        sumf += sumi * h2f(x[ib].d) * h2f(y[ib].d);
    }
    return sumf;
}

float dot_q4_1(int64_t n, const void * vx, const void * vy) {
    const block_q4_1 * x = static_cast<const block_q4_1 *>(vx);
    const block_q8_1 * y = static_cast<const block_q8_1 *>(vy);
    float sumf = 0;
    for (int64_t ib = 0; ib < n / QK8_1; ++ib) {
        int sumi0 = 0, sumi1 = 0;
        for (int j = 0; j < QK8_1 / 2; ++j) {
            sumi0 += (x[ib].qs[j] & 0x0F) * y[ib].qs[j];
            sumi1 += (x[ib].qs[j] >> 4) * y[ib].qs[j + QK8_1 / 2];
        }
        const int sumi = sumi0 + sumi1;
        sumf += (h2f(x[ib].d) * h2f(y[ib].d)) * sumi + h2f(x[ib].m) * h2f(y[ib].s);
    }
    return sumf;
}

float dot_q5_0(int64_t n, const void * vx, const void * vy) {
    const block_q5_0 * x = static_cast<const block_q5_0 *>(vx);
    const block_q8_0 * y = static_cast<const block_q8_0 *>(vy);
    float sumf = 0;
    for (int64_t ib = 0; ib < n / QK8_0; ++ib) {
        uint32_t qh;
        std::memcpy(&qh, x[ib].qh, 4);
        int sumi0 = 0, sumi1 = 0;
        for (int j = 0; j < QK8_0 / 2; ++j) {
            const uint8_t xh_0 = ((qh & (1u << (j + 0))) >> (j + 0)) << 4;
            const uint8_t xh_1 = ((qh & (1u << (j + 16))) >> (j + 12));
            const int32_t x0 = (int8_t)(((x[ib].qs[j] & 0x0F) | xh_0) - 16);
            const int32_t x1 = (int8_t)(((x[ib].qs[j] >> 4) | xh_1) - 16);
            sumi0 += x0 * y[ib].qs[j];
            sumi1 += x1 * y[ib].qs[j + QK8_0 / 2];
        }
        const int sumi = sumi0 + sumi1;
        sumf += (h2f(x[ib].d) * h2f(y[ib].d)) * sumi;
    }
    return sumf;
}

float dot_q5_1(int64_t n, const void * vx, const void * vy) {
    const block_q5_1 * x = static_cast<const block_q5_1 *>(vx);
    const block_q8_1 * y = static_cast<const block_q8_1 *>(vy);
    float sumf = 0;
    for (int64_t ib = 0; ib < n / QK8_1; ++ib) {
        uint32_t qh;
        std::memcpy(&qh, x[ib].qh, 4);
        int sumi0 = 0, sumi1 = 0;
        for (int j = 0; j < QK8_1 / 2; ++j) {
            const uint8_t xh_0 = ((qh >> (j + 0)) << 4) & 0x10;
            const uint8_t xh_1 = ((qh >> (j + 12))) & 0x10;
            const int32_t x0 = (x[ib].qs[j] & 0xF) | xh_0;
            const int32_t x1 = (x[ib].qs[j] >> 4) | xh_1;
            sumi0 += x0 * y[ib].qs[j];
            sumi1 += x1 * y[ib].qs[j + QK8_1 / 2];
        }
        const int sumi = sumi0 + sumi1;
        sumf += (h2f(x[ib].d) * h2f(y[ib].d)) * sumi + h2f(x[ib].m) * h2f(y[ib].s);
    }
    return sumf;
}

float dot_q8_0(int64_t n, const void * vx, const void * vy) {
    const block_q8_0 * x = static_cast<const block_q8_0 *>(vx);
    const block_q8_0 * y = static_cast<const block_q8_0 *>(vy);
    float sumf = 0;
    for (int64_t ib = 0; ib < n / QK8_0; ++ib) {
        int sumi = 0;
        for (int j = 0; j < QK8_0; j++) sumi += x[ib].qs[j] * y[ib].qs[j];
        sumf += sumi * (h2f(x[ib].d) * h2f(y[ib].d));
    }
    return sumf;
}

float dot_q2_K(int64_t n, const void * vx, const void * vy) {
    const block_q2_K * x = static_cast<const block_q2_K *>(vx);
    const block_q8_K * y = static_cast<const block_q8_K *>(vy);
    float sumf = 0;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const uint8_t * q2 = x[i].qs;
        const int8_t * q8 = y[i].qs;
        const uint8_t * sc = x[i].scales;
        int summs = 0;
        for (int j = 0; j < 16; ++j) summs += y[i].bsums[j] * (sc[j] >> 4);
        const float dall = y[i].d * h2f(x[i].d);
        const float dmin = y[i].d * h2f(x[i].dmin);
        int isum = 0, is = 0;
        for (int k = 0; k < QK_K / 128; ++k) {
            int shift = 0;
            for (int j = 0; j < 4; ++j) {
                int d = sc[is++] & 0xF;
                int isuml = 0;
                for (int l = 0; l < 16; ++l) isuml += q8[l] * ((q2[l] >> shift) & 3);
                isum += d * isuml;
                d = sc[is++] & 0xF;
                isuml = 0;
                for (int l = 16; l < 32; ++l) isuml += q8[l] * ((q2[l] >> shift) & 3);
                isum += d * isuml;
                shift += 2;
                q8 += 32;
            }
            q2 += 32;
        }
        sumf += dall * isum - dmin * summs;
    }
    return sumf;
}

// The K-quant references accumulate in 8 interleaved lanes, like ggml's generic versions.
float dot_q3_K(int64_t n, const void * vx, const void * vy) {
    const block_q3_K * x = static_cast<const block_q3_K *>(vx);
    const block_q8_K * y = static_cast<const block_q8_K *>(vy);
    int8_t aux8[QK_K];
    int16_t aux16[8];
    float sums[8] = {};
    int32_t aux32[8];
    int8_t scales[16];
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const uint8_t * q3 = x[i].qs;
        const uint8_t * hm = x[i].hmask;
        const int8_t * q8 = y[i].qs;
        std::memset(aux32, 0, sizeof aux32);
        int8_t * a = aux8;
        uint8_t m = 1;
        for (int j = 0; j < QK_K; j += 128) {
            for (int s = 0; s < 8; s += 2) {
                for (int l = 0; l < 32; ++l) a[l] = (int8_t)(((q3[l] >> s) & 3) - (hm[l] & m ? 0 : 4));
                a += 32;
                m <<= 1;
            }
            q3 += 32;
        }
        a = aux8;
        q3_K_scales(x[i].scales, scales);
        for (int j = 0; j < QK_K / 16; ++j) {
            for (int h = 0; h < 2; ++h) {
                for (int l = 0; l < 8; ++l) aux16[l] = q8[l] * a[l];
                for (int l = 0; l < 8; ++l) aux32[l] += (scales[j] - 32) * aux16[l];
                q8 += 8;
                a += 8;
            }
        }
        const float d = h2f(x[i].d) * y[i].d;
        for (int l = 0; l < 8; ++l) sums[l] += d * aux32[l];
    }
    float sumf = 0;
    for (int l = 0; l < 8; ++l) sumf += sums[l];
    return sumf;
}

// Unpacks the 8 six-bit scales and mins of a Q4_K/Q5_K block (ggml's utmp trick).
inline void k4_scales_mins(const uint8_t * packed, uint8_t scales[8], uint8_t mins[8]) {
    const uint32_t kmask1 = 0x3f3f3f3f, kmask2 = 0x0f0f0f0f, kmask3 = 0x03030303;
    uint32_t utmp[4];
    std::memcpy(utmp, packed, 12);
    utmp[3] = ((utmp[2] >> 4) & kmask2) | (((utmp[1] >> 6) & kmask3) << 4);
    const uint32_t uaux = utmp[1] & kmask1;
    utmp[1] = (utmp[2] & kmask2) | (((utmp[0] >> 6) & kmask3) << 4);
    utmp[2] = uaux;
    utmp[0] &= kmask1;
    std::memcpy(scales, &utmp[0], 8);
    std::memcpy(mins, &utmp[2], 8);
}

float dot_q4_K(int64_t n, const void * vx, const void * vy) {
    const block_q4_K * x = static_cast<const block_q4_K *>(vx);
    const block_q8_K * y = static_cast<const block_q8_K *>(vy);
    int8_t aux8[QK_K];
    int16_t aux16[8];
    float sums[8] = {};
    int32_t aux32[8];
    uint8_t scales[8], mins[8];
    float sumf = 0;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const uint8_t * q4 = x[i].qs;
        const int8_t * q8 = y[i].qs;
        std::memset(aux32, 0, sizeof aux32);
        int8_t * a = aux8;
        for (int j = 0; j < QK_K / 64; ++j) {
            for (int l = 0; l < 32; ++l) a[l] = (int8_t)(q4[l] & 0xF);
            a += 32;
            for (int l = 0; l < 32; ++l) a[l] = (int8_t)(q4[l] >> 4);
            a += 32;
            q4 += 32;
        }
        k4_scales_mins(x[i].scales, scales, mins);
        int sumi = 0;
        for (int j = 0; j < QK_K / 16; ++j) sumi += y[i].bsums[j] * mins[j / 2];
        a = aux8;
        for (int j = 0; j < QK_K / 32; ++j) {
            const int32_t scale = scales[j];
            for (int h = 0; h < 4; ++h) {
                for (int l = 0; l < 8; ++l) aux16[l] = q8[l] * a[l];
                for (int l = 0; l < 8; ++l) aux32[l] += scale * aux16[l];
                q8 += 8;
                a += 8;
            }
        }
        const float d = h2f(x[i].d) * y[i].d;
        for (int l = 0; l < 8; ++l) sums[l] += d * aux32[l];
        const float dmin = h2f(x[i].dmin) * y[i].d;
        sumf -= dmin * sumi;
    }
    for (int l = 0; l < 8; ++l) sumf += sums[l];
    return sumf;
}

float dot_q5_K(int64_t n, const void * vx, const void * vy) {
    const block_q5_K * x = static_cast<const block_q5_K *>(vx);
    const block_q8_K * y = static_cast<const block_q8_K *>(vy);
    int8_t aux8[QK_K];
    int16_t aux16[8];
    float sums[8] = {};
    int32_t aux32[8];
    uint8_t scales[8], mins[8];
    float sumf = 0;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const uint8_t * q4 = x[i].qs;
        const uint8_t * hm = x[i].qh;
        const int8_t * q8 = y[i].qs;
        std::memset(aux32, 0, sizeof aux32);
        int8_t * a = aux8;
        uint8_t m = 1;
        for (int j = 0; j < QK_K / 64; ++j) {
            for (int l = 0; l < 32; ++l) a[l] = (int8_t)((q4[l] & 0xF) + (hm[l] & m ? 16 : 0));
            a += 32;
            m <<= 1;
            for (int l = 0; l < 32; ++l) a[l] = (int8_t)((q4[l] >> 4) + (hm[l] & m ? 16 : 0));
            a += 32;
            m <<= 1;
            q4 += 32;
        }
        k4_scales_mins(x[i].scales, scales, mins);
        int sumi = 0;
        for (int j = 0; j < QK_K / 16; ++j) sumi += y[i].bsums[j] * mins[j / 2];
        a = aux8;
        for (int j = 0; j < QK_K / 32; ++j) {
            const int32_t scale = scales[j];
            for (int h = 0; h < 4; ++h) {
                for (int l = 0; l < 8; ++l) aux16[l] = q8[l] * a[l];
                for (int l = 0; l < 8; ++l) aux32[l] += scale * aux16[l];
                q8 += 8;
                a += 8;
            }
        }
        const float d = h2f(x[i].d) * y[i].d;
        for (int l = 0; l < 8; ++l) sums[l] += d * aux32[l];
        const float dmin = h2f(x[i].dmin) * y[i].d;
        sumf -= dmin * sumi;
    }
    for (int l = 0; l < 8; ++l) sumf += sums[l];
    return sumf;
}

float dot_q6_K(int64_t n, const void * vx, const void * vy) {
    const block_q6_K * x = static_cast<const block_q6_K *>(vx);
    const block_q8_K * y = static_cast<const block_q8_K *>(vy);
    int8_t aux8[QK_K];
    int16_t aux16[8];
    float sums[8] = {};
    int32_t aux32[8];
    for (int64_t i = 0; i < n / QK_K; ++i) {
        const uint8_t * q4 = x[i].ql;
        const uint8_t * qh = x[i].qh;
        const int8_t * q8 = y[i].qs;
        std::memset(aux32, 0, sizeof aux32);
        int8_t * a = aux8;
        for (int j = 0; j < QK_K; j += 128) {
            for (int l = 0; l < 32; ++l) {
                a[l + 0] = (int8_t)((q4[l + 0] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
                a[l + 32] = (int8_t)((q4[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
                a[l + 64] = (int8_t)((q4[l + 0] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                a[l + 96] = (int8_t)((q4[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
            }
            a += 128;
            q4 += 64;
            qh += 32;
        }
        a = aux8;
        for (int j = 0; j < QK_K / 16; ++j) {
            const int scale = x[i].scales[j];
            for (int h = 0; h < 2; ++h) {
                for (int l = 0; l < 8; ++l) aux16[l] = q8[l] * a[l];
                for (int l = 0; l < 8; ++l) aux32[l] += scale * aux16[l];
                q8 += 8;
                a += 8;
            }
        }
        const float d = h2f(x[i].d) * y[i].d;
        for (int l = 0; l < 8; ++l) sums[l] += d * aux32[l];
    }
    float sumf = 0;
    for (int l = 0; l < 8; ++l) sumf += sums[l];
    return sumf;
}

float dot_iq4_nl(int64_t n, const void * vx, const void * vy) {
    const block_iq4_nl * x = static_cast<const block_iq4_nl *>(vx);
    const block_q8_0 * y = static_cast<const block_q8_0 *>(vy);
    float sumf = 0;
    for (int64_t ib = 0; ib < n / QK4_NL; ++ib) {
        int sumi = 0;
        for (int j = 0; j < QK4_NL / 2; ++j)
            sumi += kIq4Levels[x[ib].qs[j] & 0xF] * y[ib].qs[j] + kIq4Levels[x[ib].qs[j] >> 4] * y[ib].qs[j + QK4_NL / 2];
        sumf += h2f(x[ib].d) * h2f(y[ib].d) * sumi;
    }
    return sumf;
}

float dot_mxfp4(int64_t n, const void * vx, const void * vy) {
    const block_mxfp4 * x = static_cast<const block_mxfp4 *>(vx);
    const block_q8_0 * y = static_cast<const block_q8_0 *>(vy);
    float sumf = 0;
    for (int64_t ib = 0; ib < n / 32; ++ib) {
        int sumi = 0;
        for (int j = 0; j < 16; ++j)
            sumi += kFp4Levels[x[ib].qs[j] & 0xF] * y[ib].qs[j] + kFp4Levels[x[ib].qs[j] >> 4] * y[ib].qs[j + 16];
        sumf += e8m0_half(x[ib].e) * h2f(y[ib].d) * sumi;
    }
    return sumf;
}

// The new low-bit types, term by term as ggml_vec_dot_*_generic (ggml-cpu/quants.c): integer sums
// per Q8_0 block (per NVFP4 sub-block, per Q8_K block for the ternary types) and the same float
// expressions in the same order.
float dot_nvfp4(int64_t n, const void * vx, const void * vy) {
    const block_nvfp4 * x = static_cast<const block_nvfp4 *>(vx);
    const block_q8_0 * y = static_cast<const block_q8_0 *>(vy);
    float sumf = 0;
    for (int64_t ib = 0; ib < n / QK_NVFP4; ++ib) {
        for (int s = 0; s < QK_NVFP4 / QK_NVFP4_SUB; ++s) {
            const float d = ue4m3_half(x[ib].d[s]);
            const block_q8_0 & yb = y[2 * ib + s / 2];
            const int8_t * q8 = yb.qs + (s % 2) * QK_NVFP4_SUB;
            const uint8_t * qs = x[ib].qs + s * (QK_NVFP4_SUB / 2);
            const float dy = h2f(yb.d);
            int sumi_lo = 0, sumi_hi = 0;
            for (int j = 0; j < QK_NVFP4_SUB / 2; ++j) {
                sumi_lo += q8[j] * kFp4Levels[qs[j] & 0xF];
                sumi_hi += q8[j + QK_NVFP4_SUB / 2] * kFp4Levels[qs[j] >> 4];
            }
            sumf += dy * d * static_cast<float>(sumi_lo + sumi_hi);
        }
    }
    return sumf;
}

float dot_q1_0(int64_t n, const void * vx, const void * vy) {
    const block_q1_0 * x = static_cast<const block_q1_0 *>(vx);
    const block_q8_0 * y = static_cast<const block_q8_0 *>(vy);
    float sumf = 0;
    for (int64_t i = 0; i < n / QK1_0; i++) {
        const float d0 = h2f(x[i].d);
        float sumi = 0.0f;
        for (int k = 0; k < 4; k++) {
            const block_q8_0 & yb = y[i * 4 + k];
            const uint8_t * bits = x[i].qs + 4 * k;
            // sum of +q where the bit is set, -q where not: 2 * (sum over set bits) - sum.
            int all = 0, set = 0;
            for (int j = 0; j < 32; j++) {
                all += yb.qs[j];
                set += ((bits[j / 8] >> (j % 8)) & 1) ? yb.qs[j] : 0;
            }
            sumi += h2f(yb.d) * static_cast<float>(2 * set - all);
        }
        sumf += d0 * sumi;
    }
    return sumf;
}

float dot_q2_0(int64_t n, const void * vx, const void * vy) {
    const block_q2_0 * x = static_cast<const block_q2_0 *>(vx);
    const block_q8_0 * y = static_cast<const block_q8_0 *>(vy);
    float sumf = 0;
    for (int64_t i = 0; i < n / QK2_0; i++) {
        const float d0 = h2f(x[i].d);
        float sumi = 0.0f;
        for (int k = 0; k < 2; k++) {
            const block_q8_0 & yb = y[i * 2 + k];
            const uint8_t * qs = x[i].qs + 8 * k;
            int s = 0;
            for (int j = 0; j < 32; j++) s += (((qs[j / 4] >> (2 * (j % 4))) & 3) - 1) * yb.qs[j];
            sumi += h2f(yb.d) * static_cast<float>(s);
        }
        sumf += d0 * sumi;
    }
    return sumf;
}

float dot_tq1_0(int64_t n, const void * vx, const void * vy) {
    const block_tq1_0 * x = static_cast<const block_tq1_0 *>(vx);
    const block_q8_K * y = static_cast<const block_q8_K *>(vy);
    int8_t q[QK_K];
    float sumf = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        tq1_0_unpack(x[i], q);
        int sum = 0;
        for (int j = 0; j < QK_K; j++) sum += q[j] * y[i].qs[j];
        sumf += static_cast<float>(sum) * (h2f(x[i].d) * y[i].d);
    }
    return sumf;
}

float dot_tq2_0(int64_t n, const void * vx, const void * vy) {
    const block_tq2_0 * x = static_cast<const block_tq2_0 *>(vx);
    const block_q8_K * y = static_cast<const block_q8_K *>(vy);
    int8_t q[QK_K];
    float sumf = 0;
    for (int64_t i = 0; i < n / QK_K; i++) {
        tq2_0_unpack(x[i], q);
        int sum = 0;
        for (int j = 0; j < QK_K; j++) sum += q[j] * y[i].qs[j];
        sumf += static_cast<float>(sum) * (y[i].d * h2f(x[i].d));
    }
    return sumf;
}

float dot_iq4_xs(int64_t n, const void * vx, const void * vy) {
    const block_iq4_xs * x = static_cast<const block_iq4_xs *>(vx);
    const block_q8_K * y = static_cast<const block_q8_K *>(vy);
    float sumf = 0;
    for (int64_t i = 0; i < n / QK_K; ++i) {
        int sumi = 0;  // |sum| <= 8 * 32 * 32 * 127 * 127 < 2^31
        for (int ib = 0; ib < QK_K / 32; ++ib) {
            const uint8_t * qs = x[i].qs + 16 * ib;
            const int8_t * q8 = y[i].qs + 32 * ib;
            int s = 0;
            for (int j = 0; j < 16; ++j) s += kIq4Levels[qs[j] & 0xF] * q8[j] + kIq4Levels[qs[j] >> 4] * q8[j + 16];
            sumi += (iq4_xs_scale(x[i], ib) - 32) * s;
        }
        sumf += h2f(x[i].d) * y[i].d * sumi;
    }
    return sumf;
}

using dot_fn = float (*)(int64_t n, const void * w, const void * a);

// Scalar tiles: the 1x1 reference applied to each (row, token) pair.
template <dot_fn DOT, size_t VD_ROW_DIV, size_t VD_ROW_MUL>
void gemm_scalar(int64_t k, const uint8_t * w, size_t w_stride, int nr, const uint8_t * const * a, int nt,
                 float * const * out) {
    for (int t = 0; t < nt; t++)
        for (int r = 0; r < nr; r++) out[t][r] = DOT(k, w + r * w_stride, a[t]);
}

template <int OFF, bool Q8_1>
void prepare_split(int64_t k, const void * src, void * dst) {
    const int64_t nb = k / 32;
    const int64_t ng = (nb + 3) / 4;
    uint8_t * out = static_cast<uint8_t *>(dst);
    std::memset(out, 0, static_cast<size_t>(ng) * PREP_SPLIT_GROUP);
    for (int64_t b = 0; b < nb; b++) {
        uint8_t * g = out + (b / 4) * PREP_SPLIT_GROUP;
        const int j = static_cast<int>(b % 4);
        int8_t * lo = reinterpret_cast<int8_t *>(g) + 16 * j;
        int8_t * hi = reinterpret_cast<int8_t *>(g + 64) + 16 * j;
        int32_t c[4];
        float d[4], s[4] = {0, 0, 0, 0};
        const int8_t * qs;
        if (Q8_1) {
            const block_q8_1 & blk = static_cast<const block_q8_1 *>(src)[b];
            qs = blk.qs;
            d[0] = h2f(blk.d);
            s[0] = h2f(blk.s);
        } else {
            const block_q8_0 & blk = static_cast<const block_q8_0 *>(src)[b];
            qs = blk.qs;
            d[0] = h2f(blk.d);
        }
        d[1] = d[2] = d[3] = d[0];
        for (int i = 0; i < 16; i++) {
            lo[i] = qs[i];
            hi[i] = qs[16 + i];
        }
        for (int l = 0; l < 4; l++) {
            int sum = 0;
            for (int i = 0; i < 4; i++) sum += lo[4 * l + i] + hi[4 * l + i];
            c[l] = -OFF * sum;
        }
        std::memcpy(g + 128 + 16 * j, Q8_1 ? static_cast<const void *>(s) : static_cast<const void *>(c), 16);
        std::memcpy(g + 192 + 16 * j, d, 16);
    }
}

struct scalar_entry {
    uint32_t type, vd;
    gemm_fn gemm;
};

} // namespace

float make_qp_quants_ggml(int n, int nmax, const float * x, uint8_t * L, const float * quant_weights) { return make_qp_quants(n, nmax, x, L, quant_weights); }

size_t prepared_size_split(int64_t k) { return static_cast<size_t>((k / 32 + 3) / 4) * PREP_SPLIT_GROUP; }
void prepare_split_q8_0_off8(int64_t k, const void * src, void * dst) { prepare_split<8, false>(k, src, dst); }
void prepare_split_q8_0_off16(int64_t k, const void * src, void * dst) { prepare_split<16, false>(k, src, dst); }
void prepare_split_q8_0_off12(int64_t k, const void * src, void * dst) { prepare_split<12, false>(k, src, dst); }
void prepare_split_q8_0_off128(int64_t k, const void * src, void * dst) { prepare_split<128, false>(k, src, dst); }
void prepare_split_q8_1(int64_t k, const void * src, void * dst) { prepare_split<0, true>(k, src, dst); }

size_t prepared_size_f32(int64_t k) { return static_cast<size_t>(k) * 4; }
void prepare_f16_as_f32(int64_t k, const void * src, void * dst) { kernels_active().fp16_to_fp32(src, dst, k); }
void prepare_bf16_as_f32(int64_t k, const void * src, void * dst) { kernels_active().bf16_to_fp32(src, dst, k); }

namespace {
inline float widen(float v) { return v; }
inline float widen(uint16_t h) { return fp16_to_fp32_sw(h); }

template <typename X>
void weighted_rows_scalar(const X * x, size_t xs, int64_t n, int64_t width, const float * p, size_t ps, int64_t group, float * out,
                          size_t os) {
    for (int64_t g = 0; g < group; g++) std::fill(out + g * os, out + g * os + width, 0.0f);
    for (int64_t j = 0; j < n; j++) {
        const X * r = x + j * xs;
        for (int64_t g = 0; g < group; g++) {
            const float w = p[g * ps + j];
            float * o = out + g * os;
            for (int64_t c = 0; c < width; c++) o[c] = std::fma(w, widen(r[c]), o[c]);
        }
    }
}
void weighted_rows_q8_0_scalar(const uint8_t * x, size_t xs, int64_t n, int64_t width, const float * p, size_t ps, int64_t group,
                               float * out, size_t os) {
    for (int64_t g = 0; g < group; g++) std::fill(out + g * os, out + g * os + width, 0.0f);
    for (int64_t j = 0; j < n; j++) {
        const uint8_t * r = x + j * xs;
        for (int64_t g = 0; g < group; g++) {
            const float w = p[g * ps + j];
            float * o = out + g * os;
            for (int64_t b = 0; b < width / 32; b++) {
                uint16_t dh;
                std::memcpy(&dh, r + b * 34, 2);
                const float d = fp16_to_fp32_sw(dh);
                const int8_t * q = reinterpret_cast<const int8_t *>(r + b * 34 + 2);
                for (int c = 0; c < 32; c++) o[b * 32 + c] = std::fma(w, static_cast<float>(q[c]) * d, o[b * 32 + c]);
            }
        }
    }
}
float scale_max_scalar(float * x, int64_t n, float scale, const float * bias) {
    float mx = -INFINITY;
    for (int64_t j = 0; j < n; j++) {
        x[j] *= scale;
        if (bias) x[j] += bias[j];
        mx = std::max(mx, x[j]);
    }
    return mx;
}

double exp_sum_scalar(float * x, int64_t n, float mx) {
    double lane[16] = {};
    for (int64_t j = 0; j < n; j++) {
        x[j] = exp_f32(x[j] - mx);
        lane[j % 16] += x[j];
    }
    return exp_lane_total(lane);
}
} // namespace

void kernels_init_scalar(kernel_table & t) {
    t.level = "scalar";
    t.scale_max = scale_max_scalar;
    t.exp_sum = exp_sum_scalar;
    t.weighted_rows_f32 = weighted_rows_scalar<float>;
    t.weighted_rows_f16 = weighted_rows_scalar<uint16_t>;
    t.weighted_rows_q8_0 = weighted_rows_q8_0_scalar;
    const scalar_entry entries[] = {
        {KAIL_TYPE_F32, KAIL_TYPE_F32, gemm_scalar<dot_f32, 1, 1>},
        {KAIL_TYPE_F16, KAIL_TYPE_F16, gemm_scalar<dot_f16, 1, 1>},
        {KAIL_TYPE_BF16, KAIL_TYPE_BF16, gemm_scalar<dot_bf16, 1, 1>},
        {KAIL_TYPE_Q4_0, KAIL_TYPE_Q8_0, gemm_scalar<dot_q4_0, 1, 1>},
        {KAIL_TYPE_Q4_1, KAIL_TYPE_Q8_1, gemm_scalar<dot_q4_1, 1, 1>},
        {KAIL_TYPE_Q5_0, KAIL_TYPE_Q8_0, gemm_scalar<dot_q5_0, 1, 1>},
        {KAIL_TYPE_Q5_1, KAIL_TYPE_Q8_1, gemm_scalar<dot_q5_1, 1, 1>},
        {KAIL_TYPE_Q8_0, KAIL_TYPE_Q8_0, gemm_scalar<dot_q8_0, 1, 1>},
        {KAIL_TYPE_Q2_K, KAIL_TYPE_Q8_K, gemm_scalar<dot_q2_K, 1, 1>},
        {KAIL_TYPE_Q3_K, KAIL_TYPE_Q8_K, gemm_scalar<dot_q3_K, 1, 1>},
        {KAIL_TYPE_Q4_K, KAIL_TYPE_Q8_K, gemm_scalar<dot_q4_K, 1, 1>},
        {KAIL_TYPE_Q5_K, KAIL_TYPE_Q8_K, gemm_scalar<dot_q5_K, 1, 1>},
        {KAIL_TYPE_Q6_K, KAIL_TYPE_Q8_K, gemm_scalar<dot_q6_K, 1, 1>},
        {KAIL_TYPE_IQ4_NL, KAIL_TYPE_Q8_0, gemm_scalar<dot_iq4_nl, 1, 1>},
        {KAIL_TYPE_IQ4_XS, KAIL_TYPE_Q8_K, gemm_scalar<dot_iq4_xs, 1, 1>},
        {KAIL_TYPE_MXFP4, KAIL_TYPE_Q8_0, gemm_scalar<dot_mxfp4, 1, 1>},
        {KAIL_TYPE_NVFP4, KAIL_TYPE_Q8_0, gemm_scalar<dot_nvfp4, 1, 1>},
        {KAIL_TYPE_Q1_0, KAIL_TYPE_Q8_0, gemm_scalar<dot_q1_0, 1, 1>},
        {KAIL_TYPE_Q2_0, KAIL_TYPE_Q8_0, gemm_scalar<dot_q2_0, 1, 1>},
        {KAIL_TYPE_TQ1_0, KAIL_TYPE_Q8_K, gemm_scalar<dot_tq1_0, 1, 1>},
        {KAIL_TYPE_TQ2_0, KAIL_TYPE_Q8_K, gemm_scalar<dot_tq2_0, 1, 1>},
        {KAIL_TYPE_IQ2_XXS, KAIL_TYPE_Q8_K, gemm_scalar<dot_iq2_xxs, 1, 1>},
        {KAIL_TYPE_IQ2_XS, KAIL_TYPE_Q8_K, gemm_scalar<dot_iq2_xs, 1, 1>},
        {KAIL_TYPE_IQ2_S, KAIL_TYPE_Q8_K, gemm_scalar<dot_iq2_s, 1, 1>},
        {KAIL_TYPE_IQ3_XXS, KAIL_TYPE_Q8_K, gemm_scalar<dot_iq3_xxs, 1, 1>},
        {KAIL_TYPE_IQ3_S, KAIL_TYPE_Q8_K, gemm_scalar<dot_iq3_s, 1, 1>},
        {KAIL_TYPE_IQ1_S, KAIL_TYPE_Q8_K, gemm_scalar<dot_iq1_s, 1, 1>},
        {KAIL_TYPE_IQ1_M, KAIL_TYPE_Q8_K, gemm_scalar<dot_iq1_m, 1, 1>},
    };
    for (const auto & e : entries) {
        weight_kernels & wk = t.w[e.type];
        wk = weight_kernels{};
        wk.vd_type = e.vd;
        wk.gemm = e.gemm;
        wk.max_r = 4;
        wk.max_t = 4;
        wk.decode_r = 4;
    }
    t.from_float[KAIL_TYPE_F32] = from_float_f32;
    t.from_float[KAIL_TYPE_F16] = from_float_f16;
    t.from_float[KAIL_TYPE_BF16] = from_float_bf16;
    t.from_float[KAIL_TYPE_Q8_0] = from_float_q8_0;
    t.from_float[KAIL_TYPE_Q8_1] = from_float_q8_1;
    t.from_float[KAIL_TYPE_Q8_K] = quantize_q8_K_ref;
    t.fp16_to_fp32 = cvt_f16_f32;
    t.fp32_to_fp16 = cvt_f32_f16;
    t.bf16_to_fp32 = cvt_bf16_f32;
    t.fp32_to_bf16 = cvt_f32_bf16;
}

namespace {

struct tables {
    kernel_table scalar;
    kernel_table avx2;
    kernel_table avx512;
    bool has_avx2 = false, has_avx512 = false;
    tables() {
        kernels_init_scalar(scalar);
#if defined(__x86_64__) || defined(_M_X64)
        const cpu_features & f = cpu_features_get();
        if (f.avx2 && f.fma && f.f16c) {
            kernels_init_scalar(avx2);
            kernels_init_avx2(avx2, cpu_avx2_vnni());
            has_avx2 = true;
        }
        // The AVX-512 kernels use VNNI (vpdpbusd/vpdpwssd); without it the AVX2 ones serve.
        if (has_avx2 && f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512_vnni) {
            kernels_init_scalar(avx512);
            kernels_init_avx2(avx512, f.avx_vnni);
            kernels_init_iq_avx512(avx512);
            kernels_init_avx512(avx512);
            has_avx512 = true;
        }
#endif
    }
};

const tables & all_tables() {
    static const tables t;
    return t;
}

} // namespace

const kernel_table & kernels_scalar() { return all_tables().scalar; }
const kernel_table * kernels_avx2() { return all_tables().has_avx2 ? &all_tables().avx2 : nullptr; }
const kernel_table * kernels_avx512() { return all_tables().has_avx512 ? &all_tables().avx512 : nullptr; }

const kernel_table * kernels_for_level(const char * level) {
    if (std::strcmp(level, "scalar") == 0) return &kernels_scalar();
    if (std::strcmp(level, "avx2") == 0) return kernels_avx2();
    if (std::strcmp(level, "avx512") == 0) return kernels_avx512();
    return nullptr;
}

const kernel_table & kernels_active() {
    static const kernel_table * t = [] {
        const char * lvl = cpu_kernel_level();
        const kernel_table * k = nullptr;
        if (std::strcmp(lvl, "avx512") == 0) k = kernels_avx512();
        if (!k && std::strcmp(lvl, "scalar") != 0) k = kernels_avx2();
        return k ? k : &kernels_scalar();
    }();
    return *t;
}

// Public lookups used by quants.h below.
namespace {

using row_fn = void (*)(const void *, float *, int64_t);
using quant_fn = void (*)(const float *, void *, int64_t);

row_fn dequant_fn(uint32_t type) {
    switch (type) {
        case KAIL_TYPE_Q4_0: return dequantize_q4_0;
        case KAIL_TYPE_Q4_1: return dequantize_q4_1;
        case KAIL_TYPE_Q5_0: return dequantize_q5_0;
        case KAIL_TYPE_Q5_1: return dequantize_q5_1;
        case KAIL_TYPE_Q8_0: return dequantize_q8_0;
        case KAIL_TYPE_Q8_1: return dequantize_q8_1;
        case KAIL_TYPE_Q2_K: return dequantize_q2_K;
        case KAIL_TYPE_Q3_K: return dequantize_q3_K;
        case KAIL_TYPE_Q4_K: return dequantize_q4_K;
        case KAIL_TYPE_Q5_K: return dequantize_q5_K;
        case KAIL_TYPE_Q6_K: return dequantize_q6_K;
        case KAIL_TYPE_Q8_K: return dequantize_q8_K;
        case KAIL_TYPE_IQ4_NL: return dequantize_iq4_nl;
        case KAIL_TYPE_IQ4_XS: return dequantize_iq4_xs;
        case KAIL_TYPE_MXFP4: return dequantize_mxfp4;
        case KAIL_TYPE_NVFP4: return dequantize_nvfp4;
        case KAIL_TYPE_Q1_0: return dequantize_q1_0;
        case KAIL_TYPE_Q2_0: return dequantize_q2_0;
        case KAIL_TYPE_TQ1_0: return dequantize_tq1_0;
        case KAIL_TYPE_TQ2_0: return dequantize_tq2_0;
        case KAIL_TYPE_IQ2_XXS: return dequantize_iq2_xxs;
        case KAIL_TYPE_IQ2_XS: return dequantize_iq2_xs;
        case KAIL_TYPE_IQ2_S: return dequantize_iq2_s;
        case KAIL_TYPE_IQ3_XXS: return dequantize_iq3_xxs;
        case KAIL_TYPE_IQ3_S: return dequantize_iq3_s;
        case KAIL_TYPE_IQ1_S: return dequantize_iq1_s;
        case KAIL_TYPE_IQ1_M: return dequantize_iq1_m;
        default: return nullptr;
    }
}

quant_fn quant_ref_fn(uint32_t type) {
    switch (type) {
        case KAIL_TYPE_Q4_0: return quantize_q4_0_ref;
        case KAIL_TYPE_Q4_1: return quantize_q4_1_ref;
        case KAIL_TYPE_Q5_0: return quantize_q5_0_ref;
        case KAIL_TYPE_Q5_1: return quantize_q5_1_ref;
        case KAIL_TYPE_Q8_0: return quantize_q8_0_ref;
        case KAIL_TYPE_Q8_1: return quantize_q8_1_ref;
        case KAIL_TYPE_Q2_K: return quantize_q2_K_ref;
        case KAIL_TYPE_Q3_K: return quantize_q3_K_ref;
        case KAIL_TYPE_Q4_K: return quantize_q4_K_ref;
        case KAIL_TYPE_Q5_K: return quantize_q5_K_ref;
        case KAIL_TYPE_Q6_K: return quantize_q6_K_ref;
        case KAIL_TYPE_Q8_K: return quantize_q8_K_ref;
        case KAIL_TYPE_IQ4_NL: return quantize_iq4_nl_ref;
        case KAIL_TYPE_IQ4_XS: return quantize_iq4_xs_ref;
        case KAIL_TYPE_MXFP4: return quantize_mxfp4_ref;
        case KAIL_TYPE_NVFP4: return quantize_nvfp4_ref;
        case KAIL_TYPE_Q1_0: return quantize_q1_0_ref;
        case KAIL_TYPE_Q2_0: return quantize_q2_0_ref;
        case KAIL_TYPE_TQ1_0: return quantize_tq1_0_ref;
        case KAIL_TYPE_TQ2_0: return quantize_tq2_0_ref;
        case KAIL_TYPE_IQ2_XXS: return quantize_iq2_xxs_ref;
        case KAIL_TYPE_IQ2_XS: return quantize_iq2_xs_ref;
        case KAIL_TYPE_IQ2_S: return quantize_iq2_s_ref;
        case KAIL_TYPE_IQ3_XXS: return quantize_iq3_xxs_ref;
        case KAIL_TYPE_IQ3_S: return quantize_iq3_s_ref;
        case KAIL_TYPE_IQ1_S: return quantize_iq1_s_ref;
        case KAIL_TYPE_IQ1_M: return quantize_iq1_m_ref;
        default: return nullptr;
    }
}

} // namespace

} // namespace kail::cpu

namespace kail {

using namespace kail::cpu;

namespace {

[[noreturn]] void unsupported(const char * what, uint32_t type) {
    throw error(KAIL_E_UNSUPPORTED, std::string(what) + ": type " + type_name(type) + " is not supported");
}

void check_n(uint32_t type, int64_t n) {
    const type_traits * tr = type_traits_get(type);
    if (!tr) throw error(KAIL_E_UNSUPPORTED, std::string("unknown tensor type ") + type_name(type));
    if (n < 0 || n % tr->block_size != 0)
        throw error(KAIL_E_INVALID_ARG, std::string(type_name(type)) + ": " + std::to_string(n) +
                                            " elements is not a multiple of the block size " +
                                            std::to_string(tr->block_size));
}

} // namespace

float fp16_to_fp32(uint16_t h) { return fp16_to_fp32_sw(h); }
uint16_t fp32_to_fp16(float f) { return fp32_to_fp16_sw(f); }
float bf16_to_fp32(uint16_t h) { return bf16_to_fp32_sw(h); }
uint16_t fp32_to_bf16(float f) { return fp32_to_bf16_sw(f); }

void fp16_to_fp32_row(const uint16_t * x, float * y, int64_t n) { kernels_active().fp16_to_fp32(x, y, n); }
void attention_weighted_rows(uint32_t type, const void * rows, size_t row_stride, int64_t n, int64_t width, const float * p,
                             size_t p_stride, int64_t group, float * out, size_t out_stride) {
    if (n < 0 || width < 0 || group < 0) throw error(KAIL_E_INVALID_ARG, "attention_weighted_rows: negative size");
    if (group > 1 && (out_stride < size_t(width) || p_stride < size_t(n)))
        throw error(KAIL_E_INVALID_ARG, "attention_weighted_rows: p_stride or out_stride smaller than a row");
    if (type == KAIL_TYPE_F32) {
        if (n > 1 && (row_stride % 4 || row_stride < size_t(width) * 4)) throw error(KAIL_E_INVALID_ARG, "attention_weighted_rows: bad row stride");
        kernels_active().weighted_rows_f32(static_cast<const float *>(rows), row_stride / 4, n, width, p, p_stride, group, out, out_stride);
    } else if (type == KAIL_TYPE_F16) {
        if (n > 1 && (row_stride % 2 || row_stride < size_t(width) * 2)) throw error(KAIL_E_INVALID_ARG, "attention_weighted_rows: bad row stride");
        kernels_active().weighted_rows_f16(static_cast<const uint16_t *>(rows), row_stride / 2, n, width, p, p_stride, group, out, out_stride);
    } else if (type == KAIL_TYPE_Q8_0) {
        // A quantized cache as ggml's flash attention reads it: each row's values (q * d) added to
        // every head's output in row order (ggml_vec_mad_f32), sums in F32.
        if (width % 32 != 0 || (n > 1 && row_stride < row_size(type, width))) throw error(KAIL_E_INVALID_ARG, "attention_weighted_rows: bad Q8_0 row");
        kernels_active().weighted_rows_q8_0(static_cast<const uint8_t *>(rows), row_stride, n, width, p, p_stride, group, out, out_stride);
    } else if (type == KAIL_TYPE_BF16 || is_kv_cache_type(type)) {
        // BF16 and the other quantized caches (llama.cpp's -ctv q4_0/q4_1/iq4_nl/q5_0/q5_1/bf16), as
        // ggml's flash attention reads them: each row converted to floats (its to_float), then added
        // to every head's output (the F32 kernel here, on 256 rows converted at a time).
        const type_traits * tr = type_traits_get(type);
        if (width % tr->block_size != 0 || (n > 1 && row_stride < row_size(type, width))) throw error(KAIL_E_INVALID_ARG, "attention_weighted_rows: bad cache row");
        constexpr int64_t CHUNK = 256;
        thread_local std::vector<float> rows_f, part;
        rows_f.resize(static_cast<size_t>(std::min<int64_t>(n, CHUNK) * width));
        for (int64_t j0 = 0; j0 == 0 || j0 < n; j0 += CHUNK) {  // (n = 0: one empty pass, zeros out)
            const int64_t m = std::min<int64_t>(CHUNK, n - j0);
            for (int64_t j = 0; j < m; j++)
                dequantize_row(type, static_cast<const uint8_t *>(rows) + static_cast<size_t>(j0 + j) * row_stride, rows_f.data() + j * width, width);
            if (j0 == 0) {
                kernels_active().weighted_rows_f32(rows_f.data(), size_t(width), m, width, p, p_stride, group, out, out_stride);
                continue;
            }
            part.resize(static_cast<size_t>(group * width));
            kernels_active().weighted_rows_f32(rows_f.data(), size_t(width), m, width, p + j0, p_stride, group, part.data(), size_t(width));
            for (int64_t g = 0; g < group; g++)
                for (int64_t c = 0; c < width; c++) out[g * out_stride + c] += part[g * width + c];
        }
    } else {
        throw error(KAIL_E_UNSUPPORTED, std::string("attention_weighted_rows: cache type ") + type_name(type) + " (F32, F16, BF16, Q8_0, Q4_0, Q4_1, IQ4_NL, Q5_0 or Q5_1)");
    }
}

float attention_scale_max(float * x, int64_t n, float scale, const float * bias) { return kernels_active().scale_max(x, n, scale, bias); }
double attention_exp_sum(float * x, int64_t n, float mx) { return kernels_active().exp_sum(x, n, mx); }
float attention_exp(float x) { return exp_f32(x); }

bool is_kv_cache_type(uint32_t type) {
    switch (type) {
        case KAIL_TYPE_F32: case KAIL_TYPE_F16: case KAIL_TYPE_BF16: case KAIL_TYPE_Q8_0: case KAIL_TYPE_Q4_0:
        case KAIL_TYPE_Q4_1: case KAIL_TYPE_IQ4_NL: case KAIL_TYPE_Q5_0: case KAIL_TYPE_Q5_1: return true;
        default: return false;
    }
}
void fp32_to_fp16_row(const float * x, uint16_t * y, int64_t n) { kernels_active().fp32_to_fp16(x, y, n); }
void bf16_to_fp32_row(const uint16_t * x, float * y, int64_t n) { kernels_active().bf16_to_fp32(x, y, n); }
void fp32_to_bf16_row(const float * x, uint16_t * y, int64_t n) { kernels_active().fp32_to_bf16(x, y, n); }

bool type_can_dequantize(uint32_t type) {
    return type == KAIL_TYPE_F32 || type == KAIL_TYPE_F16 || type == KAIL_TYPE_BF16 || dequant_fn(type) != nullptr;
}

bool type_can_quantize(uint32_t type) { return type_can_dequantize(type); }

bool type_can_dot(uint32_t type) { return type < KAIL_TYPE_COUNT && kernels_scalar().w[type].gemm != nullptr; }

uint32_t vec_dot_type(uint32_t type) {
    if (!type_can_dot(type)) unsupported("vec_dot_type", type);
    return kernels_scalar().w[type].vd_type;
}

void dequantize_row(uint32_t type, const void * src, float * dst, int64_t n) {
    check_n(type, n);
    switch (type) {
        case KAIL_TYPE_F32: std::memmove(dst, src, static_cast<size_t>(n) * 4); return;
        case KAIL_TYPE_F16: fp16_to_fp32_row(static_cast<const uint16_t *>(src), dst, n); return;
        case KAIL_TYPE_BF16: bf16_to_fp32_row(static_cast<const uint16_t *>(src), dst, n); return;
        default: break;
    }
    if (convert_fn fast = kernels_active().to_float[type]) {
        fast(src, dst, n);
        return;
    }
    row_fn fn = dequant_fn(type);
    if (!fn) unsupported("dequantize_row", type);
    fn(src, dst, n);
}

size_t quantize_row(uint32_t type, const float * src, void * dst, int64_t n) {
    check_n(type, n);
    switch (type) {
        case KAIL_TYPE_F32: std::memmove(dst, src, static_cast<size_t>(n) * 4); break;
        case KAIL_TYPE_F16: fp32_to_fp16_row(src, static_cast<uint16_t *>(dst), n); break;
        case KAIL_TYPE_BF16: fp32_to_bf16_row(src, static_cast<uint16_t *>(dst), n); break;
        default: {
            quant_fn fn = quant_ref_fn(type);
            if (!fn) unsupported("quantize_row", type);
            fn(src, dst, n);
        }
    }
    return row_size(type, n);
}

static bool is_codebook_iq(uint32_t type) {
    return type == KAIL_TYPE_IQ2_XXS || type == KAIL_TYPE_IQ2_XS || type == KAIL_TYPE_IQ2_S || type == KAIL_TYPE_IQ3_XXS || type == KAIL_TYPE_IQ3_S ||
           type == KAIL_TYPE_IQ1_S || type == KAIL_TYPE_IQ1_M;
}

bool type_can_quantize_file(uint32_t type) {
    switch (type) {
        case KAIL_TYPE_F32: case KAIL_TYPE_F16: case KAIL_TYPE_BF16: case KAIL_TYPE_Q4_0: case KAIL_TYPE_Q4_1: case KAIL_TYPE_Q5_0:
        case KAIL_TYPE_Q5_1: case KAIL_TYPE_Q8_0: case KAIL_TYPE_Q2_K: case KAIL_TYPE_Q3_K: case KAIL_TYPE_Q4_K: case KAIL_TYPE_Q5_K:
        case KAIL_TYPE_Q6_K: case KAIL_TYPE_IQ4_NL: case KAIL_TYPE_IQ4_XS: case KAIL_TYPE_MXFP4:
        case KAIL_TYPE_NVFP4: case KAIL_TYPE_Q1_0: case KAIL_TYPE_Q2_0: case KAIL_TYPE_TQ1_0: case KAIL_TYPE_TQ2_0:
        case KAIL_TYPE_IQ2_XXS: case KAIL_TYPE_IQ2_XS: case KAIL_TYPE_IQ2_S: case KAIL_TYPE_IQ3_XXS: case KAIL_TYPE_IQ3_S:
        case KAIL_TYPE_IQ1_S: case KAIL_TYPE_IQ1_M:
            return true;
        default:
            return false;
    }
}

size_t quantize_row_file(uint32_t type, const float * src, void * dst, int64_t n) {
    if (!type_can_quantize_file(type)) unsupported("quantize_row_file", type);
    check_n(type, n);
    if (type == KAIL_TYPE_IQ4_NL) quantize_iq4_nl_ggml(src, dst, n);
    else if (type == KAIL_TYPE_IQ4_XS) quantize_iq4_xs_ggml(src, dst, n);
    else if (is_codebook_iq(type)) {
        if (iq_ggml_needs_weights(type)) throw error(KAIL_E_INVALID_ARG, std::string("quantizing to ") + type_name(type) + " needs an importance matrix");
        quantize_iq_ggml_row(type, src, dst, n, nullptr);
    } else return quantize_row(type, src, dst, n);
    return row_size(type, n);
}

size_t quantize_rows_file(uint32_t type, const float * src, void * dst, int64_t nrows, int64_t n_per_row, const float * qw) {
    if (!qw) return quantize_row_file(type, src, dst, nrows * n_per_row);
    if (!type_can_quantize_file(type)) unsupported("quantize_rows_file", type);
    check_n(type, n_per_row);
    const size_t rs = row_size(type, n_per_row);
    uint8_t * out = static_cast<uint8_t *>(dst);
    for (int64_t r = 0; r < nrows; r++, src += n_per_row, out += rs) {
        switch (type) {
            case KAIL_TYPE_Q4_0: quantize_q4_0_w(src, reinterpret_cast<block_q4_0 *>(out), n_per_row, qw); break;
            case KAIL_TYPE_Q4_1: quantize_q4_1_w(src, reinterpret_cast<block_q4_1 *>(out), n_per_row, qw); break;
            case KAIL_TYPE_Q5_0: quantize_q5_0_w(src, reinterpret_cast<block_q5_0 *>(out), n_per_row, qw); break;
            case KAIL_TYPE_Q5_1: quantize_q5_1_w(src, reinterpret_cast<block_q5_1 *>(out), n_per_row, qw); break;
            case KAIL_TYPE_Q2_K: quantize_q2_K_w(src, reinterpret_cast<block_q2_K *>(out), n_per_row, qw); break;
            case KAIL_TYPE_Q3_K: quantize_q3_K_w(src, reinterpret_cast<block_q3_K *>(out), n_per_row, qw); break;
            case KAIL_TYPE_Q4_K: quantize_q4_K_w(src, reinterpret_cast<block_q4_K *>(out), n_per_row, qw); break;
            case KAIL_TYPE_Q5_K: quantize_q5_K_w(src, reinterpret_cast<block_q5_K *>(out), n_per_row, qw); break;
            case KAIL_TYPE_Q6_K: quantize_q6_K_w(src, reinterpret_cast<block_q6_K *>(out), n_per_row, qw); break;
            case KAIL_TYPE_IQ4_NL: quantize_iq4_nl_ggml(src, out, n_per_row, qw); break;
            case KAIL_TYPE_IQ4_XS: quantize_iq4_xs_ggml(src, out, n_per_row, qw); break;
            case KAIL_TYPE_IQ2_XXS: case KAIL_TYPE_IQ2_XS: case KAIL_TYPE_IQ2_S: case KAIL_TYPE_IQ3_XXS: case KAIL_TYPE_IQ3_S:
            case KAIL_TYPE_IQ1_S: case KAIL_TYPE_IQ1_M: quantize_iq_ggml_row(type, src, out, n_per_row, qw); break;
            // (F32, F16, BF16, Q8_0, MXFP4, NVFP4, TQ1_0, TQ2_0: no weights; Q1_0 and Q2_0: ggml's
            // quantize_q1_0 / q2_0 take the reference row by row, weights unused.)
            default: quantize_row_file(type, src, out, n_per_row);
        }
    }
    return rs * static_cast<size_t>(nrows);
}

size_t quantize_row_activations(uint32_t vd_type, const float * src, void * dst, int64_t n) {
    check_n(vd_type, n);
    from_float_fn fn = vd_type < KAIL_TYPE_COUNT ? kernels_active().from_float[vd_type] : nullptr;
    if (!fn) unsupported("quantize_row_activations", vd_type);
    fn(src, dst, n);
    return row_size(vd_type, n);
}

float vec_dot(uint32_t type, int64_t n, const void * w, const void * a) {
    if (!type_can_dot(type)) unsupported("vec_dot", type);
    check_n(type, n);
    const weight_kernels & wk = kernels_active().w[type];
    check_n(wk.vd_type, n);
    const uint8_t * act = static_cast<const uint8_t *>(a);
    std::vector<uint8_t> prepared;
    if (wk.prepare) {
        prepared.resize(wk.prepared_size(n));
        wk.prepare(n, a, prepared.data());
        act = prepared.data();
    }
    float out = 0;
    float * outp = &out;
    wk.gemm(n, static_cast<const uint8_t *>(w), 0, 1, &act, 1, &outp);
    return out;
}

const char * quants_kernel_level() { return kernels_active().level; }

} // namespace kail
