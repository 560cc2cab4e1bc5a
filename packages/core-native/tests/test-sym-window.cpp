// The attention op's symmetric window (its `sym_window` parameter, non-causal only: ModernBERT's
// local blocks, EmbeddingGemma's sliding blocks) against a double reference written from
// llama.cpp's LLAMA_SWA_TYPE_SYMMETRIC mask: query position p sees key position j of its
// sequence when |p - j| <= n_swa / 2 (integer division). Cases: even and odd windows, GQA, a
// window wider than the pass (every position), ALiBi inside the window, two sequences in one
// batch, and the program checks (a causal op or a negative window refused).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "kail/gguf.h"
#include "kail/model.h"
#include "kail/status.h"
#include "kail/types.h"
#include "op_test_util.h"

using namespace kail;

struct shape {
    int64_t H, Hkv, D, sym;
    double alibi = 0;
    int64_t in() const { return H * D + 2 * Hkv * D; }
};

static program make_program(const shape & s, bool causal = false) {
    std::map<std::string, double> extra = {{"sym_window", static_cast<double>(s.sym)}};
    if (!causal) extra["causal"] = 0;
    if (s.alibi > 0) extra["alibi"] = s.alibi;
    return qkv_attention_program(s.H, s.Hkv, s.D, extra);
}

// Every query of one sequence of rows (position i = rows[i]); `half` < 0: no window.
static std::vector<double> reference(const shape & s, const std::vector<const float *> & rows, int64_t half) {
    return attention_reference(
        s.H, s.Hkv, s.D, rows, 0, static_cast<int64_t>(rows.size()), [&](int64_t t, int64_t j) { return half < 0 || std::llabs(t - j) <= half; },
        [&](int64_t qh, int64_t t, int64_t j) { return s.alibi > 0 ? -alibi_slope(s.alibi, s.H, qh) * double(std::llabs(j - t)) : 0.0; });
}

static model_params params(int n_seq = 1) { return attention_test_params(64, n_seq); }

static std::shared_ptr<gguf_file> head_file(std::mt19937 & rng, const shape & s, std::vector<uint8_t> & image) {
    const std::vector<float> head = randn(rng, static_cast<size_t>(s.H * s.D * 2));
    image = gguf_image({{"head", {s.H * s.D, 2}, head}});
    return gguf_file::from_buffer(image.data(), image.size());
}

static void run_case(const shape & s, int64_t n) {
    std::mt19937 rng(13);
    const std::vector<float> in = randn(rng, static_cast<size_t>(n * s.in()));
    std::vector<uint8_t> image;
    std::shared_ptr<gguf_file> file = head_file(rng, s, image);
    std::vector<const float *> rows;
    for (int64_t t = 0; t < n; t++) rows.push_back(in.data() + t * s.in());
    model m(file, make_program(s), params());
    const std::vector<float> got = run_hidden(m, nullptr, n, 0, 0, in.data(), s.in());
    const double e = nmse(got, reference(s, rows, s.sym / 2));
    const double moved = nmse(got, reference(s, rows, -1));
    std::printf("sym_window %lld H %lld/%lld D %lld alibi %g, %lld tokens: NMSE %.3e; the window's effect %.3e\n", (long long)s.sym, (long long)s.H, (long long)s.Hkv, (long long)s.D, s.alibi,
                (long long)n, e, moved);
    CHECK(e < 1e-12);
    // (A window wider than the pass changes nothing.)
    if (s.sym / 2 >= n - 1) CHECK(moved < 1e-12);
    else CHECK(moved > 1e-4);
}

// Two sequences interleaved in one batch: each token's window is in its own sequence's positions.
static void run_two_sequences(const shape & s) {
    const int64_t n0 = 13, n1 = 9;
    std::mt19937 rng(23);
    const std::vector<float> in0 = randn(rng, static_cast<size_t>(n0 * s.in())), in1 = randn(rng, static_cast<size_t>(n1 * s.in()));
    std::vector<uint8_t> image;
    std::shared_ptr<gguf_file> file = head_file(rng, s, image);
    model m(file, make_program(s), params(2));
    std::vector<int32_t> pos, seq;
    const std::vector<float> hidden = interleaved_forward(m, {in0.data(), 0, n0}, {in1.data(), 0, n1}, s.in(), seq, pos);
    std::vector<const float *> r0, r1;
    for (int64_t t = 0; t < n0; t++) r0.push_back(in0.data() + t * s.in());
    for (int64_t t = 0; t < n1; t++) r1.push_back(in1.data() + t * s.in());
    const std::vector<double> w0 = reference(s, r0, s.sym / 2), w1 = reference(s, r1, s.sym / 2);
    const double e = nmse(hidden, interleaved_reference(w0, w1, seq, pos, s.H * s.D));
    std::printf("sym_window %lld, two sequences in one batch: NMSE %.3e\n", (long long)s.sym, e);
    CHECK(e < 1e-12);
}

static void run_refusals() {
    const shape s{4, 2, 8, 6};
    std::mt19937 rng(3);
    std::vector<uint8_t> image;
    std::shared_ptr<gguf_file> file = head_file(rng, s, image);
    auto refused = [&](const program & p, error_code code, const char * what) {
        try {
            model m(file, p, params());
        } catch (const error & e) {
            return e.code() == code && std::strstr(e.what(), what) != nullptr;
        }
        return false;
    };
    CHECK(refused(make_program(s, true), KAIL_E_INVALID_ARG, "a symmetric window takes non-causal attention"));
    CHECK(refused(make_program({4, 2, 8, -2}), KAIL_E_BAD_MODEL, "symmetric window -2 is negative"));
}

int main() {
    // ModernBERT-like: even window 8 (4 either side), MHA.
    run_case({4, 4, 16, 8}, 30);
    // An odd window (7: 3 either side), GQA groups of 3.
    run_case({6, 2, 16, 7}, 25);
    // A window of 1 (each token alone) and one wider than the pass.
    run_case({2, 1, 8, 1}, 10);
    run_case({4, 2, 8, 64}, 12);
    // ALiBi inside a window (distances both ways).
    run_case({6, 3, 8, 10, 8.0}, 24);
    run_two_sequences({4, 2, 16, 6});
    run_refusals();
    return test_status();
}
