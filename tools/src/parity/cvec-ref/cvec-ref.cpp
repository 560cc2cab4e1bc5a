// cvec-ref: llama.cpp with control vectors as a reference oracle.
//
// node-llama-cpp does not expose control vectors; its prebuilt libllama does
// (llama_set_adapter_cvec). This program does what common_init_from_params does with llama-cli's
// --control-vector-scaled FNAME SCALE ... and --control-vector-layer-range START END, against
// those binaries, on fixed tokens:
//
//   cvec-ref --model M.gguf --tokens 1,2,3 --out PREFIX [--cvec FNAME SCALE]... [--layer-range S E] [--threads N] [--verbose]
//            [--rope-scaling none|linear|yarn] [--rope-freq-base F] [--rope-freq-scale F] [--yarn-orig-ctx N]
//            [--yarn-ext-factor F] [--yarn-beta-fast F] [--yarn-beta-slow F]
//
// The --rope-*/--yarn-* values go into llama_context_params as llama-cli's flags of those names put
// them (common_context_params_to_llama), so llama_context's own rules combine them with the model's.
//
// The control vectors are read as common_control_vector_load reads them (each file's F32
// direction.N tensors, N >= 1, times its scale, summed over files into n_embd floats per layer from
// layer 1), then llama_set_adapter_cvec(ctx, data, len, n_embd, S, E) (S <= 0: 1, E <= 0: the
// model's layer count, as common does). Settings: CPU only, no extra (repacked) weight buffers, F32
// K and V caches, flash attention off, one sequence, one batch of all tokens at positions 0..n-1
// (n_ctx = n_batch = n_ubatch = n rounded up to 256), N threads (default 2).
//
// Output: PREFIX.f32, [n][n_vocab] float32 little-endian (row k: the logits after tokens 0..k), and
// PREFIX.json ({n_tokens, n_vocab, n_embd, n_layer, layer_start, layer_end}). Errors: a message on
// stderr, exit code 1.
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dlfcn.h>
#include <string>
#include <vector>

static const char * const kRefName = "cvec-ref";

#include "ggml.h"
#include "gguf.h"
#include "ggml-backend.h"
#include "llama.h"
#include "ref-common.h"

namespace {

using ref::backend_dir;
using ref::fail;
using ref::log_cb;
using ref::parse_tokens;

struct cvec_file {
    std::string path;
    float scale = 1.0f;
};

struct args_t : ref::common_args {
    std::string model;
    std::vector<cvec_file> cvecs;
    int layer_start = -1, layer_end = -1;
    // llama_context_params' RoPE fields; unset: the library's defaults (the model's values).
    int rope_scaling = LLAMA_ROPE_SCALING_TYPE_UNSPECIFIED;
    float rope_freq_base = 0.0f, rope_freq_scale = 0.0f;
    float yarn_ext_factor = -1.0f, yarn_beta_fast = -1.0f, yarn_beta_slow = -1.0f;
    uint32_t yarn_orig_ctx = 0;
};

args_t parse_args(int argc, char ** argv) {
    args_t a;
    const char * usage = "usage: cvec-ref --model M.gguf --tokens 1,2,3 --out PREFIX [--cvec FNAME SCALE]... [--layer-range S E] [--threads N] [--verbose]";
    const auto f32 = [](float & v) { return [&v](const auto & next) { v = std::strtof(next().c_str(), nullptr); }; };
    ref::parse_args(argc, argv, usage, a, {
        {"--model", [&](const auto & next) { a.model = next(); }},
        {"--cvec", [&](const auto & next) {
            cvec_file f;
            f.path = next();
            f.scale = std::strtof(next().c_str(), nullptr);
            a.cvecs.push_back(f);
        }},
        {"--layer-range", [&](const auto & next) {
            a.layer_start = std::atoi(next().c_str());
            a.layer_end = std::atoi(next().c_str());
        }},
        {"--rope-scaling", [&](const auto & next) {
            const std::string v = next();
            if (v == "none") a.rope_scaling = LLAMA_ROPE_SCALING_TYPE_NONE;
            else if (v == "linear") a.rope_scaling = LLAMA_ROPE_SCALING_TYPE_LINEAR;
            else if (v == "yarn") a.rope_scaling = LLAMA_ROPE_SCALING_TYPE_YARN;
            else fail("--rope-scaling takes none, linear or yarn, got '%s'", v.c_str());
        }},
        {"--rope-freq-base", f32(a.rope_freq_base)},
        {"--rope-freq-scale", f32(a.rope_freq_scale)},
        {"--yarn-orig-ctx", [&](const auto & next) { a.yarn_orig_ctx = (uint32_t) std::atoi(next().c_str()); }},
        {"--yarn-ext-factor", f32(a.yarn_ext_factor)},
        {"--yarn-beta-fast", f32(a.yarn_beta_fast)},
        {"--yarn-beta-slow", f32(a.yarn_beta_slow)},
    });
    if (a.model.empty()) fail("%s", usage);
    return a;
}

// common_control_vector_load_one + common_control_vector_load: sums each file's scaled directions.
void load_cvecs(const std::vector<cvec_file> & files, std::vector<float> & data, int & n_embd) {
    n_embd = -1;
    for (const cvec_file & f : files) {
        ggml_context * ctx = nullptr;
        gguf_init_params gp = {/*no_alloc*/ false, /*ctx*/ &ctx};
        gguf_context * g = gguf_init_from_file(f.path.c_str(), gp);
        if (!g) fail("cannot read control vector '%s'", f.path.c_str());
        const int64_t nt = gguf_get_n_tensors(g);
        for (int64_t i = 0; i < nt; i++) {
            const std::string name = gguf_get_tensor_name(g, i);
            if (name.rfind("direction.", 0) != 0) fail("%s: tensor '%s' is not direction.N", f.path.c_str(), name.c_str());
            const int layer = std::atoi(name.c_str() + 10);
            if (layer <= 0) fail("%s: bad layer index in '%s'", f.path.c_str(), name.c_str());
            ggml_tensor * t = ggml_get_tensor(ctx, name.c_str());
            if (t->type != GGML_TYPE_F32 || ggml_n_dims(t) != 1) fail("%s: '%s' is not a 1-D F32 tensor", f.path.c_str(), name.c_str());
            const int n = (int) ggml_nelements(t);
            if (n_embd == -1) n_embd = n;
            else if (n != n_embd) fail("%s: '%s' has %d values, others %d", f.path.c_str(), name.c_str(), n, n_embd);
            if (data.size() < (size_t) n * layer) data.resize((size_t) n * layer, 0.0f);
            const float * src = (const float *) t->data;
            float * dst = data.data() + (size_t) n * (layer - 1);
            for (int j = 0; j < n; j++) dst[j] += src[j] * f.scale;
        }
        gguf_free(g);
        ggml_free(ctx);
    }
}

} // namespace

int main(int argc, char ** argv) {
    const args_t a = parse_args(argc, argv);
    llama_log_set(log_cb, nullptr);
    std::vector<float> cvec;
    int n_embd_cvec = -1;
    load_cvecs(a.cvecs, cvec, n_embd_cvec);

    ggml_backend_load_all_from_path(backend_dir().c_str());
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.use_extra_bufts = false;
    llama_model * model = llama_model_load_from_file(a.model.c_str(), mp);
    if (!model) fail("llama.cpp could not load '%s' (run with --verbose for its log)", a.model.c_str());
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int32_t n_vocab = llama_vocab_n_tokens(vocab);
    const int32_t n_layer = llama_model_n_layer(model);
    const int32_t n = (int32_t) a.tokens.size();
    for (int32_t k = 0; k < n; k++)
        if (a.tokens[k] >= n_vocab) fail("token %d at index %d out of range [0, %d)", a.tokens[k], k, n_vocab);

    const uint32_t n_ctx = (uint32_t) ((n + 255) / 256 * 256);
    llama_context_params cp = ref::exact_context_params(n_ctx, a.threads);
    cp.rope_scaling_type = (enum llama_rope_scaling_type) a.rope_scaling;
    cp.rope_freq_base = a.rope_freq_base;
    cp.rope_freq_scale = a.rope_freq_scale;
    cp.yarn_ext_factor = a.yarn_ext_factor;
    cp.yarn_beta_fast = a.yarn_beta_fast;
    cp.yarn_beta_slow = a.yarn_beta_slow;
    cp.yarn_orig_ctx = a.yarn_orig_ctx;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) fail("cannot create a context");

    const int start = a.layer_start <= 0 ? 1 : a.layer_start, end = a.layer_end <= 0 ? n_layer : a.layer_end;
    if (!a.cvecs.empty()) {
        if (llama_set_adapter_cvec(ctx, cvec.data(), cvec.size(), n_embd_cvec, start, end) != 0) fail("llama_set_adapter_cvec refused the control vectors (n_embd %d)", n_embd_cvec);
    }

    std::vector<float> logits((size_t) n * n_vocab);
    llama_batch b = llama_batch_init(n, 0, 1);
    for (int32_t k = 0; k < n; k++) {
        b.token[k] = a.tokens[k];
        b.pos[k] = k;
        b.n_seq_id[k] = 1;
        b.seq_id[k][0] = 0;
        b.logits[k] = 1;
    }
    b.n_tokens = n;
    const int32_t rc = llama_decode(ctx, b);
    llama_batch_free(b);
    if (rc != 0) fail("llama_decode failed (rc %d)", rc);
    for (int32_t k = 0; k < n; k++) {
        const float * l = llama_get_logits_ith(ctx, k);
        if (!l) fail("no logits for row %d", k);
        std::memcpy(&logits[(size_t) k * n_vocab], l, sizeof(float) * n_vocab);
    }
    {
        const std::string p = a.out + ".f32";
        FILE * f = std::fopen(p.c_str(), "wb");
        if (!f || std::fwrite(logits.data(), sizeof(float), logits.size(), f) != logits.size() || std::fclose(f) != 0) fail("cannot write '%s'", p.c_str());
    }
    {
        const std::string p = a.out + ".json";
        FILE * f = std::fopen(p.c_str(), "w");
        if (!f) fail("cannot write '%s'", p.c_str());
        std::fprintf(f, "{\"n_tokens\": %d, \"n_vocab\": %d, \"n_embd\": %d, \"n_layer\": %d, \"layer_start\": %d, \"layer_end\": %d}\n", n, n_vocab,
                     n_embd_cvec, n_layer, start, end);
        std::fclose(f);
    }
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
