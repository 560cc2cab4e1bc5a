// imatrix-ref: llama.cpp's llama-imatrix collection as a reference oracle for `kail imatrix`.
//
// node-llama-cpp does not ship llama-imatrix; its prebuilt libllama takes the same evaluation
// callback (llama_context_params::cb_eval) llama-imatrix installs. This program installs one that
// gathers what tools/imatrix/imatrix.cpp's collect_imatrix gathers (read from the llama.cpp source
// bundled in node-llama-cpp, written again here): for GGML_OP_MUL_MAT_ID, per expert the squared
// input rows of every routed (token, slot) and their count; for GGML_OP_MUL_MAT on a weight named
// blk.* (or output.weight with --process-output) whose input has 16 rows or more, per column the
// squared rows and their count. The chunks are evaluated as llama-imatrix evaluates them: each
// from an empty cache, all of its tokens in one batch, every row's logits asked for.
//
//   imatrix-ref --model M.gguf --tokens 1,2,... --ctx N --out FILE [--process-output] [--threads N] [--verbose]
//
// --tokens: the chunks one after another (N tokens each, BOS already in place as llama-imatrix
// puts it). FILE: u32 n_entries, then per entry (names sorted) u32 name length, the name, u32
// n_mat, u32 ne0, n_mat f64 counts, n_mat * ne0 f32 sums. Errors: a message on stderr, exit 1.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

static const char * const kRefName = "imatrix-ref";

#include "ggml.h"
#include "ggml-backend.h"
#include "llama.h"
#include "ref-common.h"

namespace {

struct stats {
    std::vector<float>   values;
    std::vector<int64_t> counts;
};

struct collector {
    bool process_output = false;
    std::map<std::string, stats> m;
    std::vector<char> src1_buf, ids_buf;
};

// llama-imatrix's filter_tensor_name: the part between '#'s when there are any.
std::string weight_name(const char * name) {
    const char * p = std::strchr(name, '#');
    if (!p) return name;
    p++;
    const char * q = std::strchr(p, '#');
    return q ? std::string(p, q - p) : std::string(p);
}

bool collect(ggml_tensor * t, bool ask, void * user) {
    collector & c = *static_cast<collector *>(user);
    const ggml_tensor * src0 = t->src[0];
    const ggml_tensor * src1 = t->src[1];
    if (ask) {
        if (t->op == GGML_OP_MUL_MAT_ID) return true;
        if (t->op != GGML_OP_MUL_MAT) return false;
        if (src1->ne[1] < 16 || src1->type != GGML_TYPE_F32) return false;
        const std::string w = weight_name(src0->name);
        return w.rfind("blk.", 0) == 0 || (c.process_output && w == "output.weight");
    }
    const std::string wname = weight_name(src0->name);
    const bool is_host = ggml_backend_buffer_is_host(src1->buffer);
    if (!is_host) {
        c.src1_buf.resize(ggml_nbytes(src1));
        ggml_backend_tensor_get(src1, c.src1_buf.data(), 0, ggml_nbytes(src1));
    }
    const char * data = is_host ? (const char *) src1->data : c.src1_buf.data();
    if (t->op == GGML_OP_MUL_MAT_ID) {
        const ggml_tensor * ids = t->src[2];
        const int64_t n_as = src0->ne[2];
        const int64_t n_ids = ids->ne[0];
        c.ids_buf.resize(ggml_nbytes(ids));
        ggml_backend_tensor_get(ids, c.ids_buf.data(), 0, ggml_nbytes(ids));
        stats & e = c.m[wname];
        if (e.values.empty()) {
            e.values.assign(src1->ne[0] * n_as, 0.0f);
            e.counts.assign(n_as, 0);
        } else if (e.values.size() != (size_t) (src1->ne[0] * n_as)) {
            ref::fail("inconsistent size for %s", wname.c_str());
        }
        const int64_t ne0 = src1->ne[0], n_tokens = src1->ne[2];
        for (int64_t idx = 0; idx < n_ids; ++idx) {
            for (int64_t row = 0; row < n_tokens; ++row) {
                const int32_t ex = *(const int32_t *) (c.ids_buf.data() + row * ids->nb[1] + idx * ids->nb[0]);
                if (ex < 0 || ex >= n_as) ref::fail("expert id %d out of range in %s", ex, wname.c_str());
                const int64_t i11 = idx % src1->ne[1];
                const float * x = (const float *) (data + i11 * src1->nb[1] + row * src1->nb[2]);
                float * acc = e.values.data() + ex * ne0;
                e.counts[ex]++;
                for (int64_t j = 0; j < ne0; ++j) acc[j] += x[j] * x[j];
            }
        }
    } else {
        stats & e = c.m[wname];
        const int64_t n_mat = src0->ne[2] * src0->ne[3];
        if (e.values.empty()) {
            e.values.assign(src1->ne[0] * n_mat, 0.0f);
            e.counts.assign(1, 0);
        } else if (e.values.size() != (size_t) (src1->ne[0] * n_mat)) {
            ref::fail("inconsistent size for %s", wname.c_str());
        }
        const int64_t ne0 = src1->ne[0];
        for (int64_t i3 = 0; i3 < src1->ne[3]; ++i3)
            for (int64_t i2 = 0; i2 < src1->ne[2]; ++i2) {
                const int64_t mat_id = (i3 % src0->ne[3]) * src0->ne[2] + (i2 % src0->ne[2]);
                float * acc = e.values.data() + mat_id * ne0;
                for (int64_t row = 0; row < src1->ne[1]; ++row) {
                    const float * x = (const float *) (data + row * src1->nb[1] + i2 * src1->nb[2] + i3 * src1->nb[3]);
                    for (int64_t j = 0; j < ne0; ++j) acc[j] += x[j] * x[j];
                }
            }
        for (int64_t & cnt : e.counts) cnt += ggml_nrows(src1) / n_mat;
    }
    return true;
}

} // namespace

int main(int argc, char ** argv) {
    std::string model_path, out;
    std::vector<llama_token> tokens;
    int n_ctx = 0, threads = 2;
    collector col;
    const char * usage = "usage: imatrix-ref --model M.gguf --tokens 1,2,... --ctx N --out FILE [--process-output] [--threads N] [--verbose]";
    for (int i = 1; i < argc; i++) {
        const std::string k = argv[i];
        auto val = [&]() -> std::string {
            if (i + 1 >= argc) ref::fail("%s needs a value", k.c_str());
            return argv[++i];
        };
        if (k == "--model") model_path = val();
        else if (k == "--out") out = val();
        else if (k == "--tokens") tokens = ref::parse_tokens(val());
        else if (k == "--ctx") n_ctx = std::atoi(val().c_str());
        else if (k == "--threads") threads = std::atoi(val().c_str());
        else if (k == "--process-output") col.process_output = true;
        else if (k == "--verbose") ref::g_verbose = true;
        else ref::fail("unknown argument '%s' (%s)", k.c_str(), usage);
    }
    if (model_path.empty() || out.empty() || tokens.empty() || n_ctx < 16) ref::fail("%s", usage);
    if (tokens.size() % (size_t) n_ctx != 0) ref::fail("%zu tokens are not whole chunks of %d", tokens.size(), n_ctx);
    llama_log_set(ref::log_cb, nullptr);
    ggml_backend_load_all_from_path(ref::backend_dir().c_str());
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.use_extra_bufts = false;
    llama_model * model = llama_model_load_from_file(model_path.c_str(), mp);
    if (!model) ref::fail("llama.cpp could not load '%s' (run with --verbose for its log)", model_path.c_str());
    llama_context_params cp = ref::exact_context_params((uint32_t) n_ctx, threads);
    cp.cb_eval = collect;
    cp.cb_eval_user_data = &col;
    llama_context * ctx = llama_init_from_model(model, cp);
    if (!ctx) ref::fail("could not create a context of %d", n_ctx);
    llama_batch batch = llama_batch_init(n_ctx, 0, 1);
    for (size_t start = 0; start < tokens.size(); start += (size_t) n_ctx) {
        llama_memory_clear(llama_get_memory(ctx), true);
        batch.n_tokens = n_ctx;
        for (int k = 0; k < n_ctx; k++) {
            batch.token[k] = tokens[start + k];
            batch.pos[k] = k;
            batch.n_seq_id[k] = 1;
            batch.seq_id[k][0] = 0;
            batch.logits[k] = 1;
        }
        if (llama_decode(ctx, batch) != 0) ref::fail("llama_decode failed on the chunk at token %zu", start);
    }
    llama_batch_free(batch);
    FILE * f = std::fopen(out.c_str(), "wb");
    if (!f) ref::fail("cannot write %s", out.c_str());
    auto u32 = [&](uint32_t v) { std::fwrite(&v, 4, 1, f); };
    u32((uint32_t) col.m.size());
    for (const auto & [name, e] : col.m) {
        u32((uint32_t) name.size());
        std::fwrite(name.data(), 1, name.size(), f);
        const size_t n_mat = e.counts.size();
        u32((uint32_t) n_mat);
        u32((uint32_t) (e.values.size() / (n_mat ? n_mat : 1)));
        for (int64_t cnt : e.counts) {
            const double d = (double) cnt;
            std::fwrite(&d, 8, 1, f);
        }
        std::fwrite(e.values.data(), 4, e.values.size(), f);
    }
    std::fclose(f);
    llama_free(ctx);
    llama_model_free(model);
    llama_backend_free();
    return 0;
}
