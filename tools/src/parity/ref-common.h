// Helpers the llama.cpp reference programs (mtp-ref, cvec-ref) share: errors, the log callback,
// token lists, and where node-llama-cpp's backend libraries are. Each program defines
// kRefName (its name in messages) before including this.
#pragma once

#include <dlfcn.h>

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "llama.h"

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

} // namespace ref
