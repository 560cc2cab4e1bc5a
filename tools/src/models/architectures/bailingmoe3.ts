// inclusionAI Ling 3 (`bailingmoe3`: BailingMoeV3, Ling-3.0 7.9B-A1.3B and 124B-A5.1B; llama.cpp
// src/models/bailingmoe3.cpp, converted by conversion/bailingmoe3.py BailingMoeV3Model): KDA (Kimi
// Delta Attention) blocks and MLA blocks, told apart by the per-block attention.head_count_kv (0:
// KDA, 1: MLA with its latent cache). The converter's is_full_attention: block b is MLA when
// (b + 1) % layer_group_size == 0, when it is past the last whole group, or when it is the NextN
// block; the others KDA. Then ffn_norm and a dense SwiGLU FFN (the first leading_dense_block_count
// blocks, HF first_k_dense_replace) or sigmoid-routed experts with a selection bias exp_probs_b
// (HF expert_bias), renormalized (expert_weights_norm) and scaled (expert_weights_scale), plus a
// shared expert of expert_shared_feed_forward_length (HF moe_shared_expert_intermediate_size).
//
// A KDA block (kda.head_dim S for keys and values, n_head heads, d_inner = n_head x S): attn_q,
// attn_k, attn_v, each through its own depthwise causal convolution ssm_conv1d_q/k/v (ggml
// [taps, 1, d_inner, 1], F32: the converter forces it), the gate projection ssm_f_a (HF f_proj,
// full width [n_embd, d_inner]: Ling 3 has no low-rank f_a/f_b pair) + the per-channel ssm_dt.bias,
// ssm_a = exp(A_log) per head ([1, n_head]; the converter folds the exp, positive here where
// Kimi-Linear stores -exp), the "safe gate" g = kda.gate_lower_bound x sigmoid((f + dt) ssm_a)
// (kda.safe_gate true, asserted), beta ssm_beta, the output gate ssm_g_a (HF g_proj, full width:
// one projection, no g_b), the per-head output norm ssm_norm and attn_output. An MLA block:
// attn_q (or with attention.q_lora_rank attn_q_a, attn_q_a_norm, attn_q_b), attn_kv_a_mqa (latent
// + the shared RoPE key of rope.dimension_count, adjacent-pair RoPE), attn_kv_a_norm, attn_k_b +
// attn_v_b (the converter splits HF kv_b_proj), attn_gate (HF g_proj on full blocks, [n_embd,
// n_head]: head-wise sigmoid gate) and attn_output. attention.key_length is the latent cache's row
// (kv_lora + rope), value_length the KDA head_dim (the base converter's head_dim, not overwritten),
// key_length_mla / value_length_mla the per-head sizes.
//
// Per-block SwiGLU limits (HF expert_swiglu_limit_list / share_expert_swiglu_limit_list, None as 0,
// padded with 0 to block_count): FLOAT32 arrays swiglu_clamp_exp and swiglu_clamp_shexp; where
// positive, llama.cpp clamps up to [-L, L] and silu(gate) to at most L (the routed experts; the
// shared expert, and also a dense block's FFN, which build_ffn clamps with swiglu_clamp_shexp too:
// the writer keeps that 0 on dense blocks, where HF's MLP has no shared-expert limit).
//
// The NextN (MTP) block: nextn_predict_layers 1, block_count = trunk + 1, the block an MLA block
// with routed experts and the shared expert (never dense), plus nextn.eh_proj, nextn.enorm,
// nextn.hnorm and layer_output_norm (its head norm, LLM_TENSOR_LAYER_OUT_NORM). llama.cpp's main
// graph leaves it out.
import { embeddings, f32Tensor, linear, linearInit, moeFfn, norm, requirePositive, residualGain, denseFfn } from '../arch';
import type { ArchDefinition, ModelConfig, TensorSpec } from '../arch';
import { kdaQkvTensors } from './kimi-linear';
import { GgufType } from '../../gguf/constants';
import { kv, type GgufValue } from '../../gguf/writer';
import { baseMetadata, checkExperts } from './common';
import { ungatedSharedExpert } from './deepseek2';

/**
 * Trunk blocks nLayers (the NextN block comes on top with `nextn`). kda: KDA head_dim, conv taps
 * and the gate's lower bound (negative). mla: the latent, per-head key (nope + rope) and value
 * sizes, q LoRA rank (0: attn_q). groupSize: HF layer_group_size. nDense: leading dense blocks
 * (SwiGLU of `ff`). sharedFf: the shared expert's width (0: the key is not written and llama.cpp
 * takes expertFf x max(1, nShared)). swigluLimit / swigluLimitShared: per trunk block, 0 = none
 * (absent: keys not written); padded with 0 to block_count as the converter pads.
 */
export type BailingMoe3Config = ModelConfig & {
  kda: { headDim: number; convKernel: number; lowerBound: number };
  mla: { kvLora: number; qkNope: number; qkRope: number; vHead: number; qLora: number };
  groupSize: number;
  nDense: number;
  nShared: number;
  wScale: number;
  normW: boolean;
  swigluLimit?: number[];
  swigluLimitShared?: number[];
  /** nextn_predict_layers: 0 or 1 (llama.cpp's graph_mtp asserts one). */
  nextn: number;
};

const ARCH = 'bailingmoe3';
const blockCount = (c: BailingMoe3Config) => c.nLayers + c.nextn;

/** BailingMoeV3Model.is_full_attention over the trunk's nLayers (blocks past it: the NextN block). */
export function isMla(c: BailingMoe3Config, b: number): boolean {
  const g = c.groupSize;
  return b >= c.nLayers || (b + 1) % g === 0 || b >= Math.floor(c.nLayers / g) * g;
}

/**
 * The size of the token embedding relative to an untied model's (embeddings(): a tied one is drawn
 * at the logit scale, std 2 / sqrt(dim), an eighth of 1 at dim 256). Every projection that writes
 * into the residual stream is scaled by it, so the stream keeps an untied model's proportions
 * (blocks adding about a sixth of the token's size). At residualGain tiny-bailingmoe3-tied's stream
 * grew from the embedding's rms 0.125 to 0.78, so an expert choice flipped by rounding moved a
 * position's logits by up to 0.3 NMSE, and llama.cpp's own F16-KV run of its Q8_0 file strayed
 * 1.0e-3 from its F32 one (measured; 2.8e-5 now).
 */
const embScale = (c: ModelConfig) => (c.tiedEmbeddings ? 2 / Math.sqrt(c.dim) : 1);
const writeGain = (c: ModelConfig) => residualGain(c) * embScale(c);
/** Specs with their ffn_down (the residual write) scaled by embScale (denseFfn and the shared expert draw it at residualGain). */
const scaledDown = (c: ModelConfig, specs: TensorSpec[]): TensorSpec[] =>
  specs.map((x) => (x.role === 'ffn_down' && x.init.kind === 'normal' && embScale(c) !== 1 ? { ...x, init: { ...x.init, std: x.init.std * embScale(c) } } : x));

const fitLimits = (a: number[] | undefined, n: number) => (a === undefined ? undefined : Array.from({ length: n }, (_, i) => a[i] ?? 0));

function kdaTensors(c: BailingMoe3Config, i: number): TensorSpec[] {
  const p = `blk.${i}`;
  const { headDim: S, convKernel } = c.kda;
  const H = c.nHeads;
  const d = H * S;
  return [
    ...kdaQkvTensors(c, i, d, convKernel),
    // Gate logits of std ~1 over the normed input; no llama-quant category (the default rule, as attn_q).
    linear(`${p}.ssm_f_a.weight`, c.dim, d, 'attn_q', i),
    linear(`${p}.ssm_beta.weight`, c.dim, H, 'attn_q', i),
    // exp(A_log) > 0 and dt_bias around -2: sigmoid((f + dt) a) mostly 0.03..0.5, so with a lower
    // bound of -5 per-step decays of about 0.08 to 0.9. (F32 in every file: not named *.weight.)
    f32Tensor(`${p}.ssm_a`, [1, H], { kind: 'normal', mean: 1, std: 0.2 }, i),
    f32Tensor(`${p}.ssm_dt.bias`, [d], { kind: 'normal', mean: -2, std: 0.5 }, i),
    linear(`${p}.ssm_g_a.weight`, c.dim, d, 'attn_q', i),
    norm(`${p}.ssm_norm.weight`, S, i),
    linear(`${p}.attn_output.weight`, d, c.dim, 'attn_output', i, writeGain(c)),
  ];
}

function mlaTensors(c: BailingMoe3Config, i: number): TensorSpec[] {
  const p = `blk.${i}`;
  const m = c.mla;
  const H = c.nHeads;
  const qHead = m.qkNope + m.qkRope;
  return [
    ...(m.qLora > 0
      ? [linear(`${p}.attn_q_a.weight`, c.dim, m.qLora, 'attn_q', i), norm(`${p}.attn_q_a_norm.weight`, m.qLora, i), linear(`${p}.attn_q_b.weight`, m.qLora, H * qHead, 'attn_q', i)]
      : [linear(`${p}.attn_q.weight`, c.dim, H * qHead, 'attn_q', i)]),
    linear(`${p}.attn_kv_a_mqa.weight`, c.dim, m.kvLora + m.qkRope, 'attn_k', i),
    norm(`${p}.attn_kv_a_norm.weight`, m.kvLora, i),
    { name: `${p}.attn_k_b.weight`, shape: [m.qkNope, m.kvLora, H], init: linearInit(m.kvLora), role: 'attn_k', layer: i },
    { name: `${p}.attn_v_b.weight`, shape: [m.kvLora, m.vHead, H], init: linearInit(m.kvLora), role: 'attn_v', layer: i },
    // The head-wise gate: logits of std ~1 over the normed input.
    linear(`${p}.attn_gate.weight`, c.dim, H, 'attn_q', i),
    linear(`${p}.attn_output.weight`, H * m.vHead, c.dim, 'attn_output', i, writeGain(c)),
  ];
}

/**
 * Router, selection bias, experts and the shared expert. The routed weights sum to wScale
 * renormalized, and to about nExpertsUsed x wScale not (the chosen sigmoids are near 1): the
 * experts are written at writeGain / that, so the routed mix comes out at one expert's size.
 */
function routedFfn(c: BailingMoe3Config, i: number): TensorSpec[] {
  const down = linearInit(c.expertFf, writeGain(c) / (c.wScale * (c.normW ? 1 : c.nExpertsUsed)));
  return [
    ...moeFfn(c, i, c.expertFf).map((x) => (x.role === 'ffn_down' ? { ...x, init: down } : x)),
    { name: `blk.${i}.exp_probs_b.bias`, shape: [c.nExperts], init: { kind: 'normal', std: 0.05 }, role: 'norm', layer: i },
    ...scaledDown(c, ungatedSharedExpert(c, i, c.sharedFf || c.expertFf * Math.max(1, c.nShared))),
  ];
}

export const bailingMoe3: ArchDefinition = {
  name: ARCH,
  ggufArch: ARCH,
  normalize(c: ModelConfig): ModelConfig {
    const b = c as BailingMoe3Config;
    requirePositive(c, ['nLayers', 'dim', 'ff', 'nHeads', 'vocabSize', 'ctx', 'expertFf']);
    checkExperts(c, true);
    const a = b.kda;
    if (!a || ![a.headDim, a.convKernel].every((v) => Number.isInteger(v) && v > 0) || a.convKernel < 2) throw new Error(`${ARCH}: kda needs a positive headDim and convKernel >= 2 (use a preset)`);
    if (!(Number.isFinite(a.lowerBound) && a.lowerBound < 0)) throw new Error(`${ARCH}: kda.lowerBound must be negative (llama.cpp asserts it), got ${String(a.lowerBound)}`);
    const m = b.mla;
    if (!m || ![m.kvLora, m.qkNope, m.qkRope, m.vHead].every((v) => Number.isInteger(v) && v > 0) || m.qkRope % 2 !== 0 || !Number.isInteger(m.qLora) || m.qLora < 0)
      throw new Error(`${ARCH}: mla needs positive kvLora, qkNope, vHead, an even qkRope and qLora >= 0 (use a preset)`);
    if (!Number.isInteger(b.groupSize) || b.groupSize < 1) throw new Error(`${ARCH}: groupSize must be a positive integer`);
    if (b.nextn !== 0 && b.nextn !== 1) throw new Error(`${ARCH}: nextn must be 0 or 1 (llama.cpp's graph_mtp asserts one NextN block)`);
    // llama.cpp's hybrid memory needs a block of each kind.
    const kinds = Array.from({ length: c.nLayers }, (_, i) => isMla(b, i));
    if (!kinds.includes(true) || !kinds.includes(false)) throw new Error(`${ARCH}: needs both KDA and MLA blocks among the ${c.nLayers} trunk blocks (groupSize ${b.groupSize})`);
    const nDense = Math.min(b.nDense, c.nLayers);
    if (!Number.isInteger(b.nDense) || b.nDense < 0) throw new Error(`${ARCH}: nDense ${b.nDense} must be a non-negative integer`);
    if (!Number.isInteger(b.nShared) || b.nShared < 1) throw new Error(`${ARCH}: llama.cpp adds the shared expert unconditionally; nShared must be at least 1`);
    if (!Number.isInteger(c.sharedFf) || c.sharedFf < 0) throw new Error(`${ARCH}: sharedFf must be a non-negative integer (0: expertFf x nShared)`);
    if (!(b.wScale > 0)) throw new Error(`${ARCH}: wScale must be positive, got ${String(b.wScale)}`);
    if (typeof b.normW !== 'boolean') throw new Error(`${ARCH}: normW must be a boolean (use a preset)`);
    const n = c.nLayers + b.nextn;
    const limits = { swigluLimit: fitLimits(b.swigluLimit, n), swigluLimitShared: fitLimits(b.swigluLimitShared, n) };
    for (const [f, arr] of Object.entries(limits)) {
      arr?.forEach((x, i) => {
        if (!(Number.isFinite(x) && x >= 0)) throw new Error(`${ARCH}: ${f}[${i}] must be a finite limit >= 0 (0: none), got ${String(x)}`);
        // llama.cpp's build_ffn clamps a dense block's MLP with swiglu_clamp_shexp; HF's has no limit.
        if (f === 'swigluLimitShared' && i < nDense && x !== 0) throw new Error(`${ARCH}: ${f}[${i}] must be 0 on dense block ${i}`);
      });
    }
    return { ...c, nDense, ...limits } as BailingMoe3Config;
  },
  metadata(c: ModelConfig): [string, GgufValue][] {
    const b = c as BailingMoe3Config;
    const { mla: m, kda: a } = b;
    const n = blockCount(b);
    const out: [string, GgufValue][] = [
      ...baseMetadata(ARCH, c).map(([k, v]): [string, GgufValue] => {
        if (k === `${ARCH}.block_count`) return [k, kv.u32(n)];
        // Per block (gguf-py add_array of Python ints: INT32): 1 on MLA blocks, 0 on KDA.
        if (k === `${ARCH}.attention.head_count_kv`) return [k, kv.arr(GgufType.INT32, Array.from({ length: n }, (_, i) => (isMla(b, i) ? 1 : 0)))];
        if (k === `${ARCH}.rope.dimension_count`) return [k, kv.u32(m.qkRope)];
        return [k, v];
      }),
      // sigmoid (HF score_function).
      [`${ARCH}.expert_gating_func`, kv.u32(2)],
      // The latent cache's row; value_length stays HF head_dim (the KDA head).
      [`${ARCH}.attention.key_length`, kv.u32(m.kvLora + m.qkRope)],
      [`${ARCH}.attention.value_length`, kv.u32(a.headDim)],
      [`${ARCH}.ssm.conv_kernel`, kv.u32(a.convKernel)],
      [`${ARCH}.kda.head_dim`, kv.u32(a.headDim)],
      [`${ARCH}.kda.safe_gate`, kv.bool(true)],
      [`${ARCH}.kda.gate_lower_bound`, kv.f32(a.lowerBound)],
      ...(m.qLora > 0 ? [[`${ARCH}.attention.q_lora_rank`, kv.u32(m.qLora)] as [string, GgufValue]] : []),
      [`${ARCH}.attention.kv_lora_rank`, kv.u32(m.kvLora)],
      [`${ARCH}.attention.key_length_mla`, kv.u32(m.qkNope + m.qkRope)],
      [`${ARCH}.attention.value_length_mla`, kv.u32(m.vHead)],
      [`${ARCH}.expert_feed_forward_length`, kv.u32(c.expertFf)],
      ...(c.sharedFf > 0 ? [[`${ARCH}.expert_shared_feed_forward_length`, kv.u32(c.sharedFf)] as [string, GgufValue]] : []),
      [`${ARCH}.expert_shared_count`, kv.u32(b.nShared)],
      [`${ARCH}.leading_dense_block_count`, kv.u32(b.nDense)],
      [`${ARCH}.expert_weights_scale`, kv.f32(b.wScale)],
      [`${ARCH}.expert_weights_norm`, kv.bool(b.normW)],
    ];
    if (b.swigluLimit) out.push([`${ARCH}.swiglu_clamp_exp`, kv.arr(GgufType.FLOAT32, b.swigluLimit)]);
    if (b.swigluLimitShared) out.push([`${ARCH}.swiglu_clamp_shexp`, kv.arr(GgufType.FLOAT32, b.swigluLimitShared)]);
    if (b.nextn) out.push([`${ARCH}.nextn_predict_layers`, kv.u32(b.nextn)]);
    return out;
  },
  tensors(c: ModelConfig): TensorSpec[] {
    const b = c as BailingMoe3Config;
    const t = embeddings(c);
    for (let i = 0; i < blockCount(b); i++) {
      t.push(norm(`blk.${i}.attn_norm.weight`, c.dim, i), ...(isMla(b, i) ? mlaTensors(b, i) : kdaTensors(b, i)));
      t.push(...(i < b.nDense ? scaledDown(c, denseFfn(c, i)) : routedFfn(b, i)));
      if (i >= c.nLayers) {
        // The NextN inputs ([enorm(embedding); hnorm(h)] through eh_proj) and its head norm.
        t.push(
          linear(`blk.${i}.nextn.eh_proj.weight`, 2 * c.dim, c.dim, 'nextn_eh_proj', i),
          norm(`blk.${i}.nextn.enorm.weight`, c.dim, i),
          norm(`blk.${i}.nextn.hnorm.weight`, c.dim, i),
          norm(`blk.${i}.layer_output_norm.weight`, c.dim, i),
        );
      }
    }
    return t;
  },
};
