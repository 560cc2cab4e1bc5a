// Multi-head Latent Attention (DeepSeek-V2/V3) with the absorbed form: the KV cache holds, per
// token, only the normalized latent (kv_lora) followed by the RoPE key (qk_rope), shared by all
// heads. The key up-projection is folded into the query (q_nope -> kv_lora per head) and the value
// up-projection is applied to the attention output, so per-head K/V never exist. Internal to the
// model runtime (model.cpp stores the rows; this file computes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

namespace kail {

class threadpool;
struct gguf_tensor_info;

struct mla_weight {
    const gguf_tensor_info * info = nullptr;
    const uint8_t *          data = nullptr;
};

struct mla_args {
    int64_t n_tok = 0, n_head = 0, kv_lora = 0, qk_nope = 0, qk_rope = 0, v_head = 0;
    float   scale = 1.0f;
    // Reference form for tests: decompress every cached latent into per-head K and V and run
    // ordinary attention. Same cache, same inputs, no absorption.
    bool    naive = false;
    const float *           q = nullptr;      // row t: n_head heads of qk_nope + qk_rope, RoPE applied
    int64_t                 q_stride = 0;     // floats
    float *                 out = nullptr;    // row t: n_head * v_head
    int64_t                 out_stride = 0;   // floats
    const uint8_t * const * cache = nullptr;  // per token: its sequence's rows (kv_lora + qk_rope each)
    const int32_t *         pos = nullptr;    // per token: attends to cache rows [0, pos]
    // A sliding window (llama.cpp's LLAMA_SWA_TYPE_STANDARD, dots3note's sliding MLA blocks): a
    // token at pos attends to rows [pos + 1 - window, pos] only; 0: every row up to pos.
    int64_t                 window = 0;
    // Per token: the row of cache[t] that holds position pos + 1 - window (the window's first; a
    // mirrored ring's lo % R, the positions after it in the rows after it). Null: row = position.
    const int64_t *         first = nullptr;
    // DeepSeek's sparse attention: per token, top_k positions (floats, -1 for none) the lightning
    // indexer selected; the others are masked out. Null: every position.
    const float *           sel = nullptr;
    int64_t                 sel_stride = 0;   // floats
    int64_t                 top_k = 0;
    // Per head an attention sink (Hunyuan v4's learnable sink: a logit, not scaled, that joins each
    // head's softmax with no value row, as ggml's soft_max with sinks). Null: none.
    const float *           sinks = nullptr;
    uint32_t                kv_type = 0;      // KAIL_TYPE_F16, KAIL_TYPE_F32 or KAIL_TYPE_Q8_0 (latent widths multiples of 32)
    // llama.cpp's two layouts: attn_k_b [qk_nope, kv_lora, n_head] + attn_v_b [kv_lora, v_head,
    // n_head], or the older attn_kv_b [kv_lora, n_head * (qk_nope + v_head)].
    mla_weight k_b, v_b, kv_b;
    threadpool * pool = nullptr;
    // imatrix collection (model::imatrix_collect): called with each head's input rows to attn_k_b
    // (which 0: q_nope, qk_nope wide) and to attn_v_b (which 1: the head's latent, kv_lora wide),
    // `rows` rows `stride` floats apart. Absorbed split layout only.
    std::function<void(int which, int64_t head, const float * x, int64_t stride, int64_t rows)> observe;
};

// Shape check of the up-projections against the op's dimensions; empty when they match.
std::string mla_check_weights(const mla_args & a);

// out = attention of q over the cached rows (cache rows for the batch already stored).
void mla_attend(const mla_args & a);

// sc[0..n) = softmax(scale * sc), the exponentials attention_exp's and their sum in double
// (attention_exp_sum: the same bits at every kernel level); for an F16 cache the probabilities are then
// rounded to F16, as ggml-cpu rounds them before the product with V. `half` is scratch. A finite
// `sink` (gpt-oss's per-head attention sink, a logit not scaled) joins the maximum and the sum
// as one more score with no value row, as ggml's soft_max with sinks: the probabilities then sum
// to less than 1. A `bias` (n floats: ALiBi's slope x -|pos_k - pos_q|) is added after the scale,
// before the maximum, as ggml's soft_max_ext adds slope x mask.
void attention_softmax(float * sc, int64_t n, float scale, uint32_t kv_type, std::vector<uint16_t> & half,
                       float sink = -std::numeric_limits<float>::infinity(), const float * bias = nullptr);

} // namespace kail
