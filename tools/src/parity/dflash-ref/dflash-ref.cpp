// dflash-ref: llama.cpp's DFlash block-diffusion draft (arch dflash, src/models/dflash.cpp) as a
// reference oracle.
//
// node-llama-cpp does not expose DFlash drafting; its prebuilt libllama does (src/llama-ext.h:
// llama_set_embeddings_layer_inp / llama_get_embeddings_layer_inp, llama_model_target_layer_ids,
// llama_model_dflash_selector_top_k, llama_set_causal_attn, llama_vocab_mask and
// llama_context_params.ctx_other). This program runs, against those binaries, what
// common/speculative.cpp's draft-dflash driver (common_speculative_impl_draft_dflash: process()
// injecting the target's features into the draft's KV cache, then draft() decoding a noise block)
// and the server's cache trimming ask of llama.cpp, on fixed tokens:
//
//   dflash-ref --target T.gguf --draft D.gguf --tokens 1,2,3 --out PREFIX [--split S] [--block B] [--default-run 1] [--threads N] [--verbose]
//
// Settings: CPU only, no extra (repacked) weight buffers, F32 K and V caches, flash attention off
// (with --default-run: llama.cpp's defaults, F16 K and V caches and flash attention auto, the run
// a quantized file's spread is measured against),
// one sequence, n_ctx = n_batch = n_ubatch = n + B rounded up to a multiple of 256. The draft's
// attention is causal only when its file says dflash.attention.causal = true (the driver's
// llama_set_causal_attn); llama_set_embeddings_nextn(ctx, true, masked = true) as the driver sets it.
//
// Inputs: TOKENS = t[0..n-1] (n >= 2, each < n_vocab); 0 <= S < n - 1 (default n / 2); B in
// [2, dflash.block_size] (default dflash.block_size). The draft must be plain DFlash (no selector).
//
// 1. Target context, layer-input extraction on for the draft's target layers: one batch t[k] at pos k.
//      PREFIX.target_logits.f32 [n][n_vocab]
//      PREFIX.features.f32      [n][L * n_embd_tgt]  row k = the L layers' inputs at pos k, concatenated
// 2. Draft context (ctx_other = the target context). Round 1: the feature rows of positions 0..S-1
//    injected (an embd batch, no logits; none when S = 0), then the noise block
//    [t[S] at pos S, mask at pos S+1 .. S+B-1], logits for every row:
//      PREFIX.block1_logits.f32 [B][n_vocab]
//    then llama_memory_seq_rm(draft, 0, S, -1) (the block leaves the cache, as the server does).
// 3. Round 2: the feature rows of positions S..n-2 injected, then the block
//    [t[n-1] at pos n-1, mask at pos n .. n+B-2]:
//      PREFIX.block2_logits.f32 [B][n_vocab]
//    The draft tokens of a block are the argmax of its rows 1..B-1 (draft() reads those). A draft
//    with d2t (a smaller draft vocabulary) gives -inf outside its ids, as llama.cpp's graph scatters it.
//
// PREFIX.json: {n_tokens, n_vocab, n_embd (draft), n_embd_tgt, n_layer_tgt, target_layers, tokens,
// split, block, block_size, mask_token, causal, files}; float32 little-endian row-major. stdout:
// the same JSON. Errors: a message on stderr, exit code 1.
static const char * const kRefName = "dflash-ref";

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
using ref::set_row;

struct args_t : ref::common_args {
    std::string target, draft;
    int split = -1;
    int block = 0;
    bool default_run = false;
};

args_t parse_args(int argc, char ** argv) {
    const char * usage = "usage: dflash-ref --target T.gguf --draft D.gguf --tokens 1,2,3 --out PREFIX [--split S] [--block B] [--default-run 1] [--threads N] [--verbose]";
    args_t a;
    ref::parse_args(argc, argv, usage, a, {
        {"--target", [&](const auto & next) { a.target = next(); }},
        {"--draft", [&](const auto & next) { a.draft = next(); }},
        {"--split", [&](const auto & next) { a.split = std::atoi(next().c_str()); }},
        {"--block", [&](const auto & next) { a.block = std::atoi(next().c_str()); }},
        {"--default-run", [&](const auto & next) { a.default_run = next() == "1"; }},
    });
    if (a.target.empty() || a.draft.empty() || a.tokens.size() < 2) fail("%s (at least 2 tokens)", usage);
    return a;
}

std::string meta(const llama_model * m, const char * key) {
    char buf[64] = {};
    return llama_model_meta_val_str(m, key, buf, sizeof(buf)) >= 0 ? std::string(buf) : std::string();
}

} // namespace

int main(int argc, char ** argv) {
    const args_t a = parse_args(argc, argv);
    ref::init_backend();

    const ref::target_draft models = ref::load_target_draft(a.target, a.draft, [&](const llama_model * d) {
        if (llama_model_target_layer_ids_n(d) == 0) fail("'%s' is not a DFlash draft (no target layers)", a.draft.c_str());
        if (llama_model_dflash_selector_top_k(d) > 0) fail("'%s' is a DFlash2 draft (selector); this program runs plain DFlash", a.draft.c_str());
    });
    llama_model * model_tgt = models.target;
    llama_model * model_dft = models.draft;
    const uint32_t L = llama_model_target_layer_ids_n(model_dft);
    const int32_t * ids = llama_model_target_layer_ids(model_dft);

    const int32_t n_vocab = models.n_vocab;
    const llama_token mask = llama_vocab_mask(llama_model_get_vocab(model_dft));
    if (mask < 0 || mask >= n_vocab) fail("the draft has no mask token (tokenizer.ggml.mask_token_id)");
    const int32_t E_t = llama_model_n_embd(model_tgt);
    const int32_t E_d = llama_model_n_embd(model_dft);
    const int32_t n_layer_tgt = llama_model_n_layer(model_tgt);
    const int32_t n = (int32_t) a.tokens.size();
    const std::string bs = meta(model_dft, "dflash.block_size");
    const int32_t block_size = bs.empty() ? 16 : std::atoi(bs.c_str());
    const int32_t B = a.block > 0 ? a.block : block_size;
    if (B < 2 || B > block_size) fail("--block %d must be in [2, %d] (dflash.block_size)", B, block_size);
    const int32_t S = a.split >= 0 ? a.split : n / 2;
    if (S >= n - 1) fail("--split %d must be in [0, %d)", S, n - 1);
    const bool causal = meta(model_dft, "dflash.attention.causal") == "true";
    ref::check_tokens(a.tokens, n_vocab);
    for (uint32_t k = 0; k < L; k++) {
        if (ids[k] < 0 || ids[k] >= n_layer_tgt) fail("target layer %d is outside the target's %d layers", ids[k], n_layer_tgt);
    }

    const uint32_t n_ctx = ref::ctx_size(n + B);
    llama_context_params cp = ref::context_params(n_ctx, a.threads, a.default_run);

    // 1. target with the layers' inputs extracted
    llama_context * ctx_tgt = llama_init_from_model(model_tgt, cp);
    if (!ctx_tgt) fail("cannot create the target context");
    const ref::target_pass tp = ref::run_target_layers(ctx_tgt, a.tokens, ids, L, n_layer_tgt, n_vocab, E_t);
    const std::vector<float> & tgt_logits = tp.logits;
    const std::vector<float> & features = tp.features;
    const int32_t E_enc = (int32_t) L * E_t;

    // 2. draft over the target
    llama_context * ctx_dft = ref::draft_context(model_dft, cp, ctx_tgt);
    llama_set_causal_attn(ctx_dft, causal);

    // process(): the feature rows of positions [from, to) into the draft's cache
    auto inject = [&](int32_t from, int32_t to) {
        if (to <= from) return;
        const int32_t m = to - from;
        llama_batch b = llama_batch_init(m, E_enc, 1);
        for (int32_t i = 0; i < m; i++) {
            std::memcpy(b.embd + (size_t) i * E_enc, &features[(size_t) (from + i) * E_enc], sizeof(float) * E_enc);
            set_row(b, i, 0, from + i);
            b.logits[i] = 0;
        }
        b.n_tokens = m;
        const int32_t rc = llama_decode(ctx_dft, b);
        llama_batch_free(b);
        if (rc != 0) fail("draft injection llama_decode failed (rc %d)", rc);
    };
    // draft(): the noise block [last at pos0, mask...], logits for every row
    auto block = [&](llama_token last, int32_t pos0, std::vector<float> & out) {
        out.assign((size_t) B * n_vocab, 0.0f);
        llama_batch b = llama_batch_init(B, 0, 1);
        for (int32_t i = 0; i < B; i++) set_row(b, i, i == 0 ? last : mask, pos0 + i);
        b.n_tokens = B;
        const int32_t rc = llama_decode(ctx_dft, b);
        llama_batch_free(b);
        if (rc != 0) fail("draft block llama_decode failed (rc %d)", rc);
        ref::read_logits(ctx_dft, B, n_vocab, out.data(), "draft block");
    };

    std::vector<float> block1, block2;
    inject(0, S);
    block(a.tokens[S], S, block1);
    if (!llama_memory_seq_rm(llama_get_memory(ctx_dft), 0, S, -1)) fail("cannot trim the draft's cache");
    // 3.
    inject(S, n - 1);
    block(a.tokens[n - 1], n - 1, block2);

    check_values("target logits", tgt_logits);
    check_values("features", features);
    check_values("block 1 logits", block1, true);
    check_values("block 2 logits", block2, true);

    std::vector<llama_token> layers(ids, ids + L);
    const std::string fj = ref::write_arrays(a.out, {{"target_logits", &tgt_logits}, {"features", &features}, {"block1_logits", &block1}, {"block2_logits", &block2}});
    const std::string json = "{\"n_tokens\": " + std::to_string(n) + ", \"n_vocab\": " + std::to_string(n_vocab) +
        ", \"n_embd\": " + std::to_string(E_d) + ", \"n_embd_tgt\": " + std::to_string(E_t) + ", \"n_layer_tgt\": " + std::to_string(n_layer_tgt) +
        ", \"target_layers\": " + json_ints(layers) + ", \"tokens\": " + json_ints(a.tokens) +
        ", \"split\": " + std::to_string(S) + ", \"block\": " + std::to_string(B) + ", \"block_size\": " + std::to_string(block_size) +
        ", \"mask_token\": " + std::to_string(mask) + ", \"causal\": " + (causal ? "true" : "false") +
        ref::draft_report_end(a.target, a.draft, ref::settings_json(a.threads, a.default_run, n_ctx), fj);
    ref::write_report(a.out, json);

    ref::free_target_draft(ctx_dft, ctx_tgt, models);
    return 0;
}
