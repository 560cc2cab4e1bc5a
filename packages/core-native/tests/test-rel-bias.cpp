// T5's relative position bias in the attention op (its `rel_b` weight, [n_head, n_buckets], and
// `rel_bidir`) against a double reference written from Hugging Face's T5Attention: query head h
// adds rel_b[h, bucket(pos_k - pos_q)] to its raw scores (llama.cpp's kq_b, added before
// ggml_soft_max_ext's scale: here scale 1/sqrt(D), so the reference adds bias / sqrt(D)), the
// bucket exact below max_exact = buckets / 2 (per direction), then logarithmic up to distance 128
// and clamped; bidirectional (the encoder) gives later keys the upper half of the buckets, causal
// (the decoder) buckets only the distance back. Cases: non-causal over 160 positions (distances
// past 128: the clamped buckets), causal split in two passes (the cached keys keep their
// buckets), two sequences in one non-causal batch (each its own positions), an F16 table (as an
// F16 conversion stores it), and refusals of a malformed table.
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
#include "cpu/fp16.h"
#include "op_test_util.h"

using namespace kail;

struct shape {
    int64_t H, Hkv, D, buckets;
    bool causal;
    int64_t in() const { return H * D + 2 * Hkv * D; }
};

// Hugging Face's _relative_position_bucket in double (max_distance 128).
static int64_t bucket_ref(int64_t rel, int64_t nb, bool bidir) {
    int64_t b = 0;
    if (bidir) {
        nb /= 2;
        if (rel > 0) b += nb;
        rel = std::llabs(rel);
    } else {
        rel = rel < 0 ? -rel : 0;
    }
    const int64_t me = nb / 2;
    if (rel < me) return b + rel;
    const int64_t large = static_cast<int64_t>(std::floor(double(me) + std::log(double(rel) / double(me)) / std::log(128.0 / double(me)) * double(nb - me)));
    return b + std::min<int64_t>(large, nb - 1);
}

static program make_program(const shape & s) {
    std::map<std::string, double> extra;
    if (!s.causal) extra = {{"causal", 0}};
    else extra = {{"rel_bidir", 0}};
    program p = qkv_attention_program(s.H, s.Hkv, s.D, extra);
    for (auto & op : p.ops)
        if (op.type == OP_ATTENTION) op.weights["rel_b"] = "rel";
    return p;
}

static std::vector<double> reference(const shape & s, const std::vector<float> & rel, const std::vector<const float *> & rows, int64_t from, int64_t to) {
    const int64_t n = static_cast<int64_t>(rows.size());
    return attention_reference(
        s.H, s.Hkv, s.D, rows, from, to, [&](int64_t t, int64_t j) { return s.causal ? j <= t : j < n; },
        [&](int64_t qh, int64_t t, int64_t j) { return double(rel[static_cast<size_t>(bucket_ref(j - t, s.buckets, !s.causal) * s.H + qh)]) / std::sqrt(double(s.D)); });
}

static model_params params(int n_seq = 1) { return attention_test_params(256, n_seq); }

// A GGUF image of the 2-logit head (F32) and the bias table, F32 or F16.
static std::vector<uint8_t> image_of(const shape & s, const std::vector<float> & head, const std::vector<float> & rel, bool f16) {
    if (!f16) return gguf_image({{"head", {s.H * s.D, 2}, head}, {"rel", {s.H, s.buckets}, rel}});
    // (gguf_image writes F32 only: the same layout, the table's type F16 and its data halves.)
    std::vector<uint8_t> out;
    auto raw = [&](const void * p, size_t n) { out.insert(out.end(), static_cast<const uint8_t *>(p), static_cast<const uint8_t *>(p) + n); };
    auto u32 = [&](uint32_t v) { raw(&v, 4); };
    auto u64 = [&](uint64_t v) { raw(&v, 8); };
    auto pad = [&]() { while (out.size() % 32) out.push_back(0); };
    raw("GGUF", 4);
    u32(3);
    u64(2);
    u64(0);
    const std::string names[2] = {"head", "rel"};
    const std::vector<int64_t> dims[2] = {{s.H * s.D, 2}, {s.H, s.buckets}};
    const uint64_t head_bytes = (head.size() * 4 + 31) / 32 * 32;
    for (int i = 0; i < 2; i++) {
        u64(names[i].size());
        raw(names[i].data(), names[i].size());
        u32(2);
        for (int64_t d : dims[i]) u64(static_cast<uint64_t>(d));
        u32(i == 0 ? KAIL_TYPE_F32 : KAIL_TYPE_F16);
        u64(i == 0 ? 0 : head_bytes);
    }
    pad();
    raw(head.data(), head.size() * 4);
    pad();
    for (float v : rel) {
        const uint16_t h = cpu::fp32_to_fp16_sw(v);
        raw(&h, 2);
    }
    pad();
    return out;
}

static void run_case(const shape & s, int64_t n, int64_t split, bool f16 = false) {
    std::mt19937 rng(7);
    const std::vector<float> in = randn(rng, static_cast<size_t>(n * s.in()));
    const std::vector<float> head = randn(rng, static_cast<size_t>(s.H * s.D * 2));
    std::vector<float> rel = randn(rng, static_cast<size_t>(s.H * s.buckets), 2.0f);
    if (f16)
        for (float & v : rel) v = cpu::fp16_to_fp32_sw(cpu::fp32_to_fp16_sw(v));
    const std::vector<uint8_t> image = image_of(s, head, rel, f16);
    std::shared_ptr<gguf_file> file = gguf_file::from_buffer(image.data(), image.size());
    std::vector<const float *> rows;
    for (int64_t t = 0; t < n; t++) rows.push_back(in.data() + t * s.in());
    const std::vector<double> want = reference(s, rel, rows, 0, n);
    const std::vector<double> no_bias = reference(s, std::vector<float>(rel.size(), 0.0f), rows, 0, n);
    std::vector<float> got;
    {
        model m(file, make_program(s), params());
        if (split > 0 && split < n) {
            got = run_hidden(m, nullptr, split, 0, 0, in.data(), s.in());
            const std::vector<float> tail = run_hidden(m, nullptr, n - split, static_cast<int32_t>(split), 0, in.data() + split * s.in(), s.in());
            got.insert(got.end(), tail.begin(), tail.end());
        } else {
            got = run_hidden(m, nullptr, n, 0, 0, in.data(), s.in());
        }
    }
    const double e = nmse(got, want), moved = nmse(got, no_bias);
    std::printf("rel_b H %lld/%lld D %lld buckets %lld %s%s, %lld tokens (split at %lld): NMSE %.3e; the bias's effect %.3e\n", (long long)s.H, (long long)s.Hkv, (long long)s.D,
                (long long)s.buckets, s.causal ? "causal" : "bidirectional", f16 ? " f16" : "", (long long)n, (long long)split, e, moved);
    CHECK(e < 1e-12);
    CHECK(moved > 1e-3);
}

// Two sequences of one non-causal batch, interleaved: each sequence's buckets from its own positions.
static void run_two_sequences(const shape & s) {
    const int64_t n0 = 40, n1 = 23;
    std::mt19937 rng(17);
    const std::vector<float> in0 = randn(rng, static_cast<size_t>(n0 * s.in())), in1 = randn(rng, static_cast<size_t>(n1 * s.in()));
    const std::vector<float> head = randn(rng, static_cast<size_t>(s.H * s.D * 2));
    const std::vector<float> rel = randn(rng, static_cast<size_t>(s.H * s.buckets), 2.0f);
    const std::vector<uint8_t> image = image_of(s, head, rel, false);
    std::shared_ptr<gguf_file> file = gguf_file::from_buffer(image.data(), image.size());
    model m(file, make_program(s), params(2));
    std::vector<int32_t> pos, seq;
    const std::vector<float> hidden = interleaved_forward(m, {in0.data(), 0, n0}, {in1.data(), 0, n1}, s.in(), seq, pos);
    std::vector<const float *> r0, r1;
    for (int64_t t = 0; t < n0; t++) r0.push_back(in0.data() + t * s.in());
    for (int64_t t = 0; t < n1; t++) r1.push_back(in1.data() + t * s.in());
    const std::vector<double> w0 = reference(s, rel, r0, 0, n0), w1 = reference(s, rel, r1, 0, n1);
    const double e = nmse(hidden, interleaved_reference(w0, w1, seq, pos, s.H * s.D));
    std::printf("rel_b two sequences in one bidirectional batch: NMSE %.3e\n", e);
    CHECK(e < 1e-12);
}

// A table of the wrong head count, too few buckets or a quantized type is refused at load.
static void run_refusals() {
    const shape s{4, 2, 8, 32, false};
    const std::vector<float> head(static_cast<size_t>(s.H * s.D * 2), 0.5f);
    auto load = [&](std::vector<int64_t> ne) {
        int64_t n = 1;
        for (int64_t d : ne) n *= d;
        std::vector<float> rel(static_cast<size_t>(n), 0.1f);
        const std::vector<uint8_t> image = gguf_image({{"head", {s.H * s.D, 2}, head}, {"rel", ne, rel}});
        std::shared_ptr<gguf_file> file = gguf_file::from_buffer(image.data(), image.size());
        model m(file, make_program(s), params());
    };
    expect_error("rel_b of 3 heads", KAIL_E_BAD_MODEL, [&] { load({3, 32}); }, "relative position bias 'rel'");
    expect_error("rel_b of 2 buckets", KAIL_E_BAD_MODEL, [&] { load({4, 2}); }, "at least 4 buckets");
    expect_error("rel_b of one dimension", KAIL_E_BAD_MODEL, [&] { load({128}); }, "must be F32 or F16");
}

int main() {
    // The encoder: 32 buckets both ways (T5's), 160 positions; GQA groups of 2.
    run_case({4, 2, 8, 32, false}, 160, 0);
    // The decoder: causal, 32 buckets back, over two passes.
    run_case({6, 3, 8, 32, true}, 150, 61);
    // Fewer buckets (8 both ways: max_exact 2), one pass.
    run_case({4, 4, 16, 8, false}, 40, 0);
    // An F16 table.
    run_case({4, 2, 8, 32, false}, 50, 0, true);
    run_two_sequences({4, 2, 8, 32, false});
    run_refusals();
    return test_status();
}
