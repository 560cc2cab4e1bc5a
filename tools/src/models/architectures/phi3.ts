// Phi-3 / Phi-3.5 / Phi-4 (`phi3`) and Phi-3.5-MoE (`phimoe`), as llama.cpp's converter writes them
// (conversion/phi.py) and src/models/phi3.cpp / phimoe.cpp load them: the query width is dim, phi3
// fuses gate and up into one ffn_up of 2 ff (and optionally q/k/v into attn_qkv), phimoe carries
// biases on its norms, attention and head. LongRoPE (the 128k files): rope_factors_long/short and
// rope.scaling.attn_factor, with context_length the long context and
// rope.scaling.original_context_length the short one.
import { checkHeads, embeddings, headDim, linear, moeFfn, norm, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { kv, type GgufValue } from '../../gguf/writer';
import { baseMetadata, checkExperts } from './common';

/** LongRoPE's tables and keys. `typed` also writes rope.scaling.type longrope (llama and granite load the tables only then). */
export interface LongRopeOptions {
  origCtx: number;
  typed?: boolean;
}

/** ropeDims: rope.dimension_count (Phi-4-mini rotates 3/4 of each head); fusedQkv: one attn_qkv. */
export type Phi3Config = ModelConfig & { ropeDims?: number; fusedQkv?: boolean; longrope?: LongRopeOptions; slidingWindow?: number };

/** LongRoPE's keys: the original context, and the converter's attention factor sqrt(1 + ln(s) / ln(orig)) for s = ctx / orig. */
export function longRopeMetadata(arch: string, c: ModelConfig, l: LongRopeOptions | undefined): [string, GgufValue][] {
  if (!l) return [];
  const scale = c.ctx / l.origCtx;
  const attnFactor = scale > 1 ? Math.sqrt(1 + Math.log(scale) / Math.log(l.origCtx)) : 1;
  return [
    [`${arch}.rope.scaling.original_context_length`, kv.u32(l.origCtx)],
    [`${arch}.rope.scaling.attn_factor`, kv.f32(attnFactor)],
    ...(l.typed ? [[`${arch}.rope.scaling.type`, kv.str('longrope')] as [string, GgufValue]] : []),
  ];
}

/** The factor tables, one per rotated pair: long ones stretch the low frequencies (factors of a few), short ones barely. */
export function longRopeTensors(ropeDims: number, l: LongRopeOptions | undefined): TensorSpec[] {
  if (!l) return [];
  return [
    { name: 'rope_factors_long.weight', shape: [ropeDims / 2], init: { kind: 'normal', mean: 4, std: 1 }, role: 'bias' },
    { name: 'rope_factors_short.weight', shape: [ropeDims / 2], init: { kind: 'normal', mean: 1.1, std: 0.05 }, role: 'bias' },
  ];
}

function phi3Arch(name: 'phi3' | 'phimoe'): ArchDefinition {
  const moe = name === 'phimoe';
  const ropeDims = (c: ModelConfig) => (c as Phi3Config).ropeDims ?? headDim(c);
  return {
    name,
    ggufArch: name,
    normalize(c: ModelConfig): ModelConfig {
      requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx']);
      checkHeads(c);
      checkExperts(c, moe);
      const p = c as Phi3Config;
      if (!moe && c.nExperts > 0) throw new Error('phi3: a dense architecture (phimoe has the experts)');
      if (headDim(c) * c.nHeads !== c.dim) throw new Error(`${name}: the query width must be dim (its loader sizes attn_q as dim)`);
      const rd = ropeDims(c);
      if (rd % 2 !== 0 || rd > headDim(c)) throw new Error(`${name}: ropeDims must be even and at most the head size`);
      if (moe && p.fusedQkv) throw new Error('phimoe: separate q/k/v (with biases) only');
      if (moe && c.tiedEmbeddings) throw new Error('phimoe: its loader requires output.weight');
      if (p.longrope && !(p.longrope.origCtx > 0 && p.longrope.origCtx < c.ctx)) throw new Error(`${name}: longrope.origCtx must be below ctx`);
      return moe ? { ...c, expertFf: c.ff } : c;
    },
    metadata(c: ModelConfig): [string, GgufValue][] {
      const p = c as Phi3Config;
      return [
        ...baseMetadata(name, c).filter(([k]) => k !== `${name}.rope.dimension_count`),
        [`${name}.rope.dimension_count`, kv.u32(ropeDims(c))],
        ...longRopeMetadata(name, c, p.longrope),
        // The converter always writes it (0 for Phi-4); llama.cpp turns Phi's SWA off.
        [`${name}.attention.sliding_window`, kv.u32(p.slidingWindow ?? 0)],
      ];
    },
    tensors(c: ModelConfig): TensorSpec[] {
      const p = c as Phi3Config;
      const hd = headDim(c);
      const nKv = hd * c.nKvHeads;
      const bias = (n: string, len: number, layer?: number): TensorSpec => ({ name: n, shape: [len], init: { kind: 'normal', std: 0.1 }, role: 'attn_bias', layer });
      const t = embeddings(c);
      if (moe) t.push(bias('output_norm.bias', c.dim), { ...bias('output.bias', c.vocabSize), role: 'bias' });
      t.push(...longRopeTensors(ropeDims(c), p.longrope));
      for (let i = 0; i < c.nLayers; i++) {
        const b = `blk.${i}`;
        t.push(norm(`${b}.attn_norm.weight`, c.dim, i));
        if (moe) t.push(bias(`${b}.attn_norm.bias`, c.dim, i));
        if (p.fusedQkv) t.push(linear(`${b}.attn_qkv.weight`, c.dim, c.dim + 2 * nKv, 'attn_q', i));
        else {
          t.push(linear(`${b}.attn_q.weight`, c.dim, c.dim, 'attn_q', i), linear(`${b}.attn_k.weight`, c.dim, nKv, 'attn_k', i), linear(`${b}.attn_v.weight`, c.dim, nKv, 'attn_v', i));
          if (moe) t.push(bias(`${b}.attn_q.bias`, c.dim, i), bias(`${b}.attn_k.bias`, nKv, i), bias(`${b}.attn_v.bias`, nKv, i));
        }
        t.push(linear(`${b}.attn_output.weight`, c.dim, c.dim, 'attn_output', i, residualGain(c)));
        if (moe) t.push(bias(`${b}.attn_output.bias`, c.dim, i), ...moeFfn(c, i, c.ff), bias(`${b}.ffn_norm.bias`, c.dim, i));
        else
          t.push(
            norm(`${b}.ffn_norm.weight`, c.dim, i),
            linear(`${b}.ffn_up.weight`, c.dim, 2 * c.ff, 'ffn_up', i),
            linear(`${b}.ffn_down.weight`, c.ff, c.dim, 'ffn_down', i, residualGain(c)),
          );
      }
      return t;
    },
  };
}

export const phi3 = phi3Arch('phi3');
export const phimoe = phi3Arch('phimoe');
