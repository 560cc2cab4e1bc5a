// Helpers the llama.cpp reference programs (mtp-ref, eagle3-ref, dflash-ref, gemma4-assistant-ref,
// t5-ref, cvec-ref, imatrix-ref) share: errors, the log callback, the command line, token lists,
// where node-llama-cpp's backend libraries are, loading models, the context settings, and for the
// drafting references (mtp-ref, eagle3-ref, dflash-ref, gemma4-assistant-ref) the target's pass,
// batches of tokens with embedding rows, greedy chained draft steps and their output files. Each
// program defines kRefName (its name in messages) before including this.
#pragma once

#include <dlfcn.h>

#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <map>
#include <utility>
#include <string>
#include <vector>

#include "llama.h"
#include "llama-ext.h"

namespace ref {

inline bool g_verbose = false;

[[noreturn]] inline void fail(const char * fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::fprintf(stderr, "%s: ", kRefName);
    std::vfprintf(stderr, fmt, ap);
    std::fprintf(stderr, "\n");
    va_end(ap);
    std::exit(1);
}

inline void log_cb(ggml_log_level level, const char * text, void *) {
    if (g_verbose || level == GGML_LOG_LEVEL_ERROR) std::fputs(text, stderr);
}

// "1,2,3" -> token ids (each a non-negative 32-bit integer).
inline std::vector<llama_token> parse_tokens(const std::string & s) {
    std::vector<llama_token> out;
    size_t i = 0;
    while (i < s.size()) {
        size_t j = s.find(',', i);
        if (j == std::string::npos) j = s.size();
        const std::string part = s.substr(i, j - i);
        char * end = nullptr;
        const long v = std::strtol(part.c_str(), &end, 10);
        if (part.empty() || *end != '\0' || v < 0 || v > INT32_MAX) fail("bad token '%s' in --tokens (want comma-separated non-negative integers)", part.c_str());
        out.push_back((llama_token) v);
        i = j + 1;
    }
    return out;
}

// Fails unless every id is a token of an n_vocab vocabulary ("WHAT ID at index K out of range").
inline void check_tokens(const std::vector<llama_token> & tokens, int32_t n_vocab, const char * what = "token") {
    for (size_t k = 0; k < tokens.size(); k++) {
        if (tokens[k] < 0 || tokens[k] >= n_vocab) fail("%s %d at index %d out of range [0, %d)", what, tokens[k], (int) k, n_vocab);
    }
}

// What every reference program's command line has: --out PREFIX, --tokens 1,2,3 (required),
// --threads N (>= 1) and --verbose. Each program's own flags are handlers in `own`, which take
// their values through next() (failing, naming the flag, where the line ends).
struct common_args {
    std::string out;
    std::vector<llama_token> tokens;
    int threads = 2;
};
using arg_handler = std::function<void(const std::function<std::string()> & next)>;

inline void parse_args(int argc, char ** argv, const char * usage, common_args & a, const std::map<std::string, arg_handler> & own) {
    for (int i = 1; i < argc; i++) {
        const std::string k = argv[i];
        const std::function<std::string()> next = [&]() -> std::string {
            if (i + 1 >= argc) fail("%s needs a value", k.c_str());
            return argv[++i];
        };
        if (k == "--out") a.out = next();
        else if (k == "--tokens") a.tokens = parse_tokens(next());
        else if (k == "--threads") a.threads = std::atoi(next().c_str());
        else if (k == "--verbose") g_verbose = true;
        else if (const auto it = own.find(k); it != own.end()) it->second(next);
        else fail("unknown argument '%s' (%s)", k.c_str(), usage);
    }
    if (a.out.empty() || a.tokens.empty()) fail("%s", usage);
    if (a.threads < 1) fail("--threads must be >= 1");
}

// The backends of a GGML_BACKEND_DL build (node-llama-cpp's) are separate libraries next to
// libggml; find that directory through this process's own libllama.
inline std::string backend_dir() {
    Dl_info info{};
    if (dladdr((void *) &llama_backend_init, &info) == 0 || info.dli_fname == nullptr) fail("cannot locate libllama (dladdr failed)");
    std::string p = info.dli_fname;
    const size_t slash = p.rfind('/');
    return slash == std::string::npos ? std::string(".") : p.substr(0, slash);
}

// llama.cpp's log through log_cb (errors only, unless --verbose), node-llama-cpp's backends loaded,
// the backend initialised.
inline void init_backend() {
    llama_log_set(log_cb, nullptr);
    ggml_backend_load_all_from_path(backend_dir().c_str());
    llama_backend_init();
}

// A model on the CPU (no GPU layers) without extra (repacked) weight buffers: the reference computes
// from the file's layout (and on AMX CPUs those buffers fail MoE graphs); `load_mtp`: with its
// MTP (NextN) layers. A file that cannot be opened, or that llama.cpp refuses, fails by name.
inline llama_model * load_model(const std::string & path, bool load_mtp = false) {
    FILE * f = std::fopen(path.c_str(), "rb");
    if (!f) fail("cannot open model '%s': %s", path.c_str(), std::strerror(errno));
    std::fclose(f);
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.load_mtp = load_mtp;
    mp.use_extra_bufts = false;
    llama_model * m = llama_model_load_from_file(path.c_str(), mp);
    if (!m) fail("llama.cpp could not load '%s' (run with --verbose for its log)", path.c_str());
    return m;
}

// A drafting reference's two models: the target, then the draft (load_model), its kind checked by
// `check_kind` (where given) before its vocabulary, which must be the target's.
struct target_draft {
    llama_model * target;
    llama_model * draft;
    int32_t n_vocab;
};
inline target_draft load_target_draft(const std::string & target, const std::string & draft, const std::function<void(const llama_model *)> & check_kind = nullptr) {
    target_draft m{load_model(target), load_model(draft), 0};
    if (check_kind) check_kind(m.draft);
    m.n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(m.target));
    if (llama_vocab_n_tokens(llama_model_get_vocab(m.draft)) != m.n_vocab) fail("the draft's vocabulary differs from the target's");
    return m;
}

// n_ctx for `rows` positions: rounded up to a multiple of 256.
inline uint32_t ctx_size(int32_t rows) {
    return (uint32_t) ((rows + 255) / 256 * 256);
}

// The exact reference's context: one sequence, one ubatch of n_ctx, F32 K and V caches, flash
// attention off.
inline llama_context_params exact_context_params(uint32_t n_ctx, int threads) {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = n_ctx;
    cp.n_ubatch = n_ctx;
    cp.n_seq_max = 1;
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    cp.type_k = GGML_TYPE_F32;
    cp.type_v = GGML_TYPE_F32;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.no_perf = true;
    return cp;
}

// The same with llama.cpp's defaults where `default_run`: F16 K and V caches, flash attention auto
// (the run a quantized file's spread is measured against).
inline llama_context_params context_params(uint32_t n_ctx, int threads, bool default_run) {
    llama_context_params cp = exact_context_params(n_ctx, threads);
    if (default_run) {
        cp.type_k = GGML_TYPE_F16;
        cp.type_v = GGML_TYPE_F16;
        cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_AUTO;
    }
    return cp;
}

// The report's "settings" member for those contexts; `extra`: further members (", \"k\": v").
inline std::string settings_json(int threads, bool default_run, uint32_t n_ctx, const std::string & extra = "") {
    return "\"settings\": {\"threads\": " + std::to_string(threads) + ", \"kv\": \"" + (default_run ? "f16" : "f32") + "\", \"flash_attention\": \"" +
        (default_run ? "auto" : "off") + "\", \"n_ctx\": " + std::to_string(n_ctx) + extra + "}";
}

// A draft's context over its target's (ctx_other: the target's token_embd / output or KV cache,
// where the draft reads them), its NextN rows masked as common/speculative.cpp sets them.
inline llama_context * draft_context(llama_model * draft, llama_context_params cp, llama_context * target) {
    cp.ctx_other = target;
    llama_context * ctx = llama_init_from_model(draft, cp);
    if (!ctx) fail("cannot create the draft context");
    llama_set_embeddings_nextn(ctx, true, /*masked*/ true);
    return ctx;
}

// Row k of a batch: token at pos (when the batch has token ids), sequence 0, logits wanted.
inline void set_row(llama_batch & b, int32_t k, llama_token token, llama_pos pos) {
    if (b.token) b.token[k] = token;
    b.pos[k] = pos;
    b.n_seq_id[k] = 1;
    b.seq_id[k][0] = 0;
    b.logits[k] = 1;
}

// A batch with both token ids and embedding rows, as common/speculative.cpp makes it:
// llama_batch_init allocates embd only, token is malloc'ed beside it.
struct token_embd_batch {
    llama_batch b;
    token_embd_batch(int32_t n, int32_t width) {
        b = llama_batch_init(n, width, 1);
        b.token = (llama_token *) std::malloc(sizeof(llama_token) * n);
        if (!b.token) fail("out of memory");
    }
    ~token_embd_batch() {
        std::free(b.token);
        b.token = nullptr;
        llama_batch_free(b);
    }
    token_embd_batch(const token_embd_batch &) = delete;
    token_embd_batch & operator=(const token_embd_batch &) = delete;
};

// Copies rows 0..n-1 of a context's logits and its NextN rows (llama_get_embeddings_nextn_ith,
// `width` floats each) out.
inline void read_rows(llama_context * ctx, int32_t n, int32_t n_vocab, int32_t width, float * logits, float * rows, const char * what) {
    for (int32_t k = 0; k < n; k++) {
        const float * l = llama_get_logits_ith(ctx, k);
        const float * h = llama_get_embeddings_nextn_ith(ctx, k);
        if (!l || !h) fail("%s: no logits or NextN row for row %d", what, k);
        std::memcpy(logits + (size_t) k * n_vocab, l, sizeof(float) * n_vocab);
        std::memcpy(rows + (size_t) k * width, h, sizeof(float) * width);
    }
}

// Copies rows 0..n-1 of a context's logits out.
inline void read_logits(llama_context * ctx, int32_t n, int32_t n_vocab, float * logits, const char * what) {
    for (int32_t k = 0; k < n; k++) {
        const float * l = llama_get_logits_ith(ctx, k);
        if (!l) fail("%s: no logits for row %d", what, k);
        std::memcpy(logits + (size_t) k * n_vocab, l, sizeof(float) * n_vocab);
    }
}

// One batch of tokens[k] at pos k (logits for every row) through llama_decode, or llama_encode
// where `encode`; `what` names the call in the error.
inline void run_tokens(llama_context * ctx, const std::vector<llama_token> & tokens, const char * what, bool encode = false) {
    const int32_t n = (int32_t) tokens.size();
    llama_batch b = llama_batch_init(n, 0, 1);
    for (int32_t k = 0; k < n; k++) set_row(b, k, tokens[k], k);
    b.n_tokens = n;
    const int32_t rc = encode ? llama_encode(ctx, b) : llama_decode(ctx, b);
    llama_batch_free(b);
    if (rc != 0) fail("%s failed (rc %d)", what, rc);
}

// One row of a one-row batch through llama_decode: token at pos, with `embd` (`width` floats) as
// its embedding row when given; its logits and NextN row out (read_rows).
inline void decode_row(llama_context * ctx, llama_batch & b, llama_token token, llama_pos pos, const float * embd, int32_t width, int32_t n_vocab, float * logits, float * row, const std::string & what) {
    set_row(b, 0, token, pos);
    if (embd) std::memcpy(b.embd, embd, sizeof(float) * width);
    b.n_tokens = 1;
    const int32_t rc = llama_decode(ctx, b);
    if (rc != 0) fail("%s: llama_decode failed (rc %d)", what.c_str(), rc);
    read_rows(ctx, 1, n_vocab, width, logits, row, what.c_str());
}

// The token with the largest logit (the lowest id on ties).
inline llama_token argmax(const float * l, int32_t n_vocab) {
    llama_token d = 0;
    for (int32_t v = 1; v < n_vocab; v++) {
        if (l[v] > l[d]) d = v;
    }
    return d;
}

// NaN or +inf anywhere, or -inf where `neg_inf_ok` is false, is an error (a d2t draft vocabulary
// leaves -inf outside its ids).
inline void check_values(const char * what, const std::vector<float> & v, bool neg_inf_ok = false) {
    for (size_t i = 0; i < v.size(); i++) {
        if (std::isnan(v[i]) || (std::isinf(v[i]) && (v[i] > 0 || !neg_inf_ok))) fail("%s: value %g at index %zu", what, (double) v[i], i);
    }
}

// The target's pass for a draft that reads its hidden states (EAGLE-3, DFlash): the inputs of
// target layers ids[0..L-1] extracted (an id equal to the target's n_layer: its h_nextn, where its
// graph has one), then one batch tokens[k] at pos k.
//   logits   [n][n_vocab]
//   features [n][L * n_embd]  row k = the layers' rows at pos k, concatenated
struct target_pass {
    std::vector<float> logits, features;
};
inline target_pass run_target_layers(llama_context * ctx, const std::vector<llama_token> & tokens, const int32_t * ids, uint32_t L, int32_t n_layer, int32_t n_vocab, int32_t n_embd) {
    for (uint32_t j = 0; j < L; j++) {
        if (ids[j] < n_layer) llama_set_embeddings_layer_inp(ctx, (uint32_t) ids[j], true);
        else llama_set_embeddings_nextn(ctx, true, /*masked*/ false);
    }
    const int32_t n = (int32_t) tokens.size();
    const size_t width = (size_t) L * n_embd;
    target_pass out{std::vector<float>((size_t) n * n_vocab), std::vector<float>((size_t) n * width)};
    run_tokens(ctx, tokens, "target llama_decode");
    read_logits(ctx, n, n_vocab, out.logits.data(), "target");
    for (uint32_t j = 0; j < L; j++) {
        const float * layer = ids[j] < n_layer ? llama_get_embeddings_layer_inp(ctx, (uint32_t) ids[j]) : llama_get_embeddings_nextn(ctx);
        if (!layer) fail("target layer %d: no extracted hidden states", ids[j]);
        for (int32_t k = 0; k < n; k++) std::memcpy(&out.features[(size_t) k * width + (size_t) j * n_embd], layer + (size_t) k * n_embd, sizeof(float) * n_embd);
    }
    return out;
}

// K greedy draft steps, as the drafting loops of common/speculative.cpp: step j feeds the argmax
// of the previous logits at position start + j * pos_step (a Gemma 4 assistant's steps all sit at
// one position: pos_step 0) with the previous NextN row as its embedding.
struct draft_steps {
    std::vector<float> logits, rows;
    std::vector<llama_token> tokens;
};
inline draft_steps greedy_draft_steps(llama_context * ctx, const float * prev_l, const float * prev_h, int32_t n_vocab, int32_t width, int32_t K, llama_pos start, const char * what, llama_pos pos_step = 1) {
    draft_steps out{std::vector<float>((size_t) K * n_vocab), std::vector<float>((size_t) K * width), std::vector<llama_token>(K)};
    token_embd_batch tb(1, width);
    for (int32_t j = 0; j < K; j++) {
        out.tokens[j] = argmax(prev_l, n_vocab);
        decode_row(ctx, tb.b, out.tokens[j], start + j * pos_step, prev_h, width, n_vocab, &out.logits[(size_t) j * n_vocab], &out.rows[(size_t) j * width], std::string(what) + " draft step " + std::to_string(j));
        prev_l = &out.logits[(size_t) j * n_vocab];
        prev_h = &out.rows[(size_t) j * width];
    }
    return out;
}

inline std::string json_str(const std::string & s) {
    std::string o = "\"";
    for (char c : s) {
        if (c == '"' || c == '\\') { o += '\\'; o += c; }
        else if ((unsigned char) c < 0x20) { char b[8]; std::snprintf(b, sizeof b, "\\u%04x", c); o += b; }
        else o += c;
    }
    return o + "\"";
}

inline std::string json_ints(const std::vector<llama_token> & v) {
    std::string o;
    for (size_t i = 0; i < v.size(); i++) o += (i ? "," : "") + std::to_string(v[i]);
    return "[" + o + "]";
}

inline void write_f32(const std::string & path, const float * data, size_t n) {
    FILE * f = std::fopen(path.c_str(), "wb");
    if (!f) fail("cannot write '%s': %s", path.c_str(), std::strerror(errno));
    if (std::fwrite(data, sizeof(float), n, f) != n) fail("short write to '%s'", path.c_str());
    if (std::fclose(f) != 0) fail("cannot close '%s'", path.c_str());
}

// Writes each array to PREFIX.NAME.f32 (float32, row-major, little-endian); returns the JSON
// members naming them ("NAME": "PATH", ...).
inline std::string write_arrays(const std::string & prefix, std::initializer_list<std::pair<const char *, const std::vector<float> *>> files) {
    std::string members;
    for (const auto & [name, v] : files) {
        const std::string path = prefix + "." + name + ".f32";
        write_f32(path, v->data(), v->size());
        members += (members.empty() ? "" : ", ") + json_str(name) + ": " + json_str(path);
    }
    return members;
}

// The report: PREFIX.json and the same line on stdout.
inline void write_report(const std::string & prefix, const std::string & json) {
    const std::string path = prefix + ".json";
    FILE * f = std::fopen(path.c_str(), "wb");
    if (!f) fail("cannot write '%s': %s", path.c_str(), std::strerror(errno));
    std::fprintf(f, "%s\n", json.c_str());
    if (std::fclose(f) != 0) fail("cannot close '%s'", path.c_str());
    std::printf("%s\n", json.c_str());
}

// The end of a drafting reference's report: the two models' paths, the settings member
// (settings_json) and the files (write_arrays).
inline std::string draft_report_end(const std::string & target, const std::string & draft, const std::string & settings, const std::string & files) {
    return ", \"target\": " + json_str(target) + ", \"draft\": " + json_str(draft) + ", " + settings + ", \"files\": {" + files + "}}";
}

// Frees a drafting reference's contexts (the draft's first) and models, then the backend.
inline void free_target_draft(llama_context * ctx_draft, llama_context * ctx_target, const target_draft & m) {
    llama_free(ctx_draft);
    llama_free(ctx_target);
    llama_model_free(m.draft);
    llama_model_free(m.target);
    llama_backend_free();
}

} // namespace ref
