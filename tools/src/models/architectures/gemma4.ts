// Google Gemma 4 (`gemma4`: Gemma-4-26B-A4B, -31B, -E2B, -E4B; llama.cpp src/models/gemma4.cpp,
// converted by conversion/gemma.py Gemma4Model on top of Gemma3Model). Blocks are sliding-window
// or full attention, per the BOOL array `attention.sliding_window_pattern` (true = sliding), and
// the two kinds have their own head size and KV head count: key_length / value_length and
// rope.dimension_count are the FULL blocks' head size (HF global_head_dim), key_length_swa /
// value_length_swa and rope.dimension_count_swa the sliding blocks' (HF head_dim), and
// `attention.head_count_kv` is an array per block (HF num_key_value_heads on sliding blocks,
// num_global_key_value_heads on full ones). Sliding blocks rotate with rope.freq_base_swa (1e4),
// full blocks with rope.freq_base (1e6) and "proportional" RoPE: NeoX over the whole head, with
// the global `rope_freqs.weight` factors (head/2 of them: 1 on the first quarter of the pairs, 1e30,
// i.e. no rotation, on the rest) loaded by every full block.
//
// A block (llama.cpp's graph): attn_norm; q = attn_q, per-head RMS q_norm, RoPE; k = attn_k with
// k_norm and RoPE, v = attn_v (or, where the file has no attn_v, k's projection: HF
// attention_k_eq_v, the full blocks of 26B-A4B) RMS-normed without a weight; attention with scale
// 1 (no 1/sqrt(head)); attn_output, then post_attention_norm before the residual. The FFN: ffn_norm
// then a GELU-gated MLP (ffn_gate/up/down) and post_ffw_norm. On MoE blocks (those with
// ffn_gate_inp) that MLP is the shared expert, normed by post_ffw_norm_1, and beside it
// pre_ffw_norm_2 -> softmax top-k experts (renormalized) -> each expert's output times its
// ffn_down_exps.scale (HF router.per_expert_scale) -> post_ffw_norm_2; the two are added and then
// post_ffw_norm'd. The router reads rms_norm(x) / sqrt(n_embd) * ffn_gate_inp.scale (HF
// router.scale). Experts are either fused (ffn_gate_up_exps {n_embd, 2 x n_ff_exp, n_expert}: per
// expert the gate rows, then the up rows) or split (ffn_gate_exps, ffn_up_exps). With per-layer
// embeddings (embedding_length_per_layer_input n_epl > 0, E2B / E4B) each block then adds
// post_norm(proj(gelu(inp_gate(x)) * ple_i)), ple_i being block i's slice of
// (rms_norm(per_layer_model_proj(x0) / sqrt(n_embd)) * per_layer_proj_norm
// + per_layer_token_embd[token] * sqrt(n_epl)) / sqrt(2). Finally the whole residual is multiplied
// by layer_output_scale (HF layer_scalar). The input embedding is scaled by sqrt(n_embd), the head
// is tied to token_embd (no output.weight) and the logits are soft-capped by
// final_logit_softcapping (tanh). Norm weights are used as they are (Gemma4Model.norm_shift is 0:
// no +1 as in Gemma 3).
//
// Shared KV (attention.shared_kv_layers s > 0, E2B / E4B): the last s blocks have no attn_k,
// attn_v or attn_k_norm and read the cache of block n_layer - s - 2 if they are sliding, else of
// block n_layer - s - 1, so those two must be sliding and full. With HF use_double_wide_mlp those
// blocks' MLP is twice as wide, which the converter writes as a feed_forward_length array.
import { f32Tensor, linear, linearInit, norm, NORM_INIT, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec, WeightInit } from '../arch';
import { GgufType } from '../../gguf/constants';
import { kv, type GgufValue } from '../../gguf/writer';
import { checkExperts } from './common';

/**
 * headDim / nKvHeads: the sliding blocks' head size and KV heads (HF head_dim,
 * num_key_value_heads); headDimFull / nKvHeadsFull the full blocks' (global_head_dim,
 * num_global_key_value_heads). swaPattern: per block, true = sliding window of `window` positions
 * (with --layers N the preset's pattern is repeated or cut to N blocks and the last made full, as
 * Gemma 4's layer_types always end with a full block). ropeBaseSwa: the sliding blocks' RoPE base.
 * kEqV: the full blocks have no attn_v (V is K's projection; HF attention_k_eq_v). fusedGateUp: the
 * experts as ffn_gate_up_exps rather than ffn_gate_exps + ffn_up_exps. nEmbdPerLayer: per-layer
 * embedding width (0: none). sharedKvLayers: trailing blocks that reuse earlier caches.
 * doubleWideMlp: those blocks' MLP is 2 x ff. softcap: final_logit_softcapping. nExperts > 0 puts
 * experts (of expertFf) beside the MLP on every block.
 */
export type Gemma4Config = ModelConfig & {
  headDim: number;
  headDimFull: number;
  nKvHeadsFull: number;
  swaPattern: boolean[];
  window: number;
  ropeBaseSwa: number;
  kEqV: boolean;
  fusedGateUp: boolean;
  nEmbdPerLayer: number;
  sharedKvLayers: number;
  doubleWideMlp: boolean;
  softcap: number;
};

/** HF rope_parameters.full_attention.partial_rotary_factor: the full blocks rotate a quarter of each head. */
const FULL_ROTARY_FRACTION = 0.25;

/** Smallest block of the quantized types (Q8_0, Q4_0, Q5_0): rows not a multiple of it cannot be quantized. */
const QUANT_BLOCK = 32;

const hd = (c: Gemma4Config, i: number) => (c.swaPattern[i] ? c.headDim : c.headDimFull);
const kvHeads = (c: Gemma4Config, i: number) => (c.swaPattern[i] ? c.nKvHeads : c.nKvHeadsFull);
/** Blocks at or after this index reuse an earlier block's KV cache. */
const firstShared = (c: Gemma4Config) => c.nLayers - c.sharedKvLayers;
const ffAt = (c: Gemma4Config, i: number) => (c.doubleWideMlp && i >= firstShared(c) ? 2 * c.ff : c.ff);

// Scales. Every sub-layer's output is RMS-normed before it joins the residual stream, so the
// projections' scale does not matter there; the post-norm gains play the part residualGain plays
// elsewhere. Measured in llama.cpp over 64 tokens (F32 vs Q8_0 logits NMSE of tiny-gemma4 /
// tiny-gemma4-split / tiny-gemma4-e; mean cosine of the centred logit rows of a 30-block
// bench-gemma4-26b-a4b-shaped cut down to dim 1024 with 16 experts, a proxy for how alike the
// final hidden states of different tokens are, 0 = unrelated):
// - all norm gains ~1 and layer scales over [0.5, 1): NMSE 0.3 / 0.24 / 5e-2, F32 and Q8_0 picking
//   the same top-1 token at 23 / 30 / 46 of 64 positions: chaotic, as near-one-hot attention
//   (scale 1 over RMS-normed q and k: scores of std sqrt(head), 4 to 22 over these heads) feeds
//   unit-scale writes.
// - q/k gains of head^-1/4 and layer scales over [0.75, 1): 9e-3 / 2e-2 / 1.9e-3, but the 30-block
//   model's mean cosine 0.65: diffuse attention writes the same averaged vector into every token's
//   stream at unit scale, so deep states (and routers) see one shared direction.
// - and post_attention_norm gains of 1/sqrt(2L) (residualGain): cosine 0.005, 64 distinct top-1
//   tokens of 64; 1.4e-2 / 2.9e-2 / 1.5e-3.
// - and post_ffw_norm_2 gains of 0.5 (the experts' half of a MoE block's FFN: a near-tie in the
//   top-k that flips one expert then moves the block half as much): 3.8e-3 / 5.8e-3 / 1.6e-3 (top-1
//   alike 61 / 61 / 63 of 64), cosine 0.009, as other tied-head presets (tiny-lfm2moe 3.3e-3,
//   tiny-deepseek-moe 1.2e-3). Kept.
// Other norm gains stay ~1 (NORM_INIT): the graph uses them as they are, not 1 + w as Gemma 3.

/**
 * HF layer_scalar (layer_output_scale.weight, F32 [1]): a fixed value per block in [0.75, 1),
 * spread by the golden ratio. It scales the whole residual stream, while every sub-layer adds a
 * post-normed vector of gain <= 1, so the stream keeps an O(1) scale at any depth.
 */
const layerScale = (i: number) => 0.75 + 0.25 * (((i + 1) * 0.6180339887498949) % 1);

/** Norm gains around `mean` (std a tenth of it, as NORM_INIT around 1). */
const gainInit = (mean: number): WeightInit => ({ kind: 'normal', mean, std: 0.1 * mean });

/** attn_q_norm / attn_k_norm: head^-1/4 each, so q.k over RMS-normed heads has std ~1 (see above). */
const qkNormInit = (h: number): WeightInit => gainInit(h ** -0.25);

/**
 * The per-layer-embedding tensors whose rows are n_epl (or n_epl x n_layer) wide: kept F32 when no
 * quantized block fits the row (the tiny presets' n_epl of 8), where llama-quant would fall back to
 * F16; quantized like any weight otherwise (E2B's 256).
 */
const fitRows = (s: TensorSpec): TensorSpec => (s.shape[0] % QUANT_BLOCK === 0 ? s : { ...s, role: 'bias' });

export const gemma4: ArchDefinition = {
  name: 'gemma4',
  ggufArch: 'gemma4',
  normalize(c: ModelConfig): ModelConfig {
    const g = c as Gemma4Config;
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx']);
    checkExperts(c, false);
    if (c.nExperts > 0) requirePositive(c, ['expertFf']);
    for (const f of ['headDim', 'headDimFull', 'nKvHeadsFull', 'window'] as const) {
      if (!Number.isInteger(g[f]) || g[f] <= 0) throw new Error(`gemma4: ${f} must be a positive integer (use a preset), got ${String(g[f])}`);
    }
    if (c.nHeads % c.nKvHeads !== 0 || c.nHeads % g.nKvHeadsFull !== 0) throw new Error(`gemma4: heads ${c.nHeads} not divisible by kv heads ${c.nKvHeads} / ${g.nKvHeadsFull}`);
    if (g.headDim % 2 !== 0) throw new Error(`gemma4: sliding head size ${g.headDim} must be even for RoPE`);
    // A quarter of the full head's dims rotate, in whole pairs (rope_freqs' ones).
    if ((g.headDimFull * FULL_ROTARY_FRACTION) % 2 !== 0) throw new Error(`gemma4: full head size ${g.headDimFull} must be a multiple of 8 (a quarter of it rotates, in pairs)`);
    if (!Array.isArray(g.swaPattern) || g.swaPattern.length === 0) throw new Error('gemma4: swaPattern needs one entry per block (use a preset)');
    if (!(g.ropeBaseSwa > 0) || !(g.softcap >= 0)) throw new Error('gemma4: ropeBaseSwa must be positive and softcap non-negative');
    const s = g.sharedKvLayers ?? 0;
    const epl = g.nEmbdPerLayer ?? 0;
    if (!Number.isInteger(s) || s < 0 || !Number.isInteger(epl) || epl < 0) throw new Error('gemma4: sharedKvLayers and nEmbdPerLayer must be non-negative integers');
    // --layers N: the preset's pattern, repeated or cut to N blocks, ending with a full block.
    let pattern = g.swaPattern;
    if (pattern.length !== c.nLayers) {
      pattern = Array.from({ length: c.nLayers }, (_, i) => g.swaPattern[i % g.swaPattern.length]);
      pattern[c.nLayers - 1] = false;
    }
    if (!pattern.includes(false)) throw new Error('gemma4: needs at least one full-attention block (they load rope_freqs)');
    if (s > 0) {
      const n = c.nLayers;
      // llama.cpp: block il >= n - s reads block n - s - 2 (sliding) or n - s - 1 (full).
      if (n - s < 2 || !pattern[n - s - 2] || pattern[n - s - 1]) {
        throw new Error(`gemma4: with ${s} shared-KV blocks of ${n}, block ${n - s - 2} must be sliding and block ${n - s - 1} full (the blocks whose caches they reuse)`);
      }
    }
    // The head is always token_embd (the loader's fallback when there is no output.weight).
    return { ...c, tiedEmbeddings: true, swaPattern: pattern, sharedKvLayers: s, nEmbdPerLayer: epl, kEqV: !!g.kEqV, fusedGateUp: !!g.fusedGateUp, doubleWideMlp: !!g.doubleWideMlp } as Gemma4Config;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const g = c as Gemma4Config;
    const a = 'gemma4';
    const layers = g.swaPattern.map((_, i) => i);
    const m: [string, GgufValue][] = [
      [`${a}.vocab_size`, kv.u32(c.vocabSize)],
      [`${a}.context_length`, kv.u32(c.ctx)],
      [`${a}.embedding_length`, kv.u32(c.dim)],
      [`${a}.block_count`, kv.u32(c.nLayers)],
      // A per-block array (INT32, as gguf-py writes Python ints) only with use_double_wide_mlp.
      [`${a}.feed_forward_length`, g.doubleWideMlp && g.sharedKvLayers > 0 ? kv.arr(GgufType.INT32, layers.map((i) => ffAt(g, i))) : kv.u32(c.ff)],
      [`${a}.attention.head_count`, kv.u32(c.nHeads)],
      [`${a}.attention.head_count_kv`, kv.arr(GgufType.INT32, layers.map((i) => kvHeads(g, i)))],
      [`${a}.attention.layer_norm_rms_epsilon`, kv.f32(c.normEps)],
      [`${a}.attention.key_length`, kv.u32(g.headDimFull)],
      [`${a}.attention.value_length`, kv.u32(g.headDimFull)],
      [`${a}.attention.key_length_swa`, kv.u32(g.headDim)],
      [`${a}.attention.value_length_swa`, kv.u32(g.headDim)],
      [`${a}.rope.dimension_count`, kv.u32(g.headDimFull)],
      [`${a}.rope.dimension_count_swa`, kv.u32(g.headDim)],
      [`${a}.rope.freq_base`, kv.f32(c.ropeBase)],
      [`${a}.rope.freq_base_swa`, kv.f32(g.ropeBaseSwa)],
      [`${a}.attention.sliding_window`, kv.u32(g.window)],
      [`${a}.attention.sliding_window_pattern`, kv.arr(GgufType.BOOL, g.swaPattern)],
      [`${a}.attention.shared_kv_layers`, kv.u32(g.sharedKvLayers)],
      [`${a}.embedding_length_per_layer_input`, kv.u32(g.nEmbdPerLayer)],
    ];
    if (g.softcap > 0) m.push([`${a}.final_logit_softcapping`, kv.f32(g.softcap)]);
    if (c.nExperts > 0) {
      m.push([`${a}.expert_count`, kv.u32(c.nExperts)], [`${a}.expert_used_count`, kv.u32(c.nExpertsUsed)], [`${a}.expert_feed_forward_length`, kv.u32(c.expertFf)]);
    }
    return m;
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const g = c as Gemma4Config;
    const L = c.nLayers;
    const epl = g.nEmbdPerLayer;
    const e = c.nExperts;
    // Tied head: token_embd makes the logits, so it gets the output scale (std 2/sqrt(dim): the
    // graph's sqrt(dim) input scale makes the embedding std 2, and logits over the normed state
    // std ~2, far below the soft cap).
    const t: TensorSpec[] = [{ name: 'token_embd.weight', shape: [c.dim, c.vocabSize], init: linearInit(c.dim, 2), role: 'token_embd' }];
    if (epl > 0) {
      t.push(
        // Scaled by sqrt(n_epl) in the graph: unit scale.
        fitRows({ name: 'per_layer_token_embd.weight', shape: [epl * L, c.vocabSize], init: linearInit(epl), role: 'token_embd' }),
        // llama-quant never quantizes per_layer_model_proj: F32 in every file here. RMS-normed after it.
        f32Tensor('per_layer_model_proj.weight', [c.dim, epl * L], linearInit(c.dim)),
        norm('per_layer_proj_norm.weight', epl),
      );
    }
    t.push(norm('output_norm.weight', c.dim));
    const nRot = (g.headDimFull * FULL_ROTARY_FRACTION) / 2;
    t.push(f32Tensor('rope_freqs.weight', [g.headDimFull / 2], { kind: 'step', n: nRot, head: 1, tail: 1e30 }));
    for (let i = 0; i < L; i++) {
      const p = `blk.${i}`;
      const h = hd(g, i);
      const nQ = h * c.nHeads;
      const nKv = h * kvHeads(g, i);
      const hasKv = i < firstShared(g);
      const ff = ffAt(g, i);
      t.push(norm(`${p}.attn_norm.weight`, c.dim, i), linear(`${p}.attn_q.weight`, c.dim, nQ, 'attn_q', i));
      if (hasKv) {
        t.push(linear(`${p}.attn_k.weight`, c.dim, nKv, 'attn_k', i));
        if (!(g.kEqV && !g.swaPattern[i])) t.push(linear(`${p}.attn_v.weight`, c.dim, nKv, 'attn_v', i));
      }
      t.push(linear(`${p}.attn_output.weight`, nQ, c.dim, 'attn_output', i, residualGain(c)), { ...norm(`${p}.attn_q_norm.weight`, h, i), init: qkNormInit(h) });
      if (hasKv) t.push({ ...norm(`${p}.attn_k_norm.weight`, h, i), init: qkNormInit(h) });
      t.push(
        { ...norm(`${p}.post_attention_norm.weight`, c.dim, i), init: gainInit(residualGain(c)) },
        f32Tensor(`${p}.layer_output_scale.weight`, [1], { kind: 'const', value: layerScale(i) }, i),
        norm(`${p}.ffn_norm.weight`, c.dim, i),
        linear(`${p}.ffn_gate.weight`, c.dim, ff, 'ffn_gate', i),
        linear(`${p}.ffn_up.weight`, c.dim, ff, 'ffn_up', i),
        linear(`${p}.ffn_down.weight`, ff, c.dim, 'ffn_down', i, residualGain(c)),
        norm(`${p}.post_ffw_norm.weight`, c.dim, i),
      );
      if (e > 0) {
        const xf = c.expertFf;
        const experts: TensorSpec[] = g.fusedGateUp
          ? [{ name: `${p}.ffn_gate_up_exps.weight`, shape: [c.dim, 2 * xf, e], init: linearInit(c.dim), role: 'ffn_gate', layer: i }]
          : [
              { name: `${p}.ffn_gate_exps.weight`, shape: [c.dim, xf, e], init: linearInit(c.dim), role: 'ffn_gate', layer: i },
              { name: `${p}.ffn_up_exps.weight`, shape: [c.dim, xf, e], init: linearInit(c.dim), role: 'ffn_up', layer: i },
            ];
        t.push(
          // The router's input is rms_norm(x) / sqrt(dim) * scale (scale ~1): a vector of norm ~1, so
          // weights of std 2 give logits of std ~2, as moeFfn's router over unit-scale inputs (the
          // other bench presets' balanced routing: the top-k changes from token to token without
          // collapsing onto a few experts).
          { name: `${p}.ffn_gate_inp.weight`, shape: [c.dim, e], init: { kind: 'normal', std: 2 }, role: 'router', layer: i },
          { name: `${p}.ffn_gate_inp.scale`, shape: [c.dim], init: NORM_INIT, role: 'norm', layer: i },
          norm(`${p}.pre_ffw_norm_2.weight`, c.dim, i),
          norm(`${p}.post_ffw_norm_1.weight`, c.dim, i),
          { ...norm(`${p}.post_ffw_norm_2.weight`, c.dim, i), init: gainInit(0.5) },
          ...experts,
          { name: `${p}.ffn_down_exps.weight`, shape: [xf, c.dim, e], init: linearInit(xf, residualGain(c)), role: 'ffn_down', layer: i },
          // HF router.per_expert_scale: 0.5 .. 1.5 across the experts.
          f32Tensor(`${p}.ffn_down_exps.scale`, [e], { kind: 'ramp', start: 0.5, step: 1 / e }, i),
        );
      }
      if (epl > 0) {
        // llama-quant files inp_gate and proj under no category (the default type): roles of that rule.
        t.push(
          linear(`${p}.inp_gate.weight`, c.dim, epl, 'ffn_gate', i),
          fitRows(linear(`${p}.proj.weight`, epl, c.dim, 'ffn_up', i)),
          norm(`${p}.post_norm.weight`, c.dim, i),
        );
      }
    }
    return t;
  },
};
