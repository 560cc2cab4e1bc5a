// copy with blocks (a strided copy: block j's n values from a_off + j a_stride to out_off + j
// out_stride; PLaMo 2 splits its per-head z|x rows with two of them) against a reference that
// indexes every value itself: PLaMo 2's split (8 heads of 6, z at 0 and x at 6 of each 12), a
// gather of every third value with a non-zero out offset and gaps left as they were, and a
// broadcast (a_stride 0), over several input rows; one block equals the plain copy. Malformed
// programs are refused with the op and the numbers.
#include <cstdio>
#include <map>
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

static const int64_t HEADS = 8, HD = 6, IN_W = 2 * HEADS * HD;
// out = z (HEADS HD) | x (HEADS HD) | gather (1 + 3 (16 - 1) + 1: 16 values 3 apart from 1) | broadcast (4 x 5) | one block (7)
static const int64_t O_Z = 0, O_X = HEADS * HD, O_G = 2 * HEADS * HD, G_N = 16, G_W = 1 + 3 * (G_N - 1) + 1, O_B = O_G + G_W, O_1 = O_B + 20, OUT_W = O_1 + 7;

using params = std::map<std::string, double>;

static program make_program(const params & tamper = {}, op_type tamper_type = OP_COPY, bool in_place = false) {
    program p;
    const int in = add_buf(p, "in", IN_W), core = add_buf(p, "core", OUT_W);
    const int o = add_buf(p, "o", OUT_W, true), logits = add_buf(p, "logits", 2, true);
    add_op(p, OP_INPUT, in, -1);
    // (core zeroed first: the gather's gaps stay 0.)
    add_op(p, OP_SCALE, core, core, {{"scale", 0.0}});
    add_op(p, OP_COPY, core, in, {{"a_off", 0}, {"out_off", O_Z}, {"n", HD}, {"blocks", HEADS}, {"a_stride", 2 * HD}, {"out_stride", HD}});
    add_op(p, OP_COPY, core, in, {{"a_off", HD}, {"out_off", O_X}, {"n", HD}, {"blocks", HEADS}, {"a_stride", 2 * HD}, {"out_stride", HD}});
    add_op(p, OP_COPY, core, in, {{"a_off", 5}, {"out_off", O_G + 1}, {"n", 1}, {"blocks", G_N}, {"a_stride", 3}, {"out_stride", 3}});
    add_op(p, OP_COPY, core, in, {{"a_off", 7}, {"out_off", O_B}, {"n", 5}, {"blocks", 4}, {"a_stride", 0}, {"out_stride", 5}});
    add_op(p, OP_COPY, core, in, {{"a_off", 9}, {"out_off", O_1}, {"n", 7}, {"blocks", 1}, {"a_stride", 1000}, {"out_stride", 7}});
    if (!tamper.empty()) {
        op_desc & d = add_op(p, tamper_type, in_place ? in : core, in, tamper);
        if (tamper_type == OP_ADD) d.b = in;
    }
    end_with_head(p, core, o, logits);
    return p;
}

static std::unique_ptr<model> load(const std::vector<uint8_t> & image, const program & p) {
    return load_test_model(image, p, 16);
}

int main() {
    std::mt19937 rng(7);
    const std::vector<uint8_t> image = gguf_image({{"head", {OUT_W, 2}, randn(rng, static_cast<size_t>(OUT_W * 2))}});
    const int64_t n = 5;
    const std::vector<float> in = randn(rng, static_cast<size_t>(n * IN_W));
    auto m = load(image, make_program());
    const std::vector<float> got = run_hidden(*m, nullptr, n, 0, 0, in.data(), IN_W);
    CHECK(got.size() == static_cast<size_t>(n * OUT_W));
    std::vector<double> want(static_cast<size_t>(n * OUT_W), 0.0);
    for (int64_t t = 0; t < n; t++) {
        const float * r = in.data() + t * IN_W;
        double * w = want.data() + t * OUT_W;
        for (int64_t h = 0; h < HEADS; h++)
            for (int64_t i = 0; i < HD; i++) {
                w[O_Z + h * HD + i] = r[h * 2 * HD + i];
                w[O_X + h * HD + i] = r[h * 2 * HD + HD + i];
            }
        for (int64_t j = 0; j < G_N; j++) w[O_G + 1 + 3 * j] = r[5 + 3 * j];
        for (int64_t j = 0; j < 4; j++)
            for (int64_t i = 0; i < 5; i++) w[O_B + 5 * j + i] = r[7 + i];
        for (int64_t i = 0; i < 7; i++) w[O_1 + i] = r[9 + i];
    }
    size_t differ = 0;
    for (size_t i = 0; i < want.size(); i++) differ += static_cast<double>(got[i]) != want[i];
    std::printf("strided copy: %zu of %zu values differ from the reference\n", differ, want.size());
    CHECK(differ == 0);
    // Malformed programs.
    const params ok = {{"n", 4}, {"blocks", 3}, {"a_stride", 8}, {"out_stride", 4}};
    auto with = [&](params p, const char * k, double v) {
        p[k] = v;
        return p;
    };
    auto without = [&](params p, const char * k) {
        p.erase(k);
        return p;
    };
    expect_error("blocks on another op", KAIL_E_INVALID_ARG, [&] { load(image, make_program(ok, OP_ADD)); }, "(add): blocks, a_stride and out_stride are parameters of copy only");
    expect_error("no a_stride", KAIL_E_INVALID_ARG, [&] { load(image, make_program(without(ok, "a_stride"))); }, "(copy): missing parameter 'a_stride'");
    expect_error("strides without blocks", KAIL_E_INVALID_ARG, [&] { load(image, make_program(without(ok, "blocks"))); }, "(copy): missing parameter 'blocks'");
    expect_error("no blocks", KAIL_E_BAD_MODEL, [&] { load(image, make_program(with(ok, "blocks", 0))); }, "(copy): 0 blocks of 4 values, strides 8 (a) and 4 (out): a strided copy needs");
    expect_error("overlapping out blocks", KAIL_E_BAD_MODEL, [&] { load(image, make_program(with(ok, "out_stride", 3))); }, "3 blocks of 4 values, strides 8 (a) and 3 (out)");
    expect_error("a negative a stride", KAIL_E_BAD_MODEL, [&] { load(image, make_program(with(ok, "a_stride", -1))); }, "strides -1 (a) and 4 (out)");
    expect_error("empty blocks", KAIL_E_BAD_MODEL, [&] { load(image, make_program(with(ok, "n", 0))); }, "3 blocks of 0 values");
    expect_error("blocks past a", KAIL_E_BAD_MODEL, [&] { load(image, make_program(with(ok, "blocks", 13))); }, "(copy): 100 values at offset 0 do not fit buffer 'in' (a, width 96)");
    expect_error("blocks past out", KAIL_E_BAD_MODEL, [&] { load(image, make_program(with(ok, "out_off", OUT_W - 11))); }, std::string("(copy): 12 values at offset " + std::to_string(OUT_W - 11) + " do not fit buffer 'core'").c_str());
    expect_error("in place", KAIL_E_INVALID_ARG, [&] { load(image, make_program(ok, OP_COPY, true)); }, "(copy): a strided copy's out must not be a");
    expect_error("a huge stride", KAIL_E_BAD_MODEL, [&] { load(image, make_program(with(ok, "a_stride", 1e12))); }, "(copy): parameter a_stride is out of range");
    return test_status("test-strided-copy");
}
