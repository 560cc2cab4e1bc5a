// Muse Glimmer (`muse-glimmer`), as llama.cpp's loader (src/models/muse-glimmer.cpp) reads it:
// token_embd, output_norm, output.weight (required); per block attn_norm, attn_q / attn_k / attn_v,
// per-head attn_q_norm / attn_k_norm, attn_gate (the sigmoid gate of the attention's output, from
// the block's normed input), attn_output, post_attention_norm, ffn_norm, a SwiGLU FFN,
// post_ffw_norm. Keys: attention.sliding_window (required), `swaPattern`
// (attention.sliding_window_pattern: BOOL per block or a UINT32 period; absent: every 4th block
// full), `ropeBaseSwa` (rope.freq_base_swa), `logitScale` (logit_scale, required), `softcap`
// (final_logit_softcapping; absent: the loader's default 30). The engine runs it with buildMuseGlimmer (packages/engine/src/model/
// architectures/muse-glimmer.ts). Post norms' gains 2 / sqrt(2L) as llama-dense.ts.
import { checkHeads, embeddings, f32Tensor, headDim, linear, norm, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { GgufType } from '../../gguf/constants';
import { kv } from '../../gguf/writer';
import type { GgufValue } from '../../gguf/writer';
import { baseMetadata } from './common';

export type MuseGlimmerConfig = ModelConfig & {
  window: number;
  swaPattern?: boolean[] | number;
  ropeBaseSwa?: number;
  logitScale: number;
  softcap?: number;
};

function normalize(c: ModelConfig): ModelConfig {
  const x = c as MuseGlimmerConfig;
  requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx']);
  if (c.nExperts !== 0 || c.nExpertsUsed !== 0) throw new Error('muse-glimmer: a dense architecture (nExperts / nExpertsUsed must be 0)');
  checkHeads(c);
  if (c.tiedEmbeddings) throw new Error('muse-glimmer: the loader requires output.weight (tiedEmbeddings must be false)');
  if (!Number.isInteger(x.window) || x.window < 1) throw new Error('muse-glimmer: window (attention.sliding_window) must be a positive integer');
  if (!Number.isFinite(x.logitScale)) throw new Error('muse-glimmer: logitScale (logit_scale) is required');
  if (x.softcap !== undefined && !(x.softcap > 0)) throw new Error('muse-glimmer: softcap must be positive');
  if (Array.isArray(x.swaPattern) && x.swaPattern.length !== c.nLayers) throw new Error(`muse-glimmer: swaPattern has ${x.swaPattern.length} entries for ${c.nLayers} blocks`);
  return c;
}

function metadata(c: ModelConfig): [string, GgufValue][] {
  const x = c as MuseGlimmerConfig;
  const a = 'muse-glimmer';
  const m = baseMetadata(a, c);
  m.push([`${a}.attention.sliding_window`, kv.u32(x.window)], [`${a}.logit_scale`, kv.f32(x.logitScale)]);
  if (Array.isArray(x.swaPattern)) m.push([`${a}.attention.sliding_window_pattern`, kv.arr(GgufType.BOOL, x.swaPattern)]);
  else if (x.swaPattern !== undefined) m.push([`${a}.attention.sliding_window_pattern`, kv.u32(x.swaPattern)]);
  if (x.ropeBaseSwa !== undefined) m.push([`${a}.rope.freq_base_swa`, kv.f32(x.ropeBaseSwa)]);
  if (x.softcap !== undefined) m.push([`${a}.final_logit_softcapping`, kv.f32(x.softcap)]);
  return m;
}

function tensors(c: ModelConfig): TensorSpec[] {
  const hd = headDim(c);
  const t = embeddings(c);
  const post = { kind: 'normal' as const, mean: 2 * residualGain(c), std: 0.2 * residualGain(c) };
  for (let i = 0; i < c.nLayers; i++) {
    const p = `blk.${i}`;
    const [nQ, nKv] = [hd * c.nHeads, hd * c.nKvHeads];
    t.push(norm(`${p}.attn_norm.weight`, c.dim, i));
    t.push(linear(`${p}.attn_q.weight`, c.dim, nQ, 'attn_q', i), linear(`${p}.attn_k.weight`, c.dim, nKv, 'attn_k', i), linear(`${p}.attn_v.weight`, c.dim, nKv, 'attn_v', i));
    t.push(norm(`${p}.attn_q_norm.weight`, hd, i), norm(`${p}.attn_k_norm.weight`, hd, i));
    // The gate's pre-activations at std ~1 (llama-quant types attn_gate like attn_q).
    t.push(linear(`${p}.attn_gate.weight`, c.dim, nQ, 'attn_q', i));
    t.push(linear(`${p}.attn_output.weight`, nQ, c.dim, 'attn_output', i));
    t.push(f32Tensor(`${p}.post_attention_norm.weight`, [c.dim], post, i));
    t.push(norm(`${p}.ffn_norm.weight`, c.dim, i));
    t.push(linear(`${p}.ffn_gate.weight`, c.dim, c.ff, 'ffn_gate', i), linear(`${p}.ffn_up.weight`, c.dim, c.ff, 'ffn_up', i), linear(`${p}.ffn_down.weight`, c.ff, c.dim, 'ffn_down', i));
    t.push(f32Tensor(`${p}.post_ffw_norm.weight`, [c.dim], post, i));
  }
  return t;
}

export const museGlimmer: ArchDefinition = { name: 'muse-glimmer', ggufArch: 'muse-glimmer', normalize, metadata, tensors };
