// Poolside Laguna (`laguna`; llama.cpp src/models/laguna.cpp, converted by conversion/laguna.py
// LagunaModel): Laguna-XS.2 (40 blocks, hybrid full / sliding attention), Laguna-S.2 (48) and
// Laguna-M.1 (70, all full attention).
//
// Keys, as the converter writes them: `attention.head_count` is ALWAYS a per-block array (HF
// num_attention_heads_per_layer, or num_attention_heads repeated; gguf-py types a list of Python ints
// INT32), `attention.head_count_kv` a UINT32 scalar (uniform), key_length = value_length = HF head_dim
// (needed: with per-block heads llama.cpp cannot derive the head size from n_embd / n_head).
// `rope.dimension_count` is the FULL blocks' rotary dims (head_dim x full_attention
// partial_rotary_factor: half the head on XS.2), `rope.dimension_count_swa` the sliding blocks' (the
// whole head on XS.2; written when HF rope_parameters has sliding_attention), `rope.freq_base` /
// `rope.freq_base_swa` their bases (XS.2: 500000 / 10000), YaRN keys from full_attention's
// rope_parameters (type yarn, factor, original_context_length; the base converter also writes
// yarn_ext_factor / yarn_attn_factor / yarn_beta_fast / yarn_beta_slow when HF has them, which
// llama.cpp's laguna loader does not read). `attention.sliding_window` only when HF sliding_window > 0
// (M.1: none, so every block is full and no SWA key is written). The converter writes no
// `attention.sliding_window_pattern`: llama.cpp then applies load_swa_pattern(4, dense_first), i.e.
// block il slides iff il % 4 != 0 (XS.2's full / SWA / SWA / SWA); an explicit BOOL array (true =
// sliding) overrides that and the writer can emit one (swaPattern). MoE keys: expert_count,
// expert_used_count, expert_feed_forward_length (HF moe_intermediate_size),
// expert_shared_feed_forward_length (HF shared_expert_intermediate_size: may differ from the routed
// size), expert_weights_norm (always true), expert_weights_scale (HF moe_routed_scaling_factor),
// expert_gating_func (always 2, sigmoid; llama.cpp defaults to sigmoid when absent),
// leading_dense_block_count (the leading "dense" entries of HF mlp_layer_types). No
// expert_shared_count (llama.cpp: 1).
//
// A block (llama.cpp's graph): attn_norm; q, k, v (q of n_head_il heads, k and v of n_head_kv),
// per-head RMS q_norm / k_norm, NeoX RoPE (full blocks: rope.dimension_count dims, freq_base, YaRN
// when present; sliding blocks: rope.dimension_count_swa dims, freq_base_swa (default freq_base),
// scale 1, no YaRN), attention with scale 1/sqrt(head) (sliding window on sliding blocks); the
// output times softplus(attn_gate . attn_norm output), attn_gate being per head ([n_embd, n_head_il],
// broadcast over the head: XS.2) or per element ([n_embd, n_head_il x head]: M.1), chosen per block
// by the tensor's width; attn_output and the residual. ffn_norm, then a SwiGLU MLP (ffn_gate/up/down
// of feed_forward_length) on the leading dense blocks, else sigmoid routing over ffn_gate_inp with the
// REQUIRED selection bias blk.N.exp_probs_b.bias, top-k weights renormalized (expert_weights_norm) and
// scaled (expert_weights_scale), SwiGLU experts of expert_feed_forward_length plus an always-on,
// ungated shared expert ffn_{gate,up,down}_shexp of expert_shared_feed_forward_length; the residual.
// output_norm, and output.weight (optional: llama.cpp falls back to token_embd when absent).
import { embeddings, linear, linearInit, moeFfn, norm, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { GgufType } from '../../gguf/constants';
import { kv } from '../../gguf/writer';
import type { GgufValue } from '../../gguf/writer';
import { checkExperts } from './common';
import { ungatedSharedExpert } from './deepseek2';
import { probsBias } from './llama-moe';

/** The attention output gate's layout: one scalar per head (XS.2) or one per output element (M.1). */
export type LagunaGateKind = 'head' | 'element';

/**
 * Full-attention blocks' YaRN (HF rope_parameters.full_attention of rope_type yarn): written as
 * rope.scaling.type yarn, rope.scaling.factor and rope.scaling.original_context_length; the optional
 * ones as rope.scaling.yarn_* (FLOAT32), which the base converter writes when HF has them but
 * llama.cpp's laguna loader ignores (it keeps the context defaults).
 */
export interface LagunaYarn {
  factor: number;
  origCtx: number;
  extFactor?: number;
  attnFactor?: number;
  betaFast?: number;
  betaSlow?: number;
}

/**
 * nHeads: the query heads of full-attention blocks (every block when there is no window); nHeadsSwa:
 * the sliding blocks' (default nHeads); headsPerLayer: explicit per-block heads instead of those two
 * (length nLayers). nKvHeads is uniform (the KV cache shape is shared). headDim: every block's head
 * size. window: attention.sliding_window (0 or absent: no SWA keys, every block full). swaPattern:
 * an explicit attention.sliding_window_pattern (BOOL per block, true = sliding; length nLayers);
 * absent: no key, llama.cpp's default (block i slides iff i % 4 != 0), which the writer follows for
 * the per-block heads too and which --layers N keeps. ropeDims: rope.dimension_count (full blocks);
 * ropeDimsSwa: rope.dimension_count_swa (absent: not written, llama.cpp uses ropeDims);
 * ropeBaseSwa: rope.freq_base_swa (absent: not written, llama.cpp uses ropeBase). gate: the
 * attn_gate layout, one for every block or one per block. nDense: leading dense blocks (cut to
 * nLayers). wScale / normW: expert_weights_scale / expert_weights_norm. gating:
 * expert_gating_func (sigmoid 2, softmax 1; absent: not written, llama.cpp takes sigmoid).
 * scalarHeadCount: write attention.head_count as one UINT32 (uniform heads only) instead of the
 * converter's INT32 array. yarn: YaRN of the full blocks. biasStd: exp_probs_b's std (default 0.05).
 */
export type LagunaConfig = ModelConfig & {
  headDim: number;
  nHeadsSwa?: number;
  headsPerLayer?: number[];
  window?: number;
  swaPattern?: boolean[];
  ropeDims: number;
  ropeDimsSwa?: number;
  ropeBaseSwa?: number;
  gate: LagunaGateKind | LagunaGateKind[];
  nDense: number;
  wScale: number;
  normW: boolean;
  gating?: 'sigmoid' | 'softmax';
  scalarHeadCount?: boolean;
  yarn?: LagunaYarn;
  biasStd?: number;
};

/** Whether block i slides (llama.cpp: an explicit pattern, else load_swa_pattern(4, dense_first)). */
export function lagunaIsSwa(c: LagunaConfig, i: number): boolean {
  if (!((c.window ?? 0) > 0)) return false;
  return c.swaPattern ? c.swaPattern[i] : i % 4 !== 0;
}

/** Block i's query heads. */
export function lagunaHeads(c: LagunaConfig, i: number): number {
  if (c.headsPerLayer) return c.headsPerLayer[i];
  return lagunaIsSwa(c, i) ? (c.nHeadsSwa ?? c.nHeads) : c.nHeads;
}

/** Block i's attn_gate layout. */
export function lagunaGateKind(c: LagunaConfig, i: number): LagunaGateKind {
  return typeof c.gate === 'string' ? c.gate : c.gate[i];
}

const isPosInt = (x: unknown): x is number => typeof x === 'number' && Number.isInteger(x) && x > 0;
const GATE_KINDS: readonly string[] = ['head', 'element'];

function checkRopeDims(field: string, v: unknown, headDim: number): void {
  if (!isPosInt(v) || v % 2 !== 0 || v > headDim) throw new Error(`laguna: ${field} must be a positive even number of dims at most headDim ${headDim} (RoPE rotates pairs), got ${String(v)}`);
}

// Scales, as step35 (the nearest relative): router logits of std ~2 over the normed input (moeFfn),
// writers into the stream at residualGain, the routed mix's writer at residualGain / wScale (it is
// renormalized and then multiplied by expert_weights_scale, so the scaled mix joins the stream as the
// other writers; a reader that drops the scale is off by wScale on every routed block), q/k norms
// ~1, the gate projection at unit gain over the normed input (gate logits of std ~1: softplus
// ~0.3..2, mean ~0.8, per head or per element).
export const laguna: ArchDefinition = {
  name: 'laguna',
  ggufArch: 'laguna',
  normalize(c: ModelConfig): ModelConfig {
    const l = c as LagunaConfig;
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx', 'expertFf', 'sharedFf']);
    checkExperts(c, true); // (its loader creates the routed tensors unconditionally past the dense lead)
    if (!isPosInt(l.headDim)) throw new Error(`laguna: headDim must be a positive integer (use a preset), got ${String(l.headDim)}`);
    if (l.nHeadsSwa !== undefined && !isPosInt(l.nHeadsSwa)) throw new Error(`laguna: nHeadsSwa must be a positive integer (or absent: nHeads), got ${String(l.nHeadsSwa)}`);
    const window = l.window ?? 0;
    if (!(Number.isInteger(window) && window >= 0)) throw new Error(`laguna: window must be a non-negative integer (0: no sliding window), got ${String(l.window)}`);
    if (l.swaPattern !== undefined) {
      if (window === 0) throw new Error('laguna: swaPattern needs window > 0 (llama.cpp reads the pattern only with attention.sliding_window)');
      if (!Array.isArray(l.swaPattern) || l.swaPattern.length !== c.nLayers) {
        throw new Error(`laguna: swaPattern must have one flag per block (${c.nLayers}), got ${Array.isArray(l.swaPattern) ? `length ${l.swaPattern.length}` : String(l.swaPattern)}`);
      }
      l.swaPattern.forEach((x, i) => {
        if (typeof x !== 'boolean') throw new Error(`laguna: swaPattern[${i}] must be a boolean (true = sliding), got ${String(x)}`);
      });
    }
    if (l.headsPerLayer !== undefined) {
      if (!Array.isArray(l.headsPerLayer) || l.headsPerLayer.length !== c.nLayers) {
        throw new Error(`laguna: headsPerLayer must have one head count per block (${c.nLayers}), got ${Array.isArray(l.headsPerLayer) ? `length ${l.headsPerLayer.length}` : String(l.headsPerLayer)}`);
      }
      l.headsPerLayer.forEach((h, i) => {
        if (!isPosInt(h)) throw new Error(`laguna: headsPerLayer[${i}] must be a positive integer, got ${String(h)}`);
      });
    }
    if (l.headDim % 2 !== 0) throw new Error(`laguna: headDim ${l.headDim} must be even (RoPE rotates pairs)`);
    checkRopeDims('ropeDims', l.ropeDims, l.headDim);
    if (l.ropeDimsSwa !== undefined) checkRopeDims('ropeDimsSwa', l.ropeDimsSwa, l.headDim);
    if (l.ropeBaseSwa !== undefined && !(l.ropeBaseSwa > 0)) throw new Error(`laguna: ropeBaseSwa must be positive (or absent: ropeBase), got ${String(l.ropeBaseSwa)}`);
    if (!(c.ropeBase > 0)) throw new Error(`laguna: ropeBase must be positive, got ${String(c.ropeBase)}`);
    if (typeof l.gate === 'string' || l.gate === undefined) {
      if (!GATE_KINDS.includes(l.gate as string)) throw new Error(`laguna: gate must be 'head' or 'element' (or one per block), got ${String(l.gate)}`);
    } else {
      if (!Array.isArray(l.gate)) throw new Error(`laguna: gate must be 'head' or 'element' (or one per block), got ${String(l.gate)}`);
      if (l.gate.length !== c.nLayers) throw new Error(`laguna: gate must have one kind per block (${c.nLayers}), got length ${l.gate.length}`);
      l.gate.forEach((g, i) => {
        if (!GATE_KINDS.includes(g)) throw new Error(`laguna: gate[${i}] must be 'head' or 'element', got ${String(g)}`);
      });
    }
    if (!Number.isInteger(l.nDense) || l.nDense < 0) throw new Error(`laguna: nDense must be a non-negative integer, got ${String(l.nDense)}`);
    if (!(l.wScale > 0) || !Number.isFinite(l.wScale)) throw new Error(`laguna: wScale must be positive, got ${String(l.wScale)}`);
    if (typeof l.normW !== 'boolean') throw new Error(`laguna: normW must be a boolean (use a preset), got ${String(l.normW)}`);
    if (l.gating !== undefined && l.gating !== 'sigmoid' && l.gating !== 'softmax') throw new Error(`laguna: gating must be 'sigmoid' or 'softmax' (or absent: sigmoid), got ${String(l.gating)}`);
    if (l.biasStd !== undefined && !(l.biasStd >= 0)) throw new Error(`laguna: biasStd must be >= 0, got ${String(l.biasStd)}`);
    const y = l.yarn ?? undefined;
    if (y !== undefined) {
      if (typeof y !== 'object' || y === null) throw new Error(`laguna: yarn must be an object of YaRN options (or absent), got ${String(y)}`);
      if (!(y.factor >= 1) || !Number.isFinite(y.factor)) throw new Error(`laguna: yarn.factor must be >= 1, got ${String(y.factor)}`);
      if (!isPosInt(y.origCtx)) throw new Error(`laguna: yarn.origCtx must be a positive integer, got ${String(y.origCtx)}`);
      for (const f of ['extFactor', 'attnFactor', 'betaFast', 'betaSlow'] as const) {
        if (y[f] !== undefined && !(Number.isFinite(y[f]) && y[f] >= 0)) throw new Error(`laguna: yarn.${f} must be a finite number >= 0 (or absent), got ${String(y[f])}`);
      }
    }
    const n = { ...l, window, yarn: y, nDense: Math.min(l.nDense, c.nLayers) } as LagunaConfig;
    // Every block's query heads group over the shared KV heads.
    for (let i = 0; i < c.nLayers; i++) {
      const h = lagunaHeads(n, i);
      const field = l.headsPerLayer ? `headsPerLayer[${i}]` : lagunaIsSwa(n, i) && l.nHeadsSwa !== undefined ? 'nHeadsSwa' : 'nHeads';
      if (h % c.nKvHeads !== 0) throw new Error(`laguna: ${field} ${h} (block ${i}) not divisible by kv heads ${c.nKvHeads}`);
    }
    if (l.scalarHeadCount) {
      const hs = Array.from({ length: c.nLayers }, (_, i) => lagunaHeads(n, i));
      if (hs.some((h) => h !== hs[0])) throw new Error(`laguna: scalarHeadCount needs the same heads on every block, got [${hs.join(', ')}]`);
    }
    return n;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const l = c as LagunaConfig;
    const a = 'laguna';
    const heads = Array.from({ length: c.nLayers }, (_, i) => lagunaHeads(l, i));
    const m: [string, GgufValue][] = [
      [`${a}.vocab_size`, kv.u32(c.vocabSize)],
      [`${a}.context_length`, kv.u32(c.ctx)],
      [`${a}.embedding_length`, kv.u32(c.dim)],
      [`${a}.block_count`, kv.u32(c.nLayers)],
      [`${a}.feed_forward_length`, kv.u32(c.ff)],
      [`${a}.attention.head_count`, l.scalarHeadCount ? kv.u32(heads[0]) : kv.arr(GgufType.INT32, heads)],
      [`${a}.attention.head_count_kv`, kv.u32(c.nKvHeads)],
      [`${a}.attention.key_length`, kv.u32(l.headDim)],
      [`${a}.attention.value_length`, kv.u32(l.headDim)],
      [`${a}.attention.layer_norm_rms_epsilon`, kv.f32(c.normEps)],
      [`${a}.rope.freq_base`, kv.f32(c.ropeBase)],
      [`${a}.rope.dimension_count`, kv.u32(l.ropeDims)],
    ];
    const y = l.yarn;
    if (y) {
      m.push(
        [`${a}.rope.scaling.type`, kv.str('yarn')],
        [`${a}.rope.scaling.factor`, kv.f32(y.factor)],
        [`${a}.rope.scaling.original_context_length`, kv.u32(y.origCtx)],
      );
      if (y.extFactor !== undefined) m.push([`${a}.rope.scaling.yarn_ext_factor`, kv.f32(y.extFactor)]);
      if (y.attnFactor !== undefined) m.push([`${a}.rope.scaling.yarn_attn_factor`, kv.f32(y.attnFactor)]);
      if (y.betaFast !== undefined) m.push([`${a}.rope.scaling.yarn_beta_fast`, kv.f32(y.betaFast)]);
      if (y.betaSlow !== undefined) m.push([`${a}.rope.scaling.yarn_beta_slow`, kv.f32(y.betaSlow)]);
    }
    if (l.ropeBaseSwa !== undefined) m.push([`${a}.rope.freq_base_swa`, kv.f32(l.ropeBaseSwa)]);
    if (l.ropeDimsSwa !== undefined) m.push([`${a}.rope.dimension_count_swa`, kv.u32(l.ropeDimsSwa)]);
    if ((l.window ?? 0) > 0) m.push([`${a}.attention.sliding_window`, kv.u32(l.window!)]);
    if (l.swaPattern) m.push([`${a}.attention.sliding_window_pattern`, kv.arr(GgufType.BOOL, l.swaPattern)]);
    m.push(
      [`${a}.expert_count`, kv.u32(c.nExperts)],
      [`${a}.expert_used_count`, kv.u32(c.nExpertsUsed)],
      [`${a}.expert_feed_forward_length`, kv.u32(c.expertFf)],
      [`${a}.expert_shared_feed_forward_length`, kv.u32(c.sharedFf)],
      [`${a}.expert_weights_norm`, kv.bool(l.normW)],
      [`${a}.expert_weights_scale`, kv.f32(l.wScale)],
    );
    if (l.gating) m.push([`${a}.expert_gating_func`, kv.u32(l.gating === 'softmax' ? 1 : 2)]);
    m.push([`${a}.leading_dense_block_count`, kv.u32(l.nDense)]);
    return m;
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const l = c as LagunaConfig;
    const t = embeddings(c);
    const hd = l.headDim;
    const nKv = hd * c.nKvHeads;
    for (let i = 0; i < c.nLayers; i++) {
      const p = `blk.${i}`;
      const nH = lagunaHeads(l, i);
      const nQ = hd * nH;
      t.push(
        norm(`${p}.attn_norm.weight`, c.dim, i),
        linear(`${p}.attn_q.weight`, c.dim, nQ, 'attn_q', i),
        linear(`${p}.attn_k.weight`, c.dim, nKv, 'attn_k', i),
        linear(`${p}.attn_v.weight`, c.dim, nKv, 'attn_v', i),
        norm(`${p}.attn_q_norm.weight`, hd, i),
        norm(`${p}.attn_k_norm.weight`, hd, i),
        linear(`${p}.attn_gate.weight`, c.dim, lagunaGateKind(l, i) === 'head' ? nH : nQ, 'attn_q', i),
        linear(`${p}.attn_output.weight`, nQ, c.dim, 'attn_output', i, residualGain(c)),
        norm(`${p}.ffn_norm.weight`, c.dim, i),
      );
      if (i < l.nDense) {
        t.push(
          linear(`${p}.ffn_gate.weight`, c.dim, c.ff, 'ffn_gate', i),
          linear(`${p}.ffn_up.weight`, c.dim, c.ff, 'ffn_up', i),
          linear(`${p}.ffn_down.weight`, c.ff, c.dim, 'ffn_down', i, residualGain(c)),
        );
        continue;
      }
      // moeFfn's router and experts (without its ffn_norm, pushed above); the routed mix is scaled
      // by wScale after renormalization, so its writer is at residualGain / wScale.
      const down = linearInit(c.expertFf, residualGain(c) / l.wScale);
      const routed = moeFfn(c, i, c.expertFf)
        .filter((x) => x.role !== 'norm')
        .map((x) => (x.role === 'ffn_down' ? { ...x, init: down } : x));
      const bias = probsBias(c, i);
      if (l.biasStd !== undefined) bias.init = { kind: 'normal', std: l.biasStd };
      t.push(...routed, bias, ...ungatedSharedExpert(c, i, c.sharedFf));
    }
    return t;
  },
};
