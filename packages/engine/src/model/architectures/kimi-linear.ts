import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import { MAX_DIM, MAX_LAYERS, type HParams } from '../hparams';
import { trunkStart, type ProgramBuilder } from '../program-builder';
import { moeBlockFfn, outputHead, readMoeRouting, tensorLookup, type MoeRouting } from './deepseek2';

const t = (i: number, name: string) => `blk.${i}.${name}`;

/** The sizes of a kimi-linear file, as llama.cpp's loader (src/models/kimi-linear.cpp) reads them. */
export interface KimiLinearDims {
  /** Heads of both block kinds (attention.head_count of block 0, as llama.cpp's graph uses it). */
  H: number;
  /** KDA head size (kda.head_dim): keys and values alike. */
  S: number;
  /** KDA convolution taps (ssm.conv_kernel). */
  dConv: number;
  /** MLA: latent (attention.kv_lora_rank), per-head key and value sizes, the shared key's (unrotated) part. */
  kvLora: number;
  kHead: number;
  vHead: number;
  qkRope: number;
  /**
   * Whether the file runs with llama.cpp's MLA cache (is_mla: attention.key_length_mla and
   * value_length_mla non-zero); else key_length / value_length are the per-head sizes.
   */
  mla: boolean;
}

export function readKimiLinear(hp: HParams): KimiLinearDims {
  const md = hp.meta;
  const bad = (why: string) => new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: ${why}`);
  // (llama.cpp's loader requires every one of these keys.)
  const S = md.int('kda.head_dim', undefined, 1, 4096);
  const dConv = md.int('ssm.conv_kernel', undefined, 2, 1024);
  const kvLora = md.int('attention.kv_lora_rank', undefined, 1, MAX_DIM);
  const kMla = md.int('attention.key_length_mla', undefined, 0, MAX_DIM);
  const vMla = md.int('attention.value_length_mla', undefined, 0, MAX_DIM);
  if ((kMla === 0) !== (vMla === 0)) throw bad(`attention.key_length_mla ${kMla} and value_length_mla ${vMla} must both be set or both be 0`);
  const mla = kMla > 0;
  const kHead = mla ? kMla : hp.headDimK;
  const vHead = mla ? vMla : hp.headDimV;
  const qkRope = hp.ropeDims;
  if (qkRope < 1 || kHead - qkRope < 1)
    throw bad(`the MLA key of ${kHead} (attention.key_length${mla ? '_mla' : ''}) needs a shared part (rope.dimension_count ${qkRope}) and a per-head part, both non-empty`);
  const H = hp.nHead[0];
  if (hp.nHead.some((n) => n !== H)) throw bad('attention.head_count differs between blocks; llama.cpp runs every block with the first block\'s heads');
  return { H, S, dConv, kvLora, kHead, vHead, qkRope, mla };
}

/** What other KDA architectures change in kdaBlock (Kimi-K3). */
export interface KdaBlockOptions {
  /** One full-rank output gate ssm_g instead of ssm_g_b(ssm_g_a h). */
  fullGate?: boolean;
  /**
   * The gate lower bound (kda.gate_lower_bound): g = lower_bound * sigmoid(-(alpha + dt_bias) * ssm_a)
   * (ssm_a = -exp(A_log)) instead of softplus(alpha + dt_bias) * ssm_a.
   */
  lowerBound?: number;
}

/**
 * A KDA (Kimi Delta Attention) block on the normed input `h` into `out`, as llama.cpp's graph:
 * q, k and v (attn_q/k/v, or one fused attn_qkv) each through its own causal depthwise
 * convolution (ssm_conv1d_q/k/v, a recurrent state each) and SiLU; the gated delta rule with a
 * gate per key channel (`kda`): g = softplus(ssm_f_b(ssm_f_a h) + ssm_dt.bias) * ssm_a per head,
 * beta = sigmoid(ssm_beta h), q and k L2-normalized inside the op; each head's output RMS-normed by
 * ssm_norm and times sigmoid(ssm_g_b(ssm_g_a h)), then attn_output.
 */
export function kdaBlock(p: ProgramBuilder, hp: HParams, tensors: Map<string, GgufTensorInfo>, dims: KimiLinearDims, il: number, h: number, out: number, opt: KdaBlockOptions = {}): void {
  const { need, maybe } = tensorLookup(hp, tensors);
  const { H, S, dConv } = dims;
  const d = H * S;
  const raw = p.buf(`kda_in${d}`, d);
  const conv = p.buf(`kda_conv${d}`, d);
  const qkv = p.buf(`kda_qkv${3 * d}`, 3 * d);
  const fused = maybe(t(il, 'attn_qkv.weight'));
  if (fused) {
    const all = p.buf(`kda_qkv_raw${3 * d}`, 3 * d);
    p.op('matmul', all, { a: h, weights: { weight: fused } });
  }
  ['q', 'k', 'v'].forEach((x, i) => {
    if (fused) p.op('copy', raw, { a: p.buf(`kda_qkv_raw${3 * d}`, 3 * d), params: { a_off: i * d, n: d } });
    else p.op('matmul', raw, { a: h, weights: { weight: need(t(il, `attn_${x}.weight`)) } });
    p.op('ssm_conv', conv, { a: raw, weights: { weight: need(t(il, `ssm_conv1d_${x}.weight`)) }, params: { layer: p.rsLayer((dConv - 1) * d), d_conv: dConv, silu: 1 } });
    p.op('copy', qkv, { a: conv, params: { n: d, out_off: i * d } });
  });
  const fa = p.buf(`kda_f_a${S}`, S);
  const alpha = p.buf(`kda_alpha${d}`, d);
  const beta = p.buf(`kda_beta${H}`, H);
  const core = p.buf(`kda_core${d}`, d);
  p.op('matmul', fa, { a: h, weights: { weight: need(t(il, 'ssm_f_a.weight')) } });
  p.op('matmul', alpha, { a: fa, weights: { weight: need(t(il, 'ssm_f_b.weight')) } });
  p.op('matmul', beta, { a: h, weights: { weight: need(t(il, 'ssm_beta.weight')) } });
  p.op('gated_delta_net', core, {
    a: qkv,
    b: alpha,
    c: beta,
    weights: { dt_bias: need(t(il, 'ssm_dt.bias')), a: need(t(il, 'ssm_a')) },
    params: { layer: p.rsLayer(H * S * S), n_k_heads: H, n_v_heads: H, head_dim: S, eps: hp.rmsEps, kda: 1, ...(opt.lowerBound !== undefined ? { lower_bound: opt.lowerBound, neg_a: 1 } : {}) },
  });
  p.op('head_rms_norm', core, { a: core, weights: { weight: need(t(il, 'ssm_norm.weight')) }, params: { eps: hp.rmsEps, head_dim: S, n_head: H } });
  const ga = opt.fullGate ? -1 : p.buf(`kda_g_a${S}`, S);
  const gate = p.buf(`kda_gate${d}`, d);
  if (opt.fullGate) p.op('matmul', gate, { a: h, weights: { weight: need(t(il, 'ssm_g.weight')) } });
  else {
    p.op('matmul', ga, { a: h, weights: { weight: need(t(il, 'ssm_g_a.weight')) } });
    p.op('matmul', gate, { a: ga, weights: { weight: need(t(il, 'ssm_g_b.weight')) } });
  }
  p.op('sigmoid_mul', core, { a: core, b: gate, params: { per_element: 1 } });
  p.op('matmul', out, { a: core, weights: { weight: need(t(il, 'attn_output.weight')) } });
}

/** What other architectures change in mlaBlock (Kimi-K3). */
export interface KimiMlaBlockOptions {
  /** q LoRA when the block has attn_q_a_norm: attn_q_b(rms_norm(attn_q_a h)), else attn_q. */
  qLora?: boolean;
  /** The attention output times sigmoid(attn_gate h) before attn_output, when the block has attn_gate. */
  outGate?: boolean;
}

/**
 * An MLA block without RoPE on `h` into `out`: q = attn_q h (Kimi has no q LoRA; llama.cpp's graph
 * reads attn_q alone), the latent and shared key part from attn_kv_a_mqa (the latent RMS-normed by
 * attn_kv_a_norm), attention scaled by 1 / sqrt(key head). The split attn_k_b/attn_v_b layout runs
 * absorbed over the latent cache (llama.cpp's MLA cache). The attn_kv_b layout runs without that
 * cache, as llama.cpp does, but computes the model's attention: per head K = [attn_kv_b's key rows
 * x latent, shared part], in the order of the query's [per-head part, shared part] (HF's
 * q_nope.k_nope + q_pe.k_pe, what the absorbed path computes), and V = attn_kv_b's value rows x
 * latent, cached per head, through ordinary attention. (llama.cpp's graph for this path concats
 * K = [shared part, per-head part] against the same query, pairing unrelated halves, so its logits
 * differ on such files: NMSE 5.3e-2 on tools' tiny-kimi-linear-kvb, measured.)
 */
export function mlaBlock(p: ProgramBuilder, hp: HParams, tensors: Map<string, GgufTensorInfo>, dims: KimiLinearDims, il: number, h: number, out: number, opt: KimiMlaBlockOptions = {}): void {
  const { need, maybe } = tensorLookup(hp, tensors);
  const { H, kvLora: L, kHead, vHead, qkRope: R } = dims;
  const nope = kHead - R;
  const scale = Math.fround(1 / Math.sqrt(kHead));
  const q = p.buf(`mla_q${H * kHead}`, H * kHead);
  const kva = p.buf(`mla_kv_cmpr_pe${L + R}`, L + R);
  const lat = p.buf(`mla_kv_cmpr${L}`, L);
  const attn = p.buf(`mla_attn${H * vHead}`, H * vHead);
  const qaNorm = opt.qLora ? maybe(t(il, 'attn_q_a_norm.weight')) : undefined;
  if (qaNorm) {
    const qa = need(t(il, 'attn_q_a.weight'));
    const r = tensors.get(qa)!.dims[1];
    const ql = p.buf(`mla_q_a${r}`, r);
    p.op('matmul', ql, { a: h, weights: { weight: qa } });
    p.op('rms_norm', ql, { a: ql, weights: { weight: qaNorm }, params: { eps: hp.rmsEps } });
    p.op('matmul', q, { a: ql, weights: { weight: need(t(il, 'attn_q_b.weight')) } });
  } else p.op('matmul', q, { a: h, weights: { weight: need(t(il, 'attn_q.weight')) } });
  p.op('matmul', kva, { a: h, weights: { weight: need(t(il, 'attn_kv_a_mqa.weight')) } });
  p.op('copy', lat, { a: kva, params: { n: L } });
  p.op('rms_norm', lat, { a: lat, weights: { weight: need(t(il, 'attn_kv_a_norm.weight')) }, params: { eps: hp.rmsEps } });
  const kvb = maybe(t(il, 'attn_kv_b.weight'));
  if (kvb) {
    // (llama.cpp reaches this path only without its MLA cache; with it, its graph has no KV input for it.)
    if (dims.mla) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: block ${il} has attn_kv_b, which llama.cpp runs only without the MLA cache (attention.key_length_mla and value_length_mla 0); this file sets them`);
    const kv = p.buf(`mla_kv${H * (nope + vHead)}`, H * (nope + vHead));
    const k = p.buf(`mla_k${H * kHead}`, H * kHead);
    const v = p.buf(`mla_v${H * vHead}`, H * vHead);
    p.op('matmul', kv, { a: lat, weights: { weight: kvb } });
    // Per head: k = k_nope | the shared k_pe (a_stride 0), v; one strided copy each.
    p.op('copy', k, { a: kv, params: { n: nope, blocks: H, a_off: 0, a_stride: nope + vHead, out_off: 0, out_stride: kHead } });
    p.op('copy', k, { a: kva, params: { n: R, blocks: H, a_off: L, a_stride: 0, out_off: nope, out_stride: kHead } });
    p.op('copy', v, { a: kv, params: { n: vHead, blocks: H, a_off: nope, a_stride: nope + vHead, out_off: 0, out_stride: vHead } });
    const layer = p.kvLayer(H * kHead, H * vHead);
    p.op('attention', attn, { a: q, b: k, c: v, params: { layer, n_head: H, n_head_kv: H, head_dim: kHead, head_dim_v: vHead, scale } });
  } else {
    p.op('copy', kva, { a: lat, params: { n: L } });
    p.op('mla_attention', attn, {
      a: q,
      b: kva,
      weights: { k_b: need(t(il, 'attn_k_b.weight')), v_b: need(t(il, 'attn_v_b.weight')) },
      params: { layer: p.kvLayer(L + R, 0), n_head: H, kv_lora: L, qk_nope: nope, qk_rope: R, v_head: vHead, scale, naive: false },
    });
  }
  const og = opt.outGate ? maybe(t(il, 'attn_gate.weight')) : undefined;
  if (og) {
    const g = p.buf(`mla_gate${H * vHead}`, H * vHead);
    p.op('matmul', g, { a: h, weights: { weight: og } });
    p.op('sigmoid_mul', attn, { a: attn, b: g, params: { per_element: 1 } });
  }
  p.op('matmul', out, { a: attn, weights: { weight: need(t(il, 'attn_output.weight')) } });
}

/**
 * Moonshot's Kimi-Linear (`kimi-linear`, llama.cpp src/models/kimi-linear.cpp): blocks of KDA
 * (Kimi Delta Attention: a gated delta rule whose decay is per key channel, with recurrent
 * convolution and delta-rule states per sequence) where attention.head_count_kv is 0, MLA blocks
 * without RoPE elsewhere; each block then ffn_norm and a dense SwiGLU FFN (the leading
 * leading_dense_block_count blocks) or routed experts (expert_gating_func, a required selection
 * bias exp_probs_b, weights renormalized and scaled by expert_weights_scale) plus a shared expert.
 */
export function buildKimiLinear(hp: HParams, tensors: Map<string, GgufTensorInfo>): ModelProgram {
  const { need } = tensorLookup(hp, tensors);
  const md = hp.meta;
  const dims = readKimiLinear(hp);
  // llama.cpp's loader requires these; the graph renormalizes the selected experts' weights always.
  md.perLayer('expert_feed_forward_length', hp.nLayer, undefined, 0, MAX_DIM);
  md.int('expert_shared_count', undefined, 0, 1 << 16);
  const routing: MoeRouting = readMoeRouting(hp, 0, { normW: true });
  const nDense = md.int('leading_dense_block_count', 0, 0, MAX_LAYERS);
  const { p, x, h, attnOut } = trunkStart(hp, need('token_embd.weight'));
  for (let il = 0; il < hp.nLayer; il++) {
    p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'attn_norm.weight')) }, params: { eps: hp.rmsEps } });
    if (hp.nHeadKv[il] === 0) kdaBlock(p, hp, tensors, dims, il, h, attnOut);
    else mlaBlock(p, hp, tensors, dims, il, h, attnOut);
    p.op('add', x, { a: x, b: attnOut });
    p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'ffn_norm.weight')) }, params: { eps: hp.rmsEps } });
    const ffnOut = p.buf('ffn_out', hp.nEmbd);
    // (llama.cpp's graph adds the shared expert unconditionally: a file without one is refused.)
    moeBlockFfn(p, hp, tensors, il, h, ffnOut, routing, il < nDense, { probsBias: 'required', shared: 'required' });
    p.op('add', x, { a: x, b: ffnOut });
    p.op('cvec', x, { a: x, params: { layer: il } });
  }
  return outputHead(p, hp, tensors, x, 'output_norm.weight', { untied: true });
}
