// DeepSeek-V2/V2-Lite/V3 and Kimi-K2 (llama.cpp src/models/deepseek2.cpp): Multi-head Latent
// Attention with an optional q LoRA, the latent/RoPE-key projection attn_kv_a_mqa, and the up-
// projections either as one attn_kv_b (older files) or split attn_k_b/attn_v_b (the absorbed
// layout, with *_mla head sizes and a one-head "MQA" cache in the metadata); YaRN with DeepSeek's
// mscale; leading dense blocks; routed experts (softmax, or sigmoid with a selection bias and
// expert groups) plus shared experts.
import { denseFfn, linear, linearInit, moeFfn, norm, requirePositive, residualGain, embeddings } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
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

export type Deepseek2Config = ModelConfig & { mla: MlaOptions; moe: DeepseekMoeOptions; yarn?: YarnOptions };

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
  if (m.nShared > 0) {
    const f = c.expertFf * m.nShared;
    t.push(
      linear(`${p}.ffn_gate_shexp.weight`, c.dim, f, 'ffn_gate', i),
      linear(`${p}.ffn_up_shexp.weight`, c.dim, f, 'ffn_up', i),
      linear(`${p}.ffn_down_shexp.weight`, f, c.dim, 'ffn_down', i, residualGain(c)),
    );
  }
  return t;
}

export function checkDeepseekMoe(c: ModelConfig, m: DeepseekMoeOptions | undefined): DeepseekMoeOptions {
  if (!m) throw new Error(`${c.arch}: needs moe options (use a preset)`);
  checkExperts(c, true);
  if (m.nDense < 0 || m.nDense > c.nLayers) throw new Error(`${c.arch}: nDense ${m.nDense} out of range`);
  if (m.nGroup > 1 && (c.nExperts % m.nGroup !== 0 || m.nGroupUsed < 1 || m.nGroupUsed > m.nGroup)) throw new Error(`${c.arch}: expert groups ${m.nGroupUsed}/${m.nGroup} do not fit ${c.nExperts} experts`);
  return m;
}

export const deepseek2: ArchDefinition = {
  name: 'deepseek2',
  ggufArch: 'deepseek2',
  normalize(c: ModelConfig): ModelConfig {
    const d = c as Deepseek2Config;
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'vocabSize', 'ctx', 'expertFf']);
    if (!d.mla) throw new Error('deepseek2: needs mla options (use a preset)');
    checkDeepseekMoe(c, d.moe);
    const m = d.mla;
    if (m.qkRope % 2 !== 0 || m.qkNope < 1 || m.kvLora < 1 || m.vHead < 1) throw new Error('deepseek2: bad MLA sizes');
    return c;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const d = c as Deepseek2Config;
    const { mla: m, moe } = d;
    const a = 'deepseek2';
    const split = m.layout === 'split';
    const out: [string, GgufValue][] = [
      [`${a}.vocab_size`, kv.u32(c.vocabSize)],
      [`${a}.context_length`, kv.u32(c.ctx)],
      [`${a}.embedding_length`, kv.u32(c.dim)],
      [`${a}.block_count`, kv.u32(c.nLayers)],
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
    const { mla: m, moe } = c as Deepseek2Config;
    const H = c.nHeads;
    const t = embeddings(c);
    for (let i = 0; i < c.nLayers; i++) {
      const p = `blk.${i}`;
      t.push(norm(`${p}.attn_norm.weight`, c.dim, i));
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
      t.push(...deepseekFfn(c, moe, i, 'ffn_norm'));
    }
    return t;
  },
};
