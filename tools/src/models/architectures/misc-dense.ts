// More dense decoders of Llama's family, as llama.cpp's loaders (src/models/<arch>.cpp
// load_arch_hparams / load_arch_tensors) read them; the engine runs them with buildLlamaFamily's
// DenseLayout (packages/engine/src/model/architectures/llama-family.ts). Every one: token_embd, RMS
// norms (attention.layer_norm_rms_epsilon), attn_output, output_norm.
// - qwen2vl (Qwen2-VL's language model): Llama's block, q/k/v biases (`qkvBias`), M-RoPE sections
//   (rope.dimension_sections, INT32 x 4, required); `outputBias`: the output.bias its loader reads
//   and its graph leaves out. The vision tower lives in a separate mmproj file.
// - hunyuan_vl (HunyuanOCR's language model): hunyuan-dense's block (per-head q/k norms after NeoX
//   RoPE), rope.scaling.alpha (`ropeAlpha`), optional XD-RoPE sections (`ropeSections`).
// - plamo (PLaMo-13B): attention and the SwiGLU FFN side by side from one attn_norm (no ffn_norm),
//   optional q/k/v biases, output.weight required.
// - plamo3 (PLaMo 3): one attn_qkv (no bias), per-head q/k norms, post_attention_norm, ffn_norm, one
//   ffn_up of twice the FFN, post_ffw_norm (the post norms named without '.weight', as llama.cpp's
//   loader looks them up; `postNormWeightNames`: with it, as its converter writes them); `window` (attention.sliding_window), `swaPattern`
//   (attention.sliding_window_pattern: BOOL per block or a UINT32 period; absent: 8) and
//   `ropeBaseSwa` (rope.freq_base_swa; absent: the loader's 10000).
// - pangu-embedded (openPangu-Embedded): Llama's block with q/k/v biases (optional), attn_output.bias
//   (required), `ropeFreqs`: a rope_freqs.weight its loader reads and its graph leaves out.
// - openelm (OpenELM): head counts, KV head counts and FFN widths per block (`heads`, `kvHeads`, `ffs`:
//   INT32 arrays, as convert_hf_to_gguf writes them; key_length / value_length from headDim), one
//   attn_qkv (no bias), per-head q/k norms, the head always token_embd.
// Scales: attn_output / ffn_down at residualGain as llama.ts; post norms' gains 2 / sqrt(2L) (llama-dense.ts).
import { checkHeads, embeddings, headDim, linear, norm, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec, WeightInit } from '../arch';
import { GgufType } from '../../gguf/constants';
import { kv } from '../../gguf/writer';
import type { GgufValue } from '../../gguf/writer';
import { baseMetadata } from './common';

export type MiscDenseConfig = ModelConfig & {
  qkvBias?: boolean;
  ropeSections?: number[];
  ropeAlpha?: number;
  outputBias?: boolean;
  window?: number;
  swaPattern?: boolean[] | number;
  ropeBaseSwa?: number;
  ropeFreqs?: boolean;
  /** plamo3: post_attention_norm / post_ffw_norm named with '.weight', as its converter writes them (llama.cpp's loader cannot load them). */
  postNormWeightNames?: boolean;
  heads?: number[];
  kvHeads?: number[];
  ffs?: number[];
};

const MISC_ARCHS = ['qwen2vl', 'hunyuan_vl', 'plamo', 'plamo3', 'pangu-embedded', 'openelm'] as const;

const gainInit = (mean: number): WeightInit => ({ kind: 'normal', mean, std: 0.1 * mean });
const bias = (name: string, n: number, i?: number, std = 0.1): TensorSpec => ({ name, shape: [n], init: { kind: 'normal', std }, role: 'attn_bias', layer: i });

function normalize(c: ModelConfig): ModelConfig {
  const x = c as MiscDenseConfig;
  const a = c.arch;
  requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx']);
  if (c.nExperts !== 0 || c.nExpertsUsed !== 0) throw new Error(`${a}: a dense architecture (nExperts / nExpertsUsed must be 0)`);
  checkHeads(c);
  if (!(c.ropeBase > 0)) throw new Error(`${a}: ropeBase must be positive`);
  if (a === 'plamo' && c.tiedEmbeddings) throw new Error('plamo: the loader requires output.weight (tiedEmbeddings must be false)');
  if (a === 'openelm' && !c.tiedEmbeddings) throw new Error('openelm: the loader reads no output.weight (tiedEmbeddings must be true)');
  if (x.qkvBias && a !== 'qwen2vl' && a !== 'plamo' && a !== 'pangu-embedded') throw new Error(`${a}: qkvBias is qwen2vl's, plamo's and pangu-embedded's`);
  if (x.outputBias && (a !== 'qwen2vl' || c.tiedEmbeddings)) throw new Error(`${a}: outputBias is qwen2vl's, with output.weight`);
  if (x.postNormWeightNames && a !== 'plamo3') throw new Error(`${a}: postNormWeightNames is plamo3's`);
  if (x.ropeFreqs && a !== 'pangu-embedded') throw new Error(`${a}: ropeFreqs is pangu-embedded's`);
  if (x.ropeAlpha !== undefined && (a !== 'hunyuan_vl' || !(x.ropeAlpha > 0))) throw new Error(`${a}: ropeAlpha is hunyuan_vl's and must be positive`);
  if ((a === 'qwen2vl') !== (x.ropeSections !== undefined) && a !== 'hunyuan_vl') throw new Error(`${a}: ropeSections are qwen2vl's (required) and hunyuan_vl's`);
  if (x.ropeSections !== undefined && (x.ropeSections.length !== 4 || !x.ropeSections.every((v) => Number.isInteger(v) && v >= 0) || x.ropeSections.reduce((s, v) => s + v, 0) > headDim(c) / 2))
    throw new Error(`${a}: ropeSections must be 4 non-negative integers covering at most the head's ${headDim(c) / 2} rotated pairs`);
  if ((x.window !== undefined || x.swaPattern !== undefined || x.ropeBaseSwa !== undefined) && a !== 'plamo3') throw new Error(`${a}: window / swaPattern / ropeBaseSwa are plamo3's`);
  if (x.window !== undefined && (!Number.isInteger(x.window) || x.window < 1)) throw new Error(`${a}: window must be a positive integer`);
  if (Array.isArray(x.swaPattern) && x.swaPattern.length !== c.nLayers) throw new Error(`${a}: swaPattern has ${x.swaPattern.length} entries for ${c.nLayers} blocks`);
  if ((x.heads !== undefined || x.kvHeads !== undefined || x.ffs !== undefined) !== (a === 'openelm')) throw new Error(`${a}: heads / kvHeads / ffs are openelm's (required there)`);
  if (a === 'openelm') {
    if (c.headDim === undefined) throw new Error('openelm: headDim is required (key_length)');
    for (const [k, v] of [['heads', x.heads], ['kvHeads', x.kvHeads], ['ffs', x.ffs]] as const)
      if (!Array.isArray(v) || v.length !== c.nLayers || !v.every((n) => Number.isInteger(n) && n > 0)) throw new Error(`openelm: ${k} needs one positive integer per block (${c.nLayers})`);
    x.heads!.forEach((h, i) => {
      if (h % x.kvHeads![i] !== 0) throw new Error(`openelm: block ${i}: heads ${h} not divisible by kv heads ${x.kvHeads![i]}`);
    });
  }
  return c;
}

function metadata(c: ModelConfig): [string, GgufValue][] {
  const x = c as MiscDenseConfig;
  const a = c.arch;
  const m = baseMetadata(a, c);
  if (a === 'openelm') {
    const set = (k: string, v: number[]) => (m[m.findIndex(([key]) => key === `${a}.${k}`)] = [`${a}.${k}`, kv.arr(GgufType.INT32, v)]);
    set('attention.head_count', x.heads!);
    set('attention.head_count_kv', x.kvHeads!);
    set('feed_forward_length', x.ffs!);
  }
  if (x.ropeSections !== undefined) m.push([`${a}.rope.dimension_sections`, kv.arr(GgufType.INT32, x.ropeSections)]);
  if (x.ropeAlpha !== undefined) m.push([`${a}.rope.scaling.alpha`, kv.f32(x.ropeAlpha)]);
  if (x.window !== undefined) m.push([`${a}.attention.sliding_window`, kv.u32(x.window)]);
  if (Array.isArray(x.swaPattern)) m.push([`${a}.attention.sliding_window_pattern`, kv.arr(GgufType.BOOL, x.swaPattern)]);
  else if (x.swaPattern !== undefined) m.push([`${a}.attention.sliding_window_pattern`, kv.u32(x.swaPattern)]);
  if (x.ropeBaseSwa !== undefined) m.push([`${a}.rope.freq_base_swa`, kv.f32(x.ropeBaseSwa)]);
  return m;
}

function tensors(c: ModelConfig): TensorSpec[] {
  const x = c as MiscDenseConfig;
  const a = c.arch;
  const hd = headDim(c);
  const post = a === 'plamo3';
  // llama.cpp's plamo3 loader looks its post norms up without '.weight' (its converter writes it).
  const sfx = x.postNormWeightNames ? '.weight' : '';
  const t = embeddings(c);
  if (x.outputBias) t.push(bias('output.bias', c.vocabSize));
  if (x.ropeFreqs) t.push({ name: 'rope_freqs.weight', shape: [hd / 2], init: { kind: 'normal', mean: 2, std: 0.5 }, role: 'bias' });
  for (let i = 0; i < c.nLayers; i++) {
    const p = `blk.${i}`;
    const nH = x.heads?.[i] ?? c.nHeads;
    const nKvH = x.kvHeads?.[i] ?? c.nKvHeads;
    const ff = x.ffs?.[i] ?? c.ff;
    const [nQ, nKv] = [hd * nH, hd * nKvH];
    t.push(norm(`${p}.attn_norm.weight`, c.dim, i));
    // llama-quant types attn_qkv as attn_v.
    if (a === 'plamo3' || a === 'openelm') t.push(linear(`${p}.attn_qkv.weight`, c.dim, nQ + 2 * nKv, 'attn_v', i));
    else t.push(linear(`${p}.attn_q.weight`, c.dim, nQ, 'attn_q', i), linear(`${p}.attn_k.weight`, c.dim, nKv, 'attn_k', i), linear(`${p}.attn_v.weight`, c.dim, nKv, 'attn_v', i));
    if (x.qkvBias) t.push(bias(`${p}.attn_q.bias`, nQ, i), bias(`${p}.attn_k.bias`, nKv, i), bias(`${p}.attn_v.bias`, nKv, i));
    if (a === 'hunyuan_vl' || a === 'plamo3' || a === 'openelm') t.push(norm(`${p}.attn_q_norm.weight`, hd, i), norm(`${p}.attn_k_norm.weight`, hd, i));
    t.push(linear(`${p}.attn_output.weight`, nQ, c.dim, 'attn_output', i, post ? 1 : residualGain(c)));
    if (a === 'pangu-embedded') t.push(bias(`${p}.attn_output.bias`, c.dim, i, 0.5));
    if (post) t.push({ ...norm(`${p}.post_attention_norm${sfx}`, c.dim, i), init: gainInit(2 * residualGain(c)) });
    if (a !== 'plamo') t.push(norm(`${p}.ffn_norm.weight`, c.dim, i));
    if (a === 'plamo3') t.push(linear(`${p}.ffn_up.weight`, c.dim, 2 * ff, 'ffn_up', i));
    else t.push(linear(`${p}.ffn_gate.weight`, c.dim, ff, 'ffn_gate', i), linear(`${p}.ffn_up.weight`, c.dim, ff, 'ffn_up', i));
    t.push(linear(`${p}.ffn_down.weight`, ff, c.dim, 'ffn_down', i, post ? 1 : residualGain(c)));
    if (post) t.push({ ...norm(`${p}.post_ffw_norm${sfx}`, c.dim, i), init: gainInit(2 * residualGain(c)) });
  }
  return t;
}

const def = (name: (typeof MISC_ARCHS)[number]): ArchDefinition => ({ name, ggufArch: name, normalize, metadata, tensors });

export const qwen2vl = def('qwen2vl');
export const hunyuanVl = def('hunyuan_vl');
export const plamo = def('plamo');
export const plamo3 = def('plamo3');
export const panguEmbedded = def('pangu-embedded');
export const openelm = def('openelm');
