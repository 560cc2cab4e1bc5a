// Helpers the llama.cpp reference programs (mtp-ref, eagle3-ref, gemma4-assistant-ref, t5-ref,
// cvec-ref, imatrix-ref) share: errors, the log callback, the command line, token lists, where node-llama-cpp's backend libraries are, and for the
// drafting references (mtp-ref, eagle3-ref) batches of tokens with embedding rows, greedy chained
// draft steps and their output files. Each program defines
// kRefName (its name in messages) before including this.
#pragma once

#include <dlfcn.h>

#include <cerrno>
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

// The backends of a GGML_BACKEND_DL build (node-llama-cpp's) are separate libraries next to
// libggml; find that directory through this process's own libllama.
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

inline std::string backend_dir() {
    Dl_info info{};
    if (dladdr((void *) &llama_backend_init, &info) == 0 || info.dli_fname == nullptr) fail("cannot locate libllama (dladdr failed)");
    std::string p = info.dli_fname;
    const size_t slash = p.rfind('/');
    return slash == std::string::npos ? std::string(".") : p.substr(0, slash);
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

// K greedy draft steps, as the drafting loops of common/speculative.cpp: step j feeds the argmax
// of the previous logits at position start + j with the previous NextN row as its embedding.
struct draft_steps {
    std::vector<float> logits, rows;
    std::vector<llama_token> tokens;
};
inline draft_steps greedy_draft_steps(llama_context * ctx, const float * prev_l, const float * prev_h, int32_t n_vocab, int32_t width, int32_t K, llama_pos start, const char * what) {
    draft_steps out{std::vector<float>((size_t) K * n_vocab), std::vector<float>((size_t) K * width), std::vector<llama_token>(K)};
    token_embd_batch tb(1, width);
    llama_batch & b = tb.b;
    for (int32_t j = 0; j < K; j++) {
        llama_token d = 0;
        for (int32_t v = 1; v < n_vocab; v++) {
            if (prev_l[v] > prev_l[d]) d = v;
        }
        out.tokens[j] = d;
        set_row(b, 0, d, start + j);
        std::memcpy(b.embd, prev_h, sizeof(float) * width);
        b.n_tokens = 1;
        const int32_t rc = llama_decode(ctx, b);
        if (rc != 0) fail("%s draft step %d: llama_decode failed (rc %d)", what, j, rc);
        read_rows(ctx, 1, n_vocab, width, &out.logits[(size_t) j * n_vocab], &out.rows[(size_t) j * width], what);
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

} // namespace ref
