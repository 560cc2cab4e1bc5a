// eagle3-ref: llama.cpp's EAGLE-3 draft (arch eagle3, src/models/eagle3.cpp) as a reference oracle.
//
// node-llama-cpp does not expose EAGLE-3; its prebuilt libllama does (src/llama-ext.h:
// llama_set_embeddings_layer_inp / llama_get_embeddings_layer_inp, llama_model_target_layer_ids,
// llama_get_embeddings_nextn, and llama_context_params.ctx_other). This program runs, against those
// binaries, what common/speculative.cpp's draft-eagle3 driver (common_speculative_impl_draft_eagle3:
// process() then draft()) asks of llama.cpp, on fixed tokens:
//
//   eagle3-ref --target T.gguf --draft D.gguf --tokens 1,2,3 --out PREFIX [--draft-steps K] [--threads N] [--verbose]
//
// Settings: CPU only, no extra (repacked) weight buffers, F32 K and V caches, flash attention off,
// one sequence, n_ctx = n_batch = n_ubatch = n + K rounded up to a multiple of 256.
//
// Inputs: TOKENS = t[0..n-1] (n >= 2, each < n_vocab). The draft's three target layer ids
// (eagle3.target_layers) must each be < the target's n_layer (a layer's input) or equal to it (the
// target's h_nextn, where its graph has one).
//
// 1. Target context, layer-input extraction on for the three layers: one batch t[k] at pos k.
//      PREFIX.target_logits.f32 [n][n_vocab]
//      PREFIX.features.f32      [n][3 * n_embd_tgt]  row k = the three layers' inputs at pos k, concatenated
// 2. Draft context (ctx_other = the target context, for its token_embd / output when the draft has
//    none), llama_set_embeddings_nextn(ctx, true, masked = true). The encoder (llama_encode over the
//    feature rows) gives g = fc([enc_norm](features)):
//      PREFIX.g.f32             [n][n_embd]
//    then one decoder batch as process() builds it: row P = (token t[P+1], g row P) at pos P for
//    P = 0..n-2, logits for every row:
//      PREFIX.eagle_logits.f32  [n-1][n_vocab]   row P: the draft's logits for the token at pos P+2
//                                                 (-inf outside d2t's ids when the draft has d2t)
//      PREFIX.eagle_h.f32       [n-1][n_embd]    row P: the block's pre-norm output (the next g)
// 3. K chained draft steps as draft() takes them: step j: d[j] = argmax of the previous logits row
//    (lowest id on ties; step 0: eagle_logits row n-2), pos n-1+j, embd = the previous h row.
//      PREFIX.draft_logits.f32  [K][n_vocab]
//      PREFIX.draft_h.f32       [K][n_embd]
//
// PREFIX.json: {n_tokens, n_vocab, n_embd (draft), n_embd_tgt, n_layer_tgt, target_layers, tokens,
// draft_steps, draft_tokens, files}; float32 little-endian row-major. stdout: the same JSON.
// Errors: a message on stderr, exit code 1.
static const char * const kRefName = "eagle3-ref";

#include "llama.h"
#include "llama-ext.h"
#include "ref-common.h"

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using ref::check_values;
using ref::fail;
using ref::json_ints;
using ref::read_rows;
using ref::set_row;

struct args_t : ref::common_args {
    std::string target, draft;
    int draft_steps = 1;
};

args_t parse_args(int argc, char ** argv) {
    const char * usage = "usage: eagle3-ref --target T.gguf --draft D.gguf --tokens 1,2,3 --out PREFIX [--draft-steps K] [--threads N] [--verbose]";
    args_t a;
    ref::parse_args(argc, argv, usage, a, {
        {"--target", [&](const auto & next) { a.target = next(); }},
        {"--draft", [&](const auto & next) { a.draft = next(); }},
        {"--draft-steps", [&](const auto & next) { a.draft_steps = std::atoi(next().c_str()); }},
    });
    if (a.target.empty() || a.draft.empty() || a.tokens.size() < 2) fail("%s (at least 2 tokens)", usage);
    if (a.draft_steps < 1) fail("--draft-steps must be >= 1");
    return a;
}

} // namespace

int main(int argc, char ** argv) {
    const args_t a = parse_args(argc, argv);
    ref::init_backend();

    const ref::target_draft models = ref::load_target_draft(a.target, a.draft, [&](const llama_model * d) {
        if (llama_model_target_layer_ids_n(d) != 3) fail("'%s' is not an EAGLE-3 draft (%u target layers)", a.draft.c_str(), llama_model_target_layer_ids_n(d));
    });
    llama_model * model_tgt = models.target;
    llama_model * model_dft = models.draft;
    const int32_t * ids = llama_model_target_layer_ids(model_dft);

    const int32_t n_vocab = models.n_vocab;
    const int32_t E_t = llama_model_n_embd(model_tgt);
    const int32_t E_d = llama_model_n_embd(model_dft);
    const int32_t n_layer_tgt = llama_model_n_layer(model_tgt);
    const int32_t n = (int32_t) a.tokens.size();
    const int32_t K = a.draft_steps;
    ref::check_tokens(a.tokens, n_vocab);
    for (int k = 0; k < 3; k++) {
        if (ids[k] < 0 || ids[k] > n_layer_tgt) fail("target layer %d is outside the target's %d layers", ids[k], n_layer_tgt);
    }

    const uint32_t n_ctx = ref::ctx_size(n + K);
    llama_context_params cp = ref::exact_context_params(n_ctx, a.threads);

    // 1. target with the three layers' inputs extracted
    llama_context * ctx_tgt = llama_init_from_model(model_tgt, cp);
    if (!ctx_tgt) fail("cannot create the target context");
    ref::target_pass tp = ref::run_target_layers(ctx_tgt, a.tokens, ids, 3, n_layer_tgt, n_vocab, E_t);
    const std::vector<float> & tgt_logits = tp.logits;
    std::vector<float> & features = tp.features;

    // 2. draft: encoder over the feature rows, then the decoder rows (t[P+1], g[P]) at pos P
    llama_context * ctx_dft = ref::draft_context(model_dft, cp, ctx_tgt);

    std::vector<float> g((size_t) n * E_d);
    {
        llama_batch eb = {n, nullptr, features.data(), nullptr, nullptr, nullptr, nullptr};
        const int32_t rc = llama_encode(ctx_dft, eb);
        if (rc != 0) fail("draft llama_encode failed (rc %d)", rc);
        const float * ge = llama_get_embeddings_nextn(ctx_dft);
        if (!ge) fail("the encoder gave no g rows");
        std::memcpy(g.data(), ge, sizeof(float) * g.size());
    }
    const int32_t m = n - 1;
    std::vector<float> eagle_logits((size_t) m * n_vocab), eagle_h((size_t) m * E_d);
    {
        ref::token_embd_batch tb(m, E_d);
        llama_batch & b = tb.b;
        for (int32_t p = 0; p < m; p++) {
            set_row(b, p, a.tokens[p + 1], p);
            std::memcpy(b.embd + (size_t) p * E_d, &g[(size_t) p * E_d], sizeof(float) * E_d);
        }
        b.n_tokens = m;
        const int32_t rc = llama_decode(ctx_dft, b);
        if (rc != 0) fail("draft llama_decode failed (rc %d)", rc);
        read_rows(ctx_dft, m, n_vocab, E_d, eagle_logits.data(), eagle_h.data(), "draft");
    }

    // 3. chained draft steps
    const ref::draft_steps steps = ref::greedy_draft_steps(ctx_dft, &eagle_logits[(size_t) (m - 1) * n_vocab], &eagle_h[(size_t) (m - 1) * E_d], n_vocab, E_d, K, m, "EAGLE-3");
    const std::vector<float> & draft_logits = steps.logits;
    const std::vector<float> & draft_h = steps.rows;

    check_values("target logits", tgt_logits);
    check_values("features", features);
    check_values("g", g);
    check_values("eagle logits", eagle_logits, true);
    check_values("eagle h", eagle_h);
    check_values("draft-step logits", draft_logits, true);
    check_values("draft-step h", draft_h);

    const std::string fj = ref::write_arrays(a.out, {{"target_logits", &tgt_logits}, {"features", &features}, {"g", &g}, {"eagle_logits", &eagle_logits}, {"eagle_h", &eagle_h}, {"draft_logits", &draft_logits}, {"draft_h", &draft_h}});
    const std::string json = "{\"n_tokens\": " + std::to_string(n) + ", \"n_vocab\": " + std::to_string(n_vocab) +
        ", \"n_embd\": " + std::to_string(E_d) + ", \"n_embd_tgt\": " + std::to_string(E_t) + ", \"n_layer_tgt\": " + std::to_string(n_layer_tgt) +
        ", \"target_layers\": [" + std::to_string(ids[0]) + "," + std::to_string(ids[1]) + "," + std::to_string(ids[2]) + "]" +
        ", \"tokens\": " + json_ints(a.tokens) + ", \"draft_steps\": " + std::to_string(K) + ", \"draft_tokens\": " + json_ints(steps.tokens) +
        ref::draft_report_end(a.target, a.draft, ref::settings_json(a.threads, false, n_ctx), fj);
    ref::write_report(a.out, json);

    ref::free_target_draft(ctx_dft, ctx_tgt, models);
    return 0;
}
