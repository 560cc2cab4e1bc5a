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

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using ref::backend_dir;
using ref::fail;
using ref::log_cb;
using ref::json_ints;
using ref::json_str;
using ref::parse_tokens;
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

// NaN or +inf anywhere, or -inf where `neg_inf_ok` is false, is an error (d2t leaves -inf outside its ids).
void check_values(const char * what, const std::vector<float> & v, bool neg_inf_ok = false) {
    for (size_t i = 0; i < v.size(); i++) {
        if (std::isnan(v[i]) || (std::isinf(v[i]) && (v[i] > 0 || !neg_inf_ok))) fail("%s: value %g at index %zu", what, (double) v[i], i);
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

std::string meta(const llama_model * m, const char * key) {
    char buf[64] = {};
    return llama_model_meta_val_str(m, key, buf, sizeof(buf)) >= 0 ? std::string(buf) : std::string();
}

} // namespace

int main(int argc, char ** argv) {
    const args_t a = parse_args(argc, argv);
    llama_log_set(log_cb, nullptr);
    ggml_backend_load_all_from_path(backend_dir().c_str());
    llama_backend_init();

    llama_model * model_tgt = load(a.target);
    llama_model * model_dft = load(a.draft);
    const uint32_t L = llama_model_target_layer_ids_n(model_dft);
    if (L == 0) fail("'%s' is not a DFlash draft (no target layers)", a.draft.c_str());
    if (llama_model_dflash_selector_top_k(model_dft) > 0) fail("'%s' is a DFlash2 draft (selector); this program runs plain DFlash", a.draft.c_str());
    const int32_t * ids = llama_model_target_layer_ids(model_dft);

    const int32_t n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model_tgt));
    if (llama_vocab_n_tokens(llama_model_get_vocab(model_dft)) != n_vocab) fail("the draft's vocabulary differs from the target's");
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
    for (int32_t k = 0; k < n; k++) {
        if (a.tokens[k] < 0 || a.tokens[k] >= n_vocab) fail("token %d at index %d out of range [0, %d)", a.tokens[k], k, n_vocab);
    }
    for (uint32_t k = 0; k < L; k++) {
        if (ids[k] < 0 || ids[k] >= n_layer_tgt) fail("target layer %d is outside the target's %d layers", ids[k], n_layer_tgt);
    }

    const uint32_t n_ctx = (uint32_t) ((n + B + 255) / 256 * 256);
    llama_context_params cp = ref::exact_context_params(n_ctx, a.threads);
    if (a.default_run) {
        cp.type_k = GGML_TYPE_F16;
        cp.type_v = GGML_TYPE_F16;
        cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_AUTO;
    }

    // 1. target with the layers' inputs extracted
    llama_context * ctx_tgt = llama_init_from_model(model_tgt, cp);
    if (!ctx_tgt) fail("cannot create the target context");
    for (uint32_t k = 0; k < L; k++) llama_set_embeddings_layer_inp(ctx_tgt, (uint32_t) ids[k], true);
    const int32_t E_enc = (int32_t) L * E_t;
    std::vector<float> tgt_logits((size_t) n * n_vocab), features((size_t) n * E_enc);
    {
        llama_batch b = llama_batch_init(n, 0, 1);
        for (int32_t k = 0; k < n; k++) set_row(b, k, a.tokens[k], k);
        b.n_tokens = n;
        const int32_t rc = llama_decode(ctx_tgt, b);
        llama_batch_free(b);
        if (rc != 0) fail("target llama_decode failed (rc %d)", rc);
        for (int32_t k = 0; k < n; k++) {
            const float * l = llama_get_logits_ith(ctx_tgt, k);
            if (!l) fail("target: no logits for row %d", k);
            std::memcpy(&tgt_logits[(size_t) k * n_vocab], l, sizeof(float) * n_vocab);
        }
        for (uint32_t j = 0; j < L; j++) {
            const float * layer = llama_get_embeddings_layer_inp(ctx_tgt, (uint32_t) ids[j]);
            if (!layer) fail("target layer %d: no extracted hidden states", ids[j]);
            for (int32_t k = 0; k < n; k++) std::memcpy(&features[(size_t) k * E_enc + (size_t) j * E_t], layer + (size_t) k * E_t, sizeof(float) * E_t);
        }
    }

    // 2. draft over the target
    cp.ctx_other = ctx_tgt;
    llama_context * ctx_dft = llama_init_from_model(model_dft, cp);
    if (!ctx_dft) fail("cannot create the draft context");
    llama_set_embeddings_nextn(ctx_dft, true, /*masked*/ true);
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
        for (int32_t i = 0; i < B; i++) {
            const float * l = llama_get_logits_ith(ctx_dft, i);
            if (!l) fail("draft: no logits for block row %d", i);
            std::memcpy(&out[(size_t) i * n_vocab], l, sizeof(float) * n_vocab);
        }
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
        ", \"target\": " + json_str(a.target) + ", \"draft\": " + json_str(a.draft) +
        ", \"settings\": {\"threads\": " + std::to_string(a.threads) + ", \"kv\": \"" + std::string(a.default_run ? "f16" : "f32") + "\", \"flash_attention\": \"" + (a.default_run ? "auto" : "off") + "\", \"n_ctx\": " + std::to_string(n_ctx) + "}" +
        ", \"files\": {" + fj + "}}";
    ref::write_report(a.out, json);

    llama_free(ctx_dft);
    llama_free(ctx_tgt);
    llama_model_free(model_dft);
    llama_model_free(model_tgt);
    llama_backend_free();
    return 0;
}
