// EAGLE-3 draft models (llama.cpp's `eagle3`, src/models/eagle3.cpp; conversion/llama.py writes them
// from an EAGLE-3 checkpoint and its target's config): an encoder `fc` over the target's hidden
// states at three layers (eagle3.target_layers, each eagle3.target_hidden_size wide, concatenated),
// optionally RMS-normed first (enc.output_norm, eagle3.norm_before_fc), and one llama decoder block
// whose attention reads [attn_norm(embed(token)); attn_norm_2(g)] (twice the width) and whose
// residual is g (or its norm, eagle3.norm_before_residual). Its own token_embd and output are
// optional (llama.cpp takes the target's), and `d2t` (I64, absolute target ids) maps a smaller
// draft vocabulary back to the target's.
import { GgufType } from '../../gguf/constants';
import { kv } from '../../gguf/writer';
import { checkHeads, headDim, linear, linearInit, norm, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { baseMetadata } from './common';

export interface Eagle3Config extends ModelConfig {
  /** The three target layers whose inputs the encoder reads (llama.cpp's extract_layers). */
  targetLayers: [number, number, number];
  /** The target's n_embd. */
  targetDim: number;
  /** Write token_embd.weight and output.weight (else the target's are used). Default true. */
  ownEmbeddings?: boolean;
  /** A draft vocabulary of this many tokens with a d2t map into the target's (0: none). */
  draftVocab?: number;
  normBeforeFc?: boolean;
  normBeforeResidual?: boolean;
}

function normalize(c: ModelConfig): ModelConfig {
  const e = c as Eagle3Config;
  requirePositive(c, ['dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx', 'targetDim' as keyof ModelConfig]);
  checkHeads(c);
  if (c.nLayers !== 1) throw new Error('eagle3: a draft has exactly one decoder block (--layers 1)');
  if (!Array.isArray(e.targetLayers) || e.targetLayers.length !== 3 || !e.targetLayers.every((l) => Number.isInteger(l) && l >= 0))
    throw new Error('eagle3: targetLayers must be three block indices');
  const dv = e.draftVocab ?? 0;
  if (!Number.isInteger(dv) || dv < 0 || dv > c.vocabSize) throw new Error(`eagle3: draftVocab must be in [0, ${c.vocabSize}]`);
  if (e.ownEmbeddings === false && dv) throw new Error('eagle3: a d2t draft vocabulary needs its own output head');
  return c;
}

/** The d2t map: `n` distinct target ids, ascending, spread over the vocabulary (every other id first). */
export function eagle3D2t(nVocab: number, n: number): number[] {
  const ids: number[] = [];
  for (let i = 0; i < nVocab && ids.length < n; i += 2) ids.push(i);
  for (let i = 1; i < nVocab && ids.length < n; i += 2) ids.push(i);
  return ids.sort((a, b) => a - b);
}

function tensors(c: ModelConfig): TensorSpec[] {
  const e = c as Eagle3Config;
  const d = c.dim;
  const nIn = 3 * e.targetDim;
  const hd = headDim(c);
  const dv = e.draftVocab ?? 0;
  const own = e.ownEmbeddings !== false;
  const t: TensorSpec[] = [];
  if (own) t.push({ name: 'token_embd.weight', shape: [d, c.vocabSize], init: { kind: 'normal', std: 1 }, role: 'token_embd' });
  t.push(linear('fc.weight', nIn, d, 'attn_q'));
  if (e.normBeforeFc) t.push(norm('enc.output_norm.weight', nIn));
  t.push(norm('output_norm.weight', d));
  if (own) t.push(linear('output.weight', d, dv || c.vocabSize, 'output', undefined, 2));
  if (dv) t.push({ name: 'd2t', shape: [dv], init: { kind: 'values', values: eagle3D2t(c.vocabSize, dv) }, role: 'index64' });
  const p = 'blk.0';
  t.push(
    norm(`${p}.attn_norm.weight`, d, 0),
    norm(`${p}.attn_norm_2.weight`, d, 0),
    linear(`${p}.attn_q.weight`, 2 * d, hd * c.nHeads, 'attn_q', 0),
    linear(`${p}.attn_k.weight`, 2 * d, hd * c.nKvHeads, 'attn_k', 0),
    linear(`${p}.attn_v.weight`, 2 * d, hd * c.nKvHeads, 'attn_v', 0),
    { name: `${p}.attn_output.weight`, shape: [hd * c.nHeads, d], init: linearInit(hd * c.nHeads, residualGain(c)), role: 'attn_output', layer: 0 },
    norm(`${p}.ffn_norm.weight`, d, 0),
    linear(`${p}.ffn_gate.weight`, d, c.ff, 'ffn_gate', 0),
    linear(`${p}.ffn_up.weight`, d, c.ff, 'ffn_up', 0),
    { name: `${p}.ffn_down.weight`, shape: [c.ff, d], init: linearInit(c.ff, residualGain(c)), role: 'ffn_down', layer: 0 },
  );
  return t;
}

export const eagle3: ArchDefinition = {
  name: 'eagle3',
  ggufArch: 'eagle3',
  normalize,
  metadata: (c) => {
    const e = c as Eagle3Config;
    return [
      ...baseMetadata('eagle3', c),
      ['eagle3.target_layers', kv.arr(GgufType.INT32, e.targetLayers)],
      ['eagle3.target_hidden_size', kv.u32(e.targetDim)],
      ['eagle3.norm_before_residual', kv.bool(!!e.normBeforeResidual)],
      ['eagle3.norm_before_fc', kv.bool(!!e.normBeforeFc)],
    ];
  },
  tensors,
};
