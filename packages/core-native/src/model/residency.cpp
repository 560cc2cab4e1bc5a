#include "kail/residency.h"

#include <algorithm>
#include <cstdio>
#include <set>

#include "kail/quants.h"
#include "kail/status.h"
#include "kail/types.h"

namespace kail {

namespace {

const char * const EXPERT_ROLES[3] = {"gate_exps", "up_exps", "down_exps"};

uint64_t align64(uint64_t v) { return (v + 63) & ~uint64_t(63); }

std::set<std::string> expert_tensor_names(const program & prog) {
    std::set<std::string> names;
    for (const op_desc & op : prog.ops) {
        if (op.type != OP_MOE) continue;
        for (const char * role : EXPERT_ROLES) {
            auto it = op.weights.find(role);
            if (it != op.weights.end()) names.insert(it->second);
        }
    }
    return names;
}

} // namespace

std::string format_bytes(uint64_t b) {
    char buf[64];
    const double d = static_cast<double>(b);
    if (b >= (uint64_t(1) << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", d / (1ull << 30));
    else if (b >= (uint64_t(1) << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", d / (1ull << 20));
    else if (b >= 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", d / 1024);
    else std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(b));
    return buf;
}

std::vector<int64_t> kv_ring_rows(const program & prog, int64_t n_ctx, int64_t n_batch, bool swa_full) {
    std::vector<int64_t> window(static_cast<size_t>(prog.n_kv_layers), -1);
    for (const op_desc & op : prog.ops) {
        // GQA attention and MLA (dots3note's sliding blocks: one latent row per position, no V).
        if (op.type != OP_ATTENTION && op.type != OP_MLA_ATTENTION) continue;
        const double l = op.param("layer", -1), w = op.param("window", 0);
        if (!(l >= 0 && l < prog.n_kv_layers) || !(w >= 0 && w < double(int64_t(1) << 40))) continue;  // check_op_ranges names these
        int64_t & have = window[static_cast<size_t>(l)];
        if (have >= 0 && have != static_cast<int64_t>(w))
            throw error(KAIL_E_BAD_MODEL, "program: attention ops give kv layer " + std::to_string(static_cast<int64_t>(l)) + " two sliding windows");
        have = static_cast<int64_t>(w);
    }
    std::vector<int64_t> ring(window.size(), 0);
    for (size_t l = 0; l < window.size() && !swa_full; l++) {
        if (window[l] <= 0) continue;
        const int64_t r = window[l] + std::max<int64_t>(1, n_batch) - 1;
        if (2 * r < n_ctx) ring[l] = r;
    }
    return ring;
}

std::vector<kv_packed_layout> kv_packed_layouts(const program & prog, int64_t n_ctx, int64_t n_batch, bool swa_full) {
    const size_t nl = static_cast<size_t>(std::max(0, prog.n_kv_layers));
    std::vector<kv_packed_layout> out(nl);
    std::vector<int> owner(nl, -1);  // the op that set a layer's layout
    auto layer_of = [&](const op_desc & op, const char * key) -> int64_t {
        const double l = op.param(key, -1);
        return l >= 0 && l < static_cast<double>(nl) ? static_cast<int64_t>(l) : -1;
    };
    auto set = [&](int64_t l, const kv_packed_layout & lay, size_t oi) {
        if (l < 0) return;
        kv_packed_layout & have = out[static_cast<size_t>(l)];
        if (owner[static_cast<size_t>(l)] >= 0 &&
            (have.per != lay.per || have.window != lay.window || have.ratio != lay.ratio || have.overlap != lay.overlap || have.f32 != lay.f32))
            throw error(KAIL_E_BAD_MODEL, "program: ops " + std::to_string(owner[static_cast<size_t>(l)]) + " and " + std::to_string(oi) + " give kv layer " +
                                              std::to_string(l) + " two layouts");
        have = lay;
        owner[static_cast<size_t>(l)] = static_cast<int>(oi);
    };
    const int64_t batch_room = std::max<int64_t>(n_batch, kDsv4Margin + 1);
    for (size_t i = 0; i < prog.ops.size(); i++) {
        const op_desc & op = prog.ops[i];
        const double r = op.param("ratio", 0);
        const int64_t ratio = r >= 1 && r < double(int64_t(1) << 30) ? static_cast<int64_t>(r) : 0;
        if (op.type == OP_DSV4_ATTENTION) {
            const double w = op.param("window", 0);
            kv_packed_layout raw;
            if (w > 0 && w < double(int64_t(1) << 30)) {
                raw.window = static_cast<int64_t>(w);
                const int64_t R = raw.window - 1 + batch_room;
                if (!swa_full && R < n_ctx) raw.ring = R;
            }
            if (raw.packed()) set(layer_of(op, "layer"), raw, i);
            if (ratio > 0) {
                kv_packed_layout comp;
                comp.per = ratio;
                set(layer_of(op, "comp_layer"), comp, i);
            }
        } else if (op.type == OP_DSV4_COMPRESS && ratio > 0) {
            kv_packed_layout st;
            st.ratio = ratio;
            st.overlap = op.param("overlap", 0) != 0;
            st.f32 = true;
            const int64_t R = (st.overlap ? 2 : 1) * ratio + batch_room - 1;  // the same reach back as the raw rows' ring
            if (R < n_ctx) st.ring = R;
            set(layer_of(op, "layer"), st, i);
            kv_packed_layout comp;
            comp.per = ratio;
            set(layer_of(op, "out_layer"), comp, i);
        } else if (op.type == OP_DSA_INDEX && ratio > 1) {
            kv_packed_layout keys;
            keys.per = ratio;
            set(layer_of(op, "layer"), keys, i);
        } else if (op.type == OP_QSA_INDEX && ratio > 0) {
            // qwen4exp's pooled block keys: F32, a row per whole block.
            kv_packed_layout keys;
            keys.per = ratio;
            keys.f32 = true;
            set(layer_of(op, "block_layer"), keys, i);
        }
    }
    // A packed layer is the dsv4 / ratio'd dsa ops' (and QSA's block keys) alone: any other op
    // storing or reading it by position would run past its rows. (The other ops' `layer` is a
    // recurrent layer's.)
    for (size_t i = 0; i < prog.ops.size(); i++) {
        const op_desc & op = prog.ops[i];
        if (op.type == OP_DSV4_ATTENTION || op.type == OP_DSV4_COMPRESS || (op.type == OP_DSA_INDEX && op.param("ratio", 0) > 1)) continue;
        if (op.type != OP_ATTENTION && op.type != OP_MLA_ATTENTION && op.type != OP_DSA_INDEX && op.type != OP_MSA_INDEX && op.type != OP_QSA_INDEX) continue;
        for (const char * key : {"layer", "comp_layer", "out_layer"}) {
            const int64_t l = layer_of(op, key);
            if (l >= 0 && out[static_cast<size_t>(l)].packed())
                throw error(KAIL_E_BAD_MODEL, "program: op " + std::to_string(i) + " uses kv layer " + std::to_string(l) + ", which op " +
                                                  std::to_string(owner[static_cast<size_t>(l)]) + " keeps packed (DeepSeek-V4's layout)");
        }
    }
    return out;
}

std::vector<uint8_t> kv_enc_dec_roles(const program & prog) {
    bool enc_dec = false;
    for (const op_desc & op : prog.ops) enc_dec = enc_dec || op.params.count("pass");
    if (!enc_dec) return {};
    static const char * const names[] = {"", "encoder", "cross-attention", "decoder"};
    std::vector<uint8_t> role(prog.kv_k_width.size(), KV_UNUSED);
    for (size_t i = 0; i < prog.ops.size(); i++) {
        const op_desc & op = prog.ops[i];
        const std::string what = "program: op " + std::to_string(i) + ": ";
        if (op.type == OP_MLA_ATTENTION || op.type == OP_DSA_INDEX || op.type == OP_MSA_INDEX || op.type == OP_QSA_INDEX || op.type == OP_DSV4_ATTENTION || op.type == OP_DSV4_COMPRESS)
            throw error(KAIL_E_INVALID_ARG, what + "an encoder-decoder program (ops tagged pass) keeps its cache through attention ops only");
        if (op.type != OP_ATTENTION) continue;
        const double pass = op.param("pass", 0);
        if (pass != 1 && pass != 2) throw error(KAIL_E_INVALID_ARG, what + "an encoder-decoder program's attention ops each run in one pass (tagged pass 1 or 2)");
        const double l = op.param("layer", -1);
        if (!(l >= 0 && l < static_cast<double>(role.size()))) continue;  // (check_op_ranges names it)
        const uint8_t r = pass == 1 ? (op.param("store_only", 0) != 0 ? KV_CROSS : KV_ENCODER) : (op.param("cross", 0) != 0 ? KV_CROSS : KV_DECODER);
        uint8_t & have = role[static_cast<size_t>(l)];
        if (have != KV_UNUSED && have != r)
            throw error(KAIL_E_INVALID_ARG, what + "kv layer " + std::to_string(static_cast<int64_t>(l)) + " holds both " + names[have] + " and " + names[r] + " rows");
        have = r;
    }
    return role;
}

uint64_t kv_bytes_per_sequence(const program & prog, int64_t n_ctx, int64_t n_batch, uint32_t kv_type_k, uint32_t kv_type_v, bool swa_full) {
    const std::vector<uint8_t> roles = kv_enc_dec_roles(prog);
    if (!roles.empty()) {
        uint64_t row[4] = {0, 0, 0, 0};
        for (size_t l = 0; l < roles.size() && l < prog.kv_v_width.size(); l++)
            row[roles[l]] += static_cast<uint64_t>(kv_row_bytes(kv_type_k, prog.kv_k_width[l]) + kv_row_bytes(kv_type_v, prog.kv_v_width[l]));
        const uint64_t n = static_cast<uint64_t>(std::max<int64_t>(0, n_ctx));
        // Linear in the prompt's length n: the most at n = n_ctx (encoding) or n = 1 (decoding).
        return n == 0 ? 0 : std::max(n * (row[KV_ENCODER] + row[KV_CROSS]), row[KV_CROSS] + (n - 1) * row[KV_DECODER]);
    }
    const std::vector<int64_t> ring = kv_ring_rows(prog, n_ctx, n_batch, swa_full);
    uint64_t b = 0;
    const std::vector<kv_packed_layout> packed = kv_packed_layouts(prog, n_ctx, n_batch, swa_full);
    for (size_t l = 0; l < prog.kv_k_width.size() && l < prog.kv_v_width.size(); l++) {
        if (l < packed.size() && packed[l].packed()) {
            // DeepSeek-V4's packed layers: a ring's rows, or a row per block.
            const kv_packed_layout & p = packed[l];
            const int64_t n = std::max<int64_t>(0, n_ctx);
            const uint64_t rows = static_cast<uint64_t>(p.ring ? std::min(p.ring, n) : (n + p.per - 1) / p.per);
            b += static_cast<uint64_t>(kv_row_bytes(p.f32 ? KAIL_TYPE_F32 : kv_type_k, prog.kv_k_width[l])) * rows;
            continue;
        }
        const uint64_t rows = static_cast<uint64_t>(l < ring.size() && ring[l] ? 2 * ring[l] : std::max<int64_t>(0, n_ctx));
        b += static_cast<uint64_t>(kv_row_bytes(kv_type_k, prog.kv_k_width[l]) + kv_row_bytes(kv_type_v, prog.kv_v_width[l])) * rows;
    }
    // Recurrent layers keep a fixed F32 state per sequence, whatever its length.
    for (int64_t w : prog.rs_width) b += static_cast<uint64_t>(std::max<int64_t>(0, w)) * sizeof(float);
    return b;
}

void check_kv_type(const program & prog, uint32_t kv_type_k, uint32_t kv_type_v) {
    for (uint32_t t : {kv_type_k, kv_type_v})
        if (!is_kv_cache_type(t))
            throw error(KAIL_E_INVALID_ARG, "kv cache type must be F32, F16, BF16, Q8_0, Q4_0, Q4_1, IQ4_NL, Q5_0 or Q5_1");
    // A quantized cache quantizes each head's row (MLA: each latent row, in K's type, whose latent
    // part the values are read from) in blocks of 32 (llama.cpp's -ctk/-ctv q8_0, q4_0, ...):
    // those widths must be whole blocks.
    const int64_t bk = type_traits_get(kv_type_k)->block_size, bv = type_traits_get(kv_type_v)->block_size;
    for (const op_desc & op : prog.ops) {
        if (op.type == OP_MLA_ATTENTION) {
            // One latent row per position serves keys and values: one type (llama.cpp refuses
            // different K and V types for MLA models too).
            if (kv_type_k != kv_type_v)
                throw error(KAIL_E_UNSUPPORTED, std::string("this model's MLA attention keeps one latent cache for keys and values: K (") + type_name(kv_type_k) + ") and V (" + type_name(kv_type_v) + ") cache types must be the same");
            const int64_t L = static_cast<int64_t>(op.param("kv_lora", 0)), R = static_cast<int64_t>(op.param("qk_rope", 0));
            if (L % bk != 0 || (L + R) % bk != 0)
                throw error(KAIL_E_UNSUPPORTED, "a " + std::string(type_name(kv_type_k)) + " KV cache needs the MLA latent (kv_lora " + std::to_string(L) + ") and its row (kv_lora + qk_rope " + std::to_string(L + R) + ") to be multiples of " + std::to_string(bk));
            continue;
        }
        // MSA's indexer keys (MiniMax-M3): one row of head_dim per position, in K's type.
        if (op.type == OP_MSA_INDEX) {
            const int64_t hd = static_cast<int64_t>(op.param("head_dim", 0));
            if (hd % bk != 0)
                throw error(KAIL_E_UNSUPPORTED, "a " + std::string(type_name(kv_type_k)) + " K cache needs the sparse-attention indexer's key head dim to be a multiple of " + std::to_string(bk) + ", this model's is " + std::to_string(hd));
            continue;
        }
        if (op.type != OP_ATTENTION) continue;
        const int64_t hk = static_cast<int64_t>(op.param("head_dim", 0)), hv = static_cast<int64_t>(op.param("head_dim_v", static_cast<double>(hk)));
        if (hk % bk != 0)
            throw error(KAIL_E_UNSUPPORTED, "a " + std::string(type_name(kv_type_k)) + " K cache needs a key head dim that is a multiple of " + std::to_string(bk) + ", this model's is " + std::to_string(hk));
        if (hv % bv != 0)
            throw error(KAIL_E_UNSUPPORTED, "a " + std::string(type_name(kv_type_v)) + " V cache needs a value head dim that is a multiple of " + std::to_string(bv) + ", this model's is " + std::to_string(hv));
    }
}

size_t kv_row_bytes(uint32_t kv_type, int64_t width) {
    if (width <= 0) return 0;
    // A quantized cache holds whole blocks per head; widths here are head counts x head dims.
    return row_size(kv_type, width);
}

std::vector<expert_layer_source> residency_expert_sources(const gguf_file & file, const program & prog) {
    std::vector<expert_layer_source> out;
    for (const op_desc & op : prog.ops) {
        if (op.type != OP_MOE) continue;
        expert_layer_source src;
        // Gate-less experts (up and down only) have an empty gate slice: nothing read, nothing cached;
        // fused gate|up experts an empty up slice (their gate slice holds both).
        for (int s = moe_gated(op) ? 0 : 1; s < 3; s++) {
            if (s == 1 && moe_fused(op)) continue;
            auto it = op.weights.find(EXPERT_ROLES[s]);
            if (it == op.weights.end()) throw error(KAIL_E_BAD_MODEL, std::string("program: moe op without ") + EXPERT_ROLES[s]);
            const gguf_tensor_info * t = file.find_tensor(it->second);
            if (!t) throw error(KAIL_E_BAD_MODEL, "model file lacks tensor '" + it->second + "' (" + EXPERT_ROLES[s] + ")");
            const uint64_t stride = row_size(t->type, t->ne[0]) * static_cast<uint64_t>(t->ne[1]);
            if (stride == 0 || t->ne[2] < 1 || stride * static_cast<uint64_t>(t->ne[2]) > t->nbytes)
                throw error(KAIL_E_BAD_MODEL, "expert tensor '" + t->name + "' is smaller than its shape");
            if (src.n_expert == 0) src.n_expert = static_cast<int32_t>(t->ne[2]);
            else if (t->ne[2] != src.n_expert) throw error(KAIL_E_BAD_MODEL, "expert tensor '" + t->name + "' has " + std::to_string(t->ne[2]) + " experts, gate has " + std::to_string(src.n_expert));
            src.offset[s] = t->file_offset;
            src.file[s] = static_cast<int32_t>(t->split);
            src.stride[s] = stride;
        }
        out.push_back(src);
    }
    return out;
}

residency_plan residency_plan_compute(const gguf_file & file, const program & prog, const model_params & params) {
    check_kv_type(prog, params.kv_type, params.kv_type_v);
    residency_plan p;
    p.ram_budget = params.ram_budget;
    p.reserve_bytes = params.ram_reserve;
    p.n_ctx = params.n_ctx;
    p.n_seq_max = params.n_seq_max;
    p.n_batch = std::max<int64_t>(1, params.n_batch);

    // Resident weights: every tensor the program names that is not a routed expert.
    const std::set<std::string> experts = expert_tensor_names(prog);
    std::set<std::string> resident;
    for (const op_desc & op : prog.ops)
        for (auto & kv : op.weights)
            if (!experts.count(kv.second)) resident.insert(kv.second);
    for (const std::string & name : resident) {
        const gguf_tensor_info * t = file.find_tensor(name);
        if (!t) throw error(KAIL_E_BAD_MODEL, "model file lacks tensor '" + name + "'");
        p.resident_bytes += align64(t->nbytes);
        p.resident_tensors++;
    }
    for (const std::string & name : experts) p.expert_bytes += file.find_tensor(name) ? file.find_tensor(name)->nbytes : 0;

    // KV cache at full context for every sequence (sliding-window layers: their ring).
    p.kv_bytes = kv_bytes_per_sequence(prog, std::max<int64_t>(0, params.n_ctx), p.n_batch, params.kv_type, params.kv_type_v, params.swa_full) * static_cast<uint64_t>(std::max(0, params.n_seq_max));

    // Scratch for a batch: the program's buffers (output rows: one per sequence, the decode case),
    // the MoE op's temporaries, matmul's quantized activations, and the logits handed to the caller.
    const uint64_t nb = static_cast<uint64_t>(p.n_batch);
    const uint64_t n_out = std::min<uint64_t>(nb, static_cast<uint64_t>(std::max(1, params.n_seq_max)));
    uint64_t scratch = 0, max_width = 0, n_vocab = 0;
    for (size_t b = 0; b < prog.buffers.size(); b++) {
        const uint64_t w = static_cast<uint64_t>(std::max<int64_t>(0, prog.buffers[b].width));
        scratch += (prog.buffers[b].out_rows ? n_out : nb) * w * 4;
        max_width = std::max(max_width, w);
        if (static_cast<int>(b) == prog.logits) n_vocab = w;
    }
    scratch += nb * max_width * 4;        // activations quantized for one matmul
    scratch += 2 * n_out * n_vocab * 4;   // logits: the runtime's copy and the caller's
    scratch += 16 * static_cast<uint64_t>(std::max<int64_t>(0, params.n_ctx)) * 4;  // attention scores per thread

    // Experts.
    const std::vector<expert_layer_source> sources = residency_expert_sources(file, prog);
    p.n_moe_layers = static_cast<int>(sources.size());
    uint64_t moe_scratch = 0, sum_entry = 0;
    size_t moe_i = 0;
    for (const op_desc & op : prog.ops) {
        if (op.type != OP_MOE) continue;
        const expert_layer_source & src = sources[moe_i++];
        const int k = static_cast<int>(op.param("n_expert_used", 0));
        const uint64_t entry = expert_entry_bytes_max(src);
        p.n_expert = std::max(p.n_expert, src.n_expert);
        p.n_expert_min = moe_i == 1 ? src.n_expert : std::min(p.n_expert_min, src.n_expert);
        p.n_expert_total += src.n_expert;
        p.n_expert_used = std::max(p.n_expert_used, k);
        p.expert_entry_bytes = std::max(p.expert_entry_bytes, entry);
        p.min_cache_bytes = std::max(p.min_cache_bytes, entry * static_cast<uint64_t>(std::max(1, k)));
        p.cold_read_bytes_per_token += entry * static_cast<uint64_t>(std::max(0, k));
        sum_entry += entry;
        // (The gate's shape, when there is one; a fused gate|up tensor's 2 ff rows overstate ff, so
        // the estimate errs high.)
        const gguf_tensor_info * g = file.find_tensor(op.weights.at("up_exps"));
        const gguf_tensor_info * d = file.find_tensor(op.weights.at("down_exps"));
        const uint64_t dm = static_cast<uint64_t>(g->ne[0]), ff = static_cast<uint64_t>(g->ne[1]);
        const uint64_t tmp = nb * (static_cast<uint64_t>(src.n_expert) * 4 + static_cast<uint64_t>(k) * (8 + dm * 4) + row_size(vec_dot_type(g->type), g->ne[0])) +
                             nb * (2 * ff * 4 + row_size(vec_dot_type(d->type), d->ne[0]));
        moe_scratch = std::max(moe_scratch, tmp);
    }
    p.scratch_bytes = scratch + moe_scratch;
    // LoRA adapters: every pair in the files (their headers read, not their data).
    for (const lora_adapter_spec & spec : params.lora) {
        const std::unique_ptr<gguf_file> f = open_lora_adapter(spec.path, false);
        for (const gguf_tensor_info & t : f->tensors()) p.lora_bytes += align64(t.nbytes);
    }
    p.fixed_bytes = p.reserve_bytes + p.resident_bytes + p.kv_bytes + p.scratch_bytes + p.lora_bytes;
    p.cache_bytes = p.ram_budget > p.fixed_bytes ? p.ram_budget - p.fixed_bytes : 0;
    p.cache_experts = p.expert_entry_bytes ? p.cache_bytes / p.expert_entry_bytes : 0;
    p.cache_experts_per_layer = sum_entry ? static_cast<double>(p.cache_bytes) / static_cast<double>(sum_entry) : 0;
    if (p.n_moe_layers > 0 && p.expert_entry_bytes > 0) {
        p.vram_budget = params.vram_budget;
        // No more slots than there are experts: a budget past that (the profile offers a whole GPU)
        // is not allocated, and stays free for other work on the device.
        p.vram_cache_experts = std::min<uint64_t>(p.vram_budget / p.expert_entry_bytes, static_cast<uint64_t>(p.n_expert_total));
        p.vram_cache_bytes = p.vram_cache_experts * p.expert_entry_bytes;
    }
    const uint64_t need = p.fixed_bytes + p.min_cache_bytes;
    p.fits = p.ram_budget >= need;
    p.shortfall_bytes = p.fits ? 0 : need - p.ram_budget;
    if (!p.fits) {
        std::string m = "RAM budget " + format_bytes(p.ram_budget) + " (" + std::to_string(p.ram_budget) + " bytes) is " + format_bytes(p.shortfall_bytes) +
                        " short: resident weights " + format_bytes(p.resident_bytes) + " + KV cache " + format_bytes(p.kv_bytes) + " (" +
                        std::to_string(p.n_ctx) + " tokens x " + std::to_string(p.n_seq_max) + " sequence(s)) + scratch " + format_bytes(p.scratch_bytes) +
                        " (batch of " + std::to_string(p.n_batch) + ") + reserve " + format_bytes(p.reserve_bytes) +
                        (p.lora_bytes ? " + LoRA adapters " + format_bytes(p.lora_bytes) : std::string()) + " = " + format_bytes(p.fixed_bytes);
        if (p.n_moe_layers > 0)
            m += ", and the expert cache needs at least " + format_bytes(p.min_cache_bytes) + " (" + std::to_string(p.n_expert_used) + " experts of " +
                 format_bytes(p.expert_entry_bytes) + ")";
        m += "; the budget must be at least " + format_bytes(need) + " (" + std::to_string(need) + " bytes)";
        p.message = m;
    }
    return p;
}

} // namespace kail
