// Granite Switch's ops against a double reference: `switch_route` (per token the row to embed, an
// activation token's substitute, and the router's one-head q/k/v lanes), `embed` by the row ids it
// gives (index 3), the router's attention over its own KV layer, and `switch_lora` (W x + B_s A_s x,
// s the router's output clamped to the tensors' slots and rounded), over two forward calls of one
// sequence (the second call's router reads the first's cached rows). The tensors hold 3 slots while
// the program names 4 adapters, so a router output past 2 clamps to 2 (unclamped, 2.67 would round
// to a slot the tensors lack); slot 0 is not zero here, so it is computed like any other. Malformed programs are refused with the op and the numbers.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "kail/gguf.h"
#include "kail/model.h"
#include "kail/status.h"
#include "kail/types.h"
#include "op_test_util.h"

using namespace kail;

static const int64_t V = 16, E = 8, HD = 4, N_IN = 12, R = 3, N_OUT = 10, S = 3;
static const float GAIN = 15.0f;
static const std::vector<int64_t> ACT = {7, 9, 11, 13}, SUB = {2, 3, 4, 5};
// hidden = embedding (E) | y (N_OUT) | router output's first value (1)
static const int64_t H_W = E + N_OUT + 1;

static program make_program(const std::vector<int64_t> & ids = {}, double head_dim = HD, const char * lora_b = "lora_b") {
    program p;
    const int in = add_buf(p, "in", N_IN), route = add_buf(p, "route", 1 + 3 * HD), x = add_buf(p, "x", E), slot = add_buf(p, "slot", HD);
    const int y = add_buf(p, "y", N_OUT), core = add_buf(p, "core", H_W), o = add_buf(p, "o", H_W, true), logits = add_buf(p, "logits", 2, true);
    add_op(p, OP_INPUT, in, -1);
    std::vector<int64_t> all = ACT;
    all.insert(all.end(), SUB.begin(), SUB.end());
    add_op(p, OP_SWITCH_ROUTE, route, -1, {{"head_dim", head_dim}, {"gain", GAIN}}).ids = ids.empty() ? all : ids;
    op_desc & em = add_op(p, OP_EMBED, x, -1, {{"index", 3}, {"b_off", 0}});
    em.b = route;
    em.weights = {{"weight", "emb"}};
    op_desc & at = add_op(p, OP_ATTENTION, slot, route, {{"layer", 0}, {"n_head", 1}, {"n_head_kv", 1}, {"head_dim", HD}, {"scale", 1}, {"a_off", 1}, {"b_off", 1 + HD}, {"c_off", 1 + 2 * HD}});
    at.b = route;
    at.c = route;
    add_op(p, OP_MATMUL, y, in).weights = {{"weight", "w"}};
    op_desc & sl = add_op(p, OP_SWITCH_LORA, y, in);
    sl.b = slot;
    sl.weights = {{"lora_a", "lora_a"}, {"lora_b", lora_b}};
    add_op(p, OP_COPY, core, x, {{"n", E}});
    add_op(p, OP_COPY, core, y, {{"out_off", E}, {"n", N_OUT}});
    add_op(p, OP_COPY, core, slot, {{"out_off", E + N_OUT}, {"n", 1}});
    end_with_head(p, core, o, logits);
    p.n_kv_layers = 1;
    p.kv_k_width = {HD};
    p.kv_v_width = {HD};
    return p;
}

static std::unique_ptr<model> load(const std::vector<uint8_t> & image, const program & p) {
    return load_test_model(image, p, 32, [](model_params & mp) {
        mp.kv_type = KAIL_TYPE_F32;
        mp.kv_type_v = KAIL_TYPE_F32;
    });
}

int main() {
    std::mt19937 rng(11);
    const std::vector<float> emb = randn(rng, static_cast<size_t>(E * V)), w = randn(rng, static_cast<size_t>(N_IN * N_OUT), 0.3f);
    const std::vector<float> la = randn(rng, static_cast<size_t>(N_IN * R * S), 0.3f), lb = randn(rng, static_cast<size_t>(R * N_OUT * S), 0.5f);
    const std::vector<uint8_t> image = gguf_image({{"emb", {E, V}, emb}, {"w", {N_IN, N_OUT}, w}, {"lora_a", {N_IN, R, S}, la}, {"lora_b", {R, N_OUT, S}, lb},
                                                   {"lora_b_wide", {R, N_OUT + 1, S}, randn(rng, static_cast<size_t>(R * (N_OUT + 1) * S))},
                                                   {"head", {H_W, 2}, randn(rng, static_cast<size_t>(H_W * 2))}});
    // Slots 0 (no activation token yet), 1 (adapter 1's 7), 2 (7 and 11: adapters 1 and 3 average
    // to 2), 2 (then 13: 2.67 clamped to the tensors' 2), 2 (then 9: 2.5); two calls, split at token 6.
    const std::vector<int32_t> toks = {1, 5, 7, 5, 6, 0, 11, 3, 13, 9, 15};
    const int64_t n = static_cast<int64_t>(toks.size()), split = 6;
    const std::vector<float> in = randn(rng, static_cast<size_t>(n * N_IN));
    auto m = load(image, make_program());
    std::vector<float> got = run_hidden(*m, toks.data(), split, 0, 0, in.data(), N_IN);
    const std::vector<float> rest = run_hidden(*m, toks.data() + split, n - split, static_cast<int32_t>(split), 0, in.data() + split * N_IN, N_IN);
    got.insert(got.end(), rest.begin(), rest.end());
    CHECK(got.size() == static_cast<size_t>(n * H_W));
    std::vector<double> want(static_cast<size_t>(n * H_W));
    std::vector<int64_t> slots;
    for (int64_t t = 0; t < n; t++) {
        double * wr = want.data() + t * H_W;
        const auto act = [&](int32_t tok) { return std::find(ACT.begin(), ACT.end(), tok) - ACT.begin(); };
        const int64_t a = act(toks[t]);
        const int64_t row = a < static_cast<int64_t>(ACT.size()) ? SUB[a] : toks[t];
        for (int64_t i = 0; i < E; i++) wr[i] = emb[row * E + i];
        // The router: softmax over positions <= t of q.k = +-gain, values the slots.
        double num = 0, den = 0;
        for (int64_t j = 0; j <= t; j++) {
            const int64_t aj = act(toks[j]);
            const bool on = aj < static_cast<int64_t>(ACT.size());
            const double e = std::exp((on ? GAIN : -GAIN) - GAIN);
            num += e * (on ? static_cast<double>(aj + 1) : 0.0);
            den += e;
        }
        const double r = num / den;
        wr[E + N_OUT] = r;
        const int64_t s = static_cast<int64_t>(std::round(std::min(std::max(r, 0.0), double(S - 1))));
        slots.push_back(s);
        const float * x = in.data() + t * N_IN;
        std::vector<double> ax(R);
        for (int64_t k = 0; k < R; k++)
            for (int64_t i = 0; i < N_IN; i++) ax[k] += static_cast<double>(la[static_cast<size_t>((s * R + k) * N_IN + i)]) * x[i];
        for (int64_t o = 0; o < N_OUT; o++) {
            double v = 0;
            for (int64_t i = 0; i < N_IN; i++) v += static_cast<double>(w[static_cast<size_t>(o * N_IN + i)]) * x[i];
            for (int64_t k = 0; k < R; k++) v += static_cast<double>(lb[static_cast<size_t>((s * N_OUT + o) * R + k)]) * ax[k];
            wr[E + o] = v;
        }
    }
    CHECK((slots == std::vector<int64_t>{0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 2}));
    const double e = nmse(got, want);
    std::printf("switch_route / embed by id / router / switch_lora vs double: NMSE %.3g\n", e);
    CHECK(e <= 1e-12);
    // Malformed programs.
    expect_error("an odd id list", KAIL_E_INVALID_ARG, [&] { load(image, make_program({7, 9, 2})); }, "(switch_route): ids must hold the activation tokens, then as many substitutes");
    expect_error("a negative substitute", KAIL_E_BAD_MODEL, [&] { load(image, make_program({7, -4})); }, "substitute token id -4 is negative or too large");
    expect_error("lanes past the buffer", KAIL_E_BAD_MODEL, [&] { load(image, make_program({}, HD + 1)); }, "(switch_route): 16 values at offset 0 do not fit buffer 'route'");
    expect_error("adapters wider than the output", KAIL_E_BAD_MODEL, [&] { load(image, make_program({}, HD, "lora_b_wide")); }, "do not fit 12 inputs and 10 outputs");
    expect_error("a 2-D adapter", KAIL_E_BAD_MODEL, [&] { load(image, make_program({}, HD, "w")); }, "must be [n_in, rank, n_slots] and [rank, n_out, n_slots]");
    // A substitute outside the embedding's rows: refused at the forward call.
    {
        auto bad = load(image, make_program({7, 9, 11, 2, 3, 16}));
        const int32_t t11[1] = {11};
        expect_error("a substitute past the vocabulary", KAIL_E_INVALID_ARG, [&] { run_hidden(*bad, t11, 1, 0, 0, in.data(), N_IN); }, "token id 16 outside the vocabulary (0..15)");
    }
    return test_status("test-switch-lora");
}
