// Jais, Jais-2 and BitNet b1.58, as llama.cpp's loaders (src/models/jais.cpp, jais2.cpp,
// bitnet.cpp load_arch_hparams / load_arch_tensors) read them; the engine runs them with
// buildLlamaFamily's DenseLayout (packages/engine/src/model/architectures/llama-family.ts).
// - jais (Jais): LayerNorms with weight and bias (attention.layer_norm_epsilon) on attn_norm,
//   ffn_norm and output_norm; one attn_qkv [dim, dim + 2 kv] with its bias; attn_output with its
//   bias; a SwiGLU FFN whose ffn_gate / ffn_up / ffn_down each have a bias; output.weight
//   (required). No rope.* keys (ALiBi); attention.max_alibi_bias (`maxAlibiBias`: its converter
//   writes one; absent, llama.cpp's default 0 turns ALiBi off). Its muP scales are folded into
//   token_embd and output by the converter, so the file carries none.
// - jais2 (Jais-2): the same LayerNorms, q/k/v with biases (`qkvBias`; optional in its loader),
//   attn_output with its bias, an ungated ReLU² FFN with ffn_up / ffn_down biases (required), NeoX
//   RoPE over the whole head, head output.weight or token_embd.
// - bitnet (BitNet b1.58): Llama's block (RMS norms, q/k/v/o without biases, NeoX RoPE) plus
//   attn_sub_norm [dim] and ffn_sub_norm [ff] (RMS) before attn_output and ffn_down, and with
//   `weightScales` a one-value F32 `.scale` per projection (attn_q.scale ... ffn_down.scale,
//   optional in its loader); the head is token_embd (the loader reads no output.weight).
// Scales: attn_output / ffn_down at residualGain as llama.ts.
import { checkHeads, embeddings, f32Tensor, headDim, linear, norm, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { kv } from '../../gguf/writer';
import type { GgufValue } from '../../gguf/writer';
import { baseMetadata } from './common';

export type JaisBitnetConfig = ModelConfig & {
  /** jais: attention.max_alibi_bias (absent: not written). */
  maxAlibiBias?: number;
  /** jais2: attn_q / attn_k / attn_v biases. */
  qkvBias?: boolean;
  /** bitnet: the per-projection `.scale` tensors. */
  weightScales?: boolean;
};

const bias = (name: string, n: number, i?: number, std = 0.1): TensorSpec => ({ name, shape: [n], init: { kind: 'normal', std }, role: 'attn_bias', layer: i });

function normalize(c: ModelConfig): ModelConfig {
  const x = c as JaisBitnetConfig;
  const a = c.arch;
  requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx']);
  if (c.nExperts !== 0 || c.nExpertsUsed !== 0) throw new Error(`${a}: a dense architecture (nExperts / nExpertsUsed must be 0)`);
  checkHeads(c);
  if (headDim(c) * c.nHeads !== c.dim && a !== 'jais2') throw new Error(`${a}: the loader sizes attn_q / attn_output as n_embd (heads x head must be ${c.dim})`);
  if (a === 'jais' && c.tiedEmbeddings) throw new Error('jais: the loader requires output.weight (tiedEmbeddings must be false)');
  if (a === 'bitnet' && !c.tiedEmbeddings) throw new Error('bitnet: the loader reads no output.weight (tiedEmbeddings must be true)');
  if (x.maxAlibiBias !== undefined && (a !== 'jais' || !(x.maxAlibiBias >= 0) || !Number.isFinite(x.maxAlibiBias))) throw new Error(`${a}: maxAlibiBias is jais's, a non-negative number`);
  if (x.qkvBias && a !== 'jais2') throw new Error(`${a}: qkvBias is jais2's`);
  if (x.weightScales && a !== 'bitnet') throw new Error(`${a}: weightScales is bitnet's`);
  if (a !== 'jais' && !(c.ropeBase > 0)) throw new Error(`${a}: ropeBase must be positive`);
  return c;
}

function metadata(c: ModelConfig): [string, GgufValue][] {
  const x = c as JaisBitnetConfig;
  const a = c.arch;
  let m = baseMetadata(a, c);
  if (a !== 'bitnet') m = m.map(([k, v]): [string, GgufValue] => (k === `${a}.attention.layer_norm_rms_epsilon` ? [`${a}.attention.layer_norm_epsilon`, v] : [k, v]));
  // Jais: ALiBi, its converter writes no rope.* keys.
  if (a === 'jais') m = m.filter(([k]) => !k.startsWith(`${a}.rope.`));
  if (x.maxAlibiBias !== undefined) m.push([`${a}.attention.max_alibi_bias`, kv.f32(x.maxAlibiBias)]);
  return m;
}

function tensors(c: ModelConfig): TensorSpec[] {
  const x = c as JaisBitnetConfig;
  const a = c.arch;
  const hd = headDim(c);
  const nQ = hd * c.nHeads;
  const nKv = hd * c.nKvHeads;
  const ln = a !== 'bitnet';
  const t = embeddings(c);
  const blockNorm = (base: string, i?: number): TensorSpec[] => (ln ? [norm(`${base}.weight`, c.dim, i), bias(`${base}.bias`, c.dim, i)] : [norm(`${base}.weight`, c.dim, i)]);
  if (ln) t.splice(t.findIndex((s) => s.name === 'output_norm.weight'), 1, ...blockNorm('output_norm'));
  // BitNet's per-tensor scales: one F32 value each, near 1 but not 1.
  const scale = (name: string, i: number): TensorSpec[] => (x.weightScales ? [f32Tensor(`blk.${i}.${name}.scale`, [1], { kind: 'normal', mean: 1, std: 0.3 }, i)] : []);
  for (let i = 0; i < c.nLayers; i++) {
    const p = `blk.${i}`;
    t.push(...blockNorm(`${p}.attn_norm`, i));
    // llama-quant types attn_qkv as attn_v.
    if (a === 'jais') t.push(linear(`${p}.attn_qkv.weight`, c.dim, nQ + 2 * nKv, 'attn_v', i), bias(`${p}.attn_qkv.bias`, nQ + 2 * nKv, i));
    else {
      t.push(linear(`${p}.attn_q.weight`, c.dim, nQ, 'attn_q', i), ...scale('attn_q', i));
      t.push(linear(`${p}.attn_k.weight`, c.dim, nKv, 'attn_k', i), ...scale('attn_k', i));
      t.push(linear(`${p}.attn_v.weight`, c.dim, nKv, 'attn_v', i), ...scale('attn_v', i));
      if (x.qkvBias) t.push(bias(`${p}.attn_q.bias`, nQ, i), bias(`${p}.attn_k.bias`, nKv, i), bias(`${p}.attn_v.bias`, nKv, i));
    }
    if (a === 'bitnet') t.push(norm(`${p}.attn_sub_norm.weight`, c.dim, i));
    t.push(linear(`${p}.attn_output.weight`, nQ, c.dim, 'attn_output', i, residualGain(c)), ...scale('attn_output', i));
    if (ln) t.push(bias(`${p}.attn_output.bias`, c.dim, i, 0.5));
    t.push(...blockNorm(`${p}.ffn_norm`, i));
    if (a !== 'jais2') t.push(linear(`${p}.ffn_gate.weight`, c.dim, c.ff, 'ffn_gate', i), ...scale('ffn_gate', i));
    t.push(linear(`${p}.ffn_up.weight`, c.dim, c.ff, 'ffn_up', i), ...scale('ffn_up', i));
    if (a === 'bitnet') t.push(norm(`${p}.ffn_sub_norm.weight`, c.ff, i));
    t.push(linear(`${p}.ffn_down.weight`, c.ff, c.dim, 'ffn_down', i, residualGain(c)), ...scale('ffn_down', i));
    if (a === 'jais') t.push(bias(`${p}.ffn_gate.bias`, c.ff, i));
    if (ln) t.push(bias(`${p}.ffn_up.bias`, c.ff, i), bias(`${p}.ffn_down.bias`, c.dim, i));
  }
  return t;
}

const def = (name: string): ArchDefinition => ({ name, ggufArch: name, normalize, metadata, tensors });

export const jais = def('jais');
export const jais2 = def('jais2');
export const bitnet = def('bitnet');
