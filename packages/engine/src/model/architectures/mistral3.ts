import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import type { HParams } from '../hparams';
import { denseGatedFfn, qkvProjections, ropeFactorTensor, ropeParams, trunkStart, withBias, yarnAttnFactor } from '../program-builder';
import { moeBlockFfn, outputHead, readMoeRouting, tensorLookup } from './deepseek2';

const t = (i: number, name: string) => `blk.${i}.${name}`;

/**
 * Ministral 3 (`mistral3`, llama.cpp src/models/mistral3.cpp): the Llama graph (RoPE on adjacent
 * pairs over whole heads, rope_freqs or LongRoPE tables as llama's loader reads them, optional
 * attn_output and FFN biases, a softmax-routed MoE form without shared experts) with what its
 * loader adds: YaRN's beta_fast/beta_slow and log multiplier from the file (mscale_all_dim as
 * written; llama.cpp's attention factor get_mscale(f, 1) / get_mscale(f, mscale_all_dim)), and Llama
 * 4's query temperature log(floor(pos / n) + 1) * attention.temperature_scale + 1 with n the
 * original context (rope.scaling.original_context_length).
 */
export function buildMistral3(hp: HParams, tensors: Map<string, GgufTensorInfo>, nCtxSeq: number): ModelProgram {
  const { need, maybe } = tensorLookup(hp, tensors);
  const hd = hp.headDimK;
  if (hp.headDimV !== hd || hp.ropeDims !== hd)
    throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: key_length ${hd}, value_length ${hp.headDimV} and rope.dimension_count ${hp.ropeDims} must match`);
  const md = hp.meta;
  const tempScale = md.num('attention.temperature_scale', 0);
  const tempFloor = hp.ropeYarn.nCtxOrig;
  if (tempScale !== 0 && !(tempFloor >= 1)) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: attention temperature scaling needs rope.scaling.original_context_length of at least 1`);
  const rope: Record<string, number | boolean> = { ...ropeParams(hp, false), head_dim: hd, beta_fast: md.num('rope.scaling.yarn_beta_fast', 32), beta_slow: md.num('rope.scaling.yarn_beta_slow', 1) };
  // Its loader reads the log multiplier as written (mscale_all_dim, no 0.1 factor to cancel).
  rope.attn_factor = yarnAttnFactor(hp, md.num('rope.scaling.yarn_log_multiplier', 0));
  const factors = ropeFactorTensor(hp, tensors, nCtxSeq, 'typed');
  const rw = factors ? { freq_factors: factors } : undefined;
  const temp: Record<string, number> = tempScale !== 0 ? { temp_scale: tempScale, temp_floor: tempFloor, temp_offset: 0 } : {};
  // Softmax, renormalized, no scale (its loader reads none).
  const routing = hp.nExpert > 0 ? readMoeRouting(hp, 1, { gating: 1, normW: true, wScale: 0 }) : undefined;
  const { p, x, h, attnOut } = trunkStart(hp, need('token_embd.weight'));
  for (let il = 0; il < hp.nLayer; il++) {
    const { H, Hkv, q, k, v, attn } = qkvProjections(p, hp, il, { x, h }, { need, maybe }, hd, hd);
    p.op('rope', q, { a: q, weights: rw, params: { ...rope, n_head: H } });
    p.op('rope', k, { a: k, weights: rw, params: { ...rope, n_head: Hkv } });
    const layer = p.kvLayer(Hkv * hd, Hkv * hd);
    p.op('attention', attn, { a: q, b: k, c: v, params: { layer, n_head: H, n_head_kv: Hkv, head_dim: hd, head_dim_v: hd, scale: 1 / Math.sqrt(hd), ...temp } });
    p.op('matmul', attnOut, { a: attn, weights: withBias(need(t(il, 'attn_output.weight')), maybe(t(il, 'attn_output.bias'))) });
    p.op('add', x, { a: x, b: attnOut });

    p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'ffn_norm.weight')) }, params: { eps: hp.rmsEps } });
    const ffnOut = p.buf('ffn_out', hp.nEmbd);
    if (tensors.has(t(il, 'ffn_gate_inp.weight'))) {
      if (!routing) throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: layer ${il} has a router but expert_count is missing`);
      moeBlockFfn(p, hp, tensors, il, h, ffnOut, routing, false, { probsBias: 'none', shared: 'none' });
    } else denseGatedFfn(p, tensors, il, { need, maybe }, h, ffnOut);
    p.op('add', x, { a: x, b: ffnOut });
    // llama.cpp's build_cvec: a control vector's row for this layer, when one is loaded.
    p.op('cvec', x, { a: x, params: { layer: il } });
  }
  return outputHead(p, hp, tensors, x);
}
