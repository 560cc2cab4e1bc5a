// Absorbed MLA against the naive form (every cached latent decompressed into per-head K and V) on
// random weights: both tensor layouts (attn_kv_b, split attn_k_b/attn_v_b), F32 and F16 caches.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "kail/gguf.h"
#include "kail/quants.h"
#include "kail/threadpool.h"
#include "kail/types.h"
#include "model/mla.h"

using namespace kail;

static int failures = 0;

static void run_case(bool split, uint32_t kv_type) {
    const int64_t H = 3, L = 64, nope = 16, R = 8, V = 12, n = 5, W = L + R;
    std::mt19937 rng(42);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    // One projection W_k (per head nope x L) and W_v (per head V x L), written in either layout.
    std::vector<float> wk(H * nope * L), wv(H * V * L);
    for (auto & v : wk) v = nd(rng) / std::sqrt(float(L));
    for (auto & v : wv) v = nd(rng) / std::sqrt(float(L));
    std::vector<float> kb, vb, kvb;
    gguf_tensor_info ik, iv, ikv;
    if (split) {
        kb.resize(H * L * nope);  // [nope, L, H]: row (h, l) holds W_k[h][:, l]
        for (int64_t h = 0; h < H; h++)
            for (int64_t l = 0; l < L; l++)
                for (int64_t i = 0; i < nope; i++) kb[(h * L + l) * nope + i] = wk[(h * nope + i) * L + l];
        vb = wv;                  // [L, V, H]
        ik.name = "attn_k_b"; ik.n_dims = 3; ik.ne[0] = nope; ik.ne[1] = L; ik.ne[2] = H; ik.type = KAIL_TYPE_F32;
        iv.name = "attn_v_b"; iv.n_dims = 3; iv.ne[0] = L; iv.ne[1] = V; iv.ne[2] = H; iv.type = KAIL_TYPE_F32;
    } else {
        kvb.resize(H * (nope + V) * L);  // [L, H * (nope + V)]
        for (int64_t h = 0; h < H; h++) {
            for (int64_t i = 0; i < nope; i++) for (int64_t l = 0; l < L; l++) kvb[(h * (nope + V) + i) * L + l] = wk[(h * nope + i) * L + l];
            for (int64_t c = 0; c < V; c++) for (int64_t l = 0; l < L; l++) kvb[(h * (nope + V) + nope + c) * L + l] = wv[(h * V + c) * L + l];
        }
        ikv.name = "attn_kv_b"; ikv.n_dims = 2; ikv.ne[0] = L; ikv.ne[1] = H * (nope + V); ikv.type = KAIL_TYPE_F32;
    }
    const size_t es = kv_type == KAIL_TYPE_F32 ? 4 : 2;
    std::vector<uint8_t> cache(n * W * es);
    for (int64_t j = 0; j < n * W; j++) {
        const float v = nd(rng);
        if (kv_type == KAIL_TYPE_F32) reinterpret_cast<float *>(cache.data())[j] = v;
        else reinterpret_cast<uint16_t *>(cache.data())[j] = fp32_to_fp16(v);
    }
    std::vector<float> q(n * H * (nope + R));
    for (auto & v : q) v = nd(rng);
    std::vector<const uint8_t *> rows(n, cache.data());
    std::vector<int32_t> pos(n);
    for (int64_t t = 0; t < n; t++) pos[t] = static_cast<int32_t>(t);
    threadpool pool(2);
    mla_args a;
    a.n_tok = n; a.n_head = H; a.kv_lora = L; a.qk_nope = nope; a.qk_rope = R; a.v_head = V;
    a.scale = 1.0f / std::sqrt(float(nope + R));
    a.q = q.data(); a.q_stride = H * (nope + R);
    a.out_stride = H * V;
    a.cache = rows.data(); a.pos = pos.data(); a.kv_type = kv_type; a.pool = &pool;
    if (split) {
        a.k_b = {&ik, reinterpret_cast<const uint8_t *>(kb.data())};
        a.v_b = {&iv, reinterpret_cast<const uint8_t *>(vb.data())};
    } else {
        a.kv_b = {&ikv, reinterpret_cast<const uint8_t *>(kvb.data())};
    }
    const std::string err = mla_check_weights(a);
    if (!err.empty()) {
        std::printf("FAIL %s: %s\n", split ? "split" : "kv_b", err.c_str());
        failures++;
        return;
    }
    std::vector<float> absorbed(n * H * V), naive(n * H * V);
    a.out = absorbed.data();
    mla_attend(a);
    a.naive = true;
    a.out = naive.data();
    mla_attend(a);
    double num = 0, den = 0;
    for (size_t i = 0; i < naive.size(); i++) {
        num += (absorbed[i] - naive[i]) * double(absorbed[i] - naive[i]);
        den += double(naive[i]) * naive[i];
    }
    const double nmse = num / den;
    // F16 caches round the absorbed query and the probabilities (as ggml does); the naive form
    // rounds neither.
    const double bound = kv_type == KAIL_TYPE_F32 ? 1e-10 : 1e-5;
    const bool ok = nmse <= bound;
    std::printf("%s layout %-7s cache %s: absorbed vs naive NMSE %.3e (bound %.0e)\n", ok ? "ok  " : "FAIL", split ? "split" : "kv_b", kv_type == KAIL_TYPE_F32 ? "F32" : "F16", nmse, bound);
    if (!ok) failures++;
}

int main() {
    for (bool split : {false, true})
        for (uint32_t kt : {uint32_t(KAIL_TYPE_F32), uint32_t(KAIL_TYPE_F16)}) run_case(split, kt);
    // The DeepSeek-V3 shape: the latent cache against a naive per-head cache (F16 elements).
    const int64_t layers = 61, heads = 128, kv_lora = 512, rope = 64, nope = 128, v = 128;
    const int64_t absorbed = layers * (kv_lora + rope) * 2;
    const int64_t naive_shared = layers * (heads * (nope + v) + rope) * 2;
    const int64_t naive_full = layers * heads * (nope + rope + v) * 2;
    std::printf("DeepSeek-V3 KV bytes/token (F16): latent %lld, naive %lld (%.1fx; %lld = %.1fx with the RoPE key per head)\n",
                (long long)absorbed, (long long)naive_shared, double(naive_shared) / absorbed, (long long)naive_full, double(naive_full) / absorbed);
    return failures ? 1 : 0;
}
