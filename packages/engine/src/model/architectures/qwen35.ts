import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import { MAX_DIM, MAX_HEADS, type HParams } from '../hparams';
import { denseGatedFfn, qkvProjections, ropeParams, trunkStart, type ProgramBuilder } from '../program-builder';
import { mtpAttentionStart, mtpHead, outputHead, tensorLookup, trunkLayers } from './deepseek2';
import { gatedSharedExpert, softmaxExperts } from './llama-family';

const t = (i: number, name: string) => `blk.${i}.${name}`;

/** The linear-attention (gated delta net) shape of a Qwen3-Next / Qwen3.5 file. */
export interface LinearAttentionDims {
  /** Convolution taps (ssm.conv_kernel). */
  dConv: number;
  /** Key and value head size (ssm.state_size; llama.cpp requires ssm.inner_size / n_v_heads to equal it). */
  S: number;
  /** Key heads (ssm.group_count) and value heads (ssm.time_step_rank). */
  hk: number;
  hv: number;
}

export function readLinearAttention(hp: HParams): LinearAttentionDims {
  const md = hp.meta;
  const dConv = md.int('ssm.conv_kernel', undefined, 2, 1024);
  const S = md.int('ssm.state_size', undefined, 1, 4096);
  const hk = md.int('ssm.group_count', undefined, 1, MAX_HEADS);
  const hv = md.int('ssm.time_step_rank', undefined, 1, MAX_HEADS);
  const inner = md.int('ssm.inner_size', undefined, 1, MAX_DIM);
  const bad = (why: string) => new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: ${why}`);
  if (inner !== hv * S) throw bad(`ssm.inner_size ${inner} is not ssm.time_step_rank ${hv} x ssm.state_size ${S} (llama.cpp's delta net needs value heads as wide as key heads)`);
  if (hv % hk !== 0) throw bad(`${hv} value heads (ssm.time_step_rank) are not a multiple of ${hk} key heads (ssm.group_count)`);
  return { dConv, S, hk, hv };
}

/**
 * Which blocks are linear attention: `attention.recurrent_layers` (one flag per block) when the
 * file has it, else every block but each full_attention_interval-th (default 4), as llama.cpp's
 * loader; NextN blocks past the trunk are never recurrent.
 */
export function recurrentLayers(hp: HParams, nTrunk: number): boolean[] {
  if (hp.meta.has('attention.recurrent_layers')) return hp.meta.perLayer('attention.recurrent_layers', hp.nLayer, undefined, 0, 1).map((v, i) => i < nTrunk && v === 1);
  const interval = hp.meta.int('full_attention_interval', 4, 1, 1 << 20);
  return Array.from({ length: hp.nLayer }, (_, i) => i < nTrunk && (i + 1) % interval !== 0);
}

/**
 * Qwen3-Next's older projections: `ssm_in` gives per key head [q, k, the group's values, the
 * group's gates] (llama.cpp's legacy build_qkvz), copied out into q|k|v and z; `ssm_ba` gives per
 * key head [the group's beta logits, the group's alphas].
 */
function groupedProjections(p: ProgramBuilder, hp: HParams, tensors: Map<string, GgufTensorInfo>, il: number, dims: LinearAttentionDims, h: number, io: { qkv: number; z: number; alpha: number; beta: number }): void {
  const { need, maybe } = tensorLookup(hp, tensors);
  const { S, hk, hv } = dims;
  const r = hv / hk;
  const fused = maybe(t(il, 'attn_qkv.weight'));
  if (fused) {
    p.op('matmul', io.qkv, { a: h, weights: { weight: fused } });
    p.op('matmul', io.z, { a: h, weights: { weight: need(t(il, 'attn_gate.weight')) } });
  } else {
    const w = (2 + 2 * r) * S;
    const qkvz = p.buf(`lin_qkvz${hk * w}`, hk * w);
    p.op('matmul', qkvz, { a: h, weights: { weight: need(t(il, 'ssm_in.weight')) } });
    // Per group g: q | k | r v heads | r z heads; one strided copy per part (block g each).
    const perGroup = { blocks: hk, a_stride: w };
    p.op('copy', io.qkv, { a: qkvz, params: { ...perGroup, a_off: 0, out_off: 0, out_stride: S, n: S } });
    p.op('copy', io.qkv, { a: qkvz, params: { ...perGroup, a_off: S, out_off: hk * S, out_stride: S, n: S } });
    p.op('copy', io.qkv, { a: qkvz, params: { ...perGroup, a_off: 2 * S, out_off: 2 * hk * S, out_stride: r * S, n: r * S } });
    p.op('copy', io.z, { a: qkvz, params: { ...perGroup, a_off: (2 + r) * S, out_off: 0, out_stride: r * S, n: r * S } });
  }
  const ba = p.buf(`lin_ba${2 * hv}`, 2 * hv);
  p.op('matmul', ba, { a: h, weights: { weight: need(t(il, 'ssm_ba.weight')) } });
  p.op('copy', io.beta, { a: ba, params: { blocks: hk, a_stride: 2 * r, out_stride: r, a_off: 0, n: r } });
  p.op('copy', io.alpha, { a: ba, params: { blocks: hk, a_stride: 2 * r, out_stride: r, a_off: r, n: r } });
}

/**
 * A gated delta net block (llama.cpp's build_layer_attn_linear) on the normed input `h` into
 * `out`: q|k|v = attn_qkv h through a causal depthwise convolution and SiLU, the gated delta rule
 * over them with g = softplus(ssm_alpha h + ssm_dt) * ssm_a and beta = sigmoid(ssm_beta h), each
 * value head RMS-normed by ssm_norm and gated by SiLU(attn_gate h), then ssm_out. Qwen3-Next
 * (`grouped`) takes its projections from groupedProjections and gives each key head's group of
 * value heads that key head (Qwen3.5 tiles them: value head h reads key head h % n_k_heads).
 * `sigmoidGate` (qwen4exp): the normed heads are gated by sigmoid(attn_gate h) instead.
 */
export function linearAttention(p: ProgramBuilder, hp: HParams, tensors: Map<string, GgufTensorInfo>, il: number, dims: LinearAttentionDims, h: number, out: number, grouped: boolean, sigmoidGate = false): void {
  const { need } = tensorLookup(hp, tensors);
  const { dConv, S, hk, hv } = dims;
  const convDim = (2 * hk + hv) * S;
  const qkv = p.buf(`lin_qkv${convDim}`, convDim);
  const conv = p.buf(`lin_conv${convDim}`, convDim);
  const z = p.buf(`lin_z${hv * S}`, hv * S);
  const core = p.buf(`lin_core${hv * S}`, hv * S);
  const alpha = p.buf(`lin_alpha${hv}`, hv);
  const beta = p.buf(`lin_beta${hv}`, hv);
  if (grouped) groupedProjections(p, hp, tensors, il, dims, h, { qkv, z, alpha, beta });
  else {
    p.op('matmul', qkv, { a: h, weights: { weight: need(t(il, 'attn_qkv.weight')) } });
    p.op('matmul', z, { a: h, weights: { weight: need(t(il, 'attn_gate.weight')) } });
    p.op('matmul', beta, { a: h, weights: { weight: need(t(il, 'ssm_beta.weight')) } });
    p.op('matmul', alpha, { a: h, weights: { weight: need(t(il, 'ssm_alpha.weight')) } });
  }
  p.op('ssm_conv', conv, { a: qkv, weights: { weight: need(t(il, 'ssm_conv1d.weight')) }, params: { layer: p.rsLayer((dConv - 1) * convDim), d_conv: dConv, silu: 1 } });
  p.op('gated_delta_net', core, {
    a: conv,
    b: alpha,
    c: beta,
    weights: { dt_bias: need(t(il, 'ssm_dt.bias')), a: need(t(il, 'ssm_a')) },
    params: { layer: p.rsLayer(hv * S * S), n_k_heads: hk, n_v_heads: hv, head_dim: S, eps: hp.rmsEps, grouped: grouped ? 1 : 0 },
  });
  p.op('head_rms_norm', core, { a: core, weights: { weight: need(t(il, 'ssm_norm.weight')) }, params: { eps: hp.rmsEps, head_dim: S, n_head: hv } });
  // (qwen4exp: the normed output times sigmoid(z), not SiLU(z).)
  if (sigmoidGate) p.op('sigmoid_mul', core, { a: core, b: z, params: { per_element: 1 } });
  else p.op('swiglu', core, { a: z, b: core });
  p.op('matmul', out, { a: core, weights: { weight: need(t(il, 'ssm_out.weight')) } });
}

/**
 * The gated attention's queries and keys (Qwen3-Next, Qwen3.5, qwen4exp): each head's query then
 * its gate out of `qg` (2 hd per head) into `q` and `gate`, per-head q/k RMS norms (attn_q_norm,
 * attn_k_norm), NeoX RoPE on q and k; the block's KV layer and its attention scale.
 */
export function gatedQueryKeys(
  p: ProgramBuilder, hp: HParams, il: number, need: (name: string) => string,
  io: { qg: number; q: number; gate: number; k: number }, H: number, Hkv: number, hd: number,
): { layer: number; scale: number } {
  const { qg, q, gate, k } = io;
  // Each head's query then its gate: one strided copy per half.
  p.op('copy', q, { a: qg, params: { blocks: H, a_stride: 2 * hd, out_stride: hd, a_off: 0, n: hd } });
  p.op('copy', gate, { a: qg, params: { blocks: H, a_stride: 2 * hd, out_stride: hd, a_off: hd, n: hd } });
  p.op('head_rms_norm', q, { a: q, weights: { weight: need(t(il, 'attn_q_norm.weight')) }, params: { eps: hp.rmsEps, head_dim: hd, n_head: H } });
  p.op('head_rms_norm', k, { a: k, weights: { weight: need(t(il, 'attn_k_norm.weight')) }, params: { eps: hp.rmsEps, head_dim: hd, n_head: Hkv } });
  const rope = { ...ropeParams(hp, true), head_dim: hd };
  p.op('rope', q, { a: q, params: { ...rope, n_head: H } });
  p.op('rope', k, { a: k, params: { ...rope, n_head: Hkv } });
  return { layer: p.kvLayer(Hkv * hd, Hkv * hd), scale: hp.attentionScale || 1 / Math.sqrt(hd) };
}

/**
 * A full-attention block of Qwen3-Next / Qwen3.5 (build_layer_attn) on the residual stream `io.x`
 * (attn_norm into `io.h`) into `out`: the query projection gives each head's query and then its
 * gate; per-head q/k RMS norms, NeoX RoPE over rope.dimension_count of each head (Qwen3.5's
 * interleaved M-RoPE gives text tokens the same position in every section, which is this),
 * attention, times sigmoid(gate), attn_output.
 */
function gatedAttention(p: ProgramBuilder, hp: HParams, tensors: Map<string, GgufTensorInfo>, il: number, io: { x: number; h: number }, out: number): void {
  const { need, maybe } = tensorLookup(hp, tensors);
  const hd = hp.headDimK;
  if (hp.headDimV !== hd) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: key length ${hd} and value length ${hp.headDimV} differ`);
  const { H, Hkv, q: qg, k, v, attn } = qkvProjections(p, hp, il, io, { need, maybe }, hd, hd, { qPerHead: 2 * hd });
  const q = p.buf(`q${H * hd}`, H * hd);
  const gate = p.buf(`gate${H * hd}`, H * hd);
  const { layer, scale } = gatedQueryKeys(p, hp, il, need, { qg, q, gate, k }, H, Hkv, hd);
  p.op('attention', attn, { a: q, b: k, c: v, params: { layer, n_head: H, n_head_kv: Hkv, head_dim: hd, head_dim_v: hd, scale } });
  p.op('sigmoid_mul', attn, { a: attn, b: gate, params: { per_element: 1 } });
  p.op('matmul', out, { a: attn, weights: { weight: need(t(il, 'attn_output.weight')) } });
}

/**
 * Qwen3-Next (`qwen3next`, llama.cpp src/models/qwen3next.cpp) and Qwen3.5 / Qwen3.6 (`qwen35`
 * dense, `qwen35moe`; src/models/qwen35*.cpp): hybrid
 * decoders whose blocks are gated delta nets (linear attention with a fixed-size recurrent state
 * per sequence) except every fourth (or as attention.recurrent_layers says), which is gated full
 * attention with a KV cache. Each block: attn_norm, the mixer, residual, post_attention_norm, the
 * FFN (routed experts with softmax top-k renormalized plus a sigmoid-gated shared expert, or a
 * dense SwiGLU), residual. NextN (MTP) blocks counted in block_count are left out.
 */
export function buildQwen35(hp: HParams, tensors: Map<string, GgufTensorInfo>): ModelProgram {
  const { need } = tensorLookup(hp, tensors);
  const dims = readLinearAttention(hp);
  // (Its loader refuses a file without experts.)
  if (hp.arch === 'qwen3next' && hp.nExpert <= 0) throw new EngineError('KAIL_E_BAD_MODEL', 'qwen3next: the model has no experts (expert_count), which its loader requires');
  const nTrunk = trunkLayers(hp);
  const recurrent = recurrentLayers(hp, nTrunk);
  const d = hp.nEmbd;
  const { p, x, h, attnOut } = trunkStart(hp, need('token_embd.weight'));
  for (let il = 0; il < nTrunk; il++) {
    if (recurrent[il]) {
      p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'attn_norm.weight')) }, params: { eps: hp.rmsEps } });
      linearAttention(p, hp, tensors, il, dims, h, attnOut, hp.arch === 'qwen3next');
    } else gatedAttention(p, hp, tensors, il, { x, h }, attnOut);
    p.op('add', x, { a: x, b: attnOut });
    p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'post_attention_norm.weight')) }, params: { eps: hp.rmsEps } });
    const ffnOut = p.buf('ffn_out', d);
    if (tensors.has(t(il, 'ffn_gate_inp.weight'))) qwenMoeFfn(p, hp, tensors, il, h, ffnOut);
    else denseGatedFfn(p, tensors, il, tensorLookup(hp, tensors), h, ffnOut);
    p.op('add', x, { a: x, b: ffnOut });
    p.op('cvec', x, { a: x, params: { layer: il } });
  }
  return outputHead(p, hp, tensors, x);
}

/**
 * Qwen3.5's and Qwen3-Next's multi-token-prediction block as a model of its own (llama.cpp's
 * qwen35moe and qwen3next graph_mtp, the same computation):
 * eh_proj of [enorm(embed(x_t)); hnorm(the target's hidden state before)], a gated full-attention
 * block over its own KV cache, post_attention_norm and the trunk's FFN, then shared_head_norm
 * (or output_norm) and the head.
 */
export function buildQwen35Mtp(hp: HParams, tensors: Map<string, GgufTensorInfo>): ModelProgram {
  const { need } = tensorLookup(hp, tensors);
  const { il, p, x, h, attnOut } = mtpAttentionStart(hp, tensors);
  gatedAttention(p, hp, tensors, il, { x, h }, attnOut);
  p.op('add', x, { a: x, b: attnOut });
  p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'post_attention_norm.weight')) }, params: { eps: hp.rmsEps } });
  const ffnOut = p.buf('ffn_out', hp.nEmbd);
  if (tensors.has(t(il, 'ffn_gate_inp.weight'))) qwenMoeFfn(p, hp, tensors, il, h, ffnOut);
  else denseGatedFfn(p, tensors, il, tensorLookup(hp, tensors), h, ffnOut);
  p.op('add', x, { a: x, b: ffnOut });
  return mtpHead(p, hp, tensors, il, x);
}

/** Routed experts (softmax, top-k renormalized; the loader reads no weight scale) plus the sigmoid-gated shared expert when the file has one. */
function qwenMoeFfn(p: ProgramBuilder, hp: HParams, tensors: Map<string, GgufTensorInfo>, il: number, h: number, out: number): void {
  const { need, maybe } = tensorLookup(hp, tensors);
  softmaxExperts(p, hp, il, need, h, out, true, 0);
  if (maybe(t(il, 'ffn_up_shexp.weight'))) gatedSharedExpert(p, tensors, il, need, h, out);
}
