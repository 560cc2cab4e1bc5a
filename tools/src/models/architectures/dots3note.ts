// rednote dots.llm3 (`dots3note`; llama.cpp src/models/dots3note.cpp, converted by
// conversion/dots3.py Dots3NoteModel on top of DeepseekV2Model). Every block runs absorbed MLA
// (q LoRA, attn_kv_a_mqa, the split attn_k_b / attn_v_b), in one of two kinds (HF layer_types):
// full blocks with kv_lora_rank, key_length_mla / value_length_mla and rope.freq_base, and
// sliding-window blocks (attention.sliding_window positions) with their own kv_lora_rank_swa,
// key_length_mla_swa / value_length_mla_swa, head count and rope.freq_base_swa; both share
// q_lora_rank and rope.dimension_count. `attention.head_count` is an INT32 array per block (the
// MTP block takes the sliding kind's), head_count_kv 1, key_length / value_length the full kind's
// latent (kv_lora + rope / kv_lora) and key_length_swa / value_length_swa the sliding kind's.
// `attention.sliding_window_pattern` (BOOL per trunk block, true = sliding) and
// `attention.indexer.types` (BOOL per trunk block, true = full: its own DSA lightning indexer, the
// indexer.* tensors of deepseek32) as the converter writes them. Each block also has attn_k_norm
// (an RMS norm of the shared RoPE key, [qk_rope]) and attn_gate ([n_embd, n_head_l], a sigmoid gate
// per head). Leading dense blocks, then sigmoid routing with exp_probs_b, renormalization and
// scale, and ungated shared experts (deepseek2's FFN). With `nextn: 1` the converter's MTP block
// follows the trunk (counted in block_count, nextn_predict_layers 1): sliding-kind attention, a
// dense FFN of feed_forward_length and nextn.{eh_proj, enorm, hnorm, embed_tokens,
// shared_head_norm}, the tensors llama.cpp's loader creates (and skips) for it.
import { denseFfn, embeddings, linear, linearInit, norm, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { GgufType } from '../../gguf/constants';
import { kv } from '../../gguf/writer';
import type { GgufValue } from '../../gguf/writer';
import { checkDeepseekMoe, deepseekFfn, deepseekMoeMetadata, indexerTensors, nextnTensors, type DeepseekMoeOptions } from './deepseek2';

/** One block kind's MLA sizes (the rotary dims and q LoRA are shared). */
export interface Dots3MlaKind {
  nHeads: number;
  kvLora: number;
  qkNope: number;
  vHead: number;
}

/**
 * full / swa: the two kinds' MLA sizes; qLora, qkRope shared. fullEvery: block i has full
 * attention when i % fullEvery === 0, the others slide over `window` positions at ropeBaseSwa
 * (--layers N keeps the rule). dsa: the full blocks' indexer. nextn: 0 or 1 MTP block.
 */
export type Dots3noteConfig = ModelConfig & {
  qLora: number;
  qkRope: number;
  full: Dots3MlaKind;
  swa: Dots3MlaKind;
  fullEvery: number;
  window: number;
  ropeBaseSwa: number;
  dsa: { nHead: number; headDim: number; topK: number };
  moe: DeepseekMoeOptions;
  nextn?: number;
};

const isSwa = (c: Dots3noteConfig, i: number) => i >= c.nLayers || i % c.fullEvery !== 0;
const kindAt = (c: Dots3noteConfig, i: number) => (isSwa(c, i) ? c.swa : c.full);

export const dots3note: ArchDefinition = {
  name: 'dots3note',
  ggufArch: 'dots3note',
  normalize(c: ModelConfig): ModelConfig {
    const d = c as Dots3noteConfig;
    requirePositive(c, ['nLayers', 'dim', 'ff', 'vocabSize', 'ctx', 'expertFf']);
    for (const f of ['qLora', 'qkRope', 'fullEvery', 'window'] as const)
      if (!Number.isInteger(d[f]) || d[f] <= 0) throw new Error(`dots3note: ${f} must be a positive integer (use a preset), got ${String(d[f])}`);
    if (!(d.ropeBaseSwa > 0)) throw new Error(`dots3note: ropeBaseSwa must be positive, got ${String(d.ropeBaseSwa)}`);
    if (d.qkRope % 2 !== 0) throw new Error(`dots3note: qkRope ${d.qkRope} must be even`);
    for (const k of ['full', 'swa'] as const) {
      const m = d[k];
      if (!m || ![m.nHeads, m.kvLora, m.qkNope, m.vHead].every((x) => Number.isInteger(x) && x > 0)) throw new Error(`dots3note: ${k} needs positive nHeads, kvLora, qkNope, vHead`);
    }
    const x = d.dsa;
    if (!x || x.headDim < 64 || (x.headDim & (x.headDim - 1)) !== 0 || x.headDim < d.qkRope || x.nHead < 1 || x.topK < 1)
      throw new Error('dots3note: the indexer head must be a power of two of at least 64 holding the rotary dims, with heads and topK positive');
    checkDeepseekMoe(c, d.moe);
    if (!d.moe.probsBias || d.moe.gating !== 'sigmoid' || d.moe.nShared < 1 || d.moe.nGroup > 1)
      throw new Error('dots3note: routing is sigmoid with exp_probs_b, shared experts and no expert groups (the converter asserts it)');
    const n = d.nextn ?? 0;
    if (n !== 0 && n !== 1) throw new Error(`dots3note: nextn must be 0 or 1, got ${n}`);
    return { ...c, nKvHeads: 1, nHeads: d.full.nHeads, moe: { ...d.moe, nDense: Math.min(d.moe.nDense, c.nLayers) } } as Dots3noteConfig;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const d = c as Dots3noteConfig;
    const a = 'dots3note';
    const nAll = c.nLayers + (d.nextn ?? 0);
    const trunk = Array.from({ length: c.nLayers }, (_, i) => i);
    const out: [string, GgufValue][] = [
      [`${a}.vocab_size`, kv.u32(c.vocabSize)],
      [`${a}.context_length`, kv.u32(c.ctx)],
      [`${a}.embedding_length`, kv.u32(c.dim)],
      [`${a}.block_count`, kv.u32(nAll)],
      [`${a}.feed_forward_length`, kv.u32(c.ff)],
      [`${a}.attention.head_count`, kv.arr(GgufType.INT32, Array.from({ length: nAll }, (_, i) => kindAt(d, i).nHeads))],
      [`${a}.attention.head_count_kv`, kv.u32(1)],
      [`${a}.rope.freq_base`, kv.f32(c.ropeBase)],
      [`${a}.attention.layer_norm_rms_epsilon`, kv.f32(c.normEps)],
      [`${a}.expert_count`, kv.u32(c.nExperts)],
      [`${a}.expert_used_count`, kv.u32(c.nExpertsUsed)],
      [`${a}.rope.freq_base_swa`, kv.f32(d.ropeBaseSwa)],
      [`${a}.attention.q_lora_rank`, kv.u32(d.qLora)],
      [`${a}.attention.kv_lora_rank`, kv.u32(d.full.kvLora)],
      [`${a}.attention.key_length`, kv.u32(d.full.kvLora + d.qkRope)],
      [`${a}.attention.value_length`, kv.u32(d.full.kvLora)],
      [`${a}.attention.key_length_mla`, kv.u32(d.full.qkNope + d.qkRope)],
      [`${a}.attention.value_length_mla`, kv.u32(d.full.vHead)],
      [`${a}.rope.dimension_count`, kv.u32(d.qkRope)],
      ...deepseekMoeMetadata(a, c, d.moe),
      [`${a}.attention.sliding_window`, kv.u32(d.window)],
      [`${a}.attention.sliding_window_pattern`, kv.arr(GgufType.BOOL, trunk.map((i) => isSwa(d, i)))],
      [`${a}.attention.kv_lora_rank_swa`, kv.u32(d.swa.kvLora)],
      [`${a}.attention.key_length_swa`, kv.u32(d.swa.kvLora + d.qkRope)],
      [`${a}.attention.value_length_swa`, kv.u32(d.swa.kvLora)],
      [`${a}.attention.key_length_mla_swa`, kv.u32(d.swa.qkNope + d.qkRope)],
      [`${a}.attention.value_length_mla_swa`, kv.u32(d.swa.vHead)],
      [`${a}.attention.indexer.head_count`, kv.u32(d.dsa.nHead)],
      [`${a}.attention.indexer.key_length`, kv.u32(d.dsa.headDim)],
      [`${a}.attention.indexer.top_k`, kv.u32(d.dsa.topK)],
      [`${a}.attention.indexer.types`, kv.arr(GgufType.BOOL, trunk.map((i) => !isSwa(d, i)))],
    ];
    if (d.nextn) out.push([`${a}.nextn_predict_layers`, kv.u32(d.nextn)]);
    return out;
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const d = c as Dots3noteConfig;
    const t = embeddings(c);
    for (let i = 0; i < c.nLayers; i++) t.push(...attentionBlock(d, i), ...deepseekFfn(c, d.moe, i, 'ffn_norm'));
    if (d.nextn) {
      const i = c.nLayers;
      // The MTP block: sliding-kind attention, a dense FFN, the nextn inputs (no shared_head_head).
      const own = nextnTensors({ ...c, nextnOwnEmbeddings: true }, i).filter((x) => !x.name.endsWith('shared_head_head.weight'));
      t.push(...attentionBlock(d, i), ...denseFfn(c, i), ...own);
    }
    return t;
  },
};

/** Block i's attention: MLA of its kind, the RoPE-key norm, the head gate, the indexer on full trunk blocks. */
function attentionBlock(c: Dots3noteConfig, i: number): TensorSpec[] {
  const m = kindAt(c, i);
  const H = m.nHeads;
  const p = `blk.${i}`;
  const t: TensorSpec[] = [
    norm(`${p}.attn_norm.weight`, c.dim, i),
    linear(`${p}.attn_q_a.weight`, c.dim, c.qLora, 'attn_q', i),
    norm(`${p}.attn_q_a_norm.weight`, c.qLora, i),
    linear(`${p}.attn_q_b.weight`, c.qLora, H * (m.qkNope + c.qkRope), 'attn_q', i),
    linear(`${p}.attn_kv_a_mqa.weight`, c.dim, m.kvLora + c.qkRope, 'attn_k', i),
    norm(`${p}.attn_kv_a_norm.weight`, m.kvLora, i),
    norm(`${p}.attn_k_norm.weight`, c.qkRope, i),
    { name: `${p}.attn_k_b.weight`, shape: [m.qkNope, m.kvLora, H], init: linearInit(m.kvLora), role: 'attn_k', layer: i },
    { name: `${p}.attn_v_b.weight`, shape: [m.kvLora, m.vHead, H], init: linearInit(m.kvLora), role: 'attn_v', layer: i },
    linear(`${p}.attn_output.weight`, H * m.vHead, c.dim, 'attn_output', i, residualGain(c)),
    linear(`${p}.attn_gate.weight`, c.dim, H, 'attn_q', i),
  ];
  if (!isSwa(c, i)) {
    t.push(...indexerTensors(c, c.dsa, c.qLora, i));
  }
  return t;
}
