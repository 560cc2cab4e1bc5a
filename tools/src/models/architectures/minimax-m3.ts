// MiniMax-M3 (`minimax-m3`, llama.cpp src/models/minimax-m3.cpp): MiniMax-M2's GQA with per-head
// q/k norms and partial NeoX RoPE, DeepSeek-V3's leading dense blocks, sigmoid + bias routed
// experts (renormalized, scaled) beside shared experts, swigluoai activations everywhere, and MSA
// (MiniMax Sparse Attention) on every routed block: a lightning indexer (one head per KV group,
// indexer.q_proj / k_proj with per-head RMS norms and the block's RoPE) scores each position, the
// scores are max-pooled into blocks of attention.indexer.block_size positions, the token's own
// block and the local_blocks - 1 before it are forced in, and each KV group attends to the top_k
// blocks only. Keys as conversion/minimax.py writes them; its norms carry the +1 baked in.
import { attention, checkHeads, embeddings, headDim, linear, norm, requirePositive } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { kv } from '../../gguf/writer';
import type { GgufValue } from '../../gguf/writer';
import { baseMetadata } from './common';
import { checkDeepseekMoe, deepseekFfn, deepseekMoeMetadata } from './deepseek2';
import type { DeepseekMoeOptions } from './deepseek2';

/** MSA: indexer heads (one per KV head), indexer head size, blocks kept, positions per block, forced local blocks. */
export interface MsaOptions {
  nHead: number;
  headDim: number;
  topK: number;
  block: number;
  local: number;
}

/** ropeDims: rope.dimension_count (partial NeoX RoPE, also on the indexer's heads). */
export type MinimaxM3Config = ModelConfig & { ropeDims: number; moe: DeepseekMoeOptions; msa: MsaOptions };

/** Block i's MSA indexer (routed blocks only): q_proj, k_proj and their per-head RMS norms. */
export function msaIndexerTensors(c: ModelConfig, x: MsaOptions, i: number): TensorSpec[] {
  const p = `blk.${i}.indexer`;
  return [
    linear(`${p}.q_proj.weight`, c.dim, x.nHead * x.headDim, 'attn_q', i),
    linear(`${p}.k_proj.weight`, c.dim, x.headDim, 'attn_k', i),
    norm(`${p}.q_norm.weight`, x.headDim, i),
    norm(`${p}.k_norm.weight`, x.headDim, i),
  ];
}

export const minimaxM3: ArchDefinition = {
  name: 'minimax-m3',
  ggufArch: 'minimax-m3',
  normalize(c: ModelConfig): ModelConfig {
    const mm = c as MinimaxM3Config;
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx', 'expertFf', 'ropeDims' as keyof ModelConfig]);
    checkHeads(c);
    const m = checkDeepseekMoe(c, mm.moe);
    if (m.gating !== 'sigmoid' || !m.probsBias || m.nShared < 1 || m.nGroup > 1) throw new Error('minimax-m3: routing is sigmoid with exp_probs_b and shared experts, without groups');
    if (m.nDense >= c.nLayers) throw new Error('minimax-m3: needs at least one routed (MSA) block');
    if (mm.ropeDims > headDim(c) || mm.ropeDims % 2 !== 0) throw new Error('minimax-m3: ropeDims must be even and at most the head size');
    const x = mm.msa;
    if (!x) throw new Error('minimax-m3: needs msa options (use a preset)');
    if (x.nHead !== c.nKvHeads) throw new Error('minimax-m3: one indexer head per KV head (llama.cpp asserts it)');
    if (!(x.headDim >= mm.ropeDims) || !(x.topK >= 1) || !(x.block >= 1) || !(x.local >= 0)) throw new Error('minimax-m3: msa needs headDim >= ropeDims, topK >= 1, block >= 1, local >= 0');
    return c;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const mm = c as MinimaxM3Config;
    const a = 'minimax-m3';
    return [
      ...baseMetadata(a, c).filter(([k]) => k !== `${a}.rope.dimension_count`),
      [`${a}.rope.dimension_count`, kv.u32(mm.ropeDims)],
      ...deepseekMoeMetadata(a, c, mm.moe),
      [`${a}.attention.indexer.head_count`, kv.u32(mm.msa.nHead)],
      [`${a}.attention.indexer.key_length`, kv.u32(mm.msa.headDim)],
      [`${a}.attention.indexer.top_k`, kv.u32(mm.msa.topK)],
      [`${a}.attention.indexer.block_size`, kv.u32(mm.msa.block)],
      [`${a}.attention.indexer.local_blocks`, kv.u32(mm.msa.local)],
    ];
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const mm = c as MinimaxM3Config;
    const hd = headDim(c);
    const t = embeddings(c);
    for (let i = 0; i < c.nLayers; i++) {
      // Per-head q/k norms: one head_dim vector applied to every head.
      t.push(...attention(c, i), norm(`blk.${i}.attn_q_norm.weight`, hd, i), norm(`blk.${i}.attn_k_norm.weight`, hd, i));
      t.push(...deepseekFfn(c, mm.moe, i, 'ffn_norm'));
      if (i >= mm.moe.nDense) t.push(...msaIndexerTensors(c, mm.msa, i));
    }
    return t;
  },
};
