// Generates llama-cpp-samplers.json: what llama.cpp's samplers beyond the fast chain do (DRY,
// top-n-sigma, typical, XTC, dynamic temperature, min_keep, Mirostat 1 and 2, adaptive-p), for
// sampler.spec.ts / dry.spec.ts to replay:
//   "chains": the tokens common/sampling.cpp's default chain picks for seeded runs over synthetic
//             logits (the same hash as gen-llama-cpp-sampling.cpp), after a prompt;
//   "dry":    the logits llama_sampler_init_dry leaves, with string sequence breakers, on a real
//             vocabulary (loaded vocab-only from a GGUF) over a given history.
//
// No llama.cpp build is needed: node-llama-cpp ships libllama; compile against the headers of the
// llama.cpp source it bundles (llama/gitRelease.bundle, `git archive HEAD include ggml/include`):
//   B=node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
//   g++ -O2 -std=c++17 gen-llama-cpp-samplers.cpp -I$INC/include -I$INC/ggml/include \
//       $B/libllama.v0.5.0.so $B/libggml.v0.5.0.so $B/libggml-base.so -Wl,-rpath,$B -o gen
//   ./gen ../../../../../../shared/fixtures/tokenizers/ggml-vocab-llama-spm.gguf > llama-cpp-samplers.json
#include "llama.h"

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

// Declared in src/llama-sampler.h (not the public header): DRY with token-id sequence breakers.
struct llama_sampler * llama_sampler_init_dry_testing(float dry_multiplier, float dry_base, int32_t dry_allowed_length,
                                                      int32_t dry_penalty_last_n,
                                                      const std::vector<std::vector<llama_token>> & seq_breakers);

struct config {
    const char * name;
    int32_t n_vocab;
    double scale;
    float temp;
    int32_t top_k;
    float top_p, min_p;
    int32_t last_n;
    float repeat, freq, present;
    float typ_p, top_n_sigma, xtc_p, xtc_t;
    int32_t min_keep;
    float dyn_range, dyn_exp;
    float dry_mult, dry_base;
    int32_t dry_allowed, dry_last_n;
    std::vector<std::vector<llama_token>> breakers;
    int32_t mirostat;
    float tau, eta;
    std::vector<llama_token> prompt;
    uint32_t seed;
    int steps;
    // The chain's order as llama.cpp's sampler chars (e d s k y p m x t, and a: adaptive-p, which
    // common/sampling.cpp puts last in place of dist); nullptr: the default.
    const char * order = nullptr;
    float adaptive_target = -1.0f, adaptive_decay = 0.9f;
};

static uint32_t mix(uint32_t x) {
    x ^= x >> 16; x *= 0x7feb352dU; x ^= x >> 15; x *= 0x846ca68bU; x ^= x >> 16;
    return x;
}

static float logit_at(uint32_t step, uint32_t i, double scale) {
    const uint32_t u = mix(step * 0x9e3779b9U ^ i * 0x85ebca6bU);
    return (float) (((double) (u % 2000001U) / 100000.0 - 10.0) * scale);
}

static void print_ids(const std::vector<llama_token> & v) {
    printf("[");
    for (size_t i = 0; i < v.size(); i++) printf("%s%d", i ? ", " : "", v[i]);
    printf("]");
}

// common_sampler_init's chain for these params (no grammar, no logit bias).
static llama_sampler * make_chain(const config & c) {
    llama_sampler * chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
    if (c.mirostat == 0) {
        for (const char * o = c.order ? c.order : "edskypmxt"; *o; o++) {
            switch (*o) {
                case 'e': llama_sampler_chain_add(chain, llama_sampler_init_penalties(c.n_vocab, c.last_n, c.repeat, c.freq, c.present)); break;
                case 'd': if (c.dry_mult != 0.0f) llama_sampler_chain_add(chain, llama_sampler_init_dry_testing(c.dry_mult, c.dry_base, c.dry_allowed, c.dry_last_n, c.breakers)); break;
                case 's': llama_sampler_chain_add(chain, llama_sampler_init_top_n_sigma(c.top_n_sigma)); break;
                case 'k': llama_sampler_chain_add(chain, llama_sampler_init_top_k(c.top_k)); break;
                case 'y': llama_sampler_chain_add(chain, llama_sampler_init_typical(c.typ_p, c.min_keep)); break;
                case 'p': llama_sampler_chain_add(chain, llama_sampler_init_top_p(c.top_p, c.min_keep)); break;
                case 'm': llama_sampler_chain_add(chain, llama_sampler_init_min_p(c.min_p, c.min_keep)); break;
                case 'x': llama_sampler_chain_add(chain, llama_sampler_init_xtc(c.xtc_p, c.xtc_t, c.min_keep, c.seed)); break;
                case 't': llama_sampler_chain_add(chain, llama_sampler_init_temp_ext(c.temp, c.dyn_range, c.dyn_exp)); break;
            }
        }
        if (c.order && std::string(c.order).find('a') != std::string::npos)
            llama_sampler_chain_add(chain, llama_sampler_init_adaptive_p(c.adaptive_target, c.adaptive_decay, c.seed));
        else
            llama_sampler_chain_add(chain, llama_sampler_init_dist(c.seed));
    } else {
        llama_sampler_chain_add(chain, llama_sampler_init_temp(c.temp));
        if (c.mirostat == 1) llama_sampler_chain_add(chain, llama_sampler_init_mirostat(c.n_vocab, c.seed, c.tau, c.eta, 100));
        else llama_sampler_chain_add(chain, llama_sampler_init_mirostat_v2(c.seed, c.tau, c.eta));
    }
    return chain;
}

int main(int argc, char ** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s VOCAB.gguf\n", argv[0]);
        return 1;
    }
    // clang-format off
    //  name                              vocab scale temp  k   top_p min_p  lastn rep  freq pres  typ   nsig  xtc_p xtc_t keep dyn  dexp  dry   base  allow dlast breakers           miro tau   eta   prompt                                    seed steps
    const std::vector<config> configs = {
        { "typical",                       3000, 0.5, 1.0f,  0, 1.0f, 0.0f,   0, 1.0f, 0, 0, 0.9f, -1.0f, 0.0f, 0.1f,  0, 0.0f, 1.0f, 0.0f, 1.75f, 2, 64, {},                 0, 5.0f, 0.1f, {},                                           21, 64 },
        { "typical + top-k",               3000, 0.5, 0.8f, 40, 1.0f, 0.0f,   0, 1.0f, 0, 0, 0.5f, -1.0f, 0.0f, 0.1f,  0, 0.0f, 1.0f, 0.0f, 1.75f, 2, 64, {},                 0, 5.0f, 0.1f, {},                                           22, 64 },
        { "typical, narrow, min_keep 5",    800, 0.3, 1.0f,  0, 1.0f, 0.0f,   0, 1.0f, 0, 0, 0.2f, -1.0f, 0.0f, 0.1f,  5, 0.0f, 1.0f, 0.0f, 1.75f, 2, 64, {},                 0, 5.0f, 0.1f, {},                                           23, 64 },
        { "top-n-sigma",                   3000, 0.5, 1.0f,  0, 1.0f, 0.0f,   0, 1.0f, 0, 0, 1.0f,  1.0f, 0.0f, 0.1f,  0, 0.0f, 1.0f, 0.0f, 1.75f, 2, 64, {},                 0, 5.0f, 0.1f, {},                                           24, 64 },
        { "top-n-sigma + top-p + min-p",   3000, 0.5, 0.9f,  0, 0.9f, 0.05f,  0, 1.0f, 0, 0, 1.0f,  2.0f, 0.0f, 0.1f,  0, 0.0f, 1.0f, 0.0f, 1.75f, 2, 64, {},                 0, 5.0f, 0.1f, {},                                           25, 64 },
        { "xtc",                           3000, 1.0, 1.0f,  0, 1.0f, 0.0f,   0, 1.0f, 0, 0, 1.0f, -1.0f, 0.5f, 0.1f,  0, 0.0f, 1.0f, 0.0f, 1.75f, 2, 64, {},                 0, 5.0f, 0.1f, {},                                           26, 64 },
        { "xtc always + top-k, min_keep 3", 3000, 1.0, 1.0f, 40, 1.0f, 0.0f,  0, 1.0f, 0, 0, 1.0f, -1.0f, 1.0f, 0.05f, 3, 0.0f, 1.0f, 0.0f, 1.75f, 2, 64, {},                 0, 5.0f, 0.1f, {},                                           27, 64 },
        { "dynatemp",                      3000, 0.5, 0.8f,  0, 1.0f, 0.0f,   0, 1.0f, 0, 0, 1.0f, -1.0f, 0.0f, 0.1f,  0, 0.5f, 1.0f, 0.0f, 1.75f, 2, 64, {},                 0, 5.0f, 0.1f, {},                                           28, 64 },
        { "dynatemp, exponent 2, top-k",   3000, 0.5, 1.0f, 50, 1.0f, 0.0f,   0, 1.0f, 0, 0, 1.0f, -1.0f, 0.0f, 0.1f,  0, 0.7f, 2.0f, 0.0f, 1.75f, 2, 64, {},                 0, 5.0f, 0.1f, {},                                           29, 64 },
        { "min_keep 10, top-p + min-p",    3000, 0.5, 1.0f,  0, 0.3f, 0.3f,   0, 1.0f, 0, 0, 1.0f, -1.0f, 0.0f, 0.1f, 10, 0.0f, 1.0f, 0.0f, 1.75f, 2, 64, {},                 0, 5.0f, 0.1f, {},                                           30, 64 },
        { "dry",                             30, 0.3, 1.0f,  0, 1.0f, 0.0f,   0, 1.0f, 0, 0, 1.0f, -1.0f, 0.0f, 0.1f,  0, 0.0f, 1.0f, 0.8f, 1.75f, 2, 64, {{5}, {7, 8}},      0, 5.0f, 0.1f, {1, 2, 3, 4, 1, 2, 3, 4, 9, 1, 2, 3},           31, 128 },
        { "dry + penalties + top-k",         30, 0.3, 0.7f, 10, 1.0f, 0.0f,  16, 1.2f, 0.1f, 0.2f, 1.0f, -1.0f, 0.0f, 0.1f, 0, 0.0f, 1.0f, 1.5f, 2.0f, 1, 32, {{0}, {3, 4, 5}}, 0, 5.0f, 0.1f, {6, 7, 8, 6, 7, 8, 6, 7},                32, 128 },
        { "dry, greedy",                     30, 0.1, 0.0f,  0, 1.0f, 0.0f,   0, 1.0f, 0, 0, 1.0f, -1.0f, 0.0f, 0.1f,  0, 0.0f, 1.0f, 0.5f, 1.75f, 2, 64, {{12}},             0, 5.0f, 0.1f, {10, 11, 13, 14, 10, 11, 13, 14, 10, 11, 13},   33, 96 },
        { "mirostat 1",                    3000, 0.5, 1.0f,  0, 1.0f, 0.0f,   0, 1.0f, 0, 0, 1.0f, -1.0f, 0.0f, 0.1f,  0, 0.0f, 1.0f, 0.0f, 1.75f, 2, 64, {},                 1, 5.0f, 0.1f, {},                                           34, 64 },
        { "mirostat 1, hot target",        3000, 0.8, 0.9f,  0, 1.0f, 0.0f,   0, 1.0f, 0, 0, 1.0f, -1.0f, 0.0f, 0.1f,  0, 0.0f, 1.0f, 0.0f, 1.75f, 2, 64, {},                 1, 8.0f, 0.3f, {},                                           35, 64 },
        { "mirostat 2",                    3000, 0.5, 1.0f,  0, 1.0f, 0.0f,   0, 1.0f, 0, 0, 1.0f, -1.0f, 0.0f, 0.1f,  0, 0.0f, 1.0f, 0.0f, 1.75f, 2, 64, {},                 2, 5.0f, 0.1f, {},                                           36, 64 },
        { "mirostat 2, low target",          50, 0.3, 0.8f,  0, 1.0f, 0.0f,   0, 1.0f, 0, 0, 1.0f, -1.0f, 0.0f, 0.1f,  0, 0.0f, 1.0f, 0.0f, 1.75f, 2, 64, {},                 2, 2.0f, 0.2f, {},                                           37, 64 },
        { "everything at once",            3000, 0.5, 1.1f, 200, 0.95f, 0.02f, 32, 1.1f, 0, 0, 0.95f, 3.0f, 0.3f, 0.08f, 2, 0.3f, 1.5f, 0.0f, 1.75f, 2, 64, {},               0, 5.0f, 0.1f, {},                                           38, 64 },
        { "order: temperature first",      3000, 0.5, 1.5f, 40, 0.9f, 0.05f,   0, 1.0f, 0, 0, 1.0f, -1.0f, 0.0f, 0.1f,  0, 0.0f, 1.0f, 0.0f, 1.75f, 2, 64, {},                 0, 5.0f, 0.1f, {},                                           39, 64, "tkpm" },
        { "order: min-p, top-k, penalties, temperature", 50, 0.3, 0.8f, 20, 1.0f, 0.1f, 16, 1.3f, 0.2f, 0.3f, 1.0f, -1.0f, 0.0f, 0.1f, 0, 0.0f, 1.0f, 0.0f, 1.75f, 2, 64, {}, 0, 5.0f, 0.1f, {},                                               40, 96, "mket" },
        { "order: no temperature stage",   3000, 0.5, 0.0f, 30, 0.8f, 0.0f,   0, 1.0f, 0, 0, 1.0f, -1.0f, 0.0f, 0.1f,  0, 0.0f, 1.0f, 0.0f, 1.75f, 2, 64, {},                 0, 5.0f, 0.1f, {},                                           41, 64, "kp" },
        { "adaptive-p",                    3000, 0.5, 1.0f,  0, 1.0f, 0.0f,   0, 1.0f, 0, 0, 1.0f, -1.0f, 0.0f, 0.1f,  0, 0.0f, 1.0f, 0.0f, 1.75f, 2, 64, {},                 0, 5.0f, 0.1f, {},                                           42, 96, "ta", 0.3f, 0.9f },
        { "adaptive-p after top-k, min-p", 3000, 0.5, 0.9f, 40, 1.0f, 0.05f,  0, 1.0f, 0, 0, 1.0f, -1.0f, 0.0f, 0.1f,  0, 0.0f, 1.0f, 0.0f, 1.75f, 2, 64, {},                 0, 5.0f, 0.1f, {},                                           43, 96, "kmta", 0.1f, 0.5f },
        { "adaptive-p, target 0.8",          50, 0.3, 1.0f,  0, 1.0f, 0.0f,   0, 1.0f, 0, 0, 1.0f, -1.0f, 0.0f, 0.1f,  0, 0.0f, 1.0f, 0.0f, 1.75f, 2, 64, {},                 0, 5.0f, 0.1f, {},                                           44, 96, "ta", 0.8f, 0.99f },
        { "adaptive-p off (negative target)", 3000, 0.5, 1.0f, 0, 1.0f, 0.0f,  0, 1.0f, 0, 0, 1.0f, -1.0f, 0.0f, 0.1f,  0, 0.0f, 1.0f, 0.0f, 1.75f, 2, 64, {},                 0, 5.0f, 0.1f, {},                                           45, 64, "ta", -1.0f, 0.9f },
    };
    // clang-format on

    printf("{\n\"chains\": [\n");
    for (size_t c = 0; c < configs.size(); c++) {
        const config & cfg = configs[c];
        llama_sampler * chain = make_chain(cfg);
        for (llama_token t : cfg.prompt) llama_sampler_accept(chain, t);
        printf("  {\"name\": \"%s\", \"nVocab\": %d, \"scale\": %g, \"seed\": %u, \"params\": {\"temperature\": %.9g, \"topK\": %d, "
               "\"topP\": %.9g, \"minP\": %.9g, \"penaltyLastN\": %d, \"repetitionPenalty\": %.9g, \"frequencyPenalty\": %.9g, "
               "\"presencePenalty\": %.9g, \"typicalP\": %.9g, \"topNSigma\": %.9g, \"xtcProbability\": %.9g, \"xtcThreshold\": %.9g, "
               "\"minKeep\": %d, \"dynatempRange\": %.9g, \"dynatempExponent\": %.9g, \"dryMultiplier\": %.9g, \"dryBase\": %.9g, "
               "\"dryAllowedLength\": %d, \"dryPenaltyLastN\": %d, \"dryBreakers\": [",
               cfg.name, cfg.n_vocab, cfg.scale, cfg.seed, cfg.temp, cfg.top_k, cfg.top_p, cfg.min_p, cfg.last_n, cfg.repeat, cfg.freq,
               cfg.present, cfg.typ_p, cfg.top_n_sigma, cfg.xtc_p, cfg.xtc_t, cfg.min_keep, cfg.dyn_range, cfg.dyn_exp, cfg.dry_mult,
               cfg.dry_base, cfg.dry_allowed, cfg.dry_last_n);
        for (size_t b = 0; b < cfg.breakers.size(); b++) {
            if (b) printf(", ");
            print_ids(cfg.breakers[b]);
        }
        printf("], \"mirostat\": %d, \"mirostatTau\": %.9g, \"mirostatEta\": %.9g", cfg.mirostat, cfg.tau, cfg.eta);
        if (cfg.order && std::string(cfg.order).find('a') != std::string::npos)
            printf(", \"adaptiveTarget\": %.9g, \"adaptiveDecay\": %.9g", cfg.adaptive_target, cfg.adaptive_decay);
        if (cfg.order) {
            printf(", \"samplers\": [");
            for (const char * o = cfg.order; *o; o++) {
                const char * name = *o == 'e' ? "penalties" : *o == 'd' ? "dry" : *o == 's' ? "top_n_sigma" : *o == 'k' ? "top_k" : *o == 'y' ? "typ_p" : *o == 'p' ? "top_p" : *o == 'm' ? "min_p" : *o == 'x' ? "xtc" : *o == 'a' ? "adaptive_p" : "temperature";
                printf("%s\"%s\"", o == cfg.order ? "" : ", ", name);
            }
            printf("]");
        }
        printf("},\n   \"prompt\": ");
        print_ids(cfg.prompt);
        printf(",\n   \"tokens\": [");
        std::vector<llama_token_data> cur(cfg.n_vocab);
        for (int s = 0; s < cfg.steps; s++) {
            for (int i = 0; i < cfg.n_vocab; i++) cur[i] = { i, logit_at(s, i, cfg.scale), 0.0f };
            llama_token_data_array arr = { cur.data(), cur.size(), -1, false };
            llama_sampler_apply(chain, &arr);
            const llama_token tok = arr.data[arr.selected].id;
            llama_sampler_accept(chain, tok);
            printf("%s%d", s ? ", " : "", tok);
        }
        printf("]}%s\n", c + 1 < configs.size() ? "," : "");
        llama_sampler_free(chain);
    }

    // DRY with string breakers on a real vocabulary.
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.vocab_only = true;
    llama_model * model = llama_model_load_from_file(argv[1], mp);
    if (!model) {
        fprintf(stderr, "cannot load %s\n", argv[1]);
        return 1;
    }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int32_t n_vocab = llama_vocab_n_tokens(vocab);
    struct dry_case {
        const char * name;
        std::vector<const char *> breakers;
        const char * text;
        float mult, base;
        int32_t allowed, last_n;
    };
    const std::vector<dry_case> dry_cases = {
        { "default breakers", { "\n", ":", "\"", "*" }, "The cat sat on the mat. The cat sat on the mat. The cat sat on the", 0.8f, 1.75f, 2, 64 },
        { "a breaker in the window", { "\n", ":", "\"", "*" }, "alpha beta gamma delta alpha beta gamma\ndelta alpha beta gamma", 1.0f, 2.0f, 1, 128 },
        { "multi-token breakers", { "User:", "###", " Assistant" }, "one two three four one two three four ### one two three four one two three", 0.5f, 1.5f, 2, 256 },
        { "short window", { "\n" }, "x y z x y z x y z x y z x y z x y z x y z x y z x y z", 2.0f, 3.0f, 3, 12 },
    };
    printf("],\n\"dry\": [\n");
    for (size_t c = 0; c < dry_cases.size(); c++) {
        const dry_case & dc = dry_cases[c];
        llama_sampler * dry = llama_sampler_init_dry(vocab, dc.mult, dc.base, dc.allowed, dc.last_n, (const char **) dc.breakers.data(), dc.breakers.size());
        std::vector<llama_token> hist(256);
        const int n = llama_tokenize(vocab, dc.text, (int32_t) std::string(dc.text).size(), hist.data(), (int32_t) hist.size(), false, false);
        hist.resize(n);
        for (llama_token t : hist) llama_sampler_accept(dry, t);
        std::vector<llama_token_data> cur(n_vocab);
        for (int i = 0; i < n_vocab; i++) cur[i] = { i, 0.0f, 0.0f };
        llama_token_data_array arr = { cur.data(), cur.size(), -1, false };
        llama_sampler_apply(dry, &arr);
        printf("  {\"name\": \"%s\", \"breakers\": [", dc.name);
        for (size_t b = 0; b < dc.breakers.size(); b++) {
            printf("%s\"", b ? ", " : "");
            for (const char * p = dc.breakers[b]; *p; p++) {
                if (*p == '\n') printf("\\n");
                else if (*p == '"') printf("\\\"");
                else putchar(*p);
            }
            printf("\"");
        }
        printf("], \"dryMultiplier\": %.9g, \"dryBase\": %.9g, \"dryAllowedLength\": %d, \"dryPenaltyLastN\": %d,\n   \"history\": ",
               dc.mult, dc.base, dc.allowed, dc.last_n);
        print_ids(hist);
        printf(",\n   \"penalized\": [");
        bool first = true;
        for (size_t i = 0; i < arr.size; i++) {
            if (arr.data[i].logit != 0.0f) {
                printf("%s[%d, %.9g]", first ? "" : ", ", arr.data[i].id, arr.data[i].logit);
                first = false;
            }
        }
        printf("]}%s\n", c + 1 < dry_cases.size() ? "," : "");
        llama_sampler_free(dry);
    }
    printf("]\n}\n");
    llama_model_free(model);
    return 0;
}
