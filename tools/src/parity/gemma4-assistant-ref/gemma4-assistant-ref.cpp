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

#include <cerrno>
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
using ref::set_row;

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

void check_values(const char * what, const std::vector<float> & v) {
    for (size_t i = 0; i < v.size(); i++) {
        if (!std::isfinite(v[i])) fail("%s: value %g at index %zu", what, (double) v[i], i);
    }
}

llama_model * load(const std::string & path) {
    FILE * f = std::fopen(path.c_str(), "rb");
    if (!f) fail("cannot open model '%s': %s", path.c_str(), std::strerror(errno));
    std::fclose(f);
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.use_extra_bufts = false;
    llama_model * m = llama_model_load_from_file(path.c_str(), mp);
    if (!m) fail("llama.cpp could not load '%s' (run with --verbose for its log)", path.c_str());
    return m;
}

int32_t argmax(const float * l, int32_t n) {
    int32_t d = 0;
    for (int32_t v = 1; v < n; v++) {
        if (l[v] > l[d]) d = v;
    }
    return d;
}

// One draft row (token, embd) at pos: its logits and h_next.
void draft_row(llama_context * cd, ref::token_embd_batch & tb, llama_token tok, llama_pos pos, const float * embd, int32_t width, int32_t n_vocab, float * logits, float * h, const char * what) {
    set_row(tb.b, 0, tok, pos);
    std::memcpy(tb.b.embd, embd, sizeof(float) * width);
    tb.b.n_tokens = 1;
    const int32_t rc = llama_decode(cd, tb.b);
    if (rc != 0) fail("%s at position %d: llama_decode failed (rc %d)", what, pos, rc);
    ref::read_rows(cd, 1, n_vocab, width, logits, h, what);
}

} // namespace

int main(int argc, char ** argv) {
    const args_t a = parse_args(argc, argv);
    llama_log_set(ref::log_cb, nullptr);
    ggml_backend_load_all_from_path(ref::backend_dir().c_str());
    llama_backend_init();

    llama_model * model_tgt = load(a.target);
    llama_model * model_dft = load(a.draft);
    const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model_tgt));
    if (llama_vocab_n_tokens(llama_model_get_vocab(model_dft)) != n_vocab) fail("the draft's vocabulary differs from the target's");
    const int32_t T = llama_model_n_embd(model_tgt);
    const int32_t E_d = llama_model_n_embd(model_dft);
    if (llama_model_n_embd_out(model_dft) != T) fail("the draft reads %d-wide target states (embedding_length_out); the target's n_embd is %d", llama_model_n_embd_out(model_dft), T);
    const int32_t n = (int32_t) a.tokens.size();
    const int32_t K = a.draft_steps;
    for (int32_t k = 0; k < n; k++) {
        if (a.tokens[k] >= n_vocab) fail("token %d at index %d out of range [0, %d)", a.tokens[k], k, n_vocab);
    }
    const uint32_t n_ctx = (uint32_t) ((n + 255) / 256 * 256);
    llama_context_params cp = ref::exact_context_params(n_ctx, a.threads);
    llama_context * ct = llama_init_from_model(model_tgt, cp);
    if (!ct) fail("cannot create the target context");
    llama_set_embeddings_nextn(ct, true, /*masked*/ false);
    // (Before the target's first decode: see the header.)
    cp.ctx_other = ct;
    llama_context * cd = llama_init_from_model(model_dft, cp);
    if (!cd) fail("cannot create the draft context");
    llama_set_embeddings_nextn(cd, true, /*masked*/ true);

    const int32_t m_rows = n - 1;
    std::vector<float> tgt_logits((size_t) m_rows * n_vocab), tgt_h((size_t) m_rows * T), dft_logits((size_t) m_rows * n_vocab), dft_h((size_t) m_rows * T);
    ref::token_embd_batch tb(1, T);
    llama_batch b = llama_batch_init(1, 0, 1);
    for (int32_t m = 1; m < n; m++) {
        set_row(b, 0, a.tokens[m - 1], m - 1);
        b.n_tokens = 1;
        const int32_t rc = llama_decode(ct, b);
        if (rc != 0) fail("target llama_decode at position %d failed (rc %d)", m - 1, rc);
        const float * l = llama_get_logits_ith(ct, 0);
        const float * h = llama_get_embeddings_nextn_ith(ct, 0);
        if (!l || !h) fail("target: no logits or h_nextn at position %d", m - 1);
        std::memcpy(&tgt_logits[(size_t) (m - 1) * n_vocab], l, sizeof(float) * n_vocab);
        std::memcpy(&tgt_h[(size_t) (m - 1) * T], h, sizeof(float) * T);
        draft_row(cd, tb, a.tokens[m], m, &tgt_h[(size_t) (m - 1) * T], T, n_vocab, &dft_logits[(size_t) (m - 1) * n_vocab], &dft_h[(size_t) (m - 1) * T], "draft row");
        if (llama_memory_seq_pos_max(llama_get_memory(ct), 0) != m - 1) fail("the draft row at %d changed the target's cache", m);
    }
    llama_batch_free(b);

    std::vector<float> chain_logits((size_t) K * n_vocab), chain_h((size_t) K * T);
    std::vector<llama_token> chain(K);
    const float * prev_l = &dft_logits[(size_t) (m_rows - 1) * n_vocab];
    const float * prev_h = &dft_h[(size_t) (m_rows - 1) * T];
    for (int32_t j = 0; j < K; j++) {
        chain[j] = argmax(prev_l, n_vocab);
        draft_row(cd, tb, chain[j], n - 1, prev_h, T, n_vocab, &chain_logits[(size_t) j * n_vocab], &chain_h[(size_t) j * T], "chained draft step");
        prev_l = &chain_logits[(size_t) j * n_vocab];
        prev_h = &chain_h[(size_t) j * T];
    }

    check_values("target logits", tgt_logits);
    check_values("target h", tgt_h);
    check_values("draft logits", dft_logits);
    check_values("draft h", dft_h);
    check_values("chain logits", chain_logits);
    check_values("chain h", chain_h);

    const std::string fj = ref::write_arrays(a.out, {{"target_logits", &tgt_logits}, {"target_h", &tgt_h}, {"draft_logits", &dft_logits}, {"draft_h", &dft_h}, {"chain_logits", &chain_logits}, {"chain_h", &chain_h}});
    const std::string json = "{\"n_tokens\": " + std::to_string(n) + ", \"n_vocab\": " + std::to_string(n_vocab) +
        ", \"n_embd\": " + std::to_string(E_d) + ", \"n_embd_tgt\": " + std::to_string(T) +
        ", \"tokens\": " + json_ints(a.tokens) + ", \"draft_steps\": " + std::to_string(K) + ", \"chain_tokens\": " + json_ints(chain) +
        ", \"target\": " + json_str(a.target) + ", \"draft\": " + json_str(a.draft) +
        ", \"settings\": {\"threads\": " + std::to_string(a.threads) + ", \"kv\": \"f32\", \"flash_attention\": \"off\", \"n_ctx\": " + std::to_string(n_ctx) + "}" +
        ", \"files\": {" + fj + "}}";
    ref::write_report(a.out, json);

    llama_free(cd);
    llama_free(ct);
    llama_model_free(model_dft);
    llama_model_free(model_tgt);
    llama_backend_free();
    return 0;
}
