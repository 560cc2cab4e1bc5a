import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import { MAX_LAYERS, type HParams } from '../hparams';
import { qkvProjections, ropeParams, trunkStart, withBias } from '../program-builder';
import { moeBlockFfn, outputHead, readMoeRouting, refuseUnsupported, tensorLookup, trunkLayers } from './deepseek2';

const t = (i: number, name: string) => `blk.${i}.${name}`;

/**
 * GLM-4.5 (`glm4moe`, llama.cpp src/models/glm4-moe.cpp): Q/K/V biases, per-head q/k RMS norms
 * when the file has them, partial NeoX RoPE (rope.dimension_count of each head), the FFN input norm
 * is `post_attention_norm`, leading dense blocks, routed experts with sigmoid gating (default) and
 * a selection bias, plus shared experts.
 */
export function buildGlm4Moe(hp: HParams, tensors: Map<string, GgufTensorInfo>): ModelProgram {
  const { need, maybe } = tensorLookup(hp, tensors);
  refuseUnsupported(hp);
  // GLM-4.5V/4.6V text models carry M-RoPE sections (used when the first two are set). For text
  // tokens llama.cpp gives the first three sections the token's position and the fourth position
  // 0, so without a fourth section M-RoPE is exactly this NeoX RoPE.
  const sections = Array.from((hp.meta.kv[`${hp.arch}.rope.dimension_sections`] ?? []) as ArrayLike<number>, Number);
  if (sections[0] > 0 && sections[1] > 0 && (sections[3] ?? 0) !== 0)
    throw new EngineError('KAIL_E_UNSUPPORTED', `${hp.arch}: M-RoPE with a fourth section (rope.dimension_sections) is not supported`);
  if (hp.headDimK !== hp.headDimV) throw new EngineError('KAIL_E_BAD_MODEL', `glm4moe: key_length ${hp.headDimK} and value_length ${hp.headDimV} must match`);
  const routing = readMoeRouting(hp, 2);
  const nDense = hp.meta.int('leading_dense_block_count', 0, 0, MAX_LAYERS);
  const hd = hp.headDimK;
  const { p, x, h, attnOut } = trunkStart(hp, need('token_embd.weight'));
  const d = hp.nEmbd;
  const rope = { ...ropeParams(hp, true), head_dim: hd };
  for (let il = 0; il < trunkLayers(hp); il++) {
    const { H, Hkv, q, k, v, attn } = qkvProjections(p, hp, il, { x, h }, { need, maybe }, hd, hd);
    const qn = maybe(t(il, 'attn_q_norm.weight'));
    const kn = maybe(t(il, 'attn_k_norm.weight'));
    if (qn) p.op('head_rms_norm', q, { a: q, weights: { weight: qn }, params: { eps: hp.rmsEps, head_dim: hd, n_head: H } });
    if (kn) p.op('head_rms_norm', k, { a: k, weights: { weight: kn }, params: { eps: hp.rmsEps, head_dim: hd, n_head: Hkv } });
    p.op('rope', q, { a: q, params: { ...rope, n_head: H } });
    p.op('rope', k, { a: k, params: { ...rope, n_head: Hkv } });
    const layer = p.kvLayer(Hkv * hd, Hkv * hd);
    p.op('attention', attn, { a: q, b: k, c: v, params: { layer, n_head: H, n_head_kv: Hkv, head_dim: hd, head_dim_v: hd, scale: 1 / Math.sqrt(hd) } });
    p.op('matmul', attnOut, { a: attn, weights: { weight: need(t(il, 'attn_output.weight')) } });
    p.op('add', x, { a: x, b: attnOut });

    p.op('rms_norm', h, { a: x, weights: { weight: need(t(il, 'post_attention_norm.weight')) }, params: { eps: hp.rmsEps } });
    const ffnOut = p.buf('ffn_out', d);
    moeBlockFfn(p, hp, tensors, il, h, ffnOut, routing, il < nDense);
    p.op('add', x, { a: x, b: ffnOut });
    // llama.cpp's build_cvec: a control vector's row for this layer, when one is loaded.
    p.op('cvec', x, { a: x, params: { layer: il } });
  }
  return outputHead(p, hp, tensors, x);
}
