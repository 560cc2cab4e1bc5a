// mtp-ref: llama.cpp's multi-token-prediction (NextN / MTP) forward as a reference oracle.
//
// node-llama-cpp does not expose MTP; its prebuilt libllama does (src/llama-ext.h). This program
// runs, against those binaries, exactly what common/speculative.cpp's draft-mtp driver
// (common_speculative_impl_draft_mtp: process() then draft()) asks of llama.cpp, on fixed tokens:
//
//   mtp-ref --model M.gguf --tokens 1,2,3 --out PREFIX [--draft-steps K] [--threads N] [--verbose]
//
// Settings: CPU only (n_gpu_layers 0), no extra (repacked) weight buffers, load_mtp = true, F32 K and V caches, flash attention off,
// one sequence, n_ctx = n_batch = n_ubatch = n + K rounded up to a multiple of 256 (one ubatch per
// decode), n_threads = n_threads_batch = N (default 2).
//
// Inputs: TOKENS = t[0..n-1] (n >= 1, each < n_vocab). The model must carry NextN tensors
// (nextn_predict_layers >= 1 and blk.<n_layer>.nextn.eh_proj.weight present); llama.cpp runs the
// first NextN block.
//
// 1. Target context (the trunk), llama_set_embeddings_nextn(ctx, true, masked = false): one batch
//    t[k] at pos k, logits for every row.
//      PREFIX.target_logits.f32  [n][n_vocab]  row k = llama_get_logits_ith(ctx_tgt, k): the trunk's
//                                              logits after t[0..k] (the token at pos k+1)
//      PREFIX.target_h.f32       [n][n_embd]   row k = llama_get_embeddings_nextn_ith(ctx_tgt, k):
//                                              output_norm(final residual) at pos k, i.e. the row
//                                              the LM head multiplies (deepseek2 graph "h_nextn")
// 2. MTP context (ctx_type LLAMA_CONTEXT_TYPE_MTP on the same model; its KV cache holds only the
//    NextN layer), llama_set_embeddings_nextn(ctx, true, masked = true): one batch carrying both
//    token ids and embedding rows, built as speculative.cpp process() builds it:
//      row k: token t[k], pos k, embd = target_h row k-1 (row 0: zeros, speculative.cpp's initial
//      pending_h), logits for every row (process() asks for none; the values are the same).
//    The NextN block computes e = embed(t[k]) (nextn.embed_tokens, else token_embd),
//    x = eh_proj · [enorm(e); hnorm(h)], one MoE transformer block over x at pos k (causal
//    attention over the NextN block's own KV of rows 0..k), then
//    h' = shared_head_norm(x_out) (else output_norm), logits = head · h' (nextn.shared_head_head,
//    else output).
//      PREFIX.mtp_logits.f32     [n][n_vocab]  row k: the draft's logits for the token at pos k+1
//      PREFIX.mtp_h.f32          [n][n_embd]   row k: h' (the NextN block's "h_nextn")
// 3. K (--draft-steps, default 1) chained draft steps, as speculative.cpp draft() takes its
//    steps after the first, each a decode of one row on top of the MTP KV so far:
//      step j: token d[j] = argmax(previous logits row) (lowest id on ties; step 0's previous row
//      is mtp_logits row n-1), pos n+j, embd = previous h row (step 0: mtp_h row n-1).
//      PREFIX.draft_logits.f32   [K][n_vocab]  row j: the draft's logits for the token at pos n+j+1
//      PREFIX.draft_h.f32        [K][n_embd]
//    (Row n-1 of step 2 is exactly draft() step 0 for prompt t[0..n-2] with id_last = t[n-1].)
//
// PREFIX.json: {n_tokens, n_vocab, n_embd, n_layer (trunk), n_layer_nextn, tokens, draft_steps,
// draft_tokens (d[0..K-1]), draft_token (d[0]), draft_pos (n), model, settings, files: {name:
// path}}; all files little-endian float32, row-major. stdout: the same JSON. Errors: a message on
// stderr naming the problem, exit code 1.
static const char * const kRefName = "mtp-ref";

#include "llama.h"
#include "llama-ext.h"
#include "gguf.h"
#include "ref-common.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using ref::check_values;
using ref::fail;
using ref::json_ints;
using ref::json_str;
using ref::read_rows;
using ref::set_row;

struct args_t : ref::common_args {
    std::string model;
    int draft_steps = 1;
};

args_t parse_args(int argc, char ** argv) {
    const char * usage = "usage: mtp-ref --model M.gguf --tokens 1,2,3 --out PREFIX [--draft-steps K] [--threads N] [--verbose]";
    args_t a;
    ref::parse_args(argc, argv, usage, a, {
        {"--model", [&](const auto & next) { a.model = next(); }},
        {"--draft-steps", [&](const auto & next) { a.draft_steps = std::atoi(next().c_str()); }},
    });
    if (a.model.empty()) fail("%s", usage);
    if (a.draft_steps < 1) fail("--draft-steps must be >= 1");
    return a;
}

// Checks the file before llama.cpp sees it: graph_mtp GGML_ASSERTs (aborts) on a trunk-only file.
void check_nextn_tensors(const std::string & path) {
    FILE * f = std::fopen(path.c_str(), "rb");
    if (!f) fail("cannot open model '%s': %s", path.c_str(), std::strerror(errno));
    std::fclose(f);
    gguf_init_params gp = {/*no_alloc*/ true, /*ctx*/ nullptr};
    gguf_context * g = gguf_init_from_file(path.c_str(), gp);
    if (!g) fail("'%s' is not a readable GGUF file", path.c_str());
    const int64_t arch_id = gguf_find_key(g, "general.architecture");
    if (arch_id < 0) { gguf_free(g); fail("'%s' has no general.architecture", path.c_str()); }
    const std::string arch = gguf_get_val_str(g, arch_id);
    const int64_t nl_id = gguf_find_key(g, (arch + ".nextn_predict_layers").c_str());
    const int64_t bc_id = gguf_find_key(g, (arch + ".block_count").c_str());
    const uint32_t nextn = nl_id < 0 ? 0 : gguf_get_val_u32(g, nl_id);
    if (nextn == 0) { gguf_free(g); fail("'%s' has no MTP layers (%s.nextn_predict_layers is %s)", path.c_str(), arch.c_str(), nl_id < 0 ? "absent" : "0"); }
    if (bc_id < 0) { gguf_free(g); fail("'%s' has no %s.block_count", path.c_str(), arch.c_str()); }
    const uint32_t n_trunk = gguf_get_val_u32(g, bc_id) - nextn;
    const std::string probe = "blk." + std::to_string(n_trunk) + ".nextn.eh_proj.weight";
    const bool has = gguf_find_tensor(g, probe.c_str()) >= 0;
    gguf_free(g);
    if (!has) fail("'%s' counts %u MTP layer(s) but does not carry them (no %s): a trunk-only file", path.c_str(), nextn, probe.c_str());
}

} // namespace

int main(int argc, char ** argv) {
    const args_t a = parse_args(argc, argv);
    ref::init_backend();
    check_nextn_tensors(a.model);
    llama_model * model = ref::load_model(a.model, /*load_mtp*/ true);
    if (llama_model_n_layer_nextn(model) < 1) fail("'%s' has no MTP layers (llama_model_n_layer_nextn = 0)", a.model.c_str());

    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int32_t n_vocab = llama_vocab_n_tokens(vocab);
    const int32_t n_embd = llama_model_n_embd_out(model);
    const int32_t n = (int32_t) a.tokens.size();
    ref::check_tokens(a.tokens, n_vocab);

    const uint32_t n_ctx = ref::ctx_size(n + a.draft_steps);
    llama_context_params cp = ref::exact_context_params(n_ctx, a.threads);

    // 1. target
    llama_context * ctx_tgt = llama_init_from_model(model, cp);
    if (!ctx_tgt) fail("cannot create the target context");
    llama_set_embeddings_nextn(ctx_tgt, true, /*masked*/ false);

    std::vector<float> tgt_logits((size_t) n * n_vocab), tgt_h((size_t) n * n_embd);
    ref::run_tokens(ctx_tgt, a.tokens, "target llama_decode");
    read_rows(ctx_tgt, n, n_vocab, n_embd, tgt_logits.data(), tgt_h.data(), "target");

    // 2. MTP over the same tokens, each row paired with the target's h of the row before
    cp.ctx_type = LLAMA_CONTEXT_TYPE_MTP;
    llama_context * ctx_dft = llama_init_from_model(model, cp);
    if (!ctx_dft) fail("cannot create the MTP context (llama.cpp refused LLAMA_CONTEXT_TYPE_MTP)");
    llama_set_embeddings_nextn(ctx_dft, true, /*masked*/ true);

    std::vector<float> mtp_logits((size_t) n * n_vocab), mtp_h((size_t) n * n_embd);
    {
        ref::token_embd_batch mb(n, n_embd);
        llama_batch & b = mb.b;
        for (int32_t k = 0; k < n; k++) {
            set_row(b, k, a.tokens[k], k);
            float * row = b.embd + (size_t) k * n_embd;
            if (k == 0) std::memset(row, 0, sizeof(float) * n_embd);
            else std::memcpy(row, &tgt_h[(size_t) (k - 1) * n_embd], sizeof(float) * n_embd);
        }
        b.n_tokens = n;
        const int32_t rc = llama_decode(ctx_dft, b);
        if (rc != 0) fail("MTP llama_decode failed (rc %d)", rc);
        read_rows(ctx_dft, n, n_vocab, n_embd, mtp_logits.data(), mtp_h.data(), "MTP");
    }

    // 3. chained draft steps
    const int32_t K = a.draft_steps;
    const ref::draft_steps steps = ref::greedy_draft_steps(ctx_dft, &mtp_logits[(size_t) (n - 1) * n_vocab], &mtp_h[(size_t) (n - 1) * n_embd], n_vocab, n_embd, K, n, "MTP");
    const std::vector<float> & draft_logits = steps.logits;
    const std::vector<float> & draft_h = steps.rows;

    check_values("target logits", tgt_logits);
    check_values("target h_nextn", tgt_h);
    check_values("MTP logits", mtp_logits);
    check_values("MTP h_nextn", mtp_h);
    check_values("draft-step logits", draft_logits);
    check_values("draft-step h_nextn", draft_h);

    const std::string fj = ref::write_arrays(a.out, {{"target_logits", &tgt_logits}, {"target_h", &tgt_h}, {"mtp_logits", &mtp_logits}, {"mtp_h", &mtp_h}, {"draft_logits", &draft_logits}, {"draft_h", &draft_h}});

    char desc[256];
    llama_model_desc(model, desc, sizeof desc);
    std::string json = "{\"n_tokens\": " + std::to_string(n) + ", \"n_vocab\": " + std::to_string(n_vocab) +
        ", \"n_embd\": " + std::to_string(n_embd) + ", \"n_layer\": " + std::to_string(llama_model_n_layer(model)) +
        ", \"n_layer_nextn\": " + std::to_string(llama_model_n_layer_nextn(model)) + ", \"tokens\": " + json_ints(a.tokens) +
        ", \"draft_steps\": " + std::to_string(K) + ", \"draft_tokens\": " + json_ints(steps.tokens) +
        ", \"draft_token\": " + std::to_string(steps.tokens[0]) + ", \"draft_pos\": " + std::to_string(n) +
        ", \"model\": " + json_str(a.model) + ", \"model_desc\": " + json_str(desc) +
        ", " + ref::settings_json(a.threads, false, n_ctx, ", \"n_ubatch\": " + std::to_string(n_ctx)) +
        ", \"dtype\": \"float32\", \"layout\": \"row-major, little-endian\", \"files\": {" + fj + "}}";
    ref::write_report(a.out, json);

    llama_free(ctx_dft);
    llama_free(ctx_tgt);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
