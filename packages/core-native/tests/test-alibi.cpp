// ALiBi in the attention op (its `alibi` parameter: BLOOM, MPT, Refact, Baichuan 13B) against a
// double reference written from llama.cpp: the KQ mask holds -|pos_k - pos_q| for the kept
// positions and ggml's soft_max_ext adds slope_h x mask after the scale, slope_h = 2^(-8 (h + 1) / n2)
// for heads h < n2 (n2: the largest power of two <= n_head) and 2^(-8 (2 (h - n2) + 1) / (2 n2))
// beyond (max_bias 8; other values likewise). Cases: a power-of-two head count and two that are
// not (GQA groups of 2 and 3), a sliding window, non-causal attention, a pass split in two (KV
// reuse), two sequences interleaved in one batch, a context shift (positions after the dropped
// ones move down and keep their relative distances), and a Q8_0 cache (within its rounding).
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
    int64_t H, Hkv, D;
    double max_bias;
    int64_t window = 0;
    bool causal = true;
    int64_t in() const { return H * D + 2 * Hkv * D; }
};

static program make_program(const shape & s, double max_bias) {
    std::map<std::string, double> extra = {{"alibi", max_bias}};
    if (s.window) extra["window"] = static_cast<double>(s.window);
    if (!s.causal) extra["causal"] = 0;
    return qkv_attention_program(s.H, s.Hkv, s.D, extra);
}

// The outputs of the queries of rows[from, to): rows[i] is the input row at position i of one
// sequence (causal: positions <= i within the window; else all of them), each score less the
// head's slope (alibi_slope) times the distance.
static std::vector<double> reference(const shape & s, const std::vector<const float *> & rows, int64_t from, int64_t to) {
    const int64_t n = static_cast<int64_t>(rows.size());
    return attention_reference(
        s.H, s.Hkv, s.D, rows, from, to, [&](int64_t t, int64_t j) { return j <= (s.causal ? t : n - 1) && (!s.window || j >= t + 1 - s.window); },
        [&](int64_t qh, int64_t t, int64_t j) { return -alibi_slope(s.max_bias, s.H, qh) * double(std::llabs(j - t)); });
}

static model_params params(uint32_t kv_type, int n_seq = 1) { return attention_test_params(128, n_seq, kv_type); }

static void run_case(const shape & s, int64_t n, int64_t split, uint32_t kv_type = KAIL_TYPE_F32) {
    std::mt19937 rng(11);
    const std::vector<float> in = randn(rng, static_cast<size_t>(n * s.in()));
    const std::vector<float> head = randn(rng, static_cast<size_t>(s.H * s.D * 2));
    const std::vector<uint8_t> image = gguf_image({{"head", {s.H * s.D, 2}, head}});
    std::shared_ptr<gguf_file> file = gguf_file::from_buffer(image.data(), image.size());
    std::vector<const float *> rows;
    for (int64_t t = 0; t < n; t++) rows.push_back(in.data() + t * s.in());
    const std::vector<double> want = reference(s, rows, 0, n);
    shape plain = s;
    plain.max_bias = 0;
    const std::vector<double> no_alibi = reference(plain, rows, 0, n);
    std::vector<float> got, parts;
    {
        model m(file, make_program(s, s.max_bias), params(kv_type));
        got = run_hidden(m, nullptr, n, 0, 0, in.data(), s.in());
    }
    const double e = nmse(got, want);
    const double moved = nmse(got, no_alibi);
    double e_parts = 0;
    if (s.causal) {
        model m(file, make_program(s, s.max_bias), params(kv_type));
        parts = run_hidden(m, nullptr, split, 0, 0, in.data(), s.in());
        const std::vector<float> tail = run_hidden(m, nullptr, n - split, static_cast<int32_t>(split), 0, in.data() + split * s.in(), s.in());
        parts.insert(parts.end(), tail.begin(), tail.end());
        e_parts = nmse(parts, want);
    }
    std::printf("alibi H %lld/%lld D %lld max_bias %g window %lld %s %s, %lld tokens: NMSE %.3e (split at %lld: %.3e); ALiBi's effect %.3e\n", (long long)s.H, (long long)s.Hkv,
                (long long)s.D, s.max_bias, (long long)s.window, s.causal ? "causal" : "non-causal", kv_type == KAIL_TYPE_F32 ? "f32" : "q8_0", (long long)n, e, (long long)split, e_parts, moved);
    const double tol = kv_type == KAIL_TYPE_F32 ? 1e-12 : 2e-4;
    CHECK(e < tol);
    CHECK(e_parts < tol);
    CHECK(moved > 1e-3);
}

// Two sequences interleaved in one batch (seq 1 starting at position 5), then one more token
// each in a second pass: each sequence's ALiBi distances are its own.
static void run_two_sequences(const shape & s) {
    const int64_t n0 = 12, n1 = 9;
    std::mt19937 rng(21);
    const std::vector<float> in0 = randn(rng, static_cast<size_t>((n0 + 1) * s.in())), in1 = randn(rng, static_cast<size_t>((n1 + 1 + 5) * s.in()));
    const std::vector<float> head = randn(rng, static_cast<size_t>(s.H * s.D * 2));
    const std::vector<uint8_t> image = gguf_image({{"head", {s.H * s.D, 2}, head}});
    std::shared_ptr<gguf_file> file = gguf_file::from_buffer(image.data(), image.size());
    model m(file, make_program(s, s.max_bias), params(KAIL_TYPE_F32, 2));
    // seq 1's first 5 positions, alone
    (void)run_hidden(m, nullptr, 5, 0, 1, in1.data(), s.in());
    std::vector<int32_t> pos, seq;
    const std::vector<float> hidden = interleaved_forward(m, {in0.data(), 0, n0}, {in1.data() + 5 * s.in(), 5, n1}, s.in(), seq, pos);
    const std::vector<float> last0 = run_hidden(m, nullptr, 1, static_cast<int32_t>(n0), 0, in0.data() + n0 * s.in(), s.in());
    const std::vector<float> last1 = run_hidden(m, nullptr, 1, static_cast<int32_t>(5 + n1), 1, in1.data() + (5 + n1) * s.in(), s.in());
    std::vector<const float *> r0, r1;
    for (int64_t t = 0; t <= n0; t++) r0.push_back(in0.data() + t * s.in());
    for (int64_t t = 0; t <= 5 + n1; t++) r1.push_back(in1.data() + t * s.in());
    const std::vector<double> w0 = reference(s, r0, 0, n0 + 1), w1 = reference(s, r1, 0, 5 + n1 + 1);
    const int64_t W = s.H * s.D;
    std::vector<float> got;
    std::vector<double> want;
    for (size_t i = 0; i < pos.size(); i++) {
        got.insert(got.end(), hidden.begin() + static_cast<int64_t>(i) * W, hidden.begin() + static_cast<int64_t>(i + 1) * W);
        const std::vector<double> & w = seq[i] ? w1 : w0;
        want.insert(want.end(), w.begin() + pos[i] * W, w.begin() + (pos[i] + 1) * W);
    }
    got.insert(got.end(), last0.begin(), last0.end());
    want.insert(want.end(), w0.begin() + n0 * W, w0.end());
    got.insert(got.end(), last1.begin(), last1.end());
    want.insert(want.end(), w1.begin() + (5 + n1) * W, w1.end());
    const double e = nmse(got, want);
    std::printf("alibi two sequences in one batch (H %lld/%lld): NMSE %.3e\n", (long long)s.H, (long long)s.Hkv, e);
    CHECK(e < 1e-12);
}

// A context shift: 30 positions, drop [4, 14), then 6 more tokens; the kept rows are at their new
// positions (ALiBi has no rotation to turn: the distances are the rows').
static void run_shift(const shape & s) {
    const int64_t n = 30, keep = 4, drop = 10, more = 6;
    std::mt19937 rng(31);
    const std::vector<float> in = randn(rng, static_cast<size_t>((n + more) * s.in()));
    const std::vector<float> head = randn(rng, static_cast<size_t>(s.H * s.D * 2));
    const std::vector<uint8_t> image = gguf_image({{"head", {s.H * s.D, 2}, head}});
    std::shared_ptr<gguf_file> file = gguf_file::from_buffer(image.data(), image.size());
    model m(file, make_program(s, s.max_bias), params(KAIL_TYPE_F32));
    (void)run_hidden(m, nullptr, n, 0, 0, in.data(), s.in());
    CHECK(m.seq_shift(0, keep, drop) == n - drop);
    const std::vector<float> got = run_hidden(m, nullptr, more, static_cast<int32_t>(n - drop), 0, in.data() + n * s.in(), s.in());
    std::vector<const float *> rows;
    for (int64_t t = 0; t < n + more; t++)
        if (t < keep || t >= keep + drop) rows.push_back(in.data() + t * s.in());
    const std::vector<double> want = reference(s, rows, n - drop, n - drop + more);
    const double e = nmse(got, want);
    std::printf("alibi after a context shift (H %lld/%lld): NMSE %.3e\n", (long long)s.H, (long long)s.Hkv, e);
    CHECK(e < 1e-12);
}

// The program checks: a negative or non-finite maximum bias is refused.
static void run_refusals() {
    const shape s{4, 2, 8, 8.0};
    const std::vector<float> head(static_cast<size_t>(s.H * s.D * 2), 0.5f);
    const std::vector<uint8_t> image = gguf_image({{"head", {s.H * s.D, 2}, head}});
    std::shared_ptr<gguf_file> file = gguf_file::from_buffer(image.data(), image.size());
    for (double bad : {-1.0, static_cast<double>(NAN), static_cast<double>(INFINITY)}) {
        bool refused = false;
        try {
            model m(file, make_program(s, bad), params(KAIL_TYPE_F32));
        } catch (const error & e) {
            refused = e.code() == KAIL_E_BAD_MODEL && std::strstr(e.what(), "ALiBi") != nullptr;
        }
        CHECK(refused);
    }
}

int main() {
    // Eight heads (a power of two), max_bias 8 (BLOOM's); split at 17.
    run_case({8, 8, 16, 8.0}, 40, 17);
    // Six heads (n2 = 4: heads 4 and 5 take the odd powers of m1), GQA groups of 3.
    run_case({6, 2, 16, 8.0}, 40, 1);
    // Twelve heads (n2 = 8), groups of 2, another maximum bias and a sliding window of 8.
    run_case({12, 6, 8, 4.0, 8}, 33, 20);
    // Non-causal (every position of the pass; queries see later ones, distances both ways).
    run_case({5, 5, 8, 8.0, 0, false}, 20, 20);
    // A Q8_0 cache: within its rounding.
    run_case({6, 3, 32, 8.0}, 36, 11, KAIL_TYPE_Q8_0);
    run_two_sequences({6, 2, 16, 8.0});
    run_shift({6, 3, 16, 8.0});
    run_refusals();
    return test_status();
}
