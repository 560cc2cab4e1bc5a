// DeepSeek-V4 (llama.cpp src/models/deepseek4.cpp) kernels on F32 rows: the KV compressor's
// softmax-weighted fold of a block, the hyper-connections' post/comb mix (Sinkhorn-normalized
// stream mixing), and attention over contiguous shared key/value rows of the cache's type with sinks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kail::dsv4 {

// One compressed entry (before its norm and rotation) from the compressor's per-token rows, each
// row [kv (w) | score (w)] with w = (overlap ? 2 : 1) * d: per dimension j, a softmax over the
// block's scores of the kv values. Without overlap (HCA) the block's `ratio` rows `cur`, dims
// [0, d); with overlap (CSA) the previous block's rows (dims [0, d) of kv and score; `prev` null
// before the first block: kv 0, score -inf) and then the block's own (dims [d, 2d)), 2 * ratio
// entries. Sums as ggml's soft_max and sum_rows (double accumulators).
void compress_entry(const float * const * cur, const float * const * prev, int64_t ratio, int64_t d, bool overlap, float * out);

// The Sinkhorn-normalized stream mix comb[dst + hc * src] from a token's (2 + hc) * hc mixes:
// logits mix[2hc + e] * scale[2] + base[2hc + e], softmax over dst for each src, + eps, then a
// column normalization (over src, each sum + eps) and iters - 1 rounds of row (over dst) and
// column normalization, as llama.cpp's build_hc_sinkhorn.
void hc_comb(const float * mix, const float * scale, const float * base, int64_t hc, float eps, int iters, float * comb);

// The streams after a sublayer: out[dst] = y * post[dst] + sum_src res[src] * comb[dst, src]
// (F32 products and adds in src order, as the unfused graph), post[dst] = 2 * sigmoid(mix[hc +
// dst] * scale[1] + base[hc + dst]). res and out may be the same (hc * d values).
void hc_post(const float * y, const float * res, const float * mix, const float * scale, const float * base, int64_t hc, int64_t d, float eps, int iters, float * out);

// n_head query heads (q: n_head * d) over n rows of KV-cache type `type` (F32, F16, Q8_0, ...:
// the packed cache's rows, row_stride bytes apart) that are both key and value (d each): per head
// softmax(scale * q.k) with the head's sink logit (sinks null: none) in the normalizer, then the
// weighted sum of the rows into out (n_head * d). The kernels are the GQA attention's (matmul for
// the scores, attention_softmax, attention_weighted_rows): ggml-cpu's numerics (F32 products; for
// an F16 cache the query and the probabilities rounded to F16). `scores` (n_head * n floats) and
// `half` are the caller's scratch, reused across calls.
void attend(uint32_t type, const float * q, int64_t n_head, int64_t d, const void * rows, size_t row_stride, int64_t n, float scale,
            const float * sinks, float * out, std::vector<float> & scores, std::vector<uint16_t> & half);

} // namespace kail::dsv4
