#include "model/mla.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kail/gguf.h"
#include "kail/matmul.h"
#include "kail/quants.h"
#include "kail/residency.h"
#include "kail/status.h"
#include "kail/threadpool.h"
#include "kail/types.h"

namespace kail {

namespace {

std::string shape(const gguf_tensor_info * t) {
    std::string s = "[";
    for (uint32_t i = 0; i < std::max<uint32_t>(t->n_dims, 1); i++) s += (i ? ", " : "") + std::to_string(t->ne[i]);
    return s + "]";
}

size_t row_bytes(const mla_weight & w) { return row_size(w.info->type, w.info->ne[0]); }

// Head h's up-projections as F32: wk (qk_nope rows of kv_lora) and, with want_v, wv (v_head rows
// of kv_lora).
void dequant_head(const mla_args & a, int64_t h, std::vector<float> & wk, std::vector<float> & wv, bool want_v = true) {
    const int64_t L = a.kv_lora;
    wk.resize(static_cast<size_t>(a.qk_nope * L));
    wv.resize(static_cast<size_t>(a.v_head * L));
    if (a.kv_b.info) {
        const size_t rb = row_bytes(a.kv_b);
        const int64_t r0 = h * (a.qk_nope + a.v_head);
        for (int64_t i = 0; i < a.qk_nope; i++) dequantize_row(a.kv_b.info->type, a.kv_b.data + (r0 + i) * rb, wk.data() + i * L, L);
        if (want_v)
            for (int64_t c = 0; c < a.v_head; c++) dequantize_row(a.kv_b.info->type, a.kv_b.data + (r0 + a.qk_nope + c) * rb, wv.data() + c * L, L);
        return;
    }
    // k_b holds W_kᵀ per head (kv_lora rows of qk_nope); v_b holds W_v (v_head rows of kv_lora).
    std::vector<float> row(static_cast<size_t>(a.qk_nope));
    const size_t kb = row_bytes(a.k_b), vb = row_bytes(a.v_b);
    for (int64_t l = 0; l < L; l++) {
        dequantize_row(a.k_b.info->type, a.k_b.data + (h * L + l) * kb, row.data(), a.qk_nope);
        for (int64_t i = 0; i < a.qk_nope; i++) wk[i * L + l] = row[i];
    }
    for (int64_t c = 0; c < a.v_head; c++) dequantize_row(a.v_b.info->type, a.v_b.data + (h * a.v_head + c) * vb, wv.data() + c * L, L);
}

// The first cache row a token at `p` attends to: p + 1 - window under a sliding window, else 0.
int64_t first_row(const mla_args & a, int64_t p) { return a.window > 0 ? std::max<int64_t>(0, p + 1 - a.window) : 0; }

// Softmax-weighted attention over rows [lo, p] of one sequence's cache: scores from `score(j)`,
// weights handed to `acc(j, w)` (attention_softmax: probabilities rounded to F16 for an F16 cache).
template <typename S, typename A>
void attend_rows(int64_t lo, int64_t p, float scale, uint32_t kv_type, std::vector<float> & scores, S score, A acc,
                 float sink = -std::numeric_limits<float>::infinity()) {
    scores.resize(static_cast<size_t>(p + 1 - lo));
    for (int64_t j = lo; j <= p; j++) scores[j - lo] = score(j);
    std::vector<uint16_t> half;
    attention_softmax(scores.data(), p + 1 - lo, scale, kv_type, half, sink);
    for (int64_t j = lo; j <= p; j++) acc(j, scores[j - lo]);
}

// The cache row of token t's position j (j >= first_row(pos)): a.first's row for the window's
// first position, the rows after it in order.
int64_t row_of(const mla_args & a, int64_t t, int64_t j) { return a.first ? a.first[t] + (j - first_row(a, a.pos[t])) : j; }

void cache_row(const mla_args & a, int64_t t, int64_t j, float * dst) {
    const int64_t w = a.kv_lora + a.qk_rope;
    dequantize_row(a.kv_type, a.cache[t] + static_cast<size_t>(row_of(a, t, j)) * kv_row_bytes(a.kv_type, w), dst, w);
}

void attend_absorbed(const mla_args & a) {
    const int64_t L = a.kv_lora, R = a.qk_rope, W = L + R, H = a.n_head, n = a.n_tok, hq = a.qk_nope + R;
    // 1. Absorbed queries: per head [W_kᵀ q_nope, q_pe].
    std::vector<float> qa(static_cast<size_t>(n * H * W));
    if (a.k_b.info) {
        const size_t kb = row_bytes(a.k_b);
        if (a.observe)
            for (int64_t h = 0; h < H; h++) a.observe(0, h, a.q + h * hq, a.q_stride, n);
        for (int64_t h = 0; h < H; h++)
            matmul(a.k_b.info->type, a.k_b.data + static_cast<size_t>(h * L) * kb, kb, L, a.qk_nope,
                   a.q + h * hq, static_cast<size_t>(a.q_stride) * 4, n, qa.data() + h * W, static_cast<size_t>(H * W) * 4, a.pool);
    } else {
        // attn_kv_b holds W_k, not its transpose: dequantize each head's rows and accumulate
        // q_nope[i] * row_i, heads in parallel.
        a.pool->parallel_for(H, [&](int64_t h0, int64_t h1, int) {
            std::vector<float> wk, wv;
            for (int64_t h = h0; h < h1; h++) {
                dequant_head(a, h, wk, wv, false);
                for (int64_t t = 0; t < n; t++) {
                    float * o = qa.data() + (t * H + h) * W;
                    const float * qn = a.q + t * a.q_stride + h * hq;
                    std::fill(o, o + L, 0.0f);
                    for (int64_t i = 0; i < a.qk_nope; i++) {
                        const float qi = qn[i];
                        const float * r = wk.data() + i * L;
                        for (int64_t l = 0; l < L; l++) o[l] += qi * r[l];
                    }
                }
            }
        }, 1);
    }
    for (int64_t t = 0; t < n; t++)
        for (int64_t h = 0; h < H; h++)
            std::copy_n(a.q + t * a.q_stride + h * hq + a.qk_nope, R, qa.data() + (t * H + h) * W + L);

    // 2. MQA over the latent cache: one shared key row of width L + R, the value is its latent part.
    // Every head attends to the same rows, so per token the scores are one matrix product of the
    // cached rows with the H absorbed queries, and the heads' latents one pass of the H probability
    // rows over the cached latents (attention_weighted_rows): each row is read once per 4 heads, in
    // the kernels' SIMD code, rows split across the pool. As ggml-cpu computes it: for an F16 cache
    // the queries (the product's activations) and the probabilities are rounded to F16.
    std::vector<float> lat(static_cast<size_t>(n * H * L));
    std::vector<float> scores;
    std::vector<uint8_t> allowed, gathered;
    const size_t rb = kv_row_bytes(a.kv_type, W);  // a cached row's bytes (whole Q8_0 blocks for a quantized cache)
    // Without a window or a selection, consecutive tokens of one sequence (one cache) form a tile:
    // their T x H queries are one product with the cached rows and their probability rows one
    // pass over the latents, so each cached row is read once per tile. A token's softmax covers
    // its own rows [0, pos]; its probabilities past them are 0 and add nothing to the weighted sum
    // (one fused multiply-add per row in row order): the same bits as the token alone.
    int64_t t_max = a.window == 0 && !a.sel ? std::max<int64_t>(1, std::min<int64_t>(16, 64 / H)) : 1;
    int64_t np_top = 1;
    for (int64_t t = 0; t < n; t++) {
        np_top = std::max<int64_t>(np_top, a.pos[t] + 1);
        if (row_of(a, t, 0) != 0) t_max = 1;
    }
    // (The tile's scores, T x H x rows floats, stay within 16 MiB.)
    while (t_max > 1 && t_max * H * np_top * 4 > (int64_t(16) << 20)) t_max /= 2;
    for (int64_t t0 = 0, nt = 1; t_max > 1 && t0 < n; t0 += nt) {
        nt = 1;
        while (nt < t_max && t0 + nt < n && a.cache[t0 + nt] == a.cache[t0]) nt++;
        int64_t np = 0;
        for (int64_t i = 0; i < nt; i++) np = std::max<int64_t>(np, a.pos[t0 + i] + 1);
        const int64_t nq = nt * H;
        scores.resize(static_cast<size_t>(nq * np));
        matmul(a.kv_type, a.cache[t0], rb, np, W, qa.data() + t0 * H * W, static_cast<size_t>(W) * 4, nq,
               scores.data(), static_cast<size_t>(np) * 4, a.pool);
        a.pool->parallel_for(nq, [&](int64_t r0, int64_t r1, int) {
            std::vector<uint16_t> half;
            for (int64_t r = r0; r < r1; r++) {
                const int64_t own = a.pos[t0 + r / H] + 1, h = r % H;
                float * sc = scores.data() + r * np;
                attention_softmax(sc, own, a.scale, a.kv_type, half, a.sinks ? a.sinks[h] : -std::numeric_limits<float>::infinity());
                std::fill(sc + own, sc + np, 0.0f);
            }
        }, 1);
        const int64_t chunk = 64;
        a.pool->parallel_for((L + chunk - 1) / chunk, [&](int64_t c0, int64_t c1, int) {
            for (int64_t c = c0; c < c1; c++) {
                const int64_t l0 = c * chunk;
                attention_weighted_rows(a.kv_type, a.cache[t0] + kv_row_bytes(a.kv_type, l0), rb, np, std::min(chunk, L - l0), scores.data(),
                                        static_cast<size_t>(np), nq, lat.data() + t0 * H * L + l0, static_cast<size_t>(L));
            }
        }, 1);
    }
    for (int64_t t = 0; t_max == 1 && t < n; t++) {
        // A sliding window starts at row lo (llama.cpp masks the rows before it with -inf, which
        // gives them no weight).
        const int64_t lo = first_row(a, a.pos[t]);
        int64_t np = a.pos[t] + 1 - lo;
        const uint8_t * rows = a.cache[t] + static_cast<size_t>(row_of(a, t, lo)) * rb;
        if (a.sel && np > a.top_k) {
            // Sparse attention (DSA): only the rows the indexer selected, gathered in position
            // order, take part (llama.cpp masks the others with -inf, which gives them no weight).
            allowed.assign(static_cast<size_t>(np), 0);
            const float * s = a.sel + t * a.sel_stride;
            for (int64_t i = 0; i < a.top_k; i++)
                if (s[i] >= 0 && s[i] < static_cast<float>(np)) allowed[static_cast<size_t>(s[i])] = 1;
            gathered.resize(static_cast<size_t>(a.top_k) * rb);
            int64_t m = 0;
            for (int64_t j = 0; j < np; j++)
                if (allowed[static_cast<size_t>(j)]) std::copy_n(rows + static_cast<size_t>(j) * rb, rb, gathered.data() + static_cast<size_t>(m++) * rb);
            if (m == 0) throw error(KAIL_E_INTERNAL, "sparse attention: the indexer selected no position");
            rows = gathered.data();
            np = m;
        }
        scores.resize(static_cast<size_t>(H * np));
        matmul(a.kv_type, rows, rb, np, W, qa.data() + t * H * W, static_cast<size_t>(W) * 4, H,
               scores.data(), static_cast<size_t>(np) * 4, a.pool);
        a.pool->parallel_for(H, [&](int64_t h0, int64_t h1, int) {
            std::vector<uint16_t> half;
            for (int64_t h = h0; h < h1; h++)
                attention_softmax(scores.data() + h * np, np, a.scale, a.kv_type, half, a.sinks ? a.sinks[h] : -std::numeric_limits<float>::infinity());
        }, 1);
        // The heads' latents: the probability rows times the cached latents, in column chunks
        // over the pool; each chunk reads every cached row once per 4 heads.
        const int64_t chunk = 64;
        a.pool->parallel_for((L + chunk - 1) / chunk, [&](int64_t c0, int64_t c1, int) {
            for (int64_t c = c0; c < c1; c++) {
                const int64_t l0 = c * chunk;
                attention_weighted_rows(a.kv_type, rows + kv_row_bytes(a.kv_type, l0), rb, np,
                                        std::min(chunk, L - l0), scores.data(), static_cast<size_t>(np), H, lat.data() + t * H * L + l0,
                                        static_cast<size_t>(L));
            }
        }, 1);
    }

    // 3. Value up-projection per head.
    for (int64_t h = 0; h < H; h++) {
        const float * x = lat.data() + h * L;
        const size_t xs = static_cast<size_t>(H * L) * 4, ys = static_cast<size_t>(a.out_stride) * 4;
        float * y = a.out + h * a.v_head;
        if (a.v_b.info) {
            if (a.observe) a.observe(1, h, x, H * L, n);
            const size_t vb = row_bytes(a.v_b);
            matmul(a.v_b.info->type, a.v_b.data + static_cast<size_t>(h * a.v_head) * vb, vb, a.v_head, L, x, xs, n, y, ys, a.pool);
        } else {
            const size_t rb = row_bytes(a.kv_b);
            matmul(a.kv_b.info->type, a.kv_b.data + static_cast<size_t>(h * (a.qk_nope + a.v_head) + a.qk_nope) * rb, rb, a.v_head, L, x, xs, n, y, ys, a.pool);
        }
    }
}

void attend_naive(const mla_args & a) {
    const int64_t L = a.kv_lora, R = a.qk_rope, W = L + R, H = a.n_head, hq = a.qk_nope + R;
    std::vector<float> wk, wv, kr(static_cast<size_t>(W)), k(static_cast<size_t>(hq)), v(static_cast<size_t>(a.v_head)), scores;
    for (int64_t h = 0; h < H; h++) {
        dequant_head(a, h, wk, wv);
        for (int64_t t = 0; t < a.n_tok; t++) {
            const float * q = a.q + t * a.q_stride + h * hq;
            float * o = a.out + t * a.out_stride + h * a.v_head;
            std::fill(o, o + a.v_head, 0.0f);
            attend_rows(first_row(a, a.pos[t]), a.pos[t], a.scale, KAIL_TYPE_F32, scores,
                [&](int64_t j) {
                    cache_row(a, t, j, kr.data());
                    for (int64_t i = 0; i < a.qk_nope; i++) {
                        float s = 0.0f;
                        for (int64_t l = 0; l < L; l++) s += wk[i * L + l] * kr[l];
                        k[i] = s;
                    }
                    std::copy_n(kr.data() + L, R, k.data() + a.qk_nope);
                    float d = 0.0f;
                    for (int64_t i = 0; i < hq; i++) d += q[i] * k[i];
                    return d;
                },
                [&](int64_t j, float w) {
                    cache_row(a, t, j, kr.data());
                    for (int64_t c = 0; c < a.v_head; c++) {
                        float s = 0.0f;
                        for (int64_t l = 0; l < L; l++) s += wv[c * L + l] * kr[l];
                        o[c] += w * s;
                    }
                },
                a.sinks ? a.sinks[h] : -std::numeric_limits<float>::infinity());
        }
    }
}

} // namespace

void attention_softmax(float * sc, int64_t n, float scale, uint32_t kv_type, std::vector<uint16_t> & half, float sink, const float * bias) {
    float mx = attention_scale_max(sc, n, scale, bias);
    const bool has_sink = std::isfinite(sink);
    if (has_sink) mx = std::max(mx, sink);
    double sum = attention_exp_sum(sc, n, mx);
    if (has_sink) sum += attention_exp(sink - mx);
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t j = 0; j < n; j++) sc[j] *= inv;
    if (kv_type == KAIL_TYPE_F16) {
        half.resize(static_cast<size_t>(n));
        fp32_to_fp16_row(sc, half.data(), n);
        fp16_to_fp32_row(half.data(), sc, n);
    }
}

std::string mla_check_weights(const mla_args & a) {
    const int64_t L = a.kv_lora, H = a.n_head;
    if (L <= 0 || H <= 0 || a.qk_nope <= 0 || a.qk_rope <= 0 || a.v_head <= 0) return "mla_attention needs positive n_head, kv_lora, qk_nope, qk_rope, v_head";
    if (a.kv_b.info) {
        const auto * t = a.kv_b.info;
        if (t->ne[0] != L || t->ne[1] != H * (a.qk_nope + a.v_head))
            return "tensor '" + t->name + "' " + shape(t) + " does not match [" + std::to_string(L) + ", " + std::to_string(H * (a.qk_nope + a.v_head)) + "]";
        return {};
    }
    if (!a.k_b.info || !a.v_b.info) return "mla_attention needs weights k_b and v_b, or kv_b";
    const auto * k = a.k_b.info;
    const auto * v = a.v_b.info;
    if (k->ne[0] != a.qk_nope || k->ne[1] != L || k->ne[2] != H)
        return "tensor '" + k->name + "' " + shape(k) + " does not match [" + std::to_string(a.qk_nope) + ", " + std::to_string(L) + ", " + std::to_string(H) + "]";
    if (v->ne[0] != L || v->ne[1] != a.v_head || v->ne[2] != H)
        return "tensor '" + v->name + "' " + shape(v) + " does not match [" + std::to_string(L) + ", " + std::to_string(a.v_head) + ", " + std::to_string(H) + "]";
    return {};
}

void mla_attend(const mla_args & a) {
    if (a.naive && a.sel) throw error(KAIL_E_UNSUPPORTED, "naive MLA (a test form) does not take the sparse attention's selection");
    if (a.sel && a.window > 0) throw error(KAIL_E_UNSUPPORTED, "MLA takes a sliding window or the sparse attention's selection, not both");
    if (a.naive) attend_naive(a);
    else attend_absorbed(a);
}

} // namespace kail
