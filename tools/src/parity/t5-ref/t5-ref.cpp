// t5-ref: llama.cpp's T5 encoder-decoder generation as a reference oracle.
//
// node-llama-cpp does not drive encoder-decoder models (llama_encode); this program runs, against
// its prebuilt libllama, what llama.cpp's examples/simple and tools/completion do for a T5 file:
//
//   t5-ref --model M.gguf --tokens 1,2,3 --steps N --out PREFIX [--decoder-tokens 4,5,6] [--default]
//          [--threads T] [--verbose]
//
// Settings: CPU only (n_gpu_layers 0), no extra (repacked) weight buffers, F32 K and V caches, flash
// attention off, one sequence, n_ctx = n_batch = n_ubatch = max(n, N) rounded up to a multiple of
// 256 (the encoder's whole batch in one ubatch, as llama_encode requires). --default: llama.cpp's
// default run instead (F16 K and V caches, flash attention auto), to measure its own spread.
//
// 1. llama_encode over the prompt TOKENS t[0..n-1] (n >= 1, each < n_vocab) at positions 0..n-1:
//    T5's encoder (both ways, the relative position bias), whose enc.output_norm rows llama.cpp
//    keeps for the decoder's cross-attention.
// 2. N greedy decoder steps (llama_decode of one row each, on top of the decoder's KV cache): step
//    j feeds d[j] at position j, where d[0] = llama_model_decoder_start_token (the file's
//    decoder_start_token_id; llama_vocab_bos when absent, as the examples do) and d[j+1] = argmax
//    of row j's logits (lowest id on ties). --decoder-tokens d[0..N-1] (N of them, --steps N or
//    absent) feeds those instead, teacher-forced (another run's decoder tokens, to compare rows).
//      PREFIX.logits.f32  [N][n_vocab]  row j = llama_get_logits_ith(ctx, -1) after step j: the
//                                       decoder's logits for the token after d[0..j]
//
// PREFIX.json: {n_tokens, n_vocab, n_embd, n_layer, steps, tokens, decoder_start, decoder_tokens
// (d[0..N-1]), next_token (argmax of the last row), has_encoder, model, teacher_forced, settings, files}; all files
// little-endian float32, row-major. stdout: the same JSON. Errors: a message on stderr naming the
// problem, exit code 1.
static const char * const kRefName = "t5-ref";

#include "llama.h"
#include "ref-common.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using ref::fail;
using ref::json_ints;
using ref::json_str;
using ref::parse_tokens;
using ref::set_row;

struct args_t : ref::common_args {
    std::string model;
    int steps = 0;
    std::vector<llama_token> forced;
    bool default_run = false;
};

const char * const kUsage = "usage: t5-ref --model M.gguf --tokens 1,2,3 --steps N --out PREFIX [--decoder-tokens 4,5,6] [--default] [--threads T] [--verbose]";

args_t parse_args(int argc, char ** argv) {
    args_t a;
    ref::parse_args(argc, argv, kUsage, a, {
        {"--model", [&](const auto & next) { a.model = next(); }},
        {"--steps", [&](const auto & next) { a.steps = std::atoi(next().c_str()); }},
        {"--decoder-tokens", [&](const auto & next) { a.forced = parse_tokens(next()); }},
        {"--default", [&](const auto &) { a.default_run = true; }},
    });
    if (a.model.empty()) fail("%s", kUsage);
    if (!a.forced.empty() && a.steps == 0) a.steps = (int) a.forced.size();
    if (a.steps < 1) fail("--steps must be >= 1");
    if (!a.forced.empty() && (int) a.forced.size() != a.steps) fail("--decoder-tokens gives %d tokens for --steps %d", (int) a.forced.size(), a.steps);
    return a;
}

} // namespace

int main(int argc, char ** argv) {
    const args_t a = parse_args(argc, argv);
    ref::init_backend();
    llama_model * model = ref::load_model(a.model);
    if (!llama_model_has_encoder(model) || !llama_model_has_decoder(model)) fail("'%s' is not an encoder-decoder model (llama_model_has_encoder %d, has_decoder %d)", a.model.c_str(), (int) llama_model_has_encoder(model), (int) llama_model_has_decoder(model));

    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int32_t n_vocab = llama_vocab_n_tokens(vocab);
    const int32_t n = (int32_t) a.tokens.size();
    ref::check_tokens(a.tokens, n_vocab);
    ref::check_tokens(a.forced, n_vocab, "decoder token");

    const int32_t N = a.steps;
    const uint32_t n_ctx = ref::ctx_size(n > N ? n : N);
    llama_context * ctx = llama_init_from_model(model, ref::context_params(n_ctx, a.threads, a.default_run));
    if (!ctx) fail("cannot create the context");

    // 1. encoder
    ref::run_tokens(ctx, a.tokens, "llama_encode", /*encode*/ true);

    // 2. greedy decoder steps
    llama_token start = llama_model_decoder_start_token(model);
    if (start == LLAMA_TOKEN_NULL) start = llama_vocab_bos(vocab);
    if (start < 0 || start >= n_vocab) fail("no usable decoder start token (decoder_start_token_id absent and no BOS)");
    std::vector<float> logits((size_t) N * n_vocab);
    std::vector<llama_token> dec(N);
    llama_token next = start;
    {
        llama_batch b = llama_batch_init(1, 0, 1);
        for (int32_t j = 0; j < N; j++) {
            dec[j] = a.forced.empty() ? next : a.forced[(size_t) j];
            next = dec[j];
            set_row(b, 0, next, j);
            b.n_tokens = 1;
            const int32_t rc = llama_decode(ctx, b);
            if (rc != 0) fail("decoder step %d: llama_decode failed (rc %d)", j, rc);
            const float * l = llama_get_logits_ith(ctx, -1);
            if (!l) fail("decoder step %d: no logits", j);
            std::memcpy(&logits[(size_t) j * n_vocab], l, sizeof(float) * n_vocab);
            for (int32_t v = 0; v < n_vocab; v++) {
                if (!std::isfinite(l[v])) fail("decoder step %d: non-finite logit %g at %d", j, (double) l[v], v);
            }
            next = ref::argmax(l, n_vocab);
        }
        llama_batch_free(b);
    }

    const std::string fj = ref::write_arrays(a.out, {{"logits", &logits}});
    char desc[256];
    llama_model_desc(model, desc, sizeof desc);
    const std::string json = "{\"n_tokens\": " + std::to_string(n) + ", \"n_vocab\": " + std::to_string(n_vocab) +
        ", \"n_embd\": " + std::to_string(llama_model_n_embd(model)) + ", \"n_layer\": " + std::to_string(llama_model_n_layer(model)) +
        ", \"steps\": " + std::to_string(N) + ", \"tokens\": " + json_ints(a.tokens) +
        ", \"decoder_start\": " + std::to_string(start) + ", \"decoder_tokens\": " + json_ints(dec) +
        ", \"next_token\": " + std::to_string(next) + ", \"has_encoder\": true" +
        ", \"model\": " + json_str(a.model) + ", \"model_desc\": " + json_str(desc) +
        ", \"teacher_forced\": " + std::string(a.forced.empty() ? "false" : "true") +
        ", " + ref::settings_json(a.threads, a.default_run, n_ctx, ", \"n_ubatch\": " + std::to_string(n_ctx)) +
        ", \"dtype\": \"float32\", \"layout\": \"row-major, little-endian\", \"files\": {" + fj + "}}";
    ref::write_report(a.out, json);

    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
