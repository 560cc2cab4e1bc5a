// Embedding encoders of Llama's block, as llama.cpp's loaders (src/models/eurobert.cpp,
// neo-bert.cpp, llama.cpp for llama-embed) read them; the engine runs them with buildLlamaFamily
// (encoderNorm: no head, the final norm's rows pooled by `<arch>.pooling_type`).
// - eurobert (EuroBERT): token_embd, RMS attn_norm / ffn_norm, q/k/v (optional biases: `qkvBias`),
//   attn_output, SwiGLU FFN, output_norm; NeoX RoPE; non-causal (llama.cpp keeps no KV cache).
// - neo-bert (NeoBERT): token_embd, RMS norms, one attn_qkv (no bias), attn_output, one ffn_up of
//   twice the FFN (SwiGLU over its halves), ffn_down, enc.output_norm; RoPE over adjacent pairs.
// - llama-embed (llama-embed-nemotron): Llama's tensors without output.weight; attention both ways
//   with attention.causal false (`causal`: true writes true, the loader's default).
// - modern-bert (ModernBERT): LayerNorms without biases (attention.layer_norm_epsilon):
//   token_embd_norm, attn_norm (block 0 without one unless `attnNorm0`), ffn_norm, output_norm; one
//   attn_qkv [dim, 3 dim] (no bias), attn_output, one ffn_up of twice the FFN (GEGLU, or by
//   `hiddenAct` the hidden_activation key), ffn_down; NeoX RoPE; `window` (attention.sliding_window:
//   symmetric windows on every block but each 3rd from block 0), `swaPattern`
//   (attention.sliding_window_pattern period), `ropeBaseSwa` (rope.freq_base_swa).
// Pooling: `pooling` (1 mean, 2 CLS, 3 last; default 1). Scales: attn_output / ffn_down at
// residualGain as llama.ts.
import { checkHeads, headDim, linear, norm, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { kv } from '../../gguf/writer';
import type { GgufValue } from '../../gguf/writer';
import { baseMetadata } from './common';

export type LlamaEncoderConfig = ModelConfig & {
  /** eurobert: attn_q / attn_k / attn_v biases. */
  qkvBias?: boolean;
  /** modern-bert: attention.sliding_window, its pattern period, rope.freq_base_swa, hidden_activation, block 0's attn_norm. */
  window?: number;
  swaPattern?: number;
  ropeBaseSwa?: number;
  hiddenAct?: string;
  attnNorm0?: boolean;
};

function normalize(c: ModelConfig): ModelConfig {
  const x = c as LlamaEncoderConfig;
  const a = c.arch;
  requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx']);
  if (c.nExperts !== 0 || c.nExpertsUsed !== 0) throw new Error(`${a}: a dense encoder (nExperts / nExpertsUsed must be 0)`);
  checkHeads(c);
  if (!(c.ropeBase > 0)) throw new Error(`${a}: ropeBase must be positive`);
  if (a !== 'llama-embed' && headDim(c) * c.nHeads !== c.dim) throw new Error(`${a}: the loader sizes attn_q / attn_output as n_embd (heads x head must be ${c.dim})`);
  if (!c.tiedEmbeddings) throw new Error(`${a}: an encoder has no output.weight (tiedEmbeddings must be true)`);
  if (x.qkvBias && a !== 'eurobert') throw new Error(`${a}: qkvBias is eurobert's`);
  if ((x.window !== undefined || x.swaPattern !== undefined || x.ropeBaseSwa !== undefined || x.hiddenAct !== undefined || x.attnNorm0) && a !== 'modern-bert')
    throw new Error(`${a}: window / swaPattern / ropeBaseSwa / hiddenAct / attnNorm0 are modern-bert's`);
  if (x.window !== undefined && !(Number.isInteger(x.window) && x.window >= 0)) throw new Error(`${a}: window must be a non-negative integer`);
  if (c.causal !== undefined && a !== 'llama-embed') throw new Error(`${a}: causal is llama-embed's (the others never attend causally)`);
  if (c.pooling !== undefined && ![1, 2, 3].includes(c.pooling)) throw new Error(`${a}: pooling must be 1 (mean), 2 (CLS) or 3 (last)`);
  return c;
}

function metadata(c: ModelConfig): [string, GgufValue][] {
  const a = c.arch;
  const x = c as LlamaEncoderConfig;
  const m = baseMetadata(a, c);
  m.push([`${a}.pooling_type`, kv.u32(c.pooling ?? 1)]);
  if (a === 'modern-bert') {
    // LayerNorms: attention.layer_norm_epsilon instead of the RMS key.
    m.splice(m.findIndex(([k]) => k === `${a}.attention.layer_norm_rms_epsilon`), 1, [`${a}.attention.layer_norm_epsilon`, kv.f32(c.normEps)]);
    m.push([`${a}.attention.causal`, kv.bool(false)]);
    if (x.window !== undefined) m.push([`${a}.attention.sliding_window`, kv.u32(x.window)]);
    if (x.swaPattern !== undefined) m.push([`${a}.attention.sliding_window_pattern`, kv.u32(x.swaPattern)]);
    if (x.ropeBaseSwa !== undefined) m.push([`${a}.rope.freq_base_swa`, kv.f32(x.ropeBaseSwa)]);
    if (x.hiddenAct !== undefined) m.push([`${a}.hidden_activation`, kv.str(x.hiddenAct)]);
  }
  if (a === 'llama-embed') m.push([`${a}.attention.causal`, kv.bool(c.causal ?? false)]);
  return m;
}

function tensors(c: ModelConfig): TensorSpec[] {
  const x = c as LlamaEncoderConfig;
  const a = c.arch;
  const hd = headDim(c);
  const nQ = hd * c.nHeads;
  const nKv = hd * c.nKvHeads;
  const bias = (name: string, n: number, i: number): TensorSpec => ({ name, shape: [n], init: { kind: 'normal', std: 0.1 }, role: 'attn_bias', layer: i });
  const t: TensorSpec[] = [
    { name: 'token_embd.weight', shape: [c.dim, c.vocabSize], init: { kind: 'normal', std: 1 }, role: 'token_embd' },
    norm(a === 'neo-bert' ? 'enc.output_norm.weight' : 'output_norm.weight', c.dim),
  ];
  const fused = a === 'neo-bert' || a === 'modern-bert';
  if (a === 'modern-bert') t.splice(1, 0, norm('token_embd_norm.weight', c.dim));
  for (let i = 0; i < c.nLayers; i++) {
    const p = `blk.${i}`;
    if (a !== 'modern-bert' || i > 0 || x.attnNorm0) t.push(norm(`${p}.attn_norm.weight`, c.dim, i));
    // llama-quant types attn_qkv as attn_v.
    if (fused) t.push(linear(`${p}.attn_qkv.weight`, c.dim, nQ + 2 * nKv, 'attn_v', i));
    else t.push(linear(`${p}.attn_q.weight`, c.dim, nQ, 'attn_q', i), linear(`${p}.attn_k.weight`, c.dim, nKv, 'attn_k', i), linear(`${p}.attn_v.weight`, c.dim, nKv, 'attn_v', i));
    if (x.qkvBias) t.push(bias(`${p}.attn_q.bias`, nQ, i), bias(`${p}.attn_k.bias`, nKv, i), bias(`${p}.attn_v.bias`, nKv, i));
    t.push(linear(`${p}.attn_output.weight`, nQ, c.dim, 'attn_output', i, residualGain(c)));
    t.push(norm(`${p}.ffn_norm.weight`, c.dim, i));
    if (fused) t.push(linear(`${p}.ffn_up.weight`, c.dim, 2 * c.ff, 'ffn_up', i));
    else t.push(linear(`${p}.ffn_gate.weight`, c.dim, c.ff, 'ffn_gate', i), linear(`${p}.ffn_up.weight`, c.dim, c.ff, 'ffn_up', i));
    t.push(linear(`${p}.ffn_down.weight`, c.ff, c.dim, 'ffn_down', i, residualGain(c)));
  }
  return t;
}

const def = (name: string): ArchDefinition => ({ name, ggufArch: name, normalize, metadata, tensors });

export const eurobert = def('eurobert');
export const neoBert = def('neo-bert');
export const llamaEmbed = def('llama-embed');
export const modernBert = def('modern-bert');
