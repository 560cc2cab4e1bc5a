// Absorbed MLA against the naive form (every cached latent decompressed into per-head K and V) on
// random weights: both tensor layouts (attn_kv_b, split attn_k_b/attn_v_b), F32 and F16 caches.
#include <algorithm>
#include <cmath>
#include <cstring>
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

// NMSE of x against y over values [from, to) (to < 0: to the end).
static double nmse(const std::vector<float> & x, const std::vector<float> & y, int64_t from = 0, int64_t to = -1) {
    double num = 0, den = 0;
    for (size_t i = static_cast<size_t>(from); i < (to < 0 ? y.size() : static_cast<size_t>(to)); i++) {
        num += (x[i] - y[i]) * double(x[i] - y[i]);
        den += double(y[i]) * y[i];
    }
    return num / den;
}

// n tokens at positions 0..n-1 over one shared cache of n random latent rows (W values each, F32 or
// F16), then their random queries (drawn in that order), and the mla_args over them.
struct mla_inputs {
    std::vector<uint8_t>         cache;
    std::vector<float>           q;
    std::vector<const uint8_t *> rows;
    std::vector<int32_t>         pos;
    threadpool                   pool{2};
    mla_args                     a;
    mla_inputs(std::mt19937 & rng, std::normal_distribution<float> & nd, uint32_t kv_type, int64_t n, int64_t H, int64_t L, int64_t nope, int64_t R, int64_t V) {
        const int64_t W = L + R;
        const size_t es = kv_type == KAIL_TYPE_F32 ? 4 : 2;
        cache.resize(n * W * es);
        for (int64_t j = 0; j < n * W; j++) {
            const float v = nd(rng);
            if (kv_type == KAIL_TYPE_F32) reinterpret_cast<float *>(cache.data())[j] = v;
            else reinterpret_cast<uint16_t *>(cache.data())[j] = fp32_to_fp16(v);
        }
        q.resize(n * H * (nope + R));
        for (auto & v : q) v = nd(rng);
        rows.assign(n, cache.data());
        pos.resize(n);
        for (int64_t t = 0; t < n; t++) pos[t] = static_cast<int32_t>(t);
        a.n_tok = n; a.n_head = H; a.kv_lora = L; a.qk_nope = nope; a.qk_rope = R; a.v_head = V;
        a.scale = 1.0f / std::sqrt(float(nope + R));
        a.q = q.data(); a.q_stride = H * (nope + R);
        a.out_stride = H * V;
        a.cache = rows.data(); a.pos = pos.data(); a.kv_type = kv_type; a.pool = &pool;
    }
};

static void run_case(bool split, uint32_t kv_type) {
    const int64_t H = 3, L = 64, nope = 16, R = 8, V = 12, n = 5;
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
    mla_inputs in(rng, nd, kv_type, n, H, L, nope, R, V);
    mla_args & a = in.a;
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
    const double e = nmse(absorbed, naive);
    // F16 caches round the absorbed query and the probabilities (as ggml does); the naive form
    // rounds neither.
    const double bound = kv_type == KAIL_TYPE_F32 ? 1e-10 : 1e-5;
    const bool ok = e <= bound;
    std::printf("%s layout %-7s cache %s: absorbed vs naive NMSE %.3e (bound %.0e)\n", ok ? "ok  " : "FAIL", split ? "split" : "kv_b", kv_type == KAIL_TYPE_F32 ? "F32" : "F16", e, bound);
    if (!ok) failures++;

    // Attention sinks (Hunyuan v4): one logit per head joins its softmax with no value row. The two
    // forms agree with them, they change the output, and a large sink takes nearly all the weight.
    std::vector<float> sinks(H), s_abs(n * H * V), s_naive(n * H * V), big(n * H * V);
    for (int64_t h = 0; h < H; h++) sinks[h] = 0.5f * float(h) - 0.25f;
    a.sinks = sinks.data();
    a.naive = false; a.out = s_abs.data(); mla_attend(a);
    a.naive = true; a.out = s_naive.data(); mla_attend(a);
    std::vector<float> large(H, 40.0f);
    a.sinks = large.data();
    a.naive = false; a.out = big.data(); mla_attend(a);
    a.sinks = nullptr;
    double mag_big = 0, mag = 0;
    for (size_t i = 0; i < big.size(); i++) { mag_big = std::max(mag_big, double(std::fabs(big[i]))); mag = std::max(mag, double(std::fabs(absorbed[i]))); }
    const double e_sink = nmse(s_abs, s_naive), e_changed = nmse(s_abs, absorbed);
    const bool ok_sink = e_sink <= bound && e_changed > 1e-4 && mag_big < mag * 1e-9;
    std::printf("%s layout %-7s cache %s sinks: absorbed vs naive NMSE %.3e, vs no sinks %.3e, large sink max |out| %.2e of %.2e\n", ok_sink ? "ok  " : "FAIL",
                split ? "split" : "kv_b", kv_type == KAIL_TYPE_F32 ? "F32" : "F16", e_sink, e_changed, mag_big, mag);
    if (!ok_sink) failures++;
}

// A sliding window (dots3note's sliding MLA blocks): each token at pos attends to rows
// [pos + 1 - window, pos] only. Checked against the same token attending to every row of a cache
// that starts at row pos + 1 - window (the window as its own cache), token by token; the naive form
// with the window agrees too. A window wider than the positions changes nothing, and a narrower
// one changes the rows past it.
static void run_window_case(uint32_t kv_type) {
    const int64_t H = 2, L = 32, nope = 8, R = 8, V = 8, n = 12, W = L + R, window = 5;
    std::mt19937 rng(7);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<float> kb(H * L * nope), vb(H * L * V);
    for (auto & v : kb) v = nd(rng) / std::sqrt(float(nope));
    for (auto & v : vb) v = nd(rng) / std::sqrt(float(L));
    gguf_tensor_info ik, iv;
    ik.name = "attn_k_b"; ik.n_dims = 3; ik.ne[0] = nope; ik.ne[1] = L; ik.ne[2] = H; ik.type = KAIL_TYPE_F32;
    iv.name = "attn_v_b"; iv.n_dims = 3; iv.ne[0] = L; iv.ne[1] = V; iv.ne[2] = H; iv.type = KAIL_TYPE_F32;
    mla_inputs in(rng, nd, kv_type, n, H, L, nope, R, V);
    mla_args & a = in.a;
    a.k_b = {&ik, reinterpret_cast<const uint8_t *>(kb.data())};
    a.v_b = {&iv, reinterpret_cast<const uint8_t *>(vb.data())};
    auto run = [&](int64_t win, bool naive) {
        std::vector<float> out(n * H * V);
        a.window = win; a.naive = naive; a.out = out.data();
        mla_attend(a);
        return out;
    };
    const std::vector<float> windowed = run(window, false), naive = run(window, true), full = run(0, false), wide = run(n, false);
    // The reference: token t alone over the cache from row lo = max(0, t + 1 - window), at position t - lo.
    std::vector<float> ref(n * H * V);
    for (int64_t t = 0; t < n; t++) {
        const int64_t lo = std::max<int64_t>(0, t + 1 - window);
        const uint8_t * base = in.cache.data() + static_cast<size_t>(lo * W) * (kv_type == KAIL_TYPE_F32 ? 4 : 2);
        const int32_t p = static_cast<int32_t>(t - lo);
        mla_args b = a;
        b.n_tok = 1; b.window = 0; b.naive = false;
        b.q = in.q.data() + t * a.q_stride;
        b.cache = &base; b.pos = &p; b.out = ref.data() + t * a.out_stride;
        mla_attend(b);
    }
    const int64_t past = window * H * V;  // the first token whose window leaves rows out
    const double e_ref = nmse(windowed, ref, 0), e_naive = nmse(windowed, naive, 0);
    const double e_wide = nmse(wide, full, 0), e_before = nmse(windowed, full, 0, past);
    const double e_past = nmse(windowed, full, past);
    const double bound = kv_type == KAIL_TYPE_F32 ? 1e-12 : 1e-5;
    const bool ok = e_ref <= 1e-12 && e_naive <= bound && e_wide == 0 && e_before == 0 && e_past > 1e-3;
    std::printf("%s window %lld cache %s: vs the window as its own cache %.3e, vs naive %.3e, wide window vs none %.3e, "
                "inside vs no window %.3e, past it %.3e\n",
                ok ? "ok  " : "FAIL", (long long)window, kv_type == KAIL_TYPE_F32 ? "F32" : "F16", e_ref, e_naive, e_wide, e_before, e_past);
    if (!ok) failures++;

    // A mirrored ring (the sliding blocks' cache, kv_ring_rows): Rr = window + 2 rows stored twice,
    // position j at rows j % Rr and j % Rr + Rr, holding positions (t - Rr, t] for token t (each
    // token its own ring's state); a.first names the row of the window's first position. The same
    // bits as the linear cache.
    const int64_t Rr = window + 2;
    const size_t rb = static_cast<size_t>(W) * (kv_type == KAIL_TYPE_F32 ? 4 : 2);
    std::vector<std::vector<uint8_t>> rings(static_cast<size_t>(n), std::vector<uint8_t>(2 * Rr * rb, 0xff));
    std::vector<const uint8_t *> ring_ptr(static_cast<size_t>(n));
    std::vector<int64_t> first(static_cast<size_t>(n));
    for (int64_t t = 0; t < n; t++) {
        for (int64_t j = std::max<int64_t>(0, t + 1 - Rr); j <= t; j++)
            for (int64_t half = 0; half < 2; half++)
                std::memcpy(rings[t].data() + static_cast<size_t>(j % Rr + half * Rr) * rb, in.cache.data() + static_cast<size_t>(j) * rb, rb);
        ring_ptr[t] = rings[t].data();
        first[t] = std::max<int64_t>(0, t + 1 - window) % Rr;
    }
    const uint8_t * const * linear = a.cache;
    a.cache = ring_ptr.data();
    a.first = first.data();
    const std::vector<float> ringed = run(window, false), ringed_naive = run(window, true);
    a.cache = linear;
    a.first = nullptr;
    const bool ok_ring = std::memcmp(ringed.data(), windowed.data(), ringed.size() * 4) == 0 && std::memcmp(ringed_naive.data(), naive.data(), naive.size() * 4) == 0;
    std::printf("%s window %lld cache %s in a mirrored ring of %lld rows: the linear cache's bits (absorbed and naive)\n", ok_ring ? "ok  " : "FAIL", (long long)window,
                kv_type == KAIL_TYPE_F32 ? "F32" : "F16", (long long)Rr);
    if (!ok_ring) failures++;
}

int main() {
    for (bool split : {false, true})
        for (uint32_t kt : {uint32_t(KAIL_TYPE_F32), uint32_t(KAIL_TYPE_F16)}) run_case(split, kt);
    for (uint32_t kt : {uint32_t(KAIL_TYPE_F32), uint32_t(KAIL_TYPE_F16)}) run_window_case(kt);
    // The DeepSeek-V3 shape: the latent cache against a naive per-head cache (F16 elements).
    const int64_t layers = 61, heads = 128, kv_lora = 512, rope = 64, nope = 128, v = 128;
    const int64_t absorbed = layers * (kv_lora + rope) * 2;
    const int64_t naive_shared = layers * (heads * (nope + v) + rope) * 2;
    const int64_t naive_full = layers * heads * (nope + rope + v) * 2;
    std::printf("DeepSeek-V3 KV bytes/token (F16): latent %lld, naive %lld (%.1fx; %lld = %.1fx with the RoPE key per head)\n",
                (long long)absorbed, (long long)naive_shared, double(naive_shared) / absorbed, (long long)naive_full, double(naive_full) / absorbed);
    return failures ? 1 : 0;
}
