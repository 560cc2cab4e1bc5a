// Moonshot Kimi-Linear (`kimi-linear`: Kimi-Linear-48B-A3B; llama.cpp src/models/kimi-linear.cpp,
// converted by conversion/kimi_linear.py KimiLinearModel): KDA (Kimi Delta Attention) blocks and
// MLA blocks without RoPE, told apart by the per-block attention.head_count_kv (0: KDA; the
// converter's linear_attn_config.full_attn_layers get num_key_value_heads, which it sets to 1 for
// the MLA cache), then ffn_norm and a dense SwiGLU FFN (the first leading_dense_block_count
// blocks) or sigmoid-routed experts with a selection bias exp_probs_b (renormalized, scaled by
// expert_weights_scale) plus a shared expert of expert_feed_forward_length x expert_shared_count.
//
// A KDA block (kda.head_dim S for keys and values, n_head heads, d_inner = n_head x S): attn_q,
// attn_k, attn_v (or one fused attn_qkv, which llama.cpp's loader also takes), each through its
// own depthwise causal convolution ssm_conv1d_q/k/v (the converter keeps HF's shape: ggml
// [taps, 1, d_inner, 1]; a quantizer may drop the trailing 1), the gate ssm_f_b(ssm_f_a x) + the
// per-channel ssm_dt.bias (d_inner), ssm_a = -exp(A_log) per head ([1, n_head, 1, 1] or
// [1, n_head]), beta ssm_beta, the output gate ssm_g_b(ssm_g_a x), the per-head output norm
// ssm_norm (S) and attn_output. An MLA block: attn_q (no q LoRA), attn_kv_a_mqa (latent + the
// shared key part of rope.dimension_count), attn_kv_a_norm, attn_k_b + attn_v_b (what the
// converter writes; attention.key_length_mla / value_length_mla give the per-head sizes) or, as
// older files, one attn_kv_b (llama.cpp runs it without its MLA cache: key_length_mla and
// value_length_mla 0, key_length / value_length the per-head sizes, every query head cached).
import { denseFfn, embeddings, f32Tensor, linear, linearInit, moeFfn, norm, requirePositive, residualGain } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { GgufType } from '../../gguf/constants';
import { kv, type GgufValue } from '../../gguf/writer';
import { checkExperts } from './common';
import { ungatedSharedExpert } from './deepseek2';

export interface KimiLinearOptions {
  /** kda.head_dim (linear_attn_config.head_dim). */
  headDim: number;
  /** ssm.conv_kernel (linear_attn_config.short_conv_kernel_size). */
  convKernel: number;
  /** One fused attn_qkv instead of attn_q / attn_k / attn_v. */
  fusedQkv?: boolean;
  /** Convolution taps as [taps, 1, d_inner] and ssm_a as [1, n_head] (a re-quantized file's shapes) instead of the converter's 4-D ones. */
  squeezed?: boolean;
}

export interface KimiMlaOptions {
  kvLora: number;
  qkNope: number;
  qkRope: number;
  vHead: number;
  /**
   * 'split': attn_k_b + attn_v_b (the converter's); 'kv_b': one attn_kv_b, run without the MLA
   * cache, written as the fold of the split layout's attn_k_b / attn_v_b of the same seed.
   */
  layout: 'split' | 'kv_b';
}

export type KimiLinearConfig = ModelConfig & {
  kda: KimiLinearOptions;
  mla: KimiMlaOptions;
  /** The MLA blocks (0-based; the converter's full_attn_layers are 1-based). */
  attnLayers: number[];
  /** leading_dense_block_count (first_k_dense_replace). */
  nDense: number;
  /** expert_shared_count. */
  nShared: number;
  /** expert_weights_scale (routed_scaling_factor). */
  wScale: number;
};

const isAttn = (c: KimiLinearConfig, i: number) => c.attnLayers.includes(i);

/**
 * A KDA block's three causal convolutions (ssm_conv1d_q/k/v, [taps, 1, d(, 1)]) and its q, k and v
 * projections (separate, or one attn_qkv), d = heads x head size: Kimi-Linear's, Kimi-K3's and Ling 3's.
 */
export function kdaQkvTensors(c: ModelConfig, i: number, d: number, convKernel: number, o: { fusedQkv?: boolean; squeezed?: boolean } = {}): TensorSpec[] {
  const p = `blk.${i}`;
  const conv = (x: string) => f32Tensor(`${p}.ssm_conv1d_${x}.weight`, o.squeezed ? [convKernel, 1, d] : [convKernel, 1, d, 1], { kind: 'normal', std: 0.5 }, i);
  return [
    conv('q'),
    conv('k'),
    conv('v'),
    // llama-quant types attn_qkv as attn_v (one per block here as attn_v is).
    ...(o.fusedQkv
      ? [linear(`${p}.attn_qkv.weight`, c.dim, 3 * d, 'attn_v', i)]
      : [linear(`${p}.attn_q.weight`, c.dim, d, 'attn_q', i), linear(`${p}.attn_k.weight`, c.dim, d, 'attn_k', i), linear(`${p}.attn_v.weight`, c.dim, d, 'attn_v', i)]),
  ];
}

function kdaTensors(c: KimiLinearConfig, i: number): TensorSpec[] {
  const p = `blk.${i}`;
  const { headDim: S, convKernel, fusedQkv, squeezed } = c.kda;
  const H = c.nHeads;
  const d = H * S;
  return [
    ...kdaQkvTensors(c, i, d, convKernel, { fusedQkv, squeezed }),
    // The gate, beta and output-gate projections: no llama-quant category (the default rule, as attn_q).
    linear(`${p}.ssm_f_a.weight`, c.dim, S, 'attn_q', i),
    linear(`${p}.ssm_f_b.weight`, S, d, 'attn_q', i),
    linear(`${p}.ssm_beta.weight`, c.dim, H, 'attn_q', i),
    // -exp(A_log), negative: with softplus(...) of about 0.3 to 2, per-step decays of exp(-3) to 0.75.
    // (F32 in every file: not named *.weight.)
    f32Tensor(`${p}.ssm_a`, squeezed ? [1, H] : [1, H, 1, 1], { kind: 'normal', mean: -1, std: 0.2 }, i),
    f32Tensor(`${p}.ssm_dt.bias`, [d], { kind: 'normal', std: 0.5 }, i),
    linear(`${p}.ssm_g_a.weight`, c.dim, S, 'attn_q', i),
    linear(`${p}.ssm_g_b.weight`, S, d, 'attn_q', i),
    norm(`${p}.ssm_norm.weight`, S, i),
    linear(`${p}.attn_output.weight`, d, c.dim, 'attn_output', i, residualGain(c)),
  ];
}

function mlaTensors(c: KimiLinearConfig, i: number): TensorSpec[] {
  const p = `blk.${i}`;
  const m = c.mla;
  const H = c.nHeads;
  return [
    norm(`${p}.attn_kv_a_norm.weight`, m.kvLora, i),
    linear(`${p}.attn_q.weight`, c.dim, H * (m.qkNope + m.qkRope), 'attn_q', i),
    linear(`${p}.attn_kv_a_mqa.weight`, c.dim, m.kvLora + m.qkRope, 'attn_k', i),
    ...(m.layout === 'split'
      ? [
          { name: `${p}.attn_k_b.weight`, shape: [m.qkNope, m.kvLora, H], init: linearInit(m.kvLora), role: 'attn_k', layer: i } as TensorSpec,
          { name: `${p}.attn_v_b.weight`, shape: [m.kvLora, m.vHead, H], init: linearInit(m.kvLora), role: 'attn_v', layer: i } as TensorSpec,
        ]
      : // The fold of the attn_k_b and attn_v_b the split layout draws for this seed: a kv_b file and
        // its split twin are the same model (every other tensor is the same draw too).
        [
          {
            name: `${p}.attn_kv_b.weight`,
            shape: [m.kvLora, H * (m.qkNope + m.vHead)],
            init: { kind: 'mla_kv_b_fold', kB: `${p}.attn_k_b.weight`, vB: `${p}.attn_v_b.weight`, std: (linearInit(m.kvLora) as { std: number }).std, qkNope: m.qkNope, vHead: m.vHead },
            role: 'attn_v',
            layer: i,
          } as TensorSpec,
        ]),
    linear(`${p}.attn_output.weight`, H * m.vHead, c.dim, 'attn_output', i, residualGain(c)),
  ];
}

export const kimiLinear: ArchDefinition = {
  name: 'kimi-linear',
  ggufArch: 'kimi-linear',
  normalize(c: ModelConfig): ModelConfig {
    const k = c as KimiLinearConfig;
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'vocabSize', 'ctx', 'expertFf']);
    checkExperts(c, true);
    const a = k.kda;
    if (!a || ![a.headDim, a.convKernel].every((v) => Number.isInteger(v) && v > 0) || a.convKernel < 2) throw new Error('kimi-linear: kda needs a positive headDim and convKernel >= 2 (use a preset)');
    const m = k.mla;
    if (!m || ![m.kvLora, m.qkNope, m.qkRope, m.vHead].every((v) => Number.isInteger(v) && v > 0) || m.qkRope % 2 !== 0) throw new Error('kimi-linear: mla needs positive kvLora, qkNope, vHead and an even qkRope (use a preset)');
    if (!Array.isArray(k.attnLayers) || k.attnLayers.some((i) => !Number.isInteger(i) || i < 0 || i >= c.nLayers)) throw new Error('kimi-linear: attnLayers must be block indices');
    // llama.cpp's hybrid memory needs a layer of each kind (as jamba's).
    if (k.attnLayers.length === 0 || k.attnLayers.length === c.nLayers) throw new Error('kimi-linear: needs both KDA and MLA blocks (llama.cpp aborts without a layer of each kind)');
    if (!Number.isInteger(k.nDense) || k.nDense < 0 || k.nDense > c.nLayers) throw new Error(`kimi-linear: nDense ${k.nDense} out of range`);
    if (!Number.isInteger(k.nShared) || k.nShared < 1) throw new Error('kimi-linear: llama.cpp adds the shared expert unconditionally; nShared must be at least 1');
    return c;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const k = c as KimiLinearConfig;
    const { mla: m } = k;
    const a = 'kimi-linear';
    const split = m.layout === 'split';
    return [
      [`${a}.vocab_size`, kv.u32(c.vocabSize)],
      [`${a}.context_length`, kv.u32(c.ctx)],
      [`${a}.embedding_length`, kv.u32(c.dim)],
      [`${a}.block_count`, kv.u32(c.nLayers)],
      [`${a}.feed_forward_length`, kv.u32(c.ff)],
      [`${a}.attention.head_count`, kv.u32(c.nHeads)],
      // Per block (gguf-py add_array of Python ints: INT32): 0 for KDA, 1 for MLA with its cache
      // (the converter's num_key_value_heads = 1), every head for the older attn_kv_b files.
      [`${a}.attention.head_count_kv`, kv.arr(GgufType.INT32, Array.from({ length: c.nLayers }, (_, i) => (isAttn(k, i) ? (split ? 1 : c.nHeads) : 0)))],
      [`${a}.rope.freq_base`, kv.f32(c.ropeBase)],
      [`${a}.attention.layer_norm_rms_epsilon`, kv.f32(c.normEps)],
      [`${a}.expert_count`, kv.u32(c.nExperts)],
      [`${a}.expert_used_count`, kv.u32(c.nExpertsUsed)],
      // moe_router_activation_func "sigmoid".
      [`${a}.expert_gating_func`, kv.u32(2)],
      [`${a}.ssm.conv_kernel`, kv.u32(k.kda.convKernel)],
      [`${a}.kda.head_dim`, kv.u32(k.kda.headDim)],
      [`${a}.attention.kv_lora_rank`, kv.u32(m.kvLora)],
      [`${a}.rope.dimension_count`, kv.u32(m.qkRope)],
      // The MLA cache's row (latent + shared key), or without it the per-head key and value.
      [`${a}.attention.key_length`, kv.u32(split ? m.kvLora + m.qkRope : m.qkNope + m.qkRope)],
      [`${a}.attention.value_length`, kv.u32(split ? m.kvLora : m.vHead)],
      // (llama.cpp's loader requires both keys; 0 turns its MLA cache off.)
      [`${a}.attention.key_length_mla`, kv.u32(split ? m.qkNope + m.qkRope : 0)],
      [`${a}.attention.value_length_mla`, kv.u32(split ? m.vHead : 0)],
      [`${a}.expert_feed_forward_length`, kv.u32(c.expertFf)],
      [`${a}.expert_shared_count`, kv.u32(k.nShared)],
      [`${a}.leading_dense_block_count`, kv.u32(k.nDense)],
      [`${a}.expert_weights_scale`, kv.f32(k.wScale)],
    ];
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const k = c as KimiLinearConfig;
    const t = embeddings(c);
    for (let i = 0; i < c.nLayers; i++) {
      t.push(norm(`blk.${i}.attn_norm.weight`, c.dim, i), ...(isAttn(k, i) ? mlaTensors(k, i) : kdaTensors(k, i)));
      if (i < k.nDense) t.push(...denseFfn(c, i));
      else
        t.push(
          ...moeFfn(c, i, c.expertFf),
          { name: `blk.${i}.exp_probs_b.bias`, shape: [c.nExperts], init: { kind: 'normal', std: 0.05 }, role: 'norm', layer: i },
          ...ungatedSharedExpert(c, i, c.expertFf * k.nShared),
        );
    }
    return t;
  },
};
