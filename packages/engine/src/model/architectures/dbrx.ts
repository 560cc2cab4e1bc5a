import type { GgufTensorInfo, ModelProgram } from '@kailstream/core-native';

import { EngineError } from '../../errors';
import type { HParams } from '../hparams';
import { qkvProjections, ropeParams, trunkStart } from '../program-builder';
import { layerNormEps } from './bert';
import { outputHead, tensorLookup } from './deepseek2';
import { softmaxExperts } from './llama-family';

const t = (i: number, name: string) => `blk.${i}.${name}`;

/**
 * Databricks DBRX (`dbrx`, llama.cpp src/models/dbrx.cpp; DBRX 132B, 16 experts top-4).
 *
 * Per block: LayerNorm without bias (`attention.layer_norm_epsilon`) → one fused `attn_qkv`
 * product, clamped to ±`attention.clamp_kqv` (llama.cpp's build_qkv), split into Q|K|V → NeoX
 * RoPE over the whole head → attention scaled by 1/sqrt(head size) → output projection →
 * residual. The residual's LayerNorm `attn_output_norm` feeds the routed SwiGLU experts (softmax,
 * top-k renormalized, unscaled: its loader reads no gating, renormalization or scale keys) →
 * residual. LayerNorm `output_norm`, then the head.
 */
export function buildDbrx(hp: HParams, tensors: Map<string, GgufTensorInfo>): ModelProgram {
  const { need, maybe } = tensorLookup(hp, tensors);
  const bad = (msg: string): never => {
    throw new EngineError('KAIL_E_BAD_MODEL', `${hp.arch}: ${msg}`);
  };
  if (hp.nExpert <= 0 || hp.nExpertUsed <= 0) bad('expert_count and expert_used_count are required (every block routes)');
  const hd = hp.headDimK;
  if (hp.headDimV !== hd) bad(`key_length ${hd} and value_length ${hp.headDimV} must match`);
  if (hp.ropeDims !== hd) bad(`rope.dimension_count ${hp.ropeDims} must equal the head size ${hd}`);
  const eps = layerNormEps(hp);
  // (Required by llama.cpp's loader; 0 or less clamps nothing.)
  const clamp = hp.meta.num('attention.clamp_kqv');
  const rope = { ...ropeParams(hp, true), head_dim: hd };

  const { p, x, h, attnOut } = trunkStart(hp, need('token_embd.weight'));
  const norm = (out: number, a: number, w: string) => p.op('layer_norm', out, { a, weights: { weight: need(w) }, params: { eps } });
  for (let il = 0; il < hp.nLayer; il++) {
    // (Asked first, so that a file without it is refused naming attn_qkv, not attn_q.)
    need(t(il, 'attn_qkv.weight'));
    // attn_norm into h, then attn_qkv's product clamped and split into Q|K|V.
    const { H, Hkv, q, k, v, attn } = qkvProjections(p, hp, il, { x, h }, { need, maybe }, hd, hd, { layerNormEps: eps, clampKqv: clamp });
    p.op('rope', q, { a: q, params: { ...rope, n_head: H } });
    p.op('rope', k, { a: k, params: { ...rope, n_head: Hkv } });
    const layer = p.kvLayer(Hkv * hd, Hkv * hd);
    p.op('attention', attn, { a: q, b: k, c: v, params: { layer, n_head: H, n_head_kv: Hkv, head_dim: hd, head_dim_v: hd, scale: 1 / Math.sqrt(hd) } });
    p.op('matmul', attnOut, { a: attn, weights: { weight: need(t(il, 'attn_output.weight')) } });
    p.op('add', x, { a: attnOut, b: x });

    norm(h, x, t(il, 'attn_output_norm.weight'));
    const ffnOut = p.buf('ffn_out', hp.nEmbd);
    softmaxExperts(p, hp, il, need, h, ffnOut, true, 0);
    p.op('add', x, { a: ffnOut, b: x });
    p.op('cvec', x, { a: x, params: { layer: il } });
  }
  return outputHead(p, hp, tensors, x, undefined, { untied: true, layerNorm: eps });
}
