// A model runtime: an op program (composed per architecture by the engine package) executed over
// GGUF weights, with a per-sequence KV cache. One forward() call processes a batch of tokens that
// may belong to several sequences (continuous batching) and returns logits for the rows asked for.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "kail/expert_stream.h"
#include "kail/gguf.h"

namespace kail {

class threadpool;
struct residency_plan;
class model;

enum op_type {
    OP_EMBED,          // out[t] (+)= dequant(w.weight row tokens[t] | pos[t] | 0 | b[t][b_off])     weights: weight  (params index 0-3, accumulate)
    OP_RMS_NORM,       // out = a / sqrt(mean(a^2) + eps) * weight + bias               weights: weight?, bias?
    OP_HEAD_RMS_NORM,  // per head of width head_dim: rms norm (layer_norm: ggml_norm) with a [head_dim] weight, or one per head, or with head_gain one value per head (times the normed head)   weights: weight
    OP_MATMUL,         // out = a · weightᵀ (+ bias)                                    weights: weight, bias?  (no_lora, here and on embed: a LoRA adapter file's pair on the weight is checked and left unused)
    OP_ADD,            // out = a + b
    OP_MUL,            // out = a * b, or without b a * weight (F32, as wide as a row or one value)   weights: weight?
    OP_SCALE,          // out = a * scale
    OP_SWIGLU,         // out = silu(a) * b; with limit L > 0: min(silu(a), L) * clamp(b, -L, L); with situ_beta B > 0: B tanh(a / B) sigmoid(a) * b (b as L' tanh(b / L') with situ_linear_beta L' > 0)
    OP_SIGMOID_MUL,    // out[t] = a[t] * sigmoid(b[t][0])  (shared-expert gate); per_element: a * sigmoid(b) (gated attention); group G: a gate per G values; softplus: softplus(b) for sigmoid(b)
    OP_ROPE,           // rotates heads of a in place (positions of the batch)          weights: freq_factors?
    OP_ATTENTION,      // stores k,v (b,c) for the batch in the KV cache, out = attention(q=a); without b and c it reads a layer an earlier op stored (shared KV), or with ext_layer L and exclusive 1 layer L of model_params::kv_source's cache (a query at P sees its keys [max(0, P + 1 - window), P - 1]); alibi: ALiBi's maximum bias (slope_h x -|pos_k - pos_q| on each head's scores); weights: sinks?, rel_b? (T5's relative position bias [n_head, n_buckets], rel_bidir)
    OP_MOE,            // routed experts on a, routed on b if given (else a)            weights: gate_inp, exp_probs_b?, gate_exps (not for act 2, 3), up_exps, down_exps, down_exps_s?
    OP_GATHER_OUT,     // out (out-rows) = rows of a whose output flag is set
    OP_COPY,           // out[:, oo:oo+n] = a[:, ao:ao+n]; with blocks B, a_stride, out_stride: that for block j at ao + j a_stride, oo + j out_stride
    OP_MLA_ATTENTION,  // stores the latent row b (kv_lora + qk_rope) in the KV cache, out = absorbed MLA(q=a), over the positions in c when given   weights: k_b, v_b | kv_b, sinks?
    OP_INPUT,          // out[t] = batch.embd row t (hidden-state rows given with the batch, e.g. a multi-token-prediction head's)
    OP_CVEC,           // a[t] += the control vector's row for param layer (model_params::cvec), in place; else nothing
    OP_LAYER_NORM,     // out = (a - mean(a)) / sqrt(var(a) + eps) * weight + bias       weights: weight?, bias?
    OP_GELU,           // out = gelu(a) as ggml-cpu computes it (tanh form through its F16 table)
    OP_HADAMARD,       // a (= out) times the orthonormal Walsh-Hadamard matrix of size n, block by block of each row
    OP_DSA_INDEX,      // DeepSeek's lightning indexer: stores key row b in the KV cache (ratio r > 1: only block ends, a row per block), out = positions of the top_k scores sum_h relu(q_h.k) w_h (q = a, w = c)
    OP_SSM_CONV,       // causal depthwise conv over each sequence's last d_conv inputs (a), state in recurrent layer `layer`; + bias, then SiLU with silu   weights: weight [d_conv, channels], bias?
    OP_GATED_DELTA_NET,// gated delta rule (Qwen3-Next/3.5 linear attention) over a = q|k|v, b = alpha, c = beta logits, state in recurrent layer `layer` (kda: a gate per key channel; lower_bound: g = lower_bound * sigmoid((alpha + dt_bias) a))   weights: dt_bias, a
    OP_SSM_SCAN,       // Mamba-2 selective scan over a = x|B|C, b = dt, state in recurrent layer `layer`; out = y + D x   weights: dt_bias, a, d (one per head)
    OP_RELU_SQR,       // out = max(a, 0)^2 (Nemotron-H's FFN activation)
    OP_SOFTCAP,        // out = cap * tanh(a / cap) (Gemma's logit soft-capping)
    OP_MOE_PREFETCH,   // streaming: routes a (the next moe op's router input) with that op's router and reads its experts ahead; computes nothing (out = a)
    OP_CLAMP,          // out = min(max(a, -limit), limit) (llama.cpp's clamp_kqv of fused q|k|v projections: DBRX)
    OP_LIGHTNING_ATTN, // MiniMax-01's lightning attention over a = per head q|k|v (SiLU first with silu), state in recurrent layer `layer`: S = exp(-slope_h slope_scale) S + k^T v, out = q S
    OP_HC_GATES,       // hyper-connection coefficients (Hunyuan v4): out[out_off + j*repeat + r] = sigmoid(a[a_off + j] * scale[scale_index] + base[base_off + j]) * magnitude + eps, j < n, r < repeat   weights: scale, base
    OP_ATTN_RES,       // cross-layer residual attention (Kimi-K3): out = sum_c softmax_c(score . rms_norm(v_c)) v_c over the n_ckpt rows of a (n wide each) and b   weights: score
    OP_MSA_INDEX,      // MiniMax-M3's sparse-attention indexer: stores key row b in the KV cache, out[out_off..] = per indexer head (q = a) the top_k blocks of `block` positions by max_j q_h.k_j, the local blocks up to the token's own forced in
    OP_DSV4_COMPRESS,  // DeepSeek-V4's KV compressor: stores [a | b + ape[pos % ratio]] (kv | score rows, F32, a ring: kv_packed_layouts) in kv layer `layer`; out = the compressed entry (softmax fold, RMS norm, RoPE at the block's first position) on rows that end a block of `ratio` positions, else 0; also stored in out_layer when given (a row per block)   weights: ape, norm
    OP_DSV4_ATTENTION, // DeepSeek-V4 attention: stores the shared key/value row b in kv layer `layer` (a ring of the window: kv_packed_layouts); out = per head softmax over the last `window` rows and the compressed rows of comp_layer (every ratio-th position, or those in c: the indexer's) with sinks   weights: sinks?
    OP_DSV4_HC_POST,   // DeepSeek-V4 hyper-connection post: out[dst] = a * post[dst] + sum_src b[src] * comb[dst, src] from the mixes c (Sinkhorn-normalized comb)   weights: scale, base
    OP_PLE_NGRAM,      // qwen4exp's PLE n-gram hash embedding: per head the table row (hash of this token and the n_gram - 1 before it, reset at eos) % vocab_h + off_h, concatenated; the last n_gram - 1 tokens in recurrent layer `layer`   weights: weight (the table)
    OP_PLE_GATE,       // qwen4exp's PLE gate: s_c = scale * sum_i a[c n + i] b[c n + i] (summed in double), out[c repeat + r] = sigmoid(sgn(s_c) sqrt(max(|s_c|, 1e-6))), c < n_group
    OP_XIELU,          // Apertus's xIELU of a (model/xielu.h): params alpha_n, alpha_p (raw, softplus applied as ggml_xielu does), beta, eps
    OP_QSA_INDEX,      // qwen4exp's QSA indexer: stores raw key row b in kv layer `layer`; blocks of `ratio` positions mean-pooled, RMS-normed (weight), RoPE'd at the block start; out[out_off + c W ..] (c < repeat, W = top_k + ratio - 1) = the positions llama.cpp's top-k keeps: sum_h relu(q_h . key_b) per whole block (q = a), the incomplete tail always   weights: weight
    OP_RWKV_WKV7,      // RWKV-7's WKV recurrence (ggml_rwkv_wkv7) over a = r|w|k|v|a|b (six sections of n_head x head_dim; w the decay factor), state S[head][value i][key j] in recurrent layer `layer`: S = S diag(w) + v k^T + (S a) b^T, out = S r
    OP_RWKV_WKV6,      // RWKV-6's WKV recurrence (ggml_rwkv_wkv6) over a = r|k|v|w (four sections of n_head x head_dim; w the per-token decay factor), state S[head][key i][value j] in recurrent layer `layer`: out_j = sum_i r_i (u_i k_i v_j + S_ij), S_ij = S_ij w_i + k_i v_j   weights: u (time_first, F32, n_head x head_dim); with gla_scale g > 0 ggml_gated_linear_attn instead (no u): S_ij = S_ij w_i + k_i v_j, out_j = sum_i g r_i S_ij
    OP_TOKEN_SHIFT,    // RWKV's token shift: out[t] = the row of a at the sequence's previous position (zeros at its first), the last row kept in recurrent layer `layer`
    OP_SIGMOID,        // out = sigmoid(a) (ggml_sigmoid); with decay d: exp(-d * sigmoid(a)) as RWKV-7's decay (ggml_sigmoid, ggml_scale by -d, ggml_exp); with exp_decay 1: exp(-exp(a)) as RWKV-6's (no sigmoid)
    OP_HEAD_SUM_MUL,   // per head of width head_dim: out[h D + i] = b[h D + i] * sum_j a[h D + j] (the sum in double, as ggml_sum_rows; RWKV-7's r.k bonus)
    OP_ALTUP,          // Gemma 3n's AltUp over n streams of width dim (stream j at j dim): mode 0 predict: out[j] = a[j] + sum_k b[j n + k] a[k] (b: the n x n coefficients); mode 1 correct: out[j] = (b - a[act]) (c[j] + 1) + a[j] (b: the block's output, c: n coefficients); mode 2 magnitude: out[j] = a[j] rms(b[b_off..]) / sqrt(max(ms(a[j]), eps)) (HF's floor; sums of squares in double, as ggml_sum_rows)
    OP_GAUSSIAN_TOPK,  // Gemma 3n's activation sparsity: out = relu(a - (mean(a) + std_mul * std(a))), std with n - 1 (ggml_mean, ggml_sum_rows in double)
    OP_SWITCH_ROUTE,   // Granite Switch's router inputs per token (ids: n activation tokens, then their n substitutes): out[t] = [row id, q lane, k lane, v lane], each lane head_dim wide and zero but its first value: the id is the token's substitute (an activation token) or the token, q 1, k +gain (activation) or -gain, v the adapter's slot (i + 1) or 0
    OP_SWITCH_LORA,    // Granite Switch's switched LoRA: out[:, out_off..] += B_s (A_s a[:, a_off..]) with s = round(clamp(b[t][b_off], 0, n_slots - 1)) per row (ggml_clamp, ggml_round, cast)   weights: lora_a [n_in, rank, n_slots], lora_b [rank, n_out, n_slots]
    OP_COUNT_
};

// One step of the program. Buffers are indices into program::buffers; columns of a buffer can be
// addressed through params (e.g. "a_off", "n").
struct op_desc {
    op_type                             type = OP_COPY;
    int                                 out = -1, a = -1, b = -1, c = -1;
    std::map<std::string, std::string>  weights;  // role -> tensor name
    std::map<std::string, double>       params;
    std::vector<int64_t>                ids;      // integer lists an op takes whole (switch_route's token ids)
    double param(const std::string & k, double def) const {
        auto it = params.find(k);
        return it == params.end() ? def : it->second;
    }
    double param_req(const std::string & k) const;
};

// Whether a moe op's experts have a gate projection: act 2 (GELU) and 3 (squared ReLU) use up and
// down only (act 0 SwiGLU, 1 gpt-oss's clamped SwiGLU, 4 GeGLU, 5 ReGLU, 6 SwiGLU with a limit,
// 7 ggml_swiglu_clamp, 8 situ gate them).
inline bool moe_gated(const op_desc & op) {
    const double act = op.param("act", 0);
    return act != 2 && act != 3;
}

// How many consecutive values of a sigmoid_mul op's rows share one gate: 0 = the whole row (b's
// first value: a shared expert's gate), 1 with `per_element` (b as wide as out: gated attention,
// ggml_sigmoid then ggml_mul), G with `group` (b holds width / G: a gate per attention head).
inline int64_t sigmoid_mul_group(const op_desc & op) {
    return op.param("per_element", 0) != 0 ? 1 : static_cast<int64_t>(op.param("group", 0));
}

// Whether a moe op's gate and up experts are one fused tensor (`fused_gate_up`: gate_exps and
// up_exps name the same [n_in, 2 ff, E] tensor, expert e's gate rows then its up rows, as
// llama.cpp's ffn_gate_up_exps). Its cached expert is then one gate|up slice and the down slice.
inline bool moe_fused(const op_desc & op) {
    return moe_gated(op) && op.param("fused_gate_up", 0) != 0;
}

struct buffer_desc {
    std::string name;
    int64_t     width = 0;      // floats per row
    bool        out_rows = false; // rows = outputs of the batch (else one row per token)
};

struct program {
    std::vector<buffer_desc> buffers;
    std::vector<op_desc>     ops;
    int                      logits = -1; // buffer holding the logits (out rows)
    int                      hidden = -1; // optional per-token buffer forward() can return (batch::want_hidden)
    int                      n_kv_layers = 0;
    std::vector<int64_t>     kv_k_width;  // per KV layer: floats of K per token (n_head_kv * head_dim)
    std::vector<int64_t>     kv_v_width;
    // Recurrent layers (linear attention): per layer, the floats of state each sequence keeps
    // (a conv window, a delta-rule matrix), independent of its length.
    std::vector<int64_t>     rs_width;
    int                      n_moe_layers = 0; // for expert-usage statistics
    int                      n_expert = 0;
};

// A LoRA adapter (llama.cpp's GGUF adapter files: general.type "adapter", adapter.type "lora",
// tensors NAME.lora_a / NAME.lora_b next to the base model's NAME, adapter.lora.alpha). Each dense
// projection W with a pair computes W x + s * B (A x), s = scale * alpha / rank (scale alone when
// alpha is 0), as llama.cpp's build_lora_mm; the token embedding adds s * B A[token] (its pair
// stored as llama.cpp's converter writes it). Routed experts take a pair per expert
// ([n_in, rank, E], [rank, n_out, E]) on gate, up and down. Pairs for tensors computed inside other
// fused ops (routers, MLA's up-projections) are refused at load.
struct lora_adapter_spec {
    std::string path;
    float       scale = 1.0f;
};

// Opens an adapter file, its errors naming it as a LoRA adapter (metadata only unless map_data).
std::unique_ptr<gguf_file> open_lora_adapter(const std::string & path, bool map_data);

struct model_params {
    int      n_threads = 0;       // 0 = physical cores
    // KV cache element types (is_kv_cache_type; quantized ones need head dims, for MLA the latent,
    // in whole blocks): kv_type for K rows and MLA's latent rows (llama.cpp's -ctk), kv_type_v for
    // V rows (-ctv). Each defaults to F16.
    uint32_t kv_type = 1;
    uint32_t kv_type_v = 1;
    std::vector<lora_adapter_spec> lora;  // applied in this order
    // GGUF files whose tensors fill the names the program gives that the model's own file lacks, in
    // this order (an EAGLE-3 draft's token_embd / output from its target, as llama.cpp's ctx_other).
    // Not with expert streaming (ram_budget).
    std::vector<std::string> weight_files;
    // Control vectors (llama.cpp's llama_set_adapter_cvec): cvec_n_embd floats per layer for layers
    // 1, 2, ... (layer 0 has none), added to the residual stream after those layers' blocks (the
    // program's cvec ops) whose index lies in [cvec_start, cvec_end]. Empty: none.
    std::vector<float> cvec;
    int64_t  cvec_n_embd = 0;
    int      cvec_start = 1, cvec_end = 1 << 30;
    // A draft that reads another model's KV cache (a Gemma 4 assistant over its target, as
    // llama.cpp's ctx_other): its attention ops with ext_layer read the source's layers (the
    // source's K/V types, rings and mirroring), and weights named "target:NAME" are the source's
    // tensor NAME (the same data, no LoRA). Such a draft keeps no cache of its own: each row of
    // forward() sits at its sequence's source length (seq_len of the source, at least 1), any
    // number of rows per sequence, independent of each other; the draft's seq_len stays 0,
    // seq_truncate and seq_copy do nothing, seq_state, set_seq_state and seq_shift are
    // unsupported. The draft holds the source, so its cache outlives the draft. Not thread-safe
    // against the source: the caller must not run the source's forward() or change its
    // sequences while a draft's forward() runs. Not with expert streaming.
    std::shared_ptr<const model> kv_source;
    // llama.cpp's --swa-full: sliding-window layers keep every position (no ring of window + one
    // batch), so their cache can be rolled back any distance and shifted; more KV memory.
    bool     swa_full = false;
    // In memory (no RAM budget): compute from the file's read-only mapping (llama.cpp's default
    // mmap) instead of a copy of the weights in huge pages (load_weights in model.cpp): a
    // faster start, pages shared with other processes and left to the page cache, but a TLB walk
    // every 4 KiB and page faults on first use.
    bool     use_mmap = false;
    int64_t  n_ctx = 4096;        // max positions per sequence
    int      n_seq_max = 1;       // sequence slots
    uint64_t kv_max_bytes = 0;    // 0 = unlimited

    // Expert streaming, on when ram_budget > 0 (see residency.h): the non-expert weights the
    // program uses are copied into RAM at load, routed experts are read from the file on demand
    // into a cache of what the budget leaves, and no weight is read through a file mapping (the
    // file may be opened with map_data = false). The load throws KAIL_E_BUDGET, with the plan's
    // numbers, before reading anything when the resident part does not fit.
    uint64_t ram_budget = 0;      // bytes for everything; 0 = weights read through the mapping
    uint64_t ram_reserve = 0;     // part of the budget held back for the rest of the process
    int64_t  n_batch = 512;       // most tokens per forward() the plan's scratch covers
    int      io_threads = 4;      // expert reads in flight
    bool     direct_io = true;    // O_DIRECT reads (false: buffered + POSIX_FADV_DONTNEED)
    bool     prefetch = true;     // predict the next MoE layer's experts and read them early
    std::string cache_policy;     // expert cache eviction policy (expert_cache.h); empty = its default
    expert_pack pack;             // read experts from this pack (kail repack) instead of the GGUF
    uint64_t read_bytes = 0;      // largest single expert read (expert_stream_params::read_bytes); 0 = uncut
    // The VRAM tier under the RAM expert cache (expert_stream.h), streaming only: bytes of device
    // memory on CUDA device vram_device; 0 = none. The load throws KAIL_E_UNSUPPORTED without a
    // CUDA build or device, KAIL_E_BUDGET when the device refuses the memory.
    uint64_t vram_budget = 0;
    int      vram_device = 0;
    // A default budget (the hardware profile's) rather than one asked for: one that cannot hold an
    // expert gives no tier (the plan's vram_cache_experts 0) instead of KAIL_E_BUDGET.
    bool     vram_optional = false;
};

struct batch {
    const int32_t * tokens = nullptr;
    const int32_t * pos = nullptr;
    const int32_t * seq = nullptr;
    const uint8_t * output = nullptr; // 1 = return logits for this row
    int64_t         n = 0;
    const float *   embd = nullptr;   // n x embd_width floats for the program's input op, if it has one
    int64_t         embd_width = 0;
    bool            want_hidden = false; // forward() also returns the program's hidden buffer, every row
};

struct model_stats {
    uint64_t forward_calls = 0;
    uint64_t tokens = 0;
    double   compute_seconds = 0;
    std::vector<uint64_t> expert_counts; // n_moe_layers * n_expert
    bool     streaming = false;   // experts stream from the file (model_params::ram_budget)
    uint64_t resident_bytes = 0;  // streaming: weights copied into RAM
    uint64_t scratch_bytes = 0;   // activation buffers allocated now
    uint64_t rollback_bytes = 0;  // recurrent-state rollback checkpoints held now (seq_keep_rollback; not in the KV budget)
    expert_stream_stats stream;   // streaming: the expert cache and its reads, per MoE op in order
};

// Importance-matrix statistics (llama-imatrix's): for each weight matrix the forward passes
// multiply, per matrix (an expert of a 3-D tensor; 1 for a 2-D one) each input column's sum of
// squared activations, and how many input rows were summed.
struct imatrix_stats {
    std::vector<float>   sums;    // n_mat * ne0
    std::vector<int64_t> counts;  // n_mat
};

class model {
  public:
    // Validates the program against the file (every weight present, shapes consistent) before
    // any compute; throws KAIL_E_BAD_MODEL naming the tensor and the mismatch.
    model(std::shared_ptr<gguf_file> file, program prog, const model_params & params);
    ~model();

    // Runs the program; fills logits (n_out * n_vocab floats, n_out = rows with output set), and
    // with b.want_hidden the program's hidden buffer (n * hidden_width floats, every row).
    // Throws KAIL_E_INVALID_ARG for bad tokens/positions/sequences, KAIL_E_BUDGET when the KV
    // cache would pass its budget, KAIL_E_CANCELLED when cancel() was called during the call.
    void forward(const batch & b, std::vector<float> & logits, std::vector<float> * hidden = nullptr);
    // Floats per row of the hidden buffer (0: the program has none), and of the input op's rows
    // (0: the program reads no hidden-state rows).
    int64_t hidden_width() const;
    int64_t input_width() const;

    int64_t n_vocab() const { return n_vocab_; }
    int64_t seq_len(int seq) const;
    // Keeps positions [0, len) and returns how many it kept: len, or 0 when a sliding-window layer's
    // ring no longer holds the window before len (positions written since overwrote it), or when
    // the model has recurrent layers and len is shorter than the sequence (their state holds no
    // earlier positions).
    int64_t seq_truncate(int seq, int64_t len);
    void    seq_clear(int seq) { seq_truncate(seq, 0); }
    void    seq_copy(int src, int dst);          // dst becomes a copy of src's cache
    // Recurrent layers only: an armed sequence keeps a checkpoint of its states and the recurrent ops'
    // inputs since, so seq_truncate can take it back (speculative decoding's rejected drafts) by
    // 40 positions at least; it costs a copy of the states and the recorded inputs in memory.
    void    seq_keep_rollback(int seq, bool on);
    // Recurrent layers only: a sequence's states now (every recurrent layer's floats in layer order),
    // and back: seq_set_states(seq, len, ...) with states taken when the sequence was len long (and
    // its positions before len unchanged since) cuts its KV layers back to len and puts the states
    // in, which continues it exactly as it continued then (a prompt cache's context checkpoint).
    // Returns len, or 0 when a sliding-window ring no longer holds the window before len (the
    // sequence is then cleared); states of another size are refused, the sequence left as it was.
    std::vector<float> seq_states(int seq) const;
    int64_t seq_set_states(int seq, int64_t len, const float * states, size_t n);
    // Context shift (llama.cpp's seq_rm + seq_add): drops positions [keep, keep + n) and moves the
    // ones after them n positions down, K's rotary part turned to match; returns the new length.
    // Throws KAIL_E_UNSUPPORTED for a model with a sliding-window ring smaller than the context or
    // with recurrent layers.
    int64_t seq_shift(int seq, int64_t keep, int64_t n);
    // A sequence's KV cache as bytes (llama.cpp's llama_state_seq_get_data: llama-server's slot save,
    // llama-cli's --prompt-cache), and back into a sequence of a model of the same shape and cache
    // types: a blob that does not fit (another model, other cache types, truncated) is refused
    // with KAIL_E_INVALID_ARG naming the difference, the sequence left as it was.
    std::vector<uint8_t> seq_state(int seq) const;
    void    set_seq_state(int seq, const uint8_t * data, size_t n);
    // LoRA: how many adapters are loaded, and the scale sequence `seq` applies each with (one per
    // adapter, in load order; each sequence starts at model_params::lora's scales). Sequences with
    // different scales share a forward pass: the delta is scaled per row.
    int     n_lora() const;
    void    set_lora_scales(int seq, const std::vector<float> & scales);
    uint64_t kv_bytes_used() const;
    uint64_t kv_bytes_per_token() const;
    // The KV cache at n_ctx positions for every sequence (kv_bytes_per_sequence: rings for sliding windows).
    uint64_t kv_bytes_capacity() const;
    model_stats stats() const;
    // Importance-matrix collection (kail imatrix): while on, every forward adds each weight's
    // input rows to its statistics, as llama-imatrix's collect_imatrix does: 2-D weights of
    // op matmuls (and the router) when a pass has 16 rows or more, routed experts always, per
    // expert (gate/up: the expert's input rows, down: its activated rows). The matrices inside
    // attention (MLA's attn_k_b/attn_v_b) are not collected. imatrix_collect(true) starts over.
    void imatrix_collect(bool on);
    // What was gathered, cleared (clear false: a copy, collection going on; llama-imatrix's
    // periodic saves of a run that continues).
    std::map<std::string, imatrix_stats> imatrix_take(bool clear = true);
    // The residency plan the model was loaded with (streaming); all zero for the in-memory path.
    residency_plan plan() const;
    // Streaming: warms the expert cache from usage history (expert_stream::warm); no-op otherwise.
    void    warm_experts(const std::vector<expert_key> & experts, const std::vector<double> & shares);
    void    cancel() { cancel_.store(true); }
    int     n_threads() const;

    struct impl;
    // (The runtime's own state: a draft reads its kv_source's cache and weights through it.)
    const impl & internals() const { return *impl_; }

  private:
    std::unique_ptr<impl> impl_;
    int64_t               n_vocab_ = 0;
    std::atomic<bool>     cancel_{false};
};

op_type op_type_from_name(const std::string & name); // throws KAIL_E_INVALID_ARG

} // namespace kail
