// MiniMax-Text-01 / MiniMax-M1 (`minimax-01`; llama.cpp src/models/minimax-01.cpp, converted by
// conversion/minimax.py MiniMaxText01Model): lightning (linear) attention blocks and softmax GQA
// blocks, routed SwiGLU experts in every block. A lightning block has a fused attn_qkv (per head its
// q, k and v, head_dim each), attn_norm_2 over all heads' outputs and the output gate attn_gate; a
// softmax block has attn_q/k/v and NeoX RoPE over rope.dimension_count (the converter's rotary_dim)
// of each head. The experts are feed_forward_length wide (the converter writes no
// expert_feed_forward_length). residual_scale is the layernorm alpha. Which blocks are lightning:
// llama.cpp reads attention.recurrent_layers (one flag per block) when present, else
// full_attention_interval (default 8: every 8th block is softmax); the converter writes neither,
// so its files take the default. `layers` picks which of the three a file carries.
import { checkHeads, embeddings, headDim, linear, moeFfn, norm, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { GgufType } from '../../gguf/constants';
import { kv, type GgufValue } from '../../gguf/writer';
import { baseMetadata, checkExperts } from './common';

export type Minimax01Config = ModelConfig & {
  headDim: number;
  /** rope.dimension_count (rotary_dim; MiniMax rotates 64 of 128). */
  ropeDims: number;
  /** residual_scale (layernorm_*_alpha). */
  residualScale: number;
  /**
   * 'default': no key (llama.cpp's interval of 8, as converted files); { interval }: a
   * full_attention_interval key; { recurrent }: attention.recurrent_layers, one flag per block.
   */
  layers: 'default' | { interval: number } | { recurrent: boolean[] };
};

/** Whether block i is lightning attention, as llama.cpp's loader decides. */
export function minimax01Recurrent(c: Minimax01Config, i: number): boolean {
  const l = c.layers;
  if (l !== 'default' && 'recurrent' in l) return l.recurrent[i];
  const interval = l === 'default' ? 8 : l.interval;
  return (i + 1) % interval !== 0;
}

export const minimax01: ArchDefinition = {
  name: 'minimax-01',
  ggufArch: 'minimax-01',
  normalize(c: ModelConfig): ModelConfig {
    const m = c as Minimax01Config;
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx']);
    checkHeads(c);
    checkExperts(c, true);
    if (c.nLayers < 2) throw new Error('minimax-01: needs at least 2 blocks (the lightning slope scale divides by block_count - 1)');
    const hd = headDim(c);
    if (!Number.isInteger(m.ropeDims) || m.ropeDims <= 0 || m.ropeDims % 2 !== 0 || m.ropeDims > hd) throw new Error(`minimax-01: ropeDims must be even, positive and at most the head size ${hd}`);
    if (!Number.isFinite(m.residualScale)) throw new Error('minimax-01: residualScale must be a finite number');
    const l = m.layers ?? 'default';
    if (l !== 'default') {
      if ('recurrent' in l) {
        if (!Array.isArray(l.recurrent) || l.recurrent.length !== c.nLayers) throw new Error(`minimax-01: layers.recurrent needs one flag per block (${c.nLayers})`);
      } else if (!Number.isInteger(l.interval) || l.interval <= 0) throw new Error('minimax-01: layers.interval must be a positive integer');
    }
    return { ...c, headDim: hd, layers: l } as Minimax01Config;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const m = c as Minimax01Config;
    const a = 'minimax-01';
    const md: [string, GgufValue][] = [
      ...baseMetadata(a, c).filter(([k]) => k !== `${a}.rope.dimension_count`),
      [`${a}.rope.dimension_count`, kv.u32(m.ropeDims)],
      [`${a}.residual_scale`, kv.f32(m.residualScale)],
    ];
    const l = m.layers;
    if (l !== 'default' && 'recurrent' in l) md.push([`${a}.attention.recurrent_layers`, kv.arr(GgufType.BOOL, l.recurrent)]);
    else if (l !== 'default') md.push([`${a}.full_attention_interval`, kv.u32(l.interval)]);
    return md;
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const m = c as Minimax01Config;
    const hd = m.headDim;
    const nQ = c.nHeads * hd;
    const t = embeddings(c);
    for (let i = 0; i < c.nLayers; i++) {
      const p = `blk.${i}`;
      t.push(norm(`${p}.attn_norm.weight`, c.dim, i));
      if (minimax01Recurrent(m, i)) {
        t.push(
          // llama-quant types attn_qkv as attn_v (category_is_attn_v); attn_gate has no category (the default rule).
          linear(`${p}.attn_qkv.weight`, c.dim, 3 * nQ, 'attn_v', i),
          linear(`${p}.attn_gate.weight`, c.dim, nQ, 'attn_q', i),
          norm(`${p}.attn_norm_2.weight`, nQ, i),
        );
      } else {
        t.push(
          linear(`${p}.attn_q.weight`, c.dim, nQ, 'attn_q', i),
          linear(`${p}.attn_k.weight`, c.dim, c.nKvHeads * hd, 'attn_k', i),
          linear(`${p}.attn_v.weight`, c.dim, c.nKvHeads * hd, 'attn_v', i),
        );
      }
      t.push(linear(`${p}.attn_output.weight`, nQ, c.dim, 'attn_output', i, residualGain(c)));
      t.push(...moeFfn(c, i, c.ff));
    }
    return t;
  },
};
