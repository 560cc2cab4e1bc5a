// IBM Granite 3.x (src/models/granite.cpp): `granite` (dense) and `granitemoe` (routed blocks with
// experts as wide as `ff`, plus an ungated shared expert of `sharedFf` when it is not 0), the
// Llama graph with Granite's embedding, attention, residual and logit multipliers. And Granite 4.0-H
// (`granitehybrid`, src/models/granite-hybrid.cpp, converted by conversion/granite.py
// GraniteHybridModel): blocks are a Mamba2 mixer (architectures/mamba2.ts, d_inner = 2 x dim, which
// the loader asserts) or GQA attention, as `attention.head_count_kv` says per block (0: Mamba2);
// every block has attn_norm and ffn_norm, and its FFN is softmax top-k SwiGLU experts as wide as
// `ff` (renormalized) with an ungated shared expert of `sharedFf` (Granite-4.0-H-Tiny/Small), or,
// with no experts, a SwiGLU FFN of `ff` (Granite-4.0-H-Micro). The converter writes
// rope.scaling.finetuned false for hybrids, which llama.cpp takes as no RoPE. And Granite with
// sliding-window attention (`granite_swa`, src/models/granite-swa.cpp, converted by
// conversion/granite.py GraniteSWAModel / GraniteMoeSWAModel): granite/granitemoe with the
// attention.sliding_window_pattern flags (BOOL array) and attention.sliding_window, a sink per head
// (attn_sinks.weight, F32) in every block, optional attention.rope_pattern (BOOL array, false: NoPE),
// and in the MoE form the experts' gate and up fused (ffn_gate_up_exps, as the converter keeps
// them) and the shared expert's too (ffn_up_shexp of 2 x sharedFf, gate rows first).
import { attention, checkHeads, denseFfn, embeddings, linear, linearInit, moeFfn, norm, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { GgufType } from '../../gguf/constants';
import { kv, type GgufValue } from '../../gguf/writer';
import { baseMetadata, checkExperts } from './common';
import { ungatedSharedExpert } from './deepseek2';
import { checkMamba2, mamba2Inner, mamba2Metadata, mamba2Mixer, type Mamba2Shape } from './mamba2';

/** The multipliers (converters copy them from the HF config). */
export type GraniteConfig = ModelConfig & { scales: { embedding: number; residual: number; attention: number; logit: number } };

/**
 * granite_swa: slide/ropeBlocks per block (repeated to --layers N; ropeBlocks absent: no
 * rope_pattern written, every block rotates), the window, whether the routed experts are fused
 * (ffn_gate_up_exps) and whether the dense FFN has biases.
 */
export type GraniteSwaConfig = GraniteConfig & { slide: boolean[]; window: number; ropeBlocks?: boolean[]; fusedExperts: boolean; ffnBias?: boolean };

/** granitehybrid: attnBlocks per block (true: GQA, false: Mamba2), repeated to --layers N; ssm: the Mamba2 mixer. */
export type GraniteHybridConfig = GraniteConfig & { attnBlocks: boolean[]; ssm: Mamba2Shape };

/** The multiplier keys (HF embedding_multiplier, residual_multiplier, attention_multiplier, logits_scaling). */
function scaleMetadata(arch: string, s: GraniteConfig['scales']): [string, GgufValue][] {
  return [
    [`${arch}.logit_scale`, kv.f32(s.logit)],
    [`${arch}.residual_scale`, kv.f32(s.residual)],
    [`${arch}.embedding_scale`, kv.f32(s.embedding)],
    [`${arch}.attention.scale`, kv.f32(s.attention)],
  ];
}

function granite(name: 'granite' | 'granitemoe'): ArchDefinition {
  const moe = name === 'granitemoe';
  return {
    name,
    ggufArch: name,
    normalize(c: ModelConfig): ModelConfig {
      requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx']);
      checkHeads(c);
      if (!(c as GraniteConfig).scales) throw new Error(`${name}: needs scales (use a preset)`);
      checkExperts(c, moe);
      if (!moe && c.nExperts > 0) throw new Error('granite: a dense architecture (granitemoe has the experts)');
      return moe ? { ...c, expertFf: c.ff } : c;
    },
    metadata(c: ModelConfig): [string, GgufValue][] {
      const s = (c as GraniteConfig).scales;
      const m: [string, GgufValue][] = [...baseMetadata(name, c), ...scaleMetadata(name, s)];
      if (moe && c.sharedFf > 0) m.push([`${name}.expert_shared_feed_forward_length`, kv.u32(c.sharedFf)]);
      return m;
    },
    tensors(c: ModelConfig): TensorSpec[] {
      const t = embeddings(c);
      for (let i = 0; i < c.nLayers; i++) {
        t.push(...attention(c, i));
        if (!moe) t.push(...denseFfn(c, i));
        else t.push(...moeFfn(c, i, c.ff), ...(c.sharedFf > 0 ? ungatedSharedExpert(c, i, c.sharedFf) : []));
      }
      return t;
    },
  };
}

export const graniteDense = granite('granite');
export const graniteMoe = granite('granitemoe');

/**
 * Granite 4.0-H. The real multipliers (embedding 12, residual 0.22, logits / 8) assume trained
 * weights: with unit-scale random ones the embedding would swamp every block. So the init undoes
 * them: token_embd is drawn at 1 / embedding_scale (unit-scale after the scale), whatever writes
 * into the residual stream (attn_output, ssm_out, ffn_down*) at 1 / residual_scale times the usual
 * gain, and output at logit_scale times it, so the activations and logits match the other tiny
 * presets while the file keeps Granite's multipliers.
 */
export const graniteHybrid: ArchDefinition = {
  name: 'granitehybrid',
  ggufArch: 'granitehybrid',
  normalize(c: ModelConfig): ModelConfig {
    const g = c as GraniteHybridConfig;
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx']);
    checkHeads(c);
    checkExperts(c, false);
    const s = g.scales;
    if (!s || ![s.embedding, s.residual, s.logit].every((x) => x > 0) || !(s.attention >= 0)) throw new Error('granitehybrid: needs positive scales (use a preset)');
    const ssm = checkMamba2('granitehybrid', g.ssm);
    if (mamba2Inner(ssm) !== 2 * c.dim) throw new Error(`granitehybrid: ssm inner size (nHeads x headDim = ${mamba2Inner(ssm)}) must be 2 x dim = ${2 * c.dim} (llama.cpp's loader asserts it)`);
    // Without experts the converter writes shared_intermediate_size as the dense FFN's width (and as expert_shared_feed_forward_length).
    if (c.nExperts === 0 && c.sharedFf !== 0 && c.sharedFf !== c.ff) throw new Error('granitehybrid: without experts the FFN is ff wide (sharedFf 0 or ff)');
    if (!Array.isArray(g.attnBlocks) || g.attnBlocks.length === 0) throw new Error('granitehybrid: attnBlocks needs an entry per block (use a preset)');
    // --layers N: the preset's pattern, cut or repeated to N blocks.
    const attnBlocks = Array.from({ length: c.nLayers }, (_, i) => g.attnBlocks[i % g.attnBlocks.length]);
    return { ...c, attnBlocks, expertFf: c.nExperts > 0 ? c.ff : 0 } as GraniteHybridConfig;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const g = c as GraniteHybridConfig;
    const a = 'granitehybrid';
    const m: [string, GgufValue][] = [
      ...baseMetadata(a, c).filter(([k]) => k !== `${a}.attention.head_count_kv`),
      // Per block, as the converter (gguf-py add_array of Python ints): INT32.
      [`${a}.attention.head_count_kv`, kv.arr(GgufType.INT32, g.attnBlocks.map((x) => (x ? c.nKvHeads : 0)))],
      ...scaleMetadata(a, g.scales),
      [`${a}.rope.scaling.finetuned`, kv.bool(false)],
      ...mamba2Metadata(a, g.ssm),
    ];
    if (c.sharedFf > 0) m.push([`${a}.expert_shared_feed_forward_length`, kv.u32(c.sharedFf)]);
    // Granite-4.0-H-Micro's config has num_local_experts / num_experts_per_tok 0, which the converter writes.
    if (c.nExperts === 0) m.push([`${a}.expert_count`, kv.u32(0)], [`${a}.expert_used_count`, kv.u32(0)]);
    return m;
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const g = c as GraniteHybridConfig;
    const s = g.scales;
    const t: TensorSpec[] = [];
    for (let i = 0; i < c.nLayers; i++) {
      if (g.attnBlocks[i]) t.push(...attention(c, i));
      else t.push(norm(`blk.${i}.attn_norm.weight`, c.dim, i), ...mamba2Mixer(c, i, g.ssm));
      if (c.nExperts > 0) t.push(...moeFfn(c, i, c.ff), ...(c.sharedFf > 0 ? ungatedSharedExpert(c, i, c.sharedFf) : []));
      else t.push(...denseFfn(c, i));
    }
    const scaled = (x: TensorSpec, k: number): TensorSpec => (x.init.kind === 'normal' ? { ...x, init: { ...x.init, std: x.init.std * k } } : x);
    const writesResidual = (x: TensorSpec) => x.role === 'attn_output' || x.role === 'ffn_down' || x.name.endsWith('.ssm_out.weight');
    return [
      ...embeddings(c).map((x) => (x.role === 'token_embd' && !c.tiedEmbeddings ? scaled(x, 1 / s.embedding) : x.role === 'output' ? scaled(x, s.logit) : x)),
      ...t.map((x) => (writesResidual(x) ? scaled(x, 1 / s.residual) : x)),
    ];
  },
};

export const graniteSwa: ArchDefinition = {
  name: 'granite_swa',
  ggufArch: 'granite_swa',
  normalize(c: ModelConfig): ModelConfig {
    const g = c as GraniteSwaConfig;
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx']);
    checkHeads(c);
    checkExperts(c, false);
    const s = g.scales;
    if (!s || !(s.logit > 0)) throw new Error('granite_swa: needs scales with a positive logit scale (use a preset)');
    if (!Array.isArray(g.slide) || g.slide.length === 0 || !(Number.isInteger(g.window) && g.window > 0)) throw new Error('granite_swa: needs slide flags and a positive window (use a preset)');
    if (g.ropeBlocks !== undefined && (!Array.isArray(g.ropeBlocks) || g.ropeBlocks.length === 0)) throw new Error('granite_swa: ropeBlocks needs at least one entry');
    if (c.nExperts === 0 && (c.sharedFf !== 0 || g.fusedExperts)) throw new Error('granite_swa: sharedFf and fusedExperts need experts');
    if (c.nExperts > 0 && g.ffnBias) throw new Error('granite_swa: FFN biases are the dense form\'s');
    const rep = (xs: boolean[]) => Array.from({ length: c.nLayers }, (_, i) => xs[i % xs.length]);
    return { ...c, slide: rep(g.slide), ...(g.ropeBlocks ? { ropeBlocks: rep(g.ropeBlocks) } : {}), expertFf: c.nExperts > 0 ? c.ff : 0 } as GraniteSwaConfig;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const g = c as GraniteSwaConfig;
    const a = 'granite_swa';
    const m: [string, GgufValue][] = [
      ...baseMetadata(a, c),
      ...scaleMetadata(a, g.scales),
      [`${a}.attention.sliding_window`, kv.u32(g.window)],
      [`${a}.attention.sliding_window_pattern`, kv.arr(GgufType.BOOL, g.slide)],
    ];
    if (g.ropeBlocks) m.push([`${a}.attention.rope_pattern`, kv.arr(GgufType.BOOL, g.ropeBlocks)]);
    if (c.sharedFf > 0) m.push([`${a}.expert_shared_feed_forward_length`, kv.u32(c.sharedFf)]);
    return m;
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const g = c as GraniteSwaConfig;
    const t = embeddings(c);
    const e = c.nExperts;
    for (let i = 0; i < c.nLayers; i++) {
      const p = `blk.${i}`;
      t.push(...attention(c, i), { name: `${p}.attn_sinks.weight`, shape: [c.nHeads], init: { kind: 'normal', std: 1 }, role: 'bias', layer: i });
      if (e === 0) {
        t.push(...denseFfn(c, i));
        if (g.ffnBias) {
          const bias = (name: string, n: number): TensorSpec => ({ name: `${p}.${name}.bias`, shape: [n], init: { kind: 'normal', std: 0.1 }, role: 'bias', layer: i });
          t.push(bias('ffn_gate', c.ff), bias('ffn_up', c.ff), bias('ffn_down', c.dim));
        }
        continue;
      }
      const experts = moeFfn(c, i, c.ff);
      if (g.fusedExperts) {
        t.push(...experts.filter((x) => !x.name.endsWith('.ffn_gate_exps.weight') && !x.name.endsWith('.ffn_up_exps.weight')));
        t.push({ name: `${p}.ffn_gate_up_exps.weight`, shape: [c.dim, 2 * c.ff, e], init: linearInit(c.dim), role: 'ffn_gate', layer: i });
      } else t.push(...experts);
      if (c.sharedFf > 0)
        t.push(linear(`${p}.ffn_up_shexp.weight`, c.dim, 2 * c.sharedFf, 'ffn_up', i), linear(`${p}.ffn_down_shexp.weight`, c.sharedFf, c.dim, 'ffn_down', i, residualGain(c)));
    }
    return t;
  },
};
