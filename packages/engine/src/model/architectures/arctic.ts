import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import type { HParams } from '../hparams';
import { denseGatedFfn, qkvProjections, ropeParams, trunkStart } from '../program-builder';
import { outputHead, tensorLookup } from './deepseek2';
import { softmaxExperts } from './llama-family';

const t = (i: number, name: string) => `blk.${i}.${name}`;

/**
 * Snowflake Arctic (`arctic`, llama.cpp src/models/arctic.cpp; 480B: a 10B dense transformer with
 * 128 experts top-2 beside it in every block).
 *
 * Per block, from its input x: RMSNorm → GQA with RoPE (adjacent pairs) over the whole head →
 * residual: r = x + attention. The dense residual MLP: r + SwiGLU(ffn_norm(r)). The experts read the
 * block's input, not r: SwiGLU experts routed by softmax (top-k renormalized, unscaled: its loader
 * reads no gating, renormalization or scale keys) over ffn_norm_exps(x), their output added last.
 * Since the router's input is known before the attention runs, a streaming model reads the block's
 * experts while the attention and the dense MLP compute (`moe_prefetch` on it, exact, as
 * SmallThinker's). Output norm, head (tied to the embedding without output.weight).
 */
export function buildArctic(hp: HParams, tensors: Map<string, GgufTensorInfo>): ModelProgram {
  const { need, maybe } = tensorLookup(hp, tensors);
  const bad = (msg: string): never => {
    throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: ${msg}`);
  };
  const hd = hp.headDimK;
  if (hp.headDimV !== hd) bad(`key_length ${hd} and value_length ${hp.headDimV} must match`);
  if (hp.ropeDims !== hd) bad(`rope.dimension_count ${hp.ropeDims} must equal the head size ${hd}`);
  const rope = { ...ropeParams(hp, false), head_dim: hd };

  const { p, x, h, attnOut } = trunkStart(hp, need('token_embd.weight'));
  const moeIn = p.buf('moe_in', hp.nEmbd);
  const ffnOut = p.buf('ffn_out', hp.nEmbd);
  const moeOut = p.buf('moe_out', hp.nEmbd);
  for (let il = 0; il < hp.nLayer; il++) {
    p.op('rms_norm', moeIn, { a: x, weights: { weight: need(t(il, 'ffn_norm_exps.weight')) }, params: { eps: hp.rmsEps } });
    p.op('moe_prefetch', moeIn, { a: moeIn });
    const { H, Hkv, q, k, v, attn } = qkvProjections(p, hp, il, { x, h }, { need, maybe }, hd, hd);
    p.op('rope', q, { a: q, params: { ...rope, n_head: H } });
    p.op('rope', k, { a: k, params: { ...rope, n_head: Hkv } });
    const layer = p.kvLayer(Hkv * hd, Hkv * hd);
    p.op('attention', attn, { a: q, b: k, c: v, params: { layer, n_head: H, n_head_kv: Hkv, head_dim: hd, head_dim_v: hd, scale: 1 / Math.sqrt(hd) } });
    p.op('matmul', attnOut, { a: attn, weights: { weight: need(t(il, 'attn_output.weight')) } });
    p.op('add', x, { a: attnOut, b: x });

    p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'ffn_norm.weight')) }, params: { eps: hp.rmsEps } });
    denseGatedFfn(p, tensors, il, { need, maybe }, h, ffnOut);
    p.op('add', x, { a: ffnOut, b: x });
    softmaxExperts(p, hp, il, need, moeIn, moeOut, true, 0);
    p.op('add', x, { a: moeOut, b: x });
    p.op('cvec', x, { a: x, params: { layer: il } });
  }
  return outputHead(p, hp, tensors, x);
}
