import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import { MAX_LAYERS, type HParams } from '../hparams';
import { denseGatedFfn, qkvProjections, ropeParams, trunkStart, type ProgramBuilder } from '../program-builder';
import { moeBlockFfn, outputHead, readMoeRouting, tensorLookup } from './deepseek2';

const t = (i: number, name: string) => `blk.${i}.${name}`;

/**
 * LFM2's gated short convolution (llama.cpp's build_shortconv_block) on the normed input `h` into
 * `out`: in_proj gives b, c and x; the causal depthwise convolution (shortconv.l_cache taps, no
 * activation) runs over b * x with the last l_cache - 1 of them kept per sequence (a recurrent
 * layer); c times its output goes through out_proj.
 */
function shortConv(p: ProgramBuilder, hp: HParams, tensors: Map<string, GgufTensorInfo>, il: number, taps: number, h: number, out: number): void {
  const { need } = tensorLookup(hp, tensors);
  const d = hp.nEmbd;
  const bcx = p.buf(`sc_bcx${3 * d}`, 3 * d);
  const bx = p.buf('sc_bx', d);
  const conv = p.buf('sc_conv', d);
  p.op('matmul', bcx, { a: h, weights: { weight: need(t(il, 'shortconv.in_proj.weight')) } });
  p.op('mul', bx, { a: bcx, b: bcx, params: { a_off: 0, b_off: 2 * d, n: d } });
  p.op('ssm_conv', conv, { a: bx, weights: { weight: need(t(il, 'shortconv.conv.weight')) }, params: { layer: p.rsLayer((taps - 1) * d), d_conv: taps, silu: 0 } });
  p.op('mul', bx, { a: bcx, b: conv, params: { a_off: d, n: d } });
  p.op('matmul', out, { a: bx, weights: { weight: need(t(il, 'shortconv.out_proj.weight')) } });
}

/**
 * Liquid AI's LFM2 (`lfm2`, dense) and LFM2-MoE (`lfm2moe`, e.g. LFM2-8B-A1B; llama.cpp
 * src/models/lfm2.cpp, lfm2moe.cpp): blocks without KV heads (attention.head_count_kv 0) are gated
 * short convolutions with a recurrent state per sequence, the others GQA with per-head q/k RMS
 * norms and NeoX RoPE (lfm2: windowed when attention.sliding_window is set); then ffn_norm and a
 * SwiGLU FFN, or from leading_dense_block_count on (lfm2moe) routed experts with the file's gating,
 * the selection bias exp_probs_b and renormalized weights. The final norm is `token_embd_norm`.
 */
export function buildLfm2(hp: HParams, tensors: Map<string, GgufTensorInfo>): ModelProgram {
  const { need, maybe } = tensorLookup(hp, tensors);
  const md = hp.meta;
  const taps = md.int('shortconv.l_cache', undefined, 2, 1024);
  // LFM2-ColBert: bidirectional, a centred convolution window; kail runs the causal models.
  if (!md.bool('attention.causal', true)) throw new EngineError('KAIL_E_UNSUPPORTED', `${hp.arch}: non-causal LFM2 models (attention.causal false, LFM2-ColBert) are not supported`);
  const moe = hp.arch === 'lfm2moe';
  const nDense = moe ? md.int('leading_dense_block_count', 0, 0, MAX_LAYERS) : hp.nLayer;
  // lfm2's loader reads the window (then every attention block is windowed); lfm2moe's does not.
  const window = moe ? 0 : md.int('attention.sliding_window', 0, 0, 1 << 30);
  // Its loader requires expert_gating_func and reads no weight scale; the weights are renormalized.
  const routing = moe ? readMoeRouting(hp, 0, { normW: true, wScale: 0 }) : undefined;
  const hd = hp.headDimK;
  const rope = { ...ropeParams(hp, true), head_dim: hd };
  const { p, x, h, attnOut } = trunkStart(hp, need('token_embd.weight'));
  for (let il = 0; il < hp.nLayer; il++) {
    if (hp.nHeadKv[il] === 0) {
      p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'attn_norm.weight')) }, params: { eps: hp.rmsEps } });
      shortConv(p, hp, tensors, il, taps, h, attnOut);
    } else {
      if (hp.headDimV !== hd) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: key length ${hd} and value length ${hp.headDimV} differ`);
      const { H, Hkv, q, k, v, attn } = qkvProjections(p, hp, il, { x, h }, { need, maybe }, hd, hd);
      p.op('head_rms_norm', q, { a: q, weights: { weight: need(t(il, 'attn_q_norm.weight')) }, params: { eps: hp.rmsEps, head_dim: hd, n_head: H } });
      p.op('head_rms_norm', k, { a: k, weights: { weight: need(t(il, 'attn_k_norm.weight')) }, params: { eps: hp.rmsEps, head_dim: hd, n_head: Hkv } });
      p.op('rope', q, { a: q, params: { ...rope, n_head: H } });
      p.op('rope', k, { a: k, params: { ...rope, n_head: Hkv } });
      const layer = p.kvLayer(Hkv * hd, Hkv * hd);
      p.op('attention', attn, { a: q, b: k, c: v, params: { layer, n_head: H, n_head_kv: Hkv, head_dim: hd, head_dim_v: hd, scale: 1 / Math.sqrt(hd), window } });
      p.op('matmul', attnOut, { a: attn, weights: { weight: need(t(il, 'attn_output.weight')) } });
    }
    p.op('add', x, { a: x, b: attnOut });
    p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'ffn_norm.weight')) }, params: { eps: hp.rmsEps } });
    const ffnOut = p.buf('ffn_out', hp.nEmbd);
    if (il < nDense) denseGatedFfn(p, tensors, il, { need, maybe }, h, ffnOut);
    else moeBlockFfn(p, hp, tensors, il, h, ffnOut, routing!, false, { probsBias: 'required', shared: 'none' });
    p.op('add', x, { a: x, b: ffnOut });
    p.op('cvec', x, { a: x, params: { layer: il } });
  }
  return outputHead(p, hp, tensors, x, 'token_embd_norm.weight');
}
