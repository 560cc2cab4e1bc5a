// Decoders of the Llama shape with DeepSeek-style routed blocks (llama.cpp src/models/<arch>.cpp):
// DeepSeek-MoE 16B (`deepseek`), dots.llm1 (`dots1`), ERNIE 4.5 MoE (`ernie4_5-moe`),
// MiniMax-M2 (`minimax-m2`), Hunyuan-A13B (`hunyuan-moe`), Ling-lite/plus (`bailingmoe`), Ling 2.0 (`bailingmoe2`), Llama 4
// (`llama4`), K-EXAONE (`exaone-moe`), Arcee Trinity (`afmoe`), Hunyuan v3 (`hy_v3`) and
// SmallThinker (`smallthinker`: early-routed ReGLU experts). Keys are the ones each architecture's
// converter writes (conversion/<family>.py); tensor shapes the ones its loader creates.
import { attention, checkHeads, denseFfn, embeddings, headDim, linear, linearInit, moeFfn, norm, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { GgufType } from '../../gguf/constants';
import { kv } from '../../gguf/writer';
import type { GgufValue } from '../../gguf/writer';
import { baseMetadata, checkExperts } from './common';
import { checkDeepseekMoe, deepseekFfn, deepseekMoeMetadata, ungatedSharedExpert } from './deepseek2';
import type { DeepseekMoeOptions } from './deepseek2';

export type DeepseekConfig = ModelConfig & { moe: DeepseekMoeOptions };
/** moeStep: interleave_moe_layer_step; sharedFf: expert_shared_feed_forward_length (0: none). */
export type Ernie45MoeConfig = ModelConfig & { moe: DeepseekMoeOptions; moeStep: number; attnOutBias?: boolean };
/** K-EXAONE: the window and which blocks slide (the others attend everything, without RoPE). */
export type ExaoneMoeConfig = ModelConfig & { moe: DeepseekMoeOptions; window: number; swa: boolean[] };
/** ropeDims: rope.dimension_count (MiniMax-M2 rotates half of each head). */
export type MinimaxM2Config = ModelConfig & { ropeDims: number };

/** The per-expert selection bias `blk.N.exp_probs_b.bias` (F32: 1-D). */
export const probsBias = (c: ModelConfig, i: number): TensorSpec => ({ name: `blk.${i}.exp_probs_b.bias`, shape: [c.nExperts], init: { kind: 'normal', std: 0.05 }, role: 'norm', layer: i });

export const deepseek: ArchDefinition = {
  name: 'deepseek',
  ggufArch: 'deepseek',
  normalize(c: ModelConfig): ModelConfig {
    const m = checkDeepseekMoe(c, (c as DeepseekConfig).moe);
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx', 'expertFf']);
    checkHeads(c);
    if (c.headDim !== undefined && c.headDim * c.nHeads !== c.dim) throw new Error('deepseek: the query width must be dim (head size dim / heads)');
    if (m.nShared < 1) throw new Error('deepseek: needs shared experts (its loader requires ffn_*_shexp)');
    if (m.probsBias || m.gating !== 'softmax' || m.normW || m.nGroup > 1) throw new Error('deepseek: routing is softmax without renormalization, selection bias or groups');
    return c;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const m = (c as DeepseekConfig).moe;
    return [
      ...baseMetadata('deepseek', c),
      ['deepseek.leading_dense_block_count', kv.u32(m.nDense)],
      ['deepseek.expert_feed_forward_length', kv.u32(c.expertFf)],
      ['deepseek.expert_shared_count', kv.u32(m.nShared)],
      ['deepseek.expert_weights_scale', kv.f32(m.wScale || 1)],
    ];
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const m = (c as DeepseekConfig).moe;
    const t = embeddings(c);
    for (let i = 0; i < c.nLayers; i++) t.push(...attention(c, i), ...deepseekFfn(c, m, i, 'ffn_norm'));
    return t;
  },
};

export const dots1: ArchDefinition = {
  name: 'dots1',
  ggufArch: 'dots1',
  normalize(c: ModelConfig): ModelConfig {
    const m = checkDeepseekMoe(c, (c as DeepseekConfig).moe);
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx', 'expertFf']);
    checkHeads(c);
    // Its loader creates K and V as wide as Q (n_embd_head_k * n_head).
    if (c.nKvHeads !== c.nHeads) throw new Error('dots1: kv heads must equal heads (no GQA in dots.llm1)');
    if (m.nShared < 1) throw new Error('dots1: needs shared experts (its loader requires ffn_*_shexp)');
    return c;
  },
  metadata: (c) => [...baseMetadata('dots1', c), ...deepseekMoeMetadata('dots1', c, (c as DeepseekConfig).moe)],
  tensors(c: ModelConfig): TensorSpec[] {
    const m = (c as DeepseekConfig).moe;
    const t = embeddings(c);
    for (let i = 0; i < c.nLayers; i++) t.push(...attention(c, i, { qkNorm: true }), ...deepseekFfn(c, m, i, 'ffn_norm'));
    return t;
  },
};

export const ernie45Moe: ArchDefinition = {
  name: 'ernie4_5-moe',
  ggufArch: 'ernie4_5-moe',
  normalize(c: ModelConfig): ModelConfig {
    const e = c as Ernie45MoeConfig;
    const m = checkDeepseekMoe(c, e.moe);
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx', 'expertFf', 'moeStep' as keyof ModelConfig]);
    checkHeads(c);
    if (m.gating !== 'softmax' || !m.normW || m.nGroup > 1 || m.wScale) throw new Error('ernie4_5-moe: routing is softmax with renormalization, without groups or scale');
    if (m.nShared > 0 && c.sharedFf <= 0) throw new Error('ernie4_5-moe: shared experts need sharedFf');
    return c;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const e = c as Ernie45MoeConfig;
    const out: [string, GgufValue][] = [
      ...baseMetadata('ernie4_5-moe', c),
      ['ernie4_5-moe.interleave_moe_layer_step', kv.u32(e.moeStep)],
      ['ernie4_5-moe.leading_dense_block_count', kv.u32(e.moe.nDense)],
      ['ernie4_5-moe.expert_feed_forward_length', kv.u32(c.expertFf)],
    ];
    if (e.moe.nShared > 0) out.push(['ernie4_5-moe.expert_shared_count', kv.u32(e.moe.nShared)], ['ernie4_5-moe.expert_shared_feed_forward_length', kv.u32(c.sharedFf)]);
    return out;
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const e = c as Ernie45MoeConfig;
    const t = embeddings(c);
    for (let i = 0; i < c.nLayers; i++) {
      t.push(...attention(c, i));
      if (e.attnOutBias) t.push({ name: `blk.${i}.attn_output.bias`, shape: [c.dim], init: { kind: 'normal', std: 0.1 }, role: 'attn_bias', layer: i });
      // The graph's test; the loader creates routed tensors for every block from the dense lead,
      // so files where the two disagree do not load in llama.cpp (real ones use step 1).
      if (i < e.moe.nDense || (i + 1) % e.moeStep !== 0) {
        t.push(...denseFfn(c, i));
        continue;
      }
      t.push(...moeFfn(c, i, c.expertFf));
      if (e.moe.probsBias) t.push(probsBias(c, i));
      if (e.moe.nShared > 0) t.push(...ungatedSharedExpert(c, i, c.sharedFf));
    }
    return t;
  },
};

export const minimaxM2: ArchDefinition = {
  name: 'minimax-m2',
  ggufArch: 'minimax-m2',
  normalize(c: ModelConfig): ModelConfig {
    const mm = c as MinimaxM2Config;
    requirePositive(c, ['nLayers', 'dim', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx', 'expertFf', 'ropeDims' as keyof ModelConfig]);
    checkHeads(c);
    checkExperts(c, true);
    if (mm.ropeDims > headDim(c) || mm.ropeDims % 2 !== 0) throw new Error('minimax-m2: ropeDims must be even and at most the head size');
    // Its loader sizes the experts by feed_forward_length.
    return { ...c, ff: c.expertFf };
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    return [
      ...baseMetadata('minimax-m2', c).filter(([k]) => k !== 'minimax-m2.rope.dimension_count'),
      ['minimax-m2.rope.dimension_count', kv.u32((c as MinimaxM2Config).ropeDims)],
      ['minimax-m2.expert_feed_forward_length', kv.u32(c.expertFf)],
      ['minimax-m2.expert_gating_func', kv.u32(2)],
    ];
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const t = embeddings(c);
    const hd = headDim(c);
    for (let i = 0; i < c.nLayers; i++) {
      // q/k norms over the whole projections, not per head.
      t.push(...attention(c, i), norm(`blk.${i}.attn_q_norm.weight`, hd * c.nHeads, i), norm(`blk.${i}.attn_k_norm.weight`, hd * c.nKvHeads, i));
      t.push(...moeFfn(c, i, c.expertFf), probsBias(c, i));
    }
    return t;
  },
};

/**
 * Llama 4 (src/models/llama4.cpp): moeStep = interleave_moe_layer_step (Scout 1, Maverick 2: the
 * other blocks are dense with `ff`); routed blocks carry a shared expert as wide as the experts;
 * ropeFreqs writes llama3-style `rope_freqs.weight` factors (the converter's rope_scaling llama3).
 */
export type Llama4Config = ModelConfig & { moeStep: number; ropeFreqs?: boolean };

export const llama4: ArchDefinition = {
  name: 'llama4',
  ggufArch: 'llama4',
  normalize(c: ModelConfig): ModelConfig {
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx', 'expertFf', 'moeStep' as keyof ModelConfig]);
    checkHeads(c);
    checkExperts(c, true); // (llama.cpp refuses a llama4 file without experts)
    return c;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    return [
      ...baseMetadata('llama4', c),
      ['llama4.interleave_moe_layer_step', kv.u32((c as Llama4Config).moeStep)],
      ['llama4.expert_feed_forward_length', kv.u32(c.expertFf)],
    ];
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const l = c as Llama4Config;
    const t = embeddings(c);
    // Factors around 1-4 (llama3 scaling divides the low frequencies by up to its factor).
    if (l.ropeFreqs) t.push({ name: 'rope_freqs.weight', shape: [headDim(c) / 2], init: { kind: 'normal', mean: 2, std: 0.5 }, role: 'bias' });
    for (let i = 0; i < c.nLayers; i++) {
      t.push(...attention(c, i));
      if ((i + 1) % l.moeStep !== 0) t.push(...denseFfn(c, i));
      else t.push(...moeFfn(c, i, c.expertFf), ...ungatedSharedExpert(c, i, c.expertFf));
    }
    return t;
  },
};

/**
 * Hunyuan-A13B (src/models/hunyuan-moe.cpp): per-head q/k norms (applied after RoPE), every block
 * routed with experts as wide as `ff` plus an ungated shared expert of `sharedFf`.
 */
export const hunyuanMoe: ArchDefinition = {
  name: 'hunyuan-moe',
  ggufArch: 'hunyuan-moe',
  normalize(c: ModelConfig): ModelConfig {
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx', 'sharedFf']);
    checkHeads(c);
    checkExperts(c, true);
    // Its loader sizes the experts by feed_forward_length.
    return { ...c, expertFf: c.ff };
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    return [
      ...baseMetadata('hunyuan-moe', c),
      ['hunyuan-moe.expert_feed_forward_length', kv.u32(c.ff)],
      ['hunyuan-moe.expert_shared_feed_forward_length', kv.u32(c.sharedFf)],
      ['hunyuan-moe.expert_shared_count', kv.u32(1)],
    ];
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const t = embeddings(c);
    for (let i = 0; i < c.nLayers; i++) t.push(...attention(c, i, { qkNorm: true }), ...moeFfn(c, i, c.ff), ...ungatedSharedExpert(c, i, c.sharedFf));
    return t;
  },
};

/**
 * Ling-lite / Ling-plus (bailingmoe, src/models/bailingmoe.cpp) as conversion/bailingmoe.py writes
 * it: separate q/k/v (the converter splits query_key_value, permuting q and k for RoPE over
 * adjacent pairs), every block routed (its loader requires a router in each, and its graph has no
 * dense path): softmax, renormalized by expert_weights_norm, expert_weights_scale 1.0, plus
 * `nShared` shared experts as one ungated expert of expertFf x nShared;
 * leading_dense_block_count 0 (the converter's first_k_dense_replace, which the graph ignores).
 */
export const bailingMoe: ArchDefinition = {
  name: 'bailingmoe',
  ggufArch: 'bailingmoe',
  normalize(c: ModelConfig): ModelConfig {
    const m = checkDeepseekMoe(c, (c as DeepseekConfig).moe);
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx', 'expertFf']);
    checkHeads(c);
    if (m.nShared < 1) throw new Error('bailingmoe: needs shared experts (its loader requires ffn_*_shexp)');
    if (m.nDense !== 0) throw new Error('bailingmoe: nDense must be 0 (its loader requires a router in every block)');
    if (m.probsBias || m.gating !== 'softmax' || m.nGroup > 1) throw new Error('bailingmoe: routing is softmax without selection bias or groups');
    return c;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const m = (c as DeepseekConfig).moe;
    return [
      ...baseMetadata('bailingmoe', c),
      ['bailingmoe.leading_dense_block_count', kv.u32(0)],
      ['bailingmoe.expert_feed_forward_length', kv.u32(c.expertFf)],
      ['bailingmoe.expert_weights_scale', kv.f32(1)],
      ['bailingmoe.expert_shared_count', kv.u32(m.nShared)],
      ['bailingmoe.expert_weights_norm', kv.bool(m.normW)],
    ];
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const m = (c as DeepseekConfig).moe;
    const t = embeddings(c);
    for (let i = 0; i < c.nLayers; i++) t.push(...attention(c, i), ...deepseekFfn(c, m, i, 'ffn_norm'));
    return t;
  },
};

/**
 * Ling 2.0 (bailingmoe2, src/models/bailingmoe2.cpp): a fused attn_qkv (query width dim), per-head
 * q/k norms, NeoX RoPE over `ropeDims` of each head, DeepSeek-style routed blocks. `nextn` counts
 * NextN blocks in block_count without writing them: the engine leaves them out, llama.cpp refuses
 * such a file (it wants their tensors even though its graph skips them).
 */
export type BailingMoe2Config = ModelConfig & { moe: DeepseekMoeOptions; ropeDims: number; nextn?: number };

export const bailingMoe2: ArchDefinition = {
  name: 'bailingmoe2',
  ggufArch: 'bailingmoe2',
  normalize(c: ModelConfig): ModelConfig {
    const b = c as BailingMoe2Config;
    checkDeepseekMoe(c, b.moe);
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx', 'expertFf', 'ropeDims' as keyof ModelConfig]);
    checkHeads(c);
    if (c.headDim !== undefined && c.headDim * c.nHeads !== c.dim) throw new Error('bailingmoe2: the query width must be dim (its loader sizes attn_qkv as dim + 2 kv widths)');
    if (b.ropeDims > headDim(c) || b.ropeDims % 2 !== 0) throw new Error('bailingmoe2: ropeDims must be even and at most the head size');
    if (b.moe.nShared < 1) throw new Error('bailingmoe2: needs shared experts (its loader requires ffn_*_shexp)');
    return c;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const b = c as BailingMoe2Config;
    return [
      ...baseMetadata('bailingmoe2', c).filter(([k]) => k !== 'bailingmoe2.rope.dimension_count' && k !== 'bailingmoe2.block_count'),
      ['bailingmoe2.block_count', kv.u32(c.nLayers + (b.nextn ?? 0))],
      ['bailingmoe2.nextn_predict_layers', kv.u32(b.nextn ?? 0)],
      ['bailingmoe2.rope.dimension_count', kv.u32(b.ropeDims)],
      ...deepseekMoeMetadata('bailingmoe2', c, b.moe),
    ];
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const b = c as BailingMoe2Config;
    const t = embeddings(c);
    const hd = headDim(c);
    for (let i = 0; i < c.nLayers; i++) {
      const p = `blk.${i}`;
      t.push(
        norm(`${p}.attn_norm.weight`, c.dim, i),
        linear(`${p}.attn_qkv.weight`, c.dim, hd * (c.nHeads + 2 * c.nKvHeads), 'attn_q', i),
        norm(`${p}.attn_q_norm.weight`, hd, i),
        norm(`${p}.attn_k_norm.weight`, hd, i),
        linear(`${p}.attn_output.weight`, hd * c.nHeads, c.dim, 'attn_output', i, residualGain(c)),
        ...deepseekFfn(c, b.moe, i, 'ffn_norm'),
      );
    }
    return t;
  },
};

/**
 * K-EXAONE (exaone-moe, src/models/exaone-moe.cpp) as conversion/exaone.py writes it: per-head q/k
 * norms, sliding_window and a per-block sliding_window_pattern, rope scaling none, DeepSeek-style
 * routed blocks (with the gating function, which its loader requires) after leading dense blocks,
 * shared experts of expert_shared_feed_forward_length.
 */
export const exaoneMoe: ArchDefinition = {
  name: 'exaone-moe',
  ggufArch: 'exaone-moe',
  normalize(c: ModelConfig): ModelConfig {
    const e = c as ExaoneMoeConfig;
    const m = checkDeepseekMoe(c, e.moe);
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx', 'expertFf']);
    checkHeads(c);
    if (m.nShared < 1) throw new Error('exaone-moe: needs shared experts (its loader requires ffn_*_shexp)');
    if (!e.swa || e.swa.length !== c.nLayers || !(e.window > 0)) throw new Error('exaone-moe: needs window and one swa flag per block (use a preset)');
    return c;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const e = c as ExaoneMoeConfig;
    return [
      ...baseMetadata('exaone-moe', c),
      ...deepseekMoeMetadata('exaone-moe', c, e.moe),
      ['exaone-moe.expert_shared_feed_forward_length', kv.u32(c.expertFf * e.moe.nShared)],
      ['exaone-moe.attention.sliding_window', kv.u32(e.window)],
      ['exaone-moe.attention.sliding_window_pattern', kv.arr(GgufType.BOOL, e.swa)],
      ['exaone-moe.rope.scaling.type', kv.str('none')],
    ];
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const e = c as ExaoneMoeConfig;
    const t = embeddings(c);
    for (let i = 0; i < c.nLayers; i++) t.push(...attention(c, i, { qkNorm: true }), ...deepseekFfn(c, e.moe, i, 'ffn_norm'));
    return t;
  },
};

/** Arcee Trinity: the window (0: none; else every 4th block full) and the routed-block options. */
export type AfmoeConfig = ModelConfig & { moe: DeepseekMoeOptions; window: number };

/**
 * Arcee Trinity (afmoe, src/models/afmoe.cpp) as conversion/afmoe.py writes it (Llama's keys plus
 * the expert ones and sliding_window; no gating key: sigmoid): per-head q/k norms, an attn_gate
 * per block, post-attention and post-FFN norms, leading dense blocks, routed blocks with a
 * selection bias and shared experts.
 */
export const afmoe: ArchDefinition = {
  name: 'afmoe',
  ggufArch: 'afmoe',
  normalize(c: ModelConfig): ModelConfig {
    const a = c as AfmoeConfig;
    const m = checkDeepseekMoe(c, a.moe);
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx', 'expertFf']);
    checkHeads(c);
    if (m.gating !== 'sigmoid' || !m.probsBias || m.nGroup > 1) throw new Error('afmoe: sigmoid routing with a selection bias, no groups');
    return c;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const a = c as AfmoeConfig;
    const out: [string, GgufValue][] = [
      ...baseMetadata('afmoe', c),
      ['afmoe.expert_shared_count', kv.u32(a.moe.nShared)],
      ['afmoe.expert_feed_forward_length', kv.u32(c.expertFf)],
      ['afmoe.leading_dense_block_count', kv.u32(a.moe.nDense)],
      ['afmoe.expert_weights_norm', kv.bool(a.moe.normW)],
      ['afmoe.expert_weights_scale', kv.f32(a.moe.wScale || 1)],
    ];
    if (a.window > 0) out.push(['afmoe.attention.sliding_window', kv.u32(a.window)]);
    return out;
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const a = c as AfmoeConfig;
    const hd = headDim(c);
    const t = embeddings(c);
    for (let i = 0; i < c.nLayers; i++) {
      const p = `blk.${i}`;
      t.push(...attention(c, i, { qkNorm: true }), linear(`${p}.attn_gate.weight`, c.dim, c.nHeads * hd, 'attn_q', i), norm(`${p}.post_attention_norm.weight`, c.dim, i));
      t.push(...deepseekFfn(c, a.moe, i, 'ffn_norm'), norm(`${p}.post_ffw_norm.weight`, c.dim, i));
    }
    return t;
  },
};

/** Hunyuan v3: leading dense blocks (no router), then routed blocks with a shared expert of sharedFf. */
export type HyV3Config = ModelConfig & { nDense: number };

/**
 * Hunyuan v3 (hy_v3, src/models/hy-v3.cpp) as conversion/hunyuan.py writes it: per-head q/k norms,
 * the expert sizes, norm and scale keys, sigmoid gating, a selection bias named blk.N.exp_probs_b
 * (no suffix), an ungated shared expert per routed block.
 */
export const hyV3: ArchDefinition = {
  name: 'hy_v3',
  ggufArch: 'hy_v3',
  normalize(c: ModelConfig): ModelConfig {
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx', 'expertFf', 'sharedFf']);
    checkHeads(c);
    checkExperts(c, true);
    const h = c as HyV3Config;
    if (!(h.nDense >= 0 && h.nDense < c.nLayers)) throw new Error('hy_v3: nDense must leave routed blocks');
    return c;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    return [
      ...baseMetadata('hy_v3', c),
      ['hy_v3.expert_feed_forward_length', kv.u32(c.expertFf)],
      ['hy_v3.expert_shared_feed_forward_length', kv.u32(c.sharedFf)],
      ['hy_v3.expert_weights_norm', kv.bool(true)],
      ['hy_v3.expert_weights_scale', kv.f32(2.5)],
      ['hy_v3.expert_gating_func', kv.u32(2)],
    ];
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const h = c as HyV3Config;
    const t = embeddings(c);
    for (let i = 0; i < c.nLayers; i++) {
      t.push(...attention(c, i, { qkNorm: true }));
      if (i < h.nDense) t.push(...denseFfn(c, i));
      else t.push(...moeFfn(c, i, c.expertFf), { ...probsBias(c, i), name: `blk.${i}.exp_probs_b` }, ...ungatedSharedExpert(c, i, c.sharedFf));
    }
    return t;
  },
};

/**
 * SmallThinker: `window` is attention.sliding_window (0: none; llama.cpp then runs every block full
 * with RoPE). When positive llama.cpp forces the window to 4096 whatever the file says and slides
 * every block but each 4th (il % 4 == 0: full attention without RoPE). `gating`: the converter's
 * expert_gating_func (moe_primary_router_apply_softmax: softmax, else sigmoid).
 */
export type SmallThinkerConfig = ModelConfig & { window: number; gating: 'softmax' | 'sigmoid' };

/**
 * PowerInfer's SmallThinker (src/models/smallthinker.cpp) as conversion/smallthinker.py writes it:
 * Llama-shaped attention (NeoX RoPE), every block routed, no shared expert; feed_forward_length and
 * expert_feed_forward_length both moe_ffn_hidden_size, expert_gating_func always written (llama.cpp
 * aborts on a file without it), no expert_weights_scale (so none applied); the top-k weights are
 * renormalized. The experts are ReGLU (relu(gate) * up), and ffn_gate_inp reads the block's input
 * (the residual stream before attn_norm), so the router's scale follows the stream's: unit-std
 * token_embd rows when untied, 2/sqrt(dim) when tied (the router is scaled up to match).
 * ffn_down_exps writes at residualGain / sqrt(2): relu(g) * u has a second moment of 1/2 (SiLU-GLU's
 * ~0.35), and with top-k renormalized weights (sigmoid ties near 1/2 each) a top-k choice that
 * quantization flips swaps about half of a block's expert output. Q8_0-vs-F32 logits NMSE in
 * llama.cpp over seeds 1-5 and 7 (64 tokens): tiny-smallthinker-swa 1.1e-3..3.1e-3 at the full
 * residual gain, 1.4e-4..1.4e-3 (median 4.8e-4) at 1/sqrt(2); tiny-smallthinker 1.2e-4..4.9e-4.
 */
export const smallthinker: ArchDefinition = {
  name: 'smallthinker',
  ggufArch: 'smallthinker',
  normalize(c: ModelConfig): ModelConfig {
    const s = c as SmallThinkerConfig;
    requirePositive(c, ['nLayers', 'dim', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx', 'expertFf']);
    checkHeads(c);
    checkExperts(c, true); // (its loader asserts n_expert > 0 and n_expert_used > 0)
    if (s.gating !== 'softmax' && s.gating !== 'sigmoid') throw new Error(`smallthinker: gating must be softmax or sigmoid, got ${String(s.gating)} (use a preset)`);
    if (!(Number.isInteger(s.window) && s.window >= 0)) throw new Error(`smallthinker: window must be a non-negative integer (0: none), got ${String(s.window)} (use a preset)`);
    // The converter writes moe_ffn_hidden_size as feed_forward_length too.
    return { ...c, ff: c.expertFf };
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const s = c as SmallThinkerConfig;
    const out: [string, GgufValue][] = [
      ...baseMetadata('smallthinker', c),
      ['smallthinker.expert_feed_forward_length', kv.u32(c.expertFf)],
      ['smallthinker.expert_gating_func', kv.u32(s.gating === 'softmax' ? 1 : 2)],
    ];
    if (s.window > 0) out.push(['smallthinker.attention.sliding_window', kv.u32(s.window)]);
    return out;
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const t = embeddings(c);
    // Router logits of std ~2 over the raw stream (see above), whose rows start at token_embd's std.
    const routerInit = linearInit(c.dim, c.tiedEmbeddings ? Math.sqrt(c.dim) : 2);
    for (let i = 0; i < c.nLayers; i++) {
      t.push(...attention(c, i));
      for (const x of moeFfn(c, i, c.expertFf)) {
        if (x.role === 'router') t.push({ ...x, init: routerInit });
        else if (x.role === 'ffn_down') t.push({ ...x, init: linearInit(c.expertFf, residualGain(c) / Math.SQRT2) });
        else t.push(x);
      }
    }
    return t;
  },
};
