// GGUF reader on the real vocabulary files (llama.cpp's ggml-vocab-*.gguf): every file parses,
// tokenizer arrays agree in length, and truncated copies are rejected. Skips (77) without fixtures.
#include "kail/gguf.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include "kail/status.h"
#include "op_test_util.h"

using namespace kail;

// Vocabulary sizes of the fixture files as llama.cpp reports them.
struct expected_vocab {
    const char * file;
    const char * model;
    uint64_t     n_tokens;
};
static const expected_vocab k_expected[] = {
    {"ggml-vocab-gpt-2.gguf", "gpt2", 50257},
    {"ggml-vocab-llama-spm.gguf", "llama", 32000},
    {"ggml-vocab-llama-bpe.gguf", "gpt2", 128256},
    {"ggml-vocab-qwen2.gguf", "gpt2", 151936},
    {"ggml-vocab-deepseek-llm.gguf", "gpt2", 102400},
};

// Parses a prefix of the image from an exactly-sized heap block (ASan sees any overread).
static bool rejects_prefix(const std::vector<uint8_t> & img, size_t len) {
    uint8_t * p = static_cast<uint8_t *>(std::malloc(len));
    std::memcpy(p, img.data(), len);
    bool rejected = false;
    try {
        gguf_file::from_buffer(p, len);
    } catch (const error & e) {
        rejected = e.code() == KAIL_E_BAD_MODEL;
    }
    std::free(p);
    return rejected;
}

int main() {
    const char * dir = std::getenv("KAIL_VOCAB_DIR");
    if (!dir) dir = "/work/shared/fixtures/tokenizers";
    DIR * d = opendir(dir);
    if (!d) {
        std::printf("no fixtures at %s: skipped\n", dir);
        return 77;
    }
    std::vector<std::string> names;
    while (dirent * e = readdir(d)) {
        std::string n = e->d_name;
        if (n.size() > 5 && n.compare(n.size() - 5, 5, ".gguf") == 0) names.push_back(n);
    }
    closedir(d);
    std::sort(names.begin(), names.end());
    if (names.empty()) {
        std::printf("no .gguf files in %s: skipped\n", dir);
        return 77;
    }

    for (auto & name : names) {
        const std::string path = std::string(dir) + "/" + name;
        try {
            auto t0 = std::chrono::steady_clock::now();
            gguf_open_params params;
            params.map_data = false;
            auto f = gguf_file::open(path, params);
            double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

            const uint64_t n_tok = f->get_arr_n("tokenizer.ggml.tokens");
            const std::string model = f->get_str("tokenizer.ggml.model");
            CHECK(!f->get_str("general.architecture").empty());
            auto tokens = f->get_arr_str("tokenizer.ggml.tokens");
            CHECK(tokens.size() == n_tok);
            if (f->has("tokenizer.ggml.scores")) CHECK(f->get_arr_num<float>("tokenizer.ggml.scores").size() == n_tok);
            if (f->has("tokenizer.ggml.token_type"))
                CHECK(f->get_arr_num<int32_t>("tokenizer.ggml.token_type").size() == n_tok);
            if (f->has("tokenizer.ggml.bos_token_id")) CHECK(f->get_u32("tokenizer.ggml.bos_token_id") < n_tok);
            for (auto & e : k_expected) {
                if (name != e.file) continue;
                CHECK(n_tok == e.n_tokens);
                CHECK(model == e.model);
            }
            std::printf("%s: v%u, %zu keys, %zu tensors, model %s, %llu tokens, %zu KiB metadata, parsed in %.1f ms\n",
                        name.c_str(), f->version(), f->metadata().size(), f->tensors().size(), model.c_str(),
                        (unsigned long long) n_tok, f->heap_bytes() / 1024, ms);

            // The same bytes from memory give the same metadata; truncated copies are rejected.
            std::vector<uint8_t> img(static_cast<size_t>(f->file_size()));
            int fd = ::open(path.c_str(), O_RDONLY);
            CHECK(fd >= 0 && read(fd, img.data(), img.size()) == static_cast<ssize_t>(img.size()));
            if (fd >= 0) close(fd);
            auto g = gguf_file::from_buffer(img.data(), img.size());
            CHECK(g->metadata().size() == f->metadata().size());
            CHECK(g->get_arr_str("tokenizer.ggml.tokens") == tokens);
            for (size_t cut : {size_t(0), size_t(23), img.size() / 3, img.size() / 2, img.size() - 1})
                CHECK(rejects_prefix(img, cut));
        } catch (const error & e) {
            std::fprintf(stderr, "%s: [%s] %s\n", name.c_str(), error_code_name(e.code()), e.what());
            g_failures++;
        }
    }
    if (g_failures) {
        std::fprintf(stderr, "test-gguf-vocab: %d failure(s)\n", g_failures);
        return 1;
    }
    std::printf("test-gguf-vocab: ok\n");
    return 0;
}
