// quant-ref: llama.cpp's llama-quantize as a reference oracle for `kail quantize`.
//
// node-llama-cpp does not expose quantization; its prebuilt libllama does (llama_model_quantize).
// This program calls it as tools/quantize/quantize.cpp does, without an importance matrix:
//
//   quant-ref --in IN.gguf --out OUT.gguf --ftype N [--threads N] [--pure] [--allow-requantize]
//             [--leave-output-tensor] [--output-tensor-type T] [--token-embedding-type T]
//             [--tensor-type REGEX=T]... [--copy] [--keep-split]
//
// With --keep-split, OUT is the prefix of OUT-0000i-of-0000N.gguf, as llama_model_quantize takes it.
// N is a llama_ftype number (15 = Q4_K_M); T a ggml_type number (14 = Q6_K). REGEX is lowercased,
// as llama-quantize does. Errors: a message on stderr, exit code 1.
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "llama.h"

int main(int argc, char ** argv) {
    llama_model_quantize_params p = llama_model_quantize_default_params();
    std::string in, out;
    bool have_ftype = false;
    std::vector<std::string> patterns;
    std::vector<llama_model_tensor_override> overrides;
    auto next = [&](int & i) -> const char * {
        if (i + 1 >= argc) {
            fprintf(stderr, "quant-ref: %s needs a value\n", argv[i]);
            exit(1);
        }
        return argv[++i];
    };
    std::vector<std::pair<std::string, int>> tt;
    for (int i = 1; i < argc; i++) {
        const std::string a = argv[i];
        if (a == "--in") in = next(i);
        else if (a == "--out") out = next(i);
        else if (a == "--ftype") { p.ftype = (llama_ftype)atoi(next(i)); have_ftype = true; }
        else if (a == "--threads") p.nthread = atoi(next(i));
        else if (a == "--pure") p.pure = true;
        else if (a == "--allow-requantize") p.allow_requantize = true;
        else if (a == "--leave-output-tensor") p.quantize_output_tensor = false;
        else if (a == "--output-tensor-type") p.output_tensor_type = (ggml_type)atoi(next(i));
        else if (a == "--token-embedding-type") p.token_embedding_type = (ggml_type)atoi(next(i));
        else if (a == "--copy") p.only_copy = true;
        else if (a == "--keep-split") p.keep_split = true;
        else if (a == "--tensor-type") {
            const std::string v = next(i);
            const size_t eq = v.find('=');
            if (eq == std::string::npos || eq == 0) {
                fprintf(stderr, "quant-ref: malformed --tensor-type '%s'\n", v.c_str());
                return 1;
            }
            std::string name = v.substr(0, eq);
            for (auto & c : name) c = (char)tolower((unsigned char)c);
            tt.emplace_back(name, atoi(v.c_str() + eq + 1));
        } else {
            fprintf(stderr, "quant-ref: unknown argument %s\n", a.c_str());
            return 1;
        }
    }
    if (in.empty() || out.empty() || !have_ftype) {
        fprintf(stderr, "quant-ref: needs --in, --out and --ftype\n");
        return 1;
    }
    if (!tt.empty()) {
        patterns.reserve(tt.size());
        for (auto & [name, type] : tt) {
            patterns.push_back(name);
            overrides.push_back({nullptr, (ggml_type)type});
        }
        for (size_t i = 0; i < tt.size(); i++) overrides[i].pattern = patterns[i].c_str();
        overrides.push_back({nullptr, GGML_TYPE_COUNT});
        p.tt_overrides = overrides.data();
    }
    llama_log_set([](ggml_log_level level, const char * text, void *) {
        if (level == GGML_LOG_LEVEL_ERROR || getenv("QUANT_REF_VERBOSE")) fputs(text, stderr);
    }, nullptr);
    llama_backend_init();
    const uint32_t rc = llama_model_quantize(in.c_str(), out.c_str(), &p);
    llama_backend_free();
    if (rc != 0) {
        fprintf(stderr, "quant-ref: llama_model_quantize failed (%u)\n", rc);
        return 1;
    }
    return 0;
}
