// gemma4-assistant-ref: llama.cpp's Gemma 4 assistant draft (arch gemma4-assistant,
// src/models/gemma4-assistant.cpp) over its gemma4 target's KV cache, as a reference oracle.
//
// node-llama-cpp does not expose these drafts; its prebuilt libllama does (src/llama-ext.h's
// llama_set_embeddings_nextn / llama_get_embeddings_nextn_ith and llama_context_params.ctx_other),
// so this program links it directly and runs, on fixed tokens:
//
//   gemma4-assistant-ref --target T.gguf --draft D.gguf --tokens 1,2,3 --out PREFIX [--draft-steps K] [--threads N] [--verbose]
//
// Settings: CPU only, no extra (repacked) weight buffers, F32 K and V caches, flash attention off,
// one sequence, n_ctx = n_batch = n_ubatch = n rounded up to a multiple of 256.
//
// The draft's context is created right after the target's and before the target's first decode:
// it shares the target's cache bookkeeping, and creating it later wipes the target's cache (every
// draft logit NaN). Inputs: TOKENS = t[0..n-1] (n >= 2, each < n_vocab).
//
// For m = 1..n-1: the target decodes t[m-1] at position m-1 (one token), then the draft one row
// (token t[m], embd = the target's post-output-norm state of position m-1) at position m (the
// target's last position + 1: the only one llama.cpp accepts; the draft writes nothing to the cache).
//   PREFIX.target_logits.f32 [n-1][n_vocab]   row m-1: the target's logits at position m-1
//   PREFIX.target_h.f32      [n-1][n_embd_tgt] row m-1: its h_nextn (post-output-norm state)
//   PREFIX.draft_logits.f32  [n-1][n_vocab]   row m-1: the draft row at position m
//   PREFIX.draft_h.f32       [n-1][n_embd_tgt] row m-1: its h_next (nextn.post_projection)
// Then K chained greedy steps, all at position n-1 (as common/speculative.cpp drafts with these
// models): step j: d[j] = argmax of the previous logits row (lowest id on ties; step 0: the last
// draft row), embd = the previous h row.
//   PREFIX.chain_logits.f32  [K][n_vocab]
//   PREFIX.chain_h.f32       [K][n_embd_tgt]
//
// PREFIX.json: {n_tokens, n_vocab, n_embd (draft), n_embd_tgt, tokens, draft_steps, chain_tokens,
// files}; float32 little-endian row-major. stdout: the same JSON. Errors: stderr, exit code 1.
static const char * const kRefName = "gemma4-assistant-ref";

#include "llama.h"
#include "llama-ext.h"
#include "ref-common.h"

#include <cstdlib>
#include <string>
#include <vector>

namespace {

using ref::check_values;
using ref::fail;
using ref::json_ints;

struct args_t : ref::common_args {
    std::string target, draft;
    int draft_steps = 1;
};

args_t parse_args(int argc, char ** argv) {
    const char * usage = "usage: gemma4-assistant-ref --target T.gguf --draft D.gguf --tokens 1,2,3 --out PREFIX [--draft-steps K] [--threads N] [--verbose]";
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

    const ref::target_draft models = ref::load_target_draft(a.target, a.draft);
    llama_model * model_tgt = models.target;
    llama_model * model_dft = models.draft;
    const int32_t n_vocab = models.n_vocab;
    const int32_t T = llama_model_n_embd(model_tgt);
    const int32_t E_d = llama_model_n_embd(model_dft);
    if (llama_model_n_embd_out(model_dft) != T) fail("the draft reads %d-wide target states (embedding_length_out); the target's n_embd is %d", llama_model_n_embd_out(model_dft), T);
    const int32_t n = (int32_t) a.tokens.size();
    const int32_t K = a.draft_steps;
    ref::check_tokens(a.tokens, n_vocab);
    const uint32_t n_ctx = ref::ctx_size(n);
    llama_context_params cp = ref::exact_context_params(n_ctx, a.threads);
    llama_context * ct = llama_init_from_model(model_tgt, cp);
    if (!ct) fail("cannot create the target context");
    llama_set_embeddings_nextn(ct, true, /*masked*/ false);
    // (Before the target's first decode: see the header.)
    llama_context * cd = ref::draft_context(model_dft, cp, ct);

    const int32_t m_rows = n - 1;
    std::vector<float> tgt_logits((size_t) m_rows * n_vocab), tgt_h((size_t) m_rows * T), dft_logits((size_t) m_rows * n_vocab), dft_h((size_t) m_rows * T);
    ref::token_embd_batch tb(1, T);
    llama_batch b = llama_batch_init(1, 0, 1);
    for (int32_t m = 1; m < n; m++) {
        ref::decode_row(ct, b, a.tokens[m - 1], m - 1, nullptr, T, n_vocab, &tgt_logits[(size_t) (m - 1) * n_vocab], &tgt_h[(size_t) (m - 1) * T], "target at position " + std::to_string(m - 1));
        ref::decode_row(cd, tb.b, a.tokens[m], m, &tgt_h[(size_t) (m - 1) * T], T, n_vocab, &dft_logits[(size_t) (m - 1) * n_vocab], &dft_h[(size_t) (m - 1) * T], "draft row at position " + std::to_string(m));
        if (llama_memory_seq_pos_max(llama_get_memory(ct), 0) != m - 1) fail("the draft row at %d changed the target's cache", m);
    }
    llama_batch_free(b);

    const ref::draft_steps chain = ref::greedy_draft_steps(cd, &dft_logits[(size_t) (m_rows - 1) * n_vocab], &dft_h[(size_t) (m_rows - 1) * T], n_vocab, T, K, n - 1, "chained", /*pos_step*/ 0);
    const std::vector<float> & chain_logits = chain.logits;
    const std::vector<float> & chain_h = chain.rows;

    check_values("target logits", tgt_logits);
    check_values("target h", tgt_h);
    check_values("draft logits", dft_logits);
    check_values("draft h", dft_h);
    check_values("chain logits", chain_logits);
    check_values("chain h", chain_h);

    const std::string fj = ref::write_arrays(a.out, {{"target_logits", &tgt_logits}, {"target_h", &tgt_h}, {"draft_logits", &dft_logits}, {"draft_h", &dft_h}, {"chain_logits", &chain_logits}, {"chain_h", &chain_h}});
    const std::string json = "{\"n_tokens\": " + std::to_string(n) + ", \"n_vocab\": " + std::to_string(n_vocab) +
        ", \"n_embd\": " + std::to_string(E_d) + ", \"n_embd_tgt\": " + std::to_string(T) +
        ", \"tokens\": " + json_ints(a.tokens) + ", \"draft_steps\": " + std::to_string(K) + ", \"chain_tokens\": " + json_ints(chain.tokens) +
        ref::draft_report_end(a.target, a.draft, ref::settings_json(a.threads, false, n_ctx), fj);
    ref::write_report(a.out, json);

    ref::free_target_draft(cd, ct, models);
    return 0;
}
