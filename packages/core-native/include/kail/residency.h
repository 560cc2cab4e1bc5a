// Residency plan: what a RAM budget holds when routed experts stream from storage.
//
// Computed from the file's tensor table and the program alone, before anything is loaded: the
// non-expert weights the program reads (embeddings, attention, norms, routers, shared experts,
// dense blocks, output) are resident; the KV cache at the planned context, the activation scratch
// for a batch and a reserve for the rest of the process come off the budget too; what is left is the
// expert cache. The plan fits when that cache holds at least the experts one token uses in one MoE
// layer (n_expert_used of the largest), since a forward pass pins what it computes.
#pragma once

#include <algorithm>

#include <cstdint>
#include <string>
#include <vector>

#include "kail/expert_stream.h"
#include "kail/gguf.h"
#include "kail/model.h"

namespace kail {

struct residency_plan {
    uint64_t ram_budget = 0;
    uint64_t reserve_bytes = 0;        // held back for the rest of the process
    uint64_t resident_bytes = 0;       // non-expert weights the program reads, copied into RAM
    int64_t  resident_tensors = 0;
    uint64_t kv_bytes = 0;             // KV cache at n_ctx positions for n_seq_max sequences
    int64_t  n_ctx = 0;
    int      n_seq_max = 0;
    uint64_t scratch_bytes = 0;        // activations for a batch of n_batch tokens (an estimate)
    uint64_t lora_bytes = 0;           // params.lora's adapter pairs (mapped, read by every pass)
    int64_t  n_batch = 0;
    uint64_t fixed_bytes = 0;          // reserve + resident + kv + scratch + lora
    uint64_t expert_bytes = 0;         // routed expert tensors in the file
    int      n_moe_layers = 0;
    int      n_expert = 0;             // largest over MoE layers
    int      n_expert_min = 0;         // smallest over MoE layers (GroveMoE's chunk experts: fewer)
    int64_t  n_expert_total = 0;       // experts over all MoE layers
    int      n_expert_used = 0;        // largest over MoE layers
    uint64_t expert_entry_bytes = 0;   // one cached expert (gate+up+down read buffers), largest layer
    uint64_t cache_bytes = 0;          // budget - fixed (0 when the budget is smaller)
    uint64_t min_cache_bytes = 0;      // n_expert_used experts of the largest layer
    uint64_t cache_experts = 0;        // whole experts the cache holds (of the largest size)
    double   cache_experts_per_layer = 0;      // cache_bytes / one expert of every MoE layer
    uint64_t cold_read_bytes_per_token = 0;    // one token, nothing cached: n_expert_used experts per MoE layer
    uint64_t vram_budget = 0;          // params.vram_budget (the VRAM tier, streaming only)
    uint64_t vram_cache_experts = 0;   // experts it holds: slots of expert_entry_bytes, at most n_expert_total
    uint64_t vram_cache_bytes = 0;     // vram_cache_experts x expert_entry_bytes: the device memory taken
    bool     fits = false;
    uint64_t shortfall_bytes = 0;      // how much larger the budget must be (0 when it fits)
    std::string message;               // the refusal with its numbers, empty when it fits
};

// The expert slices of every OP_MOE op, in program order. Throws KAIL_E_BAD_MODEL naming a tensor
// that is missing or smaller than its shape.
std::vector<expert_layer_source> residency_expert_sources(const gguf_file & file, const program & prog);

// Uses params.ram_budget, vram_budget, ram_reserve, n_ctx, n_seq_max, kv_type and n_batch. Throws
// KAIL_E_BAD_MODEL for programs that name tensors the file lacks; never throws for budgets.
residency_plan residency_plan_compute(const gguf_file & file, const program & prog, const model_params & params);

// "1.50 GiB", "768.0 KiB", "12 B": the unit the plan's messages use.
std::string format_bytes(uint64_t bytes);

// Sliding-window attention layers keep a ring instead of every position: per KV layer, R = window
// + n_batch - 1 (the window, plus the rest of a batch written before its first token attends), or
// 0 for a layer that keeps every position (no window, or n_ctx <= 2R). The ring is stored twice
// (2R rows per head) so any `window` consecutive positions are contiguous. Throws
// KAIL_E_BAD_MODEL when attention ops disagree on a layer's window. Sliding MLA blocks
// (mla_attention with a window, dots3note) ring their latent rows the same way (one head, no V).
std::vector<int64_t> kv_ring_rows(const program & prog, int64_t n_ctx, int64_t n_batch, bool swa_full = false);
// DeepSeek-V4's packed KV layers keep fewer rows than positions (llama.cpp's deepseek4 cache
// does the same): the raw key/value rows of a windowed dsv4_attention layer in a ring of R =
// window - 1 + B rows, B = max(n_batch, kDsv4Margin + 1) (row p % R: the window and the rest of a
// batch written before its first token attends; a sequence can be taken back B positions); a
// compressor's per-token [kv | score] rows (dsv4_compress `layer`) in F32 (as llama.cpp keeps its
// compressor state) in a ring of (overlap ? 2 : 1) * ratio + B - 1 rows (the open block, the one
// before it, and the same reach back: it folds token by token); its compressed
// entries (out_layer, the attention's comp_layer) and an indexer's keys (dsa_index with a ratio)
// one row per block of `ratio` positions (row p / ratio, written at the block's end). A ring is
// used only where it is smaller than the context (and for the raw rows, unless swa_full).
// Default for every other layer: one row per position in the cache type. Throws
// KAIL_E_BAD_MODEL when ops give a layer two layouts or share a packed layer with another op.
constexpr int64_t kDsv4Margin = 64;
struct kv_packed_layout {
    int64_t per = 1;       // positions per row (row p / per)
    int64_t ring = 0;      // ring rows (row p % ring); 0: linear
    int64_t window = 0;    // raw rows: the attention's window (continuing at len needs len + 1 - window on)
    int64_t ratio = 0;     // compressor rows: the block (continuing at len needs its block's start, and with
    bool    overlap = false;  //   overlap the block before, on)
    bool    f32 = false;   // rows in F32 whatever the cache type
    bool    packed() const { return per > 1 || ring > 0 || ratio > 0 || window > 0 || f32; }
    // The first position a sequence continued at len still needs (rings).
    int64_t need_from(int64_t len) const {
        if (window > 0) return std::max<int64_t>(0, len + 1 - window);
        if (ratio > 0) return std::max<int64_t>(0, len - len % ratio - (overlap ? ratio : 0));
        return 0;
    }
};
std::vector<kv_packed_layout> kv_packed_layouts(const program & prog, int64_t n_ctx, int64_t n_batch, bool swa_full = false);
// The KV layers of an encoder-decoder program (ops tagged pass: T5), by what they hold: the
// encoder's own self-attention rows (pass 1, kept for the encoding pass only), the cross-attention
// rows the encoder stores (store_only, pass 1) and the decoder's cross readers read (pass 2), and the
// decoder's own self-attention rows (pass 2), whose row j holds position enc_len + j. Empty for
// another program; throws (KAIL_E_INVALID_ARG) for an untagged attention op, another cache op or a
// layer with two roles.
enum kv_enc_dec_role : uint8_t { KV_UNUSED = 0, KV_ENCODER = 1, KV_CROSS = 2, KV_DECODER = 3 };
std::vector<uint8_t> kv_enc_dec_roles(const program & prog);
// KV cache bytes of one sequence at n_ctx positions: n_ctx rows per layer, 2R for ring layers.
// K rows in kv_type_k, V rows in kv_type_v. An encoder-decoder program's sequence (prompt of n
// positions, the decoder's after it): n rows of its encoder and cross layers while it encodes, then
// the n cross rows and at most n_ctx - n of the decoder's; the most over 1 <= n <= n_ctx.
uint64_t kv_bytes_per_sequence(const program & prog, int64_t n_ctx, int64_t n_batch, uint32_t kv_type_k, uint32_t kv_type_v, bool swa_full = false);
// Bytes of one cached row of `width` values (a layer's K or V for one position) in the cache type.
size_t kv_row_bytes(uint32_t kv_type, int64_t width);
// Throws unless the program's attention can keep its K rows in kv_type_k and its V rows in
// kv_type_v: float types always; a quantized type when the head dims it stores (MLA: the latent
// and its row, in K's type) are whole blocks. The runtime, the residency plan and the KV sizing all
// check with it, so a bad type is refused before anything is read.
void check_kv_type(const program & prog, uint32_t kv_type_k, uint32_t kv_type_v);

} // namespace kail
