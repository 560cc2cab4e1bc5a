// Moonshot Kimi-K3 (`kimi-k3`: Kimi-K3 2.8T-A50B; llama.cpp src/models/kimi-k3.cpp, converted by
// conversion/kimi_k3.py KimiK3Model): kimi-linear's hybrid of KDA blocks (attention.head_count_kv 0)
// and NoPE MLA blocks, with
// - a full-rank KDA output gate ssm_g [n_embd, d_inner] (no ssm_g_a / ssm_g_b), ssm_a a plain 1-D
//   [n_head] (-exp(A_log), folded by the converter) and the optional kda.gate_lower_bound;
// - MLA with an optional q LoRA (attn_q_a, attn_q_a_norm, attn_q_b) and an optional sigmoid output
//   gate attn_gate [n_embd, n_head x v_head] (HF g_proj of the full-attention layers), always the
//   split attn_k_b / attn_v_b the converter writes;
// - the situ activation (activation.situ_beta, activation.situ_linear_beta) in the dense FFN, the
//   routed experts and the shared experts;
// - latent experts (expert_latent_length, HF routed_expert_hidden_size): the routed experts are
//   [latent, ff] with ffn_routed_down [n_embd, latent] before and ffn_routed_up [latent, n_embd]
//   after, ffn_routed_norm [latent] optional; the shared experts (ff x expert_shared_count wide) stay
//   at n_embd;
// - cross-layer residual attention (attn_res.block_size > 0): attn_res_score and ffn_res_score per
//   block and output_res_score, [n_embd] each (the converter's fused <x>_res_norm x <x>_res_proj).
import { embeddings, f32Tensor, linear, linearInit, norm, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { kdaQkvTensors } from './kimi-linear';
import { GgufType } from '../../gguf/constants';
import { kv, type GgufValue } from '../../gguf/writer';
import { checkExperts } from './common';

export interface KimiK3Config extends ModelConfig {
  kda: {
    /** kda.head_dim (linear_attn_config.head_dim). */
    headDim: number;
    /** ssm.conv_kernel (linear_attn_config.short_conv_kernel_size). */
    convKernel: number;
    /** kda.gate_lower_bound (linear_attn_config.gate_lower_bound); absent: not written. */
    lowerBound?: number;
  };
  mla: {
    kvLora: number;
    qkNope: number;
    /** rope.dimension_count: the shared key part (K3 is NoPE: never rotated). */
    qkRope: number;
    vHead: number;
    /** attention.q_lora_rank; absent: one attn_q. */
    qLora?: number;
    /** The sigmoid output gate attn_gate. */
    outGate: boolean;
  };
  /** The MLA blocks (0-based; the converter's full_attn_layers are 1-based). */
  attnLayers: number[];
  /** leading_dense_block_count (first_k_dense_replace). */
  nDense: number;
  /** expert_shared_count (num_shared_experts). */
  nShared: number;
  /** expert_weights_scale (routed_scaling_factor). */
  wScale: number;
  /** expert_weights_norm (moe_renormalize). */
  normW: boolean;
  /** expert_latent_length (routed_expert_hidden_size); 0: not written, experts at n_embd. */
  latent: number;
  /** ffn_routed_norm on the latent experts' sum. */
  routedNorm?: boolean;
  /** attn_res.block_size; 0: no residual attention. */
  resBlock: number;
  /** activation.situ_beta, activation.situ_linear_beta. */
  situBeta: number;
  situLinearBeta: number;
}

const isAttn = (c: KimiK3Config, i: number) => c.attnLayers.includes(i);

/**
 * A residual-attention score vector: a draw whose dot with an RMS-normed row has a spread of
 * about 0.75, so the softmax over the banked inputs is neither flat nor one-hot. (At 1.5 the
 * mixes, one before every sublayer and the head, were sharp enough that llama.cpp's own F16-KV
 * run of tiny-kimi-k3 Q4_K_M strayed five times as far from its F32 one: NMSE 2.7e-3 against
 * 5.6e-4, geometric mean over four seeds; measured.)
 */
const resScore = (name: string, dim: number, layer?: number): TensorSpec => ({ name, shape: [dim], init: { kind: 'normal', std: 0.75 / Math.sqrt(dim) }, role: 'norm', layer });

/**
 * The gain of every projection that writes into the residual stream: half of residualGain. With
 * residual attention the stream restarts from the attention output at each checkpoint block, so
 * the few sublayer outputs since are all of it, and the latent experts' sum is RMS-normed to a
 * fixed size whatever its weights: at residualGain one block's FFN was as large as the stream it
 * joined, and an expert choice flipped by rounding moved a position's logits by up to 0.7 NMSE
 * (measured). At half, the banked token embedding keeps its share of every mix.
 */
const blockGain = (c: ModelConfig) => residualGain(c) / 2;

function kdaTensors(c: KimiK3Config, i: number): TensorSpec[] {
  const p = `blk.${i}`;
  const { headDim: S, convKernel } = c.kda;
  const H = c.nHeads;
  const d = H * S;
  return [
    ...kdaQkvTensors(c, i, d, convKernel),
    linear(`${p}.ssm_f_a.weight`, c.dim, S, 'attn_q', i),
    linear(`${p}.ssm_f_b.weight`, S, d, 'attn_q', i),
    linear(`${p}.ssm_beta.weight`, c.dim, H, 'attn_q', i),
    // -exp(A_log), negative, 1-D as the converter writes it (kimi-linear's is padded to 4-D).
    f32Tensor(`${p}.ssm_a`, [H], { kind: 'normal', mean: -1, std: 0.2 }, i),
    f32Tensor(`${p}.ssm_dt.bias`, [d], { kind: 'normal', std: 0.5 }, i),
    linear(`${p}.ssm_g.weight`, c.dim, d, 'attn_q', i),
    norm(`${p}.ssm_norm.weight`, S, i),
    linear(`${p}.attn_output.weight`, d, c.dim, 'attn_output', i, blockGain(c)),
  ];
}

function mlaTensors(c: KimiK3Config, i: number): TensorSpec[] {
  const p = `blk.${i}`;
  const m = c.mla;
  const H = c.nHeads;
  const qk = H * (m.qkNope + m.qkRope);
  return [
    norm(`${p}.attn_kv_a_norm.weight`, m.kvLora, i),
    ...(m.qLora
      ? [linear(`${p}.attn_q_a.weight`, c.dim, m.qLora, 'attn_q', i), norm(`${p}.attn_q_a_norm.weight`, m.qLora, i), linear(`${p}.attn_q_b.weight`, m.qLora, qk, 'attn_q', i)]
      : [linear(`${p}.attn_q.weight`, c.dim, qk, 'attn_q', i)]),
    linear(`${p}.attn_kv_a_mqa.weight`, c.dim, m.kvLora + m.qkRope, 'attn_k', i),
    { name: `${p}.attn_k_b.weight`, shape: [m.qkNope, m.kvLora, H], init: linearInit(m.kvLora), role: 'attn_k', layer: i },
    { name: `${p}.attn_v_b.weight`, shape: [m.kvLora, m.vHead, H], init: linearInit(m.kvLora), role: 'attn_v', layer: i },
    ...(m.outGate ? [linear(`${p}.attn_gate.weight`, c.dim, H * m.vHead, 'attn_q', i)] : []),
    linear(`${p}.attn_output.weight`, H * m.vHead, c.dim, 'attn_output', i, blockGain(c)),
  ];
}

function ffnTensors(c: KimiK3Config, i: number): TensorSpec[] {
  const p = `blk.${i}`;
  if (i < c.nDense)
    return [
      linear(`${p}.ffn_gate.weight`, c.dim, c.ff, 'ffn_gate', i),
      linear(`${p}.ffn_up.weight`, c.dim, c.ff, 'ffn_up', i),
      linear(`${p}.ffn_down.weight`, c.ff, c.dim, 'ffn_down', i, blockGain(c)),
    ];
  const e = c.nExperts;
  const w = c.latent > 0 ? c.latent : c.dim;
  const f = c.expertFf;
  const fs = f * c.nShared;
  const g = blockGain(c);
  // The routed weights sum to wScale renormalized, and to about nExpertsUsed x wScale not (the
  // chosen sigmoids are near 1): the experts are written at 1 / that, so their mix comes out at
  // one expert's size (tiny-kimi-k3-plain's mix was 7 times it, measured).
  const mixScale = c.wScale * (c.normW ? 1 : c.nExpertsUsed);
  return [
    linear(`${p}.ffn_gate_inp.weight`, c.dim, e, 'router', i, 2),
    { name: `${p}.exp_probs_b.bias`, shape: [e], init: { kind: 'normal', std: 0.05 }, role: 'norm', layer: i },
    { name: `${p}.ffn_gate_exps.weight`, shape: [w, f, e], init: linearInit(w), role: 'ffn_gate', layer: i },
    { name: `${p}.ffn_up_exps.weight`, shape: [w, f, e], init: linearInit(w), role: 'ffn_up', layer: i },
    { name: `${p}.ffn_down_exps.weight`, shape: [f, w, e], init: linearInit(f, (c.latent > 0 ? 1 : g) / mixScale), role: 'ffn_down', layer: i },
    // (No llama-quant category of their own: the default rule, as Nemotron 3 Super's ffn_latent_*.)
    ...(c.latent > 0
      ? [
          linear(`${p}.ffn_routed_down.weight`, c.dim, c.latent, 'ffn_up', i),
          ...(c.routedNorm ? [norm(`${p}.ffn_routed_norm.weight`, c.latent, i)] : []),
          linear(`${p}.ffn_routed_up.weight`, c.latent, c.dim, 'ffn_up', i, g),
        ]
      : []),
    ...(c.nShared > 0
      ? [
          linear(`${p}.ffn_gate_shexp.weight`, c.dim, fs, 'ffn_gate', i),
          linear(`${p}.ffn_up_shexp.weight`, c.dim, fs, 'ffn_up', i),
          linear(`${p}.ffn_down_shexp.weight`, fs, c.dim, 'ffn_down', i, g),
        ]
      : []),
  ];
}

export const kimiK3: ArchDefinition = {
  name: 'kimi-k3',
  ggufArch: 'kimi-k3',
  normalize(c: ModelConfig): ModelConfig {
    const k = c as KimiK3Config;
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'vocabSize', 'ctx', 'expertFf']);
    checkExperts(c, true);
    const a = k.kda;
    if (!a || ![a.headDim, a.convKernel].every((v) => Number.isInteger(v) && v > 0) || a.convKernel < 2) throw new Error('kimi-k3: kda needs a positive headDim and convKernel >= 2 (use a preset)');
    if (a.lowerBound !== undefined && !(a.lowerBound < 0)) throw new Error('kimi-k3: kda.lowerBound must be negative');
    const m = k.mla;
    if (!m || ![m.kvLora, m.qkNope, m.qkRope, m.vHead].every((v) => Number.isInteger(v) && v > 0)) throw new Error('kimi-k3: mla needs positive kvLora, qkNope, qkRope, vHead (use a preset)');
    if (m.qLora !== undefined && !(Number.isInteger(m.qLora) && m.qLora > 0)) throw new Error('kimi-k3: mla.qLora must be a positive integer when set');
    if (!Array.isArray(k.attnLayers) || k.attnLayers.some((i) => !Number.isInteger(i) || i < 0 || i >= c.nLayers)) throw new Error('kimi-k3: attnLayers must be block indices');
    // llama.cpp's hybrid memory needs a layer of each kind (as kimi-linear's).
    if (k.attnLayers.length === 0 || k.attnLayers.length === c.nLayers) throw new Error('kimi-k3: needs both KDA and MLA blocks (llama.cpp aborts without a layer of each kind)');
    if (!Number.isInteger(k.nDense) || k.nDense < 0 || k.nDense > c.nLayers) throw new Error(`kimi-k3: nDense ${k.nDense} out of range`);
    if (!Number.isInteger(k.nShared) || k.nShared < 0) throw new Error('kimi-k3: nShared must be a non-negative integer');
    if (!Number.isInteger(k.latent) || k.latent < 0) throw new Error('kimi-k3: latent must be a non-negative integer (0: experts at n_embd)');
    if (k.routedNorm && k.latent === 0) throw new Error('kimi-k3: ffn_routed_norm exists only with latent experts');
    if (!Number.isInteger(k.resBlock) || k.resBlock < 0) throw new Error('kimi-k3: resBlock must be a non-negative integer (0: no residual attention)');
    if (!(k.situBeta > 0) || !Number.isFinite(k.situLinearBeta)) throw new Error('kimi-k3: situBeta must be positive and situLinearBeta finite');
    return c;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const k = c as KimiK3Config;
    const { mla: m } = k;
    const a = 'kimi-k3';
    return [
      [`${a}.vocab_size`, kv.u32(c.vocabSize)],
      [`${a}.context_length`, kv.u32(c.ctx)],
      [`${a}.embedding_length`, kv.u32(c.dim)],
      [`${a}.block_count`, kv.u32(c.nLayers)],
      [`${a}.feed_forward_length`, kv.u32(c.ff)],
      [`${a}.attention.head_count`, kv.u32(c.nHeads)],
      // Per block (gguf-py add_array of Python ints: INT32): 0 for KDA, 1 for MLA (the converter's
      // num_key_value_heads = 1: MLA served as MQA over the latent).
      [`${a}.attention.head_count_kv`, kv.arr(GgufType.INT32, Array.from({ length: c.nLayers }, (_, i) => (isAttn(k, i) ? 1 : 0)))],
      [`${a}.attention.layer_norm_rms_epsilon`, kv.f32(c.normEps)],
      [`${a}.expert_count`, kv.u32(c.nExperts)],
      [`${a}.expert_used_count`, kv.u32(c.nExpertsUsed)],
      [`${a}.ssm.conv_kernel`, kv.u32(k.kda.convKernel)],
      [`${a}.kda.head_dim`, kv.u32(k.kda.headDim)],
      ...(k.kda.lowerBound !== undefined ? ([[`${a}.kda.gate_lower_bound`, kv.f32(k.kda.lowerBound)]] as [string, GgufValue][]) : []),
      ...(m.qLora ? ([[`${a}.attention.q_lora_rank`, kv.u32(m.qLora)]] as [string, GgufValue][]) : []),
      [`${a}.attention.kv_lora_rank`, kv.u32(m.kvLora)],
      [`${a}.rope.dimension_count`, kv.u32(m.qkRope)],
      // The MLA cache's row (latent + shared key) and the per-head sizes.
      [`${a}.attention.key_length`, kv.u32(m.kvLora + m.qkRope)],
      [`${a}.attention.value_length`, kv.u32(m.kvLora)],
      [`${a}.attention.key_length_mla`, kv.u32(m.qkNope + m.qkRope)],
      [`${a}.attention.value_length_mla`, kv.u32(m.vHead)],
      [`${a}.expert_feed_forward_length`, kv.u32(c.expertFf)],
      [`${a}.expert_shared_count`, kv.u32(k.nShared)],
      [`${a}.leading_dense_block_count`, kv.u32(k.nDense)],
      [`${a}.expert_weights_scale`, kv.f32(k.wScale)],
      [`${a}.expert_weights_norm`, kv.bool(k.normW)],
      // moe_router_activation_func "sigmoid" (asserted by the converter).
      [`${a}.expert_gating_func`, kv.u32(2)],
      ...(k.latent > 0 ? ([[`${a}.expert_latent_length`, kv.u32(k.latent)]] as [string, GgufValue][]) : []),
      [`${a}.activation.situ_beta`, kv.f32(k.situBeta)],
      [`${a}.activation.situ_linear_beta`, kv.f32(k.situLinearBeta)],
      [`${a}.attn_res.block_size`, kv.u32(k.resBlock)],
    ];
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const k = c as KimiK3Config;
    const t = embeddings(c);
    if (k.resBlock > 0) t.push(resScore('output_res_score.weight', c.dim));
    for (let i = 0; i < c.nLayers; i++) {
      t.push(norm(`blk.${i}.attn_norm.weight`, c.dim, i), norm(`blk.${i}.ffn_norm.weight`, c.dim, i));
      if (k.resBlock > 0) t.push(resScore(`blk.${i}.attn_res_score.weight`, c.dim, i), resScore(`blk.${i}.ffn_res_score.weight`, c.dim, i));
      t.push(...(isAttn(k, i) ? mlaTensors(k, i) : kdaTensors(k, i)), ...ffnTensors(k, i));
    }
    return t;
  },
};
