// Dense decoders of Llama's family with their own block layouts, as llama.cpp's loaders
// (src/models/<arch>.cpp load_arch_hparams / load_arch_tensors) read them; the engine runs them
// with buildLlamaFamily's DenseLayout (packages/engine/src/model/architectures/llama-family.ts).
// Every one: token_embd, RMS norms (attention.layer_norm_rms_epsilon), q/k/v through
// create_tensor_qkv (optional q/k/v biases), attn_output, a SwiGLU FFN, output_norm, a head
// (output.weight, or token_embd when absent, except OLMo 2, whose loader requires output.weight).
// - olmo2 (OLMo 2 / OLMo 3): no attn_norm or ffn_norm; attn_q_norm [n_embd] and attn_k_norm
//   [n_kv_heads x head] over the whole projections (the loader sizes attn_q and attn_output as
//   n_embd: heads x head = dim); post_attention_norm / post_ffw_norm on the attention / FFN
//   outputs. NeoX RoPE. attention.sliding_window > 0 (OLMo 3): windows on the blocks
//   load_swa_pattern(4) picks (blocks 0-2 of every 4 slide), which rotate at scale 1 without YaRN.
// - seed_oss (Seed-OSS-36B): Llama's block whose FFN norm is named post_attention_norm; NeoX RoPE;
//   attn_output [heads x head, dim] (head from key_length).
// - smollm3 (SmolLM3): Llama's block, RoPE over adjacent pairs, NoPE on every 4th block
//   (n_no_rope_layer_step 4 is hard-coded: (il + 1) % 4 == 0).
// - exaone4 (EXAONE 4.0): olmo2's post-norm block with per-head q/k norms [head], NeoX RoPE;
//   attn_output sized [n_embd, n_embd]. With exactly 64 blocks (the 32B; the loader keys it on the
//   count) windows of attention.sliding_window (4096 by default) on load_swa_pattern(4)'s blocks,
//   RoPE only there (the full blocks NoPE); otherwise every block full with RoPE (the key ignored).
// - ernie4_5 (ERNIE 4.5 dense): Llama's block, RoPE over adjacent pairs; the loader takes an
//   optional attn_output.bias which the graph never adds (`attnOutBias` writes one: a reader that
//   adds it is off).
// - hunyuan-dense (Hunyuan dense): Llama's block with per-head q/k norms [head] AFTER NeoX RoPE;
//   rope.scaling.alpha > 0 multiplies the base by alpha^(head / (head - 2)).
// - glm4 (GLM-4 dense): attn_norm, post_attention_norm after the attention, ffn_norm, one ffn_up
//   [dim, 2 ff] (SiLU of its first half times its second), post_ffw_norm; RoPE over adjacent pairs
//   on rope.dimension_count (partial: `ropeDims`); q/k/v biases (GLM-4 has them). With
//   rope.dimension_sections of two or more set sections (GLM-4.1V's text model) the graph rotates
//   by M-RoPE, whose text positions are the same in every section: NeoX-style pairs.
// - apertus (Swiss AI Apertus): Llama's block with per-head q/k norms [head] before NeoX RoPE, an
//   optional attn_output.bias (written with `attnOutBias`; the graph adds it), an ungated FFN
//   ffn_up -> xIELU -> ffn_down, output.weight required; xIELU's raw parameters in the keys
//   xielu.alpha_n / alpha_p / beta / eps (no architecture prefix; FLOAT32 arrays of one per block,
//   as conversion/llama.py ApertusModel writes them; required).
// - internlm2 (InternLM2): Llama's block with one attn_qkv (q|k|v rows, `fusedQkv`), output.weight
//   required. exaone (EXAONE 3), xverse (output.weight required), nanbeige (num_loops passes over the
//   blocks, output_norm between them unless skip_loop_final_norm), arcee (ungated ReLU² FFN),
//   maincoder (per-head q/k norms after RoPE): Llama's block; exaone, arcee and nanbeige take an
//   optional rope_freqs (`ropeFreqs`). minicpm: Llama's block run by Granite's graph with its
//   embedding_scale / residual_scale / logit_scale (`scales`; absent: the loader's defaults).
// - LayerNorm blocks (attention.layer_norm_epsilon): orion (weight and bias on every norm, output.weight
//   required), olmo (no norm parameters at all; attention.clamp_kqv), starcoder2 (weights and biases,
//   attn_output / ffn_up / ffn_down biases required, ungated GELU FFN), stablelm (weights and
//   biases, output.weight required, partial RoPE; `parallel`: no ffn_norm; `qkLayerNorm`: per-head
//   q/k LayerNorm weights [head, heads]), nemotron (weights and biases, ungated ReLU² FFN, partial
//   RoPE, optional attn_output / ffn_up / ffn_down biases, output.weight required).
// - GPT-2-style: gpt2 and starcoder (learned positions: position_embd [dim, ctx], no rope.* keys;
//   LayerNorms, one attn_qkv with its bias, attn_output / ffn_up / ffn_down biases, ungated GELU FFN;
//   starcoder multi-query in its files), codeshell (the same block with NeoX RoPE over the whole head,
//   q/k/v fused or split, output.weight required; `noTokenEmbd`: output.weight embeds too), qwen
//   (Qwen v1: Llama's block, one attn_qkv with its bias, NeoX RoPE, output.weight required,
//   feed_forward_length written as twice the FFN's width, as its converter does).
// - ALiBi (no rope.* keys): bloom (token_embd_norm weight and bias, LayerNorms with biases, one
//   attn_qkv with its bias, every bias, ungated GELU FFN), mpt (one attn_qkv, LayerNorm biases and
//   attn_qkv / attn_output / ffn biases optional, attention.max_alibi_bias, clamp_kqv, an optional
//   position_embd), refact (Llama's block). baichuan: Llama's block, output.weight required; its
//   loader takes RoPE at 32 blocks and ALiBi at 40 (rope keys written either way).
// Scales: the post norms' gains are 2 / sqrt(2L) (gemma.ts's residualWrite), so each sub-layer
// writes into the stream at a fixed scale whatever its projections; the other archs use
// residualGain on attn_output / ffn_down as llama.ts.
import { checkFullWidthHeads, checkHeads, embeddings, f32Tensor, headDim, linear, NORM_INIT, norm, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec, WeightInit } from '../arch';
import { GgufType } from '../../gguf/constants';
import { kv } from '../../gguf/writer';
import type { GgufValue } from '../../gguf/writer';
import { baseMetadata } from './common';

/**
 * window: attention.sliding_window (olmo2: > 0 turns windows on; exaone4: read only at 64 blocks).
 * swaPattern: attention.sliding_window_pattern, a BOOL per block or a UINT32 period (absent:
 * load_swa_pattern's default 4). qkvBias: attn_q/k/v.bias. attnOutBias: attn_output.bias
 * (ernie4_5 only: its loader's optional tensor). ropeAlpha: rope.scaling.alpha (hunyuan-dense).
 * ropeDims: rope.dimension_count below the head (glm4).
 */
export type DenseFamilyConfig = ModelConfig & {
  window?: number;
  swaPattern?: boolean[] | number;
  qkvBias?: boolean;
  attnOutBias?: boolean;
  ropeAlpha?: number;
  ropeDims?: number;
  /** glm4: rope.dimension_sections (INT32 x 4; two or more set: llama.cpp's M-RoPE, NeoX-style on text). */
  ropeSections?: number[];
  /** apertus: xIELU's raw parameters per block (required there). */
  xielu?: { alphaN: number[]; alphaP: number[]; beta: number[]; eps: number[] };
  /** One attn_qkv of q|k|v rows in place of attn_q/k/v (internlm2, as its converter writes it). */
  fusedQkv?: boolean;
  /** olmo: attention.clamp_kqv (> 0 clamps Q, K and V). */
  clampKqv?: number;
  /** nanbeige: num_loops passes over the blocks, and skip_loop_final_norm. */
  loops?: number;
  skipLoopNorm?: boolean;
  /** exaone, arcee, nanbeige: a rope_freqs.weight of head/2 factors (llama3-style scaling). */
  ropeFreqs?: boolean;
  /** minicpm: embedding_scale, residual_scale and logit_scale (absent: the loader's defaults 12, 1.4 / sqrt(L), 256 / n_embd). */
  scales?: { embedding: number; residual: number; logit: number };
  /** stablelm: no ffn_norm (parallel blocks), and per-head q/k LayerNorm weights [head, heads] (StableLM 2 12B). */
  parallel?: boolean;
  qkLayerNorm?: boolean;
  /** nemotron: the optional ffn_up.bias and ffn_down.bias. */
  ffnBias?: boolean;
  /** gptneox: use_parallel_residual (its loader requires the key). */
  parallelResidual?: boolean;
  /** falcon: attn_norm_2 weight and bias (Falcon-40B: the attention reads it, the FFN attn_norm). */
  attnNorm2?: boolean;
  /** codeshell: no token_embd.weight (its loader embeds with output.weight then). */
  noTokenEmbd?: boolean;
  /** mpt: attention.max_alibi_bias (its converter writes one, 0 without ALiBi). */
  maxAlibiBias?: number;
  /** mpt: position_embd.weight [dim, ctx] (optional there). */
  positionEmbd?: boolean;
  /** mpt: LayerNorm weights without biases (its loader reads the biases as optional). */
  noNormBias?: boolean;
};

interface Layout {
  attnNorm: boolean;
  /** q/k norms: none, one head wide, or over the whole projections. */
  qkNorm: 'none' | 'head' | 'full';
  attnPostNorm: boolean;
  ffnNorm: 'ffn_norm' | 'post_attention_norm' | 'none';
  ffnPostNorm: boolean;
  fusedUpGate: boolean;
  /** An ungated FFN (ffn_up, an activation, ffn_down: apertus, arcee, starcoder2). */
  ungated?: boolean;
  /** LayerNorms (attention.layer_norm_epsilon): with weight and bias, or without parameters. */
  layerNorm?: 'affine' | 'plain';
  /** attn_output.bias, ffn_up.bias and ffn_down.bias (starcoder2). */
  biases?: boolean;
  /** The loader sizes attn_q / attn_output as n_embd. */
  fullWidth: boolean;
  untied: boolean;
  /** gpt2, starcoder: position_embd.weight [dim, ctx] (F32, as llama-quantize leaves it); no rope.* keys. */
  positions?: boolean;
  /** gpt2, starcoder, qwen: the loader requires one attn_qkv and its bias. */
  fusedQkvBias?: boolean;
  /** qwen: feed_forward_length is twice the FFN's width. */
  ffDoubled?: boolean;
  /** bloom, mpt, refact: ALiBi, no RoPE (their converters write no rope.* keys). */
  alibi?: boolean;
  /** bloom: token_embd_norm weight and bias. */
  tokenNorm?: boolean;
}

const PRE: Layout = { attnNorm: true, qkNorm: 'none', attnPostNorm: false, ffnNorm: 'ffn_norm', ffnPostNorm: false, fusedUpGate: false, fullWidth: false, untied: false };
const POST: Layout = { ...PRE, attnNorm: false, attnPostNorm: true, ffnNorm: 'none', ffnPostNorm: true, fullWidth: true };

export const DENSE_LAYOUTS: Record<string, Layout> = {
  olmo2: { ...POST, qkNorm: 'full', untied: true },
  seed_oss: { ...PRE, ffnNorm: 'post_attention_norm' },
  smollm3: PRE,
  exaone4: { ...POST, qkNorm: 'head' },
  ernie4_5: PRE,
  'hunyuan-dense': { ...PRE, qkNorm: 'head' },
  glm4: { ...PRE, attnPostNorm: true, ffnPostNorm: true, fusedUpGate: true },
  apertus: { ...PRE, qkNorm: 'head', ungated: true, untied: true },
  internlm2: { ...PRE, fullWidth: true, untied: true },
  exaone: PRE,
  xverse: { ...PRE, fullWidth: true, untied: true },
  nanbeige: PRE,
  arcee: { ...PRE, ungated: true },
  maincoder: { ...PRE, qkNorm: 'head' },
  orion: { ...PRE, fullWidth: true, untied: true, layerNorm: 'affine' },
  olmo: { ...PRE, fullWidth: true, layerNorm: 'plain' },
  starcoder2: { ...PRE, fullWidth: true, layerNorm: 'affine', ungated: true, biases: true },
  minicpm: PRE,
  stablelm: { ...PRE, fullWidth: true, untied: true, layerNorm: 'affine' },
  nemotron: { ...PRE, fullWidth: true, untied: true, layerNorm: 'affine', ungated: true },
  gptneox: { ...PRE, fullWidth: true, untied: true, layerNorm: 'affine', ungated: true, biases: true },
  chatglm: { ...PRE, fusedUpGate: true, fullWidth: true },
  phi2: { ...PRE, ffnNorm: 'none', fullWidth: true, untied: true, layerNorm: 'affine', ungated: true, biases: true },
  falcon: { ...PRE, ffnNorm: 'none', fullWidth: true, layerNorm: 'affine', ungated: true },
  gpt2: { ...PRE, fullWidth: true, layerNorm: 'affine', ungated: true, biases: true, positions: true, fusedQkvBias: true },
  starcoder: { ...PRE, fullWidth: true, layerNorm: 'affine', ungated: true, biases: true, positions: true, fusedQkvBias: true },
  codeshell: { ...PRE, fullWidth: true, untied: true, layerNorm: 'affine', ungated: true, biases: true },
  qwen: { ...PRE, fullWidth: true, untied: true, fusedQkvBias: true, ffDoubled: true },
  bloom: { ...PRE, fullWidth: true, layerNorm: 'affine', ungated: true, biases: true, fusedQkvBias: true, alibi: true, tokenNorm: true },
  mpt: { ...PRE, fullWidth: true, layerNorm: 'affine', ungated: true, alibi: true },
  refact: { ...PRE, alibi: true },
  baichuan: { ...PRE, fullWidth: true, untied: true },
};

/** The block count at which llama.cpp's exaone4 loader turns sliding windows on. */
export const EXAONE4_SWA_LAYERS = 64;

/** Whether block i slides (pattern array, else load_swa_pattern's period rule, default 4); false when the arch has no windows in this file. */
export function denseIsSwa(c: DenseFamilyConfig, i: number): boolean {
  const on = c.arch === 'olmo2' ? (c.window ?? 0) > 0 : c.arch === 'exaone4' ? c.nLayers === EXAONE4_SWA_LAYERS : false;
  if (!on) return false;
  const p = c.swaPattern ?? 4;
  if (Array.isArray(p)) return p[i];
  return p === 0 || i % p < p - 1;
}

const gainInit = (mean: number): WeightInit => ({ kind: 'normal', mean, std: 0.1 * mean });
const residualWrite = (c: ModelConfig) => 2 * residualGain(c);

function normalize(c: ModelConfig): ModelConfig {
  const x = c as DenseFamilyConfig;
  const a = c.arch;
  const lo = DENSE_LAYOUTS[a];
  requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx']);
  if (c.nExperts !== 0 || c.nExpertsUsed !== 0) throw new Error(`${a}: a dense architecture (nExperts / nExpertsUsed must be 0)`);
  if (lo.fullWidth) checkFullWidthHeads(c, 'attn_q and attn_output');
  else checkHeads(c);
  if (lo.untied && c.tiedEmbeddings) throw new Error(`${a}: the loader requires output.weight (tiedEmbeddings must be false)`);
  if (!(c.ropeBase > 0)) throw new Error(`${a}: ropeBase must be positive`);
  if (x.window !== undefined && (!Number.isInteger(x.window) || x.window < 1)) throw new Error(`${a}: window must be a positive integer, got ${String(x.window)}`);
  if ((x.window !== undefined || x.swaPattern !== undefined) && a !== 'olmo2' && a !== 'exaone4') throw new Error(`${a}: no sliding windows (window / swaPattern are olmo2's and exaone4's)`);
  if (Array.isArray(x.swaPattern) && x.swaPattern.length !== c.nLayers) throw new Error(`${a}: swaPattern has ${x.swaPattern.length} entries for ${c.nLayers} blocks`);
  if (x.attnOutBias && a !== 'ernie4_5' && a !== 'apertus' && a !== 'minicpm' && a !== 'nemotron' && a !== 'mpt') throw new Error(`${a}: attnOutBias is ernie4_5's, apertus's, minicpm's, nemotron's and mpt's (the other loaders take no attn_output.bias)`);
  if ((x.parallel || x.qkLayerNorm) && a !== 'stablelm') throw new Error(`${a}: parallel / qkLayerNorm are stablelm's`);
  if (x.ffnBias && a !== 'nemotron' && a !== 'mpt') throw new Error(`${a}: ffnBias is nemotron's and mpt's`);
  if (x.scales !== undefined && (a !== 'minicpm' || !Object.values(x.scales).every((v) => Number.isFinite(v) && v > 0))) throw new Error(`${a}: scales are minicpm's, each positive and finite`);
  if ((a === 'apertus') !== (x.xielu !== undefined)) throw new Error(`${a}: xielu parameters are apertus's, and it requires them`);
  if (x.xielu) {
    for (const [k, v] of Object.entries(x.xielu)) {
      if (!Array.isArray(v) || v.length !== c.nLayers || !v.every(Number.isFinite)) throw new Error(`${a}: xielu.${k} needs one finite number per block (${c.nLayers})`);
    }
  }
  if (lo.fusedQkvBias && !(x.fusedQkv && x.qkvBias)) throw new Error(`${a}: the loader requires one attn_qkv and its bias (fusedQkv and qkvBias)`);
  if (x.noTokenEmbd && (a !== 'codeshell' || c.tiedEmbeddings)) throw new Error(`${a}: noTokenEmbd is codeshell's, with output.weight`);
  if (x.fusedQkv && a !== 'internlm2' && a !== 'gptneox' && a !== 'phi2' && a !== 'falcon' && a !== 'chatglm' && a !== 'codeshell' && a !== 'mpt' && !lo.fusedQkvBias) throw new Error(`${a}: fusedQkv is internlm2's, gptneox's, phi2's and falcon's (their converters fuse wqkv)`);
  if ((a === 'gptneox' || a === 'falcon') && !x.fusedQkv) throw new Error(`${a}: the loader takes one attn_qkv (fusedQkv must be true)`);
  if (a === 'gptneox' && (!x.qkvBias || x.parallelResidual === undefined)) throw new Error(`gptneox: the loader requires attn_qkv.bias (qkvBias) and use_parallel_residual (parallelResidual)`);
  if (x.parallelResidual !== undefined && a !== 'gptneox') throw new Error(`${a}: parallelResidual is gptneox's`);
  if (x.attnNorm2 && a !== 'falcon') throw new Error(`${a}: attnNorm2 is falcon's`);
  if (x.qkvBias && a === 'falcon') throw new Error('falcon: the loader takes no q/k/v biases');
  if ((x.maxAlibiBias !== undefined || x.positionEmbd || x.noNormBias) && a !== 'mpt') throw new Error(`${a}: maxAlibiBias / positionEmbd / noNormBias are mpt's`);
  if (x.maxAlibiBias !== undefined && !(x.maxAlibiBias >= 0 && Number.isFinite(x.maxAlibiBias))) throw new Error(`${a}: maxAlibiBias must be a non-negative number`);
  if (a === 'mpt' && !x.fusedQkv) throw new Error('mpt: the loader takes one attn_qkv (fusedQkv must be true)');
  if (x.clampKqv !== undefined && ((a !== 'olmo' && a !== 'mpt') || !(x.clampKqv > 0) || !Number.isFinite(x.clampKqv))) throw new Error(`${a}: clampKqv is olmo's and mpt's, a positive finite number`);
  if ((x.loops !== undefined || x.skipLoopNorm !== undefined) && (a !== 'nanbeige' || (x.loops !== undefined && (!Number.isInteger(x.loops) || x.loops < 1))))
    throw new Error(`${a}: loops / skipLoopNorm are nanbeige's (loops a positive integer)`);
  if (x.ropeFreqs && a !== 'exaone' && a !== 'arcee' && a !== 'nanbeige') throw new Error(`${a}: ropeFreqs is exaone's, arcee's and nanbeige's (the other loaders take no rope_freqs)`);
  if (lo.layerNorm && !(c.normEps > 0)) throw new Error(`${a}: normEps must be positive (attention.layer_norm_epsilon is required)`);
  if (x.ropeAlpha !== undefined && (a !== 'hunyuan-dense' || !(x.ropeAlpha > 0))) throw new Error(`${a}: ropeAlpha is hunyuan-dense's and must be positive`);
  if (x.ropeSections !== undefined && (a !== 'glm4' || x.ropeSections.length !== 4 || !x.ropeSections.every((v) => Number.isInteger(v) && v >= 0)))
    throw new Error(`${a}: ropeSections is glm4's: 4 non-negative integers`);
  if (x.ropeDims !== undefined) {
    if (a !== 'glm4' && a !== 'stablelm' && a !== 'nemotron' && a !== 'gptneox' && a !== 'phi2' && a !== 'chatglm') throw new Error(`${a}: the graph asserts rope.dimension_count == head size (ropeDims is glm4's, stablelm's, nemotron's, gptneox's and phi2's)`);
    if (!Number.isInteger(x.ropeDims) || x.ropeDims < 2 || x.ropeDims % 2 !== 0 || x.ropeDims > headDim(c)) throw new Error(`${a}: ropeDims must be even within the head (${headDim(c)})`);
  }
  return c;
}

function metadata(c: ModelConfig): [string, GgufValue][] {
  const x = c as DenseFamilyConfig;
  const a = c.arch;
  const lo = DENSE_LAYOUTS[a];
  // LayerNorm loaders read attention.layer_norm_epsilon instead of the RMS key.
  const m = baseMetadata(a, c).map(([k, v]): [string, GgufValue] => (lo.layerNorm && k === `${a}.attention.layer_norm_rms_epsilon` ? [`${a}.attention.layer_norm_epsilon`, v] : [k, v]));
  if (x.scales) m.push([`${a}.embedding_scale`, kv.f32(x.scales.embedding)], [`${a}.residual_scale`, kv.f32(x.scales.residual)], [`${a}.logit_scale`, kv.f32(x.scales.logit)]);
  if (x.clampKqv !== undefined) m.push([`${a}.attention.clamp_kqv`, kv.f32(x.clampKqv)]);
  if (x.maxAlibiBias !== undefined) m.push([`${a}.attention.max_alibi_bias`, kv.f32(x.maxAlibiBias)]);
  if (x.loops !== undefined) m.push([`${a}.num_loops`, kv.u32(x.loops)]);
  if (x.parallelResidual !== undefined) m.push([`${a}.use_parallel_residual`, kv.bool(x.parallelResidual)]);
  if (x.skipLoopNorm !== undefined) m.push([`${a}.skip_loop_final_norm`, kv.bool(x.skipLoopNorm)]);
  if (x.ropeDims !== undefined) {
    const i = m.findIndex(([k]) => k === `${a}.rope.dimension_count`);
    m[i] = [`${a}.rope.dimension_count`, kv.u32(x.ropeDims)];
  }
  // Qwen's converter writes intermediate_size: the gate and up halves counted together.
  if (lo.ffDoubled) m[m.findIndex(([k]) => k === `${a}.feed_forward_length`)] = [`${a}.feed_forward_length`, kv.u32(2 * c.ff)];
  // Learned positions: GPT-2's and StarCoder's converters write no RoPE keys.
  if (lo.positions) return m.filter(([k]) => !k.startsWith(`${a}.rope.`));
  // ALiBi: BLOOM's, MPT's and Refact's converters write no RoPE keys either.
  if (lo.alibi) return m.filter(([k]) => !k.startsWith(`${a}.rope.`));
  if (x.window !== undefined) m.push([`${a}.attention.sliding_window`, kv.u32(x.window)]);
  if (Array.isArray(x.swaPattern)) m.push([`${a}.attention.sliding_window_pattern`, kv.arr(GgufType.BOOL, x.swaPattern)]);
  else if (x.swaPattern !== undefined) m.push([`${a}.attention.sliding_window_pattern`, kv.u32(x.swaPattern)]);
  if (x.ropeSections !== undefined) m.push([`${a}.rope.dimension_sections`, kv.arr(GgufType.INT32, x.ropeSections)]);
  if (x.ropeAlpha !== undefined) m.push([`${a}.rope.scaling.alpha`, kv.f32(x.ropeAlpha)]);
  if (x.xielu) {
    const { alphaN, alphaP, beta, eps } = x.xielu;
    m.push(['xielu.alpha_n', kv.arr(GgufType.FLOAT32, alphaN)], ['xielu.alpha_p', kv.arr(GgufType.FLOAT32, alphaP)], ['xielu.beta', kv.arr(GgufType.FLOAT32, beta)], ['xielu.eps', kv.arr(GgufType.FLOAT32, eps)]);
  }
  return m;
}

function tensors(c: ModelConfig): TensorSpec[] {
  const x = c as DenseFamilyConfig;
  const lo = DENSE_LAYOUTS[c.arch];
  const hd = headDim(c);
  const nQ = hd * c.nHeads;
  const nKv = hd * c.nKvHeads;
  // Sub-layers behind a post norm write at its gain; the others through their output projection.
  const outGain = lo.attnPostNorm ? 1 : residualGain(c);
  const t = embeddings(c);
  // LayerNorm weights and biases ('affine'), or none ('plain': output_norm.weight dropped too).
  const normBias = (name: string, i?: number): TensorSpec => ({ name, shape: [c.dim], init: { kind: 'normal', std: 0.1 }, role: 'norm', layer: i });
  const blockNorm = (base: string, i?: number): TensorSpec[] => (lo.layerNorm === 'plain' ? [] : lo.layerNorm === 'affine' && !x.noNormBias ? [norm(`${base}.weight`, c.dim, i), normBias(`${base}.bias`, i)] : [norm(`${base}.weight`, c.dim, i)]);
  if (lo.layerNorm) t.splice(t.findIndex((s) => s.name === 'output_norm.weight'), 1, ...blockNorm('output_norm'));
  if (lo.positions) t.splice(1, 0, { name: 'position_embd.weight', shape: [c.dim, c.ctx], init: { kind: 'normal', std: 0.5 }, role: 'bias' });
  if (x.noTokenEmbd) t.splice(t.findIndex((s) => s.name === 'token_embd.weight'), 1);
  // BLOOM's LayerNorm of the embedding; MPT's optional learned positions.
  if (lo.tokenNorm) t.splice(1, 0, norm('token_embd_norm.weight', c.dim), normBias('token_embd_norm.bias'));
  if (x.positionEmbd) t.splice(1, 0, { name: 'position_embd.weight', shape: [c.dim, c.ctx], init: { kind: 'normal', std: 0.5 }, role: 'bias' });
  // Phi-2's loader requires output.bias.
  if (c.arch === 'phi2') t.splice(t.findIndex((s) => s.name === 'output.weight') + 1, 0, { name: 'output.bias', shape: [c.vocabSize], init: { kind: 'normal', std: 0.1 }, role: 'attn_bias' });
  if (x.ropeFreqs) t.push({ name: 'rope_freqs.weight', shape: [hd / 2], init: { kind: 'normal', mean: 2, std: 0.5 }, role: 'bias' });
  for (let i = 0; i < c.nLayers; i++) {
    const p = `blk.${i}`;
    if (lo.attnNorm) t.push(...blockNorm(`${p}.attn_norm`, i));
    if (x.attnNorm2) t.push(...blockNorm(`${p}.attn_norm_2`, i));
    // llama-quant types attn_qkv as attn_v.
    if (x.fusedQkv) t.push(linear(`${p}.attn_qkv.weight`, c.dim, nQ + 2 * nKv, 'attn_v', i));
    else t.push(linear(`${p}.attn_q.weight`, c.dim, nQ, 'attn_q', i), linear(`${p}.attn_k.weight`, c.dim, nKv, 'attn_k', i), linear(`${p}.attn_v.weight`, c.dim, nKv, 'attn_v', i));
    if (x.qkvBias && x.fusedQkv) t.push({ name: `${p}.attn_qkv.bias`, shape: [nQ + 2 * nKv], init: { kind: 'normal', std: 0.1 }, role: 'attn_bias', layer: i });
    else if (x.qkvBias) {
      const bias = (name: string, n: number): TensorSpec => ({ name, shape: [n], init: { kind: 'normal', std: 0.1 }, role: 'attn_bias', layer: i });
      t.push(bias(`${p}.attn_q.bias`, nQ), bias(`${p}.attn_k.bias`, nKv), bias(`${p}.attn_v.bias`, nKv));
    }
    if (lo.qkNorm === 'head') t.push(norm(`${p}.attn_q_norm.weight`, hd, i), norm(`${p}.attn_k_norm.weight`, hd, i));
    if (x.qkLayerNorm) t.push(f32Tensor(`${p}.attn_q_norm.weight`, [hd, c.nHeads], NORM_INIT, i), f32Tensor(`${p}.attn_k_norm.weight`, [hd, c.nKvHeads], NORM_INIT, i));
    if (lo.qkNorm === 'full') t.push(norm(`${p}.attn_q_norm.weight`, nQ, i), norm(`${p}.attn_k_norm.weight`, nKv, i));
    t.push(linear(`${p}.attn_output.weight`, nQ, c.dim, 'attn_output', i, outGain));
    if (x.attnOutBias || lo.biases) t.push({ name: `${p}.attn_output.bias`, shape: [c.dim], init: { kind: 'normal', std: 0.5 }, role: 'attn_bias', layer: i });
    if (lo.attnPostNorm) t.push({ ...norm(`${p}.post_attention_norm.weight`, c.dim, i), init: gainInit(residualWrite(c)) });
    if (lo.ffnNorm !== 'none' && !x.parallel) t.push(...blockNorm(`${p}.${lo.ffnNorm}`, i));
    const ffGain = lo.ffnPostNorm ? 1 : residualGain(c);
    if (lo.fusedUpGate) t.push(linear(`${p}.ffn_up.weight`, c.dim, 2 * c.ff, 'ffn_up', i));
    else if (lo.ungated) t.push(linear(`${p}.ffn_up.weight`, c.dim, c.ff, 'ffn_up', i));
    else t.push(linear(`${p}.ffn_gate.weight`, c.dim, c.ff, 'ffn_gate', i), linear(`${p}.ffn_up.weight`, c.dim, c.ff, 'ffn_up', i));
    t.push(linear(`${p}.ffn_down.weight`, c.ff, c.dim, 'ffn_down', i, ffGain));
    if (lo.biases || x.ffnBias) t.push({ name: `${p}.ffn_up.bias`, shape: [c.ff], init: { kind: 'normal', std: 0.1 }, role: 'attn_bias', layer: i }, { name: `${p}.ffn_down.bias`, shape: [c.dim], init: { kind: 'normal', std: 0.1 }, role: 'attn_bias', layer: i });
    if (lo.ffnPostNorm) t.push({ ...norm(`${p}.post_ffw_norm.weight`, c.dim, i), init: gainInit(residualWrite(c)) });
  }
  return t;
}

const def = (name: string): ArchDefinition => ({ name, ggufArch: name, normalize, metadata, tensors });

export const olmo2 = def('olmo2');
export const seedOss = def('seed_oss');
export const smollm3 = def('smollm3');
export const exaone4 = def('exaone4');
export const ernie45 = def('ernie4_5');
export const hunyuanDense = def('hunyuan-dense');
export const glm4 = def('glm4');
export const apertus = def('apertus');
export const internlm2 = def('internlm2');
export const exaone = def('exaone');
export const xverse = def('xverse');
export const nanbeige = def('nanbeige');
export const arcee = def('arcee');
export const maincoder = def('maincoder');
export const orion = def('orion');
export const olmo = def('olmo');
export const starcoder2 = def('starcoder2');
export const minicpm = def('minicpm');
export const stablelm = def('stablelm');
export const nemotron = def('nemotron');
export const gptneox = def('gptneox');
export const chatglm = def('chatglm');
export const phi2 = def('phi2');
export const falcon = def('falcon');
export const gpt2 = def('gpt2');
export const starcoder = def('starcoder');
export const codeshell = def('codeshell');
export const qwen = def('qwen');
export const bloom = def('bloom');
export const mpt = def('mpt');
export const refact = def('refact');
export const baichuan = def('baichuan');
