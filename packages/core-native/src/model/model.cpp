#include "kail/model.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <numeric>
#include <set>
#include <unordered_map>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kail/matmul.h"
#include "kail/quants.h"
#include "kail/residency.h"
#include "kail/status.h"
#include "kail/threadpool.h"
#include "kail/types.h"
#include "cpu/fp16.h"
#include "model/mla.h"
#include "model/dsv4.h"
#include "model/xielu.h"

namespace kail {

double op_desc::param_req(const std::string & k) const {
    auto it = params.find(k);
    if (it == params.end()) throw error(KAIL_E_INVALID_ARG, "program: op is missing parameter '" + k + "'");
    return it->second;
}

op_type op_type_from_name(const std::string & name) {
    static const std::pair<const char *, op_type> names[] = {
        {"embed", OP_EMBED}, {"rms_norm", OP_RMS_NORM}, {"head_rms_norm", OP_HEAD_RMS_NORM},
        {"matmul", OP_MATMUL}, {"add", OP_ADD}, {"mul", OP_MUL}, {"scale", OP_SCALE},
        {"swiglu", OP_SWIGLU}, {"sigmoid_mul", OP_SIGMOID_MUL}, {"rope", OP_ROPE},
        {"attention", OP_ATTENTION}, {"moe", OP_MOE}, {"gather_out", OP_GATHER_OUT}, {"copy", OP_COPY}, {"mla_attention", OP_MLA_ATTENTION},
        {"input", OP_INPUT}, {"cvec", OP_CVEC}, {"layer_norm", OP_LAYER_NORM}, {"gelu", OP_GELU},
        {"hadamard", OP_HADAMARD}, {"dsa_index", OP_DSA_INDEX}, {"ssm_conv", OP_SSM_CONV}, {"gated_delta_net", OP_GATED_DELTA_NET},
        {"ssm_scan", OP_SSM_SCAN}, {"relu_sqr", OP_RELU_SQR}, {"softcap", OP_SOFTCAP}, {"moe_prefetch", OP_MOE_PREFETCH},
        {"clamp", OP_CLAMP}, {"lightning_attn", OP_LIGHTNING_ATTN}, {"hc_gates", OP_HC_GATES}, {"attn_res", OP_ATTN_RES},
        {"msa_index", OP_MSA_INDEX}, {"dsv4_compress", OP_DSV4_COMPRESS}, {"dsv4_attention", OP_DSV4_ATTENTION}, {"dsv4_hc_post", OP_DSV4_HC_POST},
        {"ple_ngram", OP_PLE_NGRAM}, {"ple_gate", OP_PLE_GATE}, {"xielu", OP_XIELU},
        {"qsa_index", OP_QSA_INDEX}, {"rwkv_wkv7", OP_RWKV_WKV7}, {"token_shift", OP_TOKEN_SHIFT}, {"rwkv_wkv6", OP_RWKV_WKV6}, {"sigmoid", OP_SIGMOID}, {"head_sum_mul", OP_HEAD_SUM_MUL}, {"altup", OP_ALTUP}, {"gaussian_topk", OP_GAUSSIAN_TOPK}, {"switch_route", OP_SWITCH_ROUTE}, {"switch_lora", OP_SWITCH_LORA},
    };
    for (auto & n : names) if (name == n.first) return n.second;
    throw error(KAIL_E_INVALID_ARG, "program: unknown op '" + name + "'");
}

namespace {

struct tensor_ref {
    const gguf_tensor_info * info = nullptr;
    const uint8_t *          data = nullptr;
    uint32_t type() const { return info->type; }
    int64_t  ne(int i) const { return info->ne[i]; }
    size_t   row_bytes() const { return row_size(info->type, info->ne[0]); }
    size_t   matrix_bytes() const { return row_bytes() * static_cast<size_t>(info->ne[1]); }
};

// One sequence's cache for one layer. Attention layers keep K and V head-major: head h's rows for
// positions [0, cap) lie together at (h * cap + pos) * head_dim elements, so attending one kv
// head streams one contiguous block (row-major rows put the other heads' columns between them,
// and strided reads ran at about half the speed out of cache). Growing `cap` moves each head's
// block. MLA layers keep one latent row per position, [pos][width], and leave cap at 0, but for a
// sliding MLA block's ring (dots3note), which is one head's block of cap rows (kv_ring_slot).
struct kv_seq_layer {
    std::vector<uint8_t> k, v;
    int64_t              cap = 0;  // positions allocated per head (attention layers)
    // Sliding-window layers with a ring (kv_ring_rows, R rows): until a position reaches R the
    // rows are linear and grow as any layer's; from then on `mirrored`: 2R rows, position p at row
    // p % R and again at p % R + R, so the window before any position is one contiguous block.
    bool                 mirrored = false;
    int64_t              hw = 0;   // 1 + the highest position written since the cache was cleared
};

float silu(float x) { return x / (1.0f + std::exp(-x)); }
// SwiGLU with a limit (llama.cpp's swiglu_clamp_exp / _shexp outside the ggml_swiglu_clamp
// architectures): min(silu(gate), limit) * clamp(up, -limit, limit).
float swiglu_limited(float g, float u, float limit) { return std::min(silu(g), limit) * std::min(std::max(u, -limit), limit); }
// Kimi-K3's situ, in llama.cpp's graph's F32 steps (ggml_scale by 1/beta, ggml_tanh, ggml_scale by
// beta, times ggml_sigmoid): beta tanh(g / beta) sigmoid(g) * u, u first through
// linear_beta tanh(u / linear_beta) when linear_beta > 0.
float situ(float g, float u, float beta, float linear_beta) {
    const float a = std::tanh(g * (1.0f / beta)) * beta;
    const float act = a * (1.0f / (1.0f + std::exp(-g)));
    if (linear_beta > 0.0f) u = std::tanh(u * (1.0f / linear_beta)) * linear_beta;
    return act * u;
}

// In place: v[i] = exp(v[i] - max) / sum, summed in double (ggml_soft_max's order).
void softmax_inplace(float * v, int64_t n) {
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < n; i++) mx = std::max(mx, v[i]);
    double sum = 0;
    for (int64_t i = 0; i < n; i++) { v[i] = std::exp(v[i] - mx); sum += v[i]; }
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t i = 0; i < n; i++) v[i] *= inv;
}

// Adds a bias row to each of `rows` rows of `width` floats.
void add_bias_rows(float * const * rows, int64_t n_rows, const float * bias, int64_t width) {
    for (int64_t i = 0; i < n_rows; i++)
        for (int64_t j = 0; j < width; j++) rows[i][j] += bias[j];
}

void store_row(uint32_t kv_type, const float * src, uint8_t * dst, int64_t n) {
    if (kv_type == KAIL_TYPE_F32) std::memcpy(dst, src, static_cast<size_t>(n) * 4);
    // As ggml-cpu stores a row into a Q8_0 cache: its from_float (the activations' quantizer,
    // round half to even), not the reference quantizer weights are written with.
    else if (kv_type == KAIL_TYPE_Q8_0) matmul_quantize_activations(KAIL_TYPE_Q8_0, n, src, static_cast<size_t>(n) * 4, 1, dst, row_size(KAIL_TYPE_Q8_0, n), nullptr);
    else if (kv_type == KAIL_TYPE_F16) fp32_to_fp16_row(src, reinterpret_cast<uint16_t *>(dst), n);
    else if (kv_type == KAIL_TYPE_BF16) fp32_to_bf16_row(src, reinterpret_cast<uint16_t *>(dst), n);
    // The other quantized caches: ggml-cpu's from_float for these types is the reference quantizer.
    else quantize_row(kv_type, src, dst, n);
}

} // namespace

struct model::impl {
    std::shared_ptr<gguf_file> file;
    std::vector<std::shared_ptr<gguf_file>> weight_files;  // model_params::weight_files, opened
    // model_params::kv_source's state (null: none): attention ops with ext_layer read its cache,
    // "target:NAME" weights are its tensors (in ext_tensors: not read again by load_weights).
    const impl *                          src = nullptr;
    std::set<const gguf_tensor_info *>    ext_tensors;
    program                    prog;
    model_params               params;
    std::unique_ptr<threadpool> pool;
    int64_t                    input_width = 0;  // floats per row the input op reads (0: none)

    // resolved weights per op: role -> tensor
    std::vector<std::map<std::string, tensor_ref>> wts;

    // LoRA (model_params::lora): per op, the pairs on its weight, in adapter order.
    struct lora_pair {
        tensor_ref a, b;
        float      factor = 1.0f;  // alpha / rank (1 without alpha)
        int        adapter = 0;    // index into params.lora
        int        role = 0;       // 0: the op's "weight"; a moe op's 1 gate_exps, 2 up_exps, 3 down_exps (a, b per expert: [n_in, rank, E], [rank, n_out, E])
    };
    std::vector<std::shared_ptr<gguf_file>> lora_files;
    std::vector<std::vector<lora_pair>>     lora;
    std::vector<std::vector<float>>         lora_scale;  // [seq][adapter]: the scale that sequence applies

    // scratch
    std::vector<std::vector<float>> bufs;
    std::vector<uint8_t>            qscratch;
    // MoE scratch kept across calls (a batched decode step would otherwise allocate and zero
    // megabytes per layer): quantized inputs, per-slot expert outputs, and per thread the
    // intermediate rows of the expert it is running.
    struct moe_thread_scratch {
        std::vector<float>        g, u;
        std::vector<uint8_t>      hq;
        std::vector<const void *> xrows;
        std::vector<float *>      yrows;
    };
    std::vector<uint8_t>            moe_xq;
    std::vector<uint8_t>            moe_xq_up;  // the input in the up experts' activation type, where it is not the gate's
    std::vector<float>              moe_slot_out;
    std::vector<float>              moe_xw;  // w_before: each slot's weighted input row
    std::vector<moe_thread_scratch> moe_scratch;

    // KV cache: [seq][layer]
    std::vector<std::vector<kv_seq_layer>> kv;
    std::vector<int64_t>                   kv_ring;  // per KV layer: ring rows R (kv_ring_rows), 0 = every position
    bool                                   any_ring = false;
    std::vector<kv_packed_layout>          kv_packed;  // per KV layer: DeepSeek-V4's packed layouts (kv_packed_layouts)
    // Per KV layer: the rope op that turned its K rows (MLA: its latent row's rope part), -1 when
    // none did (NoPE layers), -2 when one did in a shape a context shift cannot follow.
    std::vector<int>                       kv_rope;
    std::vector<int64_t>                   kv_heads;  // per KV layer: K heads cached per position (MLA: 1)
    std::vector<int64_t>                   seq_len;
    // Encoder-decoder programs (T5; an op tagged pass 1 or 2): a pass over empty sequences is the
    // encoder's (ops tagged pass 2 skipped), any later pass the decoder's (pass 1 skipped); per
    // sequence, the encoder's positions [0, enc_len) precede the decoder's. Cross readers see
    // [0, enc_len) of their layer; the decoder's other attention ops see from enc_len on.
    // The KV layers' roles (kv_enc_dec_roles): the encoder's own rows live through the encoding
    // pass only, the cross rows are exactly enc_len, and a decoder layer's row j holds position
    // enc_len + j (at most n_ctx - enc_len rows): the cache and its budget hold no row twice.
    bool                                   enc_dec = false;
    std::vector<int64_t>                   enc_len;
    std::vector<uint8_t>                   kv_role;
    uint64_t                               kv_bytes = 0;
    // Recurrent state: [seq][recurrent layer], program::rs_width floats each, allocated (zeros) at
    // a sequence's first token and freed when it is cleared; counted in kv_bytes.
    std::vector<std::vector<std::vector<float>>> rs;
    // Rollback of recurrent states (seq_keep_rollback): for an armed sequence, its states at pos0
    // and every op input since, so that seq_truncate can go back to any position in between by
    // replaying the kept inputs onto the states (speculative decoding takes back rejected drafts).
    struct rs_checkpoint {
        bool    armed = false;
        int64_t pos0 = -1;  // -1: none
        int64_t n = 0;      // positions recorded since pos0
        std::vector<std::vector<float>> state;   // per recurrent layer (empty: zeros)
        std::vector<std::vector<float>> inputs;  // per recurrent layer: each position's op inputs, in order
    };
    std::vector<rs_checkpoint> rs_ck;
    std::vector<size_t>        rs_op;      // per recurrent layer: the op that keeps its state
    std::vector<int64_t>       rs_record;  // per recurrent layer: floats its op records per position (its inputs)

    model_stats stats;
    mutable std::mutex stats_mu;
    // imatrix collection (model::imatrix_collect): entries made under imx_mu; an expert's slice
    // is only touched by the thread running that expert.
    bool imx_on = false;
    std::map<std::string, imatrix_stats> imx;
    std::mutex imx_mu;

    // The weights, read into one anonymous mapping (load_weights): with expert streaming
    // (params.ram_budget > 0) the resident ones, the routed experts coming from the stream, so
    // nothing is read through a mapping of the file; in memory all of them unless params.use_mmap.
    std::unique_ptr<residency_plan> plan;
    uint8_t *                      resident = nullptr;      // on a huge-page boundary of the mapping
    void *                         resident_map = nullptr;
    size_t                         resident_map_size = 0;
    std::unique_ptr<expert_stream> stream;
    std::vector<int>               stream_layer;  // per op: its index among the MoE ops, else -1
    std::vector<int>               next_moe;      // per op: the next MoE op's index, else -1
    std::vector<int>               prefetch_for;  // per moe_prefetch op: the moe op it reads ahead for, else -1
    std::vector<bool>              routed_early;  // per op: a moe op some moe_prefetch reads ahead for

    ~impl() {
        stream.reset();
        if (resident_map) munmap(resident_map, resident_map_size);
    }

    tensor_ref weight(size_t op_i, const std::string & role) const {
        auto it = wts[op_i].find(role);
        if (it == wts[op_i].end()) return {};
        return it->second;
    }
};

namespace {

// Recurrent-state checkpoints (defined with the recurrent ops below).
void rs_drop_checkpoint(model::impl::rs_checkpoint & ck);
void rs_rewind(model::impl & m, int seq, int64_t r);

// An mla_attention op's dimensions and up-projection weights (the batch parts are filled at run).
mla_args mla_args_of(const model::impl & m, const op_desc & op, size_t oi) {
    mla_args a;
    a.n_head = static_cast<int64_t>(op.param_req("n_head"));
    a.kv_lora = static_cast<int64_t>(op.param_req("kv_lora"));
    a.qk_nope = static_cast<int64_t>(op.param_req("qk_nope"));
    a.qk_rope = static_cast<int64_t>(op.param_req("qk_rope"));
    a.v_head = static_cast<int64_t>(op.param_req("v_head"));
    a.scale = static_cast<float>(op.param_req("scale"));
    a.naive = op.param("naive", 0) != 0;
    for (auto [role, w] : {std::pair<const char *, mla_weight *>{"k_b", &a.k_b}, {"v_b", &a.v_b}, {"kv_b", &a.kv_b}}) {
        const tensor_ref r = m.weight(oi, role);
        *w = mla_weight{r.info, r.data};
    }
    // A sink per head (Hunyuan v4): F32, checked with the op's weights.
    const tensor_ref sk = m.weight(oi, "sinks");
    a.sinks = sk.info ? reinterpret_cast<const float *>(sk.data) : nullptr;
    return a;
}

void check(bool ok, const std::string & msg) {
    if (!ok) throw error(KAIL_E_BAD_MODEL, msg);
}

std::string shape_str(const gguf_tensor_info * t) {
    std::string s = "[";
    for (uint32_t i = 0; i < std::max<uint32_t>(t->n_dims, 1); i++) s += (i ? ", " : "") + std::to_string(t->ne[i]);
    return s + "]";
}

// An attention op reading KV layer ext_layer of model_params::kv_source (a Gemma 4 assistant
// draft over its target): no k and v of its own, `exclusive` 1 (the query's position is not in
// that cache), the layer one the source's plain attention stores with these heads, and a window
// the source's ring still holds before the source's length: its ring of R rows keeps the W =
// R - n_batch + 1 positions before any length it can continue from (kv_rings_hold).
void check_ext_attention(const model::impl & m, const op_desc & op, const std::string & what) {
    auto num = [&](const char * k) -> int64_t {
        if (!op.params.count(k)) throw error(KAIL_E_INVALID_ARG, what + "missing parameter '" + k + "'");
        const double v = op.param(k, 0);
        if (!std::isfinite(v) || v < -(double(int64_t(1) << 31)) || v > double(int64_t(1) << 31)) throw error(KAIL_E_BAD_MODEL, what + "parameter " + k + " is out of range");
        return static_cast<int64_t>(v);
    };
    const int64_t L = num("ext_layer");
    if (!m.src) throw error(KAIL_E_INVALID_ARG, what + "reads kv layer " + std::to_string(L) + " of another model (ext_layer), but no kv_source model was given");
    const model::impl & S = *m.src;
    if (L < 0 || L >= S.prog.n_kv_layers)
        throw error(KAIL_E_BAD_MODEL, what + "reads kv layer " + std::to_string(L) + " of its source model, which has " + std::to_string(S.prog.n_kv_layers) + " kv layers");
    if (op.param("exclusive", 0) != 1) throw error(KAIL_E_INVALID_ARG, what + "an attention op over another model's cache takes exclusive 1 (the query's own position is not in that cache)");
    if (op.params.count("layer")) throw error(KAIL_E_INVALID_ARG, what + "reads another model's kv layer (ext_layer) and names a layer of its own");
    if (op.b >= 0 || op.c >= 0) throw error(KAIL_E_INVALID_ARG, what + "stores no k or v into another model's cache (ext_layer): it only reads");
    const int64_t nh = num("n_head"), nkv = num("n_head_kv"), hk = num("head_dim");
    const int64_t hv = static_cast<int64_t>(op.param("head_dim_v", static_cast<double>(hk)));
    if (nh < 1 || nkv < 1 || hk < 1 || hv < 1 || nh % nkv != 0)
        throw error(KAIL_E_BAD_MODEL, what + std::to_string(nh) + " heads over " + std::to_string(nkv) + " kv heads of " + std::to_string(hk) + "/" + std::to_string(hv) + " dimensions");
    if (S.prog.kv_k_width[L] != nkv * hk || S.prog.kv_v_width[L] != nkv * hv)
        throw error(KAIL_E_BAD_MODEL, what + std::to_string(nkv) + " kv heads of " + std::to_string(hk) + "/" + std::to_string(hv) + " dimensions do not match the source's kv layer " + std::to_string(L) + " (" +
                                          std::to_string(S.prog.kv_k_width[L]) + "/" + std::to_string(S.prog.kv_v_width[L]) + " floats per position)");
    const op_desc * store = nullptr;
    for (const op_desc & so : S.prog.ops) {
        const bool uses = so.param("layer", -1) == static_cast<double>(L) || so.param("comp_layer", -1) == static_cast<double>(L) || so.param("out_layer", -1) == static_cast<double>(L) || so.param("block_layer", -1) == static_cast<double>(L);
        if (!uses) continue;
        if (so.type == OP_ATTENTION && so.b >= 0 && so.param("layer", -1) == static_cast<double>(L)) { if (!store) store = &so; continue; }
        if (so.type == OP_ATTENTION && so.b < 0 && !so.params.count("ext_layer")) continue;  // a shared-KV reader
        if (so.type == OP_ATTENTION || so.type == OP_MLA_ATTENTION || so.type == OP_DSA_INDEX || so.type == OP_MSA_INDEX || so.type == OP_QSA_INDEX || so.type == OP_DSV4_ATTENTION || so.type == OP_DSV4_COMPRESS)
            throw error(KAIL_E_BAD_MODEL, what + "the source's kv layer " + std::to_string(L) + " is not a plain attention layer (MLA, an indexer's or DeepSeek-V4's packed rows)");
    }
    if (!store || store->param_req("n_head_kv") != static_cast<double>(nkv) || store->param_req("head_dim") != static_cast<double>(hk))
        throw error(KAIL_E_BAD_MODEL, what + "the source's kv layer " + std::to_string(L) + " is not stored by a plain attention op with " + std::to_string(nkv) + " kv heads of " + std::to_string(hk));
    if (op.param("causal", 1) == 0 || op.param("chunk", 0) != 0 || op.param("sym_window", 0) != 0 || op.params.count("sel_off") || op.weights.count("rel_b"))
        throw error(KAIL_E_INVALID_ARG, what + "attention over another model's cache is causal with a sliding window or none (no chunks, symmetric window, block selection or relative position bias)");
    const int64_t window = static_cast<int64_t>(op.param("window", 0)), R = S.kv_ring[static_cast<size_t>(L)];
    if (window < 0 || window == 1) throw error(KAIL_E_BAD_MODEL, what + "sliding window " + std::to_string(window) + ": 0 (none) or at least 2 over another model's cache (the query's own position is not in it)");
    const int64_t held = R > 0 ? R - S.params.n_batch + 1 : -1;
    if (R > 0 && (window == 0 || window > held))
        throw error(KAIL_E_BAD_MODEL, what + "a " + (window ? "sliding window of " + std::to_string(window) : std::string("full attention")) + " over the source's kv layer " + std::to_string(L) +
                                          ", whose ring holds the last " + std::to_string(held) + " positions (load the source with swa_full to keep them all)");
    if (!(op.param("softcap", 0) >= 0) || !std::isfinite(op.param("softcap", 0))) throw error(KAIL_E_BAD_MODEL, what + "attention logit soft-capping " + std::to_string(op.param("softcap", 0)) + " is not a non-negative number");
    if (!(op.param("alibi", 0) >= 0) || !std::isfinite(op.param("alibi", 0))) throw error(KAIL_E_BAD_MODEL, what + "ALiBi's maximum bias " + std::to_string(op.param("alibi", 0)) + " is not a non-negative number");
    if (op.param("temp_scale", 0) != 0 && !(op.param("temp_floor", 0) >= 1)) throw error(KAIL_E_BAD_MODEL, what + "attention temperature tuning needs a floor scale of at least 1");
    auto width = [&](int b) -> int64_t { return b >= 0 ? m.prog.buffers[b].width : 0; };
    const int64_t ao = static_cast<int64_t>(op.param("a_off", 0)), oo = static_cast<int64_t>(op.param("out_off", 0));
    if (op.a < 0 || ao < 0 || ao + nh * hk > width(op.a)) throw error(KAIL_E_BAD_MODEL, what + std::to_string(nh * hk) + " query values at offset " + std::to_string(ao) + " do not fit buffer a");
    if (oo < 0 || oo + nh * hv > width(op.out)) throw error(KAIL_E_BAD_MODEL, what + std::to_string(nh * hv) + " output values at offset " + std::to_string(oo) + " do not fit buffer out");
}

// What the forward pass indexes by an op's parameters must lie within the op's buffers, the KV
// layers and the weights: the parameters come from the model file's metadata (head counts, RoPE
// dimensions, expert counts), so a file that disagrees with itself is refused here, naming the op
// and the numbers, instead of reading or writing past a buffer at the first token.
void check_op_ranges(const model::impl & m, const op_desc & op, size_t i) {
    const char * names[] = {"embed", "rms_norm", "head_rms_norm", "matmul", "add", "mul", "scale", "swiglu", "sigmoid_mul", "rope",
                            "attention", "moe", "gather_out", "copy", "mla_attention", "input", "cvec", "layer_norm", "gelu",
                            "hadamard", "dsa_index", "ssm_conv", "gated_delta_net", "ssm_scan", "relu_sqr", "softcap", "moe_prefetch", "clamp",
                            "lightning_attn", "hc_gates", "attn_res", "msa_index", "dsv4_compress", "dsv4_attention", "dsv4_hc_post", "ple_ngram", "ple_gate", "xielu", "qsa_index", "rwkv_wkv7", "rwkv_wkv6", "token_shift", "sigmoid", "head_sum_mul", "altup", "gaussian_topk", "switch_route", "switch_lora"};
    const std::string what = "op " + std::to_string(i) + " (" + (op.type >= 0 && op.type < static_cast<int>(sizeof(names) / sizeof(names[0])) ? names[op.type] : "?") + "): ";
    auto width = [&](int b) -> int64_t { return b >= 0 ? m.prog.buffers[b].width : 0; };
    auto ip = [&](const char * k, double def) -> int64_t {
        const double v = op.param(k, def);
        // (Within 2^31, so a product of two parameters, e.g. head_dim x n_head, cannot overflow.)
        if (!std::isfinite(v) || v < -(double(int64_t(1) << 31)) || v > double(int64_t(1) << 31)) throw error(KAIL_E_BAD_MODEL, what + "parameter " + k + " is out of range");
        return static_cast<int64_t>(v);
    };
    auto req = [&](const char * k) -> int64_t {
        if (!op.params.count(k)) throw error(KAIL_E_INVALID_ARG, what + "missing parameter '" + k + "'");
        return ip(k, 0);
    };
    auto fits = [&](int b, int64_t off, int64_t n, const char * role) {
        if (b < 0) throw error(KAIL_E_INVALID_ARG, what + "needs buffer " + role);
        if (off < 0 || n < 0 || off + n > width(b))
            throw error(KAIL_E_BAD_MODEL, what + std::to_string(n) + " values at offset " + std::to_string(off) + " do not fit buffer '" + m.prog.buffers[b].name + "' (" + role + ", width " + std::to_string(width(b)) + "): the model's sizes disagree");
    };
    auto kv_layer = [&]() -> int {
        const int64_t l = req("layer");
        if (l < 0 || l >= m.prog.n_kv_layers) throw error(KAIL_E_INVALID_ARG, what + "kv layer " + std::to_string(l) + " out of range");
        return static_cast<int>(l);
    };
    if (op.params.count("pass") && ip("pass", 0) != 1 && ip("pass", 0) != 2)
        throw error(KAIL_E_INVALID_ARG, what + "pass " + std::to_string(ip("pass", 0)) + " is not 1 (encoder only) or 2 (decoder only)");
    switch (op.type) {
        case OP_XIELU:
            for (const char * k : {"alpha_n", "alpha_p", "beta", "eps"})
                if (!op.params.count(k) || !std::isfinite(op.param(k, 0))) throw error(KAIL_E_BAD_MODEL, what + "xIELU parameter " + k + " is missing or not a finite number");
            fits(op.a, 0, 0, "a");
            fits(op.out, 0, width(op.a), "out");
            break;
        case OP_RMS_NORM: case OP_LAYER_NORM: case OP_GELU:
            fits(op.a, 0, 0, "a");
            fits(op.out, 0, width(op.a), "out");
            break;
        case OP_EMBED:
            if (ip("index", 0) < 0 || ip("index", 0) > 3) throw error(KAIL_E_INVALID_ARG, what + "index " + std::to_string(ip("index", 0)) + " is not 0 (token), 1 (position), 2 (row 0) or 3 (the row id in b)");
            if (ip("index", 0) == 3) fits(op.b, ip("b_off", 0), 1, "b");
            break;
        case OP_SWITCH_ROUTE: {
            const int64_t hd = req("head_dim");
            if (hd < 1) throw error(KAIL_E_BAD_MODEL, what + "head_dim must be positive");
            if (!std::isfinite(op.param_req("gain"))) throw error(KAIL_E_BAD_MODEL, what + "router gain " + std::to_string(op.param_req("gain")) + " is not a finite number");
            if (op.ids.size() % 2 != 0) throw error(KAIL_E_INVALID_ARG, what + "ids must hold the activation tokens, then as many substitutes");
            for (size_t k = op.ids.size() / 2; k < op.ids.size(); k++)
                if (op.ids[k] < 0 || op.ids[k] > INT32_MAX) throw error(KAIL_E_BAD_MODEL, what + "substitute token id " + std::to_string(op.ids[k]) + " is negative or too large");
            fits(op.out, 0, 1 + 3 * hd, "out");
            break;
        }
        case OP_SWITCH_LORA:
            fits(op.b, ip("b_off", 0), 1, "b");
            fits(op.a, ip("a_off", 0), 0, "a");
            fits(op.out, ip("out_off", 0), 0, "out");
            if (op.out == op.a) throw error(KAIL_E_INVALID_ARG, what + "out must not be a");
            break;
        case OP_HEAD_SUM_MUL: {
            const int64_t hd = req("head_dim"), nh = req("n_head");
            if (hd < 1 || nh < 1) throw error(KAIL_E_BAD_MODEL, what + "head_dim and n_head must be positive");
            if (op.b < 0) throw error(KAIL_E_INVALID_ARG, what + "needs buffer b");
            fits(op.a, 0, hd * nh, "a");
            fits(op.b, 0, hd * nh, "b");
            fits(op.out, 0, hd * nh, "out");
            if (op.out == op.a) throw error(KAIL_E_INVALID_ARG, what + "out must not be a");
            break;
        }
        case OP_ALTUP: {
            const int64_t mode = req("mode"), n = req("n"), d = req("dim"), act = ip("act", 0);
            if (mode < 0 || mode > 2) throw error(KAIL_E_INVALID_ARG, what + "mode " + std::to_string(mode) + " is not 0 (predict), 1 (correct) or 2 (magnitude)");
            if (n < 1 || d < 1 || n > 64) throw error(KAIL_E_BAD_MODEL, what + std::to_string(n) + " streams of " + std::to_string(d) + ": AltUp needs 1 to 64 streams of a positive width");
            if (mode < 2 && (act < 0 || act >= n)) throw error(KAIL_E_BAD_MODEL, what + "active stream " + std::to_string(act) + " is not one of the " + std::to_string(n) + " streams");
            fits(op.a, 0, n * d, "a");
            fits(op.out, 0, n * d, "out");
            if (mode == 0) {
                fits(op.b, 0, n * n, "b");
                if (op.out == op.a || op.out == op.b) throw error(KAIL_E_INVALID_ARG, what + "out must not be a or b");
            } else if (mode == 1) {
                fits(op.b, 0, d, "b");
                fits(op.c, 0, n, "c");
                if (op.out == op.b || op.out == op.c) throw error(KAIL_E_INVALID_ARG, what + "out must not be b or c");
            } else {
                if (!(op.param("eps", 0) >= 0) || !std::isfinite(op.param("eps", 0))) throw error(KAIL_E_BAD_MODEL, what + "eps " + std::to_string(op.param("eps", 0)) + " is not a non-negative number");
                fits(op.b, ip("b_off", 0), d, "b");
                if (op.out == op.b && op.out != op.a) throw error(KAIL_E_INVALID_ARG, what + "out must not be b");
            }
            break;
        }
        case OP_GAUSSIAN_TOPK:
            if (!op.params.count("std_mul") || !std::isfinite(op.param("std_mul", 0))) throw error(KAIL_E_BAD_MODEL, what + "std_mul is missing or not a finite number");
            fits(op.a, 0, 2, "a");
            fits(op.out, 0, width(op.a), "out");
            break;
        case OP_HEAD_RMS_NORM: {
            const int64_t hd = req("head_dim"), nh = req("n_head"), off = ip("a_off", 0);
            if (hd < 1 || nh < 1) throw error(KAIL_E_BAD_MODEL, what + "head_dim and n_head must be positive");
            if (op.params.count("head_gain") && op.params.at("head_gain") != 0 && ((op.params.count("l2") && op.params.at("l2") != 0) || (op.params.count("layer_norm") && op.params.at("layer_norm") != 0))) throw error(KAIL_E_BAD_MODEL, what + "a per-head gain goes with an RMS norm only");
            fits(op.a, off, hd * nh, "a");
            fits(op.out, off, hd * nh, "out");
            break;
        }
        case OP_MATMUL:
            // (n_in / n_out: the product's input and output widths when not the buffers' own; the
            // weight's shape is checked against the same numbers.)
            // (groups G: G products, group g reading inputs [g n_in, (g + 1) n_in) into its n_out / G outputs.)
            if (ip("groups", 1) < 1 || ip("n_out", static_cast<double>(width(op.out))) % ip("groups", 1) != 0) throw error(KAIL_E_BAD_MODEL, what + "groups " + std::to_string(ip("groups", 1)) + " do not divide the outputs");
            fits(op.a, ip("a_off", 0), ip("n_in", static_cast<double>(width(op.a) / ip("groups", 1))) * ip("groups", 1), "a");
            fits(op.out, ip("out_off", 0), ip("n_out", static_cast<double>(width(op.out))), "out");
            break;
        case OP_ADD: case OP_MUL: case OP_SCALE: case OP_SWIGLU: case OP_COPY: case OP_RELU_SQR: case OP_SOFTCAP: case OP_CLAMP: case OP_SIGMOID: {
            if (op.type == OP_SIGMOID && op.params.count("decay") && op.params.count("exp_decay"))
                throw error(KAIL_E_BAD_MODEL, what + "sigmoid takes decay or exp_decay, not both");
            if (op.type == OP_SIGMOID && op.params.count("exp_decay") && op.param("exp_decay", 0) != 1)
                throw error(KAIL_E_BAD_MODEL, what + "sigmoid exp_decay " + std::to_string(op.param("exp_decay", 0)) + " is not 1");
            if (op.type == OP_SIGMOID && op.params.count("decay") && !std::isfinite(op.param("decay", 0)))
                throw error(KAIL_E_BAD_MODEL, what + "sigmoid decay " + std::to_string(op.param("decay", 0)) + " is not a finite number");
            if (op.type == OP_SOFTCAP && (!(op.param("cap", 0) > 0) || !std::isfinite(op.param("cap", 0))))
                throw error(KAIL_E_BAD_MODEL, what + "soft-capping value " + std::to_string(op.param("cap", 0)) + " is not a positive number");
            // clamp: to +-limit, or (Chameleon's image-token logits) to [min, max], both finite.
            if (op.type == OP_CLAMP && (op.params.count("min") || op.params.count("max"))) {
                if (op.params.count("limit") || !op.params.count("min") || !op.params.count("max") || !std::isfinite(op.param("min", 0)) || !std::isfinite(op.param("max", 0)) || !(op.param("min", 0) <= op.param("max", 0)))
                    throw error(KAIL_E_BAD_MODEL, what + "clamping to [min, max] needs both, finite, min <= max, and no limit");
            } else if (op.type == OP_CLAMP && !(op.param("limit", 0) > 0))
                throw error(KAIL_E_BAD_MODEL, what + "clamping limit " + std::to_string(op.param("limit", 0)) + " is not a positive number");
            if (op.type == OP_SWIGLU && (!(op.param("limit", 0) >= 0) || !std::isfinite(op.param("limit", 0))))
                throw error(KAIL_E_BAD_MODEL, what + "SwiGLU limit " + std::to_string(op.param("limit", 0)) + " is not a non-negative number");
            // situ (Kimi-K3): situ_beta > 0 turns it on; situ_linear_beta > 0 bounds b too.
            if (op.type == OP_SWIGLU && op.params.count("situ_beta") && (!(op.param("situ_beta", 0) > 0) || !std::isfinite(op.param("situ_beta", 0)) || !std::isfinite(op.param("situ_linear_beta", 0)) || op.param("limit", 0) > 0))
                throw error(KAIL_E_BAD_MODEL, what + "situ needs a positive finite situ_beta (is " + std::to_string(op.param("situ_beta", 0)) + "), a finite situ_linear_beta and no limit");
            if (op.type == OP_SWIGLU && op.params.count("oai_alpha") && (!(op.param("oai_alpha", 0) > 0) || !std::isfinite(op.param("oai_alpha", 0)) || !(op.param("limit", 0) > 0) || op.params.count("situ_beta")))
                throw error(KAIL_E_BAD_MODEL, what + "swigluoai needs a positive finite oai_alpha (is " + std::to_string(op.param("oai_alpha", 0)) + "), a positive limit and no situ");
            const int64_t n = ip("n", static_cast<double>(width(op.out)));
            // A strided copy (blocks B): block j's n values from a_off + j a_stride to out_off + j
            // out_stride (PLaMo 2's z|x per head split in one op per half, not one per head).
            if (op.params.count("blocks") || op.params.count("a_stride") || op.params.count("out_stride")) {
                if (op.type != OP_COPY) throw error(KAIL_E_INVALID_ARG, what + "blocks, a_stride and out_stride are parameters of copy only");
                const int64_t nb = req("blocks"), as = req("a_stride"), os = req("out_stride");
                if (nb < 1 || n < 1 || as < 0 || os < n)
                    throw error(KAIL_E_BAD_MODEL, what + std::to_string(nb) + " blocks of " + std::to_string(n) + " values, strides " + std::to_string(as) + " (a) and " + std::to_string(os) +
                                                      " (out): a strided copy needs at least one block of at least one value, a stride of a at least 0 and one of out at least the block (its blocks must not overlap)");
                if (op.out == op.a) throw error(KAIL_E_INVALID_ARG, what + "a strided copy's out must not be a");
                fits(op.a, ip("a_off", 0), (nb - 1) * as + n, "a");
                fits(op.out, ip("out_off", 0), (nb - 1) * os + n, "out");
                break;
            }
            fits(op.a, ip("a_off", 0), n, "a");
            if (op.b >= 0) fits(op.b, ip("b_off", 0), n, "b");
            // (A product without b multiplies by its weight vector, checked with the weights.)
            if ((op.type == OP_ADD || op.type == OP_SWIGLU || (op.type == OP_MUL && !op.weights.count("weight"))) && op.b < 0) throw error(KAIL_E_INVALID_ARG, what + "needs buffer b");
            if (op.type == OP_MUL && op.b >= 0 && op.weights.count("weight")) throw error(KAIL_E_INVALID_ARG, what + "multiplies by b or by a weight, not both");
            fits(op.out, ip("out_off", 0), n, "out");
            break;
        }
        case OP_SIGMOID_MUL: {
            const int64_t group = sigmoid_mul_group(op);
            if (group < 0 || (group > 0 && width(op.out) % group != 0))
                throw error(KAIL_E_INVALID_ARG, what + "gates of " + std::to_string(group) + " values do not divide rows of " + std::to_string(width(op.out)));
            fits(op.a, 0, width(op.out), "a");
            fits(op.b, 0, group > 0 ? width(op.out) / group : 1, "b");
            break;
        }
        case OP_GATHER_OUT: fits(op.out, 0, width(op.a), "out"); break;
        case OP_CVEC:
            if (op.out != op.a) throw error(KAIL_E_INVALID_ARG, what + "a control vector op works in place (out must be a)");
            if (m.params.cvec_n_embd && width(op.a) != m.params.cvec_n_embd)
                throw error(KAIL_E_INVALID_ARG, "control vector: " + std::to_string(m.params.cvec_n_embd) + " values per layer, the model's hidden size is " + std::to_string(width(op.a)));
            break;
        case OP_ROPE: {
            const int64_t n_dims = req("n_dims"), hd = req("head_dim"), nh = req("n_head"), rot = ip("rot_off", 0);
            if (n_dims < 0 || n_dims % 2 != 0 || hd < 1 || nh < 1 || rot < 0 || rot + n_dims > hd)
                throw error(KAIL_E_BAD_MODEL, what + "rotating " + std::to_string(n_dims) + " dimensions at " + std::to_string(rot) + " of a " + std::to_string(hd) +
                                                  "-wide head: the RoPE dimension count must be even and within the head");
            fits(op.a, ip("a_off", 0), hd * nh, "a");
            const double base = op.param("freq_base", 10000.0), scale = op.param("freq_scale", 1.0);
            if (!(base > 0) || !(scale > 0) || !std::isfinite(base) || !std::isfinite(scale)) throw error(KAIL_E_BAD_MODEL, what + "RoPE frequency base and scale must be positive");
            break;
        }
        case OP_ATTENTION: {
            if (op.params.count("ext_layer")) {
                check_ext_attention(m, op, what);
                break;
            }
            if (op.params.count("exclusive")) throw error(KAIL_E_INVALID_ARG, what + "exclusive attention (the query's own position unseen) reads another model's cache: it needs ext_layer");
            const int layer = kv_layer();
            const int64_t nh = req("n_head"), nkv = req("n_head_kv"), hk = req("head_dim"), hv = ip("head_dim_v", static_cast<double>(hk));
            if (nh < 1 || nkv < 1 || hk < 1 || hv < 1 || nh % nkv != 0)
                throw error(KAIL_E_BAD_MODEL, what + std::to_string(nh) + " heads over " + std::to_string(nkv) + " kv heads of " + std::to_string(hk) + "/" + std::to_string(hv) + " dimensions");
            if (m.prog.kv_k_width[layer] != nkv * hk || m.prog.kv_v_width[layer] != nkv * hv) throw error(KAIL_E_INVALID_ARG, what + "kv widths do not match heads");
            // An encoder-decoder's cross attention: the encoder pass stores K and V (store_only,
            // no query), the decoder's passes read every encoder position (cross, nothing stored).
            if (ip("store_only", 0) != 0) {
                if (op.b < 0 || op.c < 0 || ip("pass", 0) != 1) throw error(KAIL_E_INVALID_ARG, what + "a store-only attention op stores k (b) and v (c) in the encoder pass (pass 1)");
                fits(op.b, ip("b_off", 0), nkv * hk, "b");
                fits(op.c, ip("c_off", 0), nkv * hv, "c");
                break;
            }
            if (ip("cross", 0) != 0) {
                if (op.b >= 0 || op.c >= 0 || ip("pass", 0) != 2) throw error(KAIL_E_INVALID_ARG, what + "a cross-attention reader stores nothing and runs in the decoder's passes (pass 2)");
                if (ip("causal", 1) == 0 || ip("window", 0) || ip("chunk", 0) || ip("sym_window", 0) || op.params.count("sel_off") || op.weights.count("rel_b") || ip("alibi", 0))
                    throw error(KAIL_E_INVALID_ARG, what + "a cross-attention reader sees every encoder position: no window, chunks, selection, bias or causal flag");
            }
            fits(op.a, ip("a_off", 0), nh * hk, "a");
            // Without k and v it reads the rows an earlier op stored in this layer (checked in
            // program order at construction).
            if ((op.b < 0) != (op.c < 0)) throw error(KAIL_E_INVALID_ARG, what + "stores both k (b) and v (c) or neither");
            if (op.b >= 0) fits(op.b, ip("b_off", 0), nkv * hk, "b");
            if (op.c >= 0) fits(op.c, ip("c_off", 0), nkv * hv, "c");
            fits(op.out, ip("out_off", 0), nh * hv, "out");
            if (ip("window", 0) < 0) throw error(KAIL_E_BAD_MODEL, what + "sliding window " + std::to_string(ip("window", 0)) + " is negative");
            if (ip("chunk", 0) < 0) throw error(KAIL_E_BAD_MODEL, what + "attention chunk " + std::to_string(ip("chunk", 0)) + " is negative");
            if (ip("chunk", 0) > 0 && ip("window", 0) > 0) throw error(KAIL_E_INVALID_ARG, what + "a layer attends through a sliding window or in chunks, not both");
            if (ip("causal", 1) == 0 && (ip("window", 0) > 0 || ip("chunk", 0) > 0)) throw error(KAIL_E_INVALID_ARG, what + "non-causal attention over a sliding window or chunks is not supported");
            // A symmetric window (llama.cpp's LLAMA_SWA_TYPE_SYMMETRIC: ModernBERT's local blocks, EmbeddingGemma): non-causal only.
            if (ip("sym_window", 0) < 0) throw error(KAIL_E_BAD_MODEL, what + "symmetric window " + std::to_string(ip("sym_window", 0)) + " is negative");
            if (ip("sym_window", 0) > 0 && ip("causal", 1) != 0) throw error(KAIL_E_INVALID_ARG, what + "a symmetric window takes non-causal attention");
            if (op.param("temp_scale", 0) != 0 && !(op.param("temp_floor", 0) >= 1)) throw error(KAIL_E_BAD_MODEL, what + "attention temperature tuning needs a floor scale of at least 1");
            if (!(op.param("softcap", 0) >= 0) || !std::isfinite(op.param("softcap", 0))) throw error(KAIL_E_BAD_MODEL, what + "attention logit soft-capping " + std::to_string(op.param("softcap", 0)) + " is not a non-negative number");
            if (!std::isfinite(op.param("softcap_scale", 1.0))) throw error(KAIL_E_BAD_MODEL, what + "the soft-capped scores' scale " + std::to_string(op.param("softcap_scale", 1.0)) + " is not a finite number");
            if (!(op.param("alibi", 0) >= 0) || !std::isfinite(op.param("alibi", 0))) throw error(KAIL_E_BAD_MODEL, what + "ALiBi's maximum bias " + std::to_string(op.param("alibi", 0)) + " is not a non-negative number");
            if (op.param("alibi", 0) > 0 && op.params.count("sel_off")) throw error(KAIL_E_INVALID_ARG, what + "ALiBi over a block selection (MSA) is not supported");
            if (op.weights.count("rel_b") && op.params.count("sel_off")) throw error(KAIL_E_INVALID_ARG, what + "a relative position bias over a block selection (MSA) is not supported");
            // MSA's block selection (msa_index's out) in a's columns from sel_off.
            if (op.params.count("sel_off")) {
                if (req("top_k") < 1 || req("block") < 1) throw error(KAIL_E_BAD_MODEL, what + "a block selection needs positive top_k and block");
                if (ip("window", 0) > 0 || ip("chunk", 0) > 0 || ip("causal", 1) == 0) throw error(KAIL_E_INVALID_ARG, what + "a block selection (MSA) takes causal attention without a window or chunks");
                fits(op.a, req("sel_off"), nkv * req("top_k"), "a (block selection)");
            }
            break;
        }
        case OP_MOE: {
            const int64_t ne = req("n_expert"), k = req("n_expert_used"), g = ip("n_group", 0), gu = ip("n_group_used", 0);
            if (ne < 1 || k < 1 || k > ne) throw error(KAIL_E_BAD_MODEL, what + "uses " + std::to_string(k) + " of " + std::to_string(ne) + " experts");
            if (ip("gating", 0) < 0 || ip("gating", 0) > 4)
                throw error(KAIL_E_INVALID_ARG, what + "gating " + std::to_string(ip("gating", 0)) + " is not 0 (softmax), 1 (sigmoid), 2 (softmax of the selected), 3 (sigmoid of the selected) or 4 (sqrt softplus)");
            if (ip("act", 0) < 0 || ip("act", 0) > 8)
                throw error(KAIL_E_INVALID_ARG, what + "act " + std::to_string(ip("act", 0)) + " is not 0 (SwiGLU), 1 (gpt-oss's clamped SwiGLU), 2 (GELU over up, no gate), 3 (squared ReLU over up, no gate), 4 (GeGLU), 5 (ReGLU), 6 (SwiGLU with a limit), 7 (ggml_swiglu_clamp) or 8 (situ)");
            if (ip("act", 0) == 8 && (!(op.param("situ_beta", 0) > 0) || !std::isfinite(op.param("situ_beta", 0)) || !std::isfinite(op.param("situ_linear_beta", 0))))
                throw error(KAIL_E_BAD_MODEL, what + "situ experts need a positive finite situ_beta (is " + std::to_string(op.param("situ_beta", 0)) + ") and a finite situ_linear_beta");
            if ((ip("act", 0) == 6 || ip("act", 0) == 7) && (!(op.param("limit", 0) > 0) || !std::isfinite(op.param("limit", 0))))
                throw error(KAIL_E_BAD_MODEL, what + "SwiGLU limit " + std::to_string(op.param("limit", 0)) + " is not a positive number");
            if (op.param("fused_gate_up", 0) != 0 && !moe_gated(op)) throw error(KAIL_E_INVALID_ARG, what + "fused gate/up experts need a gated activation");
            // GroveMoE's chunk experts: routed by a router over n_route experts, expert e standing for chunk e / chunk_group.
            if (ip("n_route", ne) < ne) throw error(KAIL_E_BAD_MODEL, what + "routes over " + std::to_string(ip("n_route", ne)) + " experts, fewer than its " + std::to_string(ne));
            if (ip("chunk_group", 0) < 0 || (ip("chunk_group", 0) > 0 && ip("n_route", ne) > ne * ip("chunk_group", 0)))
                throw error(KAIL_E_BAD_MODEL, what + "chunk_group " + std::to_string(ip("chunk_group", 0)) + " does not map " + std::to_string(ip("n_route", ne)) + " routed experts onto " + std::to_string(ne));
            if (ip("chunk_group", 0) == 0 && ip("n_route", ne) != ne) throw error(KAIL_E_INVALID_ARG, what + "n_route differs from n_expert without a chunk_group");
            if (g > 1 && gu > 0 && gu < g && (ne % g != 0)) throw error(KAIL_E_BAD_MODEL, what + std::to_string(ne) + " experts do not split into " + std::to_string(g) + " groups");
            if (m.prog.n_expert < ne) throw error(KAIL_E_INVALID_ARG, what + "more experts than the program declares");
            fits(op.out, 0, width(op.a), "out");
            break;
        }
        case OP_MLA_ATTENTION: {
            const int layer = kv_layer();
            const int64_t nh = req("n_head"), L = req("kv_lora"), nope = req("qk_nope"), rope = req("qk_rope"), vh = req("v_head");
            if (nh < 1 || L < 1 || nope < 1 || rope < 1 || vh < 1) throw error(KAIL_E_BAD_MODEL, what + "needs positive n_head, kv_lora, qk_nope, qk_rope, v_head");
            if (m.prog.kv_k_width[layer] != L + rope || m.prog.kv_v_width[layer] != 0) throw error(KAIL_E_INVALID_ARG, what + "needs a kv layer of width kv_lora + qk_rope and no V");
            fits(op.a, 0, nh * (nope + rope), "a");
            fits(op.b, 0, L + rope, "b");
            fits(op.out, 0, nh * vh, "out");
            if (op.c >= 0) fits(op.c, 0, req("top_k"), "c");
            if (ip("window", 0) < 0) throw error(KAIL_E_BAD_MODEL, what + "sliding window " + std::to_string(ip("window", 0)) + " is negative");
            if (op.c >= 0 && ip("window", 0) > 0) throw error(KAIL_E_INVALID_ARG, what + "MLA attends through a sliding window or the indexer's selection, not both");
            break;
        }
        case OP_MOE_PREFETCH: {
            // (The moe op it reads ahead for is found, and its router input checked, at construction.)
            fits(op.a, 0, 0, "a");
            if (op.out != op.a) throw error(KAIL_E_INVALID_ARG, what + "an expert prefetch computes nothing (out must be a)");
            break;
        }
        case OP_HADAMARD: {
            const int64_t n = req("n");
            if (n < 1 || (n & (n - 1)) != 0 || width(op.a) % n != 0)
                throw error(KAIL_E_BAD_MODEL, what + "a Hadamard rotation of size " + std::to_string(n) + " needs a power of two that divides the row (" + std::to_string(width(op.a)) + ")");
            if (op.out != op.a) throw error(KAIL_E_INVALID_ARG, what + "a Hadamard rotation works in place (out must be a)");
            break;
        }
        case OP_SSM_CONV: {
            const int64_t l = req("layer"), nc = req("d_conv"), dil = ip("dilation", 1);
            if (l < 0 || l >= static_cast<int64_t>(m.prog.rs_width.size())) throw error(KAIL_E_INVALID_ARG, what + "recurrent layer " + std::to_string(l) + " out of range");
            if (nc < 2 || nc > 4096) throw error(KAIL_E_BAD_MODEL, what + "a convolution of " + std::to_string(nc) + " taps (ssm.conv_kernel must be in 2..4096)");
            // (qwen4exp's PLE convolution: taps dilation positions apart, the n-gram size.)
            if (dil < 1 || dil > 64) throw error(KAIL_E_BAD_MODEL, what + "a dilation of " + std::to_string(dil) + " (must be in 1..64)");
            if (op.out == op.a) throw error(KAIL_E_INVALID_ARG, what + "out must not be a");
            fits(op.out, 0, width(op.a), "out");
            if (m.prog.rs_width[static_cast<size_t>(l)] != (nc - 1) * dil * width(op.a)) throw error(KAIL_E_INVALID_ARG, what + "the recurrent layer's width is not (d_conv - 1) x dilation x channels");
            break;
        }
        case OP_PLE_NGRAM: {
            const int64_t l = req("layer"), ng = req("n_gram"), pg = req("per_gram");
            if (l < 0 || l >= static_cast<int64_t>(m.prog.rs_width.size())) throw error(KAIL_E_INVALID_ARG, what + "recurrent layer " + std::to_string(l) + " out of range");
            if (ng < 2 || ng > 8 || pg < 1 || (ng - 1) * pg > 64) throw error(KAIL_E_BAD_MODEL, what + "n-gram size " + std::to_string(ng) + " with " + std::to_string(pg) + " heads per n-gram (the size must be in 2..8, the heads at most 64)");
            if (op.a >= 0) throw error(KAIL_E_INVALID_ARG, what + "reads the batch's tokens, not a buffer");
            if (m.prog.rs_width[static_cast<size_t>(l)] != ng - 1) throw error(KAIL_E_INVALID_ARG, what + "the recurrent layer's width is not n_gram - 1");
            if (ip("eos", 0) < 0 || ip("image_token", 0) < 0) throw error(KAIL_E_BAD_MODEL, what + "the EOS and image token ids must not be negative");
            for (int64_t j = 0; j < ng; j++)
                for (const char * half : {"mult_lo_", "mult_hi_"}) {
                    const std::string k = half + std::to_string(j);
                    if (!op.params.count(k)) throw error(KAIL_E_INVALID_ARG, what + "missing parameter '" + k + "'");
                    const double v = op.param(k, 0);
                    if (!(v >= 0 && v < 4294967296.0) || v != std::floor(v)) throw error(KAIL_E_BAD_MODEL, what + "parameter " + k + " is not a 32-bit half of a multiplier");
                }
            for (int64_t h = 0; h < (ng - 1) * pg; h++) {
                const int64_t off = req(("off_" + std::to_string(h)).c_str()), voc = req(("voc_" + std::to_string(h)).c_str());
                if (off < 0 || voc < 1 || off + voc > INT32_MAX) throw error(KAIL_E_BAD_MODEL, what + "head " + std::to_string(h) + "'s row range (offset " + std::to_string(off) + ", " + std::to_string(voc) + " rows) does not fit an int32 row index");
            }
            break;
        }
        case OP_PLE_GATE: {
            const int64_t n = req("n"), ng = req("n_group"), rep = ip("repeat", 1);
            if (n < 1 || ng < 1 || rep < 1) throw error(KAIL_E_BAD_MODEL, what + "needs positive n, n_group and repeat");
            if (!std::isfinite(static_cast<float>(op.param_req("scale")))) throw error(KAIL_E_BAD_MODEL, what + "scale is not a finite number");
            fits(op.a, 0, n * ng, "a");
            fits(op.b, 0, n * ng, "b");
            fits(op.out, 0, ng * rep, "out");
            break;
        }
        case OP_GATED_DELTA_NET: {
            const int64_t l = req("layer"), hk = req("n_k_heads"), hv = req("n_v_heads"), S = req("head_dim");
            if (l < 0 || l >= static_cast<int64_t>(m.prog.rs_width.size())) throw error(KAIL_E_INVALID_ARG, what + "recurrent layer " + std::to_string(l) + " out of range");
            if (hk < 1 || hv < 1 || S < 1 || hk > 65536 || hv > 65536 || S > 16384 || hv % hk != 0)
                throw error(KAIL_E_BAD_MODEL, what + std::to_string(hv) + " value heads over " + std::to_string(hk) + " key heads of " + std::to_string(S) + ": the value heads must be a multiple of the key heads");
            if (width(op.a) != (2 * hk + hv) * S) throw error(KAIL_E_BAD_MODEL, what + "q|k|v input is " + std::to_string(width(op.a)) + " wide, expected " + std::to_string((2 * hk + hv) * S));
            if (ip("kda", 0) != 0 && ip("kda", 0) != 1) throw error(KAIL_E_INVALID_ARG, what + "kda must be 0 (one gate per value head) or 1 (one per key channel of each value head)");
            // Kimi Delta Attention (kda): b holds head_dim gate logits per value head, one per key channel.
            fits(op.b, 0, ip("kda", 0) ? hv * S : hv, "b");
            fits(op.c, 0, hv, "c");
            fits(op.out, 0, hv * S, "out");
            if (op.out == op.a) throw error(KAIL_E_INVALID_ARG, what + "out must not be a");
            if (ip("grouped", 0) != 0 && ip("grouped", 0) != 1) throw error(KAIL_E_INVALID_ARG, what + "grouped must be 0 (value head h reads key head h % n_k_heads) or 1 (h / (n_v_heads / n_k_heads))");
            // The safe gate (Ling 3's KDA): g = lower_bound * sigmoid((alpha + dt_bias) * a), lower_bound < 0.
            if (op.params.count("lower_bound") && !(std::isfinite(static_cast<float>(op.param("lower_bound", 0))) && op.param("lower_bound", 0) < 0))
                throw error(KAIL_E_BAD_MODEL, what + "the gate's lower bound " + std::to_string(op.param("lower_bound", 0)) + " must be finite and negative");
            if (op.param("neg_a", 0) != 0 && !op.params.count("lower_bound")) throw error(KAIL_E_INVALID_ARG, what + "neg_a applies to the lower-bounded gate only (lower_bound)");
            if (m.prog.rs_width[static_cast<size_t>(l)] != hv * S * S) throw error(KAIL_E_INVALID_ARG, what + "the recurrent layer's width is not n_v_heads x head_dim^2");
            break;
        }
        case OP_SSM_SCAN: {
            const int64_t l = req("layer"), nh = req("n_head"), hd = req("head_dim"), ds = req("d_state"), ng = req("n_group");
            if (l < 0 || l >= static_cast<int64_t>(m.prog.rs_width.size())) throw error(KAIL_E_INVALID_ARG, what + "recurrent layer " + std::to_string(l) + " out of range");
            if (nh < 1 || hd < 1 || ds < 1 || ng < 1 || nh > 65536 || hd > 65536 || ds > 65536 || ng > nh || nh % ng != 0)
                throw error(KAIL_E_BAD_MODEL, what + std::to_string(nh) + " SSM heads of " + std::to_string(hd) + " in " + std::to_string(ng) + " groups with a state of " + std::to_string(ds) +
                                                  ": the heads must split evenly into the groups");
            if (width(op.a) != nh * hd + 2 * ng * ds) throw error(KAIL_E_BAD_MODEL, what + "x|B|C input is " + std::to_string(width(op.a)) + " wide, expected " + std::to_string(nh * hd + 2 * ng * ds));
            fits(op.b, 0, nh, "b");
            fits(op.out, 0, nh * hd, "out");
            if (op.out == op.a || op.out == op.b) throw error(KAIL_E_INVALID_ARG, what + "out must not be a or b");
            if (m.prog.rs_width[static_cast<size_t>(l)] != nh * hd * ds) throw error(KAIL_E_INVALID_ARG, what + "the recurrent layer's width is not n_head x head_dim x d_state");
            break;
        }
        case OP_LIGHTNING_ATTN: {
            const int64_t l = req("layer"), nh = req("n_head"), hd = req("head_dim");
            if (l < 0 || l >= static_cast<int64_t>(m.prog.rs_width.size())) throw error(KAIL_E_INVALID_ARG, what + "recurrent layer " + std::to_string(l) + " out of range");
            if (nh < 1 || hd < 1 || nh > 65536 || hd > 16384) throw error(KAIL_E_BAD_MODEL, what + std::to_string(nh) + " lightning-attention heads of " + std::to_string(hd) + " (heads must be in 1..65536, their size in 1..16384)");
            const double ss = op.param_req("slope_scale");
            if (!std::isfinite(ss) || ss < 0) throw error(KAIL_E_BAD_MODEL, what + "slope_scale " + std::to_string(ss) + " is not a finite non-negative number");
            if (width(op.a) != 3 * nh * hd) throw error(KAIL_E_BAD_MODEL, what + "q|k|v input is " + std::to_string(width(op.a)) + " wide, expected " + std::to_string(3 * nh * hd));
            fits(op.out, 0, nh * hd, "out");
            if (op.out == op.a) throw error(KAIL_E_INVALID_ARG, what + "out must not be a");
            if (m.prog.rs_width[static_cast<size_t>(l)] != nh * hd * hd) throw error(KAIL_E_INVALID_ARG, what + "the recurrent layer's width is not n_head x head_dim^2");
            break;
        }
        case OP_RWKV_WKV6:
        case OP_RWKV_WKV7: {
            const int64_t l = req("layer"), nh = req("n_head"), hd = req("head_dim");
            if (l < 0 || l >= static_cast<int64_t>(m.prog.rs_width.size())) throw error(KAIL_E_INVALID_ARG, what + "recurrent layer " + std::to_string(l) + " out of range");
            if (nh < 1 || hd < 1 || nh > 65536 || hd > 16384) throw error(KAIL_E_BAD_MODEL, what + std::to_string(nh) + " WKV heads of " + std::to_string(hd) + " (heads must be in 1..65536, their size in 1..16384)");
            const bool v6 = op.type == OP_RWKV_WKV6;
            if (width(op.a) != (v6 ? 4 : 6) * nh * hd)
                throw error(KAIL_E_BAD_MODEL, what + (v6 ? "r|k|v|w" : "r|w|k|v|a|b") + " input is " + std::to_string(width(op.a)) + " wide, expected " + std::to_string((v6 ? 4 : 6) * nh * hd));
            fits(op.out, 0, nh * hd, "out");
            if (v6 && op.params.count("gla_scale") && !(op.param("gla_scale", 0) > 0 && std::isfinite(op.param("gla_scale", 0))))
                throw error(KAIL_E_BAD_MODEL, what + "gla_scale " + std::to_string(op.param("gla_scale", 0)) + " is not a positive number");
            if (op.out == op.a) throw error(KAIL_E_INVALID_ARG, what + "out must not be a");
            if (m.prog.rs_width[static_cast<size_t>(l)] != nh * hd * hd) throw error(KAIL_E_INVALID_ARG, what + "the recurrent layer's width is not n_head x head_dim^2");
            break;
        }
        case OP_TOKEN_SHIFT: {
            const int64_t l = req("layer");
            if (l < 0 || l >= static_cast<int64_t>(m.prog.rs_width.size())) throw error(KAIL_E_INVALID_ARG, what + "recurrent layer " + std::to_string(l) + " out of range");
            fits(op.out, 0, width(op.a), "out");
            if (op.out == op.a) throw error(KAIL_E_INVALID_ARG, what + "out must not be a");
            if (m.prog.rs_width[static_cast<size_t>(l)] != width(op.a)) throw error(KAIL_E_INVALID_ARG, what + "the recurrent layer's width is not a's");
            break;
        }
        case OP_HC_GATES: {
            const int64_t n = req("n"), rep = ip("repeat", 1);
            if (n < 1 || rep < 1) throw error(KAIL_E_BAD_MODEL, what + "needs positive n and repeat");
            if (ip("scale_index", 0) < 0 || ip("base_off", 0) < 0) throw error(KAIL_E_BAD_MODEL, what + "scale_index and base_off must not be negative");
            fits(op.a, ip("a_off", 0), n, "a");
            fits(op.out, ip("out_off", 0), n * rep, "out");
            break;
        }
        case OP_ATTN_RES: {
            const int64_t n = req("n"), nc = req("n_ckpt");
            if (n < 1 || nc < 1) throw error(KAIL_E_BAD_MODEL, what + "needs a positive width n and at least one checkpoint (n_ckpt)");
            if (!std::isfinite(op.param_req("eps")) || !(op.param_req("eps") >= 0)) throw error(KAIL_E_BAD_MODEL, what + "eps is not a finite non-negative number");
            fits(op.a, 0, n * nc, "a");
            if (op.b < 0) throw error(KAIL_E_INVALID_ARG, what + "needs buffer b (the current stream)");
            fits(op.b, 0, n, "b");
            fits(op.out, 0, n, "out");
            if (op.out == op.a) throw error(KAIL_E_INVALID_ARG, what + "out must not be a");
            break;
        }
        case OP_DSA_INDEX: {
            const int layer = kv_layer();
            const int64_t nh = req("n_head"), hd = req("head_dim"), k = req("top_k");
            if (nh < 1 || hd < 1 || k < 1) throw error(KAIL_E_BAD_MODEL, what + "needs positive n_head, head_dim and top_k");
            if (m.prog.kv_k_width[layer] != hd || m.prog.kv_v_width[layer] != 0) throw error(KAIL_E_INVALID_ARG, what + "needs a kv layer of width head_dim and no V");
            fits(op.a, 0, nh * hd, "a");
            fits(op.b, 0, hd, "b");
            fits(op.c, 0, nh, "c");
            fits(op.out, 0, k, "out");
            if (ip("ratio", 1) < 1) throw error(KAIL_E_BAD_MODEL, what + "ratio " + std::to_string(ip("ratio", 1)) + " must be positive");
            break;
        }
        case OP_DSV4_COMPRESS: {
            const int layer = kv_layer();
            const int64_t r = req("ratio"), d = req("head_dim"), nd = req("n_dims"), w = (ip("overlap", 0) ? 2 : 1) * d;
            if (r < 1 || d < 1 || nd < 0 || nd % 2 != 0 || nd > d) throw error(KAIL_E_BAD_MODEL, what + "ratio " + std::to_string(r) + ", head " + std::to_string(d) + ", " + std::to_string(nd) + " rotary dimensions: the ratio and head must be positive, the rotary dimensions even and within the head");
            if (m.prog.kv_k_width[layer] != 2 * w || m.prog.kv_v_width[layer] != 0) throw error(KAIL_E_INVALID_ARG, what + "needs a kv layer of width 2 x (kv | score) and no V");
            fits(op.a, 0, w, "a");
            fits(op.b, 0, w, "b");
            fits(op.out, 0, d, "out");
            if (op.params.count("out_layer")) {
                const int64_t ol = ip("out_layer", 0);
                if (ol < 0 || ol >= m.prog.n_kv_layers) throw error(KAIL_E_INVALID_ARG, what + "kv layer " + std::to_string(ol) + " out of range");
                if (m.prog.kv_k_width[ol] != d || m.prog.kv_v_width[ol] != 0) throw error(KAIL_E_INVALID_ARG, what + "out_layer needs a kv layer of width head_dim and no V");
            }
            const double base = op.param("freq_base", 10000.0), scale = op.param("freq_scale", 1.0);
            if (!(base > 0) || !(scale > 0) || !std::isfinite(base) || !std::isfinite(scale)) throw error(KAIL_E_BAD_MODEL, what + "RoPE frequency base and scale must be positive");
            break;
        }
        case OP_DSV4_ATTENTION: {
            const int layer = kv_layer();
            const int64_t nh = req("n_head"), d = req("head_dim"), r = ip("ratio", 0);
            if (nh < 1 || d < 1 || r < 0) throw error(KAIL_E_BAD_MODEL, what + "needs positive n_head and head_dim and a ratio >= 0");
            if (m.prog.kv_k_width[layer] != d || m.prog.kv_v_width[layer] != 0) throw error(KAIL_E_INVALID_ARG, what + "needs a kv layer of width head_dim and no V");
            fits(op.a, 0, nh * d, "a");
            fits(op.b, 0, d, "b");
            fits(op.out, 0, nh * d, "out");
            if (op.out == op.a) throw error(KAIL_E_INVALID_ARG, what + "out must not be a");
            if (ip("window", 0) < 0) throw error(KAIL_E_BAD_MODEL, what + "sliding window " + std::to_string(ip("window", 0)) + " is negative");
            if (r > 0) {
                const int64_t cl = req("comp_layer");
                if (cl < 0 || cl >= m.prog.n_kv_layers) throw error(KAIL_E_INVALID_ARG, what + "kv layer " + std::to_string(cl) + " out of range");
                if (m.prog.kv_k_width[cl] != d || m.prog.kv_v_width[cl] != 0) throw error(KAIL_E_INVALID_ARG, what + "comp_layer needs a kv layer of width head_dim and no V");
            }
            if (op.c >= 0) {
                if (r < 1) throw error(KAIL_E_INVALID_ARG, what + "a selection (c) of compressed rows needs a ratio");
                fits(op.c, 0, req("top_k"), "c");
            }
            break;
        }
        case OP_DSV4_HC_POST: {
            const int64_t n = req("n"), iters = req("iters");
            if (n < 1 || n > 64 || iters < 1 || iters > 1000) throw error(KAIL_E_BAD_MODEL, what + std::to_string(n) + " streams, " + std::to_string(iters) + " Sinkhorn iterations (1..64 streams, 1..1000 iterations)");
            if (!std::isfinite(op.param_req("eps")) || !(op.param_req("eps") >= 0)) throw error(KAIL_E_BAD_MODEL, what + "eps is not a finite non-negative number");
            fits(op.a, 0, 0, "a");
            fits(op.b, 0, n * width(op.a), "b");
            fits(op.c, 0, (2 + n) * n, "c");
            fits(op.out, 0, n * width(op.a), "out");
            if (op.out == op.a) throw error(KAIL_E_INVALID_ARG, what + "out must not be a");
            break;
        }
        case OP_MSA_INDEX: {
            const int layer = kv_layer();
            const int64_t nh = req("n_head"), hd = req("head_dim"), k = req("top_k"), blk = req("block"), local = req("local");
            if (nh < 1 || hd < 1 || k < 1 || blk < 1 || local < 0) throw error(KAIL_E_BAD_MODEL, what + "needs positive n_head, head_dim, top_k and block, and local >= 0");
            if (m.prog.kv_k_width[layer] != hd || m.prog.kv_v_width[layer] != 0) throw error(KAIL_E_INVALID_ARG, what + "needs a kv layer of width head_dim and no V");
            fits(op.a, 0, nh * hd, "a");
            fits(op.b, 0, hd, "b");
            fits(op.out, ip("out_off", 0), nh * k, "out");
            break;
        }
        case OP_QSA_INDEX: {
            const int layer = kv_layer();
            const int64_t nh = req("n_head"), hd = req("head_dim"), k = req("top_k"), r = req("ratio"), rep = ip("repeat", 1), nd = req("n_dims");
            if (nh < 1 || hd < 1 || k < 1 || r < 1 || rep < 1) throw error(KAIL_E_BAD_MODEL, what + "needs positive n_head, head_dim, top_k, ratio and repeat");
            if (nd < 0 || nd % 2 != 0 || nd > hd) throw error(KAIL_E_BAD_MODEL, what + std::to_string(nd) + " rotary dimensions do not fit the indexer head of " + std::to_string(hd) + " (even, at most the head)");
            if (m.prog.kv_k_width[layer] != hd || m.prog.kv_v_width[layer] != 0) throw error(KAIL_E_INVALID_ARG, what + "needs a kv layer of width head_dim and no V");
            const int64_t bl = req("block_layer");
            if (bl < 0 || bl >= m.prog.n_kv_layers) throw error(KAIL_E_BAD_MODEL, what + "block_layer " + std::to_string(bl) + " out of range");
            if (bl == layer || m.prog.kv_k_width[bl] != hd || m.prog.kv_v_width[bl] != 0) throw error(KAIL_E_BAD_MODEL, what + "block_layer needs a kv layer of its own, of width head_dim and no V");
            if (!std::isfinite(op.param_req("eps")) || !(op.param_req("eps") >= 0)) throw error(KAIL_E_BAD_MODEL, what + "eps is not a finite non-negative number");
            const double base = op.param("freq_base", 10000.0), scale = op.param("freq_scale", 1.0);
            if (!(base > 0) || !(scale > 0) || !std::isfinite(base) || !std::isfinite(scale)) throw error(KAIL_E_BAD_MODEL, what + "RoPE frequency base and scale must be positive");
            fits(op.a, 0, nh * hd, "a");
            fits(op.b, 0, hd, "b");
            fits(op.out, ip("out_off", 0), rep * (k + r - 1), "out");
            break;
        }
        default: break;
    }
}

} // namespace

namespace {

// Which rope op turned each KV layer's cached K (context shifts rotate the rows again): the last
// rope on the attention's K buffer since that buffer was last written, if it covers exactly the
// K heads the layer caches (MLA: the one latent row, its rope part at the end).
void find_kv_ropes(model::impl & m) {
    m.kv_rope.assign(static_cast<size_t>(m.prog.n_kv_layers), -1);
    m.kv_heads.assign(static_cast<size_t>(m.prog.n_kv_layers), 1);
    std::map<int, int> last;  // buffer -> rope op on it since its last write
    for (size_t i = 0; i < m.prog.ops.size(); i++) {
        const op_desc & op = m.prog.ops[i];
        if (op.type == OP_ROPE) { last[op.a] = static_cast<int>(i); continue; }
        // An indexer key is rotated (RoPE, then Hadamard) in a layout a shift cannot turn back.
        if (op.type == OP_DSA_INDEX || op.type == OP_MSA_INDEX || op.type == OP_QSA_INDEX)
            for (const char * k : {"layer", "block_layer"}) {
                const int layer = static_cast<int>(op.param(k, -1));
                if (layer >= 0 && layer < m.prog.n_kv_layers) m.kv_rope[static_cast<size_t>(layer)] = -2;
            }
        // DeepSeek-V4's rows (raw, compressor state, compressed entries): blocks of absolute
        // positions, which a shift would misalign.
        if (op.type == OP_DSV4_COMPRESS || op.type == OP_DSV4_ATTENTION)
            for (const char * k : {"layer", "out_layer", "comp_layer"}) {
                const int layer = static_cast<int>(op.param(k, -1));
                if (layer >= 0 && layer < m.prog.n_kv_layers) m.kv_rope[static_cast<size_t>(layer)] = -2;
            }
        // (A reader of a shared layer stores nothing: the layer's K is the storing op's.)
        if ((op.type == OP_ATTENTION && op.b >= 0) || op.type == OP_MLA_ATTENTION) {
            const int layer = static_cast<int>(op.param_req("layer"));
            auto it = last.find(op.b);
            if (layer >= 0 && layer < m.prog.n_kv_layers && op.type == OP_ATTENTION) m.kv_heads[static_cast<size_t>(layer)] = static_cast<int64_t>(op.param_req("n_head_kv"));
            if (layer >= 0 && layer < m.prog.n_kv_layers && it != last.end()) {
                const op_desc & r = m.prog.ops[static_cast<size_t>(it->second)];
                const double hd = r.param_req("head_dim"), nh = r.param_req("n_head"), off = r.param("a_off", 0);
                const bool fits = op.type == OP_ATTENTION
                                      ? hd == op.param_req("head_dim") && nh == op.param_req("n_head_kv") && off == op.param("b_off", 0)
                                      : hd == op.param_req("kv_lora") + op.param_req("qk_rope") && nh == 1 && off == 0 &&
                                            r.param("rot_off", 0) == op.param_req("kv_lora") && r.param_req("n_dims") == op.param_req("qk_rope");
                m.kv_rope[static_cast<size_t>(layer)] = fits ? it->second : -2;
            }
        }
        last.erase(op.out);
    }
}

// Reads the weights the program names into one anonymous mapping in transparent huge pages, in
// file order (one split open at a time), and points the program's weight refs there: every one, or
// (experts = false, when they stream) all but the routed experts. Computing from the file's mapping
// instead costs a TLB walk every 4 KiB of weights and a page fault at each page's first use: on a
// 2-vCPU VM, an in-memory Qwen3-MoE-shaped model decoded 1.25-1.55x and prefilled 1.1-1.9x faster
// from the copy (docs/benchmarks.md). Streaming, the page cache is told to drop what was read (the
// copy is what counts against the budget); in memory it keeps it, for the next start.
void load_weights(model::impl & m, bool experts) {
    std::vector<std::pair<const gguf_tensor_info *, size_t>> res;  // tensor, offset in the mapping
    for (size_t i = 0; i < m.prog.ops.size(); i++) {
        const bool moe = m.prog.ops[i].type == OP_MOE;
        for (auto & [role, ref] : m.wts[i]) {
            if (!experts && moe && (role == "gate_exps" || role == "up_exps" || role == "down_exps")) continue;
            if (m.ext_tensors.count(ref.info)) continue;  // the kv_source's, read by it
            if (std::none_of(res.begin(), res.end(), [&](auto & r) { return r.first == ref.info; })) res.push_back({ref.info, 0});
        }
    }
    std::sort(res.begin(), res.end(), [](auto & a, auto & b) {
        return a.first->split != b.first->split ? a.first->split < b.first->split : a.first->file_offset < b.first->file_offset;
    });
    size_t total = 0;
    for (auto & r : res) {
        r.second = total;
        total += (static_cast<size_t>(r.first->nbytes) + 63) & ~size_t(63);
    }
    // Room to start on a 2 MiB boundary, where a huge page can map it.
    constexpr size_t huge = size_t(2) << 20, page = 4096;
    const size_t len = std::max<size_t>(page, (total + page - 1) / page * page);
    m.resident_map_size = len + huge;
    void * mem = mmap(nullptr, m.resident_map_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (mem == MAP_FAILED) {
        m.resident_map_size = 0;
        throw error(KAIL_E_BUDGET, "cannot allocate " + format_bytes(total) + " for the " + (experts ? "" : "resident ") + "weights: " + std::strerror(errno));
    }
    m.resident_map = mem;
    m.resident = reinterpret_cast<uint8_t *>((reinterpret_cast<uintptr_t>(mem) + huge - 1) / huge * huge);
    madvise(m.resident, len, MADV_HUGEPAGE);  // best effort: without THP the copy is still faultless after the load
    // One split file open at a time (a model in one file: the file), in split order.
    int fd = -1;
    std::string split_path;
    std::string err;
    // (A tensor of model_params::weight_files is read from its own file.)
    auto path_of = [&](const gguf_tensor_info * t) -> std::string {
        if (m.file->find_tensor(t->name) == t) return m.file->split_path(t->split);
        for (auto & f : m.weight_files)
            if (f->find_tensor(t->name) == t) return f->split_path(t->split);
        throw error(KAIL_E_INTERNAL, "tensor '" + t->name + "' belongs to no open file");
    };
    for (auto & r : res) {
        if (fd < 0 || path_of(r.first) != split_path) {
            if (fd >= 0) ::close(fd);
            split_path = path_of(r.first);
            fd = ::open(split_path.c_str(), O_RDONLY | O_CLOEXEC);
            if (fd < 0) throw error(KAIL_E_IO, "cannot open '" + split_path + "': " + std::strerror(errno));
        }
        uint8_t * dst = m.resident + r.second;
        const uint64_t off = r.first->file_offset, bytes = r.first->nbytes;
        uint64_t got = 0;
        while (got < bytes && err.empty()) {
            const ssize_t k = pread(fd, dst + got, static_cast<size_t>(std::min<uint64_t>(bytes - got, 16u << 20)), static_cast<off_t>(off + got));
            if (k < 0 && errno == EINTR) continue;
            if (k <= 0) err = k == 0 ? std::string("the file ends early") : std::string(std::strerror(errno));
            else got += static_cast<uint64_t>(k);
        }
        if (!experts) posix_fadvise(fd, static_cast<off_t>(off), static_cast<off_t>(bytes), POSIX_FADV_DONTNEED);
        if (!err.empty()) {
            ::close(fd);
            throw error(KAIL_E_IO, "cannot read tensor '" + r.first->name + "' (" + std::to_string(bytes) + " bytes at offset " + std::to_string(off + got) + ") from '" + split_path + "': " + err);
        }
    }
    if (fd >= 0) ::close(fd);
    for (size_t i = 0; i < m.prog.ops.size(); i++)
        for (auto & [role, ref] : m.wts[i])
            for (auto & r : res)
                if (r.first == ref.info) ref.data = m.resident + r.second;
}

// Streaming mode: plans (refusing before any read when the resident part does not fit), copies the
// resident weights into RAM with pread and starts the expert stream.
void setup_streaming(model::impl & m) {
    std::unique_ptr<residency_plan> plan(new residency_plan(residency_plan_compute(*m.file, m.prog, m.params)));
    if (!plan->fits) throw error(KAIL_E_BUDGET, plan->message);
    // The VRAM tier's memory is taken before any read, so a missing device or a refused allocation
    // costs nothing; the stream checks that a slot holds the largest expert.
    std::shared_ptr<expert_device_memory> vram;
    if (m.params.vram_budget > 0 && plan->n_moe_layers > 0) {
        if (plan->vram_cache_experts > 0) vram = cuda_expert_memory(m.params.vram_device, plan->vram_cache_bytes);
        else if (!m.params.vram_optional)
            throw error(KAIL_E_BUDGET, "VRAM budget " + format_bytes(m.params.vram_budget) + " cannot hold one expert (" + format_bytes(plan->expert_entry_bytes) + ")");
    }
    const std::string & path = m.file->path();
    if (path.empty()) throw error(KAIL_E_INVALID_ARG, "expert streaming needs a model file opened from a path");

    load_weights(m, false);

    m.stream_layer.assign(m.prog.ops.size(), -1);
    m.next_moe.assign(m.prog.ops.size(), -1);
    int n_moe = 0, last = -1;
    for (size_t i = 0; i < m.prog.ops.size(); i++) {
        if (m.prog.ops[i].type != OP_MOE) continue;
        m.stream_layer[i] = n_moe++;
        if (last >= 0) m.next_moe[last] = static_cast<int>(i);
        last = static_cast<int>(i);
    }
    if (n_moe > 0) {
        expert_stream_params sp;
        sp.cache_bytes = plan->cache_bytes;
        sp.io_threads = m.params.io_threads;
        sp.direct_io = m.params.direct_io;
        sp.prefetch = m.params.prefetch;
        sp.policy = m.params.cache_policy;
        sp.pack = m.params.pack;
        sp.read_bytes = m.params.read_bytes;
        sp.vram = vram;
        for (uint32_t i = 1; i < m.file->n_splits(); i++) sp.splits.push_back(m.file->split_path(i));
        m.stream.reset(new expert_stream(path, residency_expert_sources(*m.file, m.prog), sp));
    }
    m.plan = std::move(plan);
}

} // namespace

std::unique_ptr<gguf_file> open_lora_adapter(const std::string & path, bool map_data) {
    gguf_open_params op;
    op.map_data = map_data;
    try {
        return gguf_file::open(path, op);
    } catch (const error & e) {
        throw error(e.code(), "LoRA adapter " + path + ": " + e.what());
    }
}

// Opens params.lora's adapters and attaches each lora_a/lora_b pair to the op computing its base
// tensor, checking what llama.cpp's llama_adapter_lora_init checks (type, architecture, shapes).
static void load_lora_adapters(model::impl & m) {
    m.lora.assign(m.prog.ops.size(), {});
    std::vector<float> scales;
    for (const lora_adapter_spec & spec : m.params.lora) scales.push_back(spec.scale);
    m.lora_scale.assign(static_cast<size_t>(std::max(0, m.params.n_seq_max)), scales);
    if (m.params.lora.empty()) return;
    // Base tensor -> the ops that read it, with their role.
    std::map<std::string, std::vector<std::pair<size_t, std::string>>> users;
    for (size_t i = 0; i < m.prog.ops.size(); i++)
        for (auto & [role, name] : m.prog.ops[i].weights) users[name].push_back({i, role});
    const std::string arch = m.file->get_str("general.architecture", "");
    for (const lora_adapter_spec & spec : m.params.lora) {
        const std::string what = "LoRA adapter " + spec.path + ": ";
        if (!std::isfinite(spec.scale)) throw error(KAIL_E_INVALID_ARG, what + "scale must be a finite number");
        std::shared_ptr<gguf_file> f = open_lora_adapter(spec.path, true);
        const std::string gtype = f->get_str("general.type", "");
        if (gtype != "adapter") throw error(KAIL_E_BAD_MODEL, what + "general.type is '" + gtype + "', expected 'adapter' (is this a model rather than an adapter?)");
        const std::string atype = f->get_str("adapter.type", "");
        if (atype != "lora") throw error(KAIL_E_UNSUPPORTED, what + "adapter.type is '" + atype + "', expected 'lora'");
        const std::string aarch = f->get_str("general.architecture", "");
        if (aarch != arch) throw error(KAIL_E_INVALID_ARG, what + "made for architecture '" + aarch + "', the model is '" + arch + "'");
        for (const gguf_kv & kv : f->metadata())
            if (kv.key == "adapter.alora.invocation_tokens") throw error(KAIL_E_UNSUPPORTED, what + "activated LoRA (aLoRA, adapter.alora.invocation_tokens) is not supported");
        const float alpha = f->get_f32("adapter.lora.alpha", 0.0f);
        std::map<std::string, std::pair<const gguf_tensor_info *, const gguf_tensor_info *>> pairs;
        auto ends = [](const std::string & s, const std::string & suf) { return s.size() >= suf.size() && s.compare(s.size() - suf.size(), suf.size(), suf) == 0; };
        for (const gguf_tensor_info & t : f->tensors()) {
            if (ends(t.name, ".lora_a")) pairs[t.name.substr(0, t.name.size() - 7)].first = &t;
            else if (ends(t.name, ".lora_b")) pairs[t.name.substr(0, t.name.size() - 7)].second = &t;
            else if (ends(t.name, "_norm.weight")) continue;  // as llama.cpp: norm deltas are not applied
            else throw error(KAIL_E_BAD_MODEL, what + "tensor '" + t.name + "' has an unexpected suffix (expected .lora_a or .lora_b)");
        }
        for (auto & [base, ab] : pairs) {
            const std::string pre = what + "tensor '" + base + "': ";
            if (!ab.first || !ab.second) throw error(KAIL_E_BAD_MODEL, pre + "lora_a or lora_b is missing");
            const gguf_tensor_info * bt = m.file->find_tensor(base);
            if (!bt) throw error(KAIL_E_INVALID_ARG, pre + "not in the base model (a different base model?)");
            auto it = users.find(base);
            if (it == users.end()) continue;  // a tensor this program never reads (e.g. an MTP block's)
            const gguf_tensor_info * a = ab.first, * b = ab.second;
            for (const gguf_tensor_info * t : {a, b}) {
                const type_traits * tr = type_traits_get(t->type);
                if (t->n_dims > 3 || !tr || !tr->compute) throw error(KAIL_E_BAD_MODEL, pre + "'" + t->name + "' must be a matrix (per expert: 3-D) of a type kail computes with, is " + type_name(t->type) + " " + shape_str(t));
            }
            const int64_t rank = b->ne[0];
            if (rank < 1) throw error(KAIL_E_BAD_MODEL, pre + "lora_b " + shape_str(b) + " has rank 0");
            if (a->ne[0] % type_traits_get(a->type)->block_size || rank % type_traits_get(b->type)->block_size)
                throw error(KAIL_E_BAD_MODEL, pre + "rows that are not whole blocks of their type");
            const bool tied = std::any_of(it->second.begin(), it->second.end(), [&](auto & u) { return m.prog.ops[u.first].type == OP_EMBED; }) &&
                              std::any_of(it->second.begin(), it->second.end(), [&](auto & u) { return m.prog.ops[u.first].type == OP_MATMUL; });
            if (tied) throw error(KAIL_E_UNSUPPORTED, pre + "the token embedding is also this model's output projection (tied); LoRA on it is not supported");
            for (auto & [oi, role] : it->second) {
                const op_type ty = m.prog.ops[oi].type;
                // no_lora (Granite Switch): llama.cpp's graph multiplies these projections and embeds
                // without build_lora_mm, so a pair there is checked (a projection's layout, or the
                // embedding's flipped one) and left unused, as there.
                if (m.prog.ops[oi].param("no_lora", 0) != 0) {
                    const bool fits = a->n_dims <= 2 && b->n_dims <= 2 &&
                                      (ty == OP_EMBED ? bt->ne[0] == b->ne[1] && bt->ne[1] == a->ne[1] && a->ne[0] == rank : bt->ne[0] == a->ne[0] && bt->ne[1] == b->ne[1] && a->ne[1] == rank);
                    if (!fits) throw error(KAIL_E_INVALID_ARG, pre + "lora_a " + shape_str(a) + " / lora_b " + shape_str(b) + " do not fit " + shape_str(bt) + " (a different base model?)");
                    continue;
                }
                // A table read by a row other than the token's (BERT's positions, token types): its
                // pair in a projection's layout, as jina-embeddings-v3's converter writes the
                // token-type pair and llama.cpp checks it; llama.cpp's graph adds those rows without
                // LoRA, and so does kail (the pair is checked, then left unused).
                if (ty == OP_EMBED && m.prog.ops[oi].param("index", 0) != 0) {
                    const bool dims_ok = a->n_dims <= 2 && b->n_dims <= 2 && bt->ne[0] == a->ne[0] && bt->ne[1] == b->ne[1] && a->ne[1] == b->ne[0];
                    if (!dims_ok) throw error(KAIL_E_INVALID_ARG, pre + "lora_a " + shape_str(a) + " / lora_b " + shape_str(b) + " do not fit " + shape_str(bt) + " (a different base model?)");
                    continue;
                }
                const bool embed = ty == OP_EMBED;
                const int moe_role = ty != OP_MOE ? 0 : role == "gate_exps" ? 1 : role == "up_exps" ? 2 : role == "down_exps" ? 3 : 0;
                if ((moe_role == 1 || moe_role == 2) && moe_fused(m.prog.ops[oi])) throw error(KAIL_E_UNSUPPORTED, pre + "LoRA on fused gate/up experts (ffn_gate_up_exps) is not supported");
                if (!moe_role && (role != "weight" || (ty != OP_MATMUL && !embed)))
                    throw error(KAIL_E_UNSUPPORTED, pre + "kail applies LoRA to projections, routed experts and the token embedding; this tensor is computed inside a fused op (" + role + ")");
                // As llama.cpp: a projection's A is [n_in, rank] and B [rank, n_out] (experts':
                // [n_in, rank, E] and [rank, n_out, E]); the embedding's pair is flipped, A
                // [rank, n_vocab] (rows gathered) and B [rank, n_embd].
                const bool dims_ok = moe_role ? a->n_dims == 3 && b->n_dims == 3 && a->ne[2] == bt->ne[2] && b->ne[2] == bt->ne[2] : a->n_dims <= 2 && b->n_dims <= 2;
                const bool ok = dims_ok && (embed ? bt->ne[0] == b->ne[1] && bt->ne[1] == a->ne[1] && a->ne[0] == rank
                                                  : bt->ne[0] == a->ne[0] && bt->ne[1] == b->ne[1] && a->ne[1] == rank);
                if (!ok) throw error(KAIL_E_INVALID_ARG, pre + "lora_a " + shape_str(a) + " / lora_b " + shape_str(b) + " do not fit " + shape_str(bt) + " (a different base model?)");
                const float factor = alpha != 0.0f ? alpha / static_cast<float>(rank) : 1.0f;
                m.lora[oi].push_back({tensor_ref{a, f->tensor_data(*a)}, tensor_ref{b, f->tensor_data(*b)}, factor, static_cast<int>(m.lora_files.size()), moe_role});
            }
        }
        m.lora_files.push_back(std::move(f));
    }
}

model::model(std::shared_ptr<gguf_file> file, program prog, const model_params & params) : impl_(new impl) {
    impl & m = *impl_;
    m.file = std::move(file);
    m.prog = std::move(prog);
    m.params = params;
    m.params.n_batch = std::max<int64_t>(1, m.params.n_batch);
    const bool streaming = m.params.ram_budget > 0;
    // In memory the weights are read into huge pages (load_weights) unless use_mmap asks to compute
    // from the file's mapping, or the file came from a buffer (no path to read).
    const bool copy = !streaming && !m.params.use_mmap && !m.file->path().empty();
    if (m.params.vram_budget > 0 && !streaming)
        throw error(KAIL_E_INVALID_ARG, "a VRAM budget needs expert streaming (a RAM budget): the VRAM tier caches experts streamed from storage");
    if (!m.params.weight_files.empty() && streaming) throw error(KAIL_E_INVALID_ARG, "tensors from other files (weight_files) cannot stream: load without a RAM budget");
    for (const std::string & wf : m.params.weight_files) {
        gguf_open_params wop;
        wop.map_data = !copy;
        m.weight_files.push_back(gguf_file::open(wf, wop));
    }
    check_kv_type(m.prog, m.params.kv_type, m.params.kv_type_v);
    if (m.params.n_seq_max < 1 || m.params.n_ctx < 1) throw error(KAIL_E_INVALID_ARG, "n_seq_max and n_ctx must be >= 1");
    // A draft over another model's cache (kv_source): none of its own, within the source's sequences.
    if (m.params.kv_source) {
        m.src = &m.params.kv_source->internals();
        if (!m.params.lora.empty()) throw error(KAIL_E_INVALID_ARG, "a draft over another model's cache (kv_source) takes no LoRA adapters");
        if (streaming) throw error(KAIL_E_INVALID_ARG, "a draft over another model's cache (kv_source) cannot stream its experts: load it without a RAM budget");
        if (m.prog.n_kv_layers > 0 || !m.prog.rs_width.empty())
            throw error(KAIL_E_BAD_MODEL, "a draft over another model's cache (kv_source) keeps no cache of its own: its program has " + std::to_string(m.prog.n_kv_layers) + " kv layers and " + std::to_string(m.prog.rs_width.size()) + " recurrent layers");
        if (m.params.n_seq_max > m.src->params.n_seq_max || m.params.n_ctx > m.src->params.n_ctx)
            throw error(KAIL_E_INVALID_ARG, "a draft over another model's cache needs n_seq_max <= " + std::to_string(m.src->params.n_seq_max) + " and n_ctx <= " + std::to_string(m.src->params.n_ctx) + " (its source's), has " +
                                                std::to_string(m.params.n_seq_max) + " and " + std::to_string(m.params.n_ctx));
        bool ext = false;
        for (const op_desc & op : m.prog.ops) ext = ext || (op.type == OP_ATTENTION && op.params.count("ext_layer"));
        if (!ext) throw error(KAIL_E_INVALID_ARG, "a kv_source model was given, but no attention op of this program reads its cache (ext_layer)");
    }
    const int nb = static_cast<int>(m.prog.buffers.size());
    auto check_buf = [&](int b, const char * what, size_t op_i) {
        if (b < -1 || b >= nb) throw error(KAIL_E_INVALID_ARG, "program: op " + std::to_string(op_i) + " " + what + " buffer out of range");
    };
    for (const buffer_desc & bd : m.prog.buffers)
        if (bd.width < 1 || bd.width > (int64_t(1) << 26))
            throw error(KAIL_E_BAD_MODEL, "program: buffer '" + bd.name + "' has width " + std::to_string(bd.width) + " (the model's sizes are out of range)");
    if (static_cast<int>(m.prog.kv_k_width.size()) != m.prog.n_kv_layers || static_cast<int>(m.prog.kv_v_width.size()) != m.prog.n_kv_layers)
        throw error(KAIL_E_INVALID_ARG, "program: kv widths do not match n_kv_layers");
    for (int64_t w : m.prog.rs_width)
        if (w < 1 || w > (int64_t(1) << 31)) throw error(KAIL_E_BAD_MODEL, "program: a recurrent layer of " + std::to_string(w) + " floats per sequence (the model's sizes are out of range)");
    m.wts.resize(m.prog.ops.size());
    for (size_t i = 0; i < m.prog.ops.size(); i++) {
        const op_desc & op = m.prog.ops[i];
        check_buf(op.out, "out", i); check_buf(op.a, "a", i); check_buf(op.b, "b", i); check_buf(op.c, "c", i);
        if (op.out < 0) throw error(KAIL_E_INVALID_ARG, "program: op " + std::to_string(i) + " has no out buffer");
        check_op_ranges(m, op, i);
        for (auto & [role, name] : op.weights) {
            // "target:NAME": the kv_source's tensor NAME, as it loaded it (its copy or mapping).
            if (name.compare(0, 7, "target:") == 0) {
                if (!m.src) throw error(KAIL_E_INVALID_ARG, "program: op " + std::to_string(i) + " uses tensor '" + name + "' of another model, but no kv_source model was given");
                const std::string tn = name.substr(7);
                const tensor_ref * found = nullptr;
                for (const auto & ow : m.src->wts)
                    for (const auto & [r2, ref] : ow)
                        if (!found && ref.info && ref.info->name == tn && ref.data) found = &ref;
                check(found != nullptr, "the source model (kv_source) does not load tensor '" + tn + "' (" + role + ", named '" + name + "')");
                m.wts[i][role] = *found;
                m.ext_tensors.insert(found->info);
                continue;
            }
            const gguf_tensor_info * t = m.file->find_tensor(name);
            const gguf_file * src = m.file.get();
            for (size_t k = 0; !t && k < m.weight_files.size(); k++)
                if ((t = m.weight_files[k]->find_tensor(name))) src = m.weight_files[k].get();
            check(t != nullptr, "model file lacks tensor '" + name + "' (" + role + ")");
            const type_traits * tr = type_traits_get(t->type);
            check(tr && (tr->compute || (role == "tid2eid" && t->type == KAIL_TYPE_I32)), "tensor '" + name + "' has type " + std::string(type_name(t->type)) + ", which kail cannot compute with");
            m.wts[i][role] = tensor_ref{t, streaming || copy ? nullptr : src->tensor_data(*t)};
        }
        // Shape checks for the ops whose shapes are implied by their buffers.
        auto width = [&](int b) { return m.prog.buffers[b].width; };
        if (op.type == OP_MATMUL) {
            const tensor_ref w = m.weight(i, "weight");
            check(w.info != nullptr, "program: matmul op without weight");
            const int64_t a_n = static_cast<int64_t>(op.param("n_in", static_cast<double>(width(op.a) / static_cast<int64_t>(op.param("groups", 1)))));
            check(w.ne(0) == a_n, "tensor '" + w.info->name + "' " + shape_str(w.info) + ": expected " + std::to_string(a_n) + " inputs");
            const int64_t out_n = static_cast<int64_t>(op.param("n_out", static_cast<double>(width(op.out))));
            // (With groups, a 3-D weight [n_in, n_out / G, G] holds group g's rows as its slice g: RWKV-6's time_mix_w2.)
            check(w.ne(1) * (static_cast<int64_t>(op.param("groups", 1)) > 1 ? w.ne(2) : 1) == out_n, "tensor '" + w.info->name + "' " + shape_str(w.info) + ": expected " + std::to_string(out_n) + " outputs");
            const tensor_ref bias = m.weight(i, "bias");
            if (bias.info) check(bias.info->n_elements == out_n && bias.type() == KAIL_TYPE_F32, "bias '" + bias.info->name + "' must be F32 with " + std::to_string(out_n) + " elements");
        } else if (op.type == OP_EMBED) {
            const tensor_ref w = m.weight(i, "weight");
            check(w.info && w.ne(0) == width(op.out), "embedding tensor width does not match the model dimension");
            if (op.param("index", 0) == 0 || op.param("index", 0) == 3) n_vocab_ = std::max(n_vocab_, w.ne(1));
        } else if (op.type == OP_SWITCH_LORA) {
            const tensor_ref a = m.weight(i, "lora_a"), b = m.weight(i, "lora_b");
            check(a.info && b.info, "program: switch_lora op without lora_a and lora_b");
            const int64_t n_in = a.ne(0), r = a.ne(1), slots = a.info->n_dims == 3 ? a.ne(2) : 0;
            const int64_t a_off = static_cast<int64_t>(op.param("a_off", 0)), out_off = static_cast<int64_t>(op.param("out_off", 0));
            check(slots >= 1 && b.info->n_dims == 3 && b.ne(0) == r && b.ne(2) == slots,
                  "switched LoRA '" + a.info->name + "' " + shape_str(a.info) + " and '" + b.info->name + "' " + shape_str(b.info) + " must be [n_in, rank, n_slots] and [rank, n_out, n_slots]");
            check(a_off + n_in <= width(op.a) && out_off + b.ne(1) <= width(op.out),
                  "switched LoRA '" + a.info->name + "' " + shape_str(a.info) + " / '" + b.info->name + "' " + shape_str(b.info) + " do not fit " + std::to_string(width(op.a) - a_off) + " inputs and " + std::to_string(width(op.out) - out_off) + " outputs");
        } else if (op.type == OP_RMS_NORM || op.type == OP_HEAD_RMS_NORM || op.type == OP_LAYER_NORM) {
            for (const char * role : {"weight", "bias"}) {
                const tensor_ref w = m.weight(i, role);
                if (!w.info) continue;
                const int64_t want = op.type == OP_HEAD_RMS_NORM ? static_cast<int64_t>(op.param_req("head_dim")) : width(op.a);
                // A head norm's weight is shared by the heads, or one per head (Mamba-2's grouped norm).
                const bool per_head = op.type == OP_HEAD_RMS_NORM && w.info->n_elements == want * static_cast<int64_t>(op.param_req("n_head"));
                // With head_gain, a head norm's weight is one gain per head (Talkie's q gain {1, n_head}).
                if (op.type == OP_HEAD_RMS_NORM && op.param("head_gain", 0) != 0 && std::string(role) == "weight") {
                    const int64_t nh = static_cast<int64_t>(op.param_req("n_head"));
                    check(w.type() == KAIL_TYPE_F32 && w.info->n_elements == nh, "head gain '" + w.info->name + "' must be F32 with " + std::to_string(nh) + " elements (one per head), is " + type_name(w.type()) + " " + shape_str(w.info));
                    continue;
                }
                check(w.type() == KAIL_TYPE_F32 && (w.info->n_elements == want || per_head), "norm '" + w.info->name + "' must be F32 with " + std::to_string(want) + " elements, is " + type_name(w.type()) + " " + shape_str(w.info));
            }
        } else if (op.type == OP_MLA_ATTENTION) {
            const tensor_ref sk = m.weight(i, "sinks");
            const int64_t nh = static_cast<int64_t>(op.param_req("n_head"));
            if (sk.info) check(sk.type() == KAIL_TYPE_F32 && sk.info->n_elements == nh, "attention sinks '" + sk.info->name + "' must be F32 with " + std::to_string(nh) + " elements (one per head), is " + type_name(sk.type()) + " " + shape_str(sk.info));
            const std::string err = mla_check_weights(mla_args_of(m, op, i));
            check(err.empty(), err);
        } else if (op.type == OP_MOE) {
            // act 2 (nomic-bert-moe) and 3 (Nemotron-H): up and down only; else gate, up and down.
            const bool gated = moe_gated(op);
            for (const char * role : {"gate_inp", "gate_exps", "up_exps", "down_exps"})
                if (gated || std::string(role) != "gate_exps") check(m.weight(i, role).info != nullptr, std::string("program: moe op without ") + role);
            if (!gated) check(m.weight(i, "gate_exps").info == nullptr, "program: a gate-less moe op (act 2 or 3) with gate_exps");
            const int64_t n_expert = static_cast<int64_t>(op.param_req("n_expert"));
            const int64_t n_route = static_cast<int64_t>(op.param("n_route", static_cast<double>(n_expert)));
            const tensor_ref u = m.weight(i, "up_exps"), g = gated ? m.weight(i, "gate_exps") : u, d = m.weight(i, "down_exps"), r = m.weight(i, "gate_inp");
            const int64_t dm = width(op.a);
            // The router reads b when given (a latent MoE's experts run on a projection of it), else a.
            const int64_t dr = op.b >= 0 ? width(op.b) : dm;
            check(r.ne(0) == dr && r.ne(1) == n_route, "router '" + r.info->name + "' " + shape_str(r.info) + " does not match [" + std::to_string(dr) + ", " + std::to_string(n_route) + "]");
            // A fused gate|up tensor holds 2 ff rows per expert.
            const bool fused = moe_fused(op);
            if (fused) check(g.info == u.info && g.ne(1) % 2 == 0, "fused expert tensor '" + g.info->name + "' " + shape_str(g.info) + " must be named as both gate and up and hold an even number of rows (gate, then up)");
            const int64_t ff = fused ? g.ne(1) / 2 : g.ne(1);
            check(g.ne(0) == dm && g.ne(2) == n_expert && u.ne(0) == dm && u.ne(1) == g.ne(1) && u.ne(2) == n_expert,
                  "expert tensors '" + g.info->name + "' " + shape_str(g.info) + " / '" + u.info->name + "' " + shape_str(u.info) + " do not match d_model " + std::to_string(dm) + " and " + std::to_string(n_expert) + " experts");
            check(d.ne(0) == ff && d.ne(1) == dm && d.ne(2) == n_expert, "expert tensor '" + d.info->name + "' " + shape_str(d.info) + " does not match");
            // F32 vectors of n elements; per-expert biases exactly [rows, n_expert] (read as expert e's row block).
            auto f32_of = [&](const char * role, int64_t n, const char * what, int64_t rows = 0) {
                const tensor_ref b = m.weight(i, role);
                if (!b.info) return;
                const bool shape_ok = rows ? b.ne(0) == rows && b.ne(1) == n_expert && b.info->n_elements == n : b.info->n_elements == n;
                check(b.type() == KAIL_TYPE_F32 && shape_ok,
                      std::string(what) + " '" + b.info->name + "' must be F32 " + (rows ? "[" + std::to_string(rows) + ", " + std::to_string(n_expert) + "]" : "with " + std::to_string(n) + " elements") +
                          ", is " + type_name(b.type()) + " " + shape_str(b.info));
            };
            f32_of("exp_probs_b", n_route, "expert selection bias");
            const tensor_ref hash = m.weight(i, "tid2eid");
            if (hash.info) check(hash.type() == KAIL_TYPE_I32 && hash.ne(0) == static_cast<int64_t>(op.param_req("n_expert_used")) && hash.info->n_dims == 2,
                                 "hash routing table '" + hash.info->name + "' must be I32 [" + std::to_string(static_cast<int64_t>(op.param_req("n_expert_used"))) + ", n_vocab], is " + type_name(hash.type()) + " " + shape_str(hash.info));
            f32_of("down_exps_s", n_expert, "per-expert output scale");
            f32_of("gate_inp_b", n_route, "router bias");
            if (fused) check(!m.weight(i, "gate_exps_b").info && !m.weight(i, "up_exps_b").info, "fused gate/up experts with per-expert gate or up biases are not supported");
            f32_of("gate_exps_b", g.ne(1) * n_expert, "expert gate bias", g.ne(1));
            f32_of("up_exps_b", g.ne(1) * n_expert, "expert up bias", g.ne(1));
            f32_of("down_exps_b", dm * n_expert, "expert down bias", dm);
        } else if (op.type == OP_MUL && op.weights.count("weight")) {
            const tensor_ref w = m.weight(i, "weight");
            const int64_t n = static_cast<int64_t>(op.param("n", static_cast<double>(width(op.out))));
            // (w_off: the n values from there of a longer vector: RWKV-7's fused lerp weights.)
            const int64_t wo = static_cast<int64_t>(op.param("w_off", 0));
            if (op.params.count("w_off"))
                check(w.type() == KAIL_TYPE_F32 && wo >= 0 && w.info->n_elements >= wo + n,
                      "scale '" + w.info->name + "' must be F32 with at least " + std::to_string(wo + n) + " elements (w_off " + std::to_string(wo) + " + " + std::to_string(n) + "), is " + type_name(w.type()) + " " + shape_str(w.info));
            else
            check(w.type() == KAIL_TYPE_F32 && (w.info->n_elements == n || w.info->n_elements == 1),
                  "scale '" + w.info->name + "' must be F32 with " + std::to_string(n) + " elements or one, is " + type_name(w.type()) + " " + shape_str(w.info));
        } else if (op.type == OP_ATTENTION) {
            const tensor_ref sk = m.weight(i, "sinks");
            const int64_t nh = static_cast<int64_t>(op.param_req("n_head"));
            if (sk.info) check(sk.type() == KAIL_TYPE_F32 && sk.info->n_elements == nh, "attention sinks '" + sk.info->name + "' must be F32 with " + std::to_string(nh) + " elements (one per head), is " + type_name(sk.type()) + " " + shape_str(sk.info));
            // T5's relative position bias: one value per (head, bucket), F32 or F16 as converted.
            const tensor_ref rb = m.weight(i, "rel_b");
            if (rb.info)
                check((rb.type() == KAIL_TYPE_F32 || rb.type() == KAIL_TYPE_F16) && rb.info->n_dims == 2 && rb.ne(0) == nh && rb.ne(1) >= (op.param("rel_bidir", 1) != 0 ? 4 : 2),
                      "relative position bias '" + rb.info->name + "' must be F32 or F16 [" + std::to_string(nh) + " heads, at least " + (op.param("rel_bidir", 1) != 0 ? "4" : "2") + " buckets], is " + type_name(rb.type()) + " " + shape_str(rb.info));
        } else if (op.type == OP_ATTN_RES) {
            // The residual attention's score vector (the converter's fused res_norm x res_proj), F32, one per column.
            const tensor_ref sc = m.weight(i, "score");
            const int64_t n = static_cast<int64_t>(op.param_req("n"));
            check(sc.info && sc.type() == KAIL_TYPE_F32 && sc.info->n_elements == n,
                  "residual attention score " + (sc.info ? "'" + sc.info->name + "' " + type_name(sc.type()) + " " + shape_str(sc.info) : std::string("(missing)")) + " must be F32 with " + std::to_string(n) + " elements");
        } else if (op.type == OP_DSV4_COMPRESS) {
            const int64_t d = static_cast<int64_t>(op.param_req("head_dim")), r = static_cast<int64_t>(op.param_req("ratio")), w = (op.param("overlap", 0) != 0 ? 2 : 1) * d;
            const tensor_ref ape = m.weight(i, "ape"), nw = m.weight(i, "norm");
            check(ape.info && ape.type() == KAIL_TYPE_F32 && ape.ne(0) == w && ape.info->n_elements == w * r,
                  "compressor position bias " + (ape.info ? "'" + ape.info->name + "' " + type_name(ape.type()) + " " + shape_str(ape.info) : std::string("(missing)")) + " must be F32 [" + std::to_string(w) + ", " + std::to_string(r) + "]");
            check(nw.info && nw.type() == KAIL_TYPE_F32 && nw.info->n_elements == d,
                  "compressor norm " + (nw.info ? "'" + nw.info->name + "' " + type_name(nw.type()) + " " + shape_str(nw.info) : std::string("(missing)")) + " must be F32 with " + std::to_string(d) + " elements");
        } else if (op.type == OP_DSV4_ATTENTION) {
            const tensor_ref sk = m.weight(i, "sinks");
            const int64_t nh = static_cast<int64_t>(op.param_req("n_head"));
            if (sk.info) check(sk.type() == KAIL_TYPE_F32 && sk.info->n_elements == nh, "attention sinks '" + sk.info->name + "' must be F32 with " + std::to_string(nh) + " elements (one per head), is " + type_name(sk.type()) + " " + shape_str(sk.info));
        } else if (op.type == OP_QSA_INDEX) {
            const tensor_ref nw = m.weight(i, "weight");
            const int64_t d = static_cast<int64_t>(op.param_req("head_dim"));
            check(nw.info && nw.type() == KAIL_TYPE_F32 && nw.info->n_elements == d,
                  "QSA indexer key norm " + (nw.info ? "'" + nw.info->name + "' " + type_name(nw.type()) + " " + shape_str(nw.info) : std::string("(missing)")) + " must be F32 with " + std::to_string(d) + " elements");
        } else if (op.type == OP_DSV4_HC_POST) {
            const tensor_ref sc = m.weight(i, "scale"), bs = m.weight(i, "base");
            const int64_t n = static_cast<int64_t>(op.param_req("n"));
            check(sc.info && sc.type() == KAIL_TYPE_F32 && sc.info->n_elements >= 3,
                  "hyper-connection scale " + (sc.info ? "'" + sc.info->name + "' " + type_name(sc.type()) + " " + shape_str(sc.info) : std::string("(missing)")) + " must be F32 with 3 elements");
            check(bs.info && bs.type() == KAIL_TYPE_F32 && bs.info->n_elements >= (2 + n) * n,
                  "hyper-connection base " + (bs.info ? "'" + bs.info->name + "' " + type_name(bs.type()) + " " + shape_str(bs.info) : std::string("(missing)")) + " must be F32 with " + std::to_string((2 + n) * n) + " elements");
        } else if (op.type == OP_PLE_NGRAM) {
            // The n-gram table: one row of out / heads values per table row, as many rows as the heads' ranges reach.
            const tensor_ref w = m.weight(i, "weight");
            const int64_t nh = static_cast<int64_t>((op.param_req("n_gram") - 1) * op.param_req("per_gram"));
            int64_t rows = 0;
            for (int64_t h = 0; h < nh; h++) rows = std::max(rows, static_cast<int64_t>(op.param_req("off_" + std::to_string(h)) + op.param_req("voc_" + std::to_string(h))));
            check(w.info && width(op.out) % nh == 0 && w.ne(0) == width(op.out) / nh && w.ne(1) >= rows && w.info->n_elements == w.ne(0) * w.ne(1),
                  "PLE n-gram table " + (w.info ? "'" + w.info->name + "' " + shape_str(w.info) : std::string("(missing)")) + " must be [" + std::to_string(width(op.out) / std::max<int64_t>(nh, 1)) + ", at least " + std::to_string(rows) +
                      "] (" + std::to_string(nh) + " heads filling " + std::to_string(width(op.out)) + " values, rows for every head's range)");
        } else if (op.type == OP_HC_GATES) {
            // The coefficients' scale (one value, at scale_index) and base (n values from base_off), F32.
            const tensor_ref sc = m.weight(i, "scale"), bs = m.weight(i, "base");
            const int64_t n = static_cast<int64_t>(op.param_req("n"));
            // qwen4exp's inject weights: no weights, a gate_scale parameter and no base.
            if (!sc.info && !bs.info && op.params.count("gate_scale")) {
                check(std::isfinite(static_cast<float>(op.param("gate_scale", 0))), "hyper-connection gate_scale " + std::to_string(static_cast<float>(op.param("gate_scale", 0))) + " is not a finite number");
                continue;
            }
            const int64_t si = static_cast<int64_t>(op.param("scale_index", 0)), bo = static_cast<int64_t>(op.param("base_off", 0));
            check(sc.info && sc.type() == KAIL_TYPE_F32 && sc.info->n_elements > si,
                  "hyper-connection scale " + (sc.info ? "'" + sc.info->name + "' " + type_name(sc.type()) + " " + shape_str(sc.info) : std::string("(missing)")) + " must be F32 with more than " + std::to_string(si) + " elements");
            check(bs.info && bs.type() == KAIL_TYPE_F32 && bs.info->n_elements >= bo + n,
                  "hyper-connection base " + (bs.info ? "'" + bs.info->name + "' " + type_name(bs.type()) + " " + shape_str(bs.info) : std::string("(missing)")) + " must be F32 with at least " + std::to_string(bo + n) + " elements");
        } else if (op.type == OP_RWKV_WKV6 && op.params.count("gla_scale")) {
            const tensor_ref u = m.weight(i, "u");
            check(!u.info, "WKV6 gated linear attention (gla_scale) takes no time_first, has '" + (u.info ? u.info->name : std::string()) + "'");
        } else if (op.type == OP_RWKV_WKV6) {
            const tensor_ref u = m.weight(i, "u");
            const int64_t C = static_cast<int64_t>(op.param_req("n_head")) * static_cast<int64_t>(op.param_req("head_dim"));
            check(u.info && u.type() == KAIL_TYPE_F32 && u.info->n_elements == C,
                  "WKV6 time_first " + (u.info ? "'" + u.info->name + "' " + type_name(u.type()) + " " + shape_str(u.info) : std::string("(missing)")) + " must be F32 with " + std::to_string(C) + " elements (n_head x head_dim)");
        } else if (op.type == OP_SSM_CONV) {
            const tensor_ref w = m.weight(i, "weight");
            const int64_t nc = static_cast<int64_t>(op.param_req("d_conv"));
            // [taps, channels], or Kimi-Linear's [taps, 1, channels(, 1)] (its converter keeps HF's conv1d shape).
            // (F16 / BF16: qwen4exp's quantized files keep ple_conv1d in the fallback type of its short rows; llama.cpp casts it to F32.)
            check(w.info && (w.type() == KAIL_TYPE_F32 || w.type() == KAIL_TYPE_F16 || w.type() == KAIL_TYPE_BF16) && w.ne(0) == nc && (w.ne(1) == width(op.a) || (w.ne(1) == 1 && w.ne(2) == width(op.a))) && w.info->n_elements == nc * width(op.a),
                  "convolution kernel " + (w.info ? "'" + w.info->name + "' " + type_name(w.type()) + " " + shape_str(w.info) : std::string("(missing)")) + " must be F32 (or F16 / BF16) [" + std::to_string(nc) + ", " +
                      std::to_string(width(op.a)) + "]");
            const tensor_ref b = m.weight(i, "bias");
            if (b.info) check(b.type() == KAIL_TYPE_F32 && b.info->n_elements == width(op.a), "convolution bias '" + b.info->name + "' must be F32 with " + std::to_string(width(op.a)) + " elements (one per channel), is " + type_name(b.type()) + " " + shape_str(b.info));
        } else if (op.type == OP_GATED_DELTA_NET || op.type == OP_SSM_SCAN) {
            const bool scan = op.type == OP_SSM_SCAN;
            const int64_t hv = static_cast<int64_t>(op.param_req(scan ? "n_head" : "n_v_heads"));
            for (const char * role : {"dt_bias", "a", "d"}) {
                if (!scan && std::string(role) == "d") continue;
                const tensor_ref w = m.weight(i, role);
                // The scan's dt may come biased (Mamba-1: no dt_bias), and its A may hold one value
                // per state element ([n_head][d_state], Mamba-1).
                if (scan && std::string(role) == "dt_bias" && !w.info) continue;
                const int64_t ds = scan ? static_cast<int64_t>(op.param_req("d_state")) : 1;
                if (scan && std::string(role) == "a" && w.info && w.info->n_elements == hv * ds && ds > 1) {
                    check(w.type() == KAIL_TYPE_F32, "SSM scan a '" + w.info->name + "' must be F32, is " + type_name(w.type()));
                    continue;
                }
                // Kimi Delta Attention's dt_bias has one value per key channel of each value head.
                const bool per_channel = !scan && op.param("kda", 0) != 0 && std::string(role) == "dt_bias";
                const int64_t want = per_channel ? hv * static_cast<int64_t>(op.param_req("head_dim")) : hv;
                check(w.info && w.type() == KAIL_TYPE_F32 && w.info->n_elements == want,
                      std::string(scan ? "SSM scan " : "gated delta net ") + role + (w.info ? " '" + w.info->name + "' " + type_name(w.type()) + " " + shape_str(w.info) : std::string(" (missing)")) + " must be F32 with " +
                          std::to_string(want) + (per_channel ? " elements (one per key channel of each value head)" : !scan ? " elements (one per value head)" : std::string(role) == "a" ? " elements (one per head) or n_head x d_state" : " elements (one per head)"));
            }
        } else if (op.type == OP_ROPE) {
            const tensor_ref ff = m.weight(i, "freq_factors");
            const int64_t half = static_cast<int64_t>(op.param_req("n_dims")) / 2;
            if (ff.info) check(ff.type() == KAIL_TYPE_F32 && ff.info->n_elements >= half, "RoPE frequency factors '" + ff.info->name + "' must be F32 with " + std::to_string(half) + " elements, is " + type_name(ff.type()) + " " + shape_str(ff.info));
        }
    }
    // Each recurrent layer belongs to exactly one op (its state, its checkpoint's inputs).
    std::vector<int> rs_uses(m.prog.rs_width.size(), 0);
    m.rs_op.assign(m.prog.rs_width.size(), 0);
    m.rs_record.assign(m.prog.rs_width.size(), 0);
    for (size_t i = 0; i < m.prog.ops.size(); i++) {
        const op_desc & op = m.prog.ops[i];
        if (op.type != OP_SSM_CONV && op.type != OP_GATED_DELTA_NET && op.type != OP_SSM_SCAN && op.type != OP_LIGHTNING_ATTN && op.type != OP_PLE_NGRAM && op.type != OP_RWKV_WKV7 && op.type != OP_RWKV_WKV6 && op.type != OP_TOKEN_SHIFT) continue;
        const size_t l = static_cast<size_t>(op.param_req("layer"));
        rs_uses[l]++;
        m.rs_op[l] = i;
        // (The PLE n-gram op records each position's token.)
        if (op.type == OP_PLE_NGRAM) {
            m.rs_record[l] = 1;
            continue;
        }
        // A checkpoint records the op's inputs per position: a, and alpha|beta (KDA: S alphas per head) or dt.
        m.rs_record[l] = m.prog.buffers[static_cast<size_t>(op.a)].width +
                         (op.type == OP_GATED_DELTA_NET ? static_cast<int64_t>(op.param_req("n_v_heads")) * (1 + (op.param("kda", 0) != 0 ? static_cast<int64_t>(op.param_req("head_dim")) : 1)) : op.type == OP_SSM_SCAN ? static_cast<int64_t>(op.param_req("n_head")) : 0);
    }
    for (size_t l = 0; l < rs_uses.size(); l++)
        if (rs_uses[l] != 1) throw error(KAIL_E_INVALID_ARG, "program: recurrent layer " + std::to_string(l) + " is used by " + std::to_string(rs_uses[l]) + " ops (each by exactly one)");
    load_lora_adapters(m);
    for (size_t i = 0; i < m.prog.ops.size(); i++) {
        if (m.prog.ops[i].type == OP_MATMUL && m.prog.ops[i].out == m.prog.logits) n_vocab_ = m.weight(i, "weight").ne(1);
    }
    if (m.prog.logits < 0 || m.prog.logits >= nb || !m.prog.buffers[m.prog.logits].out_rows)
        throw error(KAIL_E_INVALID_ARG, "program: logits buffer must be an out-rows buffer");
    if (m.prog.hidden < -1 || m.prog.hidden >= nb || (m.prog.hidden >= 0 && m.prog.buffers[m.prog.hidden].out_rows))
        throw error(KAIL_E_INVALID_ARG, "program: the hidden buffer must be a per-token buffer");
    for (const op_desc & op : m.prog.ops) {
        if (op.type != OP_INPUT) continue;
        if (m.prog.buffers[op.out].out_rows) throw error(KAIL_E_INVALID_ARG, "program: the input op must write a per-token buffer");
        if (m.input_width && m.input_width != m.prog.buffers[op.out].width) throw error(KAIL_E_INVALID_ARG, "program: input ops of different widths");
        m.input_width = m.prog.buffers[op.out].width;
    }
    n_vocab_ = m.prog.buffers[m.prog.logits].width;
    m.kv.assign(m.params.n_seq_max, std::vector<kv_seq_layer>(m.prog.n_kv_layers));
    m.rs.assign(m.params.n_seq_max, std::vector<std::vector<float>>(m.prog.rs_width.size()));
    m.rs_ck.assign(static_cast<size_t>(m.params.n_seq_max), {});
    m.kv_ring = kv_ring_rows(m.prog, m.params.n_ctx, m.params.n_batch, m.params.swa_full);
    m.any_ring = std::any_of(m.kv_ring.begin(), m.kv_ring.end(), [](int64_t r) { return r > 0; });
    m.kv_packed = kv_packed_layouts(m.prog, m.params.n_ctx, m.params.n_batch, m.params.swa_full);
    // A ring of raw rows holds the window plus one batch, as the sliding-window rings.
    m.any_ring = m.any_ring || std::any_of(m.kv_packed.begin(), m.kv_packed.end(), [](const kv_packed_layout & l) { return l.ring > 0 && l.window > 0; });
    // An attention op without k and v (Gemma's shared KV layers) reads the rows an earlier op of the
    // program stored in its layer during the same pass.
    // Its heads must be the storing op's (the same widths could be other heads).
    {
        std::vector<const op_desc *> stored(static_cast<size_t>(m.prog.n_kv_layers), nullptr);
        for (size_t i = 0; i < m.prog.ops.size(); i++) {
            const op_desc & op = m.prog.ops[i];
            if (op.type != OP_ATTENTION || op.params.count("ext_layer")) continue;
            const size_t layer = static_cast<size_t>(op.param_req("layer"));
            const op_desc * s = stored[layer];
            if (op.b >= 0) { stored[layer] = &op; continue; }
            check(s != nullptr, "program: op " + std::to_string(i) + " (attention) reads kv layer " + std::to_string(layer) + ", which no earlier op stores");
            for (const char * k : {"n_head_kv", "head_dim"})
                check(op.param_req(k) == s->param_req(k), "program: op " + std::to_string(i) + " (attention) reads kv layer " + std::to_string(layer) + " with another " + k + " than the op that stores it");
            check(op.param("head_dim_v", op.param_req("head_dim")) == s->param("head_dim_v", s->param_req("head_dim")), "program: op " + std::to_string(i) + " (attention) reads kv layer " + std::to_string(layer) + " with another head_dim_v than the op that stores it");
        }
    }
    // An expert prefetch reads ahead for the next moe op, which must route on the buffer it reads.
    m.prefetch_for.assign(m.prog.ops.size(), -1);
    m.routed_early.assign(m.prog.ops.size(), false);
    for (size_t i = 0; i < m.prog.ops.size(); i++) {
        if (m.prog.ops[i].type != OP_MOE_PREFETCH) continue;
        size_t j = i + 1;
        while (j < m.prog.ops.size() && m.prog.ops[j].type != OP_MOE) j++;
        check(j < m.prog.ops.size(), "program: op " + std::to_string(i) + " (moe_prefetch) has no moe op after it");
        const op_desc & mop = m.prog.ops[j];
        check((mop.b >= 0 ? mop.b : mop.a) == m.prog.ops[i].a, "program: op " + std::to_string(i) + " (moe_prefetch) reads another buffer than the router of op " + std::to_string(j) + " (moe)");
        m.prefetch_for[i] = static_cast<int>(j);
        m.routed_early[j] = true;
    }
    find_kv_ropes(m);
    m.seq_len.assign(m.params.n_seq_max, 0);
    m.enc_len.assign(m.params.n_seq_max, 0);
    for (const op_desc & op : m.prog.ops) m.enc_dec = m.enc_dec || op.params.count("pass");
    if (m.enc_dec) {
        check(!m.src, "an encoder-decoder program (ops tagged pass) cannot read another model's cache (kv_source)");
        check(m.prog.rs_width.empty() && !m.any_ring, "an encoder-decoder program (ops tagged pass) has no recurrent or sliding-window ring layers");
        m.kv_role = kv_enc_dec_roles(m.prog);
    }
    m.bufs.resize(m.prog.buffers.size());
    m.stats.expert_counts.assign(static_cast<size_t>(m.prog.n_moe_layers) * m.prog.n_expert, 0);
    if (streaming) setup_streaming(m);
    else if (copy) load_weights(m, true);
    m.pool.reset(new threadpool(m.params.n_threads));
}

model::~model() = default;

int model::n_threads() const { return impl_->pool->n_threads(); }

int64_t model::hidden_width() const { return impl_->prog.hidden >= 0 ? impl_->prog.buffers[impl_->prog.hidden].width : 0; }

int64_t model::input_width() const { return impl_->input_width; }

int64_t model::seq_len(int seq) const {
    if (seq < 0 || seq >= impl_->params.n_seq_max) throw error(KAIL_E_INVALID_ARG, "sequence id out of range");
    return impl_->seq_len[seq];
}

namespace {
// A ring keeps the positions [hw - R, hw): continuing at len needs the window before it,
// [len - window, len), which later positions may have overwritten. Then only a clear is exact.
bool kv_rings_hold(const model::impl & m, int seq, int64_t len) {
    for (int l = 0; l < m.prog.n_kv_layers && len > 0; l++) {
        const kv_seq_layer & c = m.kv[seq][l];
        const int64_t R = m.kv_ring[l], W = R ? R - (m.params.n_batch - 1) : 0;
        if (c.mirrored && std::max<int64_t>(0, len - W) + R < c.hw) return false;
        // DeepSeek-V4's rings (raw rows, compressor rows): the oldest row kept must reach back to
        // what continuing at len needs.
        const kv_packed_layout & pl = m.kv_packed[static_cast<size_t>(l)];
        if (pl.ring > 0 && c.hw - pl.ring > pl.need_from(len)) return false;
    }
    return true;
}
} // namespace

std::vector<float> model::seq_states(int seq) const {
    const impl & m = *impl_;
    if (seq < 0 || seq >= m.params.n_seq_max) throw error(KAIL_E_INVALID_ARG, "sequence id out of range");
    if (m.prog.rs_width.empty()) throw error(KAIL_E_UNSUPPORTED, "the model has no recurrent layers: its sequences have no states apart from the KV cache");
    std::vector<float> out;
    for (size_t l = 0; l < m.prog.rs_width.size(); l++) {
        const std::vector<float> & st = m.rs[static_cast<size_t>(seq)][l];
        if (st.empty()) out.resize(out.size() + static_cast<size_t>(m.prog.rs_width[l]), 0.0f);
        else out.insert(out.end(), st.begin(), st.end());
    }
    return out;
}

int64_t model::seq_set_states(int seq, int64_t len, const float * states, size_t n) {
    impl & m = *impl_;
    if (seq < 0 || seq >= m.params.n_seq_max) throw error(KAIL_E_INVALID_ARG, "sequence id out of range");
    if (m.prog.rs_width.empty()) throw error(KAIL_E_UNSUPPORTED, "the model has no recurrent layers: its sequences have no states apart from the KV cache");
    size_t want = 0;
    for (int64_t w : m.prog.rs_width) want += static_cast<size_t>(w);
    if (n != want) throw error(KAIL_E_INVALID_ARG, "recurrent states of " + std::to_string(n) + " floats; the model's are " + std::to_string(want));
    if (len < 1 || len > m.seq_len[seq])
        throw error(KAIL_E_INVALID_ARG, "states for " + std::to_string(len) + " positions: the sequence holds " + std::to_string(m.seq_len[seq]));
    if (!kv_rings_hold(m, seq, len)) {
        seq_truncate(seq, 0);
        return 0;
    }
    rs_drop_checkpoint(m.rs_ck[static_cast<size_t>(seq)]);
    size_t off = 0;
    for (size_t l = 0; l < m.prog.rs_width.size(); l++) {
        std::vector<float> & st = m.rs[static_cast<size_t>(seq)][l];
        const uint64_t before = st.capacity() * sizeof(float);
        st.assign(states + off, states + off + m.prog.rs_width[l]);
        m.kv_bytes = m.kv_bytes - before + st.capacity() * sizeof(float);
        off += static_cast<size_t>(m.prog.rs_width[l]);
    }
    m.seq_len[seq] = len;
    return len;
}

int64_t model::seq_truncate(int seq, int64_t len) {
    impl & m = *impl_;
    if (seq < 0 || seq >= m.params.n_seq_max) throw error(KAIL_E_INVALID_ARG, "sequence id out of range");
    if (len < 0) throw error(KAIL_E_INVALID_ARG, "length must be >= 0");
    if (m.src) return len;  // a draft over another model's cache keeps none of its own
    len = std::min(m.seq_len[seq], len);
    // A recurrent layer's state is the sequence's whole past: it cannot be cut back, only cleared,
    // unless the sequence keeps a checkpoint at or before len (then its inputs since are replayed).
    if (!m.prog.rs_width.empty() && len < m.seq_len[seq]) {
        impl::rs_checkpoint & ck = m.rs_ck[static_cast<size_t>(seq)];
        if (ck.pos0 >= 0 && len >= ck.pos0 && ck.pos0 + ck.n == m.seq_len[seq]) rs_rewind(m, seq, len - ck.pos0);
        else len = 0;
    }
    if (!kv_rings_hold(m, seq, len)) len = 0;
    if (len < m.enc_len[seq]) len = 0;  // the decoder needs the whole encoder output: all or nothing
    m.seq_len[seq] = len;
    if (len == 0) {
        m.enc_len[seq] = 0;
        for (auto & l : m.kv[seq]) {
            m.kv_bytes -= l.k.capacity() + l.v.capacity();
            std::vector<uint8_t>().swap(l.k);
            std::vector<uint8_t>().swap(l.v);
            l.cap = 0;
            l.mirrored = false;
            l.hw = 0;
        }
        for (auto & r : m.rs[seq]) {
            m.kv_bytes -= r.capacity() * sizeof(float);
            std::vector<float>().swap(r);
        }
        rs_drop_checkpoint(m.rs_ck[static_cast<size_t>(seq)]);
    }
    return len;
}

void model::seq_copy(int src, int dst) {
    impl & m = *impl_;
    if (src < 0 || src >= m.params.n_seq_max || dst < 0 || dst >= m.params.n_seq_max) throw error(KAIL_E_INVALID_ARG, "sequence id out of range");
    if (src == dst || m.src) return;  // (a draft over another model's cache keeps none to copy)
    seq_truncate(dst, 0);
    for (int l = 0; l < m.prog.n_kv_layers; l++) {
        m.kv[dst][l].k = m.kv[src][l].k;
        m.kv[dst][l].v = m.kv[src][l].v;
        m.kv[dst][l].cap = m.kv[src][l].cap;
        m.kv[dst][l].mirrored = m.kv[src][l].mirrored;
        m.kv[dst][l].hw = m.kv[src][l].hw;
        m.kv_bytes += m.kv[dst][l].k.capacity() + m.kv[dst][l].v.capacity();
    }
    rs_drop_checkpoint(m.rs_ck[static_cast<size_t>(dst)]);
    for (size_t l = 0; l < m.rs[src].size(); l++) {
        m.rs[dst][l] = m.rs[src][l];
        m.kv_bytes += m.rs[dst][l].capacity() * sizeof(float);
    }
    m.seq_len[dst] = m.seq_len[src];
    m.enc_len[dst] = m.enc_len[src];
}

void model::seq_keep_rollback(int seq, bool on) {
    impl & m = *impl_;
    if (seq < 0 || seq >= m.params.n_seq_max) throw error(KAIL_E_INVALID_ARG, "sequence id out of range");
    impl::rs_checkpoint & ck = m.rs_ck[static_cast<size_t>(seq)];
    ck.armed = on && !m.prog.rs_width.empty();
    if (!ck.armed) rs_drop_checkpoint(ck);
}

int model::n_lora() const { return static_cast<int>(impl_->params.lora.size()); }

void model::set_lora_scales(int seq, const std::vector<float> & scales) {
    impl & m = *impl_;
    if (seq < 0 || seq >= m.params.n_seq_max) throw error(KAIL_E_INVALID_ARG, "sequence id out of range");
    if (scales.size() != m.params.lora.size())
        throw error(KAIL_E_INVALID_ARG, "LoRA scales: " + std::to_string(scales.size()) + " given, the model has " + std::to_string(m.params.lora.size()) + " adapters");
    for (float s : scales)
        if (!std::isfinite(s)) throw error(KAIL_E_INVALID_ARG, "LoRA scales must be finite numbers");
    m.lora_scale[seq] = scales;
}

uint64_t model::kv_bytes_used() const { return impl_->kv_bytes; }

uint64_t model::kv_bytes_per_token() const {
    uint64_t b = 0;
    for (int l = 0; l < impl_->prog.n_kv_layers; l++) {
        // DeepSeek-V4's packed layers: a ring grows with no position; a row per block, its share.
        const kv_packed_layout & pl = impl_->kv_packed[static_cast<size_t>(l)];
        if (pl.packed()) {
            if (!pl.ring) b += kv_row_bytes(pl.f32 ? KAIL_TYPE_F32 : impl_->params.kv_type, impl_->prog.kv_k_width[l]) / static_cast<uint64_t>(pl.per);
            continue;
        }
        b += kv_row_bytes(impl_->params.kv_type, impl_->prog.kv_k_width[l]) + kv_row_bytes(impl_->params.kv_type_v, impl_->prog.kv_v_width[l]);
    }
    return b;
}

uint64_t model::kv_bytes_capacity() const {
    return kv_bytes_per_sequence(impl_->prog, impl_->params.n_ctx, impl_->params.n_batch, impl_->params.kv_type, impl_->params.kv_type_v, impl_->params.swa_full) *
           static_cast<uint64_t>(impl_->params.n_seq_max);
}

void model::imatrix_collect(bool on) {
    std::lock_guard<std::mutex> lk(impl_->imx_mu);
    impl_->imx_on = on;
    if (on) impl_->imx.clear();
}

std::map<std::string, imatrix_stats> model::imatrix_take(bool clear) {
    std::lock_guard<std::mutex> lk(impl_->imx_mu);
    if (!clear) return impl_->imx;
    std::map<std::string, imatrix_stats> out;
    out.swap(impl_->imx);
    return out;
}

model_stats model::stats() const {
    model_stats s;
    {
        std::lock_guard<std::mutex> lk(impl_->stats_mu);
        s = impl_->stats;
    }
    for (const impl::rs_checkpoint & ck : impl_->rs_ck) {
        for (const auto & v : ck.state) s.rollback_bytes += v.capacity() * sizeof(float);
        for (const auto & v : ck.inputs) s.rollback_bytes += v.capacity() * sizeof(float);
    }
    if (impl_->plan) {
        s.streaming = true;
        s.resident_bytes = impl_->plan->resident_bytes;
    }
    if (impl_->stream) s.stream = impl_->stream->stats();
    return s;
}

void model::warm_experts(const std::vector<expert_key> & experts, const std::vector<double> & shares) {
    if (!impl_->stream) return;
    if (!shares.empty() && shares.size() != experts.size()) throw error(KAIL_E_INVALID_ARG, "warm_experts: shares and experts differ in length");
    impl_->stream->warm(experts.data(), shares.empty() ? nullptr : shares.data(), experts.size());
}

residency_plan model::plan() const { return impl_->plan ? *impl_->plan : residency_plan{}; }

namespace {

// ---- ops ----------------------------------------------------------------------------------------

struct exec_ctx {
    model::impl & m;
    const batch & b;
    int64_t       n_tok;
    int64_t       n_out;
    std::atomic<bool> & cancel;
    std::vector<int32_t> out_seq;  // the sequence of each output row (rows with b.output set, in order)
    int64_t rows(int buf) const { return m.prog.buffers[buf].out_rows ? n_out : n_tok; }
    int32_t seq_of_row(int buf, int64_t r) const { return m.prog.buffers[buf].out_rows ? out_seq[r] : b.seq[r]; }
    float * ptr(int buf) { return m.bufs[buf].data(); }
    int64_t width(int buf) const { return m.prog.buffers[buf].width; }
};

// LoRA (model_params::lora). The scales of n rows (each its sequence's, times alpha / rank) into
// rs; false when all are 0 (then the pair adds nothing).
template <typename SEQ>
bool lora_row_scales(const model::impl & m, const model::impl::lora_pair & l, int64_t n, SEQ seq_of, std::vector<float> & rs) {
    rs.resize(static_cast<size_t>(n));
    bool any = false;
    for (int64_t i = 0; i < n; i++) any |= (rs[i] = l.factor * m.lora_scale[seq_of(i)][l.adapter]) != 0.0f;
    return any;
}

// A x for n rows of `in` (expert e's slice of A for a per-expert pair): n x rank floats.
std::vector<float> lora_a_x(const model::impl::lora_pair & l, int64_t e, const float * in, int64_t in_stride, int64_t n, threadpool * pool) {
    const int64_t r = l.b.ne(0);
    std::vector<float> ax(static_cast<size_t>(n * r));
    matmul(l.a.type(), l.a.data + static_cast<size_t>(e) * l.a.matrix_bytes(), l.a.row_bytes(), r, l.a.ne(0), in, static_cast<size_t>(in_stride) * 4, n,
           ax.data(), static_cast<size_t>(r) * 4, pool);
    return ax;
}

// out[i] += rs[i] * B ax[i] for n rows of rank floats (expert e's slice of B for a per-expert pair).
void lora_add_b(const model::impl::lora_pair & l, int64_t e, const float * ax, int64_t n, const float * rs, float * const * out, int64_t n_out, threadpool * pool) {
    const int64_t r = l.b.ne(0);
    std::vector<float> bax(static_cast<size_t>(n * n_out));
    matmul(l.b.type(), l.b.data + static_cast<size_t>(e) * l.b.matrix_bytes(), l.b.row_bytes(), n_out, r, ax, static_cast<size_t>(r) * 4, n,
           bax.data(), static_cast<size_t>(n_out) * 4, pool);
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n_out; j++) out[i][j] += rs[i] * bax[static_cast<size_t>(i * n_out + j)];
}

void op_embed(exec_ctx & x, const op_desc & op, size_t oi) {
    const tensor_ref w = x.m.weight(oi, "weight");
    const int64_t d = w.ne(0), n_vocab = w.ne(1);
    float * out = x.ptr(op.out);
    const int64_t ow = x.width(op.out);
    // index 0: the token's row; 1: the position's (BERT's learned position embeddings); 2: row 0
    // (BERT's token type 0, "sentence A", which llama.cpp gives every token). accumulate: add it.
    const int index = static_cast<int>(op.param("index", 0));
    const bool acc = op.param("accumulate", 0) != 0;
    std::vector<float> row(acc ? static_cast<size_t>(d) : 0);
    for (int64_t t = 0; t < x.n_tok; t++) {
        const int64_t r = index == 0 ? x.b.tokens[t] : index == 1 ? x.b.pos[t] : index == 3 ? static_cast<int64_t>(x.ptr(op.b)[t * x.width(op.b) + static_cast<int64_t>(op.param("b_off", 0))]) : 0;
        if (r < 0 || r >= n_vocab) {
            if (index == 1) throw error(KAIL_E_INVALID_ARG, "position " + std::to_string(r) + " is past the model's " + std::to_string(n_vocab) + " learned positions");
            throw error(KAIL_E_INVALID_ARG, "token id " + std::to_string(r) + " outside the vocabulary (0.." + std::to_string(n_vocab - 1) + ")");
        }
        const uint8_t * src = w.data + static_cast<size_t>(r) * w.row_bytes();
        if (!acc) {
            dequantize_row(w.type(), src, out + t * ow, d);
            continue;
        }
        dequantize_row(w.type(), src, row.data(), d);
        for (int64_t j = 0; j < d; j++) out[t * ow + j] += row[static_cast<size_t>(j)];
    }
    if (index != 0) return;
    std::vector<float> rs;
    std::vector<float *> outs;
    for (const model::impl::lora_pair & l : x.m.lora[oi]) {
        // llama.cpp's build_inp_embd: + scale * B A[token] (A's rows gathered as floats).
        if (!lora_row_scales(x.m, l, x.n_tok, [&](int64_t t) { return x.b.seq[t]; }, rs)) continue;
        const int64_t r = l.a.ne(0);
        std::vector<float> rows(static_cast<size_t>(x.n_tok * r));
        for (int64_t t = 0; t < x.n_tok; t++)
            dequantize_row(l.a.type(), l.a.data + static_cast<size_t>(x.b.tokens[t]) * l.a.row_bytes(), rows.data() + t * r, r);
        outs.resize(static_cast<size_t>(x.n_tok));
        for (int64_t t = 0; t < x.n_tok; t++) outs[t] = out + t * ow;
        lora_add_b(l, 0, rows.data(), x.n_tok, rs.data(), outs.data(), d, x.m.pool.get());
    }
}

void rms_norm_row(const float * x, float * y, int64_t n, float eps, const float * w) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += static_cast<double>(x[i] * x[i]);
    const float mean = static_cast<float>(sum / static_cast<double>(n));
    const float scale = 1.0f / std::sqrt(mean + eps);
    if (w) for (int64_t i = 0; i < n; i++) y[i] = (x[i] * scale) * w[i];
    else for (int64_t i = 0; i < n; i++) y[i] = x[i] * scale;
}

// RMS norm times its weight, plus its bias when the op has one (llama.cpp's build_norm adds
// attn_norm_b after LLM_NORM_RMS too: Phi-3.5-MoE's norms carry biases).
void op_rms_norm(exec_ctx & x, const op_desc & op, size_t oi) {
    const tensor_ref w = x.m.weight(oi, "weight"), b = x.m.weight(oi, "bias");
    const float eps = static_cast<float>(op.param_req("eps"));
    const int64_t n = x.width(op.a), rows = x.rows(op.a);
    const float * wp = w.info ? reinterpret_cast<const float *>(w.data) : nullptr;
    const float * bp = b.info ? reinterpret_cast<const float *>(b.data) : nullptr;
    for (int64_t t = 0; t < rows; t++) {
        float * y = x.ptr(op.out) + t * x.width(op.out);
        rms_norm_row(x.ptr(op.a) + t * n, y, n, eps, wp);
        if (bp) for (int64_t i = 0; i < n; i++) y[i] += bp[i];
    }
}

// ggml's norm (LLM_NORM) of n values, the mean and the variance about it summed as
// ggml_compute_forward_norm_f32 sums them, then * w + b when given; y may be a.
void layer_norm_row(const float * a, float * y, int64_t n, float eps, const float * wp, const float * bp) {
    double sum = 0.0;
    for (int64_t i = 0; i < n; i++) sum += static_cast<double>(a[i]);
    const float mean = static_cast<float>(sum) / static_cast<float>(n);
    double var = 0.0;
    for (int64_t i = 0; i < n; i++) {
        y[i] = a[i] - mean;
        var += static_cast<double>(y[i] * y[i]);
    }
    const float scale = 1.0f / std::sqrt(static_cast<float>(var / static_cast<double>(n)) + eps);
    for (int64_t i = 0; i < n; i++) {
        float v = y[i] * scale;
        if (wp) v *= wp[i];
        if (bp) v += bp[i];
        y[i] = v;
    }
}

void op_layer_norm(exec_ctx & x, const op_desc & op, size_t oi) {
    const tensor_ref w = x.m.weight(oi, "weight"), b = x.m.weight(oi, "bias");
    const float eps = static_cast<float>(op.param_req("eps"));
    const int64_t n = x.width(op.a), rows = x.rows(op.a);
    const float * wp = w.info ? reinterpret_cast<const float *>(w.data) : nullptr;
    const float * bp = b.info ? reinterpret_cast<const float *>(b.data) : nullptr;
    for (int64_t t = 0; t < rows; t++) layer_norm_row(x.ptr(op.a) + t * n, x.ptr(op.out) + t * x.width(op.out), n, eps, wp, bp);
}

// ggml-cpu's GELU (GGML_GELU_FP16): 0 at or below -10, x at or above 10, else the tanh form
// looked up in a table of F16 inputs and F16 outputs (built once, as ggml's ggml_table_gelu_f16).
// Callers fetch the table once per op and pass it: a function-local static would be checked on
// every element.
const float * gelu_table() {
    static const std::vector<float> table = [] {
        std::vector<float> t(1 << 16);
        for (uint32_t i = 0; i < t.size(); i++) {
            const float h = cpu::fp16_to_fp32_sw(static_cast<uint16_t>(i));
            const float g = 0.5f * h * (1.0f + std::tanh(0.79788456080286535587989211986876f * h * (1.0f + 0.044715f * h * h)));
            t[i] = cpu::fp16_to_fp32_sw(cpu::fp32_to_fp16_sw(g));
        }
        return t;
    }();
    return table.data();
}

inline float gelu_ggml(const float * table, float v) {
    if (v <= -10.0f) return 0.0f;
    if (v >= 10.0f) return v;
    return table[cpu::fp32_to_fp16_sw(v)];
}

void op_head_rms_norm(exec_ctx & x, const op_desc & op, size_t oi) {
    const tensor_ref w = x.m.weight(oi, "weight");
    const float eps = static_cast<float>(op.param_req("eps"));
    const int64_t hd = static_cast<int64_t>(op.param_req("head_dim"));
    const int64_t n_head = static_cast<int64_t>(op.param_req("n_head"));
    const int64_t off = static_cast<int64_t>(op.param("a_off", 0));
    const float * wp = w.info ? reinterpret_cast<const float *>(w.data) : nullptr;
    const bool per_head = w.info && w.info->n_elements == hd * n_head;  // one weight row per head (a grouped norm)
    // head_gain: the weight is one gain per head, multiplied after the unweighted norm (ggml_mul of {1, n_head}).
    const bool gain = w.info && op.param("head_gain", 0) != 0;
    const int64_t aw = x.width(op.a), ow = x.width(op.out);
    // With `layer_norm`, a LayerNorm of each head (ggml_norm, then the weight: Command R+'s q/k norms).
    const bool ln = op.param("layer_norm", 0) != 0;
    // With `l2`, ggml_l2_norm: a / max(sqrt(sum a^2), eps) (RWKV-7's kk), then the weight if any.
    // With l2 or layer_norm a bias (shared or one per head: RWKV-7's group norm) is added after the weight.
    const bool l2 = op.param("l2", 0) != 0;
    const tensor_ref bw = x.m.weight(oi, "bias");
    const float * bp = bw.info ? reinterpret_cast<const float *>(bw.data) : nullptr;
    const bool b_per_head = bw.info && bw.info->n_elements == hd * n_head;
    for (int64_t t = 0; t < x.rows(op.a); t++)
        for (int64_t h = 0; h < n_head; h++) {
            const float * a = x.ptr(op.a) + t * aw + off + h * hd;
            float * y = x.ptr(op.out) + t * ow + off + h * hd;
            const float * wh = wp && per_head ? wp + h * hd : wp;
            const float * bh = bp && b_per_head ? bp + h * hd : bp;
            if (l2) {
                double sum = 0.0;
                for (int64_t i = 0; i < hd; i++) sum += static_cast<double>(a[i] * a[i]);
                const float scale = 1.0f / std::max(std::sqrt(static_cast<float>(sum)), eps);
                for (int64_t i = 0; i < hd; i++) {
                    float v = a[i] * scale;
                    if (wh) v *= wh[i];
                    if (bh) v += bh[i];
                    y[i] = v;
                }
            } else if (ln) layer_norm_row(a, y, hd, eps, wh, bh);
            else if (gain) {
                rms_norm_row(a, y, hd, eps, nullptr);
                const float g = wp[h];
                for (int64_t i = 0; i < hd; i++) y[i] *= g;
            } else rms_norm_row(a, y, hd, eps, wh);
        }
}

// A weight's imatrix statistics, made on first use: n_mat matrices of ne0 columns.
imatrix_stats & imx_entry(model::impl & m, const tensor_ref & w, int64_t n_mat) {
    std::lock_guard<std::mutex> lk(m.imx_mu);
    imatrix_stats & e = m.imx[w.info->name];
    if (e.sums.empty()) {
        e.sums.assign(static_cast<size_t>(w.ne(0) * n_mat), 0.0f);
        e.counts.assign(static_cast<size_t>(n_mat), 0);
    } else if (e.sums.size() != static_cast<size_t>(w.ne(0) * n_mat)) {
        throw error(KAIL_E_INTERNAL, "imatrix: " + w.info->name + " is multiplied with inputs of two sizes");
    }
    return e;
}

// A weight's statistics kept flat, as llama-imatrix keeps a batched (per-head) product's: n sums, one count.
imatrix_stats & imx_entry_flat(model::impl & m, const gguf_tensor_info & w, int64_t n) {
    std::lock_guard<std::mutex> lk(m.imx_mu);
    imatrix_stats & e = m.imx[w.name];
    if (e.sums.empty()) {
        e.sums.assign(static_cast<size_t>(n), 0.0f);
        e.counts.assign(1, 0);
    } else if (e.sums.size() != static_cast<size_t>(n)) {
        throw error(KAIL_E_INTERNAL, "imatrix: " + w.name + " is multiplied with inputs of two sizes");
    }
    return e;
}

// Adds `rows` input rows (stride floats apart) to matrix `mat` of e: sum of squares per column.
void imx_add(imatrix_stats & e, int64_t mat, int64_t ne0, const float * x, int64_t stride, int64_t rows) {
    float * acc = e.sums.data() + mat * ne0;
    for (int64_t r = 0; r < rows; r++) {
        const float * xr = x + r * stride;
        for (int64_t j = 0; j < ne0; j++) acc[j] += xr[j] * xr[j];
    }
    e.counts[static_cast<size_t>(mat)] += rows;
}

void op_matmul(exec_ctx & x, const op_desc & op, size_t oi) {
    const tensor_ref w = x.m.weight(oi, "weight");
    const int64_t rows = x.rows(op.a);
    const int64_t a_off = static_cast<int64_t>(op.param("a_off", 0));
    const int64_t o_off = static_cast<int64_t>(op.param("out_off", 0));
    // groups G (DeepSeek-V4's grouped output LoRA): group g's w.ne(1) / G weight rows read the
    // group's w.ne(0) inputs at a_off + g w.ne(0) and write outputs o_off + g w.ne(1) / G on.
    const int64_t groups = static_cast<int64_t>(op.param("groups", 1));
    if (groups > 1) {
        const int64_t per = w.ne(1) * w.ne(2) / groups;
        for (int64_t g = 0; g < groups; g++)
            matmul(w.type(), w.data + static_cast<size_t>(g * per) * w.row_bytes(), w.row_bytes(), per, w.ne(0),
                   x.ptr(op.a) + a_off + g * w.ne(0), static_cast<size_t>(x.width(op.a)) * 4, rows,
                   x.ptr(op.out) + o_off + g * per, static_cast<size_t>(x.width(op.out)) * 4, x.m.pool.get());
        // + bias over all G groups' outputs (RWKV-6's time_mix_lerp_fused after time_mix_w2's slices).
        const tensor_ref bias = x.m.weight(oi, "bias");
        if (bias.info) {
            const float * bp = reinterpret_cast<const float *>(bias.data);
            for (int64_t t = 0; t < rows; t++) {
                float * y = x.ptr(op.out) + t * x.width(op.out) + o_off;
                for (int64_t i = 0; i < per * groups; i++) y[i] += bp[i];
            }
        }
        return;
    }
    matmul(w.type(), w.data, w.row_bytes(), w.ne(1), w.ne(0),
           x.ptr(op.a) + a_off, static_cast<size_t>(x.width(op.a)) * 4, rows,
           x.ptr(op.out) + o_off, static_cast<size_t>(x.width(op.out)) * 4, x.m.pool.get());
    // (llama-imatrix skips passes of fewer than 16 rows.)
    if (x.m.imx_on && rows >= 16) imx_add(imx_entry(x.m, w, 1), 0, w.ne(0), x.ptr(op.a) + a_off, x.width(op.a), rows);
    std::vector<float> rs;
    std::vector<float *> outs;
    for (const model::impl::lora_pair & l : x.m.lora[oi]) {
        // llama.cpp's build_lora_mm: + scale * B (A x), the scale per row (its sequence's).
        if (!lora_row_scales(x.m, l, rows, [&](int64_t t) { return x.seq_of_row(op.a, t); }, rs)) continue;
        const std::vector<float> ax = lora_a_x(l, 0, x.ptr(op.a) + a_off, x.width(op.a), rows, x.m.pool.get());
        outs.resize(static_cast<size_t>(rows));
        for (int64_t t = 0; t < rows; t++) outs[t] = x.ptr(op.out) + t * x.width(op.out) + o_off;
        lora_add_b(l, 0, ax.data(), rows, rs.data(), outs.data(), w.ne(1), x.m.pool.get());
    }
    const tensor_ref bias = x.m.weight(oi, "bias");
    if (bias.info) {
        const float * bp = reinterpret_cast<const float *>(bias.data);
        for (int64_t t = 0; t < rows; t++) {
            float * y = x.ptr(op.out) + t * x.width(op.out) + o_off;
            for (int64_t i = 0; i < w.ne(1); i++) y[i] += bp[i];
        }
    }
}

template <typename F>
void elementwise(exec_ctx & x, const op_desc & op, F f) {
    const int64_t n = static_cast<int64_t>(op.param("n", static_cast<double>(x.width(op.out))));
    const int64_t rows = x.rows(op.out);
    const int64_t ao = static_cast<int64_t>(op.param("a_off", 0)), bo = static_cast<int64_t>(op.param("b_off", 0)), oo = static_cast<int64_t>(op.param("out_off", 0));
    for (int64_t t = 0; t < rows; t++) {
        const float * a = x.ptr(op.a) + t * x.width(op.a) + ao;
        const float * bb = op.b >= 0 ? x.ptr(op.b) + t * x.width(op.b) + bo : nullptr;
        float * o = x.ptr(op.out) + t * x.width(op.out) + oo;
        for (int64_t i = 0; i < n; i++) o[i] = f(a[i], bb ? bb[i] : 0.0f);
    }
}

// copy with blocks B (checked: out is not a, out's blocks do not overlap): per row, block j's n
// values from a_off + j a_stride to out_off + j out_stride.
void op_strided_copy(exec_ctx & x, const op_desc & op) {
    const int64_t n = static_cast<int64_t>(op.param("n", static_cast<double>(x.width(op.out))));
    const int64_t nb = static_cast<int64_t>(op.param_req("blocks")), as = static_cast<int64_t>(op.param_req("a_stride")), os = static_cast<int64_t>(op.param_req("out_stride"));
    const int64_t ao = static_cast<int64_t>(op.param("a_off", 0)), oo = static_cast<int64_t>(op.param("out_off", 0));
    for (int64_t t = 0; t < x.rows(op.out); t++) {
        const float * a = x.ptr(op.a) + t * x.width(op.a) + ao;
        float * o = x.ptr(op.out) + t * x.width(op.out) + oo;
        for (int64_t j = 0; j < nb; j++) std::memcpy(o + j * os, a + j * as, static_cast<size_t>(n) * sizeof(float));
    }
}

// Gemma 3n's AltUp (llama.cpp gemma3n.cpp altup_predict, altup_correct, calc_magnitude), per
// token over n streams of width d. Predict: ggml_mul_mat of the streams by the token's n x n
// coefficients (row j's n values at b[j n]) plus the streams. Correct: the innovation b - a[act]
// times (coefficient + 1, ggml_scale_bias in float) plus the predictions; in place on a is safe
// (each column's innovation is read before its streams are written). Magnitude: each stream
// times rms(target) / sqrt(max(ms(stream), eps)), the mean squares of float squares summed in double.
void op_altup(exec_ctx & x, const op_desc & op) {
    const int mode = static_cast<int>(op.param_req("mode"));
    const int64_t n = static_cast<int64_t>(op.param_req("n")), d = static_cast<int64_t>(op.param_req("dim"));
    const int64_t act = static_cast<int64_t>(op.param("act", 0)), bo = static_cast<int64_t>(op.param("b_off", 0));
    const float eps = static_cast<float>(op.param("eps", 0));
    auto ms = [](const float * v, int64_t len) {
        double s = 0.0;
        for (int64_t i = 0; i < len; i++) s += static_cast<double>(v[i] * v[i]);
        return static_cast<float>(s) / static_cast<float>(len);
    };
    for (int64_t t = 0; t < x.rows(op.out); t++) {
        const float * a = x.ptr(op.a) + t * x.width(op.a);
        const float * b = x.ptr(op.b) + t * x.width(op.b);
        float * o = x.ptr(op.out) + t * x.width(op.out);
        if (mode == 0) {
            for (int64_t j = 0; j < n; j++)
                for (int64_t i = 0; i < d; i++) {
                    float s = 0.0f;
                    for (int64_t k = 0; k < n; k++) s = std::fma(a[k * d + i], b[j * n + k], s);
                    o[j * d + i] = s + a[j * d + i];
                }
        } else if (mode == 1) {
            const float * c = x.ptr(op.c) + t * x.width(op.c);
            float cf[64];
            for (int64_t j = 0; j < n; j++) cf[j] = c[j] * 1.0f + 1.0f;
            for (int64_t i = 0; i < d; i++) {
                const float inn = b[i] - a[act * d + i];
                for (int64_t j = 0; j < n; j++) o[j * d + i] = inn * cf[j] + a[j * d + i];
            }
        } else {
            // As HF's Gemma 3n: RMS values, the rescaled stream's floored at sqrt(eps) (llama.cpp's
            // sqrt(sum) ratio without the floor divides 0 by 0 on an all-zero stream; otherwise the
            // ratio is the same, to the bit when dim is a power of 4).
            const float target = std::sqrt(ms(b + bo, d));
            for (int64_t j = 0; j < n; j++) {
                const float m = std::sqrt(std::max(ms(a + j * d, d), eps));
                for (int64_t i = 0; i < d; i++) o[j * d + i] = (a[j * d + i] * target) / m;
            }
        }
    }
}

// Gemma 3n's gaussian_topk: relu(a - (mean + std_mul * std)) with ggml's steps in float: the mean
// a double sum cast to float over n, the sample std sqrtf(float(sum (a - mean)^2) * (1 / (n - 1))).
// Granite Switch (llama.cpp's llm_graph_input_switch::set_input): per token the row to embed
// (an activation token's substitute) and the router's one-head q/k/v rows, zero but their first value.
void op_switch_route(exec_ctx & x, const op_desc & op) {
    const int64_t hd = static_cast<int64_t>(op.param_req("head_dim"));
    const float gain = static_cast<float>(op.param_req("gain"));
    const size_t n = op.ids.size() / 2;
    // (A token listed twice is the last adapter's, as llama.cpp's maps are filled in order.)
    std::unordered_map<int64_t, size_t> adapter;
    for (size_t i = 0; i < n; i++) adapter[op.ids[i]] = i;
    const int64_t w = x.width(op.out);
    for (int64_t t = 0; t < x.n_tok; t++) {
        float * o = x.ptr(op.out) + t * w;
        std::fill(o, o + 1 + 3 * hd, 0.0f);
        const auto it = adapter.find(x.b.tokens[t]);
        const bool act = it != adapter.end();
        o[0] = static_cast<float>(act ? op.ids[n + it->second] : x.b.tokens[t]);
        o[1] = 1.0f;
        o[1 + hd] = act ? gain : -gain;
        o[1 + 2 * hd] = act ? static_cast<float>(it->second + 1) : 0.0f;
    }
}

// Granite Switch's switched LoRA delta (build_switched_lora_delta: two ggml_mul_mat_id with the
// router's slot as each token's one expert): out += B_s (A_s a), rows grouped by slot.
void op_switch_lora(exec_ctx & x, const op_desc & op, size_t oi) {
    const tensor_ref la = x.m.weight(oi, "lora_a"), lb = x.m.weight(oi, "lora_b");
    const int64_t n_in = la.ne(0), r = la.ne(1), slots = la.ne(2), n_out = lb.ne(1);
    const int64_t n = x.rows(op.out), wa = x.width(op.a), wo = x.width(op.out), wb = x.width(op.b);
    const int64_t a_off = static_cast<int64_t>(op.param("a_off", 0)), out_off = static_cast<int64_t>(op.param("out_off", 0)), b_off = static_cast<int64_t>(op.param("b_off", 0));
    std::vector<std::vector<int64_t>> rows(static_cast<size_t>(slots));
    const float hi = static_cast<float>(slots - 1);
    for (int64_t t = 0; t < n; t++) {
        // ggml_clamp (MAX(MIN(v, hi), 0): a NaN takes hi), ggml_round (roundf), then the cast.
        const float v = x.ptr(op.b)[t * wb + b_off];
        float c = v < hi ? v : hi;
        c = c > 0.0f ? c : 0.0f;
        rows[static_cast<size_t>(std::round(c))].push_back(t);
    }
    std::vector<float> in, ax, d;
    for (int64_t s = 0; s < slots; s++) {
        const std::vector<int64_t> & rs = rows[static_cast<size_t>(s)];
        const int64_t m = static_cast<int64_t>(rs.size());
        if (!m) continue;
        in.resize(static_cast<size_t>(m * n_in));
        for (int64_t i = 0; i < m; i++) std::copy_n(x.ptr(op.a) + rs[i] * wa + a_off, n_in, in.data() + i * n_in);
        ax.resize(static_cast<size_t>(m * r));
        d.resize(static_cast<size_t>(m * n_out));
        matmul(la.type(), la.data + static_cast<size_t>(s) * la.matrix_bytes(), la.row_bytes(), r, n_in, in.data(), static_cast<size_t>(n_in) * 4, m, ax.data(), static_cast<size_t>(r) * 4, x.m.pool.get());
        matmul(lb.type(), lb.data + static_cast<size_t>(s) * lb.matrix_bytes(), lb.row_bytes(), n_out, r, ax.data(), static_cast<size_t>(r) * 4, m, d.data(), static_cast<size_t>(n_out) * 4, x.m.pool.get());
        for (int64_t i = 0; i < m; i++) {
            float * o = x.ptr(op.out) + rs[i] * wo + out_off;
            for (int64_t j = 0; j < n_out; j++) o[j] += d[static_cast<size_t>(i * n_out + j)];
        }
    }
}

void op_gaussian_topk(exec_ctx & x, const op_desc & op) {
    const float mul = static_cast<float>(op.param_req("std_mul"));
    const int64_t n = x.width(op.a);
    const float inv = 1.0f / static_cast<float>(n - 1);
    for (int64_t t = 0; t < x.rows(op.out); t++) {
        const float * a = x.ptr(op.a) + t * n;
        float * o = x.ptr(op.out) + t * x.width(op.out);
        double s = 0.0;
        for (int64_t i = 0; i < n; i++) s += static_cast<double>(a[i]);
        const float mean = static_cast<float>(s) / static_cast<float>(n);
        double v = 0.0;
        for (int64_t i = 0; i < n; i++) {
            const float dv = a[i] - mean;
            v += static_cast<double>(dv * dv);
        }
        const float sd = std::sqrt(static_cast<float>(v) * inv);
        const float cut = mean + sd * mul;
        for (int64_t i = 0; i < n; i++) {
            const float r = a[i] - cut;
            o[i] = r > 0.0f ? r : 0.0f;
        }
    }
}

// out = a * f(b), f the sigmoid (ggml_sigmoid), or with `softplus` ggml_softplus (Laguna's
// attention gate): one gate per row, per group of values or per value (sigmoid_mul_group).
void op_sigmoid_mul(exec_ctx & x, const op_desc & op) {
    const int64_t n = x.width(op.out);
    const int64_t group = sigmoid_mul_group(op);
    const bool softplus = op.param("softplus", 0) != 0;
    auto f = [softplus](float v) { return softplus ? (v > 20.0f ? v : std::log(1.0f + std::exp(v))) : 1.0f / (1.0f + std::exp(-v)); };
    for (int64_t t = 0; t < x.rows(op.out); t++) {
        const float * g = x.ptr(op.b) + t * x.width(op.b);
        const float * a = x.ptr(op.a) + t * x.width(op.a);
        float * o = x.ptr(op.out) + t * n;
        if (group > 0) {
            for (int64_t j = 0; j < n / group; j++) {
                const float s = f(g[j]);
                for (int64_t i = j * group; i < (j + 1) * group; i++) o[i] = a[i] * s;
            }
        } else {
            const float s = f(g[0]);
            for (int64_t i = 0; i < n; i++) o[i] = a[i] * s;
        }
    }
}

float rope_yarn_ramp(float low, float high, int i0) {
    const float y = (i0 / 2 - low) / std::max(0.001f, high - low);
    return 1 - std::min(1.0f, std::max(0.0f, y));
}

float rope_yarn_corr_dim(int n_dims, int n_ctx_orig, float n_rot, float base) {
    return n_dims * std::log(n_ctx_orig / (n_rot * 2 * static_cast<float>(M_PI))) / (2 * std::log(base));
}

// A rope op's parameters (ggml's rope_ext semantics incl. YaRN and freq factors).
struct rope_spec {
    int n_dims = 0;
    int64_t head_dim = 0, n_head = 0, a_off = 0, rot_off = 0;
    bool neox = false;
    float freq_base = 10000, freq_scale = 1, ext_factor = 0, attn_factor = 1, beta_fast = 32, beta_slow = 1;
    int n_ctx_orig = 0;
    const float * freq_factors = nullptr;
    float corr_dims[2] = {0, 0};
    float theta_scale = 1;

    rope_spec(const model::impl & m, const op_desc & op, size_t oi) {
        n_dims = static_cast<int>(op.param_req("n_dims"));
        head_dim = static_cast<int64_t>(op.param_req("head_dim"));
        n_head = static_cast<int64_t>(op.param_req("n_head"));
        a_off = static_cast<int64_t>(op.param("a_off", 0));
        rot_off = static_cast<int64_t>(op.param("rot_off", 0));
        neox = op.param("neox", 0) != 0;
        freq_base = static_cast<float>(op.param("freq_base", 10000.0));
        freq_scale = static_cast<float>(op.param("freq_scale", 1.0));
        ext_factor = static_cast<float>(op.param("ext_factor", 0.0));
        attn_factor = static_cast<float>(op.param("attn_factor", 1.0));
        beta_fast = static_cast<float>(op.param("beta_fast", 32.0));
        beta_slow = static_cast<float>(op.param("beta_slow", 1.0));
        n_ctx_orig = static_cast<int>(op.param("n_ctx_orig", 0));
        const tensor_ref ff = m.weight(oi, "freq_factors");
        freq_factors = ff.info ? reinterpret_cast<const float *>(ff.data) : nullptr;
        const float start = std::floor(rope_yarn_corr_dim(n_dims, n_ctx_orig, beta_fast, freq_base));
        const float end = std::ceil(rope_yarn_corr_dim(n_dims, n_ctx_orig, beta_slow, freq_base));
        corr_dims[0] = std::max(0.0f, start);
        corr_dims[1] = std::min(static_cast<float>(n_dims - 1), end);
        theta_scale = std::pow(freq_base, -2.0f / n_dims);
    }

    // cos/sin pairs (n_dims floats) for position `pos`. `magnitude` false: a pure rotation, without
    // the attention factor and YaRN's magnitude scale (a context shift turns rows that already
    // carry them to another position).
    void table(float pos, float * cache, bool magnitude = true) const {
        float theta = pos;
        for (int i0 = 0; i0 < n_dims; i0 += 2) {
            const float f = freq_factors ? freq_factors[i0 / 2] : 1.0f;
            const float theta_extrap = theta / f;
            const float theta_interp = freq_scale * theta_extrap;
            float th = theta_interp;
            float mscale = attn_factor;
            if (ext_factor != 0.0f) {
                const float ramp_mix = rope_yarn_ramp(corr_dims[0], corr_dims[1], i0) * ext_factor;
                th = theta_interp * (1 - ramp_mix) + theta_extrap * ramp_mix;
                mscale *= 1.0f + 0.1f * std::log(1.0f / freq_scale);
            }
            if (!magnitude) mscale = 1.0f;
            cache[i0] = std::cos(th) * mscale;
            cache[i0 + 1] = std::sin(th) * mscale;
            theta *= theta_scale;
        }
    }

    // Rotates one head's values (v: the head's first value; the rotated dims start at rot_off).
    void apply(float * v, const float * cache) const {
        v += rot_off;
        for (int i0 = 0; i0 < n_dims; i0 += 2) {
            const float c = cache[i0], s = cache[i0 + 1];
            float * p0;
            float * p1;
            if (neox) { p0 = v + i0 / 2; p1 = v + i0 / 2 + n_dims / 2; }
            else { p0 = v + i0; p1 = v + i0 + 1; }
            const float x0 = *p0, x1 = *p1;
            *p0 = x0 * c - x1 * s;
            *p1 = x0 * s + x1 * c;
        }
    }
};

// Rotates n_head heads (stride head_dim, rotation over n_dims dims starting at rot_off within each
// head) of buffer a in place.
void op_rope(exec_ctx & x, const op_desc & op, size_t oi) {
    const rope_spec r(x.m, op, oi);
    std::vector<float> cache(static_cast<size_t>(r.n_dims));
    const int64_t aw = x.width(op.a);
    // inverse: the rotation back (ggml_rope_ext_back: the sines negated), DeepSeek-V4's output de-rotation.
    const bool inverse = op.param("inverse", 0) != 0;
    for (int64_t t = 0; t < x.n_tok; t++) {
        r.table(static_cast<float>(x.b.pos[t]), cache.data());
        if (inverse) for (int i0 = 0; i0 < r.n_dims; i0 += 2) cache[static_cast<size_t>(i0 + 1)] = -cache[static_cast<size_t>(i0 + 1)];
        for (int64_t h = 0; h < r.n_head; h++) r.apply(x.ptr(op.a) + t * aw + r.a_off + h * r.head_dim, cache.data());
    }
}

// The row of position p in a sequence's KV layer (kv_seq_layer's layout: `heads` blocks of c.cap
// rows, rk / rv bytes per head's row of K / V), growing the layer first: linear rows up to the
// context (a ring layer, R = kv_ring_rows > 0: up to R), then a ring layer turns mirrored. The
// sliding GQA layers and dots3note's sliding MLA blocks (one head of latent rows, no V) share it.
// `rows` > 0: the layer holds at most that many rows (an encoder-decoder's layers), grown straight
// to them with `whole` (an encoding pass's rows, all known).
int64_t kv_ring_slot(model::impl & m, kv_seq_layer & c, int64_t R, int64_t p, int64_t heads, size_t rk, size_t rv, int64_t rows = 0, bool whole = false) {
    // Linear rows up to the context (a ring layer: up to R), then a ring layer turns mirrored.
    const bool to_ring = R && p >= R && !c.mirrored;
    if ((!c.mirrored && p >= c.cap) || to_ring) {
        const int64_t most = R ? R : rows > 0 ? rows : m.params.n_ctx;
        int64_t cap = whole ? most : std::max<int64_t>(p + 1, c.cap * 2);
        cap = std::min<int64_t>(std::max<int64_t>(cap, 16), most);
        if (to_ring) cap = 2 * R;
        const uint64_t old = c.k.size() + c.v.size();
        const uint64_t bytes = static_cast<uint64_t>(cap) * static_cast<uint64_t>(heads) * (rk + rv);
        if (m.params.kv_max_bytes && m.kv_bytes - old + bytes > m.params.kv_max_bytes)
            throw error(KAIL_E_BUDGET, "KV cache budget exceeded: need " + std::to_string(m.kv_bytes - old + bytes) + " bytes, budget " + std::to_string(m.params.kv_max_bytes));
        auto regrow = [&](std::vector<uint8_t> & buf, size_t rb) {
            std::vector<uint8_t> next(static_cast<size_t>(cap * heads) * rb);
            const size_t keep = static_cast<size_t>(c.cap) * rb;
            for (int64_t h = 0; h < heads && keep; h++) {
                std::memcpy(next.data() + static_cast<size_t>(h * cap) * rb, buf.data() + static_cast<size_t>(h) * keep, keep);
                // Turning mirrored: positions [0, c.cap) < R also belong at row p + R.
                if (to_ring) std::memcpy(next.data() + static_cast<size_t>(h * cap + R) * rb, buf.data() + static_cast<size_t>(h) * keep, keep);
            }
            buf.swap(next);
        };
        regrow(c.k, rk);
        regrow(c.v, rv);
        c.cap = cap;
        c.mirrored = c.mirrored || to_ring;
        m.kv_bytes = m.kv_bytes - old + bytes;
    }
    c.hw = std::max<int64_t>(c.hw, p + 1);
    return c.mirrored ? p % R : p;
}

// llama.cpp's llama_relative_position_bucket (T5), its float and double steps kept: the bucket of
// key position x seen from query position y among n_buckets (half per direction when
// bidirectional): exact below half of them, then logarithmic up to max distance 128.
int32_t rel_position_bucket(int32_t x, int32_t y, uint64_t n_buckets, bool bidirectional) {
    const int64_t max_distance = 128;
    if (bidirectional) n_buckets >>= 1;
    const int64_t max_exact = static_cast<int64_t>(n_buckets >> 1);
    int32_t relative_position = x - y;
    int32_t relative_bucket = 0;
    if (bidirectional) {
        relative_bucket += (relative_position > 0) * static_cast<int32_t>(n_buckets);
        relative_position = std::abs(relative_position);
    } else {
        relative_position = -std::min<int32_t>(relative_position, 0);
    }
    if (relative_position < max_exact) return relative_bucket + relative_position;
    // (llama.cpp evaluates this for every distance; below max_exact its log is of 0 and unused.)
    int32_t relative_position_if_large = static_cast<int32_t>(std::floor(static_cast<float>(
        static_cast<double>(max_exact) + static_cast<double>(std::log(static_cast<float>(1.0 * relative_position / max_exact)) * static_cast<float>(static_cast<int64_t>(n_buckets) - max_exact)) /
                                             std::log(1.0 * max_distance / max_exact))));
    relative_position_if_large = std::min<int32_t>(relative_position_if_large, static_cast<int32_t>(n_buckets) - 1);
    return relative_bucket + relative_position_if_large;
}

void op_attention(exec_ctx & x, const op_desc & op, size_t oi) {
    model::impl & m = x.m;
    // ext_layer: a layer of the kv_source's cache (its K/V types, rings), read and never written;
    // a query at P sees the positions before P (exclusive: P itself is not in that cache).
    const bool ext = op.params.count("ext_layer") != 0;
    const model::impl & kvm = ext ? *m.src : m;
    const int layer = static_cast<int>(op.param_req(ext ? "ext_layer" : "layer"));
    const int64_t n_head = static_cast<int64_t>(op.param_req("n_head"));
    const int64_t n_head_kv = static_cast<int64_t>(op.param_req("n_head_kv"));
    const int64_t hd_k = static_cast<int64_t>(op.param_req("head_dim"));
    const int64_t hd_v = static_cast<int64_t>(op.param("head_dim_v", static_cast<double>(hd_k)));
    const float scale = static_cast<float>(op.param("scale", 1.0 / std::sqrt(static_cast<double>(hd_k))));
    const int64_t kw = kvm.prog.kv_k_width[layer], vw = kvm.prog.kv_v_width[layer];
    if (kw != n_head_kv * hd_k || vw != n_head_kv * hd_v) throw error(KAIL_E_INVALID_ARG, "program: attention kv widths do not match heads");
    const uint32_t kt = kvm.params.kv_type, vt = kvm.params.kv_type_v;
    // Bytes of one head's row of K and of V (whole blocks for a quantized cache).
    const size_t rk = kv_row_bytes(kt, hd_k), rv = kv_row_bytes(vt, hd_v);
    const int64_t R = kvm.kv_ring[layer];
    // 1. store K and V rows of the batch, each head's part in its block (a reader of a shared
    // layer finds them stored by an earlier op of this pass).
    const uint8_t role = (ext || m.kv_role.empty()) ? static_cast<uint8_t>(KV_UNUSED) : m.kv_role[static_cast<size_t>(layer)];
    for (int64_t t = 0; t < x.n_tok && op.b >= 0; t++) {
        const int s = x.b.seq[t];
        // An encoder-decoder's layers: the encoding pass's rows exactly (enc_len, set for it), the
        // decoder's from row 0 at position enc_len, within the positions left.
        const int64_t el = m.enc_dec ? m.enc_len[static_cast<size_t>(s)] : 0;
        const int64_t p = x.b.pos[t] - (role == KV_DECODER ? el : 0);
        kv_seq_layer & c = m.kv[s][layer];
        const int64_t row = role == KV_UNUSED ? kv_ring_slot(m, c, R, p, n_head_kv, rk, rv)
                                              : kv_ring_slot(m, c, R, p, n_head_kv, rk, rv, role == KV_DECODER ? m.params.n_ctx - el : el, role != KV_DECODER);
        const float * krow = x.ptr(op.b) + t * x.width(op.b) + static_cast<int64_t>(op.param("b_off", 0));
        const float * vrow = x.ptr(op.c) + t * x.width(op.c) + static_cast<int64_t>(op.param("c_off", 0));
        for (int64_t h = 0; h < n_head_kv; h++) {
            store_row(kt, krow + h * hd_k, c.k.data() + static_cast<size_t>(h * c.cap + row) * rk, hd_k);
            store_row(vt, vrow + h * hd_v, c.v.data() + static_cast<size_t>(h * c.cap + row) * rv, hd_v);
            if (c.mirrored) {
                store_row(kt, krow + h * hd_k, c.k.data() + static_cast<size_t>(h * c.cap + row + R) * rk, hd_k);
                store_row(vt, vrow + h * hd_v, c.v.data() + static_cast<size_t>(h * c.cap + row + R) * rv, hd_v);
            }
        }
    }
    if (op.param("store_only", 0) != 0) return;  // an encoder's cross-attention K and V
    const bool cross = op.param("cross", 0) != 0;
    // 2. attention per (token, kv head): the `group` query heads that share a kv head are one
    // matrix product against the cached K rows (scores), and their outputs one pass over the
    // cached V rows (attention_weighted_rows), so each cached row is read and converted once per
    // group (per 4 heads for V), in the kernels' SIMD code.
    // Numerics as ggml-cpu's: for an F16 cache the query and the probabilities are rounded to F16
    // (vec_dot_type of F16 is F16); products accumulate in F32.
    const int64_t group = n_head / n_head_kv;
    const int64_t qw = x.width(op.a), ow = x.width(op.out);
    const int64_t q_off = static_cast<int64_t>(op.param("a_off", 0));
    const int64_t out_off = static_cast<int64_t>(op.param("out_off", 0));
    // Sliding-window layers (llama.cpp's LLAMA_SWA_TYPE_STANDARD) see the last `window` positions,
    // their own included; a sink (per query head) joins each head's softmax.
    const int64_t window = static_cast<int64_t>(op.param("window", 0));
    // Chunked layers (LLAMA_SWA_TYPE_CHUNKED, Llama 4) see the positions of their own chunk of
    // `chunk` positions up to themselves.
    const int64_t chunk = static_cast<int64_t>(op.param("chunk", 0));
    // Attention temperature tuning (Llama 4's NoPE layers): each query row is scaled by
    // log(floor((pos + temp_offset) / temp_floor) + 1) * temp_scale + 1, llama.cpp's inp_attn_scale.
    const double temp_scale = op.param("temp_scale", 0), temp_floor = op.param("temp_floor", 0), temp_offset = op.param("temp_offset", 0);
    const tensor_ref sinks = m.weight(oi, "sinks");
    const float * sink = sinks.info ? reinterpret_cast<const float *>(sinks.data) : nullptr;
    // Attention logit soft-capping before the softmax: each score cap * tanh(score * m / cap), m
    // being `softcap_scale` (1 by default: Gemma 2, llama.cpp's attn_soft_cap; Grok's
    // attention.output_scale, which llama.cpp multiplies in there with a softmax scale of 1):
    // ggml_scale by m / cap (one float), ggml_tanh, ggml_scale by cap.
    const float softcap = static_cast<float>(op.param("softcap", 0));
    const float inv_cap = softcap > 0 ? static_cast<float>(op.param("softcap_scale", 1.0)) / softcap : 0.0f;
    // Non-causal attention (BERT's encoders: llama.cpp's causal_attn false): every token sees its
    // sequence's positions in this batch, later ones included. The batch holds whole sequences.
    const bool causal = op.param("causal", 1) != 0;
    // A symmetric window (non-causal only; llama.cpp's LLAMA_SWA_TYPE_SYMMETRIC over n_swa =
    // sym_window): a token sees the positions within sym_window / 2 (integer division) either side.
    const int64_t sym_half = op.param("sym_window", 0) > 0 ? static_cast<int64_t>(op.param("sym_window", 0)) / 2 : -1;
    std::map<int, int64_t> seq_end;
    if (!causal)
        for (int64_t t = 0; t < x.n_tok; t++) seq_end[x.b.seq[t]] = std::max(seq_end[x.b.seq[t]], static_cast<int64_t>(x.b.pos[t]) + 1);
    // MSA (MiniMax-M3): a's columns [sel_off, sel_off + n_head_kv * top_k) hold each kv head's
    // selected blocks of `block` positions (msa_index's out, -1 past the candidates); a head's
    // queries see the positions of those blocks only (their rows gathered: the work is the
    // selection's, not the context's). QSA (qwen4exp) selects single positions: block 1, qsa_index's out.
    const int64_t sel_off = static_cast<int64_t>(op.param("sel_off", -1));
    const int64_t sel_k = sel_off >= 0 ? static_cast<int64_t>(op.param_req("top_k")) : 0;
    const int64_t sel_blk = sel_off >= 0 ? static_cast<int64_t>(op.param_req("block")) : 0;
    // ALiBi (BLOOM, MPT, Refact, Baichuan 13B): query head h adds slope_h x -|pos_k - pos_q| to
    // its scaled scores, as ggml's soft_max_ext with max_bias `alibi` over llama.cpp's ALiBi mask:
    // with n2 the largest power of two <= n_head, slope_h = m0^(h + 1) for h < n2, else
    // m1^(2 (h - n2) + 1), m0 = 2^(-alibi / n2), m1 = 2^(-alibi / 2 / n2) (in float, as ggml).
    const float max_bias = static_cast<float>(op.param("alibi", 0));
    std::vector<float> slopes;
    if (max_bias > 0) {
        const uint32_t n2 = 1u << static_cast<uint32_t>(std::floor(std::log2(static_cast<double>(n_head))));
        const float m0 = std::pow(2.0f, -max_bias / static_cast<float>(n2));
        const float m1 = std::pow(2.0f, -(max_bias / 2.0f) / static_cast<float>(n2));
        for (int64_t h = 0; h < n_head; h++)
            slopes.push_back(static_cast<uint32_t>(h) < n2 ? std::pow(m0, static_cast<float>(h + 1)) : std::pow(m1, static_cast<float>(2 * (h - n2) + 1)));
    }
    // T5's relative position bias (weight rel_b, [n_head, n_buckets]): query head h adds
    // rel_b[h, bucket(pos_k - pos_q)] to its raw scores before the scale, as llama.cpp adds kq_b
    // before ggml_soft_max_ext; the buckets as llama_relative_position_bucket computes them (both
    // directions unless rel_bidir is 0, max distance 128). Per distinct distance, once per op.
    const tensor_ref rel = m.weight(oi, "rel_b");
    std::vector<float> rel_tab;  // [distance + max_back][n_head]
    int64_t rel_back = 0;
    if (rel.info) {
        const int64_t nb = rel.ne(1);
        const bool bidir = op.param("rel_bidir", 1) != 0;
        int64_t pmax = 0;
        for (int64_t t = 0; t < x.n_tok; t++) pmax = std::max<int64_t>(pmax, x.b.pos[t]);
        if (!causal)
            for (const auto & [s, e] : seq_end) pmax = std::max<int64_t>(pmax, e - 1);
        rel_back = pmax;  // keys from pos_q - pmax (causal: rel distances <= 0) ...
        const int64_t fwd = causal ? 0 : pmax;  // ... up to pos_q + pmax (non-causal)
        rel_tab.assign(static_cast<size_t>((rel_back + fwd + 1) * n_head), 0.0f);
        for (int64_t d = -rel_back; d <= fwd; d++) {
            const int64_t bkt = rel_position_bucket(static_cast<int32_t>(d), 0, static_cast<uint64_t>(nb), bidir);
            for (int64_t h = 0; h < n_head; h++) {
                const size_t e = static_cast<size_t>(bkt * n_head + h);
                rel_tab[static_cast<size_t>((d + rel_back) * n_head + h)] =
                    rel.type() == KAIL_TYPE_F32 ? reinterpret_cast<const float *>(rel.data)[e] : cpu::fp16_to_fp32_sw(reinterpret_cast<const uint16_t *>(rel.data)[e]);
            }
        }
    }
    exec_ctx * xp = &x;
    // Consecutive tokens of one sequence in plain causal attention (rows 0..pos, none of the
    // options above that give each token its own rows or its own terms) share a task per kv head:
    // their group x T queries are one product with the cached K rows, and their probability rows
    // one pass over the V rows, so each cached row is read once per tile instead of once per
    // token. Each token's softmax covers its own rows; its probabilities outside them are 0, which
    // add nothing to the weighted sum (one fused multiply-add per row, in row order, from +0): the
    // same bits as the token alone.
    // Sliding-window layers tile too: the tile's rows run from its lowest window start to its last
    // position, contiguous in a ring that turned mirrored as long as they are at most R rows. Their
    // V cache must be one the weighted sum reads row by row (F32, F16, Q8_0): the others are
    // converted 256 rows at a time from the first row, which a tile would move.
    const bool rows_in_order = vt == KAIL_TYPE_F32 || vt == KAIL_TYPE_F16 || vt == KAIL_TYPE_Q8_0;
    const bool tiled = !ext && causal && chunk == 0 && sel_k == 0 && rel_tab.empty() && slopes.empty() && temp_scale == 0 && !m.enc_dec &&
                       (window == 0 ? R == 0 : rows_in_order);
    // The first position token t sees.
    auto first_pos = [&](int64_t t) { return window > 0 ? std::max<int64_t>(0, x.b.pos[t] + 1 - window) : int64_t(0); };
    std::vector<int64_t> tile_start{0};  // tile i: tokens [tile_start[i], tile_start[i + 1])
    {
        int64_t t_max = 1;
        if (tiled) {
            int64_t np_top = 1;
            for (int64_t t = 0; t < x.n_tok; t++) np_top = std::max<int64_t>(np_top, x.b.pos[t] + 1);
            if (window > 0) np_top = std::min<int64_t>(np_top, window + 64);
            t_max = std::max<int64_t>(1, std::min<int64_t>(16, 64 / group));
            // (The tile's scores, T x group x rows floats, stay within 16 MiB per thread.)
            while (t_max > 1 && t_max * group * np_top * 4 > (int64_t(16) << 20)) t_max /= 2;
        }
        const bool track = t_max > 1 && x.n_tok > 0;
        int64_t lo = track ? first_pos(0) : 0, hi = track ? x.b.pos[0] + 1 : 0;  // the current tile's rows
        for (int64_t t = 1; t < x.n_tok; t++) {
            bool cut = t - tile_start.back() >= t_max || x.b.seq[t] != x.b.seq[t - 1];
            if (!cut && window > 0) {
                const int64_t l2 = std::min(lo, first_pos(t)), h2 = std::max<int64_t>(hi, x.b.pos[t] + 1);
                cut = h2 - l2 > window + 63 || (R > 0 && h2 - l2 > R);
            }
            if (cut) tile_start.push_back(t);
            if (track) {
                lo = cut ? first_pos(t) : std::min(lo, first_pos(t));
                hi = cut ? x.b.pos[t] + 1 : std::max<int64_t>(hi, x.b.pos[t] + 1);
            }
        }
        tile_start.push_back(x.n_tok);
    }
    const int64_t n_tiles = static_cast<int64_t>(tile_start.size()) - 1;
    if (n_tiles < x.n_tok) {
        m.pool->parallel_for(n_tiles * n_head_kv, [&, xp](int64_t begin, int64_t end, int) {
            std::vector<float> scores, qt, ot;
            std::vector<uint16_t> half;
            for (int64_t task = begin; task < end; task++) {
                const int64_t tile = task / n_head_kv, hk = task % n_head_kv;
                const int64_t t0 = tile_start[static_cast<size_t>(tile)], nt = tile_start[static_cast<size_t>(tile) + 1] - t0;
                const int s = xp->b.seq[t0];
                int64_t lo = first_pos(t0), hi = 0;  // positions [lo, hi) are rows 0..np-1 of the tile
                for (int64_t i = 0; i < nt; i++) {
                    lo = std::min(lo, first_pos(t0 + i));
                    hi = std::max<int64_t>(hi, xp->b.pos[t0 + i] + 1);
                }
                const int64_t np = hi - lo;
                const kv_seq_layer & c = kvm.kv[s][layer];
                const int64_t first = c.mirrored ? lo % R : lo;  // row of position lo
                const uint8_t * krows = c.k.data() + static_cast<size_t>(hk * c.cap + first) * rk;
                const uint8_t * vrows = c.v.data() + static_cast<size_t>(hk * c.cap + first) * rv;
                const int64_t nq = nt * group;
                qt.resize(static_cast<size_t>(nq * hd_k));
                for (int64_t i = 0; i < nt; i++)
                    std::copy_n(xp->ptr(op.a) + (t0 + i) * qw + q_off + hk * group * hd_k, group * hd_k, qt.data() + i * group * hd_k);
                scores.resize(static_cast<size_t>(nq * np));
                matmul(kt, krows, rk, np, hd_k, qt.data(), static_cast<size_t>(hd_k) * sizeof(float), nq, scores.data(), static_cast<size_t>(np) * sizeof(float), nullptr);
                if (softcap > 0)
                    for (float & v : scores) v = std::tanh(v * inv_cap) * softcap;
                for (int64_t i = 0; i < nt; i++) {
                    const int64_t a0 = first_pos(t0 + i) - lo, a1 = xp->b.pos[t0 + i] + 1 - lo;  // its own rows
                    for (int64_t g = 0; g < group; g++) {
                        float * sc = scores.data() + (i * group + g) * np;
                        attention_softmax(sc + a0, a1 - a0, scale, vt, half, sink ? sink[hk * group + g] : -std::numeric_limits<float>::infinity());
                        std::fill(sc, sc + a0, 0.0f);
                        std::fill(sc + a1, sc + np, 0.0f);
                    }
                }
                ot.resize(static_cast<size_t>(nq * hd_v));
                attention_weighted_rows(vt, vrows, rv, np, hd_v, scores.data(), static_cast<size_t>(np), nq, ot.data(), static_cast<size_t>(hd_v));
                for (int64_t i = 0; i < nt; i++)
                    std::copy_n(ot.data() + i * group * hd_v, group * hd_v, xp->ptr(op.out) + (t0 + i) * ow + out_off + hk * group * hd_v);
            }
        }, 1);
        return;
    }
    const int64_t n_tasks = x.n_tok * n_head_kv;
    m.pool->parallel_for(n_tasks, [&, xp](int64_t begin, int64_t end, int) {
        std::vector<float> scores, qt, bias;
        std::vector<uint16_t> half;
        std::vector<char> keep;
        std::vector<uint8_t> kg, vg;
        for (int64_t task = begin; task < end; task++) {
            const int64_t t = task / n_head_kv, hk = task % n_head_kv;
            const int s = xp->b.seq[t];
            const int64_t p = ext ? xp->b.pos[t] - 1 : causal ? xp->b.pos[t] : sym_half >= 0 ? std::min<int64_t>(seq_end.at(s) - 1, xp->b.pos[t] + sym_half) : seq_end.at(s) - 1;
            int64_t lo = window > 0 ? std::max<int64_t>(0, xp->b.pos[t] + 1 - window) : chunk > 0 ? p - p % chunk : sym_half >= 0 ? std::max<int64_t>(0, xp->b.pos[t] - sym_half) : 0;
            int64_t np = p + 1 - lo;
            int64_t base = 0;  // the position of row 0
            if (m.enc_dec) {
                // Cross readers see the encoder's positions, the decoder's own layers its positions
                // (row j: position enc_len + j).
                const int64_t el = m.enc_len[static_cast<size_t>(s)];
                if (cross) { lo = 0; np = el; }
                else if (role == KV_DECODER) {
                    base = el;
                    if (lo < el) { lo = el; np = p + 1 - lo; }
                }
            }
            const kv_seq_layer & c = kvm.kv[s][layer];
            const int64_t first = c.mirrored ? lo % R : lo - base;  // row of position lo
            const uint8_t * krows = c.k.data() + static_cast<size_t>(hk * c.cap + first) * rk;
            const uint8_t * vrows = c.v.data() + static_cast<size_t>(hk * c.cap + first) * rv;
            if (sel_k > 0) {
                // The selected blocks' K and V rows, gathered in position order (no window, no
                // ring: row j holds position j); the attention then runs over those rows alone.
                const float * sel = xp->ptr(op.a) + t * qw + sel_off + hk * sel_k;
                const int64_t nb = p / sel_blk + 1;
                keep.assign(static_cast<size_t>(nb), 0);
                for (int64_t i = 0; i < sel_k; i++) {
                    const float b = sel[i];
                    if (b >= 0 && b < static_cast<float>(nb)) keep[static_cast<size_t>(b)] = 1;
                }
                int64_t n_sel = 0;
                for (int64_t b = 0; b < nb; b++)
                    if (keep[static_cast<size_t>(b)]) n_sel += std::min(p + 1, (b + 1) * sel_blk) - b * sel_blk;
                kg.resize(static_cast<size_t>(n_sel) * rk);
                vg.resize(static_cast<size_t>(n_sel) * rv);
                int64_t r = 0;
                for (int64_t b = 0; b < nb; b++) {
                    if (!keep[static_cast<size_t>(b)]) continue;
                    const int64_t j0 = b * sel_blk, n = std::min(p + 1, j0 + sel_blk) - j0;
                    std::memcpy(kg.data() + static_cast<size_t>(r) * rk, krows + static_cast<size_t>(j0) * rk, static_cast<size_t>(n) * rk);
                    std::memcpy(vg.data() + static_cast<size_t>(r) * rv, vrows + static_cast<size_t>(j0) * rv, static_cast<size_t>(n) * rv);
                    r += n;
                }
                if (n_sel < 1) throw error(KAIL_E_INTERNAL, "sparse attention (MSA): no block selected");
                krows = kg.data();
                vrows = vg.data();
                np = n_sel;
            }
            const float * q = xp->ptr(op.a) + t * qw + q_off + hk * group * hd_k;
            if (temp_scale != 0) {
                // In float up to the floor, then double, as llama.cpp computes it.
                const float fl = std::floor((static_cast<float>(xp->b.pos[t]) + static_cast<float>(temp_offset)) / static_cast<float>(temp_floor));
                const float f = static_cast<float>(std::log(static_cast<double>(fl) + 1.0) * static_cast<double>(static_cast<float>(temp_scale)) + 1.0);
                qt.assign(q, q + group * hd_k);
                for (float & v : qt) v *= f;
                q = qt.data();
            }
            scores.resize(static_cast<size_t>(group * np));
            matmul(kt, krows, rk, np, hd_k,
                   q, static_cast<size_t>(hd_k) * sizeof(float), group, scores.data(), static_cast<size_t>(np) * sizeof(float), nullptr);
            if (softcap > 0)
                for (float & s : scores) s = std::tanh(s * inv_cap) * softcap;
            if (!rel_tab.empty()) {
                // Row j holds position lo + j (no selection with a relative bias).
                const int64_t pq = xp->b.pos[t];
                for (int64_t g = 0; g < group; g++) {
                    const int64_t h = hk * group + g;
                    float * sc = scores.data() + g * np;
                    for (int64_t j = 0; j < np; j++) sc[j] += rel_tab[static_cast<size_t>((lo + j - pq + rel_back) * n_head + h)];
                }
            }
            if (!slopes.empty()) bias.resize(static_cast<size_t>(np));
            for (int64_t g = 0; g < group; g++) {
                if (!slopes.empty()) {
                    // Row j holds position lo + j (no selection with ALiBi); llama.cpp's mask
                    // value -|p0 - p1| (an integer made float) times the head's slope.
                    const float sl = slopes[static_cast<size_t>(hk * group + g)];
                    const int64_t pq = xp->b.pos[t];
                    for (int64_t j = 0; j < np; j++) {
                        const int64_t dist = lo + j - pq;
                        bias[static_cast<size_t>(j)] = sl * static_cast<float>(dist < 0 ? dist : -dist);
                    }
                }
                attention_softmax(scores.data() + g * np, np, scale, vt, half, sink ? sink[hk * group + g] : -std::numeric_limits<float>::infinity(),
                                  slopes.empty() ? nullptr : bias.data());
            }
            float * o = xp->ptr(op.out) + t * ow + out_off + hk * group * hd_v;
            attention_weighted_rows(vt, vrows, rv, np, hd_v,
                                    scores.data(), static_cast<size_t>(np), group, o, static_cast<size_t>(hd_v));
        }
    }, 1);
}

// MLA (mla.h): appends each token's latent row to its sequence's cache (one shared row per
// token, no V), then attends with the query absorbed into the latent space.
// Appends row t of buffer `buf` to its sequence's packed cache of KV layer `layer` (one row per
// position, no V: MLA's latents, the indexer's keys), growing it within the KV budget.
void store_packed_data(exec_ctx & x, int layer, const float * data, int64_t stride);
void store_packed_rows(exec_ctx & x, int layer, int buf) { store_packed_data(x, layer, x.ptr(buf), x.width(buf)); }
// The same for rows t of `data` (stride floats apart).
void store_packed_data(exec_ctx & x, int layer, const float * data, int64_t stride) {
    model::impl & m = x.m;
    const int64_t kw = m.prog.kv_k_width[layer];
    const size_t rb = kv_row_bytes(m.params.kv_type, kw);  // one row (whole Q8_0 blocks for a quantized cache)
    const int64_t R = m.kv_ring[layer];
    for (int64_t t = 0; t < x.n_tok; t++) {
        kv_seq_layer & c = m.kv[x.b.seq[t]][layer];
        const int64_t p = x.b.pos[t];
        if (R > 0) {
            // A sliding MLA block's latent rows (dots3note): the sliding GQA layers' ring, one head, no V.
            const int64_t row = kv_ring_slot(m, c, R, p, 1, rb, 0);
            store_row(m.params.kv_type, data + t * stride, c.k.data() + static_cast<size_t>(row) * rb, kw);
            if (c.mirrored) store_row(m.params.kv_type, data + t * stride, c.k.data() + static_cast<size_t>(row + R) * rb, kw);
            continue;
        }
        const size_t need = static_cast<size_t>(p + 1) * rb;
        if (c.k.size() < need) {
            const size_t old = c.k.capacity();
            size_t cap_tok = std::max<size_t>(static_cast<size_t>(p + 1), c.k.size() / rb * 2);
            cap_tok = std::min<size_t>(std::max<size_t>(cap_tok, 16), static_cast<size_t>(m.params.n_ctx));
            const uint64_t grow = cap_tok * rb - std::min<uint64_t>(old, cap_tok * rb);
            if (m.params.kv_max_bytes && m.kv_bytes + grow > m.params.kv_max_bytes)
                throw error(KAIL_E_BUDGET, "KV cache budget exceeded: need " + std::to_string(m.kv_bytes + grow) + " bytes, budget " + std::to_string(m.params.kv_max_bytes));
            c.k.reserve(cap_tok * rb);
            c.k.resize(need);
            m.kv_bytes += c.k.capacity() - old;
        }
        store_row(m.params.kv_type, data + t * stride, c.k.data() + static_cast<size_t>(p) * rb, kw);
    }
}

void op_mla_attention(exec_ctx & x, const op_desc & op, size_t oi) {
    model::impl & m = x.m;
    mla_args a = mla_args_of(m, op, oi);
    const int layer = static_cast<int>(op.param_req("layer"));
    if (m.prog.kv_k_width[layer] != a.kv_lora + a.qk_rope || m.prog.kv_v_width[layer] != 0)
        throw error(KAIL_E_INVALID_ARG, "program: mla_attention needs a kv layer of width kv_lora + qk_rope and no V");
    store_packed_rows(x, layer, op.b);
    if (op.c >= 0) {
        a.sel = x.ptr(op.c);
        a.sel_stride = x.width(op.c);
        a.top_k = static_cast<int64_t>(op.param_req("top_k"));
    }
    // Sliding-window MLA blocks (dots3note): the last `window` positions, the token's own included.
    a.window = static_cast<int64_t>(op.param("window", 0));
    std::vector<const uint8_t *> cache(static_cast<size_t>(x.n_tok));
    // A ring that turned mirrored holds the window before a token contiguously from row lo % R.
    std::vector<int64_t> first(static_cast<size_t>(x.n_tok));
    const int64_t R = m.kv_ring[layer];
    for (int64_t t = 0; t < x.n_tok; t++) {
        const kv_seq_layer & c = m.kv[x.b.seq[t]][layer];
        cache[t] = c.k.data();
        const int64_t lo = a.window > 0 ? std::max<int64_t>(0, x.b.pos[t] + 1 - a.window) : 0;
        first[t] = c.mirrored ? lo % R : lo;
    }
    a.first = first.data();
    a.n_tok = x.n_tok;
    a.q = x.ptr(op.a);
    a.q_stride = x.width(op.a);
    a.out = x.ptr(op.out);
    a.out_stride = x.width(op.out);
    a.cache = cache.data();
    a.pos = x.b.pos;
    a.kv_type = m.params.kv_type;
    a.pool = m.pool.get();
    // imatrix: llama.cpp multiplies attn_k_b and attn_v_b as batched matrices, one per head, whose
    // statistics it keeps as one entry of ne0 * n_head sums and one count (the tokens).
    if (m.imx_on && x.n_tok >= 16 && a.k_b.info && a.v_b.info) {
        imatrix_stats * ek = &imx_entry_flat(m, *a.k_b.info, a.qk_nope * a.n_head);
        imatrix_stats * ev = &imx_entry_flat(m, *a.v_b.info, a.kv_lora * a.n_head);
        a.observe = [&, ek, ev](int which, int64_t h, const float * xr, int64_t stride, int64_t rows) {
            const int64_t ne0 = which == 0 ? a.qk_nope : a.kv_lora;
            imatrix_stats & e = which == 0 ? *ek : *ev;
            float * acc = e.sums.data() + h * ne0;
            for (int64_t r = 0; r < rows; r++)
                for (int64_t j = 0; j < ne0; j++) acc[j] += xr[r * stride + j] * xr[r * stride + j];
            if (h == 0) e.counts[0] += rows;
        };
    }
    mla_attend(a);
}

// The orthonormal Walsh-Hadamard matrix of size n (Sylvester's order, entries +-1/sqrt(n)), as
// llama.cpp's ggml_gen_hadamard builds the rotation of DeepSeek's indexer keys and queries.
const std::vector<float> & hadamard_matrix(int64_t n) {
    static std::mutex mu;
    static std::map<int64_t, std::vector<float>> cache;
    std::lock_guard<std::mutex> lock(mu);
    std::vector<float> & h = cache[n];
    if (h.empty()) {
        h.assign(static_cast<size_t>(n * n), 0.0f);
        h[0] = 1.0f / std::sqrt(static_cast<float>(n));
        for (int64_t s = 1; s < n; s *= 2)
            for (int64_t i = 0; i < s; i++)
                for (int64_t j = 0; j < s; j++) {
                    const float v = h[static_cast<size_t>(i * n + j)];
                    h[static_cast<size_t>((i + s) * n + j)] = v;
                    h[static_cast<size_t>(i * n + j + s)] = v;
                    h[static_cast<size_t>((i + s) * n + j + s)] = -v;
                }
    }
    return h;
}

// a = H a for each n-wide block of each row (ggml_mul_mat of the matrix with the blocks: row i of
// H dotted with the block, in F32).
void op_hadamard(exec_ctx & x, const op_desc & op) {
    const int64_t n = static_cast<int64_t>(op.param_req("n")), w = x.width(op.a);
    const std::vector<float> & h = hadamard_matrix(n);
    std::vector<float> in(static_cast<size_t>(n));
    for (int64_t t = 0; t < x.rows(op.a); t++)
        for (int64_t b = 0; b < w; b += n) {
            float * v = x.ptr(op.a) + t * w + b;
            std::copy_n(v, n, in.data());
            for (int64_t i = 0; i < n; i++) {
                float s = 0.0f;
                const float * hr = h.data() + i * n;
                for (int64_t j = 0; j < n; j++) s += hr[j] * in[static_cast<size_t>(j)];
                v[i] = s;
            }
        }
}

// Each sequence's cached indexer keys (KV layer `layer`, rows of hd) as F32, once per op: the rows
// up to the batch's last position in it, one per position (ratio 1) or per block of `ratio`. Empty
// where the cache is F32 (the rows are read in place).
std::map<int, std::vector<float>> keys_as_f32(exec_ctx & x, int layer, int64_t hd, int64_t ratio) {
    model::impl & m = x.m;
    const uint32_t kt = m.params.kv_type;
    std::map<int, std::vector<float>> keys;
    if (kt == KAIL_TYPE_F32) return keys;
    const size_t rb = kv_row_bytes(kt, hd);
    std::map<int, int64_t> rows;
    for (int64_t t = 0; t < x.n_tok; t++) rows[x.b.seq[t]] = std::max<int64_t>(rows[x.b.seq[t]], (x.b.pos[t] + 1) / ratio);
    for (auto [seq, n] : rows) {
        std::vector<float> & f = keys[seq];
        f.resize(static_cast<size_t>(n * hd));
        const uint8_t * src = m.kv[seq][layer].k.data();
        m.pool->parallel_for(n, [&](int64_t j0, int64_t j1, int) {
            for (int64_t j = j0; j < j1; j++) dequantize_row(kt, src + static_cast<size_t>(j) * rb, f.data() + j * hd, hd);
        }, 64);
    }
    return keys;
}

// DeepSeek's lightning indexer (llama.cpp's deepseek32 graph, DSA): stores each token's indexer key
// (b) in its sequence's cache of KV layer `layer`, scores every cached position j <= pos as
// sum_h relu(q_h . k_j) * w_h (q = a, n_head heads of head_dim; w = c, one weight per head, already
// scaled), and writes the positions of the top_k scores to out (-1 past the candidates). As
// ggml-cpu's fused lightning-indexer op: cached keys as F32 (dequantized from the cache type), F32
// products, the heads summed in order in F32; the selection ggml_top_k's, std::partial_sort larger
// first (only the set matters to the attention).
void dsv4_store(model::impl & m, int seq, int layer, int64_t p, const float * src);  // below, with DeepSeek-V4's ops
void op_dsa_index(exec_ctx & x, const op_desc & op) {
    model::impl & m = x.m;
    const int layer = static_cast<int>(op.param_req("layer"));
    const int64_t nh = static_cast<int64_t>(op.param_req("n_head")), hd = static_cast<int64_t>(op.param_req("head_dim"));
    const int64_t k = static_cast<int64_t>(op.param_req("top_k"));
    const int64_t ratio = static_cast<int64_t>(op.param("ratio", 1));
    // ratio r > 1 (DeepSeek-V4's compressed keys): only the positions ending a block of r are keys,
    // one row per block (row p / r, kv_packed_layouts); others one row per position.
    if (ratio > 1) {
        for (int64_t t = 0; t < x.n_tok; t++)
            if ((x.b.pos[t] + 1) % ratio == 0) dsv4_store(m, x.b.seq[t], layer, x.b.pos[t], x.ptr(op.b) + t * x.width(op.b));
    } else {
        store_packed_rows(x, layer, op.b);
    }
    const uint32_t kt = m.params.kv_type;
    const std::map<int, std::vector<float>> keys = keys_as_f32(x, layer, hd, ratio);
    std::vector<float> sc, score;
    std::vector<int32_t> idx;
    for (int64_t t = 0; t < x.n_tok; t++) {
        const int64_t np = (x.b.pos[t] + 1) / ratio;  // the keys (rows) the token sees
        const int seq = x.b.seq[t];
        float * o = x.ptr(op.out) + t * x.width(op.out);
        if (np == 0) {
            std::fill(o, o + k, -1.0f);
            continue;
        }
        const void * rows = kt == KAIL_TYPE_F32 ? static_cast<const void *>(m.kv[seq][layer].k.data()) : static_cast<const void *>(keys.at(seq).data());
        sc.resize(static_cast<size_t>(nh * np));
        matmul(KAIL_TYPE_F32, rows, static_cast<size_t>(hd) * 4, np, hd, x.ptr(op.a) + t * x.width(op.a), static_cast<size_t>(hd) * 4, nh,
               sc.data(), static_cast<size_t>(np) * 4, m.pool.get());
        const float * w = x.ptr(op.c) + t * x.width(op.c);
        score.resize(static_cast<size_t>(np));
        for (int64_t j = 0; j < np; j++) {
            float s = 0.0f;
            for (int64_t h = 0; h < nh; h++) s += std::max(sc[static_cast<size_t>(h * np + j)], 0.0f) * w[h];
            score[static_cast<size_t>(j)] = s;
        }
        // Row j is position j (ratio 1) or the block ending at position j r + r - 1 (ratio r).
        idx.resize(static_cast<size_t>(np));
        std::iota(idx.begin(), idx.end(), 0);
        const int64_t kk = std::min<int64_t>(k, np);
        std::partial_sort(idx.begin(), idx.begin() + kk, idx.end(), [&](int32_t p, int32_t q) { return score[static_cast<size_t>(p)] > score[static_cast<size_t>(q)]; });
        for (int64_t i = 0; i < k; i++) o[i] = i < kk ? static_cast<float>(static_cast<int64_t>(idx[static_cast<size_t>(i)]) * ratio + ratio - 1) : -1.0f;
    }
}

// MiniMax-M3's sparse-attention indexer (llama.cpp's minimax-m3 graph, MSA): stores each token's
// indexer key (b) in its sequence's cache of KV layer `layer`; for each token and each of n_head
// indexer heads (q = a, one per KV head), scores q_h . k_j over the cached positions j <= pos (the
// keys dequantized to F32 from the cache's type, as llama.cpp's ggml_get_rows of its indexer cache,
// then F32 products: the queries are not rounded to the cache's type), takes each
// block of `block` positions' maximum (ggml_pool_2d), forces the token's own block and the
// local - 1 blocks before it in (llama.cpp's +1e30 bias), and writes the top_k blocks to out from
// out_off: per head top_k block indices, -1 past the candidates. Blocks past the token's own are
// not candidates: llama.cpp's top_k may pick them when fewer are visible, and the causal mask
// then hides them. The forced blocks rank first, the latest first; the others by score.
void op_msa_index(exec_ctx & x, const op_desc & op) {
    model::impl & m = x.m;
    const int layer = static_cast<int>(op.param_req("layer"));
    const int64_t nh = static_cast<int64_t>(op.param_req("n_head")), hd = static_cast<int64_t>(op.param_req("head_dim"));
    const int64_t k = static_cast<int64_t>(op.param_req("top_k")), blk = static_cast<int64_t>(op.param_req("block"));
    const int64_t local = static_cast<int64_t>(op.param_req("local")), out_off = static_cast<int64_t>(op.param("out_off", 0));
    store_packed_rows(x, layer, op.b);
    const uint32_t kt = m.params.kv_type;
    const std::map<int, std::vector<float>> keys = keys_as_f32(x, layer, hd, 1);
    std::vector<float> sc, bs;
    std::vector<int64_t> idx;
    for (int64_t t = 0; t < x.n_tok; t++) {
        const int64_t p = x.b.pos[t], np = p + 1, nb = p / blk + 1;
        const int seq = x.b.seq[t];
        const void * rows = kt == KAIL_TYPE_F32 ? static_cast<const void *>(m.kv[seq][layer].k.data()) : static_cast<const void *>(keys.at(seq).data());
        sc.resize(static_cast<size_t>(nh * np));
        matmul(KAIL_TYPE_F32, rows, static_cast<size_t>(hd) * 4, np, hd, x.ptr(op.a) + t * x.width(op.a), static_cast<size_t>(hd) * 4, nh,
               sc.data(), static_cast<size_t>(np) * 4, m.pool.get());
        float * o = x.ptr(op.out) + t * x.width(op.out) + out_off;
        const int64_t kk = std::min(k, nb);
        for (int64_t h = 0; h < nh; h++) {
            const float * s = sc.data() + h * np;
            bs.assign(static_cast<size_t>(nb), -std::numeric_limits<float>::infinity());
            for (int64_t j = 0; j < np; j++) bs[static_cast<size_t>(j / blk)] = std::max(bs[static_cast<size_t>(j / blk)], s[j]);
            idx.resize(static_cast<size_t>(nb));
            std::iota(idx.begin(), idx.end(), 0);
            const int64_t forced_lo = nb - local;  // blocks >= forced_lo are forced (local of them up to the own block)
            std::partial_sort(idx.begin(), idx.begin() + kk, idx.end(), [&](int64_t a, int64_t c) {
                const bool fa = a >= forced_lo, fc = c >= forced_lo;
                if (fa != fc) return fa;
                if (fa) return a > c;
                const float va = bs[static_cast<size_t>(a)], vc = bs[static_cast<size_t>(c)];
                return va > vc || (va == vc && a < c);
            });
            for (int64_t i = 0; i < k; i++) o[h * k + i] = i < kk ? static_cast<float>(idx[static_cast<size_t>(i)]) : -1.0f;
        }
    }
}

// qwen4exp's QSA indexer (llama.cpp's qwen4exp build_qsa_top_k and set_input_qsa, one sequence's
// cells in position order): stores each token's raw indexer key (b: no norm, no RoPE) in its
// sequence's cache of KV layer `layer`. A token at position p keeps every visible position while
// p + 1 <= W = top_k + ratio - 1 (llama.cpp's top-k width). Past that, the whole blocks of `ratio`
// positions that end at or before p (blocks b < (p + 1) / ratio) are scored: the block key is the
// mean of its raw keys (summed in order in F32, times F32 1 / ratio), RMS-normed with the weight,
// RoPE'd at the block's first position; its score sum_h relu(q_h . key) over the indexer heads
// (q = a, already normed and RoPE'd), summed in head order in F32. Every position of a block
// carries its block's score; the incomplete tail (positions from (p + 1) / ratio * ratio to p)
// ranks above all (llama.cpp's finite 1e9 bias: the tail values are equal to each other and
// larger than any block's, which is all a comparison sees). The kept positions are ggml-cpu's
// top-k over them: std::partial_sort of the position indices (larger first) to width W, so ties
// (a block split at the boundary, blocks of equal score) resolve as llama.cpp's do. out gets the
// kept positions (-1 past them), `repeat` times W wide from out_off: one copy per KV head for the
// attention op's selection (sel_off, block 1).
// llama.cpp pools every block again at every step; a block's raw keys never change once it is
// whole, so each block key is computed once, by the token that completes the block, and kept in
// KV layer `block_layer` (F32, a row per block: kv_packed_layouts), which truncation, copies and
// saved states carry like any cached row. The same F32 operations give the same bits.
void op_qsa_index(exec_ctx & x, const op_desc & op, size_t oi) {
    model::impl & m = x.m;
    const int layer = static_cast<int>(op.param_req("layer")), blayer = static_cast<int>(op.param_req("block_layer"));
    const int64_t nh = static_cast<int64_t>(op.param_req("n_head")), hd = static_cast<int64_t>(op.param_req("head_dim"));
    const int64_t r = static_cast<int64_t>(op.param_req("ratio"));
    const int64_t W = static_cast<int64_t>(op.param_req("top_k")) + r - 1;
    const int64_t rep = static_cast<int64_t>(op.param("repeat", 1)), out_off = static_cast<int64_t>(op.param("out_off", 0));
    const float eps = static_cast<float>(op.param_req("eps"));
    const float * nw = reinterpret_cast<const float *>(m.weight(oi, "weight").data);
    const rope_spec rs(m, op, oi);
    store_packed_rows(x, layer, op.b);
    const uint32_t kt = m.params.kv_type;
    const size_t rb = kv_row_bytes(kt, hd);
    // The blocks this batch completes: their keys from the raw rows just stored, then kept.
    std::vector<int64_t> ends;  // batch tokens whose position ends a block
    for (int64_t t = 0; t < x.n_tok; t++)
        if ((x.b.pos[t] + 1) % r == 0) ends.push_back(t);
    std::vector<float> fresh(ends.size() * static_cast<size_t>(hd));
    const float inv = 1.0f / static_cast<float>(r);
    m.pool->parallel_for(static_cast<int64_t>(ends.size()), [&](int64_t i0, int64_t i1, int) {
        std::vector<float> row(static_cast<size_t>(hd)), sum(static_cast<size_t>(hd)), cache(static_cast<size_t>(std::max(rs.n_dims, 2)));
        for (int64_t i = i0; i < i1; i++) {
            const int64_t t = ends[static_cast<size_t>(i)], b = x.b.pos[t] / r;
            const uint8_t * src = m.kv[x.b.seq[t]][layer].k.data();
            for (int64_t j = 0; j < r; j++) {
                dequantize_row(kt, src + static_cast<size_t>(b * r + j) * rb, row.data(), hd);
                for (int64_t e = 0; e < hd; e++) sum[static_cast<size_t>(e)] = j == 0 ? row[static_cast<size_t>(e)] : sum[static_cast<size_t>(e)] + row[static_cast<size_t>(e)];
            }
            for (float & v : sum) v *= inv;
            float * key = fresh.data() + i * hd;
            rms_norm_row(sum.data(), key, hd, eps, nw);
            rs.table(static_cast<float>(b * r), cache.data());
            rs.apply(key, cache.data());
        }
    }, 16);
    for (size_t i = 0; i < ends.size(); i++) dsv4_store(m, x.b.seq[ends[i]], blayer, x.b.pos[ends[i]], fresh.data() + i * static_cast<size_t>(hd));
    std::vector<float> sc, val;
    std::vector<int32_t> idx;
    for (int64_t t = 0; t < x.n_tok; t++) {
        const int64_t p = x.b.pos[t], np = p + 1;
        float * o = x.ptr(op.out) + t * x.width(op.out) + out_off;
        idx.resize(static_cast<size_t>(np));
        std::iota(idx.begin(), idx.end(), 0);
        if (np > W) {
            const int64_t nb = np / r;
            const std::vector<uint8_t> & keys = m.kv[x.b.seq[t]][blayer].k;
            if (keys.size() < static_cast<size_t>(nb * hd) * 4) throw error(KAIL_E_INTERNAL, "QSA: the block keys before position " + std::to_string(p) + " were never computed");
            sc.resize(static_cast<size_t>(nh * nb));
            matmul(KAIL_TYPE_F32, keys.data(), static_cast<size_t>(hd) * 4, nb, hd, x.ptr(op.a) + t * x.width(op.a), static_cast<size_t>(hd) * 4, nh,
                   sc.data(), static_cast<size_t>(nb) * 4, m.pool.get());
            val.assign(static_cast<size_t>(np), std::numeric_limits<float>::infinity());
            for (int64_t b = 0; b < nb; b++) {
                // ggml_relu (x > 0 ? x : 0), the heads added in order.
                auto relu = [](float v) { return v > 0.0f ? v : 0.0f; };
                float s = relu(sc[static_cast<size_t>(b)]);
                for (int64_t h = 1; h < nh; h++) s += relu(sc[static_cast<size_t>(h * nb + b)]);
                std::fill_n(val.begin() + b * r, r, s);
            }
            std::partial_sort(idx.begin(), idx.begin() + W, idx.end(), [&](int32_t a, int32_t c) { return val[static_cast<size_t>(a)] > val[static_cast<size_t>(c)]; });
        }
        const int64_t kk = std::min(W, np);
        for (int64_t c = 0; c < rep; c++)
            for (int64_t i = 0; i < W; i++) o[c * W + i] = i < kk ? static_cast<float>(idx[static_cast<size_t>(i)]) : -1.0f;
    }
}

// Routes n tokens (rows of a, width d) with op's router as llama.cpp does (softmax or sigmoid,
// bias for selection only, group-limited top-k, renormalization, scale): sel/wsel get n * k
// experts and weights in rank order.
void moe_route(model::impl & m, const op_desc & op, size_t oi, const float * a, int64_t n, int64_t d,
               std::vector<int32_t> & sel, std::vector<float> & wsel, const int32_t * tokens) {
    // DeepSeek-V4's hash-routed blocks: token t's experts are row tokens[t] of tid2eid (I32
    // [n_expert_used, n_vocab]), weighted by their gating probabilities; without tokens (an
    // embeddings input) the probabilities choose, as llama.cpp's graph for media input.
    const tensor_ref hash = m.weight(oi, "tid2eid");
    const tensor_ref router = m.weight(oi, "gate_inp"), bias = m.weight(oi, "exp_probs_b"), lbias = m.weight(oi, "gate_inp_b");
    // The router's experts: the op's own, or (GroveMoE's chunk experts, chunk_group g > 0) n_route
    // experts of which the k chosen stand for chunks int(float(e) * (1 / g)), each weighted by the
    // router's probability at that chunk's index, as llama.cpp's build_moe_ffn does for grovemoe.
    const int64_t n_expert = static_cast<int64_t>(op.param("n_route", op.param_req("n_expert")));
    const int64_t n_chunk = static_cast<int64_t>(op.param_req("n_expert"));
    const int64_t chunk_group = static_cast<int64_t>(op.param("chunk_group", 0));
    // Select by the sigmoid of the logits whatever the weights' gating (grovemoe).
    const bool sel_sigmoid = op.param("sel_sigmoid", 0) != 0;
    const int64_t k = static_cast<int64_t>(op.param_req("n_expert_used"));
    // 0 softmax, 1 sigmoid, 2 softmax over the selected logits only (gpt-oss: top-k by logit, then
    // the k weights are the softmax of their logits), 3 sigmoid of the selected logits (Llama 4:
    // top-k by logit, each weight the sigmoid of its logit), 4 sqrt(softplus) (DeepSeek-V4)
    const int gating = static_cast<int>(op.param("gating", 0));
    const bool norm_w = op.param("norm_w", 0) != 0;
    const float w_scale = static_cast<float>(op.param("w_scale", 0));
    const int64_t n_group = static_cast<int64_t>(op.param("n_group", 0));
    const int64_t n_group_used = static_cast<int64_t>(op.param("n_group_used", 0));
    if (k < 1 || k > n_expert) throw error(KAIL_E_INVALID_ARG, "moe: n_expert_used out of range");
    std::vector<float> logits(static_cast<size_t>(n * n_expert));
    matmul(router.type(), router.data, router.row_bytes(), n_expert, d, a, d * 4, n, logits.data(), n_expert * 4, m.pool.get());
    sel.resize(static_cast<size_t>(n * k));
    wsel.resize(static_cast<size_t>(n * k));
    std::vector<float> probs(static_cast<size_t>(n_expert)), sprobs(static_cast<size_t>(n_expert));
    std::vector<int32_t> idx(static_cast<size_t>(n_expert));
    if (lbias.info) {
        const float * lb = reinterpret_cast<const float *>(lbias.data);
        for (int64_t t = 0; t < n; t++)
            for (int64_t e = 0; e < n_expert; e++) logits[static_cast<size_t>(t * n_expert + e)] += lb[e];
    }
    for (int64_t t = 0; t < n; t++) {
        const float * lg = logits.data() + t * n_expert;
        if (gating == 0 || gating == 2) {
            std::copy(lg, lg + n_expert, probs.begin());
            if (gating == 0) softmax_inplace(probs.data(), n_expert);
        } else if (gating == 4) {
            // ggml_sqrt(ggml_softplus(logits)), softplus as ggml's (x itself above 20).
            for (int64_t e = 0; e < n_expert; e++) probs[e] = std::sqrt(lg[e] > 20.0f ? lg[e] : std::log(1.0f + std::exp(lg[e])));
        } else {
            for (int64_t e = 0; e < n_expert; e++) probs[e] = 1.0f / (1.0f + std::exp(-lg[e]));
        }
        for (int64_t e = 0; e < n_expert; e++)
            sprobs[e] = gating == 3 ? lg[e] : (sel_sigmoid ? 1.0f / (1.0f + std::exp(-lg[e])) : probs[e]) + (bias.info ? reinterpret_cast<const float *>(bias.data)[e] : 0.0f);
        if (n_group > 1 && n_group_used > 0 && n_group_used < n_group) {
            const int64_t per = n_expert / n_group;
            std::vector<std::pair<float, int64_t>> gs;
            for (int64_t g = 0; g < n_group; g++) {
                float a = -INFINITY, b2 = -INFINITY;
                for (int64_t e = g * per; e < (g + 1) * per; e++) {
                    const float v = sprobs[e];
                    if (v > a) { b2 = a; a = v; } else if (v > b2) b2 = v;
                }
                gs.push_back({a + b2, g});
            }
            std::stable_sort(gs.begin(), gs.end(), [](auto & l, auto & r) { return l.first > r.first; });
            std::vector<bool> keep(static_cast<size_t>(n_group), false);
            for (int64_t i = 0; i < n_group_used; i++) keep[gs[i].second] = true;
            for (int64_t e = 0; e < n_expert; e++) if (!keep[e / per]) sprobs[e] = -INFINITY;
        }
        std::iota(idx.begin(), idx.end(), 0);
        if (hash.info && tokens) {
            const int32_t tok = tokens[t];
            if (tok < 0 || tok >= hash.ne(1)) throw error(KAIL_E_INVALID_ARG, "moe: token " + std::to_string(tok) + " is outside the hash routing table '" + hash.info->name + "'");
            const int32_t * row = reinterpret_cast<const int32_t *>(hash.data) + static_cast<int64_t>(tok) * hash.ne(0);
            for (int64_t i = 0; i < k; i++) {
                if (row[i] < 0 || row[i] >= n_expert) throw error(KAIL_E_BAD_MODEL, "moe: hash routing table '" + hash.info->name + "' names expert " + std::to_string(row[i]) + " of " + std::to_string(n_expert));
                idx[static_cast<size_t>(i)] = row[i];
            }
        } else
        std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t l, int32_t r) {
            return sprobs[l] > sprobs[r] || (sprobs[l] == sprobs[r] && l < r);
        });
        for (int64_t i = 0; i < k; i++) {
            int32_t e = idx[i];
            if (chunk_group > 0) e = std::min<int32_t>(static_cast<int32_t>(static_cast<float>(e) * (1.0f / static_cast<float>(chunk_group))), static_cast<int32_t>(n_chunk - 1));
            sel[t * k + i] = e;
            wsel[t * k + i] = probs[e];
        }
        if (gating == 2) softmax_inplace(&wsel[static_cast<size_t>(t * k)], k);  // over the k selected logits, in rank order
        float wsum = 0;
        for (int64_t i = 0; i < k; i++) wsum += wsel[t * k + i];
        if (norm_w) {
            wsum = std::max(wsum, 6.103515625e-5f);
            for (int64_t i = 0; i < k; i++) wsel[t * k + i] /= wsum;
        }
        if (w_scale != 0.0f && w_scale != 1.0f) for (int64_t i = 0; i < k; i++) wsel[t * k + i] *= w_scale;
    }
}

// The experts a routing chose (sel: k per token, w: their gating weights), most-chosen first, ties
// by the summed weight (then expert order): the order reads ahead are asked for and read in, so
// the stream drops the least-wanted when they do not fit, and a guess the next layer does not ask
// for is the likelier to be still queued, and cancelled, when it asks.
std::vector<int32_t> experts_by_votes(const std::vector<int32_t> & sel, const std::vector<float> & w, int64_t n_expert) {
    std::vector<int64_t> cnt(static_cast<size_t>(n_expert), 0);
    std::vector<double> wsum(static_cast<size_t>(n_expert), 0.0);
    for (size_t i = 0; i < sel.size(); i++) {
        cnt[static_cast<size_t>(sel[i])]++;
        if (i < w.size()) wsum[static_cast<size_t>(sel[i])] += w[i];
    }
    std::vector<int32_t> out;
    for (size_t e = 0; e < cnt.size(); e++)
        if (cnt[e]) out.push_back(static_cast<int32_t>(e));
    std::stable_sort(out.begin(), out.end(), [&](int32_t a, int32_t b) {
        const size_t i = static_cast<size_t>(a), j = static_cast<size_t>(b);
        return cnt[i] != cnt[j] ? cnt[i] > cnt[j] : wsum[i] > wsum[j];
    });
    return out;
}

void op_moe(exec_ctx & x, const op_desc & op, size_t oi) {
    model::impl & m = x.m;
    // 0: silu(gate) * up; 1: gpt-oss's clamped swiglu, min(g, limit) * sigmoid(alpha * min(g, limit)) * (clamp(u, -limit, limit) + 1);
    // 2: gelu(up), no gate (nomic-bert-moe: llama.cpp's LLM_FFN_GELU without a gate); 3: relu(up)^2,
    // no gate (Nemotron-H: LLM_FFN_RELU_SQR); 4: gelu(gate) * up (Gemma 4: ggml_geglu_split); 5:
    // relu(gate) * up (SmallThinker: ggml_reglu_split); 6: min(silu(gate), limit) * clamp(up, -limit,
    // limit) (Step 3.5: llama.cpp's swiglu_clamp_exp outside the ggml_swiglu_clamp architectures);
    // 7: silu(min(gate, limit)) * clamp(up, -limit, limit) (Maple: ggml_swiglu_clamp); 8: situ (Kimi-K3:
    // beta tanh(gate / beta) sigmoid(gate) * up, up through linear_beta tanh(up / linear_beta) when set).
    const int act = static_cast<int>(op.param("act", 0));
    const bool gated = moe_gated(op);
    const tensor_ref wu = m.weight(oi, "up_exps"), wg = gated ? m.weight(oi, "gate_exps") : wu, wd = m.weight(oi, "down_exps");
    // Fused gate|up experts: expert e's gate rows, then its up rows, in one matrix (its up slice
    // in the stream is empty: the gate slice holds both).
    const bool fused = moe_fused(op);
    // Per-expert output scales (Gemma 4's per_expert_scale: llama.cpp's down_exps_s), resident.
    const float * ds = reinterpret_cast<const float *>(m.weight(oi, "down_exps_s").data);
    // Per-expert biases (gpt-oss), resident: [ff, n_expert] for gate and up, [d, n_expert] for down.
    const float * bg = reinterpret_cast<const float *>(m.weight(oi, "gate_exps_b").data);
    const float * bu = reinterpret_cast<const float *>(m.weight(oi, "up_exps_b").data);
    const float * bd = reinterpret_cast<const float *>(m.weight(oi, "down_exps_b").data);
    const float alpha = static_cast<float>(op.param("alpha", 1.702)), limit = static_cast<float>(op.param("limit", 7.0));
    // 8: situ (Kimi-K3), as the swiglu op's.
    const float situ_b = static_cast<float>(op.param("situ_beta", 1.0)), situ_lb = static_cast<float>(op.param("situ_linear_beta", 0.0));
    const int64_t n_expert = static_cast<int64_t>(op.param_req("n_expert"));
    const int64_t k = static_cast<int64_t>(op.param_req("n_expert_used"));
    const int moe_layer = static_cast<int>(op.param("moe_layer", -1));
    // Llama 4 weighs each expert's input instead of its output (llama.cpp's weight_before_ffn):
    // expert e of token t computes FFN_e(w * x_t), and the outputs are summed unweighted.
    const bool w_before = op.param("w_before", 0) != 0;
    const int64_t d = x.width(op.a), ff = fused ? wg.ne(1) / 2 : wg.ne(1), n = x.n_tok;
    const size_t up_skip = fused ? static_cast<size_t>(ff) * wg.row_bytes() : 0;  // from a fused expert's gate rows to its up rows

    // 1. router
    std::vector<int32_t> sel;
    std::vector<float> wsel;
    // The router's input: b when given (Nemotron 3 Super's latent MoE routes on the full-width
    // input and runs its experts on a projection of it), else a.
    const int rin = op.b >= 0 ? op.b : op.a;
    moe_route(m, op, oi, x.ptr(rin), n, x.width(rin), sel, wsel, x.b.tokens);
    if (moe_layer >= 0 && moe_layer < m.prog.n_moe_layers) {
        std::lock_guard<std::mutex> lk(m.stats_mu);
        for (int64_t i = 0; i < n * k; i++) m.stats.expert_counts[static_cast<size_t>(moe_layer) * m.prog.n_expert + sel[i]]++;
    }

    // 2. experts: gather the tokens of each expert, gate/up, swiglu, down; results per (token, slot).
    const uint32_t gvt = vec_dot_type(wg.type()), dvt = vec_dot_type(wd.type());
    const size_t xq_row = row_size(gvt, d), hq_row = row_size(dvt, ff);
    // The experts' float inputs: the token rows, or with w_before one weighted row per slot.
    std::vector<float> & xw = m.moe_xw;
    if (w_before) {
        if (xw.size() < static_cast<size_t>(n * k * d)) xw.resize(static_cast<size_t>(n * k * d));
        for (int64_t i = 0; i < n * k; i++) {
            const float * xr = x.ptr(op.a) + (i / k) * d;
            for (int64_t j = 0; j < d; j++) xw[static_cast<size_t>(i * d + j)] = xr[j] * wsel[i];
        }
    }
    const float * xin_f = w_before ? xw.data() : x.ptr(op.a);
    const int64_t in_rows = w_before ? n * k : n;
    auto in_row = [&](int64_t slot) { return w_before ? slot : slot / k; };
    std::vector<uint8_t> & xq = m.moe_xq;
    if (xq.size() < static_cast<size_t>(in_rows) * xq_row) xq.resize(static_cast<size_t>(in_rows) * xq_row);
    matmul_quantize_activations(wg.type(), d, xin_f, d * 4, in_rows, xq.data(), xq_row, m.pool.get());
    // Gate and up experts of types that take different activation types (a quant mix, e.g. Q8_0
    // gate and Q4_K up): the input once more in the up experts' type, as llama.cpp's two products.
    const uint32_t uvt = vec_dot_type(wu.type());
    const bool up_own_xq = gated && !fused && uvt != gvt;
    const size_t xu_row = up_own_xq ? row_size(uvt, d) : xq_row;
    std::vector<uint8_t> & xu = up_own_xq ? m.moe_xq_up : xq;
    if (up_own_xq) {
        if (xu.size() < static_cast<size_t>(in_rows) * xu_row) xu.resize(static_cast<size_t>(in_rows) * xu_row);
        matmul_quantize_activations(wu.type(), d, xin_f, d * 4, in_rows, xu.data(), xu_row, m.pool.get());
    }
    // Every slot is written by the down projection of its expert, so the buffer is not cleared.
    std::vector<float> & slot_out = m.moe_slot_out;
    if (slot_out.size() < static_cast<size_t>(n * k * d)) slot_out.resize(static_cast<size_t>(n * k * d));
    std::vector<std::vector<int64_t>> by_expert(static_cast<size_t>(n_expert));
    for (int64_t i = 0; i < n * k; i++) by_expert[sel[i]].push_back(i);
    // imatrix: the router's input rows, and each routed slot's input row for its expert's gate and
    // up; the down projection's rows are added where they are made (run_expert_on).
    imatrix_stats * imx_down = nullptr;
    if (m.imx_on) {
        const tensor_ref router = m.weight(oi, "gate_inp");
        if (router.info && n >= 16) imx_add(imx_entry(m, router, 1), 0, router.ne(0), x.ptr(rin), x.width(rin), n);
        // (Fused experts: one gate|up tensor, under gate_exps.)
        const tensor_ref & w1 = fused || !wu.info ? wg : wu;
        imatrix_stats & e1 = imx_entry(m, w1, w1.ne(2));
        imatrix_stats * e2 = gated && !fused && wu.info && wg.info && wg.info != wu.info ? &imx_entry(m, wg, wg.ne(2)) : nullptr;
        for (int64_t i = 0; i < n * k; i++) {
            const float * xr = xin_f + in_row(i) * d;
            imx_add(e1, sel[i], d, xr, d, 1);
            if (e2) imx_add(*e2, sel[i], d, xr, d, 1);
        }
        imx_down = &imx_entry(m, wd, wd.ne(2));
    }
    const int n_threads = m.pool->n_threads();
    if (m.moe_scratch.size() < static_cast<size_t>(n_threads)) m.moe_scratch.resize(static_cast<size_t>(n_threads));
    // One expert's gate/up, swiglu, down for its tokens, with `sc` as scratch; `pool` splits each
    // product's rows over threads (nullptr: this thread alone). Threads split rows, never a row's
    // sum, so the result is the same bits either way.
    // LoRA on the experts (llama.cpp's build_lora_mm_id): rows out[i] += s * B_e (A_e in[i]) for the
    // pairs of `role`, s per row from its token's sequence; before the biases, as llama.cpp adds them.
    const std::vector<model::impl::lora_pair> & loras = m.lora[oi];
    auto expert_lora = [&](int role, int64_t e, const std::vector<int64_t> & slots, const float * in, int64_t in_stride, float * const * out, int64_t n_out, threadpool * pool) {
        std::vector<float> rs;
        const int64_t ne_ = static_cast<int64_t>(slots.size());
        for (const model::impl::lora_pair & l : loras) {
            if (l.role != role || !lora_row_scales(m, l, ne_, [&](int64_t i) { return x.b.seq[slots[i] / k]; }, rs)) continue;
            const std::vector<float> ax = lora_a_x(l, e, in, in_stride, ne_, pool);
            lora_add_b(l, e, ax.data(), ne_, rs.data(), out, n_out, pool);
        }
    };
    auto run_expert_on = [&](model::impl::moe_thread_scratch & sc, threadpool * pool, int64_t e, const uint8_t * gw, const uint8_t * uw, const uint8_t * dw) {
        if (fused) uw = gw + up_skip;
        std::vector<float> & g = sc.g;
        std::vector<float> & u = sc.u;
        std::vector<uint8_t> & hq = sc.hq;
        std::vector<const void *> & xrows = sc.xrows;
        std::vector<float *> & yrows = sc.yrows;
        const auto & slots = by_expert[e];
        const int64_t ne_ = static_cast<int64_t>(slots.size());
        g.resize(static_cast<size_t>(ne_ * ff));
        u.resize(static_cast<size_t>(ne_ * ff));
        xrows.resize(ne_);
        yrows.resize(ne_);
        for (int64_t i = 0; i < ne_; i++) xrows[i] = xq.data() + static_cast<size_t>(in_row(slots[i])) * xq_row;
        for (int64_t i = 0; i < ne_; i++) yrows[i] = g.data() + i * ff;
        if (gated) matmul_quantized_rows(wg.type(), gw, wg.row_bytes(), ff, d, xrows.data(), yrows.data(), ne_, pool);
        if (up_own_xq)
            for (int64_t i = 0; i < ne_; i++) xrows[i] = xu.data() + static_cast<size_t>(in_row(slots[i])) * xu_row;
        for (int64_t i = 0; i < ne_; i++) yrows[i] = u.data() + i * ff;
        matmul_quantized_rows(wu.type(), uw, wu.row_bytes(), ff, d, xrows.data(), yrows.data(), ne_, pool);
        if (!loras.empty()) {
            // The experts' float inputs, gathered (A x needs them in A's own activation type).
            std::vector<float> xin(static_cast<size_t>(ne_ * d));
            for (int64_t i = 0; i < ne_; i++) std::memcpy(xin.data() + i * d, xin_f + in_row(slots[i]) * d, static_cast<size_t>(d) * 4);
            for (int64_t i = 0; i < ne_; i++) yrows[i] = g.data() + i * ff;
            if (gated) expert_lora(1, e, slots, xin.data(), d, yrows.data(), ff, pool);
            for (int64_t i = 0; i < ne_; i++) yrows[i] = u.data() + i * ff;
            expert_lora(2, e, slots, xin.data(), d, yrows.data(), ff, pool);
        }
        if (bg) {
            for (int64_t i = 0; i < ne_; i++) yrows[i] = g.data() + i * ff;
            add_bias_rows(yrows.data(), ne_, bg + e * ff, ff);
        }
        if (bu) {
            for (int64_t i = 0; i < ne_; i++) yrows[i] = u.data() + i * ff;
            add_bias_rows(yrows.data(), ne_, bu + e * ff, ff);
        }
        if (act == 2) {
            const float * gt = gelu_table();
            for (int64_t i = 0; i < ne_ * ff; i++) g[i] = gelu_ggml(gt, u[i]);
        } else if (act == 4) {
            const float * gt = gelu_table();
            for (int64_t i = 0; i < ne_ * ff; i++) g[i] = gelu_ggml(gt, g[i]) * u[i];
        } else if (act == 5) {
            for (int64_t i = 0; i < ne_ * ff; i++) g[i] = (g[i] > 0.0f ? g[i] : 0.0f) * u[i];
        } else if (act == 3) {
            for (int64_t i = 0; i < ne_ * ff; i++) g[i] = u[i] > 0.0f ? u[i] * u[i] : 0.0f;
        } else if (act == 6) {
            for (int64_t i = 0; i < ne_ * ff; i++) g[i] = swiglu_limited(g[i], u[i], limit);
        } else if (act == 8) {
            for (int64_t i = 0; i < ne_ * ff; i++) g[i] = situ(g[i], u[i], situ_b, situ_lb);
        } else if (act == 7) {
            for (int64_t i = 0; i < ne_ * ff; i++) {
                const float gx = std::min(g[i], limit);
                g[i] = gx / (1.0f + std::exp(-gx)) * std::min(std::max(u[i], -limit), limit);
            }
        } else if (act == 1) {
            for (int64_t i = 0; i < ne_ * ff; i++) {
                const float gx = std::min(g[i], limit);
                const float uy = std::min(std::max(u[i], -limit), limit);
                g[i] = gx / (1.0f + std::exp(alpha * -gx)) * (uy + 1.0f);
            }
        } else {
            for (int64_t i = 0; i < ne_ * ff; i++) g[i] = silu(g[i]) * u[i];
        }
        if (imx_down) imx_add(*imx_down, e, ff, g.data(), ff, ne_);
        hq.resize(static_cast<size_t>(ne_) * hq_row);
        matmul_quantize_activations(wd.type(), ff, g.data(), ff * 4, ne_, hq.data(), hq_row, pool);
        for (int64_t i = 0; i < ne_; i++) {
            xrows[i] = hq.data() + static_cast<size_t>(i) * hq_row;
            yrows[i] = slot_out.data() + slots[i] * d;
        }
        matmul_quantized_rows(wd.type(), dw, wd.row_bytes(), d, ff, xrows.data(), yrows.data(), ne_, pool);
        // (As llama.cpp's build_lora_mm_id: the scale on the product, before LoRA and the bias.)
        if (ds)
            for (int64_t i = 0; i < ne_; i++)
                for (int64_t j = 0; j < d; j++) yrows[i][j] *= ds[e];
        if (!loras.empty()) expert_lora(3, e, slots, g.data(), ff, yrows.data(), d, pool);
        if (bd) add_bias_rows(yrows.data(), ne_, bd + e * d, d);
    };
    auto run_expert = [&](int64_t e, const uint8_t * gw, const uint8_t * uw, const uint8_t * dw) {
        run_expert_on(m.moe_scratch[0], m.pool.get(), e, gw, uw, dw);
    };
    if (!m.stream) {
        std::vector<int64_t> order;
        for (int64_t e = 0; e < n_expert; e++)
            if (!by_expert[e].empty()) order.push_back(e);
        auto expert_weights = [&](int64_t e, const uint8_t *& gw, const uint8_t *& uw, const uint8_t *& dw) {
            gw = wg.data + static_cast<size_t>(e) * wg.matrix_bytes();
            uw = wu.data + static_cast<size_t>(e) * wu.matrix_bytes();  // (fused: run_expert_on takes it from gw)
            dw = wd.data + static_cast<size_t>(e) * wd.matrix_bytes();
        };
        const int64_t n_routed = static_cast<int64_t>(order.size());
        if (n_threads > 1 && n_routed >= 2 * n_threads && n * k <= 2 * n_routed) {
            // Several experts with a token or two each (decode, or a batch whose tokens spread
            // over many experts): their products stream weights and are over in tens of
            // microseconds, so one expert per thread at a time, the busiest first, beats splitting
            // every product over the threads (a dispatch and a barrier each, hundreds per layer).
            // With more tokens per expert the products are compute-bound tiles and split by rows.
            std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return by_expert[a].size() > by_expert[b].size(); });
            m.pool->parallel_for(
                static_cast<int64_t>(order.size()),
                [&](int64_t b, int64_t e, int tid) {
                    for (int64_t i = b; i < e; i++) {
                        const uint8_t *gw, *uw, *dw;
                        expert_weights(order[i], gw, uw, dw);
                        run_expert_on(m.moe_scratch[static_cast<size_t>(tid)], nullptr, order[i], gw, uw, dw);
                    }
                },
                1);
        } else {
            for (int64_t e : order) {
                const uint8_t *gw, *uw, *dw;
                expert_weights(e, gw, uw, dw);
                run_expert(e, gw, uw, dw);
            }
        }
    } else {
        // Streaming: ask for every expert at once, predict the next MoE layer's experts from this
        // layer's input while the reads run, then compute experts in the order they arrive (the
        // sum below is in slot order, so the order of compute does not change the result).
        std::vector<int32_t> need;
        std::vector<float> need_w;  // each expert's largest routing weight in the batch, for the cache policy
        for (int64_t e = 0; e < n_expert; e++) {
            if (by_expert[e].empty()) continue;
            float w = 0;
            for (int64_t slot : by_expert[e]) w = std::max(w, wsel[slot]);
            need.push_back(static_cast<int32_t>(e));
            need_w.push_back(w);
        }
        expert_request req = m.stream->request(m.stream_layer[oi], need.data(), static_cast<int>(need.size()), &x.cancel, need_w.data());
        const int nx = m.next_moe[oi];
        // (The next router applied to this one's input, when they read the same width; not for a
        // moe op whose own router runs early, which a moe_prefetch reads ahead for exactly.)
        const int nrin = nx >= 0 ? (m.prog.ops[nx].b >= 0 ? m.prog.ops[nx].b : m.prog.ops[nx].a) : -1;
        if (m.params.prefetch && nx >= 0 && !m.routed_early[static_cast<size_t>(nx)] && x.width(nrin) == x.width(rin)) {
            const op_desc & nop = m.prog.ops[nx];
            std::vector<int32_t> psel;
            std::vector<float> pw;
            moe_route(m, nop, static_cast<size_t>(nx), x.ptr(rin), n, x.width(rin), psel, pw, x.b.tokens);
            std::vector<int32_t> guess = experts_by_votes(psel, pw, static_cast<int64_t>(nop.param_req("n_expert")));
            // At most twice the experts a token uses, the most-voted: a batch's predictions are
            // mostly experts one token wants, and reading all of them ahead took the bandwidth the
            // next layer's own reads needed (Qwen3-30B-A3B shape, 8 layers, 16 sequences under a
            // 1.2 GB budget: 13.4 t/s guessing all, 23.8-24.0 with at most 8-16, 23.4 with none;
            // one sequence guesses its 8 either way).
            const size_t most = static_cast<size_t>(2 * nop.param_req("n_expert_used"));
            if (guess.size() > most) guess.resize(most);
            m.stream->prefetch(m.stream_layer[nx], guess.data(), static_cast<int>(guess.size()));
        }
        expert_request::view v;
        while (req.next(v)) {
            const auto t0 = std::chrono::steady_clock::now();
            run_expert(v.expert, v.data[0], v.data[1], v.data[2]);
            req.done(v, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        }
    }
    // 3. weighted sum in slot order, as ggml adds the expert views one after another (unweighted
    // when the weights went into the inputs).
    for (int64_t t = 0; t < n; t++) {
        float * o = x.ptr(op.out) + t * x.width(op.out);
        if (w_before) {
            for (int64_t i = 0; i < d; i++) o[i] = slot_out[(t * k) * d + i];
            for (int64_t s = 1; s < k; s++) {
                const float * so = slot_out.data() + (t * k + s) * d;
                for (int64_t i = 0; i < d; i++) o[i] += so[i];
            }
            continue;
        }
        for (int64_t i = 0; i < d; i++) o[i] = slot_out[(t * k) * d + i] * wsel[t * k];
        for (int64_t s = 1; s < k; s++) {
            const float * so = slot_out.data() + (t * k + s) * d;
            const float w = wsel[t * k + s];
            for (int64_t i = 0; i < d; i++) o[i] += so[i] * w;
        }
    }
}

// SmallThinker-style early routing: the router of the next moe op reads a buffer that is ready
// before the block's attention, so its experts are known then. Streaming, this routes the batch
// with that router and asks the stream for every expert it chose (most-wanted first), which reads
// them while attention computes; the moe op then finds them cached or in flight. Otherwise nothing.
void op_moe_prefetch(exec_ctx & x, const op_desc & op, size_t oi) {
    model::impl & m = x.m;
    const int mi = m.prefetch_for[oi];
    if (!m.stream || !m.params.prefetch || mi < 0) return;
    const op_desc & mop = m.prog.ops[static_cast<size_t>(mi)];
    std::vector<int32_t> sel;
    std::vector<float> w;
    moe_route(m, mop, static_cast<size_t>(mi), x.ptr(op.a), x.n_tok, x.width(op.a), sel, w, x.b.tokens);
    const std::vector<int32_t> want = experts_by_votes(sel, w, static_cast<int64_t>(mop.param_req("n_expert")));
    m.stream->prefetch(m.stream_layer[static_cast<size_t>(mi)], want.data(), static_cast<int>(want.size()));
}

// A sequence's state in recurrent layer `layer`, zeros at its first token (counted in kv_bytes
// and refused past the KV budget, as a cache row would be).
std::vector<float> & rs_state(model::impl & m, int seq, int layer) {
    std::vector<float> & st = m.rs[static_cast<size_t>(seq)][static_cast<size_t>(layer)];
    if (st.empty()) {
        const uint64_t bytes = static_cast<uint64_t>(m.prog.rs_width[static_cast<size_t>(layer)]) * sizeof(float);
        if (m.params.kv_max_bytes && m.kv_bytes + bytes > m.params.kv_max_bytes)
            throw error(KAIL_E_BUDGET, "KV cache budget exceeded: need " + std::to_string(m.kv_bytes + bytes) + " bytes, budget " + std::to_string(m.params.kv_max_bytes));
        st.assign(static_cast<size_t>(m.prog.rs_width[static_cast<size_t>(layer)]), 0.0f);
        m.kv_bytes += st.capacity() * sizeof(float);
    }
    return st;
}

// A sequence that keeps a checkpoint records its recurrent op's inputs of one token (these spans,
// in order: rs_record[layer] floats), which rs_replay feeds back through the op's state update.
void rs_record_inputs(model::impl & m, int seq, int layer, std::initializer_list<std::pair<const float *, int64_t>> spans) {
    model::impl::rs_checkpoint & ck = m.rs_ck[static_cast<size_t>(seq)];
    if (ck.pos0 < 0) return;
    std::vector<float> & rec = ck.inputs[static_cast<size_t>(layer)];
    for (const auto & [p, n] : spans) rec.insert(rec.end(), p, p + n);
}

// The recurrent ops' parallel shape: each sequence in the batch with its tokens in batch order
// (position order within it) and its state in recurrent layer `layer` (allocated before the
// threads start), its heads over the threads: f(state, head, tokens, scratch) per (sequence,
// head), with one scratch vector per thread's range.
template <typename F>
void over_sequence_heads(exec_ctx & x, int layer, int64_t heads, F && f) {
    std::map<int, std::vector<int64_t>> by_seq;
    for (int64_t t = 0; t < x.n_tok; t++) by_seq[x.b.seq[t]].push_back(t);
    std::vector<std::pair<float *, const std::vector<int64_t> *>> seqs;
    for (auto & [seq, toks] : by_seq) seqs.push_back({rs_state(x.m, seq, layer).data(), &toks});
    x.m.pool->parallel_for(static_cast<int64_t>(seqs.size()) * heads, [&](int64_t begin, int64_t end, int) {
        std::vector<float> scratch;
        for (int64_t task = begin; task < end; task++) {
            const auto & [state, toks] = seqs[static_cast<size_t>(task / heads)];
            f(state, task % heads, *toks, scratch);
        }
    }, 1);
}

// A convolution state (the last nc - 1 inputs of C channels, oldest first) after input row `in`.
// qwen4exp's PLE n-gram state: the last n_gram - 1 tokens, oldest first, each stored as id + 1 (0: no token).
void ple_push(std::vector<float> & st, float tok1) {
    if (st.empty()) return;
    std::memmove(st.data(), st.data() + 1, (st.size() - 1) * sizeof(float));
    st.back() = tok1;
}

void conv_push(std::vector<float> & st, const float * in, int64_t C, int64_t nc) {
    if (nc > 2) std::memmove(st.data(), st.data() + C, static_cast<size_t>((nc - 2) * C) * sizeof(float));
    std::memcpy(st.data() + (nc - 2) * C, in, static_cast<size_t>(C) * sizeof(float));
}

// ggml_ssm_conv (then + bias, then ggml_silu with `silu`): out[c] = sum_i window_i[c] * w[c][i] over the d_conv
// inputs ending at this token, summed in F32 oldest first as ggml-cpu does; the sequence's state
// keeps the d_conv - 1 inputs before it, [i][channel], oldest first. Tokens run in batch order,
// which is position order within each sequence.
void op_ssm_conv(exec_ctx & x, const op_desc & op, size_t oi) {
    model::impl & m = x.m;
    const int layer = static_cast<int>(op.param_req("layer"));
    const int64_t nc = static_cast<int64_t>(op.param_req("d_conv"));
    // With a dilation the taps lie dil positions apart and the state keeps (d_conv - 1) x dil inputs.
    const int64_t dil = static_cast<int64_t>(op.param("dilation", 1)), L = (nc - 1) * dil;
    const bool act = op.param("silu", 0) != 0;
    const int64_t C = x.width(op.a), ow = x.width(op.out);
    const tensor_ref wt = m.weight(oi, "weight");
    std::vector<float> wf;
    if (wt.type() != KAIL_TYPE_F32) {
        wf.resize(static_cast<size_t>(wt.info->n_elements));
        dequantize_row(wt.type(), wt.data, wf.data(), wt.info->n_elements);
    }
    const float * w = wf.empty() ? reinterpret_cast<const float *>(wt.data) : wf.data();  // channel c's taps at c * nc
    const float * bias = reinterpret_cast<const float *>(m.weight(oi, "bias").data);
    for (int64_t t = 0; t < x.n_tok; t++) {
        std::vector<float> & st = rs_state(m, x.b.seq[t], layer);
        const float * in = x.ptr(op.a) + t * C;
        float * out = x.ptr(op.out) + t * ow;
        rs_record_inputs(m, x.b.seq[t], layer, {{in, C}});
        for (int64_t c = 0; c < C; c++) {
            const float * wc = w + c * nc;
            float sum = 0.0f;
            for (int64_t i = 0; i < nc - 1; i++) sum += st[static_cast<size_t>(i * dil * C + c)] * wc[i];
            sum += in[c] * wc[nc - 1];
            if (bias) sum += bias[c];
            out[c] = act ? silu(sum) : sum;
        }
        conv_push(st, in, C, L + 1);
    }
}

float dot_f32(const float * a, const float * b, int64_t n) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) acc[j] += a[i + j] * b[i + j];
    float sum = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    for (; i < n; i++) sum += a[i] * b[i];
    return sum;
}

// The gated delta rule of Qwen3-Next / Qwen3.5's linear attention, as ggml-cpu's fused
// ggml_gated_delta_net (which llama.cpp uses on CPU for prompts and decoding alike). Per token:
// q and k of each key head L2-normalized (ggml_rms_norm with eps / S, times 1 / sqrt(S)),
// g = softplus(alpha + dt_bias) * a (a = -exp(A_log)), beta = sigmoid(beta logits); per value
// head h (key head h % n_k_heads as Qwen3.5's tiled heads, or h / (n_v_heads / n_k_heads) with
// `grouped`, as Qwen3-Next repeats each key head for its group) with state M (row j: value dim j,
// over the key dims): M *= exp(g); delta_j = (v_j - M_j . k) beta; M_j += delta_j k;
// out_j = (M_j . q) / sqrt(S). With `kda` (Kimi Delta Attention, ggml_gated_delta_net given a g
// of head_dim values per head) the gate is per key channel: alpha and dt_bias hold S values per
// value head, g_i = softplus(alpha_i + dt_bias_i) * a, and column i of M (key dim i) decays by exp(g_i).
// With `lower_bound` (the KDA "safe gate" of Ling 3 / bailingmoe3: llama.cpp's ggml_add, ggml_mul,
// ggml_sigmoid, ggml_scale) the gate is g = lower_bound * sigmoid((alpha + dt_bias) * a) instead,
// a = exp(A_log) > 0 there: decays between exp(lower_bound) and 1. With `neg_a` as well the sigmoid
// reads -((alpha + dt_bias) * a) (Kimi-K3's gate lower bound: its ssm_a holds -exp(A_log), and
// llama.cpp's kimi-k3 graph negates the product with ggml_scale by -1 before ggml_sigmoid).
struct gdn_params {
    int64_t       Hk, Hv, S, group, gw;  // gw: gate values per value head (1, or S with kda)
    float         eps, inv_sqrt;
    const float * dt;
    const float * A;
    bool          safe;  // the safe gate (lower_bound given)
    float         lb;
    bool          neg_a;  // the safe gate's sigmoid of -((alpha + dt_bias) a)
    gdn_params(const model::impl & m, const op_desc & op, size_t oi)
        : Hk(static_cast<int64_t>(op.param_req("n_k_heads"))), Hv(static_cast<int64_t>(op.param_req("n_v_heads"))), S(static_cast<int64_t>(op.param_req("head_dim"))),
          group(op.param("grouped", 0) != 0 ? Hv / Hk : 0), gw(op.param("kda", 0) != 0 ? S : 1), eps(static_cast<float>(op.param_req("eps"))),
          inv_sqrt(1.0f / std::sqrt(static_cast<float>(S))), dt(reinterpret_cast<const float *>(m.weight(oi, "dt_bias").data)), A(reinterpret_cast<const float *>(m.weight(oi, "a").data)),
          safe(op.params.count("lower_bound") != 0), lb(static_cast<float>(op.param("lower_bound", 0))), neg_a(op.param("neg_a", 0) != 0) {}
    int64_t key_head(int64_t h) const { return group ? h / group : h % Hk; }
    // Floats per token of gdn_prepare's gb: the gates (Hv gw), then the betas (Hv).
    int64_t gb_width() const { return Hv * (gw + 1); }
};

// One token's normalized q|k (2 Hk S floats into qk) and g|beta (gb_width() floats into gb) from its op inputs.
void gdn_prepare(const gdn_params & g, const float * a, const float * al, const float * be, float * qk, float * gb) {
    for (int64_t h = 0; h < 2 * g.Hk; h++) {
        rms_norm_row(a + h * g.S, qk + h * g.S, g.S, g.eps / static_cast<float>(g.S), nullptr);
        for (int64_t i = 0; i < g.S; i++) qk[h * g.S + i] *= g.inv_sqrt;
    }
    const int64_t ng = g.Hv * g.gw;
    for (int64_t i = 0; i < ng; i++) {
        const float z = al[i] + g.dt[i];
        if (g.safe) {
            const float za = g.neg_a ? -(z * g.A[i / g.gw]) : z * g.A[i / g.gw];
            gb[i] = (1.0f / (1.0f + std::exp(-za))) * g.lb;
            continue;
        }
        const float sp = z > 20.0f ? z : std::log(1.0f + std::exp(z));
        gb[i] = sp * g.A[i / g.gw];
    }
    for (int64_t h = 0; h < g.Hv; h++) gb[ng + h] = 1.0f / (1.0f + std::exp(-be[h]));
}

// One token through value head h's state M (its v: the head's S values); out (S floats) unless null.
// (With kda, delta first holds the S decays exp(g_i), as ggml-cpu's loop does.)
void gdn_step(const gdn_params & g, float * M, int64_t h, const float * qk, const float * gb, const float * v, float * delta, float * out) {
    const int64_t S = g.S;
    const float * q = qk + g.key_head(h) * S;
    const float * k = q + g.Hk * S;
    const float beta = gb[g.Hv * g.gw + h];
    if (g.gw == 1) {
        const float eg = std::exp(gb[h]);
        for (int64_t i = 0; i < S * S; i++) M[i] *= eg;
    } else {
        for (int64_t i = 0; i < S; i++) delta[i] = std::exp(gb[h * S + i]);
        for (int64_t j = 0; j < S; j++) {
            float * row = M + j * S;
            for (int64_t i = 0; i < S; i++) row[i] *= delta[i];
        }
    }
    for (int64_t j = 0; j < S; j++) delta[j] = (v[j] - dot_f32(M + j * S, k, S)) * beta;
    for (int64_t j = 0; j < S; j++) {
        float * row = M + j * S;
        const float d = delta[j];
        for (int64_t i = 0; i < S; i++) row[i] += k[i] * d;
    }
    if (out)
        for (int64_t j = 0; j < S; j++) out[j] = dot_f32(M + j * S, q, S) * g.inv_sqrt;
}

void op_gated_delta_net(exec_ctx & x, const op_desc & op, size_t oi) {
    model::impl & m = x.m;
    const int layer = static_cast<int>(op.param_req("layer"));
    const gdn_params g(m, op, oi);
    const int64_t Hk = g.Hk, Hv = g.Hv, S = g.S;
    const int64_t aw = x.width(op.a), ow = x.width(op.out), n = x.n_tok;
    // Normalized q and k (2 Hk S per token), then g and beta (gbw per token).
    const int64_t gbw = g.gb_width();
    std::vector<float> qk(static_cast<size_t>(n * 2 * Hk * S)), gb(static_cast<size_t>(n * gbw));
    for (int64_t t = 0; t < n; t++) {
        const float * a = x.ptr(op.a) + t * aw;
        const float * al = x.ptr(op.b) + t * x.width(op.b);
        const float * be = x.ptr(op.c) + t * x.width(op.c);
        gdn_prepare(g, a, al, be, qk.data() + t * 2 * Hk * S, gb.data() + t * gbw);
        rs_record_inputs(m, x.b.seq[t], layer, {{a, aw}, {al, Hv * g.gw}, {be, Hv}});
    }
    over_sequence_heads(x, layer, Hv, [&](float * state, int64_t h, const std::vector<int64_t> & toks, std::vector<float> & delta) {
        delta.resize(static_cast<size_t>(S));
        for (int64_t t : toks)
            gdn_step(g, state + h * S * S, h, qk.data() + t * 2 * Hk * S, gb.data() + t * gbw, x.ptr(op.a) + t * aw + 2 * Hk * S + h * S, delta.data(), x.ptr(op.out) + t * ow + h * S);
    });
}

// The selective scan of Mamba-2 and Mamba-1, as ggml-cpu's ggml_ssm_scan (llama.cpp's
// build_mamba2_layer, build_mamba_layer): per token and head h (group g = h / (n_head / n_group)),
// dt_h = softplus(dt + dt_bias) (Mamba-1: dt came biased, no dt_bias); for each of the head's
// head_dim rows i of the state (d_state wide): s_i = s_i dA + B_g x_i dt_h, y_i = s_i . C_g; out =
// y + D_h x. Mamba-2's A is a scalar per head (dA = exp(dt_h A_h)); Mamba-1's has one per state
// element (A [head][d_state], dA_j = exp(dt_h A_hj), with head_dim 1). The state is
// [head][row][d_state] as ggml's {d_state, head_dim, n_head}.
struct ssm_scan_params {
    int64_t       H, P, N, G;  // heads, head_dim, d_state, groups
    const float * dt;          // or null
    const float * A;
    const float * D;
    bool          a_per_state;
    ssm_scan_params(const model::impl & m, const op_desc & op, size_t oi)
        : H(static_cast<int64_t>(op.param_req("n_head"))), P(static_cast<int64_t>(op.param_req("head_dim"))), N(static_cast<int64_t>(op.param_req("d_state"))),
          G(static_cast<int64_t>(op.param_req("n_group"))), dt(reinterpret_cast<const float *>(m.weight(oi, "dt_bias").data)),
          A(reinterpret_cast<const float *>(m.weight(oi, "a").data)), D(reinterpret_cast<const float *>(m.weight(oi, "d").data)),
          a_per_state(m.weight(oi, "a").info->n_elements == H * N && N > 1) {}
};

// One token (x|B|C row a, raw dt row) through head h's state S (P x N); out (P floats) unless null.
void ssm_scan_step(const ssm_scan_params & q, float * S, int64_t h, const float * a, const float * dtr, float * out) {
    const float z = dtr[h] + (q.dt ? q.dt[h] : 0.0f);
    const float dts = z > 20.0f ? z : std::log(1.0f + std::exp(z));
    const int64_t g = h / (q.H / q.G);
    const float * x = a + h * q.P;
    const float * B = a + q.H * q.P + g * q.N;
    const float * C = a + q.H * q.P + q.G * q.N + g * q.N;
    if (q.a_per_state) {
        // (Summed in order, as ggml-cpu's Mamba-1 loop.)
        const float * Ah = q.A + h * q.N;
        for (int64_t i = 0; i < q.P; i++) {
            float * s = S + i * q.N;
            const float xdt = x[i] * dts;
            float sum = 0.0f;
            for (int64_t j = 0; j < q.N; j++) {
                s[j] = s[j] * std::exp(dts * Ah[j]) + B[j] * xdt;
                sum += s[j] * C[j];
            }
            if (out) out[i] = sum + x[i] * q.D[h];
        }
        return;
    }
    const float dA = std::exp(dts * q.A[h]);
    for (int64_t i = 0; i < q.P; i++) {
        float * s = S + i * q.N;
        const float xdt = x[i] * dts;
        for (int64_t j = 0; j < q.N; j++) s[j] = s[j] * dA + B[j] * xdt;
        if (out) out[i] = dot_f32(s, C, q.N) + x[i] * q.D[h];
    }
}

void op_ssm_scan(exec_ctx & x, const op_desc & op, size_t oi) {
    model::impl & m = x.m;
    const int layer = static_cast<int>(op.param_req("layer"));
    const ssm_scan_params q(m, op, oi);
    const int64_t aw = x.width(op.a), bw = x.width(op.b), ow = x.width(op.out), n = x.n_tok;
    for (int64_t t = 0; t < n; t++) rs_record_inputs(m, x.b.seq[t], layer, {{x.ptr(op.a) + t * aw, aw}, {x.ptr(op.b) + t * bw, q.H}});
    over_sequence_heads(x, layer, q.H, [&](float * state, int64_t h, const std::vector<int64_t> & toks, std::vector<float> &) {
        for (int64_t t : toks) ssm_scan_step(q, state + h * q.P * q.N, h, x.ptr(op.a) + t * aw, x.ptr(op.b) + t * bw, x.ptr(op.out) + t * ow + h * q.P);
    });
}

// MiniMax-01's lightning attention (llama.cpp's src/models/minimax-01.cpp, a linear attention with
// a fixed decay per head): a holds per head h its q, k and v (head_dim each, SiLU applied first
// with `silu`), and each head keeps a head_dim x head_dim state, [head][value dim j][key dim i].
// Per token: S = exp(-slope_h slope_scale) S + k^T v; out = q S (no 1/sqrt(d)). The slopes are
// llama.cpp's ALiBi-style ones in float: start = 2^(-2^-(log2(n_head) - 3)), slope_h = start *
// start^h; slope_scale is the layer's 1 - il / (n_layer - 1) + 1e-5. llama.cpp computes a ubatch
// in one block (decays exp(-slope (pos + 1)) on q, exp(-slope (n - pos - 1)) on k and the
// intra-block mask); token by token is the same sum, so prompts and decoding agree.
struct lightning_params {
    int64_t            H, D;
    bool               silu_in;
    std::vector<float> decay;  // per head
    explicit lightning_params(const op_desc & op)
        : H(static_cast<int64_t>(op.param_req("n_head"))), D(static_cast<int64_t>(op.param_req("head_dim"))), silu_in(op.param("silu", 0) != 0), decay(static_cast<size_t>(H)) {
        const float scale = static_cast<float>(op.param_req("slope_scale"));
        const float start = powf(2.0f, -powf(2.0f, -(log2f(static_cast<float>(H)) - 3.0f)));
        for (int64_t h = 0; h < H; h++) decay[static_cast<size_t>(h)] = std::exp(-(start * powf(start, static_cast<float>(h)) * scale));
    }
};

// One token (its q|k|v row a) through head h's state S; qkv: 3 D floats of scratch; out (D floats) unless null.
void lightning_step(const lightning_params & q, float * S, int64_t h, const float * a, float * qkv, float * out) {
    const int64_t D = q.D;
    const float * in = a + h * 3 * D;
    for (int64_t i = 0; i < 3 * D; i++) qkv[i] = q.silu_in ? silu(in[i]) : in[i];
    const float * qh = qkv;
    const float * k = qkv + D;
    const float * v = qkv + 2 * D;
    const float d = q.decay[static_cast<size_t>(h)];
    for (int64_t j = 0; j < D; j++) {
        float * row = S + j * D;
        const float vj = v[j];
        for (int64_t i = 0; i < D; i++) row[i] = row[i] * d + k[i] * vj;
        if (out) out[j] = dot_f32(row, qh, D);
    }
}

void op_lightning_attn(exec_ctx & x, const op_desc & op) {
    model::impl & m = x.m;
    const int layer = static_cast<int>(op.param_req("layer"));
    const lightning_params q(op);
    const int64_t aw = x.width(op.a), ow = x.width(op.out), n = x.n_tok;
    for (int64_t t = 0; t < n; t++) rs_record_inputs(m, x.b.seq[t], layer, {{x.ptr(op.a) + t * aw, aw}});
    over_sequence_heads(x, layer, q.H, [&](float * state, int64_t h, const std::vector<int64_t> & toks, std::vector<float> & qkv) {
        qkv.resize(static_cast<size_t>(3 * q.D));
        for (int64_t t : toks) lightning_step(q, state + h * q.D * q.D, h, x.ptr(op.a) + t * aw, qkv.data(), x.ptr(op.out) + t * ow + h * q.D);
    });
}

// RWKV-7's WKV (ggml_rwkv_wkv7): one token (its row r|w|k|v|a|b, six sections of C = H D) through
// head h's state S[value i][key j]: sa = S_i . a, S_ij = S_ij w_j + v_i k_j + sa b_j, out_i = S_i . r
// (out: D floats unless null).
void wkv7_step(int64_t H, int64_t D, float * S, int64_t h, const float * row, float * out) {
    const int64_t C = H * D;
    const float * r = row + h * D;
    const float * w = row + C + h * D;
    const float * k = row + 2 * C + h * D;
    const float * v = row + 3 * C + h * D;
    const float * a = row + 4 * C + h * D;
    const float * b = row + 5 * C + h * D;
    for (int64_t i = 0; i < D; i++) {
        float * Si = S + i * D;
        const float sa = dot_f32(a, Si, D), vi = v[i];
        for (int64_t j = 0; j < D; j++) Si[j] = Si[j] * w[j] + vi * k[j] + sa * b[j];
        if (out) out[i] = dot_f32(Si, r, D);
    }
}

void op_rwkv_wkv7(exec_ctx & x, const op_desc & op) {
    model::impl & m = x.m;
    const int layer = static_cast<int>(op.param_req("layer"));
    const int64_t H = static_cast<int64_t>(op.param_req("n_head")), D = static_cast<int64_t>(op.param_req("head_dim"));
    const int64_t aw = x.width(op.a), ow = x.width(op.out), n = x.n_tok;
    for (int64_t t = 0; t < n; t++) rs_record_inputs(m, x.b.seq[t], layer, {{x.ptr(op.a) + t * aw, aw}});
    over_sequence_heads(x, layer, H, [&](float * state, int64_t h, const std::vector<int64_t> & toks, std::vector<float> &) {
        for (int64_t t : toks) wkv7_step(H, D, state + h * D * D, h, x.ptr(op.a) + t * aw, x.ptr(op.out) + t * ow + h * D);
    });
}

// RWKV-6's WKV (ggml_rwkv_wkv6): one token (its row r|k|v|w, four sections of C = H D) through head
// h's state S[key i][value j] with time_first u (C values): out_j = sum_i r_i (u_i k_i v_j + S_ij),
// summed over i in order as ggml-cpu does; S_ij = S_ij w_i + k_i v_j (out: D floats unless null).
// gla > 0 (ggml_gated_linear_attn, RWKV-6-Qwen2's time mix; no u): S_ij = fma(S_ij, w_i, k_i v_j),
// out_j = fma(S_ij, r_i gla, out_j) over the updated state, as ggml-cpu's vector loop computes it.
void wkv6_step(int64_t H, int64_t D, const float * u, float gla, float * S, int64_t h, const float * row, float * out) {
    const int64_t C = H * D;
    const float * r = row + h * D;
    const float * k = row + C + h * D;
    const float * v = row + 2 * C + h * D;
    const float * w = row + 3 * C + h * D;
    if (out) std::fill(out, out + D, 0.0f);
    if (gla > 0) {
        for (int64_t i = 0; i < D; i++) {
            float * Si = S + i * D;
            const float ki = k[i], qi = r[i] * gla, wi = w[i];
            for (int64_t j = 0; j < D; j++) {
                const float s = std::fma(Si[j], wi, v[j] * ki);
                if (out) out[j] = std::fma(s, qi, out[j]);
                Si[j] = s;
            }
        }
        return;
    }
    const float * uh = u + h * D;
    for (int64_t i = 0; i < D; i++) {
        float * Si = S + i * D;
        const float ki = k[i], ri = r[i], ui = uh[i], wi = w[i];
        for (int64_t j = 0; j < D; j++) {
            const float kv = v[j] * ki;
            if (out) out[j] += (kv * ui + Si[j]) * ri;
            Si[j] = Si[j] * wi + kv;
        }
    }
}

void op_rwkv_wkv6(exec_ctx & x, const op_desc & op, size_t oi) {
    model::impl & m = x.m;
    const int layer = static_cast<int>(op.param_req("layer"));
    const int64_t H = static_cast<int64_t>(op.param_req("n_head")), D = static_cast<int64_t>(op.param_req("head_dim"));
    const float gla = static_cast<float>(op.param("gla_scale", 0));
    const float * u = gla > 0 ? nullptr : reinterpret_cast<const float *>(m.weight(oi, "u").data);
    const int64_t aw = x.width(op.a), ow = x.width(op.out), n = x.n_tok;
    for (int64_t t = 0; t < n; t++) rs_record_inputs(m, x.b.seq[t], layer, {{x.ptr(op.a) + t * aw, aw}});
    over_sequence_heads(x, layer, H, [&](float * state, int64_t h, const std::vector<int64_t> & toks, std::vector<float> &) {
        for (int64_t t : toks) wkv6_step(H, D, u, gla, state + h * D * D, h, x.ptr(op.a) + t * aw, x.ptr(op.out) + t * ow + h * D);
    });
}

// RWKV's token shift: each token gets its sequence's previous row of a (the state), which then becomes its own.
void op_token_shift(exec_ctx & x, const op_desc & op) {
    model::impl & m = x.m;
    const int layer = static_cast<int>(op.param_req("layer"));
    const int64_t aw = x.width(op.a), ow = x.width(op.out), n = x.n_tok;
    for (int64_t t = 0; t < n; t++) rs_record_inputs(m, x.b.seq[t], layer, {{x.ptr(op.a) + t * aw, aw}});
    over_sequence_heads(x, layer, 1, [&](float * state, int64_t, const std::vector<int64_t> & toks, std::vector<float> &) {
        for (int64_t t : toks) {
            std::memcpy(x.ptr(op.out) + t * ow, state, static_cast<size_t>(aw) * sizeof(float));
            std::memcpy(state, x.ptr(op.a) + t * aw, static_cast<size_t>(aw) * sizeof(float));
        }
    });
}

void rs_drop_checkpoint(model::impl::rs_checkpoint & ck) {
    ck.pos0 = -1;
    ck.n = 0;
    std::vector<std::vector<float>>().swap(ck.state);
    std::vector<std::vector<float>>().swap(ck.inputs);
}

// Applies the first r recorded positions of `inputs` to `states` (one per recurrent layer; an
// empty one is a sequence's zeros): the recurrent ops' state updates without their outputs.
void rs_replay(const model::impl & m, std::vector<std::vector<float>> & states, const std::vector<std::vector<float>> & inputs, int64_t r) {
    for (size_t l = 0; l < states.size(); l++) {
        const size_t oi = m.rs_op[l];
        const op_desc & op = m.prog.ops[oi];
        std::vector<float> & st = states[l];
        if (st.empty()) st.assign(static_cast<size_t>(m.prog.rs_width[l]), 0.0f);
        const float * in = inputs[l].data();
        if (op.type == OP_PLE_NGRAM) {
            // The state is the last n_gram - 1 tokens (+1; 0: none).
            for (int64_t t = 0; t < r; t++) ple_push(st, in[t]);
            continue;
        }
        const int64_t aw = m.prog.buffers[static_cast<size_t>(op.a)].width;
        if (op.type == OP_SSM_CONV) {
            // The state is the last (d_conv - 1) x dilation inputs.
            const int64_t nc = static_cast<int64_t>(op.param_req("d_conv"));
            for (int64_t t = 0; t < r; t++) conv_push(st, in + t * aw, aw, (nc - 1) * static_cast<int64_t>(op.param("dilation", 1)) + 1);
            continue;
        }
        if (op.type == OP_LIGHTNING_ATTN) {
            const lightning_params q(op);
            std::vector<float> qkv(static_cast<size_t>(3 * q.D));
            for (int64_t t = 0; t < r; t++)
                for (int64_t h = 0; h < q.H; h++) lightning_step(q, st.data() + h * q.D * q.D, h, in + t * aw, qkv.data(), nullptr);
            continue;
        }
        if (op.type == OP_RWKV_WKV7) {
            const int64_t H = static_cast<int64_t>(op.param_req("n_head")), D = static_cast<int64_t>(op.param_req("head_dim"));
            for (int64_t t = 0; t < r; t++)
                for (int64_t h = 0; h < H; h++) wkv7_step(H, D, st.data() + h * D * D, h, in + t * aw, nullptr);
            continue;
        }
        if (op.type == OP_RWKV_WKV6) {
            const int64_t H = static_cast<int64_t>(op.param_req("n_head")), D = static_cast<int64_t>(op.param_req("head_dim"));
            const float gla = static_cast<float>(op.param("gla_scale", 0));
            const float * u = gla > 0 ? nullptr : reinterpret_cast<const float *>(m.weight(oi, "u").data);
            for (int64_t t = 0; t < r; t++)
                for (int64_t h = 0; h < H; h++) wkv6_step(H, D, u, gla, st.data() + h * D * D, h, in + t * aw, nullptr);
            continue;
        }
        if (op.type == OP_TOKEN_SHIFT) {
            if (r > 0) std::memcpy(st.data(), in + (r - 1) * aw, static_cast<size_t>(aw) * sizeof(float));
            continue;
        }
        if (op.type == OP_SSM_SCAN) {
            const ssm_scan_params q(m, op, oi);
            const int64_t rec = m.rs_record[l];
            for (int64_t t = 0; t < r; t++)
                for (int64_t h = 0; h < q.H; h++) ssm_scan_step(q, st.data() + h * q.P * q.N, h, in + t * rec, in + t * rec + aw, nullptr);
            continue;
        }
        const gdn_params g(m, op, oi);
        const int64_t rec = m.rs_record[l];
        std::vector<float> qk(static_cast<size_t>(2 * g.Hk * g.S)), gb(static_cast<size_t>(g.gb_width())), delta(static_cast<size_t>(g.S));
        for (int64_t t = 0; t < r; t++) {
            const float * a = in + t * rec;
            gdn_prepare(g, a, a + aw, a + aw + g.Hv * g.gw, qk.data(), gb.data());
            for (int64_t h = 0; h < g.Hv; h++) gdn_step(g, st.data() + h * g.S * g.S, h, qk.data(), gb.data(), a + 2 * g.Hk * g.S + h * g.S, delta.data(), nullptr);
        }
    }
}

// Sets the sequence's recurrent states to the checkpoint's advanced by r positions (seq_truncate
// to pos0 + r); the checkpoint keeps those r positions' inputs for a later rewind.
void rs_rewind(model::impl & m, int seq, int64_t r) {
    model::impl::rs_checkpoint & ck = m.rs_ck[static_cast<size_t>(seq)];
    std::vector<std::vector<float>> & states = m.rs[static_cast<size_t>(seq)];
    for (size_t l = 0; l < states.size(); l++) {
        const uint64_t before = states[l].capacity() * sizeof(float);
        if (ck.state[l].empty()) states[l].assign(static_cast<size_t>(m.prog.rs_width[l]), 0.0f);
        else states[l] = ck.state[l];
        m.kv_bytes = m.kv_bytes - before + states[l].capacity() * sizeof(float);
    }
    rs_replay(m, states, ck.inputs, r);
    for (size_t l = 0; l < ck.inputs.size(); l++) ck.inputs[l].resize(static_cast<size_t>(r * m.rs_record[l]));
    ck.n = r;
}

// Positions an armed sequence can always be taken back by (at least the 32 drafts plus one
// verified token of the largest speculation): its checkpoint is moved forward past older ones
// once it records twice this many.
constexpr int64_t kRollbackKeep = 40;

// At a pass's start, for each sequence in it: an armed one keeps (or takes) a checkpoint that ends
// where the pass starts, moved forward when it grew long; the others, and one fed more than the
// window in this pass, drop theirs.
void rs_checkpoint_pass(model::impl & m, const batch & b) {
    std::map<int, int64_t> count;
    for (int64_t t = 0; t < b.n; t++) count[b.seq[t]]++;
    for (auto [seq, n] : count) {
        model::impl::rs_checkpoint & ck = m.rs_ck[static_cast<size_t>(seq)];
        if (!ck.armed) {
            if (ck.pos0 >= 0) rs_drop_checkpoint(ck);
            continue;
        }
        // A pass longer than the window (a prompt) is never taken back: its inputs are not kept, and
        // the next pass starts a checkpoint after it.
        if (n > kRollbackKeep) {
            rs_drop_checkpoint(ck);
            continue;
        }
        const int64_t len = m.seq_len[static_cast<size_t>(seq)];
        if (ck.pos0 < 0 || ck.pos0 + ck.n != len) {
            ck.state = m.rs[static_cast<size_t>(seq)];
            ck.inputs.assign(m.prog.rs_width.size(), {});
            ck.pos0 = len;
            ck.n = 0;
        } else if (ck.n > 2 * kRollbackKeep) {
            const int64_t f = ck.n - kRollbackKeep;
            rs_replay(m, ck.state, ck.inputs, f);
            for (size_t l = 0; l < ck.inputs.size(); l++) {
                ck.inputs[l].erase(ck.inputs[l].begin(), ck.inputs[l].begin() + f * m.rs_record[l]);
            }
            ck.pos0 += f;
            ck.n -= f;
        }
        ck.n += n;
    }
}

// qwen4exp's PLE n-gram hash embedding, as llama.cpp's llm_graph_input_ple::set_input hashes and
// build_inp_ple gathers: the window is this token and the n_gram - 1 before it in its sequence, a
// missing one (before the sequence's start) or any at or before an EOS reading as EOS (the token's
// own EOS does not cut it); for n = 2..n_gram, mixed = (t_0 m_0) ^ ... ^ (t_{n-1} m_{n-1}) in
// 64-bit unsigned arithmetic, and each of the n-gram's heads h takes table row mixed % voc_h +
// off_h; out is the heads' rows in head order. An embeddings batch (no token ids) hashes
// image_token (llama.cpp: the file's image token id, else EOS).
void op_ple_ngram(exec_ctx & x, const op_desc & op, size_t oi) {
    model::impl & m = x.m;
    const tensor_ref w = m.weight(oi, "weight");
    const int layer = static_cast<int>(op.param_req("layer"));
    const int64_t ng = static_cast<int64_t>(op.param_req("n_gram")), pg = static_cast<int64_t>(op.param_req("per_gram")), nh = (ng - 1) * pg;
    const int64_t eos = static_cast<int64_t>(op.param_req("eos")), img = static_cast<int64_t>(op.param("image_token", static_cast<double>(eos)));
    const int64_t hd = w.ne(0), ow = x.width(op.out);
    uint64_t mult[8] = {};
    for (int64_t j = 0; j < ng; j++)
        mult[j] = static_cast<uint64_t>(op.param_req("mult_lo_" + std::to_string(j))) | (static_cast<uint64_t>(op.param_req("mult_hi_" + std::to_string(j))) << 32);
    std::vector<uint64_t> off(static_cast<size_t>(nh)), voc(static_cast<size_t>(nh));
    for (int64_t h = 0; h < nh; h++) {
        off[static_cast<size_t>(h)] = static_cast<uint64_t>(op.param_req("off_" + std::to_string(h)));
        voc[static_cast<size_t>(h)] = static_cast<uint64_t>(op.param_req("voc_" + std::to_string(h)));
    }
    int64_t ctx[8] = {};
    for (int64_t t = 0; t < x.n_tok; t++) {
        const int64_t tok = x.b.tokens ? x.b.tokens[t] : img;
        if (tok < 0 || tok >= (int64_t(1) << 24) - 1) throw error(KAIL_E_INVALID_ARG, "token id " + std::to_string(tok) + " is outside what the PLE n-gram state holds");
        std::vector<float> & st = rs_state(m, x.b.seq[t], layer);
        const float rec = static_cast<float>(tok + 1);
        rs_record_inputs(m, x.b.seq[t], layer, {{&rec, 1}});
        ctx[0] = tok;
        bool cut = false;
        for (int64_t s = 1; s < ng; s++) {
            const float v = st[static_cast<size_t>(ng - 1 - s)];
            const int64_t p = cut || v < 1.0f ? -1 : static_cast<int64_t>(v) - 1;
            cut = cut || p < 0 || p == eos;
            ctx[s] = cut ? eos : p;
        }
        float * out = x.ptr(op.out) + t * ow;
        for (int64_t n = 2; n <= ng; n++) {
            uint64_t mixed = static_cast<uint64_t>(ctx[0]) * mult[0];
            for (int64_t j = 1; j < n; j++) mixed ^= static_cast<uint64_t>(ctx[j]) * mult[j];
            for (int64_t g = 0; g < pg; g++) {
                const int64_t h = (n - 2) * pg + g;
                const uint64_t row = mixed % voc[static_cast<size_t>(h)] + off[static_cast<size_t>(h)];
                dequantize_row(w.type(), w.data + static_cast<size_t>(row) * w.row_bytes(), out + h * hd, hd);
            }
        }
        ple_push(st, rec);
    }
}

// qwen4exp's PLE gate per stream c, in llama.cpp's F32 steps: s = ggml_sum_rows(a_c * b_c) (the
// products in float, summed in double), ggml_scale by scale, then ggml_sigmoid(ggml_sgn(s) *
// ggml_sqrt(ggml_clamp(ggml_abs(s), 1e-6, inf))), written `repeat` times.
void op_ple_gate(exec_ctx & x, const op_desc & op) {
    const int64_t n = static_cast<int64_t>(op.param_req("n")), ng = static_cast<int64_t>(op.param_req("n_group")), rep = static_cast<int64_t>(op.param("repeat", 1));
    const float scale = static_cast<float>(op.param_req("scale"));
    for (int64_t t = 0; t < x.rows(op.out); t++) {
        const float * a = x.ptr(op.a) + t * x.width(op.a);
        const float * b = x.ptr(op.b) + t * x.width(op.b);
        float * o = x.ptr(op.out) + t * x.width(op.out);
        for (int64_t c = 0; c < ng; c++) {
            double sum = 0.0;
            for (int64_t i = 0; i < n; i++) sum += static_cast<double>(a[c * n + i] * b[c * n + i]);
            const float s = static_cast<float>(sum) * scale;
            const float mag = std::sqrt(std::max(std::min(std::fabs(s), std::numeric_limits<float>::infinity()), 1e-6f));
            const float sg = s > 0.0f ? 1.0f : s < 0.0f ? -1.0f : 0.0f;
            const float g = 1.0f / (1.0f + std::exp(-(sg * mag)));
            std::fill(o + c * rep, o + (c + 1) * rep, g);
        }
    }
}

// Hunyuan v4's hyper-connection coefficients, as llama.cpp's hy_v4 graph computes them in F32:
// z = a[j] * scale[scale_index] + base[base_off + j] (ggml_mul, then ggml_add), sigmoid(z) =
// 1 / (1 + expf(-z)) (ggml_sigmoid), times magnitude (ggml_scale; 1: none), plus eps
// (ggml_scale_bias), each coefficient written `repeat` times (a row as wide as a stream, for the
// elementwise products that mix the streams).
// DeepSeek-V4's packed layers (kv_packed_layouts): the row of position p, the rows a sequence's
// layer holds at most, and the rows' type (compressor rows F32, as llama.cpp's state).
int64_t dsv4_row(const kv_packed_layout & l, int64_t p) { return l.ring ? p % l.ring : p / l.per; }
int64_t dsv4_max_rows(const model::impl & m, int layer) {
    const kv_packed_layout & l = m.kv_packed[static_cast<size_t>(layer)];
    return l.ring ? std::min<int64_t>(l.ring, m.params.n_ctx) : (m.params.n_ctx + l.per - 1) / l.per;
}
uint32_t dsv4_type(const model::impl & m, int layer) { return m.kv_packed[static_cast<size_t>(layer)].f32 ? KAIL_TYPE_F32 : m.params.kv_type; }

// Stores src (the layer's width) as position p of sequence seq's packed layer, growing its rows
// (doubling, up to dsv4_max_rows) within the KV budget.
void dsv4_store(model::impl & m, int seq, int layer, int64_t p, const float * src) {
    const int64_t kw = m.prog.kv_k_width[layer];
    const uint32_t kt = dsv4_type(m, layer);
    const size_t rb = kv_row_bytes(kt, kw);
    kv_seq_layer & c = m.kv[seq][layer];
    const int64_t row = dsv4_row(m.kv_packed[static_cast<size_t>(layer)], p);
    const size_t need = static_cast<size_t>(row + 1) * rb;
    if (c.k.size() < need) {
        const size_t old = c.k.capacity();
        size_t cap_rows = std::max<size_t>(static_cast<size_t>(row + 1), c.k.size() / rb * 2);
        cap_rows = std::min<size_t>(std::max<size_t>(cap_rows, 16), static_cast<size_t>(dsv4_max_rows(m, layer)));
        cap_rows = std::max<size_t>(cap_rows, static_cast<size_t>(row + 1));
        const uint64_t grow = cap_rows * rb - std::min<uint64_t>(old, cap_rows * rb);
        if (m.params.kv_max_bytes && m.kv_bytes + grow > m.params.kv_max_bytes)
            throw error(KAIL_E_BUDGET, "KV cache budget exceeded: need " + std::to_string(m.kv_bytes + grow) + " bytes, budget " + std::to_string(m.params.kv_max_bytes));
        c.k.reserve(cap_rows * rb);
        c.k.resize(need);
        m.kv_bytes += c.k.capacity() - old;
    }
    store_row(kt, src, c.k.data() + static_cast<size_t>(row) * rb, kw);
    c.hw = std::max<int64_t>(c.hw, p + 1);
}

// Position `pos` of sequence seq's packed layer (width w) as F32 into dst.
void dsv4_load(const model::impl & m, int seq, int layer, int64_t pos, int64_t w, float * dst) {
    const uint32_t kt = dsv4_type(m, layer);
    const int64_t row = dsv4_row(m.kv_packed[static_cast<size_t>(layer)], pos);
    dequantize_row(kt, m.kv[seq][layer].k.data() + static_cast<size_t>(row) * kv_row_bytes(kt, w), dst, w);
}

// DeepSeek-V4's KV compressor (dsv4.h compress_entry): caches each token's [kv | score + ape]
// row (F32, in a ring: kv_packed_layouts), and on a token that ends a block of `ratio` positions folds the block (with overlap: and
// the block before) into an entry, RMS-normed with `norm` and rotated at the block's first
// position (RoPE over its last n_dims dims, the op's rope parameters), into out and (a row per
// block) out_layer; other rows 0.
void op_dsv4_compress(exec_ctx & x, const op_desc & op, size_t oi) {
    model::impl & m = x.m;
    const int layer = static_cast<int>(op.param_req("layer"));
    const int64_t ratio = static_cast<int64_t>(op.param_req("ratio")), d = static_cast<int64_t>(op.param_req("head_dim"));
    const bool overlap = op.param("overlap", 0) != 0;
    const int64_t w = (overlap ? 2 : 1) * d;
    const float eps = static_cast<float>(op.param_req("eps"));
    const int out_layer = op.params.count("out_layer") ? static_cast<int>(op.param_req("out_layer")) : -1;
    const float * ape = reinterpret_cast<const float *>(m.weight(oi, "ape").data);
    const float * nw = reinterpret_cast<const float *>(m.weight(oi, "norm").data);
    const rope_spec rs(m, op, oi);
    std::vector<float> row(static_cast<size_t>(2 * w)), cache(static_cast<size_t>(rs.n_dims)), blk(static_cast<size_t>(2 * ratio * 2 * w));
    std::vector<const float *> cur(static_cast<size_t>(ratio)), prev(static_cast<size_t>(ratio));
    // Token by token (a sequence's positions in order): its row joins the layer (a ring of the
    // open block, the one before it and the rollback margin), then a token that ends a block
    // folds the block's rows.
    for (int64_t t = 0; t < x.n_tok; t++) {
        const int64_t p = x.b.pos[t];
        const int s = x.b.seq[t];
        const float * a = x.ptr(op.a) + t * x.width(op.a);
        const float * b = x.ptr(op.b) + t * x.width(op.b);
        const float * pe = ape + (p % ratio) * w;
        std::copy(a, a + w, row.begin());
        for (int64_t j = 0; j < w; j++) row[static_cast<size_t>(w + j)] = b[j] + pe[j];
        dsv4_store(m, s, layer, p, row.data());
        float * o = x.ptr(op.out) + t * x.width(op.out);
        if ((p + 1) % ratio != 0) {
            std::fill(o, o + d, 0.0f);
            continue;
        }
        const int64_t start = p + 1 - ratio;
        const bool has_prev = overlap && start >= ratio;
        for (int64_t i = 0; i < ratio; i++) {
            float * rc = blk.data() + i * 2 * w;
            dsv4_load(m, s, layer, start + i, 2 * w, rc);
            cur[static_cast<size_t>(i)] = rc;
            if (has_prev) {
                float * rp = blk.data() + (ratio + i) * 2 * w;
                dsv4_load(m, s, layer, start - ratio + i, 2 * w, rp);
                prev[static_cast<size_t>(i)] = rp;
            }
        }
        dsv4::compress_entry(cur.data(), has_prev ? prev.data() : nullptr, ratio, d, overlap, o);
        rms_norm_row(o, o, d, eps, nw);
        rs.table(static_cast<float>(start), cache.data());
        rs.apply(o, cache.data());
        // The compressed entry: one row per block (row p / ratio) of out_layer.
        if (out_layer >= 0) dsv4_store(m, s, out_layer, p, o);
    }
}

// DeepSeek-V4's attention (dsv4.h attend): caches the token's shared key/value row b (a ring of
// the window when kv_packed_layouts gives one), then each
// token's heads attend over its last `window` rows (0: all) and the compressed rows of comp_layer
// it sees: the positions in c (the indexer's selection, -1 past its candidates), or every block
// end r - 1, 2r - 1, ... up to its own position; one sink logit per head.
void op_dsv4_attention(exec_ctx & x, const op_desc & op, size_t oi) {
    model::impl & m = x.m;
    const int layer = static_cast<int>(op.param_req("layer"));
    const int64_t nh = static_cast<int64_t>(op.param_req("n_head")), d = static_cast<int64_t>(op.param_req("head_dim"));
    const int64_t window = static_cast<int64_t>(op.param("window", 0)), ratio = static_cast<int64_t>(op.param("ratio", 0));
    const int comp = ratio > 0 ? static_cast<int>(op.param_req("comp_layer")) : -1;
    const int64_t top_k = op.c >= 0 ? static_cast<int64_t>(op.param_req("top_k")) : 0;
    const float scale = static_cast<float>(op.param("scale", 1.0 / std::sqrt(static_cast<double>(d))));
    const tensor_ref sk = m.weight(oi, "sinks");
    const float * sinks = sk.info ? reinterpret_cast<const float *>(sk.data) : nullptr;
    for (int64_t t = 0; t < x.n_tok; t++) dsv4_store(m, x.b.seq[t], layer, x.b.pos[t], x.ptr(op.b) + t * x.width(op.b));
    // A token's rows (its window: one or two runs of the cache, a ring's wrap; then the compressed
    // rows it sees, one per block) are gathered as cached bytes, and its heads attend over them
    // with the GQA kernels. A long batch: one task per token, gathering into the thread's scratch.
    // A few tokens (a decode step): each gathered once, then (token, chunk of heads) tasks over the
    // threads: chunks of 4 heads or more (attention_weighted_rows reads a row once per 4 heads)
    // where the heads make a chunk per thread that way, else one chunk per thread.
    const uint32_t kt = m.params.kv_type;
    const size_t rb = kv_row_bytes(kt, d);
    const int64_t n_thr = m.pool->n_threads();
    const int64_t n_chunk = x.n_tok >= 2 * n_thr ? 1 : std::min({nh, std::max<int64_t>((nh + 3) / 4, n_thr), (4 * n_thr + x.n_tok - 1) / x.n_tok});
    const int64_t hb = (nh + n_chunk - 1) / n_chunk;
    const int64_t n_chunks = (nh + hb - 1) / hb;
    exec_ctx * xp = &x;
    // Token t's rows into kg from byte `off` (grown as needed); returns their count.
    auto gather = [&, xp](int64_t t, std::vector<uint8_t> & kg, size_t off) -> int64_t {
        const int64_t p = xp->b.pos[t];
        const int s = xp->b.seq[t];
        const int64_t lo = window > 0 ? std::max<int64_t>(0, p + 1 - window) : 0;
        int64_t nc = 0;
        const float * sel = op.c >= 0 ? xp->ptr(op.c) + t * xp->width(op.c) : nullptr;
        if (sel) {
            for (int64_t i = 0; i < top_k; i++)
                if (sel[i] >= 0 && static_cast<int64_t>(sel[i]) <= p) nc++;
        } else if (ratio > 0) {
            nc = (p + 1) / ratio;
        }
        const int64_t n = p + 1 - lo + nc;
        if (nc > 0 && m.kv[s][comp].k.size() < static_cast<size_t>((p + 1) / ratio) * rb)
            throw error(KAIL_E_INVALID_ARG, "dsv4_attention: kv layer " + std::to_string(comp) + " lacks the compressed rows up to position " + std::to_string(p) +
                                                " (comp_layer must be a dsv4_compress out_layer run before)");
        if (kg.size() < off + static_cast<size_t>(n) * rb) kg.resize(off + static_cast<size_t>(n) * rb);
        const uint8_t * raw = m.kv[s][layer].k.data();
        const int64_t R = m.kv_packed[static_cast<size_t>(layer)].ring;
        uint8_t * dst = kg.data() + off;
        for (int64_t j = lo; j <= p;) {
            const int64_t r0 = R ? j % R : j, run = R ? std::min(p + 1 - j, R - r0) : p + 1 - j;
            std::memcpy(dst, raw + static_cast<size_t>(r0) * rb, static_cast<size_t>(run) * rb);
            dst += static_cast<size_t>(run) * rb;
            j += run;
        }
        const uint8_t * cbase = comp >= 0 ? m.kv[s][comp].k.data() : nullptr;
        if (sel) {
            for (int64_t i = 0; i < top_k; i++)
                if (sel[i] >= 0 && static_cast<int64_t>(sel[i]) <= p) {
                    std::memcpy(dst, cbase + static_cast<size_t>(static_cast<int64_t>(sel[i]) / ratio) * rb, rb);
                    dst += rb;
                }
        } else if (nc > 0) {
            std::memcpy(dst, cbase, static_cast<size_t>(nc) * rb);
        }
        return n;
    };
    if (n_chunks == 1) {
        m.pool->parallel_for(x.n_tok, [&, xp](int64_t begin, int64_t end, int) {
            thread_local std::vector<uint8_t> kg;
            thread_local std::vector<float> scores;
            thread_local std::vector<uint16_t> half;
            for (int64_t t = begin; t < end; t++) {
                const int64_t n = gather(t, kg, 0);
                dsv4::attend(kt, xp->ptr(op.a) + t * xp->width(op.a), nh, d, kg.data(), rb, n, scale, sinks, xp->ptr(op.out) + t * xp->width(op.out), scores, half);
            }
        }, 1);
        return;
    }
    thread_local std::vector<uint8_t> rows;
    thread_local std::vector<size_t> off;
    thread_local std::vector<int64_t> cnt;
    off.assign(static_cast<size_t>(x.n_tok) + 1, 0);
    cnt.assign(static_cast<size_t>(x.n_tok), 0);
    for (int64_t t = 0; t < x.n_tok; t++) {
        cnt[static_cast<size_t>(t)] = gather(t, rows, off[static_cast<size_t>(t)]);
        off[static_cast<size_t>(t) + 1] = off[static_cast<size_t>(t)] + static_cast<size_t>(cnt[static_cast<size_t>(t)]) * rb;
    }
    // (thread_local names inside the tasks would be each worker's own: pass the caller's data.)
    const uint8_t * all = rows.data();
    const size_t * offs = off.data();
    const int64_t * cnts = cnt.data();
    m.pool->parallel_for(x.n_tok * n_chunks, [&, xp, all, offs, cnts](int64_t begin, int64_t end, int) {
        thread_local std::vector<float> scores;
        thread_local std::vector<uint16_t> half;
        for (int64_t task = begin; task < end; task++) {
            const int64_t t = task / n_chunks, h0 = task % n_chunks * hb, hn = std::min(hb, nh - h0);
            dsv4::attend(kt, xp->ptr(op.a) + t * xp->width(op.a) + h0 * d, hn, d, all + offs[t], rb, cnts[t], scale,
                         sinks ? sinks + h0 : nullptr, xp->ptr(op.out) + t * xp->width(op.out) + h0 * d, scores, half);
        }
    }, 1);
}

// DeepSeek-V4's hyper-connection post (dsv4.h hc_post) on every row: out = the streams after the
// sublayer output a joins the residual streams b, mixed by the Sinkhorn-normalized comb of the mixes c.
void op_dsv4_hc_post(exec_ctx & x, const op_desc & op, size_t oi) {
    const float * sc = reinterpret_cast<const float *>(x.m.weight(oi, "scale").data);
    const float * bs = reinterpret_cast<const float *>(x.m.weight(oi, "base").data);
    const int64_t n = static_cast<int64_t>(op.param_req("n")), d = x.width(op.a);
    const float eps = static_cast<float>(op.param_req("eps"));
    const int iters = static_cast<int>(op.param_req("iters"));
    // Rows are independent: a batch's over the threads.
    exec_ctx * xp = &x;
    x.m.pool->parallel_for(x.rows(op.out), [&, xp](int64_t begin, int64_t end, int) {
        for (int64_t t = begin; t < end; t++)
            dsv4::hc_post(xp->ptr(op.a) + t * xp->width(op.a), xp->ptr(op.b) + t * xp->width(op.b), xp->ptr(op.c) + t * xp->width(op.c), sc, bs, n, d, eps, iters,
                          xp->ptr(op.out) + t * xp->width(op.out));
    });
}

void op_hc_gates(exec_ctx & x, const op_desc & op, size_t oi) {
    const tensor_ref sc = x.m.weight(oi, "scale"), bs = x.m.weight(oi, "base");
    const int64_t n = static_cast<int64_t>(op.param_req("n")), rep = static_cast<int64_t>(op.param("repeat", 1));
    const int64_t ao = static_cast<int64_t>(op.param("a_off", 0)), oo = static_cast<int64_t>(op.param("out_off", 0));
    // Without weights (qwen4exp's inject weights, 2 sigmoid(inject / hc)): z = a[j] * gate_scale (ggml_scale), no base.
    const float s = sc.info ? reinterpret_cast<const float *>(sc.data)[static_cast<int64_t>(op.param("scale_index", 0))] : static_cast<float>(op.param_req("gate_scale"));
    const float * base = bs.info ? reinterpret_cast<const float *>(bs.data) + static_cast<int64_t>(op.param("base_off", 0)) : nullptr;
    const float mag = static_cast<float>(op.param("magnitude", 1.0)), eps = static_cast<float>(op.param_req("eps"));
    for (int64_t t = 0; t < x.rows(op.out); t++) {
        const float * a = x.ptr(op.a) + t * x.width(op.a) + ao;
        float * o = x.ptr(op.out) + t * x.width(op.out) + oo;
        for (int64_t j = 0; j < n; j++) {
            const float m = a[j] * s;
            const float z = base ? m + base[j] : m;
            float g = 1.0f / (1.0f + std::exp(-z));
            if (mag != 1.0f) g = g * mag;
            g = g + eps;
            std::fill(o + j * rep, o + (j + 1) * rep, g);
        }
    }
}

// Kimi-K3's cross-layer residual attention, as llama.cpp's kimi-k3 graph (res_mix) computes it in
// F32: each of the n_ckpt checkpoint rows v_c of a (n wide each) and the current stream b scored by
// sum(rms_norm(v) * score) (ggml_rms_norm, ggml_mul, ggml_sum_rows: summed in double), the scores
// soft-maxed (ggml_soft_max), and out = sum_c p_c v_c (summed in order from 0 by fused multiply-adds,
// as ggml_dsv4_hc_pre) + b p_b (ggml_mul, then ggml_add). The sum uses the raw rows, not the normed.
void op_attn_res(exec_ctx & x, const op_desc & op, size_t oi) {
    const tensor_ref sc = x.m.weight(oi, "score");
    const float * w = reinterpret_cast<const float *>(sc.data);
    const int64_t n = static_cast<int64_t>(op.param_req("n")), nc = static_cast<int64_t>(op.param_req("n_ckpt"));
    const float eps = static_cast<float>(op.param_req("eps"));
    std::vector<float> y(static_cast<size_t>(n)), p(static_cast<size_t>(nc + 1));
    auto score = [&](const float * v) {
        rms_norm_row(v, y.data(), n, eps, w);
        double s = 0.0;
        for (int64_t i = 0; i < n; i++) s += static_cast<double>(y[static_cast<size_t>(i)]);
        return static_cast<float>(s);
    };
    for (int64_t t = 0; t < x.rows(op.out); t++) {
        const float * src = x.ptr(op.a) + t * x.width(op.a);
        const float * cur = x.ptr(op.b) + t * x.width(op.b);
        float * o = x.ptr(op.out) + t * x.width(op.out);
        for (int64_t c = 0; c < nc; c++) p[static_cast<size_t>(c)] = score(src + c * n);
        p[static_cast<size_t>(nc)] = score(cur);
        softmax_inplace(p.data(), nc + 1);
        const float pc = p[static_cast<size_t>(nc)];
        for (int64_t i = 0; i < n; i++) {
            float sum = 0.0f;
            // (Fused multiply-adds: llama.cpp's x86 CPU builds contract hc_pre's sum += x * w into one.)
            for (int64_t c = 0; c < nc; c++) sum = std::fma(src[c * n + i], p[static_cast<size_t>(c)], sum);
            o[i] = sum + cur[i] * pc;
        }
    }
}

void op_cvec(exec_ctx & x, const op_desc & op) {
    const model_params & p = x.m.params;
    const int64_t il = static_cast<int64_t>(op.param_req("layer")), n = p.cvec_n_embd;
    if (il < 1 || il < p.cvec_start || il > p.cvec_end || n == 0 || static_cast<size_t>(il * n) > p.cvec.size()) return;
    const float * dir = p.cvec.data() + (il - 1) * n;  // layer 1's row first
    for (int64_t t = 0; t < x.n_tok; t++) {
        float * row = x.ptr(op.a) + t * x.width(op.a);
        for (int64_t j = 0; j < n; j++) row[j] += dir[j];
    }
}

void op_input(exec_ctx & x, const op_desc & op) {
    const int64_t w = x.width(op.out);
    std::memcpy(x.ptr(op.out), x.b.embd, static_cast<size_t>(x.n_tok * w) * sizeof(float));
}

void op_gather_out(exec_ctx & x, const op_desc & op) {
    const int64_t w = x.width(op.a);
    int64_t r = 0;
    for (int64_t t = 0; t < x.n_tok; t++)
        if (x.b.output[t]) std::memcpy(x.ptr(op.out) + (r++) * x.width(op.out), x.ptr(op.a) + t * w, static_cast<size_t>(w) * 4);
}

} // namespace

// llama.cpp's context shift (seq_rm of [keep, keep + n), then seq_add of -n to the positions after):
// rows move down n positions and K's rotary part turns back n positions, a pure rotation (the rows
// already carry the rope's magnitude factors; llama.cpp's K-shift applies its attention factor
// again, which differs only for YaRN files). Quantized K rows are dequantized, turned and
// quantized again in the blocks the rotation touches, as llama.cpp does; V rows only move.
int64_t model::seq_shift(int seq, int64_t keep, int64_t n) {
    impl & m = *impl_;
    if (seq < 0 || seq >= m.params.n_seq_max) throw error(KAIL_E_INVALID_ARG, "sequence id out of range");
    if (m.src) throw error(KAIL_E_UNSUPPORTED, "context shift: a draft over another model's cache (kv_source) has none of its own to shift (shift its source)");
    if (m.enc_dec) throw error(KAIL_E_UNSUPPORTED, "context shift: an encoder-decoder model's decoder reads the whole encoder output; it cannot drop positions");
    const int64_t len = m.seq_len[seq];
    if (keep < 0 || n < 0 || keep + n > len)
        throw error(KAIL_E_INVALID_ARG, "context shift: cannot discard " + std::to_string(n) + " positions after the first " + std::to_string(keep) + " of " + std::to_string(len));
    if (n == 0) return len;
    if (!m.prog.rs_width.empty())
        throw error(KAIL_E_UNSUPPORTED, "context shift: this model has recurrent (linear attention) layers, whose state holds the whole past and cannot drop positions from it");
    for (int l = 0; l < m.prog.n_kv_layers; l++) {
        if (m.kv_ring[l])
            throw error(KAIL_E_UNSUPPORTED, "context shift: KV layer " + std::to_string(l) + " keeps a sliding window in a ring of " + std::to_string(m.kv_ring[l]) +
                                                " positions, smaller than the context, which cannot shift (load with --swa-full to keep every position, as llama.cpp needs its --swa-full to shift)");
        if (m.kv_rope[l] == -2) throw error(KAIL_E_UNSUPPORTED, "context shift: KV layer " + std::to_string(l) + "'s keys are rotated in a layout the shift cannot follow");
    }
    const int64_t moved = len - keep - n;  // rows that move down (and turn)
    std::vector<float> row, table;
    for (int l = 0; l < m.prog.n_kv_layers; l++) {
        kv_seq_layer & c = m.kv[seq][l];
        const bool mla = m.prog.kv_v_width[l] == 0;
        std::unique_ptr<rope_spec> r;
        if (m.kv_rope[l] >= 0) {
            r.reset(new rope_spec(m, m.prog.ops[static_cast<size_t>(m.kv_rope[l])], static_cast<size_t>(m.kv_rope[l])));
            table.resize(static_cast<size_t>(r->n_dims));
            r->table(static_cast<float>(-n), table.data(), false);
        }
        // K rows: heads x rows of `width` values, `cap` rows per head (MLA: one head, rows packed).
        const int64_t heads = m.kv_heads[static_cast<size_t>(l)];
        const int64_t width = m.prog.kv_k_width[l] / heads;
        const int64_t cap = mla ? len : c.cap;
        const uint32_t kt = m.params.kv_type;
        const size_t rk = kv_row_bytes(kt, width);
        auto shift_rows = [&](std::vector<uint8_t> & buf, size_t rb, int64_t nh) {
            for (int64_t h = 0; h < nh && moved > 0; h++) {
                uint8_t * base = buf.data() + static_cast<size_t>(h * cap) * rb;
                std::memmove(base + static_cast<size_t>(keep) * rb, base + static_cast<size_t>(keep + n) * rb, static_cast<size_t>(moved) * rb);
            }
        };
        shift_rows(c.k, rk, heads);
        if (!mla) shift_rows(c.v, kv_row_bytes(m.params.kv_type_v, m.prog.kv_v_width[l] / heads), heads);
        if (r && moved > 0) {
            // The blocks the rotation touches (a quantized row is written back in those only).
            const int64_t bs = type_traits_get(kt)->block_size;
            const int64_t lo = r->rot_off / bs * bs, hi = std::min<int64_t>(width, (r->rot_off + r->n_dims + bs - 1) / bs * bs);
            row.resize(static_cast<size_t>(width));
            for (int64_t h = 0; h < heads; h++)
                for (int64_t p = keep; p < keep + moved; p++) {
                    uint8_t * dst = c.k.data() + static_cast<size_t>(h * cap + p) * rk;
                    dequantize_row(kt, dst, row.data(), width);
                    r->apply(row.data(), table.data());
                    store_row(kt, row.data() + lo, dst + row_size(kt, lo), hi - lo);
                }
        }
        if (mla) c.k.resize(static_cast<size_t>(len - n) * rk);
        c.hw = len - n;
    }
    m.seq_len[seq] = len - n;
    return len - n;
}

namespace {

constexpr char kSeqMagic[8] = {'K', 'A', 'I', 'L', 'S', 'E', 'Q', '1'};

struct blob_reader {
    const uint8_t * p;
    size_t n, at = 0;
    template <typename T> T get(const char * what) {
        T v;
        bytes(&v, sizeof v, what);
        return v;
    }
    void bytes(void * dst, size_t k, const char * what) {
        if (k > n - at) throw error(KAIL_E_INVALID_ARG, std::string("sequence state: truncated (") + what + ")");
        std::memcpy(dst, p + at, k);
        at += k;
    }
};

template <typename T> void put(std::vector<uint8_t> & out, T v) {
    const uint8_t * b = reinterpret_cast<const uint8_t *>(&v);
    out.insert(out.end(), b, b + sizeof v);
}

} // namespace

// Layout: magic, then n_kv_layers, K type, V type (u32), length (i64); per layer: heads, K width,
// V width, rows stored per head, mirrored (u8), high water (i64s), then each head's K rows, then
// each head's V rows. A linear layer stores the sequence's rows only; a ring that turned mirrored
// stores its whole 2R rows.
std::vector<uint8_t> model::seq_state(int seq) const {
    const impl & m = *impl_;
    if (seq < 0 || seq >= m.params.n_seq_max) throw error(KAIL_E_INVALID_ARG, "sequence id out of range");
    if (m.src) throw error(KAIL_E_UNSUPPORTED, "sequence state: a draft over another model's cache (kv_source) keeps no state of its own (save its source's)");
    if (m.enc_dec) throw error(KAIL_E_UNSUPPORTED, "sequence state: saving an encoder-decoder model's sequences is not supported");
    const int64_t len = m.seq_len[seq];
    std::vector<uint8_t> out(kSeqMagic, kSeqMagic + 8);
    put<uint32_t>(out, static_cast<uint32_t>(m.prog.n_kv_layers));
    put<uint32_t>(out, m.params.kv_type);
    put<uint32_t>(out, m.params.kv_type_v);
    put<int64_t>(out, len);
    for (int l = 0; l < m.prog.n_kv_layers; l++) {
        const kv_seq_layer & c = m.kv[seq][l];
        const bool mla = m.prog.kv_v_width[l] == 0;
        const int64_t heads = m.kv_heads[l], kw = m.prog.kv_k_width[l], vw = m.prog.kv_v_width[l];
        const kv_packed_layout & pl = m.kv_packed[static_cast<size_t>(l)];
        // DeepSeek-V4's packed layers: a ring's rows (all it holds), or a row per block.
        const int64_t rows = len == 0 ? 0 : pl.packed() ? (pl.ring ? std::min(c.hw, pl.ring) : len / pl.per) : c.mirrored ? c.cap : len;
        const int64_t cap = mla ? rows : c.cap;
        put<int64_t>(out, heads);
        put<int64_t>(out, kw);
        put<int64_t>(out, vw);
        put<int64_t>(out, rows);
        put<uint8_t>(out, c.mirrored ? 1 : 0);
        put<int64_t>(out, len == 0 ? 0 : c.hw);
        auto rows_of = [&](const std::vector<uint8_t> & buf, size_t rb) {
            for (int64_t h = 0; h < heads && rows > 0; h++) {
                const uint8_t * b = buf.data() + static_cast<size_t>(h * cap) * rb;
                out.insert(out.end(), b, b + static_cast<size_t>(rows) * rb);
            }
        };
        rows_of(c.k, kv_row_bytes(pl.f32 ? KAIL_TYPE_F32 : m.params.kv_type, kw / heads));
        if (!mla) rows_of(c.v, kv_row_bytes(m.params.kv_type_v, vw / heads));
    }
    // Models with recurrent layers: their count, then per layer its width (i64), whether the
    // sequence holds a state (u8) and the state's floats.
    if (!m.prog.rs_width.empty()) {
        put<uint32_t>(out, static_cast<uint32_t>(m.prog.rs_width.size()));
        for (size_t l = 0; l < m.prog.rs_width.size(); l++) {
            const std::vector<float> & st = m.rs[seq][l];
            put<int64_t>(out, m.prog.rs_width[l]);
            put<uint8_t>(out, st.empty() ? 0 : 1);
            const uint8_t * b = reinterpret_cast<const uint8_t *>(st.data());
            out.insert(out.end(), b, b + st.size() * sizeof(float));
        }
    }
    return out;
}

void model::set_seq_state(int seq, const uint8_t * data, size_t n) {
    impl & m = *impl_;
    if (seq < 0 || seq >= m.params.n_seq_max) throw error(KAIL_E_INVALID_ARG, "sequence id out of range");
    if (m.src) throw error(KAIL_E_UNSUPPORTED, "sequence state: a draft over another model's cache (kv_source) keeps no state of its own (restore its source's)");
    if (m.enc_dec) throw error(KAIL_E_UNSUPPORTED, "sequence state: restoring an encoder-decoder model's sequences is not supported");
    blob_reader r{data, n};
    char magic[8];
    r.bytes(magic, 8, "magic");
    if (std::memcmp(magic, kSeqMagic, 8) != 0) throw error(KAIL_E_INVALID_ARG, "sequence state: not a kailstream sequence state (bad magic)");
    const uint32_t nl = r.get<uint32_t>("layers"), kt = r.get<uint32_t>("K type"), vt = r.get<uint32_t>("V type");
    const int64_t len = r.get<int64_t>("length");
    auto refuse = [](const std::string & what) { throw error(KAIL_E_INVALID_ARG, "sequence state does not fit this model: " + what); };
    if (nl != static_cast<uint32_t>(m.prog.n_kv_layers)) refuse(std::to_string(nl) + " KV layers, the model has " + std::to_string(m.prog.n_kv_layers));
    if (kt != m.params.kv_type || vt != m.params.kv_type_v)
        refuse(std::string("cache types K ") + type_name(kt) + " / V " + type_name(vt) + ", the model's are " + type_name(m.params.kv_type) + " / " + type_name(m.params.kv_type_v));
    if (len < 0 || len > m.params.n_ctx) refuse(std::to_string(len) + " positions, the context holds " + std::to_string(m.params.n_ctx));
    // Read everything into new layers first: a blob that fails halfway leaves the sequence as it was.
    std::vector<kv_seq_layer> next(static_cast<size_t>(m.prog.n_kv_layers));
    uint64_t bytes = 0;
    for (int l = 0; l < m.prog.n_kv_layers; l++) {
        const bool mla = m.prog.kv_v_width[l] == 0;
        const int64_t heads = r.get<int64_t>("heads"), kw = r.get<int64_t>("K width"), vw = r.get<int64_t>("V width"), rows = r.get<int64_t>("rows");
        const bool mirrored = r.get<uint8_t>("mirrored") != 0;
        const int64_t hw = r.get<int64_t>("high water");
        const std::string at = "layer " + std::to_string(l) + ": ";
        if (heads != m.kv_heads[l] || kw != m.prog.kv_k_width[l] || vw != m.prog.kv_v_width[l])
            refuse(at + std::to_string(heads) + " heads, K/V widths " + std::to_string(kw) + "/" + std::to_string(vw) + ", the model's are " + std::to_string(m.kv_heads[l]) + ", " +
                   std::to_string(m.prog.kv_k_width[l]) + "/" + std::to_string(m.prog.kv_v_width[l]));
        const int64_t R = m.kv_ring[l];
        const kv_packed_layout & pl = m.kv_packed[static_cast<size_t>(l)];
        const bool ok = len == 0      ? rows == 0 && !mirrored
                        : pl.packed() ? !mirrored && (pl.ring ? hw >= len && rows == std::min(hw, pl.ring) : rows == len / pl.per)
                        : mirrored    ? R > 0 && rows == 2 * R && hw >= len
                                      : rows == len && (R == 0 || len <= R);
        if (!ok || hw < 0) refuse(at + "its rows do not match its length (" + std::to_string(rows) + " rows for " + std::to_string(len) + " positions)");
        kv_seq_layer & c = next[static_cast<size_t>(l)];
        const size_t rk = kv_row_bytes(pl.f32 ? KAIL_TYPE_F32 : kt, kw / heads);
        c.k.resize(static_cast<size_t>(heads * rows) * rk);
        r.bytes(c.k.data(), c.k.size(), "K rows");
        if (!mla) {
            c.v.resize(static_cast<size_t>(heads * rows) * kv_row_bytes(vt, vw / heads));
            r.bytes(c.v.data(), c.v.size(), "V rows");
            c.cap = rows;
        }
        // A sliding MLA block's ring counts its rows in cap as the GQA rings do (kv_ring_slot).
        if (mla && R > 0) c.cap = rows;
        c.mirrored = mirrored;
        c.hw = hw;
        bytes += c.k.capacity() + c.v.capacity();
    }
    std::vector<std::vector<float>> next_rs(m.prog.rs_width.size());
    if (!m.prog.rs_width.empty()) {
        const uint32_t nr = r.get<uint32_t>("recurrent layers");
        if (nr != m.prog.rs_width.size()) refuse(std::to_string(nr) + " recurrent layers, the model has " + std::to_string(m.prog.rs_width.size()));
        for (size_t l = 0; l < m.prog.rs_width.size(); l++) {
            const int64_t w = r.get<int64_t>("recurrent width");
            const bool present = r.get<uint8_t>("recurrent state") != 0;
            const std::string at = "recurrent layer " + std::to_string(l) + ": ";
            if (w != m.prog.rs_width[l]) refuse(at + std::to_string(w) + " floats, the model's are " + std::to_string(m.prog.rs_width[l]));
            if (present != (len > 0)) refuse(at + (present ? "a state for an empty sequence" : "no state for " + std::to_string(len) + " positions"));
            if (!present) continue;
            next_rs[l].resize(static_cast<size_t>(w));
            r.bytes(next_rs[l].data(), next_rs[l].size() * sizeof(float), "recurrent state");
            bytes += next_rs[l].capacity() * sizeof(float);
        }
    }
    if (r.at != r.n) refuse(std::to_string(r.n - r.at) + " bytes past the end");
    uint64_t old = 0;
    for (const kv_seq_layer & c : m.kv[seq]) old += c.k.capacity() + c.v.capacity();
    for (const std::vector<float> & st : m.rs[seq]) old += st.capacity() * sizeof(float);
    if (m.params.kv_max_bytes && m.kv_bytes - old + bytes > m.params.kv_max_bytes)
        throw error(KAIL_E_BUDGET, "KV cache budget exceeded: need " + std::to_string(m.kv_bytes - old + bytes) + " bytes, budget " + std::to_string(m.params.kv_max_bytes));
    m.kv[seq].swap(next);
    m.rs[seq].swap(next_rs);
    rs_drop_checkpoint(m.rs_ck[static_cast<size_t>(seq)]);
    m.kv_bytes = m.kv_bytes - old + bytes;
    m.seq_len[seq] = len;
}

void model::forward(const batch & b, std::vector<float> & logits, std::vector<float> * hidden) {
    impl & m = *impl_;
    cancel_.store(false);
    if (b.n <= 0) throw error(KAIL_E_INVALID_ARG, "empty batch");
    if (m.input_width > 0 && (!b.embd || b.embd_width != m.input_width))
        throw error(KAIL_E_INVALID_ARG, "this model reads a hidden-state row per token: the batch needs embd with " + std::to_string(m.input_width) +
                                            " floats per token" + (b.embd ? " (got " + std::to_string(b.embd_width) + ")" : std::string()));
    if (m.input_width == 0 && b.embd) throw error(KAIL_E_INVALID_ARG, "this model takes no hidden-state rows (batch.embd given)");
    if (b.want_hidden && m.prog.hidden < 0) throw error(KAIL_E_INVALID_ARG, "this model's program has no hidden-state output");
    if (m.plan && b.n > m.params.n_batch)
        throw error(KAIL_E_BUDGET, "a batch of " + std::to_string(b.n) + " tokens is larger than the " + std::to_string(m.params.n_batch) + " the RAM budget was planned for");
    // Validate the batch: sequences in range, positions contiguous with each sequence's cache.
    std::vector<int64_t> next(m.seq_len);
    int64_t n_out = 0;
    for (int64_t t = 0; t < b.n; t++) {
        const int s = b.seq[t];
        if (s < 0 || s >= m.params.n_seq_max) throw error(KAIL_E_INVALID_ARG, "sequence id " + std::to_string(s) + " out of range (0.." + std::to_string(m.params.n_seq_max - 1) + ")");
        const int64_t p = b.pos[t];
        if (m.src) {
            // A draft over the source's cache: every row at the source's length, which has a past.
            const int64_t sl = m.src->seq_len[static_cast<size_t>(s)];
            if (sl < 1) throw error(KAIL_E_INVALID_ARG, "sequence " + std::to_string(s) + " of the draft's source model (kv_source) is empty: the draft reads the source's cache, so the source decodes first");
            if (p != sl) throw error(KAIL_E_INVALID_ARG, "position " + std::to_string(p) + " of sequence " + std::to_string(s) + " is not its source model's length (" + std::to_string(sl) + "): a draft row sits right after what the source has cached");
            if (p >= m.params.n_ctx) throw error(KAIL_E_INVALID_ARG, "position " + std::to_string(p) + " is past the context length " + std::to_string(m.params.n_ctx));
            if (b.output[t]) n_out++;
            continue;
        }
        if (p != next[s]) throw error(KAIL_E_INVALID_ARG, "position " + std::to_string(p) + " of sequence " + std::to_string(s) + " is not the next one (" + std::to_string(next[s]) + ")");
        if (p >= m.params.n_ctx) throw error(KAIL_E_INVALID_ARG, "position " + std::to_string(p) + " is past the context length " + std::to_string(m.params.n_ctx));
        next[s] = p + 1;
        // A sliding-window ring holds the window plus one batch: positions of a sequence in one
        // pass (contiguous, checked above) must span no more than n_batch.
        if (m.any_ring && next[s] - m.seq_len[s] > m.params.n_batch)
            throw error(KAIL_E_INVALID_ARG, "a batch holds positions of sequence " + std::to_string(s) + " more than n_batch (" + std::to_string(m.params.n_batch) + ") apart");
        if (b.output[t]) n_out++;
    }
    // An encoder-decoder program: a pass over empty sequences runs the encoder (whole prompts, no
    // logits), one over encoded sequences the decoder; the two do not mix in a batch.
    bool encode = false;
    if (m.enc_dec) {
        size_t n_empty = 0;
        const std::set<int> seqs(b.seq, b.seq + b.n);
        for (int s : seqs) n_empty += m.seq_len[static_cast<size_t>(s)] == 0;
        if (n_empty != 0 && n_empty != seqs.size())
            throw error(KAIL_E_INVALID_ARG, "an encoder-decoder model encodes empty sequences and decodes encoded ones, in separate batches: this batch mixes both");
        encode = n_empty != 0;
        if (encode && (n_out > 0 || b.want_hidden))
            throw error(KAIL_E_INVALID_ARG, "an encoder-decoder model's first pass over a sequence encodes its prompt and returns no logits or hidden rows (output rows: " + std::to_string(n_out) + ")");
        // (Known before the pass: its encoder and cross rows are allocated exactly.)
        if (encode)
            for (int s : seqs) m.enc_len[static_cast<size_t>(s)] = next[static_cast<size_t>(s)];
    }
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < m.prog.buffers.size(); i++) {
        const int64_t rows = m.prog.buffers[i].out_rows ? n_out : b.n;
        const size_t need = static_cast<size_t>(rows * m.prog.buffers[i].width);
        if (m.bufs[i].size() < need) m.bufs[i].resize(need);
    }
    std::atomic<bool> & cancel = cancel_;
    exec_ctx x{m, b, b.n, n_out, cancel, {}};
    for (int64_t t = 0; t < b.n; t++)
        if (b.output[t]) x.out_seq.push_back(b.seq[t]);
    try {
    // (Inside: a checkpoint that fails to move forward clears the batch's sequences with the rest.)
    if (!m.prog.rs_width.empty()) rs_checkpoint_pass(m, b);
    for (size_t oi = 0; oi < m.prog.ops.size(); oi++) {
        if (m.enc_dec) {
            const double pass = m.prog.ops[oi].param("pass", 0);
            if ((pass == 1 && !encode) || (pass == 2 && encode)) continue;
        }
        if (cancel.load(std::memory_order_relaxed)) throw error(KAIL_E_CANCELLED, "forward cancelled");
        const op_desc & op = m.prog.ops[oi];
        if (n_out == 0 && (m.prog.buffers[op.out].out_rows)) continue;
        switch (op.type) {
            case OP_EMBED: op_embed(x, op, oi); break;
            case OP_RMS_NORM: op_rms_norm(x, op, oi); break;
            case OP_HEAD_RMS_NORM: op_head_rms_norm(x, op, oi); break;
            case OP_MATMUL: op_matmul(x, op, oi); break;
            case OP_ADD: elementwise(x, op, [](float a, float c) { return a + c; }); break;
            case OP_MUL:
                if (op.b >= 0) {
                    elementwise(x, op, [](float a, float c) { return a * c; });
                } else {
                    // By a weight vector (ggml_mul broadcasting it over rows), or by its one value.
                    const tensor_ref w = m.weight(oi, "weight");
                    const float * wv = reinterpret_cast<const float *>(w.data);  // (moved by w_off below)
                    const bool one = w.info->n_elements == 1 && !op.params.count("w_off");
                    wv += static_cast<int64_t>(op.param("w_off", 0));
                    const int64_t n = static_cast<int64_t>(op.param("n", static_cast<double>(x.width(op.out))));
                    const int64_t ao = static_cast<int64_t>(op.param("a_off", 0)), oo = static_cast<int64_t>(op.param("out_off", 0));
                    for (int64_t t = 0; t < x.rows(op.out); t++) {
                        const float * a = x.ptr(op.a) + t * x.width(op.a) + ao;
                        float * o = x.ptr(op.out) + t * x.width(op.out) + oo;
                        for (int64_t i = 0; i < n; i++) o[i] = a[i] * wv[one ? 0 : i];
                    }
                }
                break;
            case OP_SCALE: {
                const float s = static_cast<float>(op.param_req("scale"));
                elementwise(x, op, [s](float a, float) { return a * s; });
                break;
            }
            case OP_SWIGLU: {
                // With a limit: Step 3.5's dense and shared-expert FFNs. With situ_beta: Kimi-K3's situ.
                const float limit = static_cast<float>(op.param("limit", 0));
                const float sb = static_cast<float>(op.param("situ_beta", 0)), slb = static_cast<float>(op.param("situ_linear_beta", 0));
                // With oai_alpha: swigluoai (MiniMax-M3's dense and shared FFNs: ggml_swiglu_oai, gpt-oss's experts' act 1), limit required.
                const float oai = static_cast<float>(op.param("oai_alpha", 0));
                if (oai > 0) elementwise(x, op, [oai, limit](float a, float c) {
                    const float gx = std::min(a, limit), uy = std::min(std::max(c, -limit), limit);
                    return gx / (1.0f + std::exp(oai * -gx)) * (uy + 1.0f);
                });
                else if (sb > 0) elementwise(x, op, [sb, slb](float a, float c) { return situ(a, c, sb, slb); });
                // With clamp_gate: ggml_swiglu_clamp (DeepSeek-V4's shared experts): silu(min(a, L)) * clamp(b, -L, L).
                else if (limit > 0 && op.param("clamp_gate", 0) != 0) elementwise(x, op, [limit](float a, float c) {
                    const float gx = std::min(a, limit);
                    return gx / (1.0f + std::exp(-gx)) * std::min(std::max(c, -limit), limit);
                });
                else if (limit > 0) elementwise(x, op, [limit](float a, float c) { return swiglu_limited(a, c, limit); });
                else elementwise(x, op, [](float a, float c) { return silu(a) * c; });
                break;
            }
            case OP_SIGMOID_MUL: op_sigmoid_mul(x, op); break;
            case OP_ROPE: op_rope(x, op, oi); break;
            case OP_ATTENTION: op_attention(x, op, oi); break;
            case OP_MOE: op_moe(x, op, oi); break;
            case OP_GATHER_OUT: op_gather_out(x, op); break;
            case OP_COPY:
                if (op.params.count("blocks")) op_strided_copy(x, op);
                else elementwise(x, op, [](float a, float) { return a; });
                break;
            case OP_MLA_ATTENTION: op_mla_attention(x, op, oi); break;
            case OP_HADAMARD: op_hadamard(x, op); break;
            case OP_DSA_INDEX: op_dsa_index(x, op); break;
            case OP_MSA_INDEX: op_msa_index(x, op); break;
            case OP_QSA_INDEX: op_qsa_index(x, op, oi); break;
            case OP_SSM_CONV: op_ssm_conv(x, op, oi); break;
            case OP_GATED_DELTA_NET: op_gated_delta_net(x, op, oi); break;
            case OP_SSM_SCAN: op_ssm_scan(x, op, oi); break;
            case OP_LIGHTNING_ATTN: op_lightning_attn(x, op); break;
            case OP_RWKV_WKV7: op_rwkv_wkv7(x, op); break;
            case OP_RWKV_WKV6: op_rwkv_wkv6(x, op, oi); break;
            case OP_TOKEN_SHIFT: op_token_shift(x, op); break;
            case OP_SIGMOID: {
                // ggml_sigmoid: 1 / (1 + expf(-a)); with decay d, then ggml_scale by -d and ggml_exp, each in float.
                // exp_decay (RWKV-6's decay): exp(-exp(a)), as ggml_exp, ggml_neg, ggml_exp (no sigmoid).
                if (op.params.count("exp_decay")) elementwise(x, op, [](float a, float) { return std::exp(-std::exp(a)); });
                else if (op.params.count("decay")) {
                    const float nd = -static_cast<float>(op.param("decay", 0));
                    elementwise(x, op, [nd](float a, float) { return std::exp((1.0f / (1.0f + std::exp(-a))) * nd); });
                } else elementwise(x, op, [](float a, float) { return 1.0f / (1.0f + std::exp(-a)); });
                break;
            }
            case OP_HEAD_SUM_MUL: {
                const int64_t hd = static_cast<int64_t>(op.param_req("head_dim")), nh = static_cast<int64_t>(op.param_req("n_head"));
                for (int64_t t = 0; t < x.rows(op.out); t++) {
                    const float * a = x.ptr(op.a) + t * x.width(op.a);
                    const float * bb = x.ptr(op.b) + t * x.width(op.b);
                    float * o = x.ptr(op.out) + t * x.width(op.out);
                    for (int64_t h = 0; h < nh; h++) {
                        double sum = 0.0;
                        for (int64_t i = 0; i < hd; i++) sum += static_cast<double>(a[h * hd + i]);
                        const float s = static_cast<float>(sum);
                        for (int64_t i = 0; i < hd; i++) o[h * hd + i] = bb[h * hd + i] * s;
                    }
                }
                break;
            }
            case OP_HC_GATES: op_hc_gates(x, op, oi); break;
            case OP_ALTUP: op_altup(x, op); break;
            case OP_GAUSSIAN_TOPK: op_gaussian_topk(x, op); break;
            case OP_SWITCH_ROUTE: op_switch_route(x, op); break;
            case OP_SWITCH_LORA: op_switch_lora(x, op, oi); break;
            case OP_PLE_NGRAM: op_ple_ngram(x, op, oi); break;
            case OP_PLE_GATE: op_ple_gate(x, op); break;
            case OP_ATTN_RES: op_attn_res(x, op, oi); break;
            case OP_DSV4_COMPRESS: op_dsv4_compress(x, op, oi); break;
            case OP_DSV4_ATTENTION: op_dsv4_attention(x, op, oi); break;
            case OP_DSV4_HC_POST: op_dsv4_hc_post(x, op, oi); break;
            case OP_RELU_SQR: elementwise(x, op, [](float a, float) { const float r = a > 0.0f ? a : 0.0f; return r * r; }); break;
            case OP_MOE_PREFETCH: op_moe_prefetch(x, op, oi); break;
            case OP_CLAMP: {
                // As ggml_clamp(a, -limit, limit): max(min(a, limit), -limit); with min and max, ggml_clamp(a, min, max).
                if (op.params.count("min")) {
                    const float lo = static_cast<float>(op.param_req("min")), hi = static_cast<float>(op.param_req("max"));
                    elementwise(x, op, [lo, hi](float a, float) { return std::max(std::min(a, hi), lo); });
                    break;
                }
                const float limit = static_cast<float>(op.param_req("limit"));
                elementwise(x, op, [limit](float a, float) { return std::max(std::min(a, limit), -limit); });
                break;
            }
            case OP_XIELU: {
                const xielu_coeffs c = xielu_from_raw(static_cast<float>(op.param_req("alpha_n")), static_cast<float>(op.param_req("alpha_p")), static_cast<float>(op.param_req("beta")), static_cast<float>(op.param_req("eps")));
                elementwise(x, op, [c](float a, float) { return xielu(a, c); });
                break;
            }
            case OP_SOFTCAP: {
                // As llama.cpp: ggml_scale by 1/cap, ggml_tanh, ggml_scale by cap, each in float.
                const float cap = static_cast<float>(op.param_req("cap")), inv = 1.0f / cap;
                elementwise(x, op, [cap, inv](float a, float) { return std::tanh(a * inv) * cap; });
                break;
            }
            case OP_INPUT: op_input(x, op); break;
            case OP_CVEC: op_cvec(x, op); break;
            case OP_LAYER_NORM: op_layer_norm(x, op, oi); break;
            case OP_GELU: {
                // (Rows split over the threads: a bge-base pass of 128 tokens looks up 4.7M values.)
                const int64_t n = x.width(op.a), ow = x.width(op.out);
                const float * a = x.ptr(op.a);
                float * o = x.ptr(op.out);
                const float * gt = gelu_table();
                m.pool->parallel_for(x.rows(op.a), [&](int64_t begin, int64_t end, int) {
                    for (int64_t t = begin; t < end; t++)
                        for (int64_t i = 0; i < n; i++) o[t * ow + i] = gelu_ggml(gt, a[t * n + i]);
                }, 1);
                break;
            }
            default: throw error(KAIL_E_INTERNAL, "unhandled op");
        }
    }
    } catch (...) {
        // Recurrent layers update their state in place as the pass goes: a pass that stops halfway
        // leaves the batch's sequences between two states, so they are cleared (the KV rows past
        // each sequence's length are never read, but the state has no such length).
        // An encoding pass that stops leaves its sequences empty (enc_len and rows cleared).
        if (!m.prog.rs_width.empty() || encode) {
            std::set<int> seqs(b.seq, b.seq + b.n);
            for (int s : seqs) seq_truncate(s, 0);
        }
        throw;
    }
    if (!m.src)
        for (int s = 0; s < m.params.n_seq_max; s++) m.seq_len[s] = next[s];
    if (encode) {
        // The encoder's own rows served this pass only: the decoder reads the cross rows.
        const std::set<int> seqs(b.seq, b.seq + b.n);
        for (int s : seqs)
            for (size_t l = 0; l < m.kv_role.size(); l++) {
                if (m.kv_role[l] != KV_ENCODER) continue;
                kv_seq_layer & c = m.kv[static_cast<size_t>(s)][l];
                m.kv_bytes -= c.k.capacity() + c.v.capacity();
                std::vector<uint8_t>().swap(c.k);
                std::vector<uint8_t>().swap(c.v);
                c.cap = 0;
                c.hw = 0;
            }
    }
    logits.assign(m.bufs[m.prog.logits].begin(), m.bufs[m.prog.logits].begin() + n_out * n_vocab_);
    if (hidden) {
        if (b.want_hidden) hidden->assign(m.bufs[m.prog.hidden].begin(), m.bufs[m.prog.hidden].begin() + b.n * m.prog.buffers[m.prog.hidden].width);
        else hidden->clear();
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::lock_guard<std::mutex> lk(m.stats_mu);
    m.stats.forward_calls++;
    m.stats.tokens += static_cast<uint64_t>(b.n);
    m.stats.compute_seconds += secs;
    uint64_t scratch = 0;
    for (auto & buf : m.bufs) scratch += buf.capacity() * sizeof(float);
    m.stats.scratch_bytes = scratch;
}

} // namespace kail
