// DeepSeek-V2/V2-Lite/V3 and Kimi-K2 (llama.cpp src/models/deepseek2.cpp): Multi-head Latent
// Attention with an optional q LoRA, the latent/RoPE-key projection attn_kv_a_mqa, and the up-
// projections either as one attn_kv_b (older files) or split attn_k_b/attn_v_b (the absorbed
// layout, with *_mla head sizes and a one-head "MQA" cache in the metadata); YaRN with DeepSeek's
// mscale; leading dense blocks; routed experts (softmax, or sigmoid with a selection bias and
// expert groups) plus shared experts. With `nextn: 1`, DeepSeek-V3's multi-token-prediction block
// follows the trunk as block nLayers (llama.cpp load_arch_tensors / graph_mtp): a full MoE block
// plus the nextn.* tensors that feed it [enorm(embedding), hnorm(trunk state)] through eh_proj.
import { attention, checkFullWidthHeads, denseFfn, linear, linearInit, moeFfn, norm, requirePositive, residualGain, embeddings } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { GgufType } from '../../gguf/constants';
import { kv } from '../../gguf/writer';
import type { GgufValue } from '../../gguf/writer';
import { checkExperts } from './common';

export interface MlaOptions {
  /** q LoRA rank; 0 = a plain attn_q (V2-Lite). */
  qLora: number;
  kvLora: number;
  qkNope: number;
  qkRope: number;
  vHead: number;
  /** 'kv_b': one attn_kv_b; 'split': attn_k_b + attn_v_b. */
  layout: 'kv_b' | 'split';
}

export interface DeepseekMoeOptions {
  /** Leading blocks with a dense FFN of size `ff`. */
  nDense: number;
  nShared: number;
  gating: 'softmax' | 'sigmoid';
  /** Per-expert selection bias exp_probs_b. */
  probsBias: boolean;
  nGroup: number;
  nGroupUsed: number;
  normW: boolean;
  /** expert_weights_scale (0 = none written). */
  wScale: number;
}

export interface YarnOptions {
  factor: number;
  origCtx: number;
  /** rope.scaling.yarn_log_multiplier as the converter writes it: 0.1 * mscale_all_dim. */
  logMul: number;
}

/** The lightning indexer (deepseek32, glm-dsa: DSA): head count, head size, positions kept per query. */
export interface DsaOptions {
  nHead: number;
  headDim: number;
  topK: number;
  /** glm-dsa: attention.indexer.types, 1 where a block has its own indexer, 0 where it shares the last one's selection. */
  types?: number[];
}

/** Whether block i carries indexer tensors (every block unless types says it shares). */
const hasIndexer = (d: DsaOptions, i: number) => !d.types || d.types[i] !== 0;

export type Deepseek2Config = ModelConfig & {
  mla: MlaOptions;
  /** deepseek32 only: the sparse attention's indexer. */
  dsa?: DsaOptions;
  moe: DeepseekMoeOptions;
  yarn?: YarnOptions;
  /**
   * Multi-token-prediction (NextN) blocks written after the trunk: 0 (default, none) or 1 (what
   * DeepSeek-V3 ships; llama.cpp's graph_mtp runs exactly one). Counted in block_count, with
   * nextn_predict_layers; needs q LoRA, the split layout and shared experts (graph_mtp asserts them).
   */
  nextn?: number;
  /**
   * With nextn: also write the block's own nextn.embed_tokens and nextn.shared_head_head. Default
   * false: llama.cpp then uses token_embd and output, as for DeepSeek-V3 files whose converter
   * dropped the duplicates.
   */
  nextnOwnEmbeddings?: boolean;
};

/** deepseek2-ocr: deepseek2's routing options without MLA. */
export type Deepseek2OcrConfig = ModelConfig & {
  moe: DeepseekMoeOptions;
  /** q/k/v biases (create_tensor_qkv reads them when present). */
  qkvBias?: boolean;
  /**
   * attention.sliding_window, which the converter writes for Unlimited-OCR and the decoder ignores
   * (full attention). Absent: not written.
   */
  slidingWindow?: number;
};

/** Metadata of the routed/shared-expert options shared with glm4moe. */
export function deepseekMoeMetadata(arch: string, c: ModelConfig, m: DeepseekMoeOptions): [string, GgufValue][] {
  const out: [string, GgufValue][] = [
    [`${arch}.leading_dense_block_count`, kv.u32(m.nDense)],
    [`${arch}.expert_feed_forward_length`, kv.u32(c.expertFf)],
    [`${arch}.expert_shared_count`, kv.u32(m.nShared)],
    [`${arch}.expert_weights_norm`, kv.bool(m.normW)],
    [`${arch}.expert_gating_func`, kv.u32(m.gating === 'sigmoid' ? 2 : 1)],
  ];
  if (m.wScale) out.push([`${arch}.expert_weights_scale`, kv.f32(m.wScale)]);
  if (m.nGroup > 1) out.push([`${arch}.expert_group_count`, kv.u32(m.nGroup)], [`${arch}.expert_group_used_count`, kv.u32(m.nGroupUsed)]);
  return out;
}

/** Dense FFN for the leading blocks, else router (+ selection bias), experts and shared experts. */
export function deepseekFfn(c: ModelConfig, m: DeepseekMoeOptions, i: number, normName: string): TensorSpec[] {
  const p = `blk.${i}`;
  const rename = (ts: TensorSpec[]) => ts.map((s) => (s.name === `${p}.ffn_norm.weight` ? { ...s, name: `${p}.${normName}.weight` } : s));
  if (i < m.nDense) return rename(denseFfn(c, i));
  const t = rename(moeFfn(c, i, c.expertFf));
  if (m.probsBias) t.push({ name: `${p}.exp_probs_b.bias`, shape: [c.nExperts], init: { kind: 'normal', std: 0.05 }, role: 'norm', layer: i });
  if (m.nShared > 0) t.push(...ungatedSharedExpert(c, i, c.expertFf * m.nShared));
  return t;
}

/** An ungated shared expert ffn_{gate,up,down}_shexp of width f. */
export function ungatedSharedExpert(c: ModelConfig, i: number, f: number): TensorSpec[] {
  const p = `blk.${i}`;
  return [
    linear(`${p}.ffn_gate_shexp.weight`, c.dim, f, 'ffn_gate', i),
    linear(`${p}.ffn_up_shexp.weight`, c.dim, f, 'ffn_up', i),
    linear(`${p}.ffn_down_shexp.weight`, f, c.dim, 'ffn_down', i, residualGain(c)),
  ];
}

export function checkDeepseekMoe(c: ModelConfig, m: DeepseekMoeOptions | undefined): DeepseekMoeOptions {
  if (!m) throw new Error(`${c.arch}: needs moe options (use a preset)`);
  checkExperts(c, true);
  if (m.nDense < 0 || m.nDense > c.nLayers) throw new Error(`${c.arch}: nDense ${m.nDense} out of range`);
  // (Fewer groups than experts: llama.cpp's loader asserts n_expert_groups < n_expert.)
  if (m.nGroup > 1 && (c.nExperts % m.nGroup !== 0 || m.nGroup >= c.nExperts || m.nGroupUsed < 1 || m.nGroupUsed > m.nGroup)) throw new Error(`${c.arch}: expert groups ${m.nGroupUsed}/${m.nGroup} do not fit ${c.nExperts} experts`);
  return m;
}

/**
 * `deepseek2`, and `deepseek32` (DeepSeek-V3.2, src/models/deepseek32.cpp): the same blocks plus a
 * lightning indexer per block (indexer.attn_q_b from the q LoRA latent, indexer.attn_k with a
 * biased LayerNorm k_norm, indexer.proj) and its attention.indexer.* keys; its loader takes q LoRA
 * and the split layout only.
 */
function deepseekArch(a: 'deepseek2' | 'deepseek32' | 'glm-dsa' | 'mistral4' | 'deepseek2-ocr'): ArchDefinition {
  return {
    name: a,
    ggufArch: a,
    normalize(c: ModelConfig): ModelConfig {
      const d = c as Deepseek2Config;
      requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'vocabSize', 'ctx', 'expertFf']);
      if (a === 'deepseek2-ocr') return normalizeOcr(c as Deepseek2OcrConfig);
      if (!d.mla) throw new Error(`${a}: needs mla options (use a preset)`);
      if (a === 'deepseek32' || a === 'glm-dsa') {
        const x = d.dsa;
        if (!x) throw new Error(`${a}: needs dsa options (use a preset)`);
        if (x.types && (a !== 'glm-dsa' || x.types.length !== c.nLayers || x.types[0] === 0)) throw new Error(`${a}: indexer types are glm-dsa's, one per block, the first 1`);
        if (x.headDim < 64 || (x.headDim & (x.headDim - 1)) !== 0 || x.headDim < d.mla.qkRope || x.nHead < 1 || x.topK < 1)
          throw new Error(`${a}: the indexer head must be a power of two of at least 64 holding the rotary dims, with heads and topK positive`);
        if (d.mla.qLora < 1 || d.mla.layout !== 'split') throw new Error(`${a}: needs q LoRA and the split attn_k_b/attn_v_b layout`);
      } else if (d.dsa) throw new Error(`${a}: dsa options are for deepseek32 and glm-dsa`);
      checkDeepseekMoe(c, d.moe);
      const m = d.mla;
      if (m.qkRope % 2 !== 0 || m.qkNope < 1 || m.kvLora < 1 || m.vHead < 1) throw new Error('deepseek2: bad MLA sizes');
      const n = d.nextn ?? 0;
      if (n !== 0 && n !== 1) throw new Error(`deepseek2: nextn must be 0 or 1 (llama.cpp runs a single MTP block), got ${n}`);
      if (n === 1) {
        if (m.qLora < 1) throw new Error('deepseek2: a NextN block needs q LoRA (llama.cpp graph_mtp asserts attn_q_a/attn_q_b)');
        if (m.layout !== 'split') throw new Error("deepseek2: a NextN block needs the split attn_k_b/attn_v_b layout (llama.cpp graph_mtp asserts it)");
        if (d.moe.nShared < 1) throw new Error('deepseek2: a NextN block needs shared experts (llama.cpp graph_mtp asserts ffn_*_shexp)');
      } else if (d.nextnOwnEmbeddings) {
        throw new Error('deepseek2: nextnOwnEmbeddings needs nextn: 1');
      }
      return c;
    },
    metadata(c: ModelConfig): [string, GgufValue][] {
      const d = c as Deepseek2Config;
      if (a === 'deepseek2-ocr') return ocrMetadata(c as Deepseek2OcrConfig);
      const { mla: m, moe } = d;
      const split = m.layout === 'split';
      const out: [string, GgufValue][] = [
        [`${a}.vocab_size`, kv.u32(c.vocabSize)],
        [`${a}.context_length`, kv.u32(c.ctx)],
        [`${a}.embedding_length`, kv.u32(c.dim)],
        [`${a}.block_count`, kv.u32(c.nLayers + (d.nextn ?? 0))],
        [`${a}.feed_forward_length`, kv.u32(c.ff)],
        [`${a}.attention.head_count`, kv.u32(c.nHeads)],
        // The split layout runs as MQA over the latent: one KV head of kv_lora + rope.
        [`${a}.attention.head_count_kv`, kv.u32(split ? 1 : c.nHeads)],
        [`${a}.attention.key_length`, kv.u32(split ? m.kvLora + m.qkRope : m.qkNope + m.qkRope)],
        [`${a}.attention.value_length`, kv.u32(split ? m.kvLora : m.vHead)],
        [`${a}.attention.layer_norm_rms_epsilon`, kv.f32(c.normEps)],
        [`${a}.attention.q_lora_rank`, kv.u32(m.qLora)],
        [`${a}.attention.kv_lora_rank`, kv.u32(m.kvLora)],
        [`${a}.rope.freq_base`, kv.f32(c.ropeBase)],
        [`${a}.rope.dimension_count`, kv.u32(m.qkRope)],
        [`${a}.expert_count`, kv.u32(c.nExperts)],
        [`${a}.expert_used_count`, kv.u32(c.nExpertsUsed)],
        ...deepseekMoeMetadata(a, c, moe),
      ];
      if (d.nextn) out.push([`${a}.nextn_predict_layers`, kv.u32(d.nextn)]);
      if (d.dsa)
        out.push(
          [`${a}.attention.indexer.head_count`, kv.u32(d.dsa.nHead)],
          [`${a}.attention.indexer.key_length`, kv.u32(d.dsa.headDim)],
          [`${a}.attention.indexer.top_k`, kv.u32(d.dsa.topK)],
        );
      if (d.dsa?.types) out.push([`${a}.attention.indexer.types`, kv.arr(GgufType.UINT32, d.dsa.types)]);
      if (split) out.push([`${a}.attention.key_length_mla`, kv.u32(m.qkNope + m.qkRope)], [`${a}.attention.value_length_mla`, kv.u32(m.vHead)]);
      if (d.yarn) {
        out.push(
          [`${a}.rope.scaling.type`, kv.str('yarn')],
          [`${a}.rope.scaling.factor`, kv.f32(d.yarn.factor)],
          [`${a}.rope.scaling.original_context_length`, kv.u32(d.yarn.origCtx)],
          [`${a}.rope.scaling.yarn_log_multiplier`, kv.f32(d.yarn.logMul)],
        );
      }
      return out;
    },
    tensors(c: ModelConfig): TensorSpec[] {
      const d = c as Deepseek2Config;
      const t = embeddings(c);
      if (a === 'deepseek2-ocr') {
        const o = c as Deepseek2OcrConfig;
        for (let i = 0; i < c.nLayers; i++) t.push(...attention(c, i, { qkvBias: o.qkvBias }), ...deepseekFfn(c, o.moe, i, 'ffn_norm'));
        return t;
      }
      for (let i = 0; i < c.nLayers; i++) t.push(...deepseekBlock(d, i));
      if (d.nextn) t.push(...deepseekBlock(d, c.nLayers), ...nextnTensors(d, c.nLayers));
      return t;
    },
  };
}

export const deepseek2 = deepseekArch('deepseek2');
export const deepseek32 = deepseekArch('deepseek32');
export const glmDsa = deepseekArch('glm-dsa');
/** Mistral's MLA MoE models, which llama.cpp loads and runs as deepseek2 under their own name. */
export const mistral4 = deepseekArch('mistral4');
/**
 * DeepSeek-OCR's language model (conversion/deepseek.py with is_ocr): deepseek2's blocks with plain
 * multi-head attention (attn_q/k/v/output, n_embd wide, as many KV heads as heads; NeoX RoPE over
 * whole heads at base 10000, which llama.cpp's graph asserts) instead of MLA, and deepseek2's FFNs
 * (leading dense blocks, routed experts plus the shared experts its loader requires).
 */
export const deepseek2Ocr = deepseekArch('deepseek2-ocr');

function normalizeOcr(d: Deepseek2OcrConfig): ModelConfig {
  const x = d as Partial<Deepseek2Config>;
  if (x.mla || x.dsa || x.yarn || x.nextn) throw new Error('deepseek2-ocr: no MLA, DSA, YaRN or NextN options (plain attention, unscaled RoPE)');
  checkFullWidthHeads(d, 'attn_q/k/v and attn_output');
  if (d.nKvHeads !== d.nHeads) throw new Error('deepseek2-ocr: as many KV heads as heads (the loader sizes attn_k/attn_v as n_embd)');
  if (d.ropeBase !== 10000) throw new Error('deepseek2-ocr: rope base 10000 (llama.cpp\'s graph asserts it)');
  const m = checkDeepseekMoe(d, d.moe);
  if (m.nShared < 1) throw new Error('deepseek2-ocr: the loader requires shared experts (nShared >= 1)');
  if (d.slidingWindow !== undefined && !(Number.isInteger(d.slidingWindow) && d.slidingWindow > 0)) throw new Error('deepseek2-ocr: slidingWindow must be a positive integer');
  return d;
}

/** What conversion/deepseek.py writes for an OCR language model (no MLA keys; rope.dimension_count is qk_rope_head_dim, 0 without MLA). */
function ocrMetadata(d: Deepseek2OcrConfig): [string, GgufValue][] {
  const a = 'deepseek2-ocr';
  const out: [string, GgufValue][] = [
    [`${a}.vocab_size`, kv.u32(d.vocabSize)],
    [`${a}.context_length`, kv.u32(d.ctx)],
    [`${a}.embedding_length`, kv.u32(d.dim)],
    [`${a}.block_count`, kv.u32(d.nLayers)],
    [`${a}.feed_forward_length`, kv.u32(d.ff)],
    [`${a}.attention.head_count`, kv.u32(d.nHeads)],
    [`${a}.attention.head_count_kv`, kv.u32(d.nHeads)],
    [`${a}.attention.layer_norm_rms_epsilon`, kv.f32(d.normEps)],
    [`${a}.rope.freq_base`, kv.f32(d.ropeBase)],
    [`${a}.rope.dimension_count`, kv.u32(0)],
    [`${a}.expert_count`, kv.u32(d.nExperts)],
    [`${a}.expert_used_count`, kv.u32(d.nExpertsUsed)],
    ...deepseekMoeMetadata(a, d, d.moe),
  ];
  if (d.slidingWindow !== undefined) out.push([`${a}.attention.sliding_window`, kv.u32(d.slidingWindow)]);
  return out;
}

/** Attention (MLA) and FFN of block `i`; the NextN block is one of these too. */
function deepseekBlock(c: Deepseek2Config, i: number): TensorSpec[] {
  const { mla: m, moe } = c;
  const H = c.nHeads;
  const p = `blk.${i}`;
  const t: TensorSpec[] = [norm(`${p}.attn_norm.weight`, c.dim, i)];
  if (m.qLora > 0) {
    t.push(
      linear(`${p}.attn_q_a.weight`, c.dim, m.qLora, 'attn_q', i),
      norm(`${p}.attn_q_a_norm.weight`, m.qLora, i),
      linear(`${p}.attn_q_b.weight`, m.qLora, H * (m.qkNope + m.qkRope), 'attn_q', i),
    );
  } else {
    t.push(linear(`${p}.attn_q.weight`, c.dim, H * (m.qkNope + m.qkRope), 'attn_q', i));
  }
  t.push(linear(`${p}.attn_kv_a_mqa.weight`, c.dim, m.kvLora + m.qkRope, 'attn_k', i), norm(`${p}.attn_kv_a_norm.weight`, m.kvLora, i));
  if (m.layout === 'split') {
    t.push(
      { name: `${p}.attn_k_b.weight`, shape: [m.qkNope, m.kvLora, H], init: linearInit(m.kvLora), role: 'attn_k', layer: i },
      { name: `${p}.attn_v_b.weight`, shape: [m.kvLora, m.vHead, H], init: linearInit(m.kvLora), role: 'attn_v', layer: i },
    );
  } else {
    t.push(linear(`${p}.attn_kv_b.weight`, m.kvLora, H * (m.qkNope + m.vHead), 'attn_v', i));
  }
  t.push(linear(`${p}.attn_output.weight`, H * m.vHead, c.dim, 'attn_output', i, residualGain(c)));
  if (c.dsa && hasIndexer(c.dsa, i)) t.push(...indexerTensors(c, c.dsa, m.qLora, i));
  t.push(...deepseekFfn(c, moe, i, 'ffn_norm'));
  return t;
}

/**
 * The NextN inputs and head (llama.cpp LLM_TENSOR_NEXTN_*): eh_proj maps [enorm(embedding);
 * hnorm(h)] (2*dim, embedding first) to the block's residual stream; both halves are RMS-normed, so
 * std 1/sqrt(2*dim) starts that stream at unit scale like token_embd starts the trunk's.
 * shared_head_norm normalizes the block's output before the vocabulary head.
 */
/** Block i's DSA lightning indexer (deepseek32's tensors, as glm-dsa and dots3note have them), reading the q LoRA latent of qLora. */
export function indexerTensors(c: ModelConfig, x: { nHead: number; headDim: number }, qLora: number, i: number): TensorSpec[] {
  const p = `blk.${i}`;
  return [
    norm(`${p}.indexer.k_norm.weight`, x.headDim, i),
    { name: `${p}.indexer.k_norm.bias`, shape: [x.headDim], init: { kind: 'normal', std: 0.1 }, role: 'attn_bias', layer: i },
    linear(`${p}.indexer.proj.weight`, c.dim, x.nHead, 'attn_q', i),
    linear(`${p}.indexer.attn_k.weight`, c.dim, x.headDim, 'attn_k', i),
    linear(`${p}.indexer.attn_q_b.weight`, qLora, x.nHead * x.headDim, 'attn_q', i),
  ];
}

export function nextnTensors(c: ModelConfig & { nextnOwnEmbeddings?: boolean }, i: number): TensorSpec[] {
  const p = `blk.${i}.nextn`;
  const t: TensorSpec[] = [
    linear(`${p}.eh_proj.weight`, 2 * c.dim, c.dim, 'nextn_eh_proj', i),
    norm(`${p}.enorm.weight`, c.dim, i),
    norm(`${p}.hnorm.weight`, c.dim, i),
    norm(`${p}.shared_head_norm.weight`, c.dim, i),
  ];
  if (c.nextnOwnEmbeddings) {
    // Same scales as token_embd and output (see embeddings()).
    t.push(
      { name: `${p}.embed_tokens.weight`, shape: [c.dim, c.vocabSize], init: c.tiedEmbeddings ? linearInit(c.dim, 2) : { kind: 'normal', std: 1 }, role: 'token_embd', layer: i },
      linear(`${p}.shared_head_head.weight`, c.dim, c.vocabSize, 'output', i, 2),
    );
  }
  return t;
}
