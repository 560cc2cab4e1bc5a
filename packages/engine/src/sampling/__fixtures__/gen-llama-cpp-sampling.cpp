// Generates llama-cpp-sampling.json: the tokens llama.cpp's sampler chain (common/sampling.cpp's
// default order: penalties, top-k, top-p, min-p, temperature, dist) picks for seeded runs over
// synthetic logits, which sampler.spec.ts replays against createSampler.
//
// Build against a llama.cpp checkout with libllama built (no model is needed):
//   g++ -O2 -std=c++17 gen-llama-cpp-sampling.cpp -I$LLAMA/include -I$LLAMA/ggml/include \
//       -L$LLAMA/build/bin -lllama -lggml -lggml-base -Wl,-rpath,$LLAMA/build/bin -o gen
//   ./gen > llama-cpp-sampling.json
#include "llama.h"

#include <cstdint>
#include <cstdio>
#include <vector>

struct config {
    const char * name;
    int32_t n_vocab;
    double scale;
    float temp;
    int32_t top_k;
    float top_p;
    float min_p;
    int32_t last_n;
    float repeat, freq, present;
    uint32_t seed;
    int steps;
};

// The same integer hash in sampler.spec.ts makes the logits of step s, token i.
static uint32_t mix(uint32_t x) {
    x ^= x >> 16; x *= 0x7feb352dU; x ^= x >> 15; x *= 0x846ca68bU; x ^= x >> 16;
    return x;
}

static float logit_at(uint32_t step, uint32_t i, double scale) {
    const uint32_t u = mix(step * 0x9e3779b9U ^ i * 0x85ebca6bU);
    return (float) (((double) (u % 2000001U) / 100000.0 - 10.0) * scale);
}

int main() {
    const config configs[] = {
        { "llama.cpp defaults",        3000, 0.5, 0.8f, 40, 0.95f, 0.05f,  0, 1.0f, 0.0f, 0.0f,  42, 64 },
        { "temperature only",          3000, 0.5, 1.0f,  0, 1.0f,  0.0f,   0, 1.0f, 0.0f, 0.0f,   1, 64 },
        { "top-p only, wide nucleus",  3000, 0.3, 0.7f,  0, 0.9f,  0.0f,   0, 1.0f, 0.0f, 0.0f,   7, 64 },
        { "top-p only, small vocab",    800, 0.8, 1.0f,  0, 0.6f,  0.0f,   0, 1.0f, 0.0f, 0.0f,   8, 64 },
        { "min-p only",                3000, 0.5, 1.2f,  0, 1.0f,  0.1f,   0, 1.0f, 0.0f, 0.0f,   3, 64 },
        { "top-p + min-p",             3000, 0.5, 0.9f,  0, 0.8f,  0.02f,  0, 1.0f, 0.0f, 0.0f,   5, 64 },
        { "top-k 5, hot",              3000, 1.0, 1.5f,  5, 1.0f,  0.0f,   0, 1.0f, 0.0f, 0.0f,  99, 64 },
        { "penalties + top-k",           50, 0.3, 0.8f, 20, 1.0f,  0.0f,  16, 1.3f, 0.4f, 0.6f,  11, 128 },
        { "penalties, whole vocab",      50, 0.3, 1.0f,  0, 1.0f,  0.0f,   8, 0.8f, -0.5f, 0.3f, 12, 128 },
        { "greedy + penalties",          50, 0.3, 0.0f, 40, 0.95f, 0.05f, 64, 1.5f, 0.0f, 0.0f,  13, 128 },
    };

    printf("[\n");
    const int n_configs = sizeof(configs) / sizeof(configs[0]);
    for (int c = 0; c < n_configs; c++) {
        const config & cfg = configs[c];
        llama_sampler * chain = llama_sampler_chain_init(llama_sampler_chain_default_params());
        llama_sampler_chain_add(chain, llama_sampler_init_penalties(cfg.n_vocab, cfg.last_n, cfg.repeat, cfg.freq, cfg.present));
        llama_sampler_chain_add(chain, llama_sampler_init_top_k(cfg.top_k));
        llama_sampler_chain_add(chain, llama_sampler_init_top_p(cfg.top_p, 0));
        llama_sampler_chain_add(chain, llama_sampler_init_min_p(cfg.min_p, 0));
        llama_sampler_chain_add(chain, llama_sampler_init_temp_ext(cfg.temp, 0.0f, 1.0f));
        llama_sampler_chain_add(chain, llama_sampler_init_dist(cfg.seed));

        printf("  {\"name\": \"%s\", \"nVocab\": %d, \"scale\": %g, \"temperature\": %.9g, \"topK\": %d, \"topP\": %.9g, "
               "\"minP\": %.9g, \"penaltyLastN\": %d, \"repetitionPenalty\": %.9g, \"frequencyPenalty\": %.9g, "
               "\"presencePenalty\": %.9g, \"seed\": %u,\n   \"tokens\": [",
               cfg.name, cfg.n_vocab, cfg.scale, cfg.temp, cfg.top_k, cfg.top_p, cfg.min_p, cfg.last_n, cfg.repeat,
               cfg.freq, cfg.present, cfg.seed);
        std::vector<llama_token_data> cur(cfg.n_vocab);
        for (int s = 0; s < cfg.steps; s++) {
            for (int i = 0; i < cfg.n_vocab; i++) cur[i] = { i, logit_at(s, i, cfg.scale), 0.0f };
            llama_token_data_array arr = { cur.data(), cur.size(), -1, false };
            llama_sampler_apply(chain, &arr);
            const llama_token tok = arr.data[arr.selected].id;
            llama_sampler_accept(chain, tok);
            printf("%s%d", s ? ", " : "", tok);
        }
        printf("]}%s\n", c + 1 < n_configs ? "," : "");
        llama_sampler_free(chain);
    }
    printf("]\n");
    return 0;
}
