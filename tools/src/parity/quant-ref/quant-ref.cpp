// quant-ref: llama.cpp's llama-quantize as a reference oracle for `kail quantize`.
//
// node-llama-cpp does not expose quantization; its prebuilt libllama does (llama_model_quantize).
// This program calls it as tools/quantize/quantize.cpp does:
//
//   quant-ref --in IN.gguf --out OUT.gguf --ftype N [--threads N] [--pure] [--allow-requantize]
//             [--leave-output-tensor] [--output-tensor-type T] [--token-embedding-type T]
//             [--tensor-type REGEX=T]... [--copy] [--keep-split] [--prune-layers I,J,...]
//             [--imatrix-values FILE] [--kv-str KEY=VALUE]... [--kv-u32 KEY=N]...
//             [--kv-f64 KEY=X]... [--kv-bool KEY=true|false]...
//
// --imatrix-values: the importance values llama-quantize's load_imatrix would pass (already
// divided by their counts), as u32 n_entries, then per entry u32 name length, the name, u32 n,
// n f32. (The file formats are read by llama.cpp's common library, which node-llama-cpp does not
// ship; the caller reads them.) --kv-str/--kv-u32/--kv-f64/--kv-bool: metadata overrides
// (llama_model_kv_override STR/INT/FLOAT/BOOL), in the order given: llama-quantize's
// --override-kv values, then those it adds with an imatrix (quantize.imatrix.file, ...).
//
//   quant-ref --batch JOBS
//
// --batch: one process for many jobs, so ggml's codebook tables (IQ1_S/IQ1_M's take about 12 s to
// build, IQ2_S's 5 s) are built once: JOBS holds one job per line, its arguments (those above)
// separated by tabs. Each job prints "job I: ok" or "job I: error: MESSAGE" on stdout and the run
// goes on; the exit code is 0 once JOBS has been read (the lines say which jobs failed).
//
// With --keep-split, OUT is the prefix of OUT-0000i-of-0000N.gguf, as llama_model_quantize takes it.
// N is a llama_ftype number (15 = Q4_K_M); T a ggml_type number (14 = Q6_K). REGEX is lowercased,
// as llama-quantize does. Errors: a message on stderr, exit code 1.
#include <algorithm>
#include <cctype>
#include <cstdint>
#include <fstream>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "llama.h"

// llama.cpp's error messages during the current job, for its result line.
static std::string g_log_errors;

// One quantization, from its arguments; throws std::runtime_error naming what is wrong.
static void run_job(const std::vector<std::string> & argv) {
    const int argc = (int) argv.size();
    llama_model_quantize_params p = llama_model_quantize_default_params();
    std::string in, out;
    bool have_ftype = false;
    std::vector<std::string> patterns;
    std::vector<llama_model_tensor_override> overrides;
    auto fail = [](const std::string & msg) { throw std::runtime_error(msg); };
    auto next = [&](int & i) -> const char * {
        if (i + 1 >= argc) fail(argv[i] + " needs a value");
        return argv[++i].c_str();
    };
    std::vector<std::pair<std::string, int>> tt;
    std::vector<std::string> im_names;
    std::vector<std::vector<float>> im_values;
    std::vector<llama_model_kv_override> kvo;
    std::vector<int32_t> prune;
    auto kv_split = [&](const std::string & v, std::string & key, std::string & val) {
        const size_t eq = v.find('=');
        if (eq == std::string::npos || eq == 0 || eq >= 128) fail("malformed KEY=VALUE '" + v + "'");
        key = v.substr(0, eq);
        val = v.substr(eq + 1);
    };
    for (int i = 0; i < argc; i++) {
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
        else if (a == "--prune-layers") {
            // Sorted, without repeats, as llama-quantize's parse_layer_prune hands them over.
            const std::string v = next(i);
            for (size_t at = 0; at <= v.size();) {
                const size_t comma = std::min(v.find(',', at), v.size());
                prune.push_back((int32_t) atoi(v.substr(at, comma - at).c_str()));
                at = comma + 1;
            }
            std::sort(prune.begin(), prune.end());
            prune.erase(std::unique(prune.begin(), prune.end()), prune.end());
        }
        else if (a == "--imatrix-values") {
            std::ifstream f(next(i), std::ios::binary);
            uint32_t n = 0;
            f.read((char *)&n, 4);
            for (uint32_t e = 0; e < n && f; e++) {
                uint32_t len = 0, cnt = 0;
                f.read((char *)&len, 4);
                std::string name(len, '\0');
                f.read(name.data(), len);
                f.read((char *)&cnt, 4);
                std::vector<float> v(cnt);
                f.read((char *)v.data(), (std::streamsize)cnt * 4);
                im_names.push_back(name);
                im_values.push_back(std::move(v));
            }
            if (!f) fail("--imatrix-values file is malformed");
        } else if (a == "--kv-str" || a == "--kv-u32" || a == "--kv-f64" || a == "--kv-bool") {
            std::string key, val;
            kv_split(next(i), key, val);
            llama_model_kv_override o{};
            std::strcpy(o.key, key.c_str());
            if (a == "--kv-str") {
                o.tag = LLAMA_KV_OVERRIDE_TYPE_STR;
                strncpy(o.val_str, val.c_str(), 127);
                o.val_str[127] = '\0';
            } else if (a == "--kv-f64") {
                o.tag = LLAMA_KV_OVERRIDE_TYPE_FLOAT;
                o.val_f64 = atof(val.c_str());
            } else if (a == "--kv-bool") {
                o.tag = LLAMA_KV_OVERRIDE_TYPE_BOOL;
                o.val_bool = val == "true";
            } else {
                o.tag = LLAMA_KV_OVERRIDE_TYPE_INT;
                o.val_i64 = atoll(val.c_str());
            }
            kvo.push_back(o);
        } else if (a == "--tensor-type") {
            const std::string v = next(i);
            const size_t eq = v.find('=');
            if (eq == std::string::npos || eq == 0) fail("malformed --tensor-type '" + v + "'");
            std::string name = v.substr(0, eq);
            for (auto & c : name) c = (char)tolower((unsigned char)c);
            tt.emplace_back(name, atoi(v.c_str() + eq + 1));
        } else {
            fail("unknown argument " + a);
        }
    }
    if (in.empty() || out.empty() || !have_ftype) fail("needs --in, --out and --ftype");
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
    std::vector<llama_model_imatrix_data> i_data;
    if (!im_names.empty()) {
        for (size_t e = 0; e < im_names.size(); e++) i_data.push_back({im_names[e].c_str(), im_values[e].data(), im_values[e].size()});
        i_data.push_back({nullptr, nullptr, 0});
        p.imatrix = i_data.data();
    }
    if (!kvo.empty()) {
        kvo.emplace_back();
        kvo.back().key[0] = 0;
        p.kv_overrides = kvo.data();
    }
    if (!prune.empty()) {
        prune.push_back(-1);
        p.prune_layers = prune.data();
    }
    const uint32_t rc = llama_model_quantize(in.c_str(), out.c_str(), &p);
    if (rc != 0) {
        std::string why = g_log_errors;
        for (auto & c : why) if (c == '\n') c = ' ';
        while (!why.empty() && why.back() == ' ') why.pop_back();
        fail("llama_model_quantize failed (" + std::to_string(rc) + ")" + (why.empty() ? "" : ": " + why));
    }
}

int main(int argc, char ** argv) {
    llama_log_set([](ggml_log_level level, const char * text, void *) {
        if (level == GGML_LOG_LEVEL_ERROR) g_log_errors += text;
        if (level == GGML_LOG_LEVEL_ERROR || getenv("QUANT_REF_VERBOSE")) fputs(text, stderr);
    }, nullptr);
    llama_backend_init();
    int status = 0;
    if (argc == 3 && std::string(argv[1]) == "--batch") {
        std::ifstream f(argv[2]);
        if (!f) {
            fprintf(stderr, "quant-ref: cannot read %s\n", argv[2]);
            return 1;
        }
        std::string line;
        for (int job = 0; std::getline(f, line); job++) {
            std::vector<std::string> args;
            std::stringstream ss(line);
            for (std::string a; std::getline(ss, a, '\t');) args.push_back(a);
            g_log_errors.clear();
            try {
                run_job(args);
                printf("job %d: ok\n", job);
            } catch (const std::exception & e) {
                printf("job %d: error: %s\n", job, e.what());
            }
            fflush(stdout);
        }
    } else {
        try {
            run_job(std::vector<std::string>(argv + 1, argv + argc));
        } catch (const std::exception & e) {
            fprintf(stderr, "quant-ref: %s\n", e.what());
            status = 1;
        }
    }
    llama_backend_free();
    return status;
}
