// StepFun Step-3.5-Flash (`step35`; llama.cpp src/models/step35.cpp, converted by
// conversion/step3.py Step35Model). Blocks are full attention or sliding-window attention (HF
// layer_types), and the two kinds have their own head counts: `attention.head_count` and
// `attention.head_count_kv` are INT32 arrays per block (HF num_attention_heads /
// num_attention_groups on full blocks, attention_other_setting's on sliding ones), with one head
// size (key_length = value_length = HF head_dim) everywhere. `attention.sliding_window_pattern`
// (BOOL per block, true = sliding) says which blocks slide over `attention.sliding_window`
// positions; those rotate with rope.freq_base_swa, the full ones with rope.freq_base.
// rope.dimension_count is the head size (the converter writes none: llama.cpp then takes
// key_length, the same), and the loader halves it for the FULL blocks only (HF
// partial_rotary_factors 0.5 on full_attention, 1.0 on sliding_attention, which the converter
// asserts): full blocks rotate head/2 dims, sliding ones the whole head (NeoX). With HF rope_scaling
// llama3 the converter adds `rope_freqs.weight`: Llama 3 factors for the full blocks' head/4 pairs,
// padded with 1 to head/2; llama.cpp hands them to the full blocks only.
//
// A block (llama.cpp's graph): attn_norm; q, k, v projections (q of n_head_l heads, k and v of
// n_head_kv_l), per-head RMS q_norm / k_norm, RoPE, attention with scale 1/sqrt(head); then a
// head-wise gate: attn_gate (g_proj, [n_embd, n_head_l]) over the attn_norm output, and head h's
// attention output times sigmoid(gate_h); attn_output and the residual. The FFN: ffn_norm, then a
// SwiGLU MLP (ffn_gate/up/down of feed_forward_length) on the leading dense blocks (HF
// moe_layers_enum starts after them: leading_dense_block_count; the graph tests ffn_gate_inp), else
// sigmoid routing over ffn_gate_inp with the selection bias blk.N.exp_probs_b.bias (HF
// moe.router_bias), top-k weights renormalized (expert_weights_norm) and scaled by
// expert_weights_scale (HF moe_router_scaling_factor), SwiGLU experts of
// expert_feed_forward_length, plus an ungated shared expert of expert_shared_feed_forward_length
// (HF share_expert_dim) on every routed block. Optional per-block SwiGLU clamps (HF swiglu_limits /
// swiglu_limits_shared as FLOAT32 arrays swiglu_clamp_exp / swiglu_clamp_shexp, 0 = none): where
// positive, up is clamped to [-limit, limit] and silu(gate) to at most limit, on the routed
// experts (exp) or on the FFN that build_ffn makes (shexp: the shared expert, but also a dense
// block's MLP, which is why the writer keeps both at 0 on dense blocks). Norm weights are written
// as used (the converter adds HF's +1). No NextN (MTP) blocks.
import { attention, denseFfn, embeddings, f32Tensor, linear, linearInit, moeFfn, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { GgufType } from '../../gguf/constants';
import { kv } from '../../gguf/writer';
import type { GgufValue } from '../../gguf/writer';
import { baseMetadata, checkExperts } from './common';
import { ungatedSharedExpert } from './deepseek2';
import { probsBias } from './llama-moe';

/** HF rope_scaling of type llama3 (factor, low_freq_factor, high_freq_factor, original_max_position_embeddings). */
export interface Llama3RopeScaling {
  factor: number;
  lowFreqFactor: number;
  highFreqFactor: number;
  origCtx: number;
}

/**
 * nHeads / nKvHeads: the full blocks' heads; nHeadsSwa / nKvHeadsSwa the sliding blocks' (HF
 * attention_other_setting). headDim: every block's head size. fullInterval: block i has full
 * attention when i % fullInterval === 0 (Step-3.5-Flash: 4, so blocks 0, 4, 8, ...), the others
 * slide over `window` positions with RoPE base ropeBaseSwa; --layers N keeps the rule, so the
 * first N blocks of the pattern. nDense: leading dense blocks with the SwiGLU MLP of `ff` (cut to
 * nLayers under --layers); the others routed: expertFf experts and a shared expert of sharedFf.
 * wScale: expert_weights_scale; normW: expert_weights_norm. swigluLimit / swigluLimitShared:
 * per-block clamps (0 = none; absent = keys not written); an array of another length than nLayers
 * is cut or padded with 0 as the converter pads HF's lists. ropeFreqs: llama3 scaling, written as
 * rope_freqs.weight.
 */
export type Step35Config = ModelConfig & {
  headDim: number;
  nHeadsSwa: number;
  nKvHeadsSwa: number;
  window: number;
  fullInterval: number;
  ropeBaseSwa: number;
  nDense: number;
  wScale: number;
  normW: boolean;
  swigluLimit?: number[];
  swigluLimitShared?: number[];
  ropeFreqs?: Llama3RopeScaling;
  /**
   * exp_probs_b's std (default probsBias's 0.05). The bias is added to sigmoid probabilities that
   * saturate near 1 at the top of many experts, where 0.05 outweighs the router (as in
   * NemotronHConfig): the bench preset takes 0.002.
   */
  biasStd?: number;
};

const isSwa = (c: Step35Config, i: number) => i % c.fullInterval !== 0;
const headsAt = (c: Step35Config, i: number) => (isSwa(c, i) ? c.nHeadsSwa : c.nHeads);
const kvHeadsAt = (c: Step35Config, i: number) => (isSwa(c, i) ? c.nKvHeadsSwa : c.nKvHeads);

/**
 * rope_freqs.weight as the loader sizes it: n_rot_max / 2 entries, n_rot_max being the most dims
 * any block rotates (the head on a sliding block, half of it on a full one). The first head/4 are
 * the Llama 3 factors over the full blocks' rotary dims (head/2), computed as Step35Model does
 * (float32 inverse frequencies, the rest in double); the rest 1 (the converter pads to head/2;
 * ggml reads only the first n_rot_l / 2, so a full block sees just the factors).
 */
export function step35RopeFactors(c: Step35Config): number[] {
  const r = c.ropeFreqs;
  if (!r) throw new Error('step35: no ropeFreqs (llama3 rope scaling) in this config');
  const rotaryDim = c.headDim / 2;
  const factors: number[] = [];
  for (let k = 0; k < rotaryDim; k += 2) {
    const freq = Math.fround(1 / Math.fround(c.ropeBase ** Math.fround(k / rotaryDim)));
    const wavelen = (2 * Math.PI) / freq;
    const lowWavelen = r.origCtx / r.lowFreqFactor;
    const highWavelen = r.origCtx / r.highFreqFactor;
    if (wavelen < highWavelen) factors.push(1);
    else if (wavelen > lowWavelen) factors.push(r.factor);
    else {
      const smooth = (r.origCtx / wavelen - r.lowFreqFactor) / (r.highFreqFactor - r.lowFreqFactor);
      factors.push(1 / ((1 - smooth) / r.factor + smooth));
    }
  }
  const anySwa = Array.from({ length: c.nLayers }, (_, i) => isSwa(c, i)).includes(true);
  const n = (anySwa ? c.headDim : rotaryDim) / 2;
  while (factors.length < n) factors.push(1);
  return factors;
}

/** A clamp array cut or padded with 0 to n blocks (Step35Model's _pad). */
const fitLimits = (a: number[] | undefined, n: number) => (a === undefined ? undefined : Array.from({ length: n }, (_, i) => a[i] ?? 0));

// Scales: as the other routed presets (moeFfn: router logits of std ~2 over the normed input,
// writers at residualGain), q/k norms ~1 (per-head RMS-normed q.k / sqrt(head) of std ~1), the gate
// projection at unit gain over the normed input (gate logits of std ~1: sigmoid ~0.5 +- 0.2 per
// head). The routed mix is renormalized and then multiplied by wScale (3 in the presets, the real
// moe_router_scaling_factor), so ffn_down_exps writes at residualGain / wScale: the scaled mix then
// joins the stream at residualGain as every other writer (the file still says 3, and a reader that
// drops the scale is off by that factor on every routed block). Measured in llama.cpp, Q8_0 vs F32
// logits NMSE of tiny-step35 over seeds 1-5 and 7 (64 tokens): 3.3e-3..1.5e-2 with experts written
// at residualGain (a top-k near-tie that quantization flips then moves the block 3x as much),
// 3.1e-4..2.3e-3 at residualGain / 3 (tiny-step35-clamp 1.2e-4..8.1e-4), as tiny-deepseek-moe's. The
// clamps act on quantities after ffn_norm (up ~ N(0, 1), silu(gate) over gate ~ N(0, 1)) whatever
// the stream's scale: a limit of 1 clips about a third of the up values and a tenth of the
// silu(gate) ones (see the tiny-step35-clamp preset).
export const step35: ArchDefinition = {
  name: 'step35',
  ggufArch: 'step35',
  normalize(c: ModelConfig): ModelConfig {
    const s = c as Step35Config;
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx', 'expertFf', 'sharedFf']);
    for (const f of ['headDim', 'nHeadsSwa', 'nKvHeadsSwa', 'window', 'fullInterval'] as const) {
      if (!Number.isInteger(s[f]) || s[f] <= 0) throw new Error(`step35: ${f} must be a positive integer (use a preset), got ${String(s[f])}`);
    }
    checkExperts(c, true);
    if (c.nHeads % c.nKvHeads !== 0) throw new Error(`step35: heads ${c.nHeads} not divisible by kv heads ${c.nKvHeads}`);
    if (s.nHeadsSwa % s.nKvHeadsSwa !== 0) throw new Error(`step35: nHeadsSwa ${s.nHeadsSwa} not divisible by nKvHeadsSwa ${s.nKvHeadsSwa}`);
    // Full blocks rotate half of each head, in pairs.
    if (s.headDim % 4 !== 0) throw new Error(`step35: headDim ${s.headDim} must be a multiple of 4 (full blocks rotate half of it, in pairs)`);
    if (!(s.ropeBaseSwa > 0)) throw new Error(`step35: ropeBaseSwa must be positive, got ${String(s.ropeBaseSwa)}`);
    if (!Number.isInteger(s.nDense) || s.nDense < 0) throw new Error(`step35: nDense must be a non-negative integer, got ${String(s.nDense)}`);
    if (!(s.wScale > 0)) throw new Error(`step35: wScale must be positive, got ${String(s.wScale)}`);
    if (typeof s.normW !== 'boolean') throw new Error(`step35: normW must be a boolean (use a preset), got ${String(s.normW)}`);
    const nDense = Math.min(s.nDense, c.nLayers);
    const limits = { swigluLimit: fitLimits(s.swigluLimit, c.nLayers), swigluLimitShared: fitLimits(s.swigluLimitShared, c.nLayers) };
    for (const [f, a] of Object.entries(limits)) {
      if (a === undefined) continue;
      a.forEach((x, i) => {
        if (!(Number.isFinite(x) && x >= 0)) throw new Error(`step35: ${f}[${i}] must be a finite limit >= 0 (0: none), got ${String(x)}`);
        // llama.cpp's build_ffn clamps a dense block's MLP with swiglu_clamp_shexp; HF has no limit there.
        if (i < nDense && x !== 0) throw new Error(`step35: ${f}[${i}] must be 0 on dense block ${i}`);
      });
    }
    const r = s.ropeFreqs;
    if (r !== undefined) {
      if (!(r.factor > 0 && r.lowFreqFactor > 0 && r.highFreqFactor > r.lowFreqFactor && r.origCtx > 0)) {
        throw new Error('step35: ropeFreqs needs factor > 0, 0 < lowFreqFactor < highFreqFactor and origCtx > 0');
      }
    }
    return { ...c, nDense, ...limits } as Step35Config;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const s = c as Step35Config;
    const a = 'step35';
    const layers = Array.from({ length: c.nLayers }, (_, i) => i);
    const m: [string, GgufValue][] = [
      // The head counts as per-block arrays (INT32, as gguf-py writes Python ints).
      ...baseMetadata(a, c).map(([k, v]): [string, GgufValue] => {
        if (k === `${a}.attention.head_count`) return [k, kv.arr(GgufType.INT32, layers.map((i) => headsAt(s, i)))];
        if (k === `${a}.attention.head_count_kv`) return [k, kv.arr(GgufType.INT32, layers.map((i) => kvHeadsAt(s, i)))];
        return [k, v];
      }),
      [`${a}.rope.freq_base_swa`, kv.f32(s.ropeBaseSwa)],
      [`${a}.attention.sliding_window`, kv.u32(s.window)],
      [`${a}.attention.sliding_window_pattern`, kv.arr(GgufType.BOOL, layers.map((i) => isSwa(s, i)))],
      [`${a}.expert_feed_forward_length`, kv.u32(c.expertFf)],
      [`${a}.expert_shared_feed_forward_length`, kv.u32(c.sharedFf)],
      [`${a}.expert_weights_scale`, kv.f32(s.wScale)],
      [`${a}.expert_weights_norm`, kv.bool(s.normW)],
      [`${a}.expert_gating_func`, kv.u32(2)],
      [`${a}.leading_dense_block_count`, kv.u32(s.nDense)],
      [`${a}.moe_every_n_layers`, kv.u32(1)],
    ];
    if (s.swigluLimit) m.push([`${a}.swiglu_clamp_exp`, kv.arr(GgufType.FLOAT32, s.swigluLimit)]);
    if (s.swigluLimitShared) m.push([`${a}.swiglu_clamp_shexp`, kv.arr(GgufType.FLOAT32, s.swigluLimitShared)]);
    return m;
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const s = c as Step35Config;
    const t = embeddings(c);
    if (s.ropeFreqs) {
      const f = step35RopeFactors(s);
      t.push(f32Tensor('rope_freqs.weight', [f.length], { kind: 'values', values: f }));
    }
    for (let i = 0; i < c.nLayers; i++) {
      const nHeads = headsAt(s, i);
      // The shared helper over this block's heads: attn_norm, q/k/v, per-head q/k norms, attn_output.
      t.push(...attention({ ...c, nHeads, nKvHeads: kvHeadsAt(s, i) }, i, { qkNorm: true }));
      t.push(linear(`blk.${i}.attn_gate.weight`, c.dim, nHeads, 'attn_q', i));
      if (i < s.nDense) t.push(...denseFfn(c, i));
      else {
        // The routed mix is scaled by wScale after renormalization: its writer at residualGain / wScale.
        const down = linearInit(c.expertFf, residualGain(c) / s.wScale);
        const routed = moeFfn(c, i, c.expertFf).map((x) => (x.role === 'ffn_down' ? { ...x, init: down } : x));
        const bias = probsBias(c, i);
        if (s.biasStd !== undefined) bias.init = { kind: 'normal', std: s.biasStd };
        t.push(...routed, bias, ...ungatedSharedExpert(c, i, c.sharedFf));
      }
    }
    return t;
  },
};
