import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import { MAX_DIM, MAX_LAYERS, type HParams } from '../hparams';
import { trunkStart, type ProgramBuilder } from '../program-builder';
import { moeBlockFfn, outputHead, readMoeRouting, tensorLookup, type MoeRouting } from './deepseek2';
import { kdaBlock, mlaBlock, readKimiLinear } from './kimi-linear';

const t = (i: number, name: string) => `blk.${i}.${name}`;

/** What Kimi-K3 adds to kimi-linear's hyperparameters, as llama.cpp's loader (src/models/kimi-k3.cpp) reads them. */
export interface KimiK3Params {
  /** attn_res.block_size: 0 none; else every block_size-th block banks its input for the residual attention. */
  resBlock: number;
  /** activation.situ_beta and activation.situ_linear_beta (<= 0: the up branch as it is). */
  situBeta: number;
  situLinearBeta: number;
  /** expert_latent_length: the routed experts' width (0: n_embd, no routed_down/up). */
  latent: number;
  /** kda.gate_lower_bound, when the file sets it. */
  lowerBound?: number;
  /** leading_dense_block_count. */
  nDense: number;
}

export function readKimiK3(hp: HParams): KimiK3Params {
  const md = hp.meta;
  const bad = (why: string) => new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: ${why}`);
  // (llama.cpp's loader requires these three keys.)
  const resBlock = md.int('attn_res.block_size', undefined, 0, MAX_LAYERS);
  const situBeta = md.num('activation.situ_beta');
  const situLinearBeta = md.num('activation.situ_linear_beta');
  // situ divides by beta: llama.cpp's graph would compute beta * tanh(gate / 0) = NaN or 0.
  if (!(situBeta > 0)) throw bad(`activation.situ_beta is ${situBeta}; the situ activation needs a positive beta`);
  const latent = md.int('expert_latent_length', 0, 0, MAX_DIM);
  let lowerBound: number | undefined;
  if (md.has('kda.gate_lower_bound')) {
    lowerBound = md.num('kda.gate_lower_bound');
    // (A bound of 0 or more would make every decay exp(g) at least 1: the state grows without end.)
    if (!(lowerBound < 0)) throw bad(`kda.gate_lower_bound is ${lowerBound}; a gate lower bound must be negative`);
  }
  const nDense = md.int('leading_dense_block_count', 0, 0, MAX_LAYERS);
  return { resBlock, situBeta, situLinearBeta, latent, lowerBound, nDense };
}

/**
 * A situ FFN (llama.cpp's kimi_k3_situ between plain products) on `h` into `out`: block il's
 * ffn_gate / ffn_up / ffn_down with `suffix` ('' dense, '_shexp' the shared experts).
 */
function situFfn(p: ProgramBuilder, hp: HParams, tensors: Map<string, GgufTensorInfo>, k3: KimiK3Params, il: number, suffix: string, h: number, out: number): void {
  const { need } = tensorLookup(hp, tensors);
  const ff = tensors.get(need(t(il, `ffn_up${suffix}.weight`)))!.dims[1];
  const g = p.buf(`ffn_gate${ff}`, ff);
  const u = p.buf(`ffn_up${ff}`, ff);
  p.op('matmul', g, { a: h, weights: { weight: need(t(il, `ffn_gate${suffix}.weight`)) } });
  p.op('matmul', u, { a: h, weights: { weight: need(t(il, `ffn_up${suffix}.weight`)) } });
  p.op('swiglu', g, { a: g, b: u, params: { situ_beta: k3.situBeta, situ_linear_beta: k3.situLinearBeta } });
  p.op('matmul', out, { a: g, weights: { weight: need(t(il, `ffn_down${suffix}.weight`)) } });
}

/**
 * Kimi-K3's routed block on the normed `h` into `out`, as llama.cpp's build_latent_moe: sigmoid +
 * bias routing on h itself; with expert_latent_length the experts (situ) run on ffn_routed_down h
 * (the `moe` op's b is the router's input), their weighted sum RMS-normed by ffn_routed_norm when
 * the block has one and brought back by ffn_routed_up; then plus the situ shared experts on h when
 * the block has them.
 */
function latentMoe(p: ProgramBuilder, hp: HParams, tensors: Map<string, GgufTensorInfo>, k3: KimiK3Params, routing: MoeRouting, il: number, h: number, out: number): void {
  const { need, maybe } = tensorLookup(hp, tensors);
  const opt = { probsBias: 'required', shared: 'none', moeParams: { act: 8, situ_beta: k3.situBeta, situ_linear_beta: k3.situLinearBeta } } as const;
  if (k3.latent > 0) {
    const L = k3.latent;
    const lat = p.buf(`moe_latent${L}`, L);
    const latOut = p.buf(`moe_latent_out${L}`, L);
    p.op('matmul', lat, { a: h, weights: { weight: need(t(il, 'ffn_routed_down.weight')) } });
    moeBlockFfn(p, hp, tensors, il, lat, latOut, routing, false, { ...opt, routerInput: h });
    const rn = maybe(t(il, 'ffn_routed_norm.weight'));
    if (rn) p.op('rms_norm', latOut, { a: latOut, weights: { weight: rn }, params: { eps: hp.rmsEps } });
    p.op('matmul', out, { a: latOut, weights: { weight: need(t(il, 'ffn_routed_up.weight')) } });
  } else moeBlockFfn(p, hp, tensors, il, h, out, routing, false, opt);
  if (maybe(t(il, 'ffn_gate_shexp.weight'))) {
    const sh = p.buf('sh_out', hp.nEmbd);
    situFfn(p, hp, tensors, k3, il, '_shexp', h, sh);
    p.op('add', out, { a: out, b: sh });
  }
}

/**
 * Moonshot's Kimi-K3 (`kimi-k3`, llama.cpp src/models/kimi-k3.cpp): kimi-linear's KDA and NoPE MLA
 * blocks with a full-rank KDA output gate (ssm_g), the gate lower bound (kda.gate_lower_bound: g =
 * bound x sigmoid(-(alpha + dt_bias) ssm_a)), q LoRA and a sigmoid output gate (attn_gate) on MLA;
 * the situ activation in every FFN; latent routed experts (expert_latent_length); and cross-layer
 * residual attention (attn_res.block_size > 0): every block_size-th block banks its input and
 * restarts the residual stream from its attention output, and the attention, the FFN and the head
 * each read a softmax-weighted mix of the banked inputs and the current stream (the `attn_res` op,
 * scored by attn_res_score / ffn_res_score / output_res_score).
 */
export function buildKimiK3(hp: HParams, tensors: Map<string, GgufTensorInfo>): ModelProgram {
  const { need } = tensorLookup(hp, tensors);
  const md = hp.meta;
  const dims = readKimiLinear(hp);
  const k3 = readKimiK3(hp);
  // llama.cpp's loader requires these.
  md.num('attention.layer_norm_rms_epsilon');
  md.perLayer('expert_feed_forward_length', hp.nLayer, undefined, 0, MAX_DIM);
  md.int('expert_shared_count', undefined, 0, 1 << 16);
  const routing: MoeRouting = readMoeRouting(hp, 0);
  const { p, x, h, attnOut } = trunkStart(hp, need('token_embd.weight'));
  const d = hp.nEmbd;
  const bs = k3.resBlock;
  const nCkpt = bs > 0 ? Math.ceil(hp.nLayer / bs) : 0;
  const stack = bs > 0 ? p.buf('attn_res_stack', nCkpt * d) : -1;
  const mix = bs > 0 ? p.buf('attn_res_mix', d) : -1;
  let banked = 0;
  // The stream as the next sublayer reads it: x itself, or its mix with the banked inputs.
  const mixed = (score: string): number => {
    if (bs === 0 || banked === 0) return x;
    p.op('attn_res', mix, { a: stack, b: x, weights: { score: need(score) }, params: { n: d, n_ckpt: banked, eps: hp.rmsEps } });
    return mix;
  };
  for (let il = 0; il < hp.nLayer; il++) {
    const src = mixed(t(il, 'attn_res_score.weight'));
    // A checkpoint block banks its raw input (not the mix) and restarts the stream from the attention output.
    const bank = bs > 0 && il % bs === 0;
    if (bank) p.op('copy', stack, { a: x, params: { n: d, out_off: banked++ * d } });
    p.op('rms_norm', h, { a: src, weights: { weight: need(t(il, 'attn_norm.weight')) }, params: { eps: hp.rmsEps } });
    if (hp.nHeadKv[il] === 0) kdaBlock(p, hp, tensors, dims, il, h, attnOut, { fullGate: true, lowerBound: k3.lowerBound });
    else mlaBlock(p, hp, tensors, dims, il, h, attnOut, { qLora: true, outGate: true });
    if (bank) p.op('copy', x, { a: attnOut });
    else p.op('add', x, { a: x, b: attnOut });
    p.op('rms_norm', h, { a: mixed(t(il, 'ffn_res_score.weight')), weights: { weight: need(t(il, 'ffn_norm.weight')) }, params: { eps: hp.rmsEps } });
    const ffnOut = p.buf('ffn_out', d);
    if (il < k3.nDense) situFfn(p, hp, tensors, k3, il, '', h, ffnOut);
    else latentMoe(p, hp, tensors, k3, routing, il, h, ffnOut);
    p.op('add', x, { a: x, b: ffnOut });
    p.op('cvec', x, { a: x, params: { layer: il } });
  }
  return outputHead(p, hp, tensors, mixed('output_res_score.weight'), 'output_norm.weight', { untied: true });
}
