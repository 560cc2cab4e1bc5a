// HRM-Text (`hrm_text`, DFM Mimir), as llama.cpp's loader (src/models/hrm-text.cpp) and converter
// (conversion/hrm_text.py) lay it out: two stacks of `layersPerStack` pre-norm blocks, the low
// stack in blk.0..lps-1 and the high one in blk.lps..2lps-1, each block attn_q / attn_k / attn_v,
// attn_gate (the sigmoid gate of the attention's output, from the block's normed input),
// attn_output and a SwiGLU FFN; no norm weights at all (every RMS norm is parameterless);
// hrm.z_l_init (no `.weight`: the low stack's initial state, [dim]); token_embd and output.weight
// unless tied. block_count is not the blocks written but the KV cache slots the graph runs:
// lps x h_cycles x (l_cycles + 1), one per block of every stack pass. Keys hrm.layers_per_stack,
// hrm.h_cycles, hrm.l_cycles, hrm.prefix_lm (read, unused by llama.cpp), embedding_scale
// (optional: absent or 0, the embedding is not scaled). The engine runs it with buildHrmText
// (packages/engine/src/model/architectures/hrm-text.ts).
import { checkHeads, f32Tensor, headDim, linear, linearInit, requirePositive } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { kv } from '../../gguf/writer';
import type { GgufValue } from '../../gguf/writer';
import { baseMetadata } from './common';

export type HrmTextConfig = ModelConfig & {
  /** Blocks per stack (hrm.layers_per_stack). */
  layersPerStack: number;
  /** High-stack passes (hrm.h_cycles); each runs the low stack lCycles times first. */
  hCycles: number;
  /** Low-stack passes per high pass (hrm.l_cycles). */
  lCycles: number;
  /** embedding_scale (absent: no key, the embedding unscaled). */
  embeddingScale?: number;
  /** hrm.prefix_lm (default false; llama.cpp reads it and runs causal attention regardless). */
  prefixLm?: boolean;
};

/** KV cache slots of an HRM-Text model: a slot per block of every stack pass (its block_count). */
export function hrmSlots(c: Pick<HrmTextConfig, 'layersPerStack' | 'hCycles' | 'lCycles'>): number {
  return c.layersPerStack * c.hCycles * (c.lCycles + 1);
}

function normalize(c: ModelConfig): ModelConfig {
  const x = c as HrmTextConfig;
  requirePositive(c, ['dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx']);
  for (const f of ['layersPerStack', 'hCycles', 'lCycles'] as const)
    if (!Number.isInteger(x[f]) || x[f] < 1) throw new Error(`hrm_text: ${f} must be a positive integer, got ${String(x[f])}`);
  if (c.nExperts !== 0 || c.nExpertsUsed !== 0) throw new Error('hrm_text: a dense architecture (nExperts / nExpertsUsed must be 0)');
  checkHeads(c);
  if (x.embeddingScale !== undefined && !Number.isFinite(x.embeddingScale)) throw new Error('hrm_text: embeddingScale must be a finite number');
  // (block_count is the slot count: nLayers must be it, the blocks written follow layersPerStack.)
  if (c.nLayers !== hrmSlots(x)) throw new Error(`hrm_text: nLayers (block_count) must be the KV cache slots layersPerStack x hCycles x (lCycles + 1) = ${hrmSlots(x)}, got ${c.nLayers}`);
  return c;
}

function metadata(c: ModelConfig): [string, GgufValue][] {
  const x = c as HrmTextConfig;
  const a = 'hrm_text';
  const m = baseMetadata(a, c);
  m.push(
    [`${a}.hrm.layers_per_stack`, kv.u32(x.layersPerStack)],
    [`${a}.hrm.h_cycles`, kv.u32(x.hCycles)],
    [`${a}.hrm.l_cycles`, kv.u32(x.lCycles)],
    [`${a}.hrm.prefix_lm`, kv.bool(x.prefixLm ?? false)],
  );
  if (x.embeddingScale !== undefined) m.push([`${a}.embedding_scale`, kv.f32(x.embeddingScale)]);
  return m;
}

function tensors(c: ModelConfig): TensorSpec[] {
  const x = c as HrmTextConfig;
  const hd = headDim(c);
  const [nQ, nKv] = [hd * c.nHeads, hd * c.nKvHeads];
  // The embedding's rows at std 1 (tied: the head's scale), z_L's at std 1 beside it.
  const t: TensorSpec[] = [
    { name: 'token_embd.weight', shape: [c.dim, c.vocabSize], init: c.tiedEmbeddings ? linearInit(c.dim, 2) : { kind: 'normal', std: 1 }, role: 'token_embd' },
  ];
  if (!c.tiedEmbeddings) t.push(linear('output.weight', c.dim, c.vocabSize, 'output', undefined, 2));
  t.push(f32Tensor('hrm.z_l_init', [c.dim], { kind: 'normal', std: 1 }));
  // Every stack pass adds its blocks' outputs to a normed stream: the residual gain of one stack.
  const gain = 1 / Math.sqrt(2 * x.layersPerStack);
  for (let i = 0; i < 2 * x.layersPerStack; i++) {
    const p = `blk.${i}`;
    t.push(linear(`${p}.attn_q.weight`, c.dim, nQ, 'attn_q', i), linear(`${p}.attn_k.weight`, c.dim, nKv, 'attn_k', i), linear(`${p}.attn_v.weight`, c.dim, nKv, 'attn_v', i));
    // The gate's pre-activations at std ~1 (llama-quant types attn_gate like attn_q).
    t.push(linear(`${p}.attn_gate.weight`, c.dim, nQ, 'attn_q', i));
    t.push(linear(`${p}.attn_output.weight`, nQ, c.dim, 'attn_output', i, gain));
    t.push(linear(`${p}.ffn_gate.weight`, c.dim, c.ff, 'ffn_gate', i), linear(`${p}.ffn_up.weight`, c.dim, c.ff, 'ffn_up', i), linear(`${p}.ffn_down.weight`, c.ff, c.dim, 'ffn_down', i, gain));
  }
  return t;
}

export const hrmText: ArchDefinition = { name: 'hrm_text', ggufArch: 'hrm_text', normalize, metadata, tensors };
