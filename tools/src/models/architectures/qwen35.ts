// Qwen3.5 / Qwen3.6 (`qwen35` dense, `qwen35moe`; llama.cpp src/models/qwen35.cpp, qwen35moe.cpp,
// converted by conversion/qwen.py Qwen3_5TextModel / Qwen3_5MoeTextModel) and Qwen3-Next
// (`qwen3next`, src/models/qwen3next.cpp, Qwen3NextModel): a hybrid of gated delta-net linear
// attention and gated full attention. Qwen3-Next differs in its projections (ssm_ba per key head:
// its group's beta logits then alphas; optionally the older ssm_in per key head: q, k, its group's
// values and gates), in grouping value heads by key head (Qwen3.5's converter tiles them) and in
// plain NeoX RoPE (no M-RoPE sections). Blocks with (i + 1) % interval != 0 are
// recurrent: a fused attn_qkv (q and k of `kHeads` heads, v of `vHeads`, all of `headDim`), the
// output gate attn_gate, a depthwise causal conv over the qkv channels, the decay terms ssm_a
// (-exp(A_log), so negative) and ssm_dt.bias, per-head beta/alpha projections and a gated RMS norm
// ssm_norm over each value head. The others are full attention with a query and its sigmoid gate
// interleaved per head in attn_q, per-head q/k norms and interleaved M-RoPE (rope.dimension_sections)
// on ropeDims of each head. Every block has a pre-attention norm and post_attention_norm (the
// FFN's input norm: there is no ffn_norm); the FFN is SwiGLU (qwen35) or softmax top-k experts
// with a sigmoid-gated shared expert (qwen35moe). No MTP block is written.
import { checkHeads, denseFfn, embeddings, headDim, linear, moeFfn, norm, requirePositive, residualGain, sharedExpert } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { GgufType } from '../../gguf/constants';
import { kv, type GgufValue } from '../../gguf/writer';
import { baseMetadata, checkExperts } from './common';
import { nextnTensors } from './deepseek2';

/** The linear-attention (gated delta net) shape: ssm.group_count, ssm.time_step_rank, ssm.state_size, ssm.conv_kernel. */
export interface Qwen35LinearAttention {
  /** Key (and query) heads: linear_num_key_heads. */
  kHeads: number;
  /** Value heads (a multiple of kHeads): linear_num_value_heads. */
  vHeads: number;
  /** Key and value head size: linear_key_head_dim = linear_value_head_dim. */
  headDim: number;
  /** linear_conv_kernel_dim. */
  convKernel: number;
}

/**
 * ropeDims: rope.dimension_count (partial_rotary_factor x headDim); ropeSections: the 4 M-RoPE
 * sections in rotated pairs, summing to ropeDims / 2; fullAttentionInterval: every that-many-th
 * block is full attention.
 */
export type Qwen35Config = ModelConfig & {
  headDim: number;
  ropeDims: number;
  /** Qwen3.5 only (Qwen3-Next rotates plain NeoX, without sections). */
  ropeSections: number[];
  /** Qwen3-Next only: the older fused `ssm_in` (per key head q, k, its values, its gates) instead of attn_qkv + attn_gate. */
  ssmIn?: boolean;
  /**
   * 1: a multi-token-prediction block after the trunk (counted in block_count, nextn_predict_layers):
   * a full-attention block with the trunk's FFN, plus nextn.eh_proj/enorm/hnorm/shared_head_norm.
   */
  nextn?: number;
  fullAttentionInterval: number;
  linearAttn: Qwen35LinearAttention;
};

/** llama.cpp's default pattern (no attention.recurrent_layers key): recurrent unless (i + 1) % interval == 0; the MTP block never. */
export const qwen35Recurrent = (c: Qwen35Config, i: number): boolean => i < c.nLayers && (i + 1) % c.fullAttentionInterval !== 0;

/** The FFN helpers write ffn_norm; these blocks use post_attention_norm in its place. */
const withoutFfnNorm = (t: TensorSpec[]) => t.filter((s) => !s.name.endsWith('.ffn_norm.weight'));

/** The gated delta nets' keys (Qwen3.5, qwen4exp): ssm.conv_kernel, state_size, group_count, time_step_rank, inner_size. */
export function linearAttentionMetadata(a: string, la: Qwen35LinearAttention): [string, GgufValue][] {
  return [
    [`${a}.ssm.conv_kernel`, kv.u32(la.convKernel)],
    [`${a}.ssm.state_size`, kv.u32(la.headDim)],
    [`${a}.ssm.group_count`, kv.u32(la.kHeads)],
    [`${a}.ssm.time_step_rank`, kv.u32(la.vHeads)],
    [`${a}.ssm.inner_size`, kv.u32(la.headDim * la.vHeads)],
  ];
}

/**
 * A gated delta-net block's tensors (Qwen3.5; qwen4exp's the same): attn_qkv and attn_gate (or
 * `ssmIn`: Qwen3-Next's older single ssm_in), the conv taps, dt bias, a, beta and alpha (`next`:
 * Qwen3-Next's ssm_ba), ssm_norm, ssm_out.
 */
export function linearAttentionTensors(c: ModelConfig, la: Qwen35LinearAttention, i: number, o: { ssmIn?: boolean; next?: boolean } = {}): TensorSpec[] {
  const p = `blk.${i}`;
  const keyDim = la.kHeads * la.headDim;
  const valueDim = la.vHeads * la.headDim;
  const convDim = 2 * keyDim + valueDim;
  const vec = (n: string, mean: number, std: number): TensorSpec => ({ name: `${p}.${n}`, shape: [la.vHeads], init: { kind: 'normal', mean, std }, role: 'bias', layer: i });
  return [
    // Qwen3-Next's older converters: one ssm_in giving, per key head, its q and k, then its
    // group's values and gates (the layout llama.cpp's legacy build_qkvz reads).
    ...(o.ssmIn
      ? [linear(`${p}.ssm_in.weight`, c.dim, 2 * keyDim + 2 * valueDim, 'attn_v', i)]
      : [
          // llama-quant types attn_qkv as attn_v (category_is_attn_v), one per block here as attn_v is.
          linear(`${p}.attn_qkv.weight`, c.dim, convDim, 'attn_v', i),
          // attn_gate, ssm_alpha/beta and ssm_out: llama-quant has no category for them (the default rule).
          linear(`${p}.attn_gate.weight`, c.dim, valueDim, 'attn_q', i),
        ]),
    // [kernel, channels]: rows of convKernel taps, F32 in every file (llama-quant skips ssm_conv1d).
    { name: `${p}.ssm_conv1d.weight`, shape: [la.convKernel, convDim], init: { kind: 'normal', std: 0.5 }, role: 'bias', layer: i },
    vec('ssm_dt.bias', 0, 0.5),
    // -exp(A_log): negative, so the per-step decay exp(softplus(alpha + dt) * a) stays below 1.
    // The generator's normal is a sum of 4 uniforms (bounded at 3.5 std): all in [-1.7, -0.3].
    vec('ssm_a', -1, 0.2),
    // Qwen3-Next: one ssm_ba giving, per key head, its group's beta logits then its alphas.
    ...(o.next
      ? [linear(`${p}.ssm_ba.weight`, c.dim, 2 * la.vHeads, 'attn_q', i)]
      : [linear(`${p}.ssm_beta.weight`, c.dim, la.vHeads, 'attn_q', i), linear(`${p}.ssm_alpha.weight`, c.dim, la.vHeads, 'attn_q', i)]),
    norm(`${p}.ssm_norm.weight`, la.headDim, i),
    linear(`${p}.ssm_out.weight`, valueDim, c.dim, 'attn_q', i, residualGain(c)),
  ];
}

/** A gated full-attention block's tensors (Qwen3.5, qwen4exp): attn_q (query and gate per head), attn_k, attn_v, attn_output, per-head q/k norms. */
export function gatedAttentionTensors(c: ModelConfig, hd: number, i: number): TensorSpec[] {
  const p = `blk.${i}`;
  return [
    linear(`${p}.attn_q.weight`, c.dim, c.nHeads * hd * 2, 'attn_q', i),
    linear(`${p}.attn_k.weight`, c.dim, c.nKvHeads * hd, 'attn_k', i),
    linear(`${p}.attn_v.weight`, c.dim, c.nKvHeads * hd, 'attn_v', i),
    linear(`${p}.attn_output.weight`, c.nHeads * hd, c.dim, 'attn_output', i, residualGain(c)),
    norm(`${p}.attn_q_norm.weight`, hd, i),
    norm(`${p}.attn_k_norm.weight`, hd, i),
  ];
}

function hybrid(name: 'qwen35' | 'qwen35moe' | 'qwen3next'): ArchDefinition {
  const moe = name !== 'qwen35';
  const next = name === 'qwen3next';
  return {
    name,
    ggufArch: name,
    normalize(c: ModelConfig): ModelConfig {
      const q = c as Qwen35Config;
      requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'nKvHeads', 'vocabSize', 'ctx', ...(moe ? (['expertFf', 'sharedFf'] as const) : [])]);
      checkHeads(c);
      checkExperts(c, moe);
      if (!moe && c.nExperts > 0) throw new Error('qwen35: dense; use qwen35moe for experts');
      const la = q.linearAttn;
      if (!la || ![la.kHeads, la.vHeads, la.headDim, la.convKernel].every((v) => Number.isInteger(v) && v > 0)) throw new Error(`${name}: linearAttn needs positive kHeads, vHeads, headDim and convKernel (use a preset)`);
      if (la.vHeads % la.kHeads !== 0) throw new Error(`${name}: linear value heads ${la.vHeads} must be a multiple of key heads ${la.kHeads}`);
      const hd = headDim(c);
      const interval = q.fullAttentionInterval ?? 4;
      if (!Number.isInteger(interval) || interval <= 0) throw new Error(`${name}: fullAttentionInterval must be a positive integer`);
      if (q.nextn !== undefined && q.nextn !== 0 && q.nextn !== 1) throw new Error(`${name}: nextn must be 0 or 1 (llama.cpp runs a single MTP block)`);
      if (!Number.isInteger(q.ropeDims) || q.ropeDims <= 0 || q.ropeDims % 2 !== 0 || q.ropeDims > hd) throw new Error(`${name}: ropeDims must be even, positive and at most the head size ${hd}`);
      const s = q.ropeSections;
      if (next) return { ...c, headDim: hd, fullAttentionInterval: interval } as Qwen35Config;
      if (q.ssmIn) throw new Error(`${name}: ssmIn is Qwen3-Next's layout`);
      if (!Array.isArray(s) || s.length !== 4 || s.some((x) => !Number.isInteger(x) || x < 0)) throw new Error(`${name}: ropeSections must be 4 non-negative integers`);
      if (s.reduce((a, b) => a + b, 0) !== q.ropeDims / 2) throw new Error(`${name}: ropeSections must sum to ropeDims / 2 = ${q.ropeDims / 2}`);
      return { ...c, headDim: hd, fullAttentionInterval: interval } as Qwen35Config;
    },
    metadata(c: ModelConfig): [string, GgufValue][] {
      const q = c as Qwen35Config;
      const la = q.linearAttn;
      const a = name;
      const m: [string, GgufValue][] = [
        ...baseMetadata(a, c).filter(([k]) => k !== `${a}.rope.dimension_count`),
        [`${a}.rope.dimension_count`, kv.u32(q.ropeDims)],
        // As the converter (gguf-py add_array of Python ints): an INT32 array.
        ...(next ? [] : [[`${a}.rope.dimension_sections`, kv.arr(GgufType.INT32, q.ropeSections)] as [string, GgufValue]]),
        ...linearAttentionMetadata(a, la),
        [`${a}.full_attention_interval`, kv.u32(q.fullAttentionInterval)],
      ];
      if (q.nextn) {
        const i = m.findIndex(([k]) => k === `${a}.block_count`);
        m[i] = [`${a}.block_count`, kv.u32(c.nLayers + q.nextn)];
        m.push([`${a}.nextn_predict_layers`, kv.u32(q.nextn)]);
      }
      if (moe) m.push([`${a}.expert_feed_forward_length`, kv.u32(c.expertFf)], [`${a}.expert_shared_feed_forward_length`, kv.u32(c.sharedFf)]);
      return m;
    },
    tensors(c: ModelConfig): TensorSpec[] {
      const q = c as Qwen35Config;
      const t = embeddings(c);
      for (let i = 0; i < c.nLayers + (q.nextn ?? 0); i++) {
        const p = `blk.${i}`;
        t.push(norm(`${p}.attn_norm.weight`, c.dim, i), norm(`${p}.post_attention_norm.weight`, c.dim, i));
        if (i >= c.nLayers) t.push(...nextnTensors(c, i));
        if (qwen35Recurrent(q, i)) t.push(...linearAttentionTensors(c, q.linearAttn, i, { ssmIn: q.ssmIn, next }));
        else t.push(...gatedAttentionTensors(c, q.headDim, i));
        if (moe) t.push(...withoutFfnNorm(moeFfn(c, i, c.expertFf)), ...sharedExpert(c, i));
        else t.push(...withoutFfnNorm(denseFfn(c, i)));
      }
      return t;
    },
  };
}

export const qwen35 = hybrid('qwen35');
export const qwen35moe = hybrid('qwen35moe');
export const qwen3next = hybrid('qwen3next');
